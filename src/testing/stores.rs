//! An audit store and a spool, each in a temporary directory removed with it.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use tempfile::TempDir;

use crate::event::Event;
use crate::spool::{Fsync, Recovery, Spool, SpoolSettings};
use crate::store::{EventRow, WriterOptions, insert_rows, open_writer};

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
/// publishers blocked for up to 5 s when full, and no free-space reserve (the
/// reserve has its own tests; these must not depend on the host's disk).
pub(crate) fn spool_settings(fsync: Fsync) -> SpoolSettings {
    let settings: SpoolSettings = toml::from_str(
        r#"
        segment_bytes = 4096
        max_bytes = "1MiB"
        full = "block"
        block_timeout = "5s"
        high_water = 0.9
        min_free = 0
        "#,
    )
    .unwrap();
    SpoolSettings { fsync, ..settings }
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
