//! An audit store and a spool, each in a temporary directory removed with it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;
use tempfile::TempDir;

use crate::event::Event;
use crate::spool::{Fsync, FullPolicy, MinFree, Recovery, Spool, SpoolSettings};
use crate::store::{EventRow, WriterOptions, insert_rows, open_writer};
use crate::units::ByteSize;

/// `audit.db` in a directory of its own, opened with the writer's defaults. The
/// file is created by the first [`TempStore::writer`] or [`TempStore::insert`].
pub(crate) struct TempStore {
    dir: TempDir,
    path: PathBuf,
}

impl TempStore {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        Self { dir, path }
    }

    /// A store holding `events`, in order.
    pub(crate) fn with(events: &[Event]) -> Self {
        let store = Self::new();
        store.insert(events);
        store
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The directory the store is in, for other files a test keeps beside it.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn writer(&self) -> Connection {
        open_writer(&self.path, &WriterOptions::default()).unwrap()
    }

    /// Appends `events` through the store's own insert.
    pub(crate) fn insert(&self, events: &[Event]) {
        insert(&self.path, events);
    }
}

/// Appends `events` to the audit store at `path` (created if need be) through the
/// store's own writer and insert.
pub(crate) fn insert(path: &Path, events: &[Event]) {
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    let mut conn = open_writer(path, &WriterOptions::default()).unwrap();
    insert_rows(&mut conn, &rows).unwrap();
}

/// Small settings whose limits tests reach quickly: 4 KiB segments, 1 MiB in all,
/// publishers blocked for up to 5 s when full.
pub(crate) fn spool_settings(fsync: Fsync) -> SpoolSettings {
    SpoolSettings {
        fsync,
        segment_bytes: ByteSize(4096),
        max_bytes: ByteSize(1 << 20),
        full: FullPolicy::Block,
        block_timeout: Duration::from_secs(5),
        high_water: 0.9,
        // The reserve has its own tests; these must not depend on the host's disk.
        min_free: MinFree::Bytes(ByteSize(0)),
    }
}

/// A spool's directory, `spool/` in a temporary directory (as in a gateway's data
/// directory, where other state sits beside it).
pub(crate) struct TempSpool {
    dir: TempDir,
    path: PathBuf,
}

impl TempSpool {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        Self { dir, path }
    }

    /// The spool's directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The directory around the spool's.
    pub(crate) fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Opens (or reopens) the spool with [`spool_settings`] and `fsync = "batch"`,
    /// keeping cursors for `forwarders`.
    pub(crate) fn open(&self, forwarders: &[&str]) -> (Spool, Recovery) {
        self.open_with(&spool_settings(Fsync::Batch), forwarders)
    }

    pub(crate) fn open_with(
        &self,
        settings: &SpoolSettings,
        forwarders: &[&str],
    ) -> (Spool, Recovery) {
        Spool::open(&self.path, settings, forwarders).unwrap()
    }
}
