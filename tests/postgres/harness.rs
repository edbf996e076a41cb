//! The PostgreSQL harness itself, checked with psql: the logins, TLS, restarts,
//! dropped connections and clean-up that the postgres forwarder's tests rely on.

use crate::support::postgres::{Postgres, alive, bin_dir, psql};
use crate::support::{DEADLINE, wait_exit, wait_for};

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn a_password_login_over_tcp_works_and_a_wrong_password_is_refused() {
    let pg = Postgres::start();
    pg.create_role("writer", "right horse");
    pg.create_database("events", "writer");

    let url = pg.url_for("writer", "right horse", "events");
    let who = psql(
        &url,
        "SELECT current_user, current_database(), host(inet_server_addr()), inet_server_port()",
        &[],
    )
    .expect("a login with the right password");
    assert_eq!(who, format!("writer|events|127.0.0.1|{}", pg.port()));
    // The database is the role's own: it can make tables in it.
    psql(
        &url,
        "CREATE TABLE mine (n int); INSERT INTO mine VALUES (1)",
        &[],
    )
    .expect("the owner creates a table");

    let refused = psql(
        &pg.url_for("writer", "wrong horse", "events"),
        "SELECT 1",
        &[],
    )
    .expect_err("a wrong password must be refused");
    assert!(
        refused.contains("password authentication failed for user \"writer\""),
        "{refused}"
    );
}

#[test]
fn the_server_runs_unprivileged_in_a_private_directory() {
    let pg = Postgres::start();
    let uid = |path: String| -> u32 {
        let status = std::fs::read_to_string(path).expect("/proc status");
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .expect("a Uid line");
        // Real, effective, saved, file system: all of them.
        let ids: Vec<u32> = line
            .split_whitespace()
            .map(|id| id.parse().expect("uid"))
            .collect();
        assert!(ids.iter().all(|id| *id == ids[0]), "mixed uids: {line}");
        ids[0]
    };
    let server = uid(format!("/proc/{}/status", pg.pid()));
    let expected = if nix::unistd::geteuid().is_root() {
        nix::unistd::User::from_name("postgres")
            .expect("passwd")
            .expect("a postgres user")
            .uid
            .as_raw()
    } else {
        nix::unistd::geteuid().as_raw()
    };
    assert_ne!(server, 0, "the server runs as root");
    assert_eq!(server, expected);

    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(pg.dir()).expect("the harness's dir");
    assert_eq!(meta.uid(), expected);
    assert_eq!(meta.mode() & 0o777, 0o700);
}

#[test]
fn verify_full_accepts_the_right_ca_and_refuses_a_wrong_one() {
    let pg = Postgres::start_tls();
    pg.create_role("writer", "pw");
    let ca = pg.ca().display().to_string();

    for host in ["127.0.0.1", "localhost"] {
        let url = format!(
            "postgres://writer:pw@{host}:{}/postgres?sslmode=verify-full",
            pg.port()
        );
        let ssl = psql(
            &url,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[("PGSSLROOTCERT", &ca)],
        )
        .unwrap_or_else(|why| panic!("verify-full to {host} with the right CA: {why}"));
        assert_eq!(ssl, "t", "{host}");
    }

    let url = format!(
        "{}?sslmode=verify-full",
        pg.url_for("writer", "pw", "postgres")
    );
    let wrong = pg.wrong_ca().display().to_string();
    let refused = psql(&url, "SELECT 1", &[("PGSSLROOTCERT", &wrong)])
        .expect_err("a server certificate from another CA must be refused");
    assert!(refused.contains("certificate verify failed"), "{refused}");

    // TLS mode means TLS only: a client that does not ask for it is turned away.
    let plain = format!("{}?sslmode=disable", pg.url_for("writer", "pw", "postgres"));
    let refused = psql(&plain, "SELECT 1", &[]).expect_err("a plaintext login must be refused");
    assert!(
        refused.contains("no pg_hba.conf entry") && refused.contains("no encryption"),
        "{refused}"
    );
}

#[test]
fn restarts_keep_committed_rows_on_the_same_port() {
    let mut pg = Postgres::start();
    pg.sql("CREATE TABLE kept (n int); INSERT INTO kept VALUES (1), (2), (3)");
    let url = pg.url();
    let port = pg.port();
    let rows = "SELECT string_agg(n::text, ',' ORDER BY n) FROM kept";

    let before = pg.pid();
    pg.restart();
    assert!(
        !alive(before),
        "the old postmaster {before} is still running"
    );
    assert_ne!(pg.pid(), before);
    assert_eq!(pg.port(), port);
    assert_eq!(psql(&url, rows, &[]).expect("after a restart"), "1,2,3");

    // Stopped means refused; an immediate stop (a crash) loses nothing committed.
    pg.sql("INSERT INTO kept VALUES (4)");
    let before = pg.pid();
    pg.stop_immediate();
    assert!(!alive(before), "the postmaster {before} outlived the stop");
    let refused = psql(&url, "SELECT 1", &[]).expect_err("a stopped server answers");
    assert!(refused.contains("Connection refused"), "{refused}");
    pg.start_again();
    assert_eq!(
        psql(&url, rows, &[]).expect("after crash recovery"),
        "1,2,3,4"
    );
}

