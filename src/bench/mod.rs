//! Rerunnable benchmarks. Every figure is measured next to its peer in the same run
//! (eventgate next to a real containerd), and reported as a ratio.

pub mod backlog;
pub mod containerd_config;
pub mod correlate;
pub mod daemon;
pub mod exchange;
pub mod fleet;
pub mod forwarder;
pub mod gateway_round;
pub mod image;
pub mod load;
pub mod node;
pub mod query;
pub mod reconcile;
pub mod replay;
pub mod resume;
pub mod signing;
mod sink_count;
mod sinks;
pub mod soak;
pub mod spool;
pub mod upstream;
pub mod wire;

use std::time::Duration;

use thiserror::Error;

use crate::client::ConnectError;
use crate::query::QueryError;
use crate::store::StoreError;

#[derive(Debug, Error)]
pub enum BenchError {
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start {what}")]
    Spawn {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} exited during start-up ({status}); its log ends with:\n{log}")]
    Exited {
        what: &'static str,
        status: String,
        log: String,
    },
    #[error("{what} was not ready within {timeout:?}; its log ends with:\n{log}")]
    NotReady {
        what: &'static str,
        timeout: Duration,
        log: String,
    },
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error(transparent)]
    Image(#[from] image::ImageError),
    #[error("{what} failed")]
    Rpc {
        what: &'static str,
        #[source]
        source: tonic::Status,
    },
    #[error("{what}")]
    Timeout { what: String },
    #[error("{what}")]
    Failed { what: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error("SQLite: {what}")]
    Sqlite {
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
}

/// Formats microseconds for a table: "85 µs", "1.24 ms".
pub fn micros(us: u64) -> String {
    if us < 1000 {
        format!("{us} µs")
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}
