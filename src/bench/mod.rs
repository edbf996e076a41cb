//! Rerunnable benchmarks. Every figure is measured next to its peer in the same run
//! (eventgate next to a real containerd), and reported as a ratio.

pub(crate) mod backlog;
pub(crate) mod central;
pub(crate) mod containerd_config;
pub(crate) mod correlate;
pub(crate) mod daemon;
pub(crate) mod exchange;
pub(crate) mod fleet;
pub(crate) mod forwarder;
pub(crate) mod gateway_round;
pub(crate) mod image;
pub(crate) mod load;
pub(crate) mod node;
pub(crate) mod postgres;
pub(crate) mod query;
pub(crate) mod reconcile;
pub(crate) mod replay;
pub(crate) mod resume;
pub(crate) mod signing;
mod sink_count;
mod sinks;
pub(crate) mod soak;
pub(crate) mod spool;
pub(crate) mod tree;
pub(crate) mod ui;
pub(crate) mod ui_readers;
pub(crate) mod upstream;
pub(crate) mod wire;

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
pub(crate) fn micros(us: u64) -> String {
    if us < 1000 {
        format!("{us} µs")
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}
