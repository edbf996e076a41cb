//! The `postgres` forwarder through the real binary, against a private PostgreSQL
//! server: every event stored once, with its columns; and each failure a user meets
//! (a refused login, a wrong CA, a dropped connection, a restarted server, a newer
//! schema, another application's table) named precisely, the events kept meanwhile,
//! and everything stored once the cause is gone.

use std::path::Path;
use std::time::Duration;

use crate::support::postgres::Postgres;
use crate::support::*;

/// Time for a batch to reach the server, retries after a fault included.
const STORED: Duration = Duration::from_secs(60);

const ROLE: &str = "eventgate";
const DB: &str = "history";

/// A role and a database of its own, and the password in a file.
fn store(pg: &Postgres, dir: &Path) -> std::path::PathBuf {
    pg.create_role(ROLE, "right horse battery");
    pg.create_database(DB, ROLE);
    let file = dir.join("pg-password");
    std::fs::write(&file, "right horse battery\n").unwrap();
    file
}

/// A gateway with the default forwarders and a `postgres` one (`extra` is added to
/// its table), retrying quickly.
fn gateway(pg: &Postgres, password_file: &Path, extra: &str) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"[admin]
max_failing = "1s"

[[forwarder]]
name = "log"
kind = "file"

[[forwarder]]
name = "audit"
kind = "sqlite"

[[forwarder]]
name = "central"
kind = "postgres"
url = "postgres://{ROLE}@127.0.0.1:{port}/{DB}"
password_file = "{password}"
retry = {{ initial = "50ms", max = "500ms" }}
{extra}
"#,
            port = pg.port(),
            password = password_file.display(),
        ),
    )
    .unwrap();
    Gateway::start_in(dir, &["--config", path_str(&config), "--node", "node-a"])
}

fn publish_exits(gw: &Gateway, from: u32, to: u32) {
    for pid in from..to {
        let (ok, err) = publish_json(
            &gw.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &format!(
                r#"{{"container_id":"c{}","pid":{pid},"exit_status":{}}}"#,
                pid % 4,
                pid % 3
            ),
        );
        assert!(ok, "publish: {err}");
    }
}

/// `count(*)` and `count(distinct id)` of the stored events; 0 before the table exists.
fn stored(pg: &Postgres) -> (u64, u64) {
    match pg.try_sql_in(
        DB,
        "SELECT count(*) || ' ' || count(DISTINCT id) FROM events",
    ) {
        Ok(text) => {
            let mut parts = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
            (parts.next().unwrap(), parts.next().unwrap())
        }
        Err(_) => (0, 0),
    }
}

fn wait_stored(pg: &Postgres, expected: u64) {
    wait_for(&format!("{expected} rows in PostgreSQL"), STORED, || {
        let (rows, distinct) = stored(pg);
        assert_eq!(rows, distinct, "an event was stored twice");
        assert!(
            rows <= expected,
            "{rows} rows, more than the {expected} published"
        );
        (rows == expected).then_some(())
    });
}

/// /readyz until it is not ready with `needle` in its text; returns that text.
fn wait_not_ready(gw: &mut Gateway, needle: &str) -> String {
    let admin = gw.admin_addr();
    wait_for(&format!("/readyz naming {needle:?}"), STORED, || {
        let (code, body) = http(admin, "GET", "/readyz");
        (code == 503 && body.contains(needle)).then_some(body)
    })
}

fn wait_ready(gw: &mut Gateway) {
    let admin = gw.admin_addr();
    wait_for("/readyz ready", STORED, || {
        (http(admin, "GET", "/readyz").0 == 200).then_some(())
    });
}

#[test]
fn every_event_is_stored_once_with_its_columns_and_a_replay_adds_nothing() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let password = store(&pg, dir.path());
    let mut gw = gateway(&pg, &password, r#"tls = "disable""#);
    publish_exits(&gw, 1, 41);
    wait_stored(&pg, 40);
    let row = pg.sql_in(
        DB,
        "SELECT namespace, topic, node, origin, source, type_url, event->>'container_id',
                event->>'exit_status', length(payload) > 0, written_by IS NOT NULL,
                time IS NOT NULL
         FROM events WHERE event->>'pid' = '6'",
    );
    assert_eq!(
        row,
        "default|/tasks/exit|node-a|live|publish|containerd.events.TaskExit|c2|0|t|t|t"
    );
    // One partition, today's, named after its day.
    let partitions = pg.sql_in(
        DB,
        "SELECT relname FROM pg_inherits JOIN pg_class ON oid = inhrelid
         WHERE inhparent = 'events'::regclass",
    );
    let today = chrono::Utc::now().format("events_p%Y%m%d").to_string();
    assert_eq!(partitions, today);
    // The same events again through the forwarder: nothing new.
    let config = gw.dir.path().join("eventgate.toml");
    let out = eventgate()
        .args([
            "replay",
            "--to-forwarder",
            "central",
            "--config",
            path_str(&config),
        ])
        .arg("--data-dir")
        .arg(gw.dir.path().join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stored(&pg), (40, 40));
    let metrics = scrape(&mut gw);
    assert_eq!(
        metrics.get(
            "eventgate_postgres_rows_total",
            &[("forwarder", "central"), ("outcome", "inserted")]
        ),
        Some(40.0)
    );
    wait_ready(&mut gw);
}

