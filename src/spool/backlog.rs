//! The spool as the pipeline's backlog: forwarders that resume after a restart, or
//! spilled out of their queue, read from it by sequence number.

use futures::future::BoxFuture;

use super::{Reader, Spool, SpoolError};
use crate::pipeline::backlog::{Backlog, BacklogError, BacklogReader, Read};

impl Backlog for Spool {
    fn reader(&self, from: u64) -> Box<dyn BacklogReader> {
        Box::new(Spool::reader(self, from))
    }

    fn cursor(&self, forwarder: &str) -> u64 {
        Spool::cursor(self, forwarder)
    }

    fn set_cursor(&self, forwarder: &str, next: u64) {
        Spool::set_cursor(self, forwarder, next);
    }

    fn set_delivered(&self, forwarder: &str, next: u64) {
        Spool::set_delivered(self, forwarder, next);
    }

    fn register(&self, forwarder: &str, next: u64) {
        Spool::add_cursor(self, forwarder, next);
    }

    fn forget(&self, forwarder: &str) {
        Spool::remove_cursor(self, forwarder);
    }

    fn inflight_dir(&self) -> Option<std::path::PathBuf> {
        Some(self.dir().join("inflight"))
    }

    fn until_durable(&self, seq: u64) -> BoxFuture<'_, Result<(), BacklogError>> {
        Box::pin(async move { Spool::until_durable(self, seq).await.map_err(backlog_error) })
    }
}

impl BacklogReader for Reader {
    fn next(
        &mut self,
        max_events: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<Read, BacklogError>> {
        Box::pin(async move {
            let batch = Reader::next(self, max_events, max_bytes)
                .await
                .map_err(backlog_error)?;
            Ok(Read {
                events: batch.events,
                next: batch.next_seq,
                lost: batch.gap.map(|gap| (gap.first, gap.count())),
            })
        })
    }
}

fn backlog_error(error: SpoolError) -> BacklogError {
    BacklogError {
        message: error.to_string(),
        source: Some(Box::new(error)),
    }
}
