//! What a resumer reads before it joins the live stream: the spool where it still
//! holds the position, the audit store below that. Both in seq order; the store holds
//! everything the spool released, because a segment is released only once every
//! forwarder's cursor (the `sqlite` forwarder's among them) has passed it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use thiserror::Error;

use crate::event::Event;
use crate::query::{QueryError, Reader as StoreReader};
use crate::spool::{Reader as SpoolReader, Spool, SpoolError};

/// Events per read: bounds what one resumer holds in memory.
pub(crate) const BATCH_EVENTS: usize = 512;
const BATCH_BYTES: usize = 1 << 20;

#[derive(Debug, Error)]
pub(crate) enum HistoryError {
    #[error("reading the spool")]
    Spool(#[source] SpoolError),
    #[error("reading the audit store")]
    Store(#[source] QueryError),
    #[error("the audit store read was interrupted")]
    Task(#[source] tokio::task::JoinError),
    /// Neither the spool nor the store holds `first..=last` any more (the spool
    /// released them before they were read, and there is no audit store).
    #[error("seqs {first}..={last} were released from the spool before they were read")]
    Released { first: u64, last: u64 },
}

/// Where a batch came from, for the replay counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Spool,
    Store,
}

/// Events with `from <= seq < next`, in seq order (seqs neither source holds are
/// missing from `events`, counted in `missing`).
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) events: Vec<Arc<Event>>,
    pub(crate) next: u64,
    pub(crate) origin: Origin,
    pub(crate) missing: u64,
}

/// The oldest event kept anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Oldest {
    pub(crate) seq: u64,
    pub(crate) time: Option<SystemTime>,
}

pub(crate) struct History {
    spool: Spool,
    store_path: Option<PathBuf>,
    store: Option<StoreReader>,
    reader: Option<SpoolReader>,
}

impl History {
    /// `store_path`: the audit store of an unfiltered `sqlite` forwarder, if any.
    pub(crate) fn new(spool: Spool, store_path: Option<PathBuf>) -> Self {
        Self {
            spool,
            store_path,
            store: None,
            reader: None,
        }
    }

    /// Runs `work` on the store's reader off the runtime; `None` without a store (or
    /// when its file does not exist yet).
    async fn with_store<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&StoreReader) -> Result<T, QueryError> + Send + 'static,
    ) -> Result<Option<T>, HistoryError> {
        let Some(path) = self.store_path.clone() else {
            return Ok(None);
        };
        let store = self.store.take();
        let (store, answer) = tokio::task::spawn_blocking(move || {
            let store = match store {
                Some(store) => store,
                None if !path.exists() => return (None, Ok(None)),
                None => match StoreReader::open(&path) {
                    Ok(store) => store,
                    Err(e) => return (None, Err(e)),
                },
            };
            let answer = work(&store).map(Some);
            (Some(store), answer)
        })
        .await
        .map_err(HistoryError::Task)?;
        self.store = store;
        answer.map_err(HistoryError::Store)
    }

    /// The oldest event the spool or the store keeps; `next_seq` when neither keeps
    /// anything.
    pub(crate) async fn oldest(&mut self) -> Result<Oldest, HistoryError> {
        let stats = self.spool.stats();
        let stored = self.with_store(|s| s.oldest()).await?.flatten();
        if let Some(stored) = stored.filter(|s| s.seq < stats.first_seq) {
            let time = stored
                .timestamp
                .as_deref()
                .and_then(crate::query::time::from_stored)
                .map(SystemTime::from);
            return Ok(Oldest {
                seq: stored.seq,
                time,
            });
        }
        let mut time = None;
        if stats.first_seq <= stats.durable_seq {
            let read = self.spool.reader(stats.first_seq).next(1, 1).await;
            if let Ok(batch) = read {
                time = batch
                    .events
                    .first()
                    .filter(|e| e.seq == stats.first_seq)
                    .and_then(|e| e.envelope.timestamp)
                    .and_then(|t| SystemTime::try_from(t).ok());
            }
        }
        Ok(Oldest {
            seq: stats.first_seq,
            time,
        })
    }

    /// The lowest kept seq whose envelope timestamp is at or after `since`, from the
    /// store's time index. The store lags the spool: when it holds nothing since,
    /// the answer is the seq after its newest row (what follows is in the spool);
    /// `None` without a store, or with an empty one.
    pub(crate) async fn first_since(
        &mut self,
        since: SystemTime,
    ) -> Result<Option<u64>, HistoryError> {
        let found = self
            .with_store(move |s| {
                Ok(match s.first_seq_since(since)? {
                    Some(seq) => Some(seq),
                    // Nothing stored since: whatever is newer is past the store's end.
                    None => s.newest_seq()?.map(|newest| newest + 1),
                })
            })
            .await?
            .flatten();
        Ok(found)
    }

    /// Events from `from` on, before `end` (at least one seq is passed unless
    /// `from >= end`).
    pub(crate) async fn read(&mut self, from: u64, end: u64) -> Result<Batch, HistoryError> {
        let first_in_spool = self.spool.stats().first_seq;
        if from >= first_in_spool {
            return self.read_spool(from, end).await;
        }
        self.read_store(from, end.min(first_in_spool)).await
    }

    async fn read_spool(&mut self, from: u64, end: u64) -> Result<Batch, HistoryError> {
        let mut reader = match self.reader.take() {
            Some(reader) if reader.position() == from => reader,
            _ => self.spool.reader(from),
        };
        let batch = reader
            .next(BATCH_EVENTS, BATCH_BYTES)
            .await
            .map_err(HistoryError::Spool)?;
        if let Some(gap) = batch.gap {
            // Released between looking and reading: the store has it, if there is one.
            return self.read_store(from, end.min(gap.last + 1)).await;
        }
        let mut events = batch.events;
        let went_past = events.last().is_some_and(|e| e.seq >= end);
        events.retain(|e| e.seq < end);
        let next = batch.next_seq.min(end);
        if !went_past {
            self.reader = Some(reader);
        }
        Ok(Batch {
            events,
            next,
            origin: Origin::Spool,
            missing: 0,
        })
    }

    async fn read_store(&mut self, from: u64, end: u64) -> Result<Batch, HistoryError> {
        let rows = self
            .with_store(move |s| s.seq_range(from, end, BATCH_EVENTS))
            .await?;
        let Some(rows) = rows else {
            return Err(HistoryError::Released {
                first: from,
                last: end - 1,
            });
        };
        let full = rows.len() == BATCH_EVENTS;
        let events: Vec<Arc<Event>> = rows.into_iter().map(|r| Arc::new(r.event)).collect();
        // A short read covered the whole range: what it did not return is not stored.
        let next = match events.last() {
            Some(last) if full => last.seq + 1,
            _ => end,
        };
        let missing = (next - from).saturating_sub(events.len() as u64);
        Ok(Batch {
            events,
            next,
            origin: Origin::Store,
            missing,
        })
    }
}
