//! A disk that fills up, through the real binary on a real small file system: a tmpfs
//! of a few MiB as the data directory, holding the spool and both default sinks (the
//! JSON-lines file and the SQLite store). Mounting needs root, as these tests have in
//! CI; without it they fail saying so rather than pass having tested nothing.
//!
//! Also: one gateway per data directory (the lock), and read-only commands beside it.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use serde_json::Value;
use support::config::Config;
use support::*;

/// A tmpfs of `size` mounted on `at` for the test's life.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).expect("mount point");
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "these tests need a small real file system: mounting a tmpfs on {} failed (they must run as root, as in CI): {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A file of `mib` MiB of real blocks on the file system, to free later.
fn ballast(path: &Path, mib: usize) {
    std::fs::write(path, vec![0x5a; mib << 20]).expect("write the ballast file");
}

/// Container id -> rows, for exit events in the SQLite store.
fn stored(db: &Path) -> BTreeMap<String, i64> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return BTreeMap::new();
    };
    let Ok(mut statement) = conn.prepare(
        "SELECT json_extract(event, '$.container_id'), count(*) FROM events
         WHERE topic = '/tasks/exit' GROUP BY 1",
    ) else {
        return BTreeMap::new();
    };
    statement
        .query_map([], |r| Ok((short(&r.get::<_, String>(0)?), r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .unwrap_or_default()
}

/// Container id -> lines, for exit events in the JSON-lines file.
fn logged(path: &Path) -> BTreeMap<String, i64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Ok(line) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if line["topic"] == "/tasks/exit" {
            let id = short(line["event"]["container_id"].as_str().unwrap_or(""));
            *counts.entry(id).or_insert(0) += 1;
        }
    }
    counts
}

/// Ids carry padding after a '.', so that each event takes room on the disk.
fn short(id: &str) -> String {
    id.split('.').next().unwrap_or(id).to_owned()
}

fn padded(id: &str) -> String {
    format!("{id}.{}", "x".repeat(1000))
}

/// Every id once.
fn once(ids: &BTreeSet<String>) -> BTreeMap<String, i64> {
    ids.iter().map(|id| (id.clone(), 1)).collect()
}

/// Four publishers, each on its own connection, publishing until each is refused;
/// returns the ids answered OK and the refused ids with their refusals.
async fn publish_until_refused(
    gw: &Gateway,
    prefix: &str,
) -> (BTreeSet<String>, Vec<(String, tonic::Status)>) {
    let accepted = Arc::new(Mutex::new(BTreeSet::new()));
    let mut tasks = Vec::new();
    for p in 0..4 {
        let mut client = gw.client().await;
        let accepted = Arc::clone(&accepted);
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            for n in 0..1_000_000 {
                let id = format!("{prefix}{p}-{n}");
                match client.publish(exit_request(&padded(&id))).await {
                    Ok(_) => {
                        accepted.lock().expect("lock").insert(id);
                    }
                    Err(status) => return (id, status),
                }
            }
            panic!("publisher {p} was never refused: the disk did not fill up");
        }));
    }
    let mut refusals = Vec::new();
    for task in tasks {
        refusals.push(task.await.expect("publisher task"));
    }
    let accepted = accepted.lock().expect("lock").clone();
    (accepted, refusals)
}

