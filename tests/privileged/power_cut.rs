//! Power cuts under load (issue 33): the data directory on lazyfs, a file system that
//! keeps only what was synced; publishers and an upstream containerd keep the gateway
//! busy while the power is cut at random points (SIGKILL, then everything unsynced
//! dropped, then the gateway started again on what is left). Per `spool.fsync`:
//! - `batch` and `always`: every event whose Publish returned OK is in the spool (or
//!   already durable in the sinks) after each cut, and at the end in the log file,
//!   in the SQLite store exactly once and in Kafka; `audit verify` passes.
//! - `none`: a cut may lose exactly the events acknowledged since the spool's last
//!   sync (a segment roll), and never an earlier one; nothing doubled, store intact.
//!
//! Each cut is followed by a plain restart: the gateway must open what the cut left
//! without help.

use crate::support;
// Only this test mounts it: kept out of `support/mod.rs` so the other test binaries
// do not build and link FUSE.
#[path = "power_cut/boundaries.rs"]
mod boundaries;
#[path = "../support/lazyfs/mod.rs"]
mod lazyfs;
#[path = "power_cut/rig.rs"]
mod rig;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rig::{Acked, Outcome, Rig, containers, in_kafka, publisher, stored, upstream_topics};
use support::config::Config;
use support::containerd::Containerd;
use support::tansu::Tansu;
use support::*;

/// Small segments, so that segments roll, are deleted and their directory synced
/// between cuts, as over days in production.
const SEGMENT_BYTES: &str = "64KiB";

/// The cuts of one run, one gateway at a time on the machine's two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Settings {
    fsync: &'static str,
    /// Extra keys of the `sqlite` and the `file` forwarder: their own sync settings.
    sqlite: &'static str,
    file: &'static str,
    cuts: usize,
}

fn config(dir: &Path, settings: &Settings, brokers: &str, containerd: &str) -> String {
    Config::new()
        .toml(&format!(
            "[spool]\nfsync = \"{}\"\nsegment_bytes = \"{SEGMENT_BYTES}\"\n",
            settings.fsync
        ))
        .sqlite("audit", "audit.db", &format!("{}\n", settings.sqlite))
        .file("log", "events.jsonl", &format!("{}\n", settings.file))
        .kafka("kafka", brokers, "events", 1, "")
        .upstream("node", containerd, "")
        .write(dir)
}

