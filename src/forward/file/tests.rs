//! The writer driven directly: a manual clock for age rotation, injected faults for
//! failed writes and syncs. Files are real and read back whole.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::archive::Archive;
use super::options::{FileOptions, Fsync};
use super::writer::{Clock, Writer};
use crate::event::Event;
use crate::testing::{self, T0};

struct ManualClock(Mutex<SystemTime>);

impl ManualClock {
    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap()
    }
}

/// An exit of container `c{seq}` with status `seq`: lines differ and say which event.
fn event(seq: u64) -> Arc<Event> {
    testing::event(seq)
        .at_nanos(T0, 1)
        .json(
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"c{seq}","exit_status":{seq}}}"#),
        )
        .arc()
}

fn events(seqs: std::ops::RangeInclusive<u64>) -> Vec<Arc<Event>> {
    seqs.map(event).collect()
}

struct Setup {
    dir: tempfile::TempDir,
    /// Where the checkpoint record is kept (not among the files of the set).
    state: tempfile::TempDir,
    clock: Arc<ManualClock>,
    rotations: Arc<AtomicUsize>,
    archive: Arc<Archive>,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let archive = Arc::new(Archive::new(
            "t".into(),
            &dir.path().join("events.jsonl"),
            0,
            false,
        ));
        Self {
            dir,
            state: tempfile::tempdir().unwrap(),
            clock: Arc::new(ManualClock(Mutex::new(
                SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600),
            ))),
            rotations: Arc::default(),
            archive,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("events.jsonl")
    }

    fn writer(&self, options: FileOptions) -> Writer {
        let rotations = Arc::clone(&self.rotations);
        Writer::open(
            "t".into(),
            self.path(),
            options,
            Arc::clone(&self.archive),
            Box::new(move || {
                rotations.fetch_add(1, Ordering::SeqCst);
            }),
            Arc::clone(&self.clock) as Arc<dyn Clock>,
            self.state.path().join("t.file"),
        )
        .unwrap()
    }

    /// Every file of the set (rotated ones by name, i.e. oldest first, then the
    /// active one) and the `seq` of each line in it.
    fn files(&self) -> Vec<(String, Vec<u64>)> {
        let mut names: Vec<String> = fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != "events.jsonl")
            .collect();
        names.sort();
        names.push("events.jsonl".into());
        names
            .into_iter()
            .map(|name| {
                let seqs = seqs(&self.dir.path().join(&name));
                (name, seqs)
            })
            .collect()
    }

    fn all_seqs(&self) -> Vec<u64> {
        self.files().into_iter().flat_map(|(_, s)| s).collect()
    }
}

/// Parses every line as JSON (a torn line would fail here) and returns its `seq`.
fn seqs(path: &Path) -> Vec<u64> {
    let text = fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{path:?} ends mid-line"
    );
    text.lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{path:?}: not a JSON line ({e}): {line:?}"));
            value["seq"].as_u64().unwrap()
        })
        .collect()
}

fn options() -> FileOptions {
    FileOptions::default()
}

#[test]
fn age_rotation_follows_the_clock() {
    let setup = Setup::new();
    let mut writer = setup.writer(FileOptions {
        max_age: Duration::from_secs(60),
        ..options()
    });
    writer.write_batch(&events(1..=2)).unwrap();
    setup.clock.advance(Duration::from_secs(59));
    writer.tick();
    writer.write_batch(&events(3..=3)).unwrap();
    assert_eq!(setup.rotations.load(Ordering::SeqCst), 0, "not due yet");

    setup.clock.advance(Duration::from_secs(1));
    writer.tick();
    assert_eq!(setup.rotations.load(Ordering::SeqCst), 1);
    let files = setup.files();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].0, "events-20240501T100100.000000000Z.jsonl");
    assert_eq!(files[0].1, [1, 2, 3]);
    assert_eq!(files[1].1, Vec::<u64>::new());

    // An empty active file is never rotated; age counts from its first line.
    setup.clock.advance(Duration::from_secs(3600));
    writer.tick();
    writer.write_batch(&events(4..=4)).unwrap();
    setup.clock.advance(Duration::from_secs(59));
    writer.write_batch(&events(5..=5)).unwrap();
    assert_eq!(setup.rotations.load(Ordering::SeqCst), 1);
    // Due at the next batch even without a tick, before its lines are written.
    setup.clock.advance(Duration::from_secs(1));
    writer.write_batch(&events(6..=6)).unwrap();
    assert_eq!(setup.rotations.load(Ordering::SeqCst), 2);
    let files = setup.files();
    assert_eq!(
        files.iter().map(|f| f.1.clone()).collect::<Vec<_>>(),
        [vec![1, 2, 3], vec![4, 5], vec![6]]
    );
}

