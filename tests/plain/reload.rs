//! Configuration reload through the real binary: `eventgate reload` (the admin
//! endpoint's `POST /reload`) and SIGHUP. Forwarders added, removed and replaced
//! while a publisher publishes; invalid configurations refused with the old ones
//! still delivering.

use crate::support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use serde_json::Value;
use support::config::Config;
use support::*;

fn file_forwarder(name: &str, path: &str, extra: &str) -> String {
    format!("[[forwarder]]\nname = \"{name}\"\nkind = \"file\"\npath = \"{path}\"\n{extra}\n")
}

/// The token file beside the configuration file.
fn token_file(config: &Path) -> PathBuf {
    config.with_file_name("reload.token")
}

/// Writes the configuration file; the next reload reads it. Every version names the
/// same reload token file, which `POST /reload` requires.
fn write_config(path: &Path, text: &str) {
    let token = token_file(path);
    if !token.exists() {
        std::fs::write(&token, "reload-token-for-tests-0123456789\n").expect("write token");
    }
    let admin = format!("\n[admin]\nreload_token_file = {:?}\n", path_str(&token));
    Config::new().toml(text).toml(&admin).write_to(path);
}

/// Starts a gateway on `config` (written first) in a fresh directory.
fn start(config: &str) -> (Gateway, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("eventgate.toml");
    write_config(&path, config);
    let gw = Gateway::start_in(dir, &["--config", path_str(&path)]);
    (gw, path)
}

fn data(gw: &Gateway) -> PathBuf {
    gw.dir.path().join("data")
}

/// `eventgate reload --admin ... --token-file ...`: (exit code, stdout, stderr).
fn reload(gw: &mut Gateway) -> (i32, String, String) {
    let token = token_file(&gw.dir.path().join("eventgate.toml"));
    let out = eventgate()
        .args(["reload", "--admin", &gw.admin_addr().to_string()])
        .args(["--token-file", path_str(&token)])
        .output()
        .expect("run eventgate reload");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn applied(gw: &mut Gateway) -> String {
    let (code, stdout, stderr) = reload(gw);
    assert_eq!(code, 0, "reload not applied: {stdout}{stderr}");
    stdout
}

fn rejected(gw: &mut Gateway) -> String {
    let (code, stdout, stderr) = reload(gw);
    assert_eq!(code, 2, "reload not rejected: {stdout}{stderr}");
    stderr
}

fn publish(gw: &Gateway, container: &str) {
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        &format!(r#"{{"container_id":"{container}","exit_status":1}}"#),
    );
    assert!(ok, "publish {container}: {err}");
}

/// Container ids of the `/tasks/exit` lines of a JSON-lines file, in file order.
fn logged(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["topic"] == "/tasks/exit")
        .filter_map(|line| line["event"]["container_id"].as_str().map(str::to_owned))
        .collect()
}

fn wait_logged(path: &Path, container: &str) {
    wait_for(
        &format!("{container} in {}", path.display()),
        DEADLINE,
        || logged(path).iter().any(|c| c == container).then_some(()),
    );
}

/// Whether the process has `path` open.
fn has_open(pid: u32, path: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| target == path)
}

fn get(gw: &mut Gateway, path: &str) -> String {
    support::http_get(gw.admin_addr(), path).1
}

#[test]
fn forwarders_added_and_removed_by_reload() {
    let (mut gw, config) = start(&file_forwarder("log", "log.jsonl", ""));
    let log = data(&gw).join("log.jsonl");
    let extra = data(&gw).join("extra.jsonl");
    publish(&gw, "before");
    wait_logged(&log, "before");

    write_config(
        &config,
        &(file_forwarder("log", "log.jsonl", "") + &file_forwarder("extra", "extra.jsonl", "")),
    );
    let out = applied(&mut gw);
    assert!(out.contains("forwarder \"extra\" added"), "{out}");
    assert!(out.contains("unchanged: log"), "{out}");
    publish(&gw, "after-add");
    wait_logged(&extra, "after-add");
    wait_logged(&log, "after-add");
    // Added forwarders start at the reload: history is what `eventgate replay` is for.
    assert_eq!(logged(&extra), ["after-add"]);
    let status = get(&mut gw, "/status");
    assert!(status.contains("\"extra\""), "{status}");

    write_config(&config, &file_forwarder("extra", "extra.jsonl", ""));
    let out = applied(&mut gw);
    assert!(out.contains("forwarder \"log\" removed"), "{out}");
    assert!(
        !has_open(gw.child.id(), &log),
        "the removed forwarder's file is still open"
    );
    publish(&gw, "after-remove");
    wait_logged(&extra, "after-remove");
    assert_eq!(logged(&log), ["before", "after-add"]);

    // Gone from status, readiness and the gauges; its cursor no longer holds the spool.
    let status = get(&mut gw, "/status");
    assert!(!status.contains("\"log\""), "{status}");
    let ready = get(&mut gw, "/readyz?verbose");
    assert!(!ready.contains("forwarder log"), "{ready}");
    assert!(ready.contains("forwarder extra"), "{ready}");
    wait_for("the removed forwarder's gauges to go", DEADLINE, || {
        let metrics = get(&mut gw, "/metrics");
        (!metrics.contains("eventgate_forwarder_ready{forwarder=\"log\"}")
            && metrics.contains("eventgate_forwarder_ready{forwarder=\"extra\"}")
            && metrics.contains("eventgate_config_reloads_total{result=\"ok\"} 2"))
        .then_some(())
    });
    wait_for("the removed forwarder's cursor to go", DEADLINE, || {
        let cursors = std::fs::read_to_string(data(&gw).join("spool/cursors")).ok()?;
        (!cursors.contains("\nlog ") && cursors.contains("\nextra ")).then_some(())
    });
    assert!(gw.terminate().success());
}

