//! The sending loop with a forwarder kind of its own: retries through the pipeline's
//! stack, a permanent error saving progress, and an interrupt during a batch.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::Notify;

use super::*;
use crate::event::{Event, EventId, Source};
use crate::forward::{Batch, BuildError, Context, ForwardError, Forwarder, Kind, Options as Opts};
use crate::proto::containerd::types::Envelope;
use crate::store::{EventRow, WriterOptions, insert_rows, open_writer};

/// Records the seqs of every batch it is sent; fails as scripted per call.
#[derive(Default)]
struct Script {
    batches: Mutex<Vec<Vec<u64>>>,
    /// Per call, in order: `Some(error)` fails it. Afterwards every call succeeds.
    failures: Mutex<Vec<Option<ForwardError>>>,
    /// When set, each call waits for a permit before answering.
    gate: Option<Arc<Notify>>,
    started: Notify,
}

struct Scripted(Arc<Script>);

impl Forwarder for Scripted {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            self.0.started.notify_one();
            if let Some(gate) = &self.0.gate {
                gate.notified().await;
            }
            let failure = {
                let mut failures = self.0.failures.lock().unwrap();
                if failures.is_empty() {
                    None
                } else {
                    failures.remove(0)
                }
            };
            if let Some(error) = failure {
                return Err(error);
            }
            let seqs = batch.events().iter().map(|e| e.seq).collect();
            self.0.batches.lock().unwrap().push(seqs);
            Ok(())
        })
    }
}

struct ScriptedKind(Arc<Script>);

impl Kind for ScriptedKind {
    fn check(&self, _: &Opts) -> Result<(), BuildError> {
        Ok(())
    }

    fn build<'a>(
        &'a self,
        _: &'a Context,
        _: &'a Opts,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        let forwarder: Arc<dyn Forwarder> = Arc::new(Scripted(Arc::clone(&self.0)));
        Box::pin(async move { Ok(forwarder) })
    }
}

fn store(dir: &Path, count: u64) -> PathBuf {
    let path = dir.join("audit.db");
    let events: Vec<Event> = (1..=count)
        .map(|seq| {
            let envelope = Envelope {
                timestamp: Some(prost_types::Timestamp {
                    seconds: 1_714_557_600 + seq as i64,
                    nanos: 0,
                }),
                namespace: "default".into(),
                topic: "/tasks/exit".into(),
                event: None,
            };
            Event::new(seq, EventId::generate(), Source::Publish, envelope)
        })
        .collect();
    let mut conn = open_writer(&path, &WriterOptions::default()).unwrap();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    insert_rows(&mut conn, &rows).unwrap();
    path
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
    script: &Arc<Script>,
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

fn seqs(script: &Script) -> Vec<Vec<u64>> {
    script.batches.lock().unwrap().clone()
}

#[tokio::test]
async fn retryable_failures_go_through_the_retry_stack_and_every_batch_arrives_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = store(dir.path(), 7);
    let script = Arc::new(Script {
        failures: Mutex::new(vec![None, Some(ForwardError::retryable("busy")), None]),
        ..Script::default()
    });
    let summary = replay(dir.path(), &db, &script, Stop::default())
        .await
        .unwrap();
    assert_eq!(seqs(&script), [vec![1, 2, 3], vec![4, 5, 6], vec![7]]);
    assert_eq!((summary.sent, summary.total, summary.earlier), (7, 7, 0));
}

#[tokio::test]
async fn a_permanent_error_stops_with_progress_saved_and_a_rerun_goes_on_from_that_batch() {
    let dir = tempfile::tempdir().unwrap();
    let db = store(dir.path(), 7);
    let script = Arc::new(Script {
        failures: Mutex::new(vec![None, Some(ForwardError::permanent("too large"))]),
        ..Script::default()
    });
    let error = replay(dir.path(), &db, &script, Stop::default())
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
    let summary = replay(dir.path(), &db, &script, Stop::default())
        .await
        .unwrap();
    assert_eq!(seqs(&script), [vec![1, 2, 3], vec![4, 5, 6], vec![7]]);
    assert_eq!((summary.sent, summary.earlier), (4, 3));
    let again = replay(dir.path(), &db, &script, Stop::default())
        .await
        .unwrap_err();
    assert!(
        matches!(again, ReplayError::AlreadyCompleted { sent: 7, .. }),
        "{again}"
    );
}

#[tokio::test]
async fn exhausted_retries_stop_the_replay_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = store(dir.path(), 2);
    let failures = (0..3)
        .map(|_| Some(ForwardError::retryable("down")))
        .collect();
    let script = Arc::new(Script {
        failures: Mutex::new(failures),
        ..Script::default()
    });
    let error = replay(dir.path(), &db, &script, Stop::default())
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
    let dir = tempfile::tempdir().unwrap();
    let db = store(dir.path(), 7);
    let gate = Arc::new(Notify::new());
    let script = Arc::new(Script {
        gate: Some(Arc::clone(&gate)),
        ..Script::default()
    });
    let stop = Stop::default();
    let running = tokio::spawn({
        let (dir, db, script, stop) = (
            dir.path().to_path_buf(),
            db.clone(),
            script.clone(),
            stop.clone(),
        );
        async move { replay(&dir, &db, &script, stop).await }
    });
    script.started.notified().await;
    stop.interrupt.cancel();
    gate.notify_one();
    let error = running.await.unwrap().unwrap_err();
    assert!(
        matches!(error, ReplayError::Interrupted { done: 3, total: 7 }),
        "{error}"
    );
    assert_eq!(seqs(&script), [vec![1, 2, 3]]);
}
