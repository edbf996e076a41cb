//! A gateway with a spool, an audit store and a Kafka forwarder, as the spool tests
//! (full spools, damaged segments) run it, and what its store kept.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::config::Config;

/// `[spool]` keys `spool`, the `audit` store and a `kafka` forwarder at `brokers`.
pub fn write_config(path: &Path, brokers: &str, spool: &str) {
    Config::new()
        // The Kafka forwarder cannot deliver; its events are safe in the spool, so there
        // is nothing to wait for at shutdown.
        .toml("[pipeline]\ndrain_timeout = \"1s\"\n")
        .toml(&format!("\n[spool]\n{spool}\n"))
        .sqlite("audit", "audit.db", "")
        .kafka("kafka", brokers, "events", 1, "")
        .write_to(path);
}

/// (topic, container_id or forwarder) of every stored row, in storage order.
pub fn stored(db: &Path) -> Vec<(String, String)> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return Vec::new();
    };
    let Ok(mut statement) = conn.prepare(
        "SELECT topic, coalesce(json_extract(event, '$.container_id'), json_extract(event, '$.forwarder'), '')
         FROM events ORDER BY row_id",
    ) else {
        return Vec::new();
    };
    statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .unwrap_or_default()
}
