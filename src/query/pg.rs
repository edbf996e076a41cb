//! Reading a PostgreSQL audit store (migrations/postgres) from the blocking code the
//! readers are written as: one connection, driven by a runtime of its own, so a read
//! runs the same on a `spawn_blocking` thread, on `/ui`'s read threads or in a test.
//! Rows come through a portal in batches inside one read-only transaction: a read
//! sees one snapshot, and one that stops early (a limit, a closed pipe) leaves the
//! rest of the rows on the server.

use std::cell::RefCell;
use std::time::Duration;

use tokio_postgres::types::Type;
use tokio_postgres::{Client, IsolationLevel, Row};

use super::row::RawRow;
use super::sql::Param;
use super::{Cell, QueryError, StoredEvent};
use crate::postgres::{PostgresError, Target, migrate};

/// Rows fetched per round trip.
const BATCH: i32 = 512;

pub(super) struct Session {
    /// The connection's runtime; shut down without waiting when the session ends.
    runtime: Option<tokio::runtime::Runtime>,
    /// A transaction needs the client mutably, and reads take `&Reader`; a read
    /// started from inside another's callback is refused rather than waited for.
    client: RefCell<Client>,
    /// `postgres://user@host:port/db`, for messages (never the password).
    name: String,
}

impl Drop for Session {
    fn drop(&mut self) {
        // Dropping a runtime waits for its tasks, which an async context (a reader
        // dropped in a task) may not do; the connection's task needs nothing more.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Session {
    /// Connects, checks the schema is the one this eventgate reads (a reader never
    /// migrates), and, with `statement_timeout`, has the server cancel any statement
    /// that runs longer.
    pub(super) fn connect(
        target: &Target,
        statement_timeout: Option<Duration>,
    ) -> Result<Session, QueryError> {
        let name = target.describe();
        let failed = |what: &'static str| {
            let name = name.clone();
            move |source: PostgresError| QueryError::Postgres {
                store: name.clone(),
                what,
                source: Box::new(source),
            }
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| QueryError::Runtime { source })?;
        let client = runtime.block_on(async {
            let client = target
                .connect()
                .await
                .map_err(|e| QueryError::PostgresConnect(Box::new(e)))?;
            migrate::check(&client)
                .await
                .map_err(failed("checking the schema"))?;
            // JIT compiles each partition's copy of an expression anew: over a month of
            // daily partitions that took longer than the query (20 s against 1.2 s for
            // `stats` over a million rows).
            let mut settings = "SET default_transaction_read_only = on; SET jit = off".to_owned();
            if let Some(timeout) = statement_timeout {
                settings.push_str(&format!(
                    "; SET statement_timeout = {}",
                    timeout.as_millis().max(1)
                ));
            }
            client
                .batch_execute(&settings)
                .await
                .map_err(|e| failed("setting up the session")(e.into()))?;
            Ok::<_, QueryError>(client)
        })?;
        Ok(Session {
            runtime: Some(runtime),
            client: RefCell::new(client),
            name,
        })
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    fn error(&self, what: &'static str) -> impl Fn(tokio_postgres::Error) -> QueryError {
        let store = self.name.clone();
        move |source| QueryError::Postgres {
            store: store.clone(),
            what,
            source: Box::new(PostgresError::Query(source)),
        }
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime, QueryError> {
        self.runtime.as_ref().ok_or_else(|| self.busy())
    }

    fn busy(&self) -> QueryError {
        QueryError::Busy {
            store: self.name.clone(),
        }
    }

    /// Runs `sql` (a SELECT of the row columns) and calls `emit` with each row
    /// rebuilt, in the statement's order, until it returns false.
    pub(super) fn stream(
        &self,
        sql: &str,
        params: &[Param],
        mut emit: impl FnMut(StoredEvent) -> bool,
    ) -> Result<(), QueryError> {
        let runtime = self.runtime()?;
        let mut client = self.client.try_borrow_mut().map_err(|_| self.busy())?;
        let values: Vec<_> = params.iter().map(Param::postgres).collect();
        runtime.block_on(async {
            let tx = client
                .build_transaction()
                .read_only(true)
                .isolation_level(IsolationLevel::RepeatableRead)
                .start()
                .await
                .map_err(self.error("starting a read"))?;
            let statement = tx
                .prepare(sql)
                .await
                .map_err(self.error("preparing the query"))?;
            let portal = tx
                .bind(&statement, &values)
                .await
                .map_err(self.error("running the query"))?;
            'batches: loop {
                let rows = tx
                    .query_portal(&portal, BATCH)
                    .await
                    .map_err(self.error("reading a row"))?;
                let complete = rows.len() < BATCH as usize;
                for row in rows {
                    let raw = read(&row).map_err(self.error("reading a row"))?;
                    if !emit(raw.into_stored(&self.name)?) {
                        break 'batches;
                    }
                }
                if complete {
                    break;
                }
            }
            tx.commit().await.map_err(self.error("ending a read"))
        })
    }

    /// The rows of a query whose columns are bigint, text or bytea, as cells.
    pub(super) fn cells(
        &self,
        sql: &str,
        params: &[Param],
        what: &'static str,
    ) -> Result<Vec<Vec<Cell>>, QueryError> {
        let runtime = self.runtime()?;
        let client = self.client.try_borrow().map_err(|_| self.busy())?;
        let values: Vec<_> = params.iter().map(Param::postgres).collect();
        let rows = runtime
            .block_on(client.query(sql, &values))
            .map_err(self.error(what))?;
        rows.iter()
            .map(|row| cells(row).map_err(self.error(what)))
            .collect()
    }
}

fn cells(row: &Row) -> Result<Vec<Cell>, tokio_postgres::Error> {
    let mut out = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let cell = match *column.type_() {
            Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Cell::Int),
            Type::INT4 => row
                .try_get::<_, Option<i32>>(i)?
                .map(|n| Cell::Int(n.into())),
            Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(i)?.map(Cell::Bytes),
            // text, and anything else a query of ours selects is cast to text first.
            _ => row.try_get::<_, Option<String>>(i)?.map(Cell::Text),
        };
        out.push(cell.unwrap_or(Cell::Null));
    }
    Ok(out)
}

