//! The reserve of free space on the spool's file system (`spool.min_free`).
//!
//! The spool and the sinks usually share a disk. If publishers could fill it, the
//! events already acknowledged would have nowhere to go: the file and SQLite
//! forwarders would fail with ENOSPC until someone freed space. So acceptance stops
//! while there is still room, and what was acknowledged drains into the sinks using
//! the reserve. Acceptance resumes by itself once free space is back above the
//! reserve plus a tenth of it, so that a sink freeing and taking a few blocks does
//! not make it flap.
//!
//! The writer thread refreshes the figures (one `statvfs`, about 2 us) after writes,
//! at most every [`REFRESH_MIN`], and at least every [`REFRESH_PERIOD`] while idle; a
//! Publish only loads one atomic. The reserve has to absorb what the sinks write
//! between two looks, and that comes in bursts: a SQLite checkpoint copies up to its
//! whole write-ahead log (1,000 pages, about 4 MiB) into the database file at once
//! (3.5 MiB in 3.4 ms measured on tmpfs). A reserve below [`SMALL_RESERVE`] is
//! accepted, with a warning: one such burst can overrun it, and a spool write that
//! then fails stops the gateway.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::units::ByteSize;
use crate::units::human_bytes;

/// Longest time between two looks at the file system while the spool is idle: the
/// sinks may be filling it while nothing is published.
pub(crate) const REFRESH_PERIOD: Duration = Duration::from_millis(250);

/// Shortest time between two looks while the spool is busy.
pub(crate) const REFRESH_MIN: Duration = Duration::from_millis(10);

/// Below this (and above 0) a reserve can be overrun by the sinks' bursts.
pub(crate) const SMALL_RESERVE: u64 = 16 << 20;

/// `spool.min_free`: bytes, or a percentage of the file system's size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MinFree {
    Bytes(ByteSize),
    Percent(f64),
}

impl Default for MinFree {
    fn default() -> Self {
        MinFree::Bytes(ByteSize(256 << 20))
    }
}

impl MinFree {
    /// "256MiB", 268435456 or "5%".
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().strip_suffix('%') {
            Some(number) => number
                .trim()
                .parse::<f64>()
                .map(MinFree::Percent)
                .map_err(|_| format!("{text:?} is not a percentage like \"5%\"")),
            None => ByteSize::parse(text).map(MinFree::Bytes),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        match *self {
            MinFree::Percent(p) if !(0.0..100.0).contains(&p) => Err(format!(
                "`spool.min_free` ({self}) must be a size such as \"256MiB\" or a percentage of the file system from 0% up to (not including) 100%"
            )),
            _ => Ok(()),
        }
    }

    /// The reserve in bytes on a file system of `total` bytes.
    pub fn bytes(&self, total: u64) -> u64 {
        match *self {
            MinFree::Bytes(size) => size.0,
            MinFree::Percent(p) => (total as f64 * p / 100.0) as u64,
        }
    }

    /// "256MiB", or "5% = 1.2GiB" on a file system of `total` bytes.
    pub fn describe(&self, total: u64) -> String {
        match self {
            MinFree::Bytes(size) => size.to_string(),
            MinFree::Percent(_) => format!("{self} = {}", human_bytes(self.bytes(total))),
        }
    }

    /// Whether a file system of `total` bytes can ever have the reserve free.
    pub fn fits(&self, total: u64) -> bool {
        self.bytes(total) < total
    }
}

impl fmt::Display for MinFree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MinFree::Bytes(size) => size.fmt(f),
            MinFree::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl<'de> Deserialize<'de> for MinFree {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(MinFree::Bytes(ByteSize(n))),
            Raw::Text(text) => MinFree::parse(&text).map_err(serde::de::Error::custom),
        }
    }
}

impl Serialize for MinFree {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// A file system's size and the space an unprivileged writer may still use (root
/// may have a little more on file systems that keep blocks for it; that stays an
/// extra margin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Usage {
    pub free: u64,
    pub total: u64,
}

