//! Attempt accounting for the delivery stack: the request that travels through it
//! carries a tally the innermost service updates at the start of every attempt, so
//! the sender learns how many attempts a batch took and when (the dead-letter store
//! keeps both).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use tokio::time::Instant;

use crate::forward::Batch;

/// How many attempts a delivery took and when the first and the last began.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Attempts {
    pub count: u32,
    /// Wall-clock start of the first attempt (`None`: never attempted).
    pub first: Option<SystemTime>,
    /// Wall-clock start of the last attempt.
    pub last: Option<SystemTime>,
    first_tick: Option<Instant>,
}

impl Attempts {
    fn begin(&mut self) {
        let tick = Instant::now();
        self.count += 1;
        match (self.first, self.first_tick) {
            // Later attempts are placed on the monotonic clock from the first: the
            // span between them stays true across wall-clock steps (and follows
            // tokio's clock, so paused-time tests see the backoff they ran).
            (Some(first), Some(first_tick)) => self.last = Some(first + (tick - first_tick)),
            _ => {
                let now = SystemTime::now();
                self.first = Some(now);
                self.last = Some(now);
                self.first_tick = Some(tick);
            }
        }
    }
}

/// One batch on its way through the stack, with its attempt tally. Clones share the
/// tally, which is how the retried copies report back.
#[derive(Clone, Debug)]
pub(crate) struct Delivery {
    pub batch: Batch,
    attempts: Arc<Mutex<Attempts>>,
}

impl Delivery {
    pub(crate) fn new(batch: Batch) -> Self {
        Self {
            batch,
            attempts: Arc::default(),
        }
    }

    pub(crate) fn attempts(&self) -> Attempts {
        *self.attempts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called by the innermost service as each attempt starts.
    pub(super) fn begin_attempt(&self) {
        self.attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .begin();
    }
}
