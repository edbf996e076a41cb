//! How `/ui` reads the audit store without blocking ingest or taking its CPU: each
//! read on a thread of its own at the lowest CPU and I/O priority ([`threads`]), with
//! its own read-only [`Reader`] (WAL readers never block the writer), at most
//! `MAX_READS` at once, and a deadline after which SQLite is interrupted (or, for a
//! PostgreSQL store, the server cancels the statement: `statement_timeout`).

pub(crate) mod threads;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::query::{QueryError, Reader};

use super::{Ui, UiError};

/// How long a read waits for one of the running reads to finish before it is refused.
const QUEUE_WAIT: Duration = Duration::from_millis(500);
/// How long a read may run.
pub(super) const DEADLINE: Duration = Duration::from_secs(5);
/// How long an answer past its deadline waits for its interrupted read to end.
const STOP_WAIT: Duration = Duration::from_secs(1);

/// Why a read did not produce its answer.
#[derive(Debug)]
pub(super) enum ReadError {
    Query(QueryError),
    /// The work itself refused (bad input found while reading).
    Ui(UiError),
}

impl From<QueryError> for ReadError {
    fn from(error: QueryError) -> Self {
        ReadError::Query(error)
    }
}

impl From<UiError> for ReadError {
    fn from(error: UiError) -> Self {
        ReadError::Ui(error)
    }
}

/// Runs `work` on a read thread with a fresh read-only reader of the store and the
/// instant it must be done by. Past the deadline SQLite is interrupted and the answer
/// is 503.
pub(super) async fn read<T: Send + 'static>(
    ui: &Ui,
    work: impl FnOnce(&Reader, Instant) -> Result<T, ReadError> + Send + 'static,
) -> Result<T, UiError> {
    read_within(ui, DEADLINE, work).await
}

async fn read_within<T: Send + 'static>(
    ui: &Ui,
    allowed: Duration,
    work: impl FnOnce(&Reader, Instant) -> Result<T, ReadError> + Send + 'static,
) -> Result<T, UiError> {
    let Some(store) = ui.store.clone() else {
        return Err(UiError::NoStore);
    };
    let permit = match tokio::time::timeout(QUEUE_WAIT, Arc::clone(&ui.reads).acquire_owned()).await
    {
        Ok(Ok(permit)) => permit,
        _ => {
            return Err(UiError::Unavailable(format!(
                "{} reads of the audit store are running; try again in a moment",
                super::MAX_READS
            )));
        }
    };
    let Some(threads) = &ui.threads else {
        return Err(UiError::Unavailable(
            "/ui could not start a thread to read the audit store on; see the gateway's log"
                .to_owned(),
        ));
    };
    let deadline = Instant::now() + allowed;
    let (handle_tx, handle_rx) = tokio::sync::oneshot::channel();
    // A thread is free for every permit: as many threads as reads run at once.
    let task = threads.run(move || {
        // Held until the read is over, interrupted or not.
        let _permit = permit;
        // At the lowest priority a read may start late on a saturated node, past its
        // deadline: its answer is no longer awaited.
        if expired(deadline) {
            return Err(ReadError::Ui(too_long()));
        }
        // PostgreSQL cancels a statement past the deadline itself; SQLite is
        // interrupted from here.
        let left = deadline.saturating_duration_since(Instant::now());
        let reader = Reader::open_store(&store, Some(left))?;
        if let Some(conn) = reader.conn() {
            let _ = handle_tx.send(conn.get_interrupt_handle());
        }
        // Sent before this look: a deadline passing after it finds the handle.
        if expired(deadline) {
            return Err(ReadError::Ui(too_long()));
        }
        work(&reader, deadline)
    });
    tokio::pin!(task);
    let outcome = tokio::select! {
        joined = &mut task => joined,
        () = tokio::time::sleep_until(deadline.into()) => {
            let mut handle_rx = handle_rx;
            if let Ok(handle) = handle_rx.try_recv() {
                handle.interrupt();
            }
            // The interrupted read ends at once, its permit with it; one still waiting
            // for a core is not waited for (it gives up when it starts).
            let _ = tokio::time::timeout(STOP_WAIT, task).await;
            return Err(too_long());
        }
    };
    match outcome {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(ReadError::Ui(error))) => Err(error),
        Ok(Err(ReadError::Query(error))) if Instant::now() >= deadline => {
            tracing::debug!(error = %crate::errors::chain(&error), "a /ui read ran out of time");
            Err(too_long())
        }
        Ok(Err(ReadError::Query(error))) => Err(store_error(&error)),
        Err(_) => Err(UiError::Internal(
            "the read of the audit store stopped unexpectedly (see the gateway's log)".to_owned(),
        )),
    }
}

