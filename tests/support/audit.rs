//! The SQLite audit store read as a user reads it: a second, read-only connection
//! next to the gateway's writer.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

use eventgate::internal::store;

use super::config::Config;
use super::{DEADLINE, Gateway, eventgate, path_str, publish_json, wait_for};

#[derive(Debug, Clone)]
pub struct Row {
    /// Storage order (`seq` restarts with each gateway process).
    pub row_id: i64,
    pub id: String,
    pub namespace: String,
    pub topic: String,
    pub event: Value,
    pub source: String,
    /// `live`, or `reconciled` for an event a reconcile reconstructed.
    pub origin: String,
    /// For reconciled events: whose clock the timestamp is (`daemon`, `reconcile`).
    pub origin_clock: Option<String>,
    /// The node the event was captured on.
    pub node: Option<String>,
}

impl Row {
    /// The container an event is about (`id` in container events, `container_id` in
    /// task events).
    pub fn container(&self) -> Option<&str> {
        self.event
            .get("container_id")
            .or_else(|| self.event.get("id"))
            .and_then(Value::as_str)
    }
}

/// Every stored row in storage order, read as a user would (a second, read-only
/// connection next to the gateway's writer). Empty while the store does not exist.
pub fn stored(db: &Path) -> Vec<Row> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return Vec::new();
    };
    let Ok(mut statement) = conn.prepare(
        "SELECT row_id, id, namespace, topic, event, source, origin, origin_clock, node \
             FROM events ORDER BY row_id",
    ) else {
        return Vec::new();
    };
    statement
        .query_map([], |r| {
            let event: Option<String> = r.get(4)?;
            Ok(Row {
                row_id: r.get(0)?,
                id: r.get(1)?,
                namespace: r.get(2)?,
                topic: r.get(3)?,
                event: event
                    .map(|e| serde_json::from_str(&e).expect("event column holds JSON"))
                    .unwrap_or(Value::Null),
                source: r.get(5)?,
                origin: r.get(6)?,
                origin_clock: r.get(7)?,
                node: r.get(8)?,
            })
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// Waits until the store holds a row satisfying `found`; returns all rows then.
pub fn wait_stored(db: &Path, what: &str, found: impl Fn(&Row) -> bool) -> Vec<Row> {
    wait_for(what, DEADLINE, || {
        let rows = stored(db);
        rows.iter().any(&found).then_some(rows)
    })
}

pub fn markers<'a>(rows: &'a [Row], topic: &str) -> Vec<&'a Row> {
    rows.iter().filter(|r| r.topic == topic).collect()
}

/// Exits [`gateway_with_events`] publishes and waits to see stored.
pub const EVENTS: i64 = 5;

/// What an `eventgate audit` run said.
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// `eventgate audit ARGS`, run to its end.
pub fn audit(args: &[&str]) -> Outcome {
    let out = eventgate()
        .arg("audit")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run eventgate audit");
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A gateway on its default configuration (the sqlite forwarder at
/// <data>/audit.db) with `EVENTS` exits published and stored.
pub fn gateway_with_events() -> Gateway {
    let gw = Gateway::start(&[]);
    for i in 1..=EVENTS {
        let json = format!(r#"{{"container_id":"c{i}","exit_status":{i}}}"#);
        let (ok, err) = publish_json(
            &gw.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &json,
        );
        assert!(ok, "{err}");
    }
    let db = gw.dir.path().join("data/audit.db");
    let conn = wait_for("the audit store to exist", DEADLINE, || {
        store::open_reader(&db, Duration::from_secs(1)).ok()
    });
    wait_for("every event stored", DEADLINE, || {
        let n: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .ok()?;
        (n == EVENTS).then_some(())
    });
    gw
}

/// The gateway's data directory, as `--data-dir` takes it.
pub fn data(gw: &Gateway) -> String {
    path_str(&gw.dir.path().join("data")).to_owned()
}

/// A config of one `sqlite` forwarder, `audit` at `audit.db`, with `extra` keys.
pub fn write_sqlite_config(dir: &Path, extra: &str) -> PathBuf {
    Config::new()
        .sqlite("audit", "audit.db", extra)
        .write_to(&dir.join("eventgate.toml"))
}

/// A reader of the audit store at `path` once it holds at least `n` rows.
pub fn wait_rows(path: &Path, n: i64) -> Connection {
    let conn = wait_for("the audit store to exist", DEADLINE, || {
        store::open_reader(path, Duration::from_secs(1)).ok()
    });
    wait_for(&format!("{n} rows in the audit store"), DEADLINE, || {
        (conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
            .unwrap_or(0)
            >= n)
            .then_some(())
    });
    conn
}

/// What an attacker who read migrations/README.md does after changing rows: every
/// hash from `from` on recomputed with the store's own hashing, and the head's hash
/// (returned).
pub fn rehash_from(db: &Path, from: i64) -> [u8; 32] {
    use eventgate::internal::store::chain::{COLUMNS, row_hash};
    use rusqlite::types::ValueRef;
    let conn = rusqlite::Connection::open(db).expect("open");
    let mut prev: [u8; 32] = conn
        .query_row(
            "SELECT coalesce((SELECT hash FROM events WHERE row_id = ?1 - 1), zeroblob(32))",
            [from],
            |r| r.get(0),
        )
        .expect("the hash before");
    let mut updates = Vec::new();
    {
        let mut statement = conn
            .prepare(&format!(
                "SELECT row_id, {} FROM events WHERE row_id >= ?1 ORDER BY row_id",
                COLUMNS.join(", ")
            ))
            .expect("prepare");
        let mut rows = statement.query([from]).expect("query");
        while let Some(row) = rows.next().expect("row") {
            let mut values = [ValueRef::Null; COLUMNS.len()];
            for (i, value) in values.iter_mut().enumerate() {
                *value = row.get_ref(i + 1).expect("value");
            }
            let hash = row_hash(&prev, &values);
            updates.push((row.get::<_, i64>(0).expect("row_id"), prev, hash));
            prev = hash;
        }
    }
    for (row_id, before, hash) in updates {
        conn.execute(
            "UPDATE events SET prev_hash = ?2, hash = ?3 WHERE row_id = ?1",
            rusqlite::params![row_id, before, hash],
        )
        .expect("rehash");
    }
    conn.execute("UPDATE audit_chain SET head_hash = ?1", [prev])
        .expect("head");
    prev
}