#[test]
fn terminating_connections_drops_a_client_mid_query() {
    let pg = Postgres::start();
    let mut client = Command::new(bin_dir().join("psql"))
        .args(["--no-psqlrc", "--dbname", &pg.url()])
        .args(["--command", "SELECT pg_sleep(600)"])
        .env("PGPASSFILE", "/nonexistent")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn psql");
    wait_for("the sleeping client to be connected", DEADLINE, || {
        let n =
            pg.sql("SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'");
        (n == "1").then_some(())
    });

    assert_eq!(pg.terminate_connections(), 1);
    let status = wait_exit(&mut client, DEADLINE);
    assert!(!status.success());
    let mut stderr = String::new();
    use std::io::Read;
    client
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read psql's stderr");
    assert!(
        stderr.contains("terminating connection due to administrator command"),
        "{stderr}"
    );
    // The server itself stays up.
    assert_eq!(pg.sql("SELECT 1"), "1");
}

/// The postmaster's pid, its children's, its port and its directory.
fn footprint(pg: &Postgres) -> (Vec<i32>, u16, PathBuf) {
    let postmaster = pg.pid();
    let mut pids = vec![postmaster];
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(postmaster) {
            pids.push(pid);
        }
    }
    // The checkpointer, background writer, WAL writer and the rest.
    assert!(pids.len() > 3, "no server processes found: {pids:?}");
    (pids, pg.port(), pg.dir().to_path_buf())
}

fn assert_gone((pids, port, dir): (Vec<i32>, u16, PathBuf)) {
    let running: Vec<i32> = pids.into_iter().filter(|pid| alive(*pid)).collect();
    assert!(running.is_empty(), "still running: {running:?}");
    let connected = TcpStream::connect((Ipv4Addr::LOCALHOST, port));
    assert!(connected.is_err(), "port {port} still accepts connections");
    TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .unwrap_or_else(|e| panic!("port {port} is not free: {e}"));
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

#[test]
fn dropping_the_harness_stops_the_server_and_frees_its_port() {
    let pg = Postgres::start();
    // A client still connected does not hold the server up.
    let mut client = Command::new(bin_dir().join("psql"))
        .args(["--no-psqlrc", "--dbname", &pg.url()])
        .args(["--command", "SELECT pg_sleep(600)"])
        .env("PGPASSFILE", "/nonexistent")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn psql");
    wait_for("the sleeping client to be connected", DEADLINE, || {
        let n =
            pg.sql("SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'");
        (n == "1").then_some(())
    });
    let footprint = footprint(&pg);
    drop(pg);
    assert_gone(footprint);
    wait_exit(&mut client, DEADLINE);
}

#[test]
fn a_panicking_test_leaves_no_server_behind() {
    let seen = std::sync::Mutex::new(None);
    let outcome = std::panic::catch_unwind(|| {
        let pg = Postgres::start();
        *seen.lock().expect("lock") = Some(footprint(&pg));
        panic!("a failing test");
    });
    assert!(outcome.is_err());
    let footprint = seen.lock().expect("lock").take().expect("a started server");
    assert_gone(footprint);
}

/// A table space on a 4 MiB tmpfs fills up with PostgreSQL's own "no space" error,
/// while the rest of the cluster keeps working; the mount goes with the cluster.
#[cfg(feature = "privileged-tests")]
#[test]
fn a_small_tablespace_fills_up() {
    let mut pg = Postgres::start();
    pg.create_role("writer", "pw");
    pg.create_database("events", "writer");
    let at = pg.small_tablespace("tiny", "writer", 4);
    let url = pg.url_for("writer", "pw", "events");

    psql(&url, "CREATE TABLE full_one (t text) TABLESPACE tiny", &[]).expect("create");
    // About 12 MiB of rows, in one statement.
    let full = psql(
        &url,
        "INSERT INTO full_one SELECT md5(g::text) FROM generate_series(1, 200000) g",
        &[],
    )
    .expect_err("4 MiB cannot hold 12");
    assert!(
        full.contains("could not extend file") && full.contains("No space left on device"),
        "{full}"
    );
    psql(
        &url,
        "CREATE TABLE elsewhere (n int); INSERT INTO elsewhere VALUES (1)",
        &[],
    )
    .expect("the default table space still takes writes");

    let mounted = || {
        std::fs::read_to_string("/proc/mounts")
            .expect("/proc/mounts")
            .contains(&at.display().to_string())
    };
    assert!(mounted());
    drop(pg);
    assert!(!mounted(), "{} is still mounted", at.display());
}
