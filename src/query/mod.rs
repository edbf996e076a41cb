//! Reading the audit store back: `eventgate query` and `eventgate stats`.
//!
//! A filter in containerd's language is turned into SQL where SQL can answer exactly
//! (`sql`); the rest (regular expressions, topic globs, paths through a nested Any)
//! is answered by the same matcher Subscribe uses, on events rebuilt from their rows.
//! Reads use their own read-only connection ([`crate::store::open_reader`]): in WAL
//! mode they never block the gateway's writer.

mod by_seq;
pub(crate) mod eventpath;
pub(crate) mod pods;
mod row;
pub(crate) mod sql;
pub(crate) mod stats;
pub(crate) mod time;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension};
use thiserror::Error;

pub use row::StoredEvent;

use crate::filter::Filter;
use crate::store::{self, StoreError};

#[derive(Debug, Error)]
pub enum QueryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("audit store {path}: {what}")]
    Sqlite {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("audit store {path}: row {row_id} is damaged: {what}")]
    BadRow {
        path: PathBuf,
        row_id: i64,
        what: String,
    },
}

/// How long a read waits for a lock; in WAL mode only a checkpoint's brief exclusive
/// moments (or a migration) can hold one.
const READ_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// An open audit store, read-only.
pub struct Reader {
    conn: Connection,
    path: PathBuf,
}

