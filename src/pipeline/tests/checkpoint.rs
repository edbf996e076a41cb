//! The checkpoint invariant, watched from both sides: a sink that keeps what it was
//! sent in "memory" until a checkpoint makes it durable (and loses it when a
//! checkpoint fails, as a disk would), and a backlog that records each cursor it is
//! given, both in one journal. Every cursor must come after a checkpoint that made
//! everything before it durable; a crash image keeps only what was synced and the
//! persisted cursor, and a restart from it loses nothing.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::future::BoxFuture;

use super::{event, spec, until};
use crate::forward::{Batch, ForwardError};
use crate::pipeline::backlog::BacklogReader;
use crate::pipeline::*;
use crate::testing::MemoryBacklog;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Sent(Vec<u64>),
    /// A checkpoint made everything sent durable; the cursor may move to this.
    Synced(u64),
    /// A checkpoint failed: what was sent since the last one is gone.
    Lost,
    /// The backlog was told to persist this cursor.
    Cursor(u64),
}

#[derive(Default)]
struct Journal(Mutex<Vec<Step>>);

impl Journal {
    fn push(&self, step: Step) {
        self.0.lock().unwrap().push(step);
    }

    fn steps(&self) -> Vec<Step> {
        self.0.lock().unwrap().clone()
    }
}

struct Sink {
    journal: Arc<Journal>,
    unsynced: Mutex<Vec<u64>>,
    durable: Mutex<BTreeSet<u64>>,
    fail_next_checkpoint: AtomicBool,
    /// Checkpoints asked for, and which one fails (0: none).
    checkpoints: AtomicUsize,
    fail_checkpoint: AtomicUsize,
}

impl Sink {
    fn new(journal: &Arc<Journal>, durable: BTreeSet<u64>) -> Arc<Self> {
        Arc::new(Self {
            journal: Arc::clone(journal),
            unsynced: Mutex::default(),
            durable: Mutex::new(durable),
            fail_next_checkpoint: AtomicBool::new(false),
            checkpoints: AtomicUsize::new(0),
            fail_checkpoint: AtomicUsize::new(0),
        })
    }

    fn durable(&self) -> BTreeSet<u64> {
        self.durable.lock().unwrap().clone()
    }
}

impl Forwarder for Sink {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        let seqs: Vec<u64> = batch.events().iter().map(|e| e.seq).collect();
        self.unsynced.lock().unwrap().extend(&seqs);
        self.journal.push(Step::Sent(seqs));
        Box::pin(async { Ok(()) })
    }

    fn checkpoint(&self, next: u64) -> BoxFuture<'_, Result<(), ForwardError>> {
        let sent: Vec<u64> = std::mem::take(&mut *self.unsynced.lock().unwrap());
        let number = self.checkpoints.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fail_next_checkpoint.swap(false, Ordering::SeqCst)
            || number == self.fail_checkpoint.load(Ordering::SeqCst)
        {
            self.journal.push(Step::Lost);
            return Box::pin(async { Err(ForwardError::retryable("fdatasync failed")) });
        }
        self.durable.lock().unwrap().extend(sent);
        self.journal.push(Step::Synced(next));
        Box::pin(async { Ok(()) })
    }
}

/// A backlog that journals the cursors it is given.
struct Watched {
    inner: MemoryBacklog,
    journal: Arc<Journal>,
}

impl Backlog for Watched {
    fn reader(&self, from: u64) -> Box<dyn BacklogReader> {
        self.inner.reader(from)
    }
    fn cursor(&self, forwarder: &str) -> u64 {
        self.inner.cursor(forwarder)
    }
    fn set_cursor(&self, forwarder: &str, next: u64) {
        self.journal.push(Step::Cursor(next));
        self.inner.set_cursor(forwarder, next);
    }
    fn register(&self, forwarder: &str, next: u64) {
        self.inner.register(forwarder, next);
    }
    fn forget(&self, forwarder: &str) {
        self.inner.forget(forwarder);
    }
}

