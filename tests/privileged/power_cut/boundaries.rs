//! A power cut at every sync boundary of a short workload (issue 43), instead of at
//! random moments: the workload (a new gateway on lazyfs, the SQLite store and the
//! log file, fifty events published one after another, every checkpoint taken) is run
//! once to count its boundaries (each fsync, fdatasync, directory fsync and rename;
//! spool segments of 4 KiB, so that they roll and are deleted in it),
//! then once per boundary with the cut frozen right after it
//! (`lazyfs::Mount::freeze_after`). Unsynced data at the cut is dropped, torn or
//! written back out of order, in turn; every third run is cut again during the
//! recovery that follows. After each, the gateway recovers without help, and the
//! stores, decoded, hold every event acknowledged before the cut point, once: SQLite
//! by its rows' JSON, the log by parsing every line (a torn line left in place would
//! fail), and `audit verify` passes.

use std::path::Path;
use std::time::{Duration, Instant};

use super::lazyfs::{Mount, Writeback};
use super::rig::{Rig, stored};
use super::support::config::Config;
use super::support::*;

/// Enough for the 4 KiB segments to roll twice and the first to be deleted.
const EVENTS: usize = 50;

/// What one run of the workload saw.
struct Run {
    /// Boundaries the workload passed (before the cut).
    boundaries: u64,
    /// Whether the cut was at the boundary asked for (the run may pass fewer).
    frozen: bool,
    /// Events acknowledged before the cut point.
    kept: usize,
    /// The spool's segments when the gateway stopped at the end.
    segments: Vec<String>,
}

fn writeback(n: u64) -> Writeback {
    match n % 3 {
        0 => Writeback::Dropped,
        1 => Writeback::Torn { seed: n },
        _ => Writeback::Reordered { seed: n },
    }
}

/// Every line of the log is a whole JSON object, and its exits are returned.
fn log_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8(text).expect("the log is UTF-8: no torn bytes left in it");
    text.lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line:?}"));
            value["event"]["container_id"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .filter(|id| !id.is_empty())
        .collect()
}

/// The workload, cut after its `point`th boundary (`None`: at its end), unsynced
/// data as `writeback` says; `recovery`: cut again after that many boundaries of
/// the restart.
async fn cut_at(point: Option<u64>, writeback: Writeback, recovery: Option<u64>) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mount point");
    let mount = Mount::new(&data).expect("mount lazyfs (needs root and /dev/fuse)");
    if let Some(point) = point {
        mount.freeze_after(point);
    }
    let checkpoint = "checkpoint = { interval = \"50ms\" }\n";
    let config = Config::new()
        .toml("[spool]\nsegment_bytes = \"4KiB\"\n")
        .sqlite("audit", "audit.db", checkpoint)
        .file("log", "events.jsonl", checkpoint)
        .write(dir.path());
    let gateway = Gateway::start_in(dir, &["--config", &config]);
    let mut rig = Rig {
        gateway,
        mount,
        data: data.clone(),
    };
    let mut client = rig.gateway.client().await;
    let mut acked = Vec::new();
    for n in 0..EVENTS {
        let id = format!("cut-{n}");
        client.publish(exit_request(&id)).await.expect("publish");
        acked.push((id, Instant::now()));
    }
    drop(client);
    // Both sinks checkpointed past every event: the spool may let them go.
    wait_for("both cursors past every event", DEADLINE, || {
        let cursors = std::fs::read_to_string(data.join("spool/cursors")).ok()?;
        let past = |name: &str| {
            cursors
                .lines()
                .filter_map(|l| l.strip_prefix(name))
                .any(|n| n.trim().parse::<usize>().is_ok_and(|n| n > EVENTS))
        };
        (past("audit ") && past("log ")).then_some(())
    });
    rig.gateway.kill9();
    let frozen_at = rig.mount.frozen_at();
    let boundaries = rig.mount.boundaries();
    rig.mount
        .cut_with(writeback)
        .expect("remount after the cut");
    let kept: Vec<&str> = acked
        .iter()
        .filter(|(_, at)| frozen_at.is_none_or(|frozen| *at < frozen))
        .map(|(id, _)| id.as_str())
        .collect();
    if let Some(recovery) = recovery {
        rig.mount.freeze_after(recovery);
        rig.gateway.respawn();
        rig.gateway.kill9();
        rig.mount
            .cut_with(Writeback::Dropped)
            .expect("remount after the cut during recovery");
    }
    rig.gateway.respawn();
    let what = format!(
        "point {point:?} ({writeback:?}, recovery cut {recovery:?}): every event acknowledged \
         before it ({}) in both stores",
        kept.len()
    );
    let db = data.join("audit.db");
    let log = data.join("events.jsonl");
    let deadline = Instant::now() + DEADLINE;
    loop {
        let rows = stored(&db);
        let lines = log_lines(&log);
        if kept
            .iter()
            .all(|id| rows.contains_key(*id) && lines.iter().any(|l| l == id))
        {
            let doubled: Vec<_> = rows.iter().filter(|(_, n)| **n > 1).collect();
            assert!(doubled.is_empty(), "{what}: stored twice: {doubled:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: timed out; SQLite has {rows:?}, the log {lines:?}\n{}",
            rig.gateway.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = rig.gateway.terminate();
    assert!(status.success(), "{what}: {}", rig.gateway.stderr_text());
    let mut segments: Vec<String> = std::fs::read_dir(data.join("spool/segments"))
        .expect("the spool's segments")
        .filter_map(|entry| Some(entry.ok()?.file_name().to_string_lossy().into_owned()))
        .collect();
    segments.sort();
    let verified = eventgate()
        .args(["audit", "verify", "--db"])
        .arg(&db)
        .output()
        .expect("audit verify");
    assert!(
        verified.status.success(),
        "{what}: audit verify: {}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
    Run {
        boundaries,
        frozen: frozen_at.is_some(),
        kept: kept.len(),
        segments,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_at_every_sync_and_rename_of_a_short_run_loses_nothing_acknowledged() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    let whole = cut_at(None, Writeback::Dropped, None).await;
    assert_eq!(whole.kept, EVENTS);
    // The segments rolled, and the first was deleted once both sinks had it.
    assert!(
        whole
            .segments
            .first()
            .is_some_and(|first| first != &format!("{:020}.log", 1)),
        "segments at the end: {:?}",
        whole.segments
    );
    assert!(
        whole.boundaries > EVENTS as u64,
        "a workload of {} boundaries",
        whole.boundaries
    );
    let started = Instant::now();
    let (mut covered, mut kept) = (0, 0);
    for point in 1..=whole.boundaries {
        let recovery = (point % 3 == 0).then_some(1 + point % 5);
        let run = cut_at(Some(point), writeback(point), recovery).await;
        covered += u64::from(run.frozen);
        kept += run.kept;
    }
    eprintln!(
        "cut points: {covered} of {} boundaries reached and cut at ({} runs, {:.0?}); \
         {kept} acknowledged events found after their cuts",
        whole.boundaries,
        whole.boundaries,
        started.elapsed()
    );
    // A run may pass fewer boundaries than the counting run (syncs that batch
    // differently); most must be reached for the enumeration to mean anything.
    assert!(
        covered * 10 >= whole.boundaries * 9,
        "only {covered} of {} cut points reached",
        whole.boundaries
    );
}
