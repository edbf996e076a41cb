//! Opening the spool: directories, recovery, cursors, the active segment and the
//! writer thread.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use tokio::sync::{Notify, watch};

use super::shared::{Gauges, Progress, Segment, Shared, State};
use super::space::{self, Reserve};
use super::{Recovery, SpoolError, SpoolSettings, cursors, files, format, recovery, writer};

pub(super) fn open(
    dir: &Path,
    settings: &SpoolSettings,
    forwarders: &[&str],
) -> Result<(Arc<Shared>, JoinHandle<()>, Recovery), SpoolError> {
    settings.validate().map_err(SpoolError::Settings)?;
    let dirs = files::Dirs::new(dir);
    // First: a newer eventgate's spool is left exactly as it is.
    let stamped = format::check(&dirs.root)?;
    for path in [&dirs.root, &dirs.segments, &dirs.corrupt] {
        crate::fsmode::create_dir_all(path).map_err(|source| SpoolError::Dir {
            action: "create the spool directory",
            path: path.clone(),
            source,
        })?;
    }
    if stamped.is_none() {
        format::stamp_unstamped(&dirs)?;
    }
    space::check_fits(&dirs.root, &settings.min_free).map_err(SpoolError::Settings)?;
    if let Some(warning) = space::small_reserve_warning(&dirs.root, &settings.min_free) {
        tracing::warn!(dir = %dirs.root.display(), "{warning}");
    }
    // Before the first append: a gateway started on a nearly full disk refuses
    // events from the first one, and drains what the spool recovered.
    let reserve = Reserve::new(&dirs.root, settings.min_free);
    reserve.refresh();
    let mut report = Recovery::default();
    let recovered = recovery::recover(&dirs, &mut report).map_err(|source| SpoolError::Dir {
        action: "list spool segments in",
        path: dirs.segments.clone(),
        source,
    })?;
    let mut segments = VecDeque::from(recovered.segments);
    let saved = open_cursors(&dirs, &mut report)?;
    let mut next_seq = (recovered.last_seq + 1)
        .max(segments.back().map_or(1, |s| s.first_seq))
        .max(
            saved
                .as_ref()
                .and_then(|c| c.values().max().copied())
                .unwrap_or(1),
        );
    let (file, len) = open_active(&dirs, settings, &mut segments, next_seq)?;
    next_seq = next_seq.max(segments.back().map_or(1, |s| s.end_seq));
    let first_seq = segments.front().map_or(next_seq, |s| s.first_seq);
    let cursors = reconcile(saved, forwarders, first_seq, next_seq, &mut report);
    report.next_seq = next_seq;
    let total_bytes = segments.iter().map(|s| s.bytes).sum();
    let mut state = State {
        next_seq,
        buf: Vec::new(),
        ends: Vec::new(),
        segments,
        total_bytes,
        cursors,
        cursors_dirty: true,
        delivered: Default::default(),
        doomed: Vec::new(),
        closing: false,
        writer_idle: false,
        failed: None,
        waiters: VecDeque::new(),
        gauges: Gauges::new(),
    };
    state.trim();
    for path in std::mem::take(&mut state.doomed) {
        if let Err(error) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), %error, "cannot delete a spool segment");
        }
    }
    cursors::save(&dirs.cursors(), &state.cursors).map_err(|source| SpoolError::Dir {
        action: "write",
        path: dirs.cursors(),
        source,
    })?;
    state.cursors_dirty = false;
    state.publish_gauges();
    log_recovery(dir, &report);
    let (progress, _) = watch::channel(Progress {
        durable_seq: next_seq - 1,
        ..Progress::default()
    });
    let shared = Arc::new(Shared {
        dirs,
        settings: settings.clone(),
        reserve,
        state: Mutex::new(state),
        wake: Condvar::new(),
        progress,
        room: Notify::new(),
        groups: AtomicU64::new(0),
        fsyncs: AtomicU64::new(0),
        #[cfg(test)]
        gate: super::gate::SyncGate::new(),
    });
    let writer = writer::Writer {
        shared: Arc::clone(&shared),
        file,
        len,
        has_records: len > 0,
        metrics: writer::WriterMetrics::new(),
        gather: writer::Gather::default(),
    };
    let thread = std::thread::Builder::new()
        .name("spool-writer".into())
        .spawn(move || writer.run())
        .map_err(SpoolError::Thread)?;
    Ok((shared, thread, report))
}

