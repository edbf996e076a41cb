//! Reading the audit store back: `eventgate query` and `eventgate stats`.
//!
//! A filter in containerd's language is turned into SQL where SQL can answer exactly
//! (`sql`); the rest (regular expressions, topic globs, paths through a nested Any)
//! is answered by the same matcher Subscribe uses, on events rebuilt from their rows.
//! Reads use their own read-only connection ([`crate::store::open_reader`]): in WAL
//! mode they never block the gateway's writer.

mod by_seq;
pub(crate) mod eventpath;
mod pg;
pub(crate) mod pods;
mod row;
pub(crate) mod sql;
pub(crate) mod stats;
pub(crate) mod time;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::Connection;
use thiserror::Error;

pub use row::StoredEvent;
use sql::{Binder, Dialect, Param};

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
    #[error("PostgreSQL store {store}: {what}")]
    Postgres {
        store: String,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Connecting failed: the message names the store.
    #[error(transparent)]
    PostgresConnect(Box<dyn std::error::Error + Send + Sync>),
    #[error("audit store {store}: row {row_id} is damaged: {what}")]
    BadRow {
        store: String,
        row_id: i64,
        what: String,
    },
    #[error("audit store {store}: {what}")]
    BadValue { store: String, what: String },
    #[error("PostgreSQL store {store}: a read was started while another was under way")]
    Busy { store: String },
    #[error("cannot start the runtime a PostgreSQL read runs on")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
    #[error("{what} reads only a SQLite audit store; {store} is a PostgreSQL store")]
    SqliteOnly { store: String, what: &'static str },
}

/// How long a read waits for a lock; in WAL mode only a checkpoint's brief exclusive
/// moments (or a migration) can hold one.
const READ_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Which audit store to read: a SQLite file (what the `sqlite` forwarder writes) or
/// a PostgreSQL database (the `postgres` forwarder's).
#[derive(Clone, Debug)]
pub(crate) enum StoreSpec {
    Sqlite(PathBuf),
    Postgres(Box<crate::postgres::Target>),
}

/// One value of a row a query returned (counts, names, a marker's payload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cell {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl Cell {
    pub(crate) fn int(&self) -> Option<i64> {
        match self {
            Cell::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// Text; `None` for NULL (or a value of another type).
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Cell::Text(text) => Some(text),
            _ => None,
        }
    }

    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        match self {
            Cell::Bytes(bytes) => Some(bytes),
            _ => None,
        }
    }
}

/// An open audit store, read-only.
pub struct Reader {
    backend: Backend,
}

enum Backend {
    Sqlite { conn: Connection, path: PathBuf },
    Postgres(pg::Session),
}

impl Reader {
    /// Refuses a missing file (opening would fail with SQLite's bare "unable to open"),
    /// a file that is not SQLite, another application's database and other schema
    /// versions, with the store's own messages. Blocking.
    pub fn open(path: &Path) -> Result<Reader, QueryError> {
        let conn = store::open_reader(path, READ_BUSY_TIMEOUT)?;
        Ok(Reader {
            backend: Backend::Sqlite {
                conn,
                path: path.to_path_buf(),
            },
        })
    }

    /// Either store. A PostgreSQL store is connected to (and its schema version
    /// checked); with `statement_timeout` the server cancels a statement that runs
    /// longer. Blocking: never call it on an async task.
    pub(crate) fn open_store(
        store: &StoreSpec,
        statement_timeout: Option<Duration>,
    ) -> Result<Reader, QueryError> {
        match store {
            StoreSpec::Sqlite(path) => Reader::open(path),
            StoreSpec::Postgres(target) => Ok(Reader {
                backend: Backend::Postgres(pg::Session::connect(target, statement_timeout)?),
            }),
        }
    }