fn seed() -> u64 {
    std::env::var("POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random())
}

async fn run(settings: &Settings) -> Outcome {
    let seed = seed();
    eprintln!(
        "power cuts, spool.fsync = {:?}: seed {seed} (POWER_CUT_SEED to repeat)",
        settings.fsync
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tansu = Tansu::start();
    let containerd = Containerd::start();
    containerd.import_busybox();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mount point");
    let mount = lazyfs::Mount::new(&data).expect("mount lazyfs (needs root and /dev/fuse)");
    let config = config(
        dir.path(),
        settings,
        &tansu.brokers(),
        &containerd.address(),
    );
    let gateway = Gateway::start_in(dir, &["--config", &config]);
    let address = gateway.address();
    let rig = Arc::new(Mutex::new(Rig {
        gateway,
        mount,
        data: data.clone(),
    }));

    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let publishers: Vec<_> = (0..4)
        .map(|p| {
            tokio::spawn(publisher(
                address.clone(),
                p,
                Arc::clone(&stop),
                Arc::clone(&acked),
            ))
        })
        .collect();
    let runs = Arc::new(AtomicUsize::new(0));
    let runner = {
        let socket = containerd.socket.clone();
        let fifos = containerd.dir.path().join("fifo");
        let (stop, runs) = (Arc::clone(&stop), Arc::clone(&runs));
        std::thread::spawn(move || containers(socket, fifos, stop, runs))
    };

    let mut cuts = Vec::new();
    for _ in 0..settings.cuts {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..2500))).await;
        let (rig, acked) = (Arc::clone(&rig), Arc::clone(&acked));
        let cut = tokio::task::spawn_blocking(move || rig.lock().unwrap().power_cut(&acked))
            .await
            .expect("power cut");
        cuts.push(cut);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    for p in publishers {
        p.await.expect("publisher");
    }
    runner.join().expect("container runs");
    let acked = std::mem::take(&mut *acked.lock().unwrap());

    // One last event after everything else: once a sink has it, it has had its
    // chance at every earlier one (forwarders deliver in spool order).
    let mut client = eventgate::client::connect(&address, DEADLINE)
        .await
        .expect("connect");
    client
        .publish(exit_request("END"))
        .await
        .expect("publish the last event");
    let db = data.join("audit.db");
    let sqlite = wait_for("the last event in SQLite", Duration::from_secs(60), || {
        let rows = stored(&db);
        rows.contains_key("END").then_some(rows)
    });
    let log_path = data.join("events.jsonl");
    let log = wait_for("the last event in the log", Duration::from_secs(60), || {
        let lines = logged_exits(&log_path);
        lines.iter().any(|id| id == "END").then_some(lines)
    });
    let brokers = tansu.brokers();
    let kafka = wait_for("the last event in Kafka", Duration::from_secs(60), || {
        let ids = in_kafka(&brokers);
        ids.iter().any(|id| id == "END").then_some(ids)
    });
    let upstream_exits = sqlite.keys().filter(|id| id.starts_with("pc-")).count();
    let upstream_topics = upstream_topics(&db);

    let mut rig = Arc::try_unwrap(rig)
        .ok()
        .expect("the rig, once every cut is done")
        .into_inner()
        .unwrap();
    let status = rig.gateway.terminate();
    assert!(status.success(), "{}", rig.gateway.stderr_text());
    let verify = eventgate()
        .args(["audit", "verify", "--data-dir", path_str(&data)])
        .output()
        .expect("run eventgate audit verify");
    assert!(
        verify.status.success(),
        "audit verify after {} power cuts: {}{}",
        cuts.len(),
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let stats = rig.mount.stats();
    drop(rig);
    Outcome {
        seed,
        cuts,
        acked,
        sqlite,
        log,
        kafka,
        container_runs: runs.load(Ordering::SeqCst),
        upstream_exits,
        upstream_topics,
        stats,
    }
}

/// `batch` and `always`: nothing acknowledged is ever lost, nothing doubled.
fn assert_nothing_lost(outcome: &Outcome, settings: &Settings) {
    assert_nothing_lost_but(outcome, settings, None);
}

/// [`assert_nothing_lost`] in every sink but `except`, whose own settings let a
/// power cut take what it was sent.
fn assert_nothing_lost_but(outcome: &Outcome, settings: &Settings, except: Option<&str>) {
    let report = outcome.report(settings);
    eprintln!("{report}");
    assert!(outcome.acked.len() > 200, "too little load: {report}");
    for (i, cut) in outcome.cuts.iter().enumerate() {
        if except.is_some() {
            // The check after each cut counts the log as a copy; not this one.
            break;
        }
        assert!(
            cut.missing.is_empty(),
            "cut {i}: acknowledged, then neither in the spool nor in the log: {:?}\n{report}",
            cut.missing
        );
    }
    for (sink, missing) in outcome.missing() {
        if except == Some(sink) {
            continue;
        }
        assert!(
            missing.is_empty(),
            "acknowledged, missing from {sink}: {missing:?}\n{report}"
        );
    }
    let doubled = outcome.doubled_in_sqlite();
    assert!(
        doubled.is_empty(),
        "stored more than once: {doubled:?}\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_under_fsync_batch_lose_no_acknowledged_event() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The sinks' defaults: SQLite `synchronous = normal`, the log synced at checkpoints.
    let settings = Settings {
        fsync: "batch",
        sqlite: "",
        file: "",
        cuts: 12,
    };
    let outcome = run(&settings).await;
    assert_nothing_lost(&outcome, &settings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_under_fsync_always_lose_no_acknowledged_event() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The sinks' other settings: they change how much is sent again, never what is kept.
    let settings = Settings {
        fsync: "always",
        sqlite: "synchronous = \"full\"",
        file: "fsync = \"interval\"\nfsync_interval = \"200ms\"",
        cuts: 12,
    };
    let outcome = run(&settings).await;
    assert_nothing_lost(&outcome, &settings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_under_fsync_none_lose_only_events_acknowledged_since_the_last_spool_sync() {
    let _one = ONE_AT_A_TIME.lock().await;
    let settings = Settings {
        fsync: "none",
        sqlite: "",
        file: "",
        cuts: 12,
    };
    let outcome = run(&settings).await;
    let report = outcome.report(&settings);
    eprintln!("{report}");
    assert!(outcome.acked.len() > 200, "too little load: {report}");
    let acked_at: HashMap<&str, Instant> = outcome
        .acked
        .iter()
        .map(|(id, at)| (id.as_str(), *at))
        .collect();
    // Each event may be lost only to the first cut after its acknowledgement, and
    // only if that cut came before the spool synced it.
    let may_lose = |id: &str| -> bool {
        let at = acked_at[id];
        outcome
            .cuts
            .iter()
            .find(|cut| cut.at > at)
            .is_some_and(|cut| cut.spool_synced.is_none_or(|synced| synced < at))
    };
    let at_risk = acked_at.keys().filter(|id| may_lose(id)).count();
    eprintln!(
        "spool.fsync = \"none\": {at_risk} of {} acknowledged events were acknowledged after \
         the spool's last sync before a cut (at risk)",
        outcome.acked.len()
    );
    for (i, cut) in outcome.cuts.iter().enumerate() {
        let beyond: Vec<&String> = cut.missing.iter().filter(|id| !may_lose(id)).collect();
        assert!(
            beyond.is_empty(),
            "cut {i}: lost although acknowledged before the spool's last sync: {beyond:?}\n{report}"
        );
    }
    for (sink, missing) in outcome.missing() {
        let beyond: Vec<&&str> = missing.iter().filter(|id| !may_lose(id)).collect();
        assert!(
            beyond.is_empty(),
            "missing from {sink} although acknowledged before the spool's last sync: {beyond:?}\n{report}"
        );
    }
    let doubled = outcome.doubled_in_sqlite();
    assert!(
        doubled.is_empty(),
        "stored more than once: {doubled:?}\n{report}"
    );
}

/// A gateway's first files: the log file and the directories made at start
/// (`checkpoints/`, `state/`) must be in their directories before anything in them
/// counts as durable, or a cut early in the gateway's life takes them whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_gateways_log_file_and_checkpoint_survive_a_power_cut() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mount point");
    let mount = lazyfs::Mount::new(&data).expect("mount lazyfs (needs root and /dev/fuse)");
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        "[[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n",
    )
    .expect("write config");
    let gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let mut rig = Rig {
        gateway,
        mount,
        data: data.clone(),
    };
    let mut client = rig.gateway.client().await;
    let ids: Vec<String> = (0..10).map(|n| format!("first-{n}")).collect();
    for id in &ids {
        client.publish(exit_request(id)).await.expect("publish");
    }
    // The checkpoint (fdatasync of the log, then its record) has happened once the
    // spool's cursors file, written after it, has the log past every event.
    wait_for(
        "the log's cursor persisted",
        Duration::from_secs(10),
        || {
            let cursors = std::fs::read_to_string(data.join("spool/cursors")).ok()?;
            cursors
                .lines()
                .filter_map(|l| l.strip_prefix("log "))
                .any(|n| n.parse::<u64>().is_ok_and(|n| n > 10))
                .then_some(())
        },
    );
    drop(client);
    rig.gateway.kill9();
    rig.mount.cut().expect("remount after the cut");
    assert_eq!(
        logged_exits(&data.join("events.jsonl")),
        ids,
        "the log file, as checkpointed"
    );
    assert!(
        data.join("checkpoints/log.file").is_file(),
        "the log's checkpoint record"
    );
    rig.gateway.respawn();
    let status = rig.gateway.terminate();
    assert!(status.success(), "{}", rig.gateway.stderr_text());
}

/// A sink's own sync setting is its own business: the log file left to the OS
/// (`fsync = "never"`) may lose what it was sent, and the cursor has moved past it,
/// so it is not sent again; SQLite and Kafka lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_with_the_log_file_never_synced_lose_only_its_lines() {
    let _one = ONE_AT_A_TIME.lock().await;
    let settings = Settings {
        fsync: "batch",
        sqlite: "",
        file: "fsync = \"never\"",
        cuts: 8,
    };
    let outcome = run(&settings).await;
    assert_nothing_lost_but(&outcome, &settings, Some("the log file"));
}