#[test]
fn invalid_configurations_are_rejected_and_the_running_one_keeps_delivering() {
    let good = file_forwarder("log", "log.jsonl", "");
    let (mut gw, config) = start(&good);
    let log = data(&gw).join("log.jsonl");
    std::fs::write(data(&gw).join("blocker"), b"a file, not a directory").expect("write");

    let cases = [
        (format!("{good}bogus = 1\n"), "bogus"),
        (
            good.clone() + &file_forwarder("narrow", "n.jsonl", "filters = ['topic==']"),
            "filters",
        ),
        (
            good.clone() + &file_forwarder("stuck", "blocker/n.jsonl", ""),
            "blocker",
        ),
        (file_forwarder("log", "blocker/log.jsonl", ""), "blocker"),
        (
            file_forwarder("log", "log.jsonl", "format = \"xml\""),
            "format",
        ),
    ];
    for (i, (text, names)) in cases.iter().enumerate() {
        write_config(&config, text);
        let err = rejected(&mut gw);
        assert!(
            err.contains("rejected, the running configuration is kept"),
            "{err}"
        );
        assert!(err.contains(names), "case {i}: {err}");
        let container = format!("still-{i}");
        publish(&gw, &container);
        wait_logged(&log, &container);
    }
    // The failed replacement of "log" went back to its running settings, in place.
    assert_eq!(
        logged(&log),
        ["still-0", "still-1", "still-2", "still-3", "still-4"]
    );
    assert!(!data(&gw).join("n.jsonl").exists());

    // SIGHUP: same checks, the answer in the log.
    write_config(&config, "[[forwarder]]\nname = \"log\"\n");
    signal(&gw.child, nix::sys::signal::Signal::SIGHUP);
    wait_for("the SIGHUP rejection in the log", DEADLINE, || {
        let metrics = get(&mut gw, "/metrics");
        metrics
            .contains("eventgate_config_reloads_total{result=\"rejected\"} 6")
            .then_some(())
    });
    let text = gw.stderr_text();
    assert!(text.contains("SIGHUP received"), "{text}");
    assert!(text.contains(path_str(&config)), "{text}");
    assert!(text.contains("needs a `kind`"), "{text}");

    // Keys that need a restart are named, and the forwarders still change.
    write_config(
        &config,
        &format!("[spool]\nsegment_bytes = \"1MiB\"\n\n{good}"),
    );
    let out = applied(&mut gw);
    assert!(out.contains("no forwarder changed"), "{out}");
    assert!(
        out.contains("needs a restart: spool.segment_bytes"),
        "{out}"
    );
    publish(&gw, "end");
    wait_logged(&log, "end");
    assert!(gw.terminate().success());
}

/// Container id -> rows in the audit store.
fn stored(db: &Path) -> HashMap<String, i64> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return HashMap::new();
    };
    let Ok(mut statement) = conn
        .prepare("SELECT json_extract(event, '$.container_id'), count(*) FROM events GROUP BY 1")
    else {
        return HashMap::new();
    };
    statement
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