/// Publishes `id` again and again until it is answered OK (a deadline, no restart).
async fn publish_once_accepted(
    client: &mut eventgate::proto::containerd::services::events::v1::events_client::EventsClient<
        tonic::transport::Channel,
    >,
    id: &str,
) {
    let end = std::time::Instant::now() + DEADLINE;
    loop {
        match client.publish(exit_request(id)).await {
            Ok(_) => return,
            Err(status) => assert!(
                std::time::Instant::now() < end,
                "still refused after {DEADLINE:?}: {status:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Below `spool.min_free` the gateway refuses events with RESOURCE_EXHAUSTED and says
/// so in /readyz, while /healthz stays 200 (it will recover by itself, restarting it
/// would not help). Every event it had answered OK reaches both sinks exactly once,
/// drained into the reserve; upstream events wait in the upstream instead of being
/// lost; once space is freed, publishing works again without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_reserve_events_are_refused_every_accepted_one_is_delivered_and_accepting_resumes_by_itself()
 {
    let up_dir = tempfile::tempdir().expect("tempdir");
    let up_config = Config::new().toml("forwarder = []\n").write(up_dir.path());
    let upstream = Gateway::start_in(up_dir, &["--config", &up_config]);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // The reserve is larger than a SQLite checkpoint's burst (up to about 4 MiB at
    // once): a smaller one can be used up between two looks at the free space.
    // The ballast is freed to resume: it must outweigh what the drain writes into the
    // reserve (the stores grow by about a quarter more than the spool held) plus the
    // 10% above min_free at which accepting starts again.
    let _fs = Tmpfs::mount(&data, "48m");
    ballast(&data.join("ballast"), 14);
    let config = Config::new()
        .toml(&format!(
            r#"
[spool]
min_free = "16MiB"

[[upstream]]
name = "up"
address = "{}"
reconnect = {{ initial = "50ms", max = "1s" }}
"#,
            upstream.address()
        ))
        .write(dir.path());
    let mut gw = Gateway::start_in(dir, &["--config", &config]);
    let admin = gw.admin_addr();
    wait_for("the upstream to be subscribed", DEADLINE, || {
        (http_get(admin, "/readyz").0 == 200).then_some(())
    });

    let (accepted, refusals) = publish_until_refused(&gw, "a").await;
    assert!(accepted.len() > 100, "only {} accepted", accepted.len());
    for (_, refusal) in &refusals {
        assert_eq!(
            refusal.code(),
            tonic::Code::ResourceExhausted,
            "{refusal:?}\n{}",
            gw.stderr_text()
        );
        let message = refusal.message();
        assert!(
            message.contains("below spool.min_free (16MiB")
                && message.contains("free")
                && message.contains("retry later"),
            "{message}"
        );
    }
    let (code, body) = http_get(admin, "/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("spool disk: ")
            && body.contains("below the reserve, Publish and Forward are refused"),
        "{body}"
    );
    assert_eq!(http_get(admin, "/healthz").0, 200);
    let metrics = scrape(&mut gw);
    assert_eq!(
        metrics.get("eventgate_spool_disk_reserve_reached", &[]),
        Some(1.0)
    );
    assert_eq!(
        metrics.get("eventgate_spool_disk_min_free_bytes", &[]),
        Some(f64::from(16 << 20))
    );
    let free = metrics
        .get("eventgate_spool_disk_free_bytes", &[])
        .expect("free bytes gauge");
    assert!(free < f64::from(16 << 20) * 1.1, "{free}");
    assert!(
        metrics
            .get(
                "eventgate_events_rejected_total",
                &[("reason", "disk_reserve")]
            )
            .is_some_and(|n| n >= 4.0)
    );

    // While refusing, upstream events are held in the upstream, not dropped.
    let mut up = upstream.client().await;
    let held: BTreeSet<String> = (0..20).map(|n| format!("u{n}")).collect();
    for id in &held {
        up.publish(exit_request(&padded(id)))
            .await
            .expect("the upstream itself accepts");
    }

    // What was acknowledged drains into the reserve, into both sinks, once each.
    let db = data.join("audit.db");
    let log = data.join("events.jsonl");
    wait_for("every accepted event in both sinks", DEADLINE, || {
        (stored(&db) == once(&accepted) && logged(&log) == once(&accepted)).then_some(())
    });
    let mut client = gw.client().await;
    let still = client.publish(exit_request("still-low")).await.unwrap_err();
    assert_eq!(still.code(), tonic::Code::ResourceExhausted);

    std::fs::remove_file(data.join("ballast")).expect("free the ballast");
    publish_once_accepted(&mut client, "resumed").await;
    wait_for("/readyz to be 200 again", DEADLINE, || {
        (http_get(admin, "/readyz").0 == 200).then_some(())
    });
    let mut everything = accepted.clone();
    everything.extend(held.iter().cloned());
    everything.insert("resumed".into());
    wait_for(
        "the held upstream events and the new one in both sinks",
        DEADLINE,
        || (stored(&db) == once(&everything) && logged(&log) == once(&everything)).then_some(()),
    );
    let conn = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("db");
    let gaps: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE topic = '/eventgate/upstream/disconnected'",
            [],
            |r| r.get(0),
        )
        .expect("count gap markers");
    assert_eq!(gaps, 0, "the upstream subscription was held, not broken");
    assert!(gw.terminate().success(), "{}", gw.stderr_text());
}

/// A spool write that fails for real (no reserve, a full tmpfs): readiness names the
/// failure at once, forwarders drain what they can until `pipeline.drain_timeout`,
/// and the process exits with status 1 for its supervisor to restart it, rather than
/// living on refusing everything. Every event answered OK is there after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_spool_write_makes_the_gateway_unready_then_exit_1_and_a_restart_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let _fs = Tmpfs::mount(&data, "12m");
    ballast(&data.join("ballast"), 2);
    let config = Config::new()
        .toml("[spool]\nmin_free = \"0\"\n\n[pipeline]\ndrain_timeout = \"3s\"\n")
        .write(dir.path());
    let mut gw = Gateway::start_in(dir, &["--config", &config]);
    let admin = gw.admin_addr();
    // Until the endpoint goes away with the process: the last /readyz answers.
    let readiness = std::thread::spawn(move || {
        let mut last = None;
        while let Ok(answer) = try_http(admin, "GET", "/readyz") {
            last = Some(answer);
            std::thread::sleep(Duration::from_millis(10));
        }
        last
    });

    let (accepted, refusals) = publish_until_refused(&gw, "a").await;
    assert!(accepted.len() > 100, "only {} accepted", accepted.len());
    assert!(
        refusals
            .iter()
            .all(|(_, status)| status.code() == tonic::Code::Unavailable),
        "{refusals:?}"
    );
    assert!(
        refusals.iter().any(|(_, status)| status.message().contains(
            "could not be written to the spool: the spool cannot write to disk: cannot write "
        ) && status
            .message()
            .contains("No space left on device")),
        "{refusals:?}"
    );
    let status = wait_exit(&mut gw.child, DEADLINE);
    let log = gw.stderr_text();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("the spool cannot write to disk: stopping")
            && log.contains(
                "error: the spool could not write to disk, so eventgate stopped to be restarted"
            ),
        "{log}"
    );
    let (code, body) = readiness
        .join()
        .expect("readiness watcher")
        .expect("/readyz answered while the gateway stopped");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("spool: cannot write ")
            && body.contains("No space left on device")
            && body.contains("exits with status 1 for its supervisor to restart it"),
        "{body}"
    );

    // What a supervisor does once space is back: start it again.
    std::fs::remove_file(data.join("ballast")).expect("free the ballast");
    gw.respawn();
    let db = data.join("audit.db");
    let log = data.join("events.jsonl");
    // A record of the write that failed may have reached the disk whole before
    // ENOSPC; the restarted spool recovers it and delivers it, although its
    // publisher was refused: those, and no other, may be there besides the
    // accepted ones. (Before the restart no sink is handed an event the spool has
    // not synced.)
    let refused: BTreeSet<String> = refusals.iter().map(|(id, _)| id.clone()).collect();
    wait_for("every accepted event after the restart", DEADLINE, || {
        let rows = stored(&db);
        let in_log = logged(&log);
        let all_once = accepted.iter().all(|id| rows.get(id) == Some(&1));
        let nothing_else = rows
            .iter()
            .all(|(id, n)| accepted.contains(id) || (refused.contains(id) && *n == 1));
        (all_once && nothing_else && accepted.iter().all(|id| in_log.contains_key(id)))
            .then_some(())
    });
    let mut client = gw.client().await;
    client
        .publish(exit_request("after-restart"))
        .await
        .expect("publishing works after the restart");
    assert!(gw.terminate().success(), "{}", gw.stderr_text());
}