/// One row of the row columns, typed as migrations/postgres has them.
fn read(row: &Row) -> Result<RawRow, tokio_postgres::Error> {
    let id: uuid::Uuid = row.try_get(2)?;
    let mut workload: [Option<String>; 7] = Default::default();
    for (i, column) in workload.iter_mut().enumerate() {
        // `labels` is jsonb: read as its text, which the row's rebuild parses.
        *column = match 16 + i {
            22 => row
                .try_get::<_, Option<serde_json::Value>>(22)?
                .map(|labels| labels.to_string()),
            at => row.try_get(at)?,
        };
    }
    Ok(RawRow {
        row_id: row.try_get(0)?,
        seq: row.try_get(1)?,
        id: id.hyphenated().to_string(),
        timestamp: row.try_get(3)?,
        received_at: row.try_get(4)?,
        namespace: row.try_get(5)?,
        topic: row.try_get(6)?,
        type_url: row.try_get(7)?,
        payload: row.try_get(8)?,
        source: row.try_get(9)?,
        publisher: (
            row.try_get(10)?,
            row.try_get(11)?,
            row.try_get(12)?,
            row.try_get(13)?,
        ),
        origin: row.try_get(14)?,
        origin_clock: row.try_get(15)?,
        workload,
        node: row.try_get(23)?,
        node_seq: row.try_get(24)?,
        reconciled_from: row.try_get(25)?,
        reason: row.try_get(26)?,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_columns_read_are_the_tables() {
        let schema = include_str!("../../migrations/postgres/0001_events.sql");
        for name in crate::query::row::COLUMNS.split(',').map(str::trim) {
            assert!(
                schema.contains(&format!("\n    {name} ")),
                "{name} is not a column of events"
            );
        }
    }
}