/// Whether work that checks between rows should stop.
pub(super) fn expired(deadline: Instant) -> bool {
    Instant::now() >= deadline
}

pub(super) fn too_long() -> UiError {
    UiError::Unavailable(format!(
        "the read of the audit store took longer than {}; narrow the time range or the filter",
        humantime::format_duration(DEADLINE)
    ))
}

fn store_error(error: &QueryError) -> UiError {
    let message = crate::errors::chain(error);
    tracing::warn!(error = %message, "/ui could not read the audit store");
    match error {
        // A missing file (nothing stored yet), a locked one, a database server that
        // is down or refuses the login: worth trying again.
        QueryError::Store(_) | QueryError::PostgresConnect(_) => UiError::Unavailable(message),
        _ => UiError::Internal(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{Exchange, ExchangeParts, ExchangeSettings};
    use crate::testing::TempStore;

    fn ui(store: &TempStore) -> Ui {
        let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
        Ui::new(
            Some(crate::query::StoreSpec::Sqlite(store.path().to_path_buf())),
            exchange,
        )
    }

    /// A query SQLite would run forever is interrupted at the deadline.
    #[tokio::test]
    async fn a_read_past_its_deadline_is_interrupted() {
        let store = TempStore::with(&[]);
        let ui = ui(&store);
        let started = Instant::now();
        let outcome = read_within(&ui, Duration::from_millis(200), |reader, _| {
            let endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                           SELECT count(*) FROM c";
            let n: i64 = reader
                .conn()
                .unwrap()
                .query_row(endless, [], |r| r.get(0))
                .map_err(reader.sqlite("counting forever"))?;
            Ok(n)
        })
        .await;
        let error = outcome.unwrap_err();
        assert!(error.to_string().contains("took longer than"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(3));
        // The permit came back with the interrupted read.
        assert_eq!(ui.reads.available_permits(), super::super::MAX_READS);
    }

    /// A read that only gets a thread after its deadline (a saturated node, where the
    /// read threads' idle priority starves them) gives up without touching the store,
    /// and the answer does not wait for it.
    #[tokio::test]
    async fn a_read_that_starts_past_its_deadline_gives_up() {
        let store = TempStore::with(&[]);
        let ui = ui(&store);
        let touched = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let touch = Arc::clone(&touched);
        let started = Instant::now();
        let error = read_within(&ui, Duration::ZERO, move |_, _| {
            touch.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
        .await
        .unwrap_err();
        assert!(error.to_string().contains("took longer than"), "{error}");
        assert!(started.elapsed() < STOP_WAIT + Duration::from_secs(1));
        // The job has ended (its permit is back) without reading.
        assert_eq!(ui.reads.available_permits(), super::super::MAX_READS);
        assert!(!touched.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn reads_beyond_the_running_ones_wait_briefly_then_are_refused() {
        let store = TempStore::with(&[]);
        let ui = ui(&store);
        let held = Arc::clone(&ui.reads)
            .acquire_many_owned(super::super::MAX_READS as u32)
            .await
            .unwrap();
        let error = read(&ui, |_, _| Ok(())).await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("reads of the audit store are running"),
            "{error}"
        );
        drop(held);
        read(&ui, |reader, _| Ok(reader.last_row_id()?))
            .await
            .unwrap();

        let none = Ui::new(None, ui.exchange.clone());
        assert!(matches!(
            read(&none, |_, _| Ok(())).await,
            Err(UiError::NoStore)
        ));
    }
}