/// The same fault with the gateway's own log on the disk that fills, as many run it
/// (stderr redirected to a file in the data directory): every log line from the
/// failure on fails with ENOSPC. A failed log write is dropped, never fatal: the
/// gateway still drains and exits with status 1, not 101 from a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_log_on_the_full_disk_the_gateway_still_drains_and_exits_1() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let _fs = Tmpfs::mount(&data, "12m");
    ballast(&data.join("ballast"), 2);
    let config = Config::new()
        .toml("[spool]\nmin_free = \"0\"\n\n[pipeline]\ndrain_timeout = \"3s\"\n")
        .write(dir.path());
    let log_path = data.join("eventgate.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .expect("create the log file");
    let socket = data.join("eventgate.sock");
    let mut child = eventgate()
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .args(["--config", &config, "--log-level", "debug"])
        .stdout(Stdio::null())
        .stderr(log.try_clone().expect("log file"))
        .spawn()
        .expect("spawn eventgate serve");
    wait_for("the gateway socket to accept connections", DEADLINE, || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "eventgate exited during start-up: {status}\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        std::os::unix::net::UnixStream::connect(&socket).ok()
    });
    // tmpfs gives the log file whole pages: fill its last one, so that the first
    // log line after the disk is full fails rather than landing in the slack.
    let mut log = log;
    let used = log.metadata().expect("log size").len() as usize;
    let pad = (4096 - used % 4096) % 4096;
    log.write_all(&vec![b'#'; pad]).expect("pad the log file");
    drop(log);

    let address = path_str(&socket).to_owned();
    let mut client = eventgate::client::connect(&address, Duration::from_secs(5))
        .await
        .expect("connect to the gateway");
    let started = std::time::Instant::now();
    let mut accepted = 0;
    let refusal = loop {
        match client
            .publish(exit_request(&padded(&format!("l{accepted}"))))
            .await
        {
            Ok(_) => accepted += 1,
            Err(status) => break status,
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "never refused: the disk did not fill up"
        );
    };
    let refused_at = std::time::Instant::now();
    assert!(accepted > 100, "only {accepted} accepted");
    assert_eq!(refusal.code(), tonic::Code::Unavailable, "{refusal:?}");
    assert!(
        refusal.message().contains("No space left on device"),
        "{refusal:?}"
    );
    let status = wait_exit(&mut child, DEADLINE);
    let exited_after = refused_at.elapsed();
    let text = String::from_utf8_lossy(&std::fs::read(&log_path).unwrap_or_default()).into_owned();
    eprintln!(
        "accepted {accepted}, exit {status} {exited_after:?} after the refusal, log {} bytes",
        text.len()
    );
    assert_eq!(status.code(), Some(1), "exited {status}:\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    // The drain ran: the exit came after the forwarders had their chance, within
    // drain_timeout (3s) and the runtime's 1s shutdown, not at the first failed line.
    assert!(
        exited_after < Duration::from_secs(10),
        "exited {exited_after:?} after the refusal"
    );
}

