//! Not part of the supported API: what the `eventgate` binary, its integration tests
//! and its benchmarks reach inside the crate. Hidden from the documentation; it
//! changes with the code behind it, without notice or semver.
//!
//! Each module here is named after the crate-private module it re-exports from, so a
//! test reads `eventgate::internal::store::open_writer` where the code says
//! `crate::store::open_writer`.

/// The `eventgate` command, for `src/main.rs`.
pub mod cli {
    pub use crate::cli::{Cli, LossyStderr, init_tracing, run, runtime};
}

/// The benchmarks' load generators, for the tests that drive them.
#[cfg(feature = "bench")]
pub mod bench {
    pub mod load {
        pub use crate::bench::load::{Item, lifecycle, publish_all};
    }
}

pub mod deadletter {
    pub use crate::deadletter::{Failure, LATEST, Reason, Store};
}

/// The built-in forwarder kinds, which an embedder gets through `Kinds::default()`.
pub mod forward {
    pub mod file {
        pub use crate::forward::file::{FileKind, Format, render_line};
    }
    pub mod kafka {
        pub use crate::forward::kafka::KafkaKind;
    }
    pub mod sqlite {
        pub use crate::forward::sqlite::SqliteForwarder;
    }
}

pub mod note {
    pub use crate::note::{NoteError, Signer, Verifier, load_cosigner, load_key, open};
}

/// The Merkle tree, its tree heads and witness cosignatures, for the tests that
/// build a log in memory.
pub mod tlog {
    pub use crate::tlog::cosignature::{Cosigner, WitnessKey};
    pub use crate::tlog::proof::{check_record, check_tree, prove_record, prove_tree};
    pub use crate::tlog::stored::{Frontier, HashReader, stored_hash_count, tree_hash};
    pub use crate::tlog::tree_head::TreeHead;
    pub use crate::tlog::{HASH_LEN, Hash, TlogError, leaf_hash};
}

/// The log's side of the witness protocol.
pub mod witness {
    pub use crate::witness::client::{WitnessError, add_checkpoint, verify_cosignature};
}

/// A pipeline run without a gateway around it, and the type `Gateway::pipeline()`
/// returns.
pub mod pipeline {
    pub use crate::pipeline::{ForwarderHandle, Parts, Pipeline};
}

pub mod query {
    pub use crate::query::{Query, Reader, RowRange, StoredEvent};
}

pub mod reconcile {
    pub use crate::reconcile::{NodeState, TaskStatus, list_node};
    pub mod list {
        pub use crate::reconcile::list::ListError;
    }
}

pub mod render {
    pub use crate::render::{ctr_line, ctr_raw_line, envelope_json, event_ctr_line, event_json};
}

pub mod store {
    pub use crate::store::{
        EventRow, Synchronous, WriterOptions, insert_rows, open_reader, open_writer,
    };
    pub mod chain {
        pub use crate::store::chain::{COLUMNS, row_hash, values};
    }
    pub mod migrate {
        pub use crate::store::migrate::{APPLICATION_ID, LATEST, MIGRATIONS};
    }
}