#[test]
fn a_refused_login_is_named_the_events_wait_and_go_in_once_the_password_is_right() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let password = store(&pg, dir.path());
    std::fs::write(&password, "wrong horse battery\n").unwrap();
    let mut gw = gateway(&pg, &password, r#"tls = "disable""#);
    publish_exits(&gw, 1, 11);
    let said = wait_not_ready(&mut gw, "forwarder central");
    assert!(
        said.contains("28P01")
            && said.contains("password authentication failed for user \"eventgate\""),
        "{said}"
    );
    assert_eq!(stored(&pg), (0, 0));
    // The file is read at every connection: the right password, and they all go in.
    std::fs::write(&password, "right horse battery\n").unwrap();
    wait_stored(&pg, 10);
    wait_ready(&mut gw);
}

#[test]
fn a_wrong_ca_is_named_and_a_corrected_ca_file_is_used_without_a_restart() {
    let pg = Postgres::start_tls();
    let dir = tempfile::tempdir().unwrap();
    let password = store(&pg, dir.path());
    let ca = dir.path().join("pg-ca.pem");
    std::fs::copy(pg.wrong_ca(), &ca).unwrap();
    let mut gw = gateway(&pg, &password, &format!("ca_file = \"{}\"", ca.display()));
    publish_exits(&gw, 1, 6);
    let said = wait_not_ready(&mut gw, "forwarder central");
    assert!(
        said.contains("certificate") && said.contains("UnknownIssuer"),
        "{said}"
    );
    assert_eq!(stored(&pg), (0, 0));
    std::fs::copy(pg.ca(), &ca).unwrap();
    wait_stored(&pg, 5);
    // Over TLS, as the server's view of the connection says.
    let ssl = pg.sql_in(
        DB,
        "SELECT bool_and(ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE usename = 'eventgate'",
    );
    assert_eq!(ssl, "t");
    wait_ready(&mut gw);
}