/// Two gateways on one data directory would interleave spool records and truncate
/// each other's files: the second is refused at once, naming the first and the lock,
/// without disturbing it. Readers (`query`) and the dead-letter command work beside
/// it; once the first has exited, a new gateway starts on the directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_gateway_on_one_data_directory_is_refused_naming_the_first() {
    let mut gw = Gateway::start(&[]);
    let data = gw.dir.path().join("data");
    let mut client = gw.client().await;
    client
        .publish(exit_request("first"))
        .await
        .expect("publish");

    let mut second = eventgate()
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn a second serve");
    let status = wait_exit(&mut second, DEADLINE);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "{stderr}");
    let expected = format!(
        "data directory {} is in use by another eventgate (pid {} on host ",
        data.display(),
        gw.child.id()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(
        stderr.contains(&format!("lock {})", data.join("eventgate.lock").display())),
        "{stderr}"
    );

    // The first one is untouched: its socket still serves.
    client
        .publish(exit_request("second"))
        .await
        .expect("the first gateway still serves");
    let db = data.join("audit.db");
    wait_for("both events stored", DEADLINE, || {
        (stored(&db).len() == 2).then_some(())
    });
    let query = eventgate()
        .args(["query", "--data-dir"])
        .arg(&data)
        .arg("topic==\"/tasks/exit\"")
        .output()
        .expect("run query");
    let printed = String::from_utf8_lossy(&query.stdout);
    assert!(
        query.status.success() && printed.contains("first") && printed.contains("second"),
        "{printed}{}",
        String::from_utf8_lossy(&query.stderr)
    );
    let dlq = eventgate()
        .args(["dlq", "list", "--data-dir"])
        .arg(&data)
        .output()
        .expect("run dlq list");
    assert!(
        dlq.status.success(),
        "{}",
        String::from_utf8_lossy(&dlq.stderr)
    );

    assert!(gw.restart().success(), "{}", gw.stderr_text());
    let mut client = gw.client().await;
    client
        .publish(exit_request("third"))
        .await
        .expect("a new gateway serves the directory");
    assert!(gw.terminate().success(), "{}", gw.stderr_text());
}