#[test]
fn size_rotation_never_splits_a_line() {
    let setup = Setup::new();
    let line_len = super::render_line(&event(1), super::Format::Jsonl).len() as u64;
    let mut writer = setup.writer(FileOptions {
        max_size: 3 * line_len + line_len / 2,
        ..options()
    });
    for batch in [1..=2, 3..=9, 10..=10] {
        writer.write_batch(&events(batch)).unwrap();
    }
    let files = setup.files();
    assert_eq!(
        files.iter().map(|f| f.1.clone()).collect::<Vec<_>>(),
        [vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9], vec![10]]
    );
    for (name, _) in &files {
        let len = fs::metadata(setup.dir.path().join(name)).unwrap().len();
        assert!(len <= 3 * line_len + line_len / 2, "{name}: {len}");
    }
}

#[test]
fn a_failed_write_is_cut_back_and_the_retry_leaves_no_torn_or_duplicate_line() {
    let setup = Setup::new();
    let mut writer = setup.writer(options());
    writer.write_batch(&events(1..=3)).unwrap();
    let before = fs::read(setup.path()).unwrap();

    let batch = events(4..=8);
    writer.faults.short_write = Some(100);
    let error = writer.write_batch(&batch).unwrap_err();
    assert!(
        super::chain(&error).contains("No space left on device"),
        "{error}"
    );
    assert_eq!(
        fs::read(setup.path()).unwrap(),
        before,
        "the partial batch is gone"
    );

    writer.write_batch(&batch).unwrap();
    assert_eq!(setup.all_seqs(), (1..=8).collect::<Vec<_>>());
}

#[test]
fn a_failed_sync_is_not_acknowledged_and_the_retry_writes_the_batch_once() {
    let setup = Setup::new();
    let mut writer = setup.writer(FileOptions {
        fsync: Fsync::Batch,
        ..options()
    });
    writer.write_batch(&events(1..=2)).unwrap();
    let batch = events(3..=5);
    writer.faults.sync = true;
    let error = writer.write_batch(&batch).unwrap_err();
    assert!(
        super::chain(&error).contains("Input/output error"),
        "{error}"
    );
    assert_eq!(setup.all_seqs(), [1, 2]);
    writer.write_batch(&batch).unwrap();
    assert_eq!(setup.all_seqs(), [1, 2, 3, 4, 5]);
}

#[test]
fn a_retry_after_a_rotation_mid_batch_skips_what_was_committed() {
    let setup = Setup::new();
    let line_len = super::render_line(&event(1), super::Format::Jsonl).len() as u64;
    let mut writer = setup.writer(FileOptions {
        max_size: 2 * line_len,
        fsync: Fsync::Always,
        ..options()
    });
    let batch = events(1..=5);
    // Lines 1..=4 are written and synced one by one (rotating after 2), line 5 fails.
    writer.faults.writes_before_fault = 4;
    writer.faults.short_write = Some(7);
    assert!(writer.write_batch(&batch).is_err());
    assert_eq!(setup.all_seqs(), [1, 2, 3, 4]);
    writer.write_batch(&batch).unwrap();
    assert_eq!(
        setup
            .files()
            .iter()
            .map(|f| f.1.clone())
            .collect::<Vec<_>>(),
        [vec![1, 2], vec![3, 4], vec![5]]
    );
}

/// Redelivered dead letters and replays carry sequence numbers older than the
/// file's last line: they are new to the file and written. Only the same batch sent
/// again (an attempt that completed after the pipeline stopped waiting) is skipped.
#[test]
fn older_events_are_written_and_only_a_batch_sent_again_is_skipped() {
    let setup = Setup::new();
    let mut writer = setup.writer(options());
    let live = events(5..=7);
    writer.write_batch(&live).unwrap();
    writer.write_batch(&live).unwrap();
    assert_eq!(setup.all_seqs(), [5, 6, 7], "the same batch again");

    let redelivered = vec![event(2), event(3)];
    writer.write_batch(&redelivered).unwrap();
    writer.write_batch(&events(8..=8)).unwrap();
    // The same seq under another id is another event (a replay of a store whose
    // seqs restarted, say).
    writer.write_batch(&events(6..=6)).unwrap();
    assert_eq!(setup.all_seqs(), [5, 6, 7, 2, 3, 8, 6]);
}

#[test]
fn a_partial_line_left_by_a_crash_is_cut_off_at_open() {
    let setup = Setup::new();
    let line = super::render_line(&event(1), super::Format::Jsonl);
    let mut content = line.clone();
    content.extend_from_slice(&line[..line.len() / 2]);
    fs::write(setup.path(), &content).unwrap();
    let mut writer = setup.writer(options());
    writer.write_batch(&events(2..=2)).unwrap();
    assert_eq!(setup.all_seqs(), [1, 2]);
}

#[test]
fn interval_sync_does_not_hold_up_a_batch() {
    let setup = Setup::new();
    let mut writer = setup.writer(FileOptions {
        fsync: Fsync::Interval,
        fsync_interval: Duration::from_secs(1),
        ..options()
    });
    // A sync that would fail is not attempted within the interval...
    writer.faults.sync = true;
    writer.write_batch(&events(1..=1)).unwrap();
    // ...but is by the tick once the interval has passed (and only logged).
    setup.clock.advance(Duration::from_secs(1));
    writer.tick();
    assert!(!writer.faults.sync, "the tick synced");
    assert_eq!(setup.all_seqs(), [1]);
}