impl Reader {
    /// Refuses a missing file (opening would fail with SQLite's bare "unable to open"),
    /// a file that is not SQLite, another application's database and other schema
    /// versions, with the store's own messages. Blocking.
    pub fn open(path: &Path) -> Result<Reader, QueryError> {
        let conn = store::open_reader(path, READ_BUSY_TIMEOUT)?;
        Ok(Reader {
            conn,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    pub(crate) fn sqlite(&self, what: &'static str) -> impl Fn(rusqlite::Error) -> QueryError {
        let path = self.path.clone();
        move |source| QueryError::Sqlite {
            path: path.clone(),
            what,
            source,
        }
    }

    /// The highest row_id stored so far (0 when empty): where following starts.
    pub fn last_row_id(&self) -> Result<i64, QueryError> {
        self.conn
            .query_row("SELECT coalesce(max(row_id), 0) FROM events", [], |r| {
                r.get(0)
            })
            .map_err(self.sqlite("reading the last row"))
    }

    /// Calls `emit` for each matching row in store order (row_id) with
    /// `after < row_id <= up_to`, until it returns false. Returns how many matched.
    pub fn each(
        &self,
        query: &Query,
        rows: RowRange,
        mut emit: impl FnMut(StoredEvent) -> bool,
    ) -> Result<u64, QueryError> {
        let plan = query.plan(rows);
        let mut stmt = self
            .conn
            .prepare_cached(&plan.sql)
            .map_err(self.sqlite("preparing the query"))?;
        let mut cursor = stmt
            .query(rusqlite::params_from_iter(plan.params.iter()))
            .map_err(self.sqlite("running the query"))?;
        let mut matched = 0;
        while let Some(row) = cursor.next().map_err(self.sqlite("reading a row"))? {
            let stored = row::read(row, &self.path)?;
            if plan.recheck && !query.filter.matches(&stored.event.record_fields()) {
                continue;
            }
            matched += 1;
            if !emit(stored) || query.limit.is_some_and(|limit| matched >= limit) {
                break;
            }
        }
        Ok(matched)
    }

    /// How many rows `each` would emit for `rows` (ignoring `limit`): one `count(*)`
    /// when SQL answers the filter exactly, otherwise the rows are read and matched.
    pub fn count(&self, query: &Query, rows: RowRange) -> Result<u64, QueryError> {
        let predicate = query.predicate(rows);
        if predicate.recheck {
            let query = Query {
                limit: None,
                ..query.clone()
            };
            return self.each(&query, rows, |_| true);
        }
        let sql = format!("SELECT count(*) FROM events WHERE {}", predicate.sql);
        let count: i64 = self
            .conn
            .query_row(
                &sql,
                rusqlite::params_from_iter(predicate.params.iter()),
                |r| r.get(0),
            )
            .map_err(self.sqlite("counting the rows"))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// The row_id of the `n`th newest row (1 for the newest) `each` would emit for
    /// `rows` (ignoring `limit`): `None` when fewer match, or when `go_on` (told how
    /// many rows were read so far) stopped the walk. When SQL answers the filter
    /// exactly this is one indexed query; otherwise rows are read newest first and
    /// matched until the `n`th.
    pub(crate) fn nth_newest(
        &self,
        query: &Query,
        rows: RowRange,
        n: u64,
        mut go_on: impl FnMut(u64) -> bool,
    ) -> Result<Option<i64>, QueryError> {
        let Some(offset) = n.checked_sub(1).and_then(|o| i64::try_from(o).ok()) else {
            return Ok(None);
        };
        let predicate = query.predicate(rows);
        // As in `plan`: with a time range, `+row_id` keeps SQLite on a time index and
        // only the ids are sorted.
        let timed = query.since.is_some() || query.until.is_some();
        let order = if timed { "+row_id" } else { "row_id" };
        if !predicate.recheck {
            let sql = format!(
                "SELECT row_id FROM events WHERE {} ORDER BY {order} DESC LIMIT 1 OFFSET ?",
                predicate.sql
            );
            let mut params = predicate.params;
            params.push(Value::Integer(offset));
            return self
                .conn
                .query_row(&sql, rusqlite::params_from_iter(params.iter()), |r| {
                    r.get(0)
                })
                .optional()
                .map_err(self.sqlite("finding the newest rows"));
        }
        let sql = match timed {
            true => format!(
                "SELECT {} FROM events WHERE row_id IN (SELECT row_id FROM events WHERE {}) \
                 ORDER BY row_id DESC",
                row::COLUMNS,
                predicate.sql
            ),
            false => format!(
                "SELECT {} FROM events WHERE {} ORDER BY row_id DESC",
                row::COLUMNS,
                predicate.sql
            ),
        };
        let mut stmt = self
            .conn
            .prepare_cached(&sql)
            .map_err(self.sqlite("preparing the query"))?;
        let mut cursor = stmt
            .query(rusqlite::params_from_iter(predicate.params.iter()))
            .map_err(self.sqlite("running the query"))?;
        let (mut read, mut matched) = (0, 0);
        while let Some(row) = cursor.next().map_err(self.sqlite("reading a row"))? {
            let stored = row::read(row, &self.path)?;
            read += 1;
            if query.filter.matches(&stored.event.record_fields()) {
                matched += 1;
                if matched == n {
                    return Ok(Some(stored.row_id));
                }
            }
            if !go_on(read) {
                break;
            }
        }
        Ok(None)
    }

    /// `tail -f`: prints (through `emit`) rows stored after `after` as they arrive,
    /// polling every `interval`, until `emit` returns false or `stop` says so.
    pub fn follow(
        &self,
        query: &Query,
        mut after: i64,
        interval: Duration,
        stop: &dyn Fn() -> bool,
        mut emit: impl FnMut(StoredEvent) -> bool,
    ) -> Result<(), QueryError> {
        let query = Query {
            limit: None,
            ..query.clone()
        };
        while !stop() {
            let up_to = self.last_row_id()?;
            if up_to > after {
                let mut open = true;
                self.each(&query, RowRange { after, up_to }, |event| {
                    open = emit(event);
                    open
                })?;
                if !open {
                    return Ok(());
                }
                after = up_to;
            }
            std::thread::sleep(interval);
        }
        Ok(())
    }
}

/// Rows by row_id: `after < row_id <= up_to`.
#[derive(Clone, Copy, Debug)]
pub struct RowRange {
    pub after: i64,
    pub up_to: i64,
}

impl RowRange {
    pub const ALL: RowRange = RowRange {
        after: 0,
        up_to: i64::MAX,
    };
}

/// What to read: a filter and bounds on the envelope timestamp.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub filter: Filter,
    /// Events with `timestamp >= since`.
    pub since: Option<SystemTime>,
    /// Events with `timestamp < until`.
    pub until: Option<SystemTime>,
    /// At most this many events.
    pub limit: Option<u64>,
}

pub(crate) struct Plan {
    pub sql: String,
    pub params: Vec<Value>,
    pub recheck: bool,
}

impl Query {
    /// The WHERE clause shared by queries and stats.
    pub(crate) fn predicate(&self, rows: RowRange) -> sql::Predicate {
        let mut out = sql::translate(&self.filter);
        let mut terms = vec![out.sql];
        let mut params = Vec::new();
        if rows.after > 0 {
            terms.push("row_id > ?".into());
            params.push(Value::Integer(rows.after));
        }
        if rows.up_to < i64::MAX {
            terms.push("row_id <= ?".into());
            params.push(Value::Integer(rows.up_to));
        }
        for (bound, op) in [(self.since, ">="), (self.until, "<")] {
            if let Some(time) = bound {
                terms.push(format!("timestamp {op} ?"));
                params.push(Value::Text(time::stored_form(time)));
            }
        }
        // The filter's parameters come first, as its text does.
        out.params.extend(params);
        out.sql = terms.join(" AND ");
        out
    }

    pub(crate) fn plan(&self, rows: RowRange) -> Plan {
        let predicate = self.predicate(rows);
        let mut params = predicate.params;
        // A time range is served by a (column, timestamp) or (timestamp) index, which
        // holds the rows in timestamp order, not row_id order. Sorting the whole rows
        // makes SQLite copy every one into its sorter; selecting the row_ids first
        // sorts only the ids (from the index alone when the filter is on topic or
        // namespace), then reads the rows in row_id order with no sort at all.
        // With a recheck, SQL cannot know which rows will count towards the limit.
        let limit = match (self.limit, predicate.recheck) {
            (Some(limit), false) => Some(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX))),
            _ => None,
        };
        let sql = match (self.since.is_some() || self.until.is_some(), &limit) {
            // The first rows of a time range: the limit goes inside, so only that many
            // ids are kept (a bounded top-N sort) instead of every id in the range.
            // `+row_id` keeps SQLite on the time index: ordering by the bare rowid
            // would have it walk the table in row order and test each row's time.
            (true, Some(_)) => format!(
                "SELECT {} FROM events WHERE row_id IN (SELECT row_id FROM events WHERE {} ORDER BY +row_id LIMIT ?) ORDER BY row_id",
                row::COLUMNS,
                predicate.sql
            ),
            (true, None) => format!(
                "SELECT {} FROM events WHERE row_id IN (SELECT row_id FROM events WHERE {}) ORDER BY row_id",
                row::COLUMNS,
                predicate.sql
            ),
            (false, Some(_)) => format!(
                "SELECT {} FROM events WHERE {} ORDER BY row_id LIMIT ?",
                row::COLUMNS,
                predicate.sql
            ),
            (false, None) => format!(
                "SELECT {} FROM events WHERE {} ORDER BY row_id",
                row::COLUMNS,
                predicate.sql
            ),
        };
        params.extend(limit);
        Plan {
            sql,
            params,
            recheck: predicate.recheck,
        }
    }
}

#[cfg(test)]
mod tests;