fn open_cursors(
    dirs: &files::Dirs,
    report: &mut Recovery,
) -> Result<Option<cursors::Cursors>, SpoolError> {
    let path = dirs.cursors();
    let loaded = cursors::load(&path).map_err(|source| SpoolError::Dir {
        action: "read",
        path: path.clone(),
        source,
    })?;
    match loaded {
        Ok(saved) => Ok(saved),
        Err(problem) => {
            tracing::warn!(path = %path.display(), problem, "spool cursors cannot be trusted; every forwarder restarts at the oldest record kept");
            report.cursors_reset = true;
            match files::move_aside(&dirs.corrupt, &path, "cursors") {
                Ok(kept) => report.quarantined.push(kept),
                Err(error) => tracing::error!(%error, "cannot move the spool cursors file aside"),
            }
            Ok(None)
        }
    }
}

/// Opens the last segment for appending when it has room, else starts a new one.
fn open_active(
    dirs: &files::Dirs,
    settings: &SpoolSettings,
    segments: &mut VecDeque<Segment>,
    next_seq: u64,
) -> Result<(std::fs::File, u64), SpoolError> {
    let reuse = segments
        .back()
        .filter(|s| s.bytes < settings.segment_bytes.0)
        .map(|s| (s.path.clone(), s.bytes));
    let (path, len) = match reuse {
        Some(found) => found,
        None => {
            let path = dirs.segment(next_seq);
            segments.push_back(Segment {
                first_seq: next_seq,
                end_seq: next_seq,
                bytes: 0,
                path: path.clone(),
            });
            (path, 0)
        }
    };
    let file = crate::fsmode::open(OpenOptions::new().create(true).append(true), &path).map_err(
        |source| SpoolError::Dir {
            action: "open for writing the spool segment",
            path: path.clone(),
            source,
        },
    )?;
    files::sync_dir(&dirs.segments).map_err(|source| SpoolError::Dir {
        action: "sync",
        path: dirs.segments.clone(),
        source,
    })?;
    Ok((file, len))
}

/// Cursors for exactly the configured forwarders, within what the spool holds.
fn reconcile(
    saved: Option<cursors::Cursors>,
    forwarders: &[&str],
    first_seq: u64,
    next_seq: u64,
    report: &mut Recovery,
) -> cursors::Cursors {
    let reset = saved.is_none() && report.cursors_reset;
    let mut saved = saved.unwrap_or_default();
    let mut cursors = cursors::Cursors::new();
    for &name in forwarders {
        let cursor = match saved.remove(name) {
            Some(seq) => seq.min(next_seq),
            None if reset => first_seq,
            None => {
                report.cursors_added.push(name.to_string());
                next_seq
            }
        };
        cursors.insert(name.to_string(), cursor);
    }
    for name in saved.into_keys() {
        tracing::info!(
            forwarder = name,
            "dropping the spool cursor of a forwarder no longer configured"
        );
        report.cursors_dropped.push(name);
    }
    cursors
}

fn log_recovery(dir: &Path, report: &Recovery) {
    if report.corrupt_ranges > 0 {
        metrics::counter!("eventgate_spool_corrupt_records_total")
            .increment(report.missing_records.max(report.corrupt_ranges));
    }
    if report.damaged() || report.truncated_bytes > 0 {
        tracing::warn!(
            dir = %dir.display(),
            records = report.records,
            next_seq = report.next_seq,
            truncated_bytes = report.truncated_bytes,
            corrupt_ranges = report.corrupt_ranges,
            corrupt_bytes = report.corrupt_bytes,
            missing_records = report.missing_records,
            cursors_reset = report.cursors_reset,
            "spool recovered with damage; the bad bytes are in corrupt/"
        );
    } else {
        tracing::info!(dir = %dir.display(), records = report.records, segments = report.segments, next_seq = report.next_seq, "spool opened");
    }
}
