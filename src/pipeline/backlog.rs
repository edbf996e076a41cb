//! Where a forwarder reads what its in-memory queue could not hold: the durable
//! record of every accepted event (the spool), addressed by sequence number.
//!
//! A forwarder reads from the backlog after a restart (from its saved cursor up to
//! where the new process started) and whenever its queue overflowed under
//! `overflow = "spill"` (from the first event it missed). Once it has caught up it
//! rejoins its queue; see `RouteState` for how no event is missed or doubled there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use thiserror::Error;
use tokio::sync::watch;

use crate::event::Event;

#[derive(Debug, Error)]
#[error("reading the spool: {message}")]
pub struct BacklogError {
    pub message: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// Events read from the backlog, in sequence order.
pub struct Read {
    pub events: Vec<Arc<Event>>,
    /// The sequence number to read from next: past every event returned and every
    /// record skipped over.
    pub next: u64,
    /// Records this reader will never see because they were discarded to make room
    /// (`drop_oldest` on a full spool): (first seq, count).
    pub lost: Option<(u64, u64)>,
}

pub trait BacklogReader: Send {
    /// Up to `max_events` (and about `max_bytes`) events from the reader's position,
    /// waiting until at least one record is readable.
    fn next(
        &mut self,
        max_events: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<Read, BacklogError>>;
}

pub trait Backlog: Send + Sync + 'static {
    fn reader(&self, from: u64) -> Box<dyn BacklogReader>;
    /// The next sequence number a forwarder has not processed yet (its cursor).
    fn cursor(&self, forwarder: &str) -> u64;
    /// Every event before `next` is processed (delivered, dead-lettered or not
    /// matched); records every cursor has passed can be discarded.
    fn set_cursor(&self, forwarder: &str, next: u64);
    /// The forwarder's sink has everything before `next`, not durably yet: its
    /// cursor follows at the next checkpoint. A hint for reporting losses.
    fn set_delivered(&self, forwarder: &str, next: u64) {
        let _ = (forwarder, next);
    }
    /// A forwarder added while running: its cursor starts at `next` (it is not
    /// handed anything before).
    fn register(&self, forwarder: &str, next: u64);
    /// A forwarder removed while running: its cursor goes, and with it its claim on
    /// records it had not processed.
    fn forget(&self, forwarder: &str);
    /// Where forwarders record the batch in flight (`pipeline::inflight`); `None`
    /// for a backlog that does not outlive the process.
    fn inflight_dir(&self) -> Option<std::path::PathBuf> {
        None
    }
}

/// An in-memory backlog, for tests and for library users who want spill without a
/// disk. It keeps everything appended.
#[derive(Default, Clone)]
pub struct MemoryBacklog {
    inner: Arc<MemoryInner>,
}

#[derive(Default)]
struct MemoryInner {
    events: Mutex<Vec<Arc<Event>>>,
    appended: watch::Sender<u64>,
    cursors: Mutex<HashMap<String, u64>>,
}

impl MemoryBacklog {
    /// Events must come in sequence order, starting at 1.
    pub fn append(&self, event: &Arc<Event>) {
        self.inner
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(event));
        self.inner.appended.send_replace(event.seq);
    }
}

impl Backlog for MemoryBacklog {
    fn reader(&self, from: u64) -> Box<dyn BacklogReader> {
        Box::new(MemoryReader {
            inner: Arc::clone(&self.inner),
            appended: self.inner.appended.subscribe(),
            next: from,
        })
    }

    fn cursor(&self, forwarder: &str) -> u64 {
        self.inner
            .cursors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(forwarder)
            .copied()
            .unwrap_or(1)
    }

    fn set_cursor(&self, forwarder: &str, next: u64) {
        let mut cursors = self
            .inner
            .cursors
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let cursor = cursors.entry(forwarder.to_owned()).or_insert(1);
        *cursor = (*cursor).max(next);
    }

    fn register(&self, forwarder: &str, next: u64) {
        self.inner
            .cursors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(forwarder.to_owned(), next);
    }

    fn forget(&self, forwarder: &str) {
        self.inner
            .cursors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(forwarder);
    }
}

struct MemoryReader {
    inner: Arc<MemoryInner>,
    appended: watch::Receiver<u64>,
    next: u64,
}

impl BacklogReader for MemoryReader {
    fn next(
        &mut self,
        max_events: usize,
        _max_bytes: usize,
    ) -> BoxFuture<'_, Result<Read, BacklogError>> {
        Box::pin(async move {
            let want = self.next;
            if self.appended.wait_for(|last| *last >= want).await.is_err() {
                return Err(BacklogError {
                    message: "the in-memory backlog was dropped".into(),
                    source: None,
                });
            }
            let events = self
                .inner
                .events
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let start = events.partition_point(|e| e.seq < self.next);
            let taken: Vec<Arc<Event>> = events[start..]
                .iter()
                .take(max_events.max(1))
                .cloned()
                .collect();
            if let Some(last) = taken.last() {
                self.next = last.seq + 1;
            }
            Ok(Read {
                events: taken,
                next: self.next,
                lost: None,
            })
        })
    }
}