#[test]
fn forwarders_replaced_while_publishing_lose_and_double_nothing() {
    let sqlite = |extra: &str| {
        format!(
            "[[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n{extra}\n"
        )
    };
    let versions = [
        sqlite("") + &file_forwarder("log", "log.jsonl", ""),
        sqlite("batch = { events = 3 }")
            + &file_forwarder(
                "log",
                "log.jsonl",
                "batch = { events = 2, linger = \"5ms\" }",
            ),
        sqlite("filters = ['namespace==default']")
            + &file_forwarder("log", "log.jsonl", "filters = ['topic==\"/tasks/*\"']"),
        sqlite("queue = { events = 4 }") + &file_forwarder("log", "log.jsonl", "fsync = \"never\""),
    ];
    let (mut gw, config) = start(&versions[0]);
    let address = gw.address();
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let publisher = {
        let acknowledged = Arc::clone(&acknowledged);
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let mut client = eventgate::client::connect(&address, DEADLINE)
                    .await
                    .expect("connect");
                let mut i = 0;
                while !done.load(Ordering::Acquire) {
                    let container = format!("c{i}");
                    if client.publish(exit_request(&container)).await.is_ok() {
                        acknowledged.lock().expect("lock").push(container);
                    }
                    i += 1;
                }
            });
        })
    };
    let published = |n: usize| {
        let acknowledged = Arc::clone(&acknowledged);
        wait_for("the publisher to get further", DEADLINE, move || {
            (acknowledged.lock().expect("lock").len() >= n).then_some(())
        });
    };
    published(50);
    for (round, version) in versions.iter().cycle().skip(1).take(6).enumerate() {
        write_config(&config, version);
        let out = applied(&mut gw);
        assert!(out.contains("forwarder \"audit\" replaced"), "{out}");
        assert!(out.contains("forwarder \"log\" replaced"), "{out}");
        let so_far = acknowledged.lock().expect("lock").len();
        published(so_far + 30 + round);
    }
    done.store(true, Ordering::Release);
    publisher.join().expect("publisher");
    let acknowledged = acknowledged.lock().expect("lock").clone();
    assert!(
        acknowledged.len() > 200,
        "only {} published",
        acknowledged.len()
    );

    let db = data(&gw).join("audit.db");
    let rows = wait_for("every acknowledged event in the store", DEADLINE, || {
        let rows = stored(&db);
        acknowledged
            .iter()
            .all(|c| rows.contains_key(c))
            .then_some(rows)
    });
    assert_eq!(rows.len(), acknowledged.len(), "events nobody published");
    assert!(rows.values().all(|&n| n == 1));
    let log = data(&gw).join("log.jsonl");
    let lines = wait_for("every acknowledged event in the log", DEADLINE, || {
        let lines = logged(&log);
        (lines.len() >= acknowledged.len()).then_some(lines)
    });
    // Each exactly once, in publish order: every swap was graceful, so the successor
    // resumed exactly where its predecessor's acknowledgements ended.
    assert_eq!(lines, acknowledged);
    assert!(gw.terminate().success());
}

/// `POST /reload` only with the token from `admin.reload_token_file`, compared
/// whole: anything else that can reach the endpoint gets 401 and is counted.
/// `eventgate reload` finds the token through the configuration file.
#[test]
fn post_reload_requires_the_token() {
    let (mut gw, config) = start(&file_forwarder("log", "log.jsonl", ""));
    let admin = gw.admin_addr();
    let token = std::fs::read_to_string(token_file(&config)).expect("token");
    let token = token.trim();
    for headers in [
        vec![],
        vec![("Authorization", "Bearer wrong-token-0123456789")],
        vec![("Authorization", token)],
    ] {
        let (code, body) = http_with(admin, "POST", "/reload", &headers);
        assert_eq!(code, 401, "{headers:?}: {body}");
        assert!(body.contains("admin.reload_token_file"), "{body}");
    }
    let bearer = format!("Bearer {token}");
    let (code, body) = http_with(admin, "POST", "/reload", &[("Authorization", &bearer)]);
    assert_eq!(code, 200, "{body}");
    let metrics = get(&mut gw, "/metrics");
    assert!(
        metrics.contains("eventgate_reload_refused_total{reason=\"unauthorized\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("eventgate_config_reloads_total{result=\"ok\"} 1"),
        "only the authorized request reloaded:\n{metrics}"
    );

    // The command reads the token file named in the configuration.
    let out = eventgate()
        .args(["reload", "--admin", &admin.to_string(), "--config"])
        .arg(&config)
        .output()
        .expect("eventgate reload");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(gw.terminate().success());
}

/// Without a token file `POST /reload` is refused (403) and says how to reload;
/// SIGHUP still reloads.
#[test]
fn without_a_token_file_post_reload_is_refused_and_sighup_still_reloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("eventgate.toml");
    std::fs::write(&config, file_forwarder("log", "log.jsonl", "")).expect("write config");
    let mut gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let admin = gw.admin_addr();
    let out = eventgate()
        .args(["reload", "--admin", &admin.to_string()])
        .output()
        .expect("eventgate reload");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("403") && stderr.contains("POST /reload is turned off"),
        "{stderr}"
    );

    std::fs::write(
        &config,
        file_forwarder("log", "log.jsonl", "") + &file_forwarder("extra", "extra.jsonl", ""),
    )
    .expect("write config");
    signal(&gw.child, nix::sys::signal::Signal::SIGHUP);
    wait_for("the SIGHUP reload", DEADLINE, || {
        let metrics = get(&mut gw, "/metrics");
        (metrics.contains("eventgate_config_reloads_total{result=\"ok\"} 1")
            && metrics.contains("eventgate_reload_refused_total{reason=\"disabled\"} 1"))
        .then_some(())
    });
    publish(&gw, "after-sighup");
    wait_logged(&data(&gw).join("extra.jsonl"), "after-sighup");
    assert!(gw.terminate().success());
}
