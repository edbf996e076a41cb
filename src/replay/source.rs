//! Reading the selection from the store on a blocking thread, a chunk at a time,
//! while the previous chunk is being sent.
//!
//! Each chunk is its own short statement (`row_id > last LIMIT n`), so no read
//! transaction stays open for the length of a replay: in WAL mode an open read would
//! keep the gateway's checkpoints from emptying the WAL, which would grow for hours
//! behind a slow `--rate`.

use tokio::sync::mpsc;

use crate::query::{Query, QueryError, Reader, RowRange, StoredEvent};

/// Chunks read ahead of the sender.
const READ_AHEAD: usize = 2;

pub(super) struct Chunks {
    rx: mpsc::Receiver<Result<Vec<StoredEvent>, QueryError>>,
}

impl Chunks {
    /// Reads matching rows in `rows`, `size` at a time, in row_id order. The thread
    /// ends at the end of the range, at an error, or when `Chunks` is dropped.
    pub(super) fn spawn(reader: Reader, query: Query, rows: RowRange, size: usize) -> Chunks {
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        let query = Query {
            limit: Some(size.max(1) as u64),
            ..query
        };
        tokio::task::spawn_blocking(move || {
            let mut after = rows.after;
            loop {
                let mut chunk = Vec::new();
                let range = RowRange {
                    after,
                    up_to: rows.up_to,
                };
                if let Err(error) = reader.each(&query, range, |event| {
                    chunk.push(event);
                    true
                }) {
                    let _ = tx.blocking_send(Err(error));
                    return;
                }
                let Some(last) = chunk.last() else { return };
                after = last.row_id;
                if tx.blocking_send(Ok(chunk)).is_err() {
                    return;
                }
            }
        });
        Chunks { rx }
    }

    /// The next chunk; `None` at the end of the range.
    pub(super) async fn next(&mut self) -> Option<Result<Vec<StoredEvent>, QueryError>> {
        self.rx.recv().await
    }
}
