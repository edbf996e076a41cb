//! The sending loop with a forwarder kind of its own: retries through the pipeline's
//! stack, a permanent error saving progress, and an interrupt during a batch.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;

use super::*;
use crate::event::Event;
use crate::forward::{BuildError, Context, ForwardError, Forwarder, Kind, Options as Opts};
use crate::testing::{self, Scripted, T0, TempStore};

/// Builds the one [`Scripted`] forwarder a test watches.
struct ScriptedKind(Arc<Scripted>);

impl Kind for ScriptedKind {
    fn check(&self, _: &Opts) -> Result<(), BuildError> {
        Ok(())
    }

    fn build<'a>(
        &'a self,
        _: &'a Context,
        _: &'a Opts,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        let forwarder: Arc<dyn Forwarder> = self.0.clone();
        Box::pin(async move { Ok(forwarder) })
    }
}

/// A store of `count` exits without payload, one a second from [`T0`].
fn store(count: u64) -> TempStore {
    let events: Vec<Event> = (1..=count)
        .map(|seq| testing::event(seq).at(T0 + seq as i64).build())
        .collect();
    TempStore::with(&events)
}

/// A config whose forwarder "s" is of kind "scripted", batches of 3, fast retries.
fn config(dir: &Path) -> PathBuf {
    let path = dir.join("c.toml");
    std::fs::write(
        &path,
        "[[forwarder]]\nname = \"s\"\nkind = \"scripted\"\nbatch = { events = 3 }\n\
         retry = { initial = \"1ms\", max = \"2ms\", attempts = 3 }\n",
    )
    .unwrap();
    path
}

async fn replay(
    dir: &Path,
    db: &Path,
    script: &Arc<Scripted>,
    stop: Stop,
) -> Result<Summary, ReplayError> {
    let kinds = Kinds::empty().register("scripted", ScriptedKind(Arc::clone(script)));
    let selection = Selection {
        store: db.to_path_buf(),
        filters: Vec::new(),
        since: None,
        until: None,
    };
    let target = TargetSpec::Forwarder {
        name: "s".into(),
        config: config(dir),
    };
    let options = Options {
        batch: None,
        rate: None,
        restart: false,
        progress: ProgressMode::Never,
    };
    run(&kinds, selection, target, options, stop).await
}

fn seqs(script: &Scripted) -> Vec<Vec<u64>> {
    script.batches.lock().unwrap().clone()
}

#[tokio::test]
async fn retryable_failures_go_through_the_retry_stack_and_every_batch_arrives_once() {
    let store = store(7);
    let script = Scripted::new(vec![None, Some(ForwardError::retryable("busy")), None]);
    let summary = replay(store.dir(), store.path(), &script, Stop::default())
        .await
        .unwrap();
    assert_eq!(seqs(&script), [vec![1, 2, 3], vec![4, 5, 6], vec![7]]);
    assert_eq!((summary.sent, summary.total, summary.earlier), (7, 7, 0));
}

#[tokio::test]
async fn a_permanent_error_stops_with_progress_saved_and_a_rerun_goes_on_from_that_batch() {
    let store = store(7);
    let script = Scripted::new(vec![None, Some(ForwardError::permanent("too large"))]);
    let error = replay(store.dir(), store.path(), &script, Stop::default())
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("seq 4..=6")
            && text.contains("permanent error, 1 attempt(s)")
            && text.contains("too large")
            && text.contains("stopped after 3 of 7"),
        "{text}"
    );
    let summary = replay(store.dir(), store.path(), &script, Stop::default())
        .await
        .unwrap();
    assert_eq!(seqs(&script), [vec![1, 2, 3], vec![4, 5, 6], vec![7]]);
    assert_eq!((summary.sent, summary.earlier), (4, 3));
    let again = replay(store.dir(), store.path(), &script, Stop::default())
        .await
        .unwrap_err();
    assert!(
        matches!(again, ReplayError::AlreadyCompleted { sent: 7, .. }),
        "{again}"
    );
}

#[tokio::test]
async fn exhausted_retries_stop_the_replay_too() {
    let store = store(2);
    let failures = (0..3)
        .map(|_| Some(ForwardError::retryable("down")))
        .collect();
    let script = Scripted::new(failures);
    let error = replay(store.dir(), store.path(), &script, Stop::default())
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("retries exhausted, 3 attempt(s)"),
        "{error}"
    );
    assert!(seqs(&script).is_empty());
}

#[tokio::test]
async fn an_interrupt_lets_the_batch_in_flight_finish_and_records_it() {
    let store = store(7);
    let script = Scripted::new(Vec::new());
    script.hold();
    let stop = Stop::default();
    let running = tokio::spawn({
        let (dir, db, script, stop) = (
            store.dir().to_path_buf(),
            store.path().to_path_buf(),
            script.clone(),
            stop.clone(),
        );
        async move { replay(&dir, &db, &script, stop).await }
    });
    script.started.notified().await;
    stop.interrupt.cancel();
    script.unhold();
    let error = running.await.unwrap().unwrap_err();
    assert!(
        matches!(error, ReplayError::Interrupted { done: 3, total: 7 }),
        "{error}"
    );
    assert_eq!(seqs(&script), [vec![1, 2, 3]]);
}
