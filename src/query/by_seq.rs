//! The audit store read in seq order, for subscribers that resume from a position
//! (`src/resume`). Served by the `events_seq` index (migration 0009).

use rusqlite::OptionalExtension;

use super::row::{self, COLUMNS};
use super::time::stored_form;
use super::{QueryError, Reader, StoredEvent};

/// The oldest event the store keeps: its seq and envelope timestamp as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Oldest {
    pub(crate) seq: u64,
    pub(crate) timestamp: Option<String>,
}

impl Reader {
    /// Up to `limit` rows with `from <= seq < end`, in seq order.
    pub(crate) fn seq_range(
        &self,
        from: u64,
        end: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueryError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM events WHERE seq >= ?1 AND seq < ?2 ORDER BY seq LIMIT ?3"
        );
        let (conn, path) = self.sqlite_only("reading by seq")?;
        let mut stmt = conn
            .prepare_cached(&sql)
            .map_err(self.sqlite("preparing a read by seq"))?;
        let mut rows = stmt
            .query(rusqlite::params![
                as_i64(from),
                as_i64(end),
                as_i64(limit as u64)
            ])
            .map_err(self.sqlite("reading by seq"))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(self.sqlite("reading a row"))? {
            out.push(row::read(row, path)?);
        }
        Ok(out)
    }

    /// The row with the lowest seq; `None` when the store is empty.
    pub(crate) fn oldest(&self) -> Result<Option<Oldest>, QueryError> {
        self.sqlite_only("reading by seq")?
            .0
            .query_row(
                "SELECT seq, timestamp FROM events ORDER BY seq LIMIT 1",
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?)),
            )
            .optional()
            .map_err(self.sqlite("reading the oldest row"))
            .map(|row| {
                row.map(|(seq, timestamp)| Oldest {
                    seq: u64::try_from(seq).unwrap_or(0),
                    timestamp,
                })
            })
    }

    /// The highest seq stored; `None` when the store is empty.
    pub(crate) fn newest_seq(&self) -> Result<Option<u64>, QueryError> {
        self.sqlite_only("reading by seq")?
            .0
            .query_row("SELECT max(seq) FROM events", [], |r| {
                r.get::<_, Option<i64>>(0)
            })
            .map_err(self.sqlite("reading the newest seq"))
            .map(|seq| seq.map(|s| u64::try_from(s).unwrap_or(0)))
    }

    /// The lowest seq of an event whose envelope timestamp is at or after `since`.
    pub(crate) fn first_seq_since(
        &self,
        since: std::time::SystemTime,
    ) -> Result<Option<u64>, QueryError> {
        self.sqlite_only("reading by seq")?
            .0
            .query_row(
                "SELECT min(seq) FROM events WHERE timestamp >= ?1",
                [stored_form(since)],
                |r| r.get::<_, Option<i64>>(0),
            )
            .map_err(self.sqlite("finding the first event since a time"))
            .map(|seq| seq.map(|s| u64::try_from(s).unwrap_or(0)))
    }
}

impl Reader {
    /// The SQLite connection and file, for reads only a SQLite store serves (the
    /// resumable Subscribe reads the gateway's own store by seq).
    fn sqlite_only(
        &self,
        what: &'static str,
    ) -> Result<(&rusqlite::Connection, &std::path::Path), QueryError> {
        match (self.conn(), self.path()) {
            (Some(conn), Some(path)) => Ok((conn, path)),
            _ => Err(QueryError::SqliteOnly {
                store: self.name(),
                what,
            }),
        }
    }
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
