//! The raw baseline's client side: events as rows of the PostgreSQL store's `events`
//! table, written with tokio-postgres's binary COPY straight into the partitioned
//! table (PostgreSQL routes each row to its partition), no savepoint, no staging
//! table, no conflict handling. The rows and the COPY are the `postgres` forwarder's
//! own (`src/postgres/write.rs`).

use tokio_postgres::Client;

use crate::event::Event;
use crate::postgres::write::{Row, copy_rows};

pub(crate) use crate::postgres::write::COLUMNS;

/// COPYs `events` into `events` in one transaction per `batch` events; returns the
/// rows copied.
pub(crate) async fn copy_batches(
    client: &mut Client,
    events: &[Event],
    batch: usize,
    written_by: &str,
) -> Result<u64, tokio_postgres::Error> {
    let mut copied = 0;
    for chunk in events.chunks(batch.max(1)) {
        let rows: Vec<Row> = chunk.iter().map(|e| Row::of(e, written_by)).collect();
        let tx = client.transaction().await?;
        copied += copy_rows(&tx, "events", &rows).await?;
        tx.commit().await?;
    }
    Ok(copied)
}
