//! `[spool]`: how durable the on-disk spool is and how large it may grow.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::space::MinFree;
use crate::units::ByteSize;

/// When an appended record counts as durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fsync {
    /// One fdatasync per record: the slowest, and no better than `batch` for safety.
    Always,
    /// Group commit: everything written since the last fdatasync shares the next one,
    /// so concurrent publishers share a sync and none is acknowledged before it.
    Batch,
    /// No fdatasync: acknowledged once the kernel has the bytes. Survives a process
    /// crash, not a power loss.
    None,
}

impl Fsync {
    pub fn label(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::Batch => "batch",
            Fsync::None => "none",
        }
    }
}

/// What `reserve` does when the spool holds `max_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FullPolicy {
    /// Publishers wait up to `block_timeout` for a cursor to free a segment, then get
    /// RESOURCE_EXHAUSTED.
    Block,
    /// The oldest segment is deleted even though some forwarder has not delivered it;
    /// what each forwarder lost is reported.
    DropOldest,
}

impl FullPolicy {
    pub fn label(self) -> &'static str {
        match self {
            FullPolicy::Block => "block",
            FullPolicy::DropOldest => "drop_oldest",
        }
    }
}

/// `[spool]` in the config file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpoolSettings {
    pub fsync: Fsync,
    /// A segment file is closed and a new one started once it reaches this size.
    pub segment_bytes: ByteSize,
    /// Most bytes of segments kept on disk; see `full`.
    pub max_bytes: ByteSize,
    pub full: FullPolicy,
    /// With `full = "block"`: how long a publisher waits for room.
    #[serde(with = "crate::units::duration_text")]
    pub block_timeout: Duration,
    /// Fraction of `max_bytes` from which the gateway reports itself not ready
    /// (`/readyz`): the spool is close to full and forwarders are behind.
    pub high_water: f64,
    /// Free space kept on the spool's file system: below it, events are refused so
    /// that what was accepted can still drain into sinks on the same disk.
    pub min_free: MinFree,
}

impl Default for SpoolSettings {
    fn default() -> Self {
        Self {
            fsync: Fsync::Batch,
            segment_bytes: ByteSize(64 << 20),
            max_bytes: ByteSize(1 << 30),
            full: FullPolicy::Block,
            block_timeout: Duration::from_secs(5),
            high_water: 0.9,
            min_free: MinFree::default(),
        }
    }
}

impl SpoolSettings {
    pub fn validate(&self) -> Result<(), String> {
        if self.segment_bytes.0 < 4096 {
            return Err(format!(
                "`spool.segment_bytes` ({}) must be at least 4KiB",
                self.segment_bytes
            ));
        }
        // The active segment is never dropped, so the limit needs room for it plus at
        // least one segment that can be freed.
        if self.max_bytes.0 < self.segment_bytes.0.saturating_mul(2) {
            return Err(format!(
                "`spool.max_bytes` ({}) must be at least twice `spool.segment_bytes` ({})",
                self.max_bytes, self.segment_bytes
            ));
        }
        if self.full == FullPolicy::Block && self.block_timeout.is_zero() {
            return Err(
                "`spool.block_timeout` must be more than 0s with `full = \"block\"`".into(),
            );
        }
        if !(self.high_water > 0.0 && self.high_water <= 1.0) {
            return Err(format!(
                "`spool.high_water` ({}) must be a fraction of `spool.max_bytes` above 0 and at most 1, such as 0.9",
                self.high_water
            ));
        }
        self.min_free.validate()
    }

    /// Bytes from which the spool counts as nearly full.
    pub fn high_water_bytes(&self) -> u64 {
        (self.max_bytes.0 as f64 * self.high_water) as u64
    }
}
