use std::path::Path;

use super::*;
use crate::forward::ErrorKind;
use crate::testing;

fn options(toml: &str) -> Options {
    toml.parse().unwrap()
}

fn context(data_dir: &Path) -> Context {
    Context {
        name: "audit".into(),
        data_dir: data_dir.to_path_buf(),
    }
}

fn batch(seqs: std::ops::RangeInclusive<u64>) -> Batch {
    let events = seqs
        .map(|seq| {
            testing::event(seq)
                .at(0)
                .topic("/tasks/oom")
                .json("containerd.events.TaskOOM", r#"{"container_id":"c"}"#)
                .arc()
        })
        .collect();
    Batch::new(events, 0)
}

#[test]
fn options_have_defaults_and_bad_ones_are_named() {
    let parsed = SqliteOptions::parse(&Options::new()).unwrap();
    assert_eq!(parsed.path, Path::new("audit.db"));
    assert_eq!(parsed.synchronous, Synchronous::Normal);
    assert_eq!(parsed.busy_timeout, Duration::from_secs(5));
    let parsed = SqliteOptions::parse(&options(
        r#"synchronous = "full"
busy_timeout = "250ms""#,
    ))
    .unwrap();
    assert_eq!(parsed.synchronous, Synchronous::Full);
    assert_eq!(parsed.busy_timeout, Duration::from_millis(250));

    let cases = [
        (r#"pathh = "x.db""#, "pathh"),
        (r#"synchronous = "off""#, "full"),
        (r#"busy_timeout = "soon""#, "soon"),
        (r#"busy_timeout = "2h""#, "busy_timeout"),
        (r#"path = """#, "path"),
        ("retention = {}", "set `max_age`, `max_rows` or both"),
        (
            r#"retention = { max_age = "0s" }"#,
            "`max_age` must be longer",
        ),
        (r#"retention = { max_age = "a week" }"#, "a week"),
        (
            "retention = { max_rows = 0 }",
            "`max_rows` must be at least 1",
        ),
        ("retention = { max_rows = -5 }", "max_rows"),
        (
            r#"retention = { max_rows = 5, interval = "10ms" }"#,
            "`interval`",
        ),
        (
            "retention = { max_rows = 5, batch = 0 }",
            "`batch` must be between",
        ),
        ("retention = { max_rows = 5, max_size = 1 }", "max_size"),
    ];
    for (toml, named) in cases {
        let error = SqliteKind.check(&options(toml)).unwrap_err().to_string();
        assert!(error.contains(named), "{toml}: {error}");
    }
}

#[test]
fn retention_takes_age_rows_interval_and_batch() {
    let parsed = SqliteOptions::parse(&options(
        r#"retention = { max_age = "30d", max_rows = 1000000, interval = "5m", batch = 500 }"#,
    ))
    .unwrap();
    let retention = parsed.retention.unwrap();
    assert_eq!(retention.max_age, Some(Duration::from_secs(30 * 86400)));
    assert_eq!(retention.max_rows, Some(1_000_000));
    assert_eq!(retention.interval, Duration::from_secs(300));
    assert_eq!(retention.batch, 500);
    let defaults = SqliteOptions::parse(&options("retention = { max_rows = 10 }"))
        .unwrap()
        .retention
        .unwrap();
    assert_eq!(
        (defaults.max_age, defaults.interval, defaults.batch),
        (None, Duration::from_secs(60), 1000)
    );
}

/// The background pruner keeps the store within `max_rows` while batches keep
/// arriving, and stops with the forwarder.
#[tokio::test]
async fn the_forwarder_prunes_in_the_background_down_to_max_rows() {
    let dir = tempfile::tempdir().unwrap();
    let forwarder = SqliteKind
        .build(
            &context(dir.path()),
            &options(r#"retention = { max_rows = 5, interval = "1s", batch = 2 }"#),
        )
        .await
        .unwrap();
    forwarder.send(&batch(1..=12)).await.unwrap();
    let conn = store::open_reader(&dir.path().join("audit.db"), Duration::from_secs(1)).unwrap();
    let seqs = || -> Vec<i64> {
        conn.prepare("SELECT seq FROM events ORDER BY row_id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seqs().len() > 5 {
        assert!(std::time::Instant::now() < deadline, "still {:?}", seqs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seqs(), [8, 9, 10, 11, 12]);
    forwarder.close().await.unwrap();
}

#[tokio::test]
async fn relative_paths_live_under_the_data_dir_and_missing_dirs_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let kind = SqliteKind;
    let forwarder = kind
        .build(&context(&data), &options(r#"path = "store/audit.db""#))
        .await
        .unwrap();
    forwarder.send(&batch(1..=2)).await.unwrap();
    forwarder.close().await.unwrap();
    let conn = store::open_reader(&data.join("store/audit.db"), Duration::from_secs(1)).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
    let error = forwarder.send(&batch(3..=3)).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::Permanent, "closed: {error}");
}

#[tokio::test]
async fn an_unusable_location_fails_the_start_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blocker"), b"").unwrap();
    let error = match SqliteKind
        .build(
            &context(dir.path()),
            &options(r#"path = "blocker/audit.db""#),
        )
        .await
    {
        Ok(_) => panic!("built on a path under a regular file"),
        Err(error) => format!("{:#}", anyhow::Error::from(error)),
    };
    assert!(error.contains("cannot open the audit store"), "{error}");
    assert!(error.contains("blocker"), "{error}");
}

/// A row SQLite refuses (here: a trigger, standing in for any constraint other than
/// the id) can never go in: permanent, and the rows before it are not kept either.
#[tokio::test]
async fn a_refused_row_is_permanent_and_rolls_back_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let forwarder = SqliteForwarder::open("audit", path.clone(), WriterOptions::default())
        .await
        .unwrap();
    let guard = rusqlite::Connection::open(&path).unwrap();
    guard
        .execute_batch(
            "CREATE TRIGGER refuse_seq_3 BEFORE INSERT ON events WHEN NEW.seq = 3
             BEGIN SELECT RAISE(ABORT, 'seq 3 refused'); END;",
        )
        .unwrap();
    let error = forwarder.send(&batch(1..=4)).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::Permanent, "{error}");
    assert!(error.message.contains("seq 3 refused"), "{error}");
    let n: i64 = guard
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
    // The writer is usable afterwards: nothing was left open.
    forwarder.send(&batch(5..=6)).await.unwrap();
}

#[tokio::test]
async fn a_checkpoint_records_its_position_in_a_synced_commit_and_batches_stay_unsynced() {
    let dir = tempfile::tempdir().unwrap();
    let forwarder = SqliteKind
        .build(&context(dir.path()), &Options::new())
        .await
        .unwrap();
    forwarder.send(&batch(1..=3)).await.unwrap();
    forwarder.checkpoint(4).await.unwrap();
    forwarder.send(&batch(4..=5)).await.unwrap();
    forwarder.checkpoint(9).await.unwrap();
    forwarder.close().await.unwrap();
    let conn = Connection::open(dir.path().join("audit.db")).unwrap();
    let (name, next): (String, i64) = conn
        .query_row("SELECT forwarder, next_seq FROM checkpoints", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    assert_eq!((name.as_str(), next), ("audit", 9), "one row, the latest");
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 5);
}

#[test]
fn after_a_checkpoint_the_batches_commit_in_the_configured_mode_again() {
    for (configured, pragma) in [(Synchronous::Normal, 1), (Synchronous::Full, 2)] {
        let dir = tempfile::tempdir().unwrap();
        let options = WriterOptions {
            synchronous: configured,
            ..WriterOptions::default()
        };
        let conn = store::open_writer(&dir.path().join("audit.db"), &options).unwrap();
        let conn = Mutex::new(Some(conn));
        checkpoint("audit", &conn, 7, configured).unwrap();
        let guard = conn.lock().unwrap();
        let conn = guard.as_ref().unwrap();
        let mode: i64 = conn
            .pragma_query_value(None, "synchronous", |row| row.get(0))
            .unwrap();
        assert_eq!(mode, pragma, "{configured:?}");
        let next: i64 = conn
            .query_row("SELECT next_seq FROM checkpoints", [], |row| row.get(0))
            .unwrap();
        assert_eq!(next, 7);
    }
}