/// A reserve the data directory's file system cannot hold would refuse every event:
/// `check-config` and `serve` both refuse it, naming the key and the file system.
#[test]
fn a_reserve_larger_than_the_file_system_is_refused_by_check_config_and_serve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let _fs = Tmpfs::mount(&data, "4m");
    let config = Config::new()
        .toml(&format!(
            "data_dir = \"{}\"\n[spool]\nmin_free = \"4MiB\"\n",
            data.display()
        ))
        .write(dir.path());
    let expected = format!(
        "`spool.min_free` (4MiB) is not less than the size of the file system holding {} (4.0MiB)",
        data.join("spool").display()
    );
    for command in [["check-config", config.as_str()], ["serve", "--config"]] {
        let mut cmd = eventgate();
        cmd.args(command);
        if command[0] == "serve" {
            cmd.arg(&config);
        }
        let out = cmd.output().expect("run eventgate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command:?} accepted it: {stderr}");
        assert!(stderr.contains(&expected), "{command:?}: {stderr}");
    }
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n[spool]\nmin_free = \"3MiB\"\n",
            data.display()
        ),
    )
    .expect("rewrite config");
    let out = eventgate()
        .args(["check-config", &config])
        .output()
        .expect("run check-config");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The flag overrides the file.
    let out = eventgate()
        .args(["serve", "--config", &config, "--spool-min-free", "4MiB"])
        .output()
        .expect("run serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(&expected),
        "{stderr}"
    );
}

/// Fills the file system holding `dir` to the last block.
fn fill(dir: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(dir.join("ballast")).expect("create the ballast file");
    let chunk = vec![0x5a; 64 << 10];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
    // tmpfs takes a partial block: make sure not one byte more fits.
    while file.write(&[0x5a]).is_ok_and(|n| n == 1) {}
}

/// A forwarder that gives up on a batch (its sink's disk is full, retry budget spent)
/// while the dead-letter store cannot be written either (the same full disk, in
/// practice) holds the batch instead of acknowledging it: once the store has room,
/// every one of those events is there. Before, they were acknowledged and lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_given_up_on_is_held_until_the_dead_letter_store_can_take_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = dir.path().join("sink");
    let letters = dir.path().join("letters");
    let _sink_fs = Tmpfs::mount(&sink, "1m");
    let _letters_fs = Tmpfs::mount(&letters, "1m");
    let config = Config::new()
        .toml(&format!(
            r#"
[admin]
max_failing = "0s"

[dead_letter]
path = "{letters}/deadletters.db"

[[forwarder]]
name = "log"
kind = "file"
path = "{sink}/events.jsonl"
retry = {{ attempts = 2, initial = "10ms", max = "10ms" }}
"#,
            letters = letters.display(),
            sink = sink.display()
        ))
        .write(dir.path());
    let mut gw = Gateway::start_in(dir, &["--config", &config]);
    let admin = gw.admin_addr();
    fill(&sink);
    fill(&letters);
    let mut client = gw.client().await;
    let ids: BTreeSet<String> = (0..5).map(|n| format!("held{n}")).collect();
    for id in &ids {
        client
            .publish(exit_request(id))
            .await
            .expect("the spool has room");
    }
    let body = wait_for("the held batch in /readyz", DEADLINE, || {
        let (code, body) = http_get(admin, "/readyz");
        (code == 503 && body.contains("cannot record them as dead letters; holding them"))
            .then_some(body)
    });
    assert!(body.contains("forwarder log: retrying"), "{body}");

    std::fs::remove_file(letters.join("ballast")).expect("free the dead-letter disk");
    let db = letters.join("deadletters.db");
    let listed = wait_for(
        "every given-up event in the dead-letter store",
        DEADLINE,
        || {
            let out = eventgate()
                .args(["dlq", "list", "--format", "json", "--db"])
                .arg(&db)
                .output()
                .expect("run dlq list");
            let found: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter_map(|line| line["event"]["container_id"].as_str().map(str::to_owned))
                .collect();
            (found == ids).then_some(found)
        },
    );
    assert_eq!(listed.len(), 5);
    assert!(gw.terminate().success(), "{}", gw.stderr_text());
}