#[test]
fn batches_wait_for_the_checkpoint_and_a_failed_one_goes_back_to_the_last() {
    let setup = Setup::new();
    let mut writer = setup.writer(options());
    writer.write_batch(&events(1..=2)).unwrap();
    writer.checkpoint(3).unwrap();
    writer.write_batch(&events(3..=5)).unwrap();
    assert_eq!(setup.all_seqs(), [1, 2, 3, 4, 5], "written without a sync");
    writer.faults.sync = true;
    let error = writer.checkpoint(6).unwrap_err();
    assert!(
        super::chain(&error).contains("Input/output error"),
        "{error}"
    );
    assert_eq!(
        setup.all_seqs(),
        [1, 2],
        "what the failed checkpoint covered is gone, to be sent again"
    );
    assert_eq!(writer.resume(3, 6).unwrap(), 3);
    writer.write_batch(&events(3..=5)).unwrap();
    writer.checkpoint(6).unwrap();
    assert_eq!(setup.all_seqs(), [1, 2, 3, 4, 5]);

    // The record could not be saved: as if the sync had failed.
    writer.write_batch(&events(6..=7)).unwrap();
    writer.faults.record = true;
    assert!(writer.checkpoint(8).is_err());
    assert_eq!(setup.all_seqs(), [1, 2, 3, 4, 5]);
}

#[test]
fn a_restart_cuts_the_file_back_to_its_checkpoint_and_resumes_after_it() {
    let setup = Setup::new();
    let mut writer = setup.writer(options());
    writer.write_batch(&events(1..=4)).unwrap();
    writer.checkpoint(5).unwrap();
    // Sent after the checkpoint, then the process dies.
    writer.write_batch(&events(5..=7)).unwrap();
    drop(writer);

    let mut writer = setup.writer(options());
    // The spool's cursor had not followed the checkpoint yet (it is persisted after
    // it): the file's record says where its durable part ends.
    assert_eq!(writer.resume(2, 8).unwrap(), 5);
    assert_eq!(setup.all_seqs(), [1, 2, 3, 4]);
    writer.write_batch(&events(5..=7)).unwrap();
    assert_eq!(setup.all_seqs(), (1..=7).collect::<Vec<_>>());

    // A spool that ends before the checkpoint is another spool: nothing is cut.
    drop(writer);
    let mut writer = setup.writer(options());
    assert_eq!(writer.resume(1, 3).unwrap(), 1);
    assert_eq!(setup.all_seqs(), (1..=7).collect::<Vec<_>>());
}

#[test]
fn a_record_past_the_spools_end_is_replaced_so_later_checkpoints_do_not_carry_it() {
    let setup = Setup::new();
    let mut writer = setup.writer(options());
    writer.write_batch(&events(1..=7)).unwrap();
    writer.checkpoint(8).unwrap();
    drop(writer);

    // A power cut took the spool's unsynced tail (`fsync = "none"`): it ends at 3,
    // and numbers the next events 3, 4, ... again.
    let mut writer = setup.writer(options());
    assert_eq!(writer.resume(1, 3).unwrap(), 1);
    writer.write_batch(&events(1..=4)).unwrap();
    writer.checkpoint(5).unwrap();
    // New events 5 and 6, written but not checkpointed, then a crash.
    writer.write_batch(&events(5..=6)).unwrap();
    drop(writer);

    let mut writer = setup.writer(options());
    assert_eq!(
        writer.resume(5, 9).unwrap(),
        5,
        "the old record's position 8 would skip the new events 5 to 7"
    );
}

#[test]
fn a_rotation_seals_the_rotated_file_so_a_restart_neither_repeats_nor_loses_it() {
    let setup = Setup::new();
    let line_len = super::render_line(&event(1), super::Format::Jsonl).len() as u64;
    let rotating = || FileOptions {
        max_size: 3 * line_len,
        ..options()
    };
    let mut writer = setup.writer(rotating());
    writer.write_batch(&events(1..=2)).unwrap();
    writer.checkpoint(3).unwrap();
    // Line 3 completes the first file, which is then rotated (synced, sealed);
    // lines 4 and 5 start the next one; no checkpoint covers them.
    writer.write_batch(&events(3..=5)).unwrap();
    assert_eq!(setup.rotations.load(Ordering::SeqCst), 1);
    drop(writer);

    let mut writer = setup.writer(rotating());
    assert_eq!(
        writer.resume(3, 6).unwrap(),
        4,
        "the rotated file holds line 3 durably"
    );
    assert_eq!(
        setup.all_seqs(),
        [1, 2, 3],
        "lines 4 and 5 go, to be written again"
    );
    writer.write_batch(&events(4..=5)).unwrap();
    assert_eq!(setup.all_seqs(), [1, 2, 3, 4, 5]);
}
