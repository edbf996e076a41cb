//! A backlog in memory, for tests of spill and catch-up without a spool.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::event::Event;
use crate::pipeline::backlog::{Backlog, BacklogError, BacklogReader, Read};

/// It keeps everything appended.
#[derive(Default, Clone)]
pub(crate) struct MemoryBacklog {
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
    pub(crate) fn append(&self, event: &Arc<Event>) {
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