    /// The SQLite file; `None` for a PostgreSQL store.
    pub fn path(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Sqlite { path, .. } => Some(path),
            Backend::Postgres(_) => None,
        }
    }

    /// The file, or `postgres://user@host:port/db`, for messages.
    pub(crate) fn name(&self) -> String {
        match &self.backend {
            Backend::Sqlite { path, .. } => path.display().to_string(),
            Backend::Postgres(session) => session.name().to_owned(),
        }
    }

    /// The SQLite connection; `None` for a PostgreSQL store.
    pub(crate) fn conn(&self) -> Option<&Connection> {
        match &self.backend {
            Backend::Sqlite { conn, .. } => Some(conn),
            Backend::Postgres(_) => None,
        }
    }

    pub(crate) fn dialect(&self) -> Dialect {
        match &self.backend {
            Backend::Sqlite { .. } => Dialect::Sqlite,
            Backend::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Values for a statement in this store's SQL.
    pub(crate) fn binder(&self) -> Binder {
        Binder::new(self.dialect())
    }

    pub(crate) fn sqlite(&self, what: &'static str) -> impl Fn(rusqlite::Error) -> QueryError {
        let path = self.path().map(Path::to_path_buf).unwrap_or_default();
        move |source| QueryError::Sqlite {
            path: path.clone(),
            what,
            source,
        }
    }

    /// A value of an unexpected type where the store's schema allows only one.
    pub(crate) fn bad_value(&self, what: impl Into<String>) -> QueryError {
        QueryError::BadValue {
            store: self.name(),
            what: what.into(),
        }
    }

    /// Runs `sql`, a SELECT of the row columns, and calls `emit` with each row
    /// rebuilt, in the statement's order, until it returns false.
    pub(crate) fn stream(
        &self,
        sql: &str,
        params: &[Param],
        mut emit: impl FnMut(StoredEvent) -> bool,
    ) -> Result<(), QueryError> {
        match &self.backend {
            Backend::Sqlite { conn, path } => {
                let mut stmt = conn
                    .prepare_cached(sql)
                    .map_err(self.sqlite("preparing the query"))?;
                let mut cursor = stmt
                    .query(rusqlite::params_from_iter(params.iter()))
                    .map_err(self.sqlite("running the query"))?;
                while let Some(row) = cursor.next().map_err(self.sqlite("reading a row"))? {
                    if !emit(row::read(row, path)?) {
                        break;
                    }
                }
                Ok(())
            }
            Backend::Postgres(session) => session.stream(sql, params, emit),
        }
    }

    /// The rows of a query of counts, names and payloads, as cells.
    pub(crate) fn cells(
        &self,
        sql: &str,
        params: &[Param],
        what: &'static str,
    ) -> Result<Vec<Vec<Cell>>, QueryError> {
        match &self.backend {
            Backend::Sqlite { conn, .. } => {
                let mut stmt = conn.prepare_cached(sql).map_err(self.sqlite(what))?;
                let columns = stmt.column_count();
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(params.iter()), |row| {
                        (0..columns)
                            .map(|i| {
                                use rusqlite::types::ValueRef;
                                Ok(match row.get_ref(i)? {
                                    ValueRef::Null => Cell::Null,
                                    ValueRef::Integer(n) => Cell::Int(n),
                                    ValueRef::Real(x) => Cell::Text(x.to_string()),
                                    ValueRef::Text(text) => {
                                        Cell::Text(String::from_utf8_lossy(text).into_owned())
                                    }
                                    ValueRef::Blob(bytes) => Cell::Bytes(bytes.to_vec()),
                                })
                            })
                            .collect::<rusqlite::Result<Vec<Cell>>>()
                    })
                    .map_err(self.sqlite(what))?;
                rows.collect::<Result<_, _>>().map_err(self.sqlite(what))
            }
            Backend::Postgres(session) => session.cells(sql, params, what),
        }
    }

    /// The one integer a query returns (`None` for no row or NULL).
    fn scalar(
        &self,
        sql: &str,
        params: &[Param],
        what: &'static str,
    ) -> Result<Option<i64>, QueryError> {
        let rows = self.cells(sql, params, what)?;
        match rows.first().and_then(|row| row.first()) {
            None | Some(Cell::Null) => Ok(None),
            Some(Cell::Int(n)) => Ok(Some(*n)),
            Some(other) => Err(self.bad_value(format!("{what}: {other:?} is not a number"))),
        }
    }

    /// The highest row_id stored so far (0 when empty): where following starts.
    pub fn last_row_id(&self) -> Result<i64, QueryError> {
        Ok(self
            .scalar(
                "SELECT coalesce(max(row_id), 0) FROM events",
                &[],
                "reading the last row",
            )?
            .unwrap_or(0))
    }

    /// Calls `emit` for each matching row in store order (row_id) with
    /// `after < row_id <= up_to`, until it returns false. Returns how many matched.
    pub fn each(
        &self,
        query: &Query,
        rows: RowRange,
        mut emit: impl FnMut(StoredEvent) -> bool,
    ) -> Result<u64, QueryError> {
        let plan = query.plan_in(rows, self.binder());
        let mut matched = 0;
        self.stream(&plan.sql, &plan.params, |stored| {
            if plan.recheck && !query.filter.matches(&stored.event.record_fields()) {
                return true;
            }
            matched += 1;
            emit(stored) && query.limit.is_none_or(|limit| matched < limit)
        })?;
        Ok(matched)
    }

    /// How many rows `each` would emit for `rows` (ignoring `limit`): one `count(*)`
    /// when SQL answers the filter exactly, otherwise the rows are read and matched.
    pub fn count(&self, query: &Query, rows: RowRange) -> Result<u64, QueryError> {
        let predicate = query.predicate_in(rows, self.binder());
        if predicate.recheck {
            let query = Query {
                limit: None,
                ..query.clone()
            };
            return self.each(&query, rows, |_| true);
        }
        let sql = format!("SELECT count(*) FROM events WHERE {}", predicate.sql);
        let count = self.scalar(&sql, predicate.params(), "counting the rows")?;
        Ok(count.and_then(|n| u64::try_from(n).ok()).unwrap_or(0))
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
        let mut predicate = query.predicate_in(rows, self.binder());
        // As in `plan`: with a time range, `+row_id` keeps SQLite on a time index and
        // only the ids are sorted.
        let timed = query.since.is_some() || query.until.is_some();
        let sqlite = self.dialect() == Dialect::Sqlite;
        let order = if timed && sqlite { "+row_id" } else { "row_id" };
        if !predicate.recheck {
            let offset = predicate.bind.int(offset);
            let sql = format!(
                "SELECT row_id FROM events WHERE {} ORDER BY {order} DESC LIMIT 1 OFFSET {offset}",
                predicate.sql
            );
            return self.scalar(&sql, predicate.params(), "finding the newest rows");
        }
        let sql = match timed && sqlite {
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
        let (mut read, mut matched, mut found) = (0, 0, None);
        self.stream(&sql, predicate.params(), |stored| {
            read += 1;
            if query.filter.matches(&stored.event.record_fields()) {
                matched += 1;
                if matched == n {
                    found = Some(stored.row_id);
                    return false;
                }
            }
            go_on(read)
        })?;
        Ok(found)
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
    pub params: Vec<Param>,
    pub recheck: bool,
}

/// How far the PostgreSQL writer's `time` column may be from the `timestamp` text it
/// was made from: nothing but rounding to microseconds, or, for an envelope whose
/// nanos overflow a second (the text carries them into the seconds, `time` clamps
/// them), about two seconds. Bounds on `time` widened by this much keep every row the
/// exact comparison of the texts keeps, and let PostgreSQL use its `time` index.
const TIME_SLACK: Duration = Duration::from_secs(60);

impl Query {
    /// The WHERE clause shared by queries and stats, in SQLite's SQL.
    #[cfg(test)]
    pub(crate) fn predicate(&self, rows: RowRange) -> sql::Predicate {
        self.predicate_in(rows, Binder::new(Dialect::Sqlite))
    }

    /// The WHERE clause in `bind`'s dialect, its values after those `bind` holds.
    pub(crate) fn predicate_in(&self, rows: RowRange, bind: Binder) -> sql::Predicate {
        let mut out = sql::translate_with(&self.filter, bind);
        let d = out.bind.dialect;
        // The filter's parameters come first, as its text does.
        let mut terms = vec![std::mem::take(&mut out.sql)];
        if rows.after > 0 {
            terms.push(format!("row_id > {}", out.bind.int(rows.after)));
        }
        if rows.up_to < i64::MAX {
            terms.push(format!("row_id <= {}", out.bind.int(rows.up_to)));
        }
        for (bound, op, slack) in [(self.since, ">=", false), (self.until, "<", true)] {
            let Some(time) = bound else { continue };
            let text = out.bind.text(time::stored_form(time));
            match d {
                Dialect::Sqlite => terms.push(format!("timestamp {op} {text}")),
                Dialect::Postgres => {
                    // Byte order, as SQLite compares text: the database's collation
                    // may order punctuation otherwise.
                    terms.push(format!("timestamp COLLATE \"C\" {op} {text}"));
                    let widened = match slack {
                        false => time.checked_sub(TIME_SLACK),
                        true => time.checked_add(TIME_SLACK),
                    };
                    if let Some(widened) = widened.and_then(time::postgres_form) {
                        let at = out.bind.text(widened);
                        terms.push(format!("(time {op} {at}::timestamptz OR time IS NULL)"));
                    }
                }
            }
        }
        out.sql = terms.join(" AND ");
        out
    }

    /// The statement `each` runs, in SQLite's SQL.
    #[cfg(any(test, feature = "bench"))]
    pub(crate) fn plan(&self, rows: RowRange) -> Plan {
        self.plan_in(rows, Binder::new(Dialect::Sqlite))
    }

    pub(crate) fn plan_in(&self, rows: RowRange, bind: Binder) -> Plan {
        let mut predicate = self.predicate_in(rows, bind);
        let sqlite = predicate.bind.dialect == Dialect::Sqlite;
        // With a recheck, SQL cannot know which rows will count towards the limit.
        let limit = match (self.limit, predicate.recheck) {
            (Some(limit), false) => {
                Some(predicate.bind.int(i64::try_from(limit).unwrap_or(i64::MAX)))
            }
            _ => None,
        };
        // A time range is served by a (column, timestamp) or (timestamp) index, which
        // holds the rows in timestamp order, not row_id order. Sorting the whole rows
        // makes SQLite copy every one into its sorter; selecting the row_ids first
        // sorts only the ids (from the index alone when the filter is on topic or
        // namespace), then reads the rows in row_id order with no sort at all.
        // PostgreSQL's planner chooses between its indexes itself.
        let timed = (self.since.is_some() || self.until.is_some()) && sqlite;
        let sql = match (timed, &limit) {
            // The first rows of a time range: the limit goes inside, so only that many
            // ids are kept (a bounded top-N sort) instead of every id in the range.
            // `+row_id` keeps SQLite on the time index: ordering by the bare rowid
            // would have it walk the table in row order and test each row's time.
            (true, Some(limit)) => format!(
                "SELECT {} FROM events WHERE row_id IN (SELECT row_id FROM events WHERE {} ORDER BY +row_id LIMIT {limit}) ORDER BY row_id",
                row::COLUMNS,
                predicate.sql
            ),
            (true, None) => format!(
                "SELECT {} FROM events WHERE row_id IN (SELECT row_id FROM events WHERE {}) ORDER BY row_id",
                row::COLUMNS,
                predicate.sql
            ),
            (false, Some(limit)) => format!(
                "SELECT {} FROM events WHERE {} ORDER BY row_id LIMIT {limit}",
                row::COLUMNS,
                predicate.sql
            ),
            (false, None) => format!(
                "SELECT {} FROM events WHERE {} ORDER BY row_id",
                row::COLUMNS,
                predicate.sql
            ),
        };
        Plan {
            sql,
            params: predicate.bind.params,
            recheck: predicate.recheck,
        }
    }
}

#[cfg(test)]
mod tests;
