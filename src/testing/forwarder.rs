//! A forwarder whose answers a test scripts.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::forward::{Batch, ForwardError, Forwarder};

/// Records the seqs of every batch it accepts. Each call, in this order: waits while
/// held; fails permanently when told to; panics on a batch holding `panic_on`'s
/// topic; refuses permanently a batch holding `poison`'s topic; fails with the next
/// scripted outcome while there is one; otherwise accepts.
#[derive(Default)]
pub(crate) struct Scripted {
    /// The seqs of each batch accepted, in order.
    pub batches: Mutex<Vec<Vec<u64>>>,
    /// Calls of `send`, counted as they are made.
    pub calls: AtomicUsize,
    /// When each call was made (tokio's clock, so paused tests see their own time).
    pub times: Mutex<Vec<Instant>>,
    /// Notified once per call, as it is made.
    pub started: Notify,
    /// Every call fails with a permanent error.
    pub fail_permanently: AtomicBool,
    /// A batch holding an event with this topic is rejected permanently.
    pub poison: Mutex<Option<&'static str>>,
    /// A batch holding an event with this topic makes `send` panic.
    pub panic_on: Mutex<Option<&'static str>>,
    /// Per call, in order: `Some(error)` fails that call, `None` lets it through.
    outcomes: Mutex<Vec<Option<ForwardError>>>,
    held: AtomicBool,
    release: Notify,
}

impl Scripted {
    /// Answers the first calls with `outcomes`, then accepts.
    pub(crate) fn new(outcomes: Vec<Option<ForwardError>>) -> Arc<Self> {
        Arc::new(Self {
            outcomes: Mutex::new(outcomes),
            ..Self::default()
        })
    }

    /// The next `n` calls that get that far fail retryably.
    pub(crate) fn fail_next(&self, n: usize) {
        let mut outcomes = self.outcomes.lock().unwrap();
        outcomes.extend((0..n).map(|_| Some(ForwardError::retryable("sink down"))));
    }

    /// Every call waits (counted, not answered) until [`Scripted::unhold`].
    pub(crate) fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
    }

    pub(crate) fn unhold(&self) {
        self.held.store(false, Ordering::SeqCst);
        self.release.notify_waiters();
    }

    /// The seqs accepted, in order.
    pub(crate) fn seqs(&self) -> Vec<u64> {
        self.batches
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .copied()
            .collect()
    }

    fn next_outcome(&self) -> Option<ForwardError> {
        let mut outcomes = self.outcomes.lock().unwrap();
        if outcomes.is_empty() {
            None
        } else {
            outcomes.remove(0)
        }
    }
}

impl Forwarder for Scripted {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.times.lock().unwrap().push(Instant::now());
        self.started.notify_one();
        Box::pin(async move {
            loop {
                let released = self.release.notified();
                if !self.held.load(Ordering::SeqCst) {
                    break;
                }
                released.await;
            }
            if self.fail_permanently.load(Ordering::SeqCst) {
                return Err(ForwardError::permanent("rejected"));
            }
            let has = |topic: &str| batch.events().iter().any(|e| e.topic() == topic);
            let panic_on = *self.panic_on.lock().unwrap();
            if let Some(topic) = panic_on
                && has(topic)
            {
                panic!("boom on {topic}");
            }
            let poison = *self.poison.lock().unwrap();
            if let Some(topic) = poison
                && has(topic)
            {
                return Err(ForwardError::permanent(format!("{topic} refused")));
            }
            if let Some(error) = self.next_outcome() {
                return Err(error);
            }
            let seqs = batch.events().iter().map(|e| e.seq).collect();
            self.batches.lock().unwrap().push(seqs);
            Ok(())
        })
    }
}