/// `statvfs(2)` of the file system holding `path`.
pub(crate) fn usage(path: &Path) -> io::Result<Usage> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c_path` is a valid C string and `stat` memory owned here; both outlive
    // the call, and `stat` is only read when it succeeded.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let block = stat.f_frsize as u64;
    Ok(Usage {
        free: (stat.f_bavail as u64).saturating_mul(block),
        total: (stat.f_blocks as u64).saturating_mul(block),
    })
}

/// The nearest existing directory at or above `path` (the data directory may not
/// exist yet when `check-config` runs).
pub(crate) fn existing_ancestor(path: &Path) -> Option<&Path> {
    path.ancestors()
        .find(|p| !p.as_os_str().is_empty() && p.is_dir())
        .or_else(|| Path::new(".").is_dir().then_some(Path::new(".")))
}

/// Checks that the file system holding `path` (or its nearest existing parent) is
/// larger than the reserve: otherwise nothing could ever be accepted.
pub(crate) fn check_fits(path: &Path, min_free: &MinFree) -> Result<(), String> {
    let Some(existing) = existing_ancestor(path) else {
        return Ok(());
    };
    let Ok(found) = usage(existing) else {
        // Unreadable here; `serve` finds out at start, with the real error.
        return Ok(());
    };
    if min_free.fits(found.total) {
        return Ok(());
    }
    Err(format!(
        "`spool.min_free` ({min_free}) is not less than the size of the file system holding {} ({}): eventgate would never accept an event",
        path.display(),
        human_bytes(found.total)
    ))
}

/// A warning for a reserve above 0 and below [`SMALL_RESERVE`] on the file system
/// holding `path` (or its nearest existing parent); `serve` logs it and
/// `check-config` prints it.
pub(crate) fn small_reserve_warning(path: &Path, min_free: &MinFree) -> Option<String> {
    let found = usage(existing_ancestor(path)?).ok()?;
    let bytes = min_free.bytes(found.total);
    (bytes > 0 && bytes < SMALL_RESERVE).then(|| {
        format!(
            "`spool.min_free` ({}) is below {}: the sinks on the same file system write in bursts (a SQLite checkpoint writes up to about 4MiB at once) that can use up such a reserve between two looks at the free space; a spool write that then fails stops the gateway",
            min_free.describe(found.total),
            human_bytes(SMALL_RESERVE)
        )
    })
}

/// `Publish`, `Forward` or an upstream event refused below the reserve.
#[derive(Clone, Debug, Error)]
#[error(
    "the spool's file system ({dir}) has {} free ({free} bytes), below spool.min_free ({}, {required} bytes); the event was not accepted, retry later (accepting again from {} free)",
    human_bytes(*free), min_free.describe(*total), human_bytes(*resume_at),
    dir = dir.display()
)]
pub struct DiskLow {
    pub dir: PathBuf,
    pub min_free: MinFree,
    pub free: u64,
    pub total: u64,
    pub required: u64,
    pub resume_at: u64,
}

/// The reserve's state at one moment, for readiness, status and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskSnapshot {
    pub dir: PathBuf,
    pub min_free: MinFree,
    pub free: u64,
    pub total: u64,
    pub required: u64,
    pub resume_at: u64,
    /// Below the reserve: events are refused.
    pub low: bool,
    /// The last `statvfs` failed (the figures are older).
    pub error: Option<String>,
}

/// What a refresh changed, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transition {
    Reached,
    Recovered,
}

/// The reserve as the spool shares it between the writer (refresh) and publishers
/// (check).
pub(crate) struct Reserve {
    dir: PathBuf,
    min_free: MinFree,
    low: AtomicBool,
    free: AtomicU64,
    total: AtomicU64,
    error: Mutex<Option<String>>,
}

impl Reserve {
    pub(crate) fn new(dir: &Path, min_free: MinFree) -> Self {
        Self {
            dir: dir.to_path_buf(),
            min_free,
            low: AtomicBool::new(false),
            free: AtomicU64::new(u64::MAX),
            total: AtomicU64::new(u64::MAX),
            error: Mutex::new(None),
        }
    }

    fn off(&self) -> bool {
        self.min_free.bytes(u64::MAX) == 0
    }

    /// Looks at the file system again; logs a change of state.
    pub(crate) fn refresh(&self) {
        if self.off() {
            return;
        }
        match usage(&self.dir) {
            Ok(found) => {
                self.set_error(None);
                match self.update(found) {
                    Some(Transition::Reached) => tracing::warn!(
                        dir = %self.dir.display(),
                        free = found.free,
                        min_free = %self.min_free,
                        resume_at = self.resume_at(found.total),
                        "free disk space fell below spool.min_free: Publish and Forward are refused and upstreams held until it is back; forwarders go on delivering what was accepted"
                    ),
                    Some(Transition::Recovered) => tracing::info!(
                        dir = %self.dir.display(),
                        free = found.free,
                        min_free = %self.min_free,
                        "free disk space is back above spool.min_free: accepting events again"
                    ),
                    None => {}
                }
            }
            Err(error) => {
                let text = error.to_string();
                if self.set_error(Some(text)) {
                    tracing::warn!(dir = %self.dir.display(), %error, "cannot read the free space of the spool's file system; keeping the last figures");
                }
            }
        }
    }

    /// Applies new figures; the hysteresis lives here.
    pub(crate) fn update(&self, found: Usage) -> Option<Transition> {
        self.free.store(found.free, Ordering::Relaxed);
        self.total.store(found.total, Ordering::Relaxed);
        let required = self.min_free.bytes(found.total);
        let was_low = self.low.load(Ordering::Relaxed);
        let low = if was_low {
            found.free < self.resume_at(found.total)
        } else {
            found.free < required
        };
        self.low.store(low, Ordering::Release);
        match (was_low, low) {
            (false, true) => Some(Transition::Reached),
            (true, false) => Some(Transition::Recovered),
            _ => None,
        }
    }

    fn resume_at(&self, total: u64) -> u64 {
        let required = self.min_free.bytes(total);
        required.saturating_add(required / 10)
    }

    /// True when this is a new error (not the one already reported).
    fn set_error(&self, error: Option<String>) -> bool {
        let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
        let new = error.is_some() && *slot != error;
        *slot = error;
        new
    }

    /// The hot path: one atomic load, and the figures only when refusing.
    pub(crate) fn check(&self) -> Result<(), DiskLow> {
        if !self.low.load(Ordering::Acquire) {
            return Ok(());
        }
        let snapshot = self.snapshot();
        Err(DiskLow {
            dir: snapshot.dir,
            min_free: snapshot.min_free,
            free: snapshot.free,
            total: snapshot.total,
            required: snapshot.required,
            resume_at: snapshot.resume_at,
        })
    }

    pub(crate) fn snapshot(&self) -> DiskSnapshot {
        let total = self.total.load(Ordering::Relaxed);
        DiskSnapshot {
            dir: self.dir.clone(),
            min_free: self.min_free,
            free: self.free.load(Ordering::Relaxed),
            total,
            required: self.min_free.bytes(total),
            resume_at: self.resume_at(total),
            low: self.low.load(Ordering::Acquire),
            error: self.error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    /// Whether the reserve is configured at all.
    pub(crate) fn enabled(&self) -> bool {
        !self.off()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn sizes_and_percentages_parse_and_print_back() {
        assert_eq!(
            MinFree::parse("256MiB"),
            Ok(MinFree::Bytes(ByteSize(256 * MIB)))
        );
        assert_eq!(MinFree::parse("5%"), Ok(MinFree::Percent(5.0)));
        assert_eq!(MinFree::parse(" 2.5 %"), Ok(MinFree::Percent(2.5)));
        assert!(MinFree::parse("five%").unwrap_err().contains("percentage"));
        assert!(MinFree::parse("12 parsecs").is_err());
        assert_eq!(MinFree::Percent(5.0).to_string(), "5%");
        assert_eq!(MinFree::default().to_string(), "256MiB");
        assert!(MinFree::Percent(100.0).validate().is_err());
        assert!(MinFree::Percent(-1.0).validate().is_err());
        assert!(MinFree::Percent(0.0).validate().is_ok());
        assert_eq!(MinFree::Percent(10.0).bytes(1000), 100);
        assert!(!MinFree::Bytes(ByteSize(1000)).fits(1000));
    }

    #[test]
    fn refusal_starts_below_the_reserve_and_ends_a_tenth_above_it() {
        let reserve = Reserve::new(Path::new("/x"), MinFree::Bytes(ByteSize(10 * MIB)));
        let at = |free| Usage {
            free,
            total: 100 * MIB,
        };
        assert_eq!(reserve.update(at(10 * MIB)), None);
        assert!(reserve.check().is_ok());
        assert_eq!(reserve.update(at(10 * MIB - 1)), Some(Transition::Reached));
        let refused = reserve.check().unwrap_err();
        assert_eq!(
            (refused.free, refused.required, refused.resume_at),
            (10 * MIB - 1, 10 * MIB, 11 * MIB)
        );
        assert_eq!(
            refused.to_string(),
            "the spool's file system (/x) has 10.0MiB free (10485759 bytes), below spool.min_free (10MiB, 10485760 bytes); the event was not accepted, retry later (accepting again from 11.0MiB free)"
        );
        assert_eq!(MinFree::Percent(5.0).describe(100 * MIB), "5% = 5.0MiB");
        // Back at the reserve is not enough: it would flap as sinks take blocks.
        assert_eq!(reserve.update(at(10 * MIB + 1)), None);
        assert!(reserve.check().is_err());
        assert_eq!(reserve.update(at(11 * MIB)), Some(Transition::Recovered));
        assert!(reserve.check().is_ok());
    }

    #[test]
    fn a_zero_reserve_never_refuses() {
        let reserve = Reserve::new(Path::new("/x"), MinFree::Bytes(ByteSize(0)));
        assert!(!reserve.enabled());
        assert_eq!(reserve.update(Usage { free: 0, total: 1 }), None);
        assert!(reserve.check().is_ok());
    }

    #[test]
    fn the_real_file_system_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let found = usage(dir.path()).unwrap();
        assert!(found.total > 0 && found.free <= found.total, "{found:?}");
        assert!(check_fits(&dir.path().join("not/yet"), &MinFree::Bytes(ByteSize(0))).is_ok());
        let error = check_fits(dir.path(), &MinFree::Bytes(ByteSize(u64::MAX))).unwrap_err();
        assert!(error.contains("`spool.min_free`"), "{error}");
    }
}
