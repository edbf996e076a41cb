//! Where a forwarder reads what its in-memory queue could not hold: the durable
//! record of every accepted event (the spool), addressed by sequence number.
//!
//! A forwarder reads from the backlog after a restart (from its saved cursor up to
//! where the new process started) and whenever its queue overflowed under
//! `overflow = "spill"` (from the first event it missed). Once it has caught up it
//! rejoins its queue; see `RouteState` for how no event is missed or doubled there.

use std::sync::Arc;

use futures::future::BoxFuture;
use thiserror::Error;

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
    /// Resolves once the record with `seq` (and every one before it) is durable:
    /// events from the queue reach a sink only then. Fails if it never will be (the
    /// backlog failed or closed first).
    fn until_durable(&self, seq: u64) -> BoxFuture<'_, Result<(), BacklogError>> {
        let _ = seq;
        Box::pin(std::future::ready(Ok(())))
    }
}