/// A pipeline for `sink` on `backlog`, routing from `start_seq` (what the backlog
/// holds before it is read from the forwarder's cursor, as after a restart).
fn start(
    sink: &Arc<Sink>,
    backlog: &MemoryBacklog,
    journal: &Arc<Journal>,
    start_seq: u64,
) -> Pipeline {
    start_with(sink, backlog, journal, start_seq, |_| {})
}

fn start_with(
    sink: &Arc<Sink>,
    backlog: &MemoryBacklog,
    journal: &Arc<Journal>,
    start_seq: u64,
    change: impl FnOnce(&mut super::Spec),
) -> Pipeline {
    let mut spec = spec("s");
    spec.checkpoint.interval = Duration::from_millis(50);
    change(&mut spec);
    let part = spec.parts(Arc::clone(sink) as Arc<dyn Forwarder>, None);
    Pipeline::from_forwarders_with(
        [part],
        Some(BacklogStart {
            backlog: Arc::new(Watched {
                inner: backlog.clone(),
                journal: Arc::clone(journal),
            }),
            start_seq,
        }),
    )
}

fn accept(backlog: &MemoryBacklog, router: &Router, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        let event = event(seq, "/t");
        backlog.append(&event);
        router.route(&event);
    }
}

/// Replays the journal: the sink is sent the events in order, each batch going on
/// from the last, except that after a failed checkpoint it is sent them again from
/// the first one it lost or earlier (the pipeline reads the spool again from where
/// its reading began, which may be before the cursor), never from later.
fn assert_sent_in_order(steps: &[Step], mut durable: BTreeSet<u64>) {
    let first_missing = |durable: &BTreeSet<u64>| (1..).find(|s| !durable.contains(s)).unwrap_or(1);
    let mut next = Some(first_missing(&durable));
    let mut unsynced: Vec<u64> = Vec::new();
    let mut lost_from = None;
    for (at, step) in steps.iter().enumerate() {
        match step {
            Step::Sent(seqs) => {
                let first = match (next, lost_from.take()) {
                    (Some(next), _) => next,
                    (None, Some(lost)) => {
                        assert!(
                            seqs[0] <= lost,
                            "step {at}: sent again from {} after losing {lost}\n{steps:?}",
                            seqs[0]
                        );
                        seqs[0]
                    }
                    (None, None) => unreachable!(),
                };
                let expected: Vec<u64> = (first..first + seqs.len() as u64).collect();
                assert_eq!(seqs, &expected, "step {at}: sent out of order\n{steps:?}");
                next = Some(first + seqs.len() as u64);
                unsynced.extend(seqs);
            }
            Step::Synced(_) => durable.extend(unsynced.drain(..)),
            Step::Lost => {
                unsynced.clear();
                next = None;
                lost_from = Some(first_missing(&durable));
            }
            Step::Cursor(_) => {}
        }
    }
}

