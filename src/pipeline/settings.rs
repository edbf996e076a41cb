//! The pipeline's per-forwarder settings: `queue`, `batch` and `retry` in a
//! `[[forwarder]]` table. Each is an inline table; every key has a default.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::ByteSize;

/// What happens when an event arrives and the forwarder's queue is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// Publishers wait (up to `block_timeout`) for room; then the event is refused
    /// with RESOURCE_EXHAUSTED, so the publisher knows it was not taken.
    Block,
    /// The arriving event is dropped for this forwarder (counted and logged).
    DropNewest,
    /// The oldest queued events are dropped to make room (counted and logged).
    DropOldest,
    /// The forwarder stops taking events from memory and later reads what it missed
    /// from the durable spool, then rejoins: nothing is dropped and nobody waits;
    /// the backlog is bounded by the spool's size. Without a spool (library use with
    /// no backlog), behaves as `block`.
    Spill,
}

impl Overflow {
    pub fn label(self) -> &'static str {
        match self {
            Overflow::Block => "block",
            Overflow::DropNewest => "drop_newest",
            Overflow::DropOldest => "drop_oldest",
            Overflow::Spill => "spill",
        }
    }
}

/// `queue = { events = 10000, bytes = "4MiB", overflow = "spill", block_timeout = "5s" }`
///
/// A queued event costs up to about 2 KiB of memory, many times its encoded size: the
/// event (0.55 KiB for a `TaskExit`), its JSON once a forwarder has rendered it (0.2
/// KiB) and, once a filter on event fields or Kafka's message key has needed it, its
/// decoded payload (1.1 KiB). The defaults hold a forwarder to about 20 MiB at most:
/// with `spill` the spool holds the rest, and a sink that is down does not cost the
/// gateway its memory.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueSettings {
    /// Most events held for this forwarder.
    pub events: usize,
    /// Most encoded envelope bytes held for this forwarder.
    pub bytes: ByteSize,
    pub overflow: Overflow,
    /// With `overflow = "block"`: how long a publisher waits for room.
    #[serde(with = "crate::units::duration_text")]
    pub block_timeout: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            events: 10_000,
            bytes: ByteSize(4 << 20),
            overflow: Overflow::Spill,
            block_timeout: Duration::from_secs(5),
        }
    }
}

/// `batch = { events = 1000, bytes = "1MiB", linger = "50ms" }`
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchSettings {
    /// Most events per batch; 0 means the kind's default.
    pub events: usize,
    /// Most encoded bytes per batch (a single larger event still goes, alone).
    pub bytes: ByteSize,
    /// How long a batch may wait to fill up after its first event arrived. Events
    /// that queue up while a batch is being delivered are batched without waiting.
    /// 50 ms by default: at a few thousand events a second, fewer and larger batches
    /// cost the SQLite store far fewer page writes per row (measured with `bench
    /// exchange`: 21.2 against 24.4 µs of server CPU per delivery with the default
    /// forwarders, 5 ms before), for 50 ms more before a lone event reaches a sink.
    #[serde(with = "crate::units::duration_text")]
    pub linger: Duration,
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self {
            events: 0,
            bytes: ByteSize(4 << 20),
            linger: Duration::from_millis(50),
        }
    }
}

/// `checkpoint = { interval = "1s", bytes = "16MiB" }`: how often the forwarder's
/// output is made durable (an fdatasync, a synced SQLite commit) and its spool
/// cursor persisted after it. Between checkpoints batches are written without
/// waiting for the disk; what follows the last checkpoint stays in the spool.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointSettings {
    /// At most this long after the first batch not yet made durable.
    #[serde(with = "crate::units::duration_text")]
    pub interval: Duration,
    /// At most this many encoded bytes sent since the last checkpoint.
    pub bytes: ByteSize,
}

impl Default for CheckpointSettings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            bytes: ByteSize(16 << 20),
        }
    }
}

/// The longest checkpoint interval accepted: the spool holds everything after the
/// last checkpoint, and a sink's copy is only as old as this after a power loss.
pub(crate) const MAX_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(3600);

impl CheckpointSettings {
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() || self.interval > MAX_CHECKPOINT_INTERVAL {
            return Err(format!(
                "`checkpoint.interval` must be more than 0s and at most {}",
                humantime::format_duration(MAX_CHECKPOINT_INTERVAL)
            ));
        }
        if self.bytes.0 == 0 {
            return Err("`checkpoint.bytes` must be more than 0".into());
        }
        Ok(())
    }
}

/// `retry = { timeout = "30s", initial = "100ms", max = "30s", attempts = 0, elapsed = "0s" }`
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySettings {
    /// Limit for one delivery attempt of one batch; an attempt that takes longer is
    /// abandoned and retried.
    #[serde(with = "crate::units::duration_text")]
    pub timeout: Duration,
    /// Backoff before the first retry; doubles per attempt up to `max`, and each
    /// actual delay is drawn uniformly from [0, backoff] ("full jitter").
    #[serde(with = "crate::units::duration_text")]
    pub initial: Duration,
    #[serde(with = "crate::units::duration_text")]
    pub max: Duration,
    /// Give up on a batch after this many attempts in all; 0 = no limit.
    pub attempts: u32,
    /// Give up on a batch once this long has passed since its first attempt;
    /// "0s" = no limit.
    #[serde(with = "crate::units::duration_text")]
    pub elapsed: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            initial: Duration::from_millis(100),
            max: Duration::from_secs(30),
            attempts: 0,
            elapsed: Duration::ZERO,
        }
    }
}

impl RetrySettings {
    pub fn validate(&self) -> Result<(), String> {
        if self.timeout.is_zero() {
            return Err("`retry.timeout` must be more than 0s".into());
        }
        if self.initial.is_zero() {
            return Err("`retry.initial` must be more than 0s".into());
        }
        if self.max < self.initial {
            return Err(format!(
                "`retry.max` ({}) must not be less than `retry.initial` ({})",
                humantime::format_duration(self.max),
                humantime::format_duration(self.initial)
            ));
        }
        Ok(())
    }
}

impl QueueSettings {
    pub fn validate(&self) -> Result<(), String> {
        if self.events == 0 {
            return Err("`queue.events` must be at least 1".into());
        }
        if self.bytes.0 == 0 {
            return Err("`queue.bytes` must be more than 0".into());
        }
        Ok(())
    }
}

impl BatchSettings {
    pub fn validate(&self) -> Result<(), String> {
        if self.bytes.0 == 0 {
            return Err("`batch.bytes` must be more than 0".into());
        }
        Ok(())
    }
}

/// `[pipeline]`: settings shared by all forwarders.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineSettings {
    /// At shutdown, how long forwarders get to deliver what is queued.
    #[serde(with = "crate::units::duration_text")]
    pub drain_timeout: Duration,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        Self {
            drain_timeout: Duration::from_secs(30),
        }
    }
}