#[test]
fn dropped_connections_and_a_restarted_server_lose_nothing_and_store_nothing_twice() {
    let mut pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let password = store(&pg, dir.path());
    let gw = gateway(&pg, &password, r#"tls = "disable""#);
    publish_exits(&gw, 1, 21);
    wait_stored(&pg, 20);
    let publisher = {
        let address = gw.address();
        std::thread::spawn(move || {
            for pid in 21..221u32 {
                let (ok, err) = publish_json(
                    &address,
                    "default",
                    "/tasks/exit",
                    "containerd.events.TaskExit",
                    &format!(r#"{{"container_id":"c{}","pid":{pid}}}"#, pid % 4),
                );
                assert!(ok, "publish: {err}");
            }
        })
    };
    // Mid-stream: every connection cut, then the server stopped and started.
    wait_for("more rows arriving", STORED, || {
        (stored(&pg).0 > 40).then_some(())
    });
    assert!(
        pg.terminate_connections() >= 1,
        "the gateway was not connected"
    );
    wait_for("rows after the cut", STORED, || {
        (stored(&pg).0 > 80).then_some(())
    });
    pg.restart();
    publisher.join().unwrap();
    wait_stored(&pg, 220);
}

#[test]
fn a_newer_schema_and_another_applications_table_are_refused_by_name() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let password = store(&pg, dir.path());
    pg.sql_in(
        DB,
        "CREATE TABLE events (id int); ALTER TABLE events OWNER TO eventgate",
    );
    let mut gw = gateway(&pg, &password, r#"tls = "disable""#);
    publish_exits(&gw, 1, 3);
    let said = wait_not_ready(&mut gw, "forwarder central");
    assert!(
        said.contains("`events` table that eventgate did not make"),
        "{said}"
    );
    // Theirs is left alone; with it gone, the store is made and the events go in.
    assert_eq!(pg.sql_in(DB, "SELECT count(*) FROM events"), "0");
    pg.sql_in(DB, "DROP TABLE events");
    wait_stored(&pg, 2);
    pg.sql_in(DB, "UPDATE eventgate_schema SET version = 99");
    // A new connection is needed to see it: cut the gateway's.
    pg.terminate_connections();
    publish_exits(&gw, 3, 4);
    let said = wait_not_ready(&mut gw, "forwarder central");
    assert!(
        said.contains("version 99, newer than this eventgate knows (2)"),
        "{said}"
    );
    pg.sql_in(DB, "UPDATE eventgate_schema SET version = 2");
    pg.terminate_connections();
    wait_stored(&pg, 3);
}

#[test]
fn retention_drops_whole_partitions_past_max_age() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let password = store(&pg, dir.path());
    let gw = gateway(
        &pg,
        &password,
        "tls = \"disable\"\nretention = { max_age = \"30d\", interval = \"1s\" }",
    );
    publish_exits(&gw, 1, 4);
    wait_stored(&pg, 3);
    // A day long past, as the gateway writing then would have made it (as its role,
    // the partition's owner), with a row.
    pg.sql_in(
        DB,
        "SET ROLE eventgate;
         CREATE TABLE events_p20000101 PARTITION OF events
             FOR VALUES FROM ('2000-01-01 00:00:00+00') TO ('2000-01-02 00:00:00+00');
         INSERT INTO events (received, id, seq, received_at, namespace, topic, origin, written_by)
             VALUES ('2000-01-01 10:00:00+00', gen_random_uuid(), 1,
                     '2000-01-01T10:00:00.000000000Z', 'default', '/old', 'live', 'then')",
    );
    wait_for("the old partition dropped", STORED, || {
        (pg.sql_in(DB, "SELECT to_regclass('events_p20000101') IS NULL") == "t").then_some(())
    });
    assert_eq!(stored(&pg), (3, 3));
    // A partition the writer made, dropped under it (as retention drops a day a
    // late event then belongs to): the next batch makes it again.
    let today = chrono::Utc::now().format("events_p%Y%m%d").to_string();
    pg.sql_in(DB, &format!("DROP TABLE {today}"));
    publish_exits(&gw, 4, 6);
    wait_stored(&pg, 2);
    assert_eq!(
        pg.sql_in(DB, &format!("SELECT to_regclass('{today}') IS NOT NULL")),
        "t"
    );
}

#[cfg(feature = "privileged-tests")]
#[test]
fn a_full_table_space_is_named_the_events_wait_and_go_in_once_there_is_room() {
    let mut pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let password = store(&pg, dir.path());
    // Every table of the store (the partitions among them) on a small file system.
    pg.small_tablespace("tiny", ROLE, 8);
    pg.sql(&format!(
        "ALTER DATABASE {DB} SET default_tablespace = 'tiny'"
    ));
    let mut gw = gateway(&pg, &password, r#"tls = "disable""#);
    publish_exits(&gw, 1, 6);
    wait_stored(&pg, 5);
    // Fill the rest of it.
    let full = pg.try_sql_in(
        DB,
        "SET ROLE eventgate;
         CREATE TABLE filler (t text);
         INSERT INTO filler SELECT repeat(md5(g::text), 8) FROM generate_series(1, 100000) g",
    );
    assert!(full.is_err(), "8 MiB held the filler");
    // More than the partition's and its indexes' last pages hold.
    publish_exits(&gw, 6, 206);
    let said = wait_not_ready(&mut gw, "forwarder central");
    assert!(
        said.contains("53100") && said.contains("No space left on device"),
        "{said}"
    );
    assert!(stored(&pg).0 < 205, "the events fit after all");
    pg.sql_in(DB, "DROP TABLE filler");
    wait_stored(&pg, 205);
    wait_ready(&mut gw);
}

#[test]
fn a_row_the_server_refuses_goes_to_the_dead_letters_and_its_batch_is_written() {
    use eventgate::proto::containerd::services::events::v1::PublishRequest;
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let password = store(&pg, dir.path());
    let gw = gateway(&pg, &password, "tls = \"disable\"\nbatch = { events = 50 }");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut client = gw.client().await;
        for n in 0..9u8 {
            // A type URL with a NUL byte: the SQLite store keeps it, PostgreSQL's
            // text cannot (22021).
            let type_url = match n {
                4 => "example.com/bad\0type".to_owned(),
                _ => format!("example.com/t{n}"),
            };
            let mut request = tonic::Request::new(PublishRequest {
                topic: "/things/happened".into(),
                event: Some(prost_types::Any {
                    type_url,
                    value: vec![n],
                }),
            });
            request
                .metadata_mut()
                .insert("containerd-namespace", "default".parse().unwrap());
            client.publish(request).await.expect("publish");
        }
    });
    wait_stored(&pg, 8);
    let data = gw.dir.path().join("data");
    let listed = wait_for("the refused row in the dead letters", STORED, || {
        let out = eventgate()
            .args(["dlq", "list", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("central").then_some(text)
    });
    let entry: Vec<&str> = listed.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (entry[1], entry[2], entry[6]),
        ("central", "5", "permanent"),
        "{listed}"
    );
    assert_eq!(listed.lines().count(), 2, "more than the one row: {listed}");
    assert_eq!(
        pg.sql_in(
            DB,
            "SELECT count(*) FROM events WHERE type_url LIKE 'example.com/t%'"
        ),
        "8"
    );
}