/// Replays the journal: at every cursor, everything before it must be durable.
fn assert_no_cursor_ahead_of_the_disk(steps: &[Step], mut durable: BTreeSet<u64>) {
    let mut unsynced: Vec<u64> = Vec::new();
    for (at, step) in steps.iter().enumerate() {
        match step {
            Step::Sent(seqs) => unsynced.extend(seqs),
            Step::Synced(_) => durable.extend(unsynced.drain(..)),
            Step::Lost => unsynced.clear(),
            Step::Cursor(next) => {
                let missing: Vec<u64> = (1..*next).filter(|s| !durable.contains(s)).collect();
                assert!(
                    missing.is_empty(),
                    "step {at}: cursor {next} persisted while {missing:?} were not durable\n{steps:?}"
                );
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_cursor_follows_checkpoints_and_a_failed_one_sends_everything_since_again() {
    let journal = Arc::new(Journal::default());
    let backlog = MemoryBacklog::default();
    let sink = Sink::new(&journal, BTreeSet::new());
    let p = start(&sink, &backlog, &journal, 1);
    let router = p.router();
    accept(&backlog, &router, 1..=40);
    until("1..=40 durable", || sink.durable().len() == 40).await;
    until("the cursor past them", || backlog.cursor("s") == 41).await;

    // The next checkpoint fails: what it covered is lost by the sink, the cursor
    // stays, and the pipeline sends it all again from the backlog.
    sink.fail_next_checkpoint.store(true, Ordering::SeqCst);
    accept(&backlog, &router, 41..=100);
    until("41..=100 durable after the failure", || {
        sink.durable().len() == 100
    })
    .await;
    until("the cursor past them", || backlog.cursor("s") == 101).await;
    let steps = journal.steps();
    assert!(
        steps.contains(&Step::Lost),
        "a checkpoint failed: {steps:?}"
    );
    assert_no_cursor_ahead_of_the_disk(&steps, BTreeSet::new());
    assert_sent_in_order(&steps, BTreeSet::new());
    // Many batches per checkpoint: the point of checkpoints.
    let sent = steps.iter().filter(|s| matches!(s, Step::Sent(_))).count();
    let synced = steps
        .iter()
        .filter(|s| matches!(s, Step::Synced(_)))
        .count();
    assert!(
        sent >= 10 && synced < sent,
        "{sent} batches, {synced} syncs"
    );
    p.shutdown(Duration::from_secs(5)).await;
}

/// The worker reads the backlog's next batch while the sink takes the last one: a
/// checkpoint failing then sends the sink back to its cursor, and the batch read
/// ahead is not sent.
#[tokio::test(start_paused = true)]
async fn a_checkpoint_failing_while_the_backlog_is_read_sends_nothing_read_ahead() {
    let journal = Arc::new(Journal::default());
    let backlog = MemoryBacklog::default();
    for seq in 1..=200 {
        backlog.append(&event(seq, "/t"));
    }
    let sink = Sink::new(&journal, BTreeSet::new());
    // A checkpoint after every batch, the third one failing.
    sink.fail_checkpoint.store(3, Ordering::SeqCst);
    let p = start_with(&sink, &backlog, &journal, 201, |spec| {
        spec.checkpoint.bytes = crate::units::ByteSize(1);
    });
    until("1..=200 durable", || sink.durable().len() == 200).await;
    until("the cursor past them", || backlog.cursor("s") == 201).await;
    let steps = journal.steps();
    assert!(
        steps.contains(&Step::Lost),
        "a checkpoint failed: {steps:?}"
    );
    assert_sent_in_order(&steps, BTreeSet::new());
    assert_no_cursor_ahead_of_the_disk(&steps, BTreeSet::new());
    p.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_image_with_only_what_was_synced_restarts_without_a_loss() {
    let journal = Arc::new(Journal::default());
    let backlog = MemoryBacklog::default();
    let sink = Sink::new(&journal, BTreeSet::new());
    let p = start(&sink, &backlog, &journal, 1);
    let router = p.router();
    accept(&backlog, &router, 1..=30);
    until("1..=30 durable", || sink.durable().len() == 30).await;
    // Sent but not yet checkpointed when the power goes.
    accept(&backlog, &router, 31..=60);
    until("31..=60 sent", || {
        sink.unsynced.lock().unwrap().contains(&60)
    })
    .await;
    // The image: the sink's synced part and the backlog with its persisted cursor.
    let image = sink.durable();
    let cursor = backlog.cursor("s");
    drop(p);
    assert!(
        (1..cursor).all(|s| image.contains(&s)),
        "cursor {cursor} ahead of the synced {image:?}"
    );

    let journal = Arc::new(Journal::default());
    let restarted = Sink::new(&journal, image.clone());
    let p = start(&restarted, &backlog, &journal, 61);
    let router = p.router();
    accept(&backlog, &router, 61..=70);
    until("everything durable after the restart", || {
        restarted.durable() == (1..=70).collect()
    })
    .await;
    assert_no_cursor_ahead_of_the_disk(&journal.steps(), image);
    p.shutdown(Duration::from_secs(5)).await;
}
