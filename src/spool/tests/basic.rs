use std::sync::Arc;

use super::*;

#[tokio::test]
async fn appends_are_read_back_in_order_across_segment_rolls() {
    let dir = TempSpool::new();
    let (spool, recovery) = dir.open(&["a"]);
    assert_eq!((recovery.next_seq, recovery.records), (1, 0));
    append(&spool, 50).await;
    assert!(
        segment_files(dir.path()).len() >= 4,
        "4 KiB segments rolled"
    );
    assert_eq!(spool.stats().segments, segment_files(dir.path()).len());
    assert_eq!(read_all(&spool, 1).await, (range(1, 50), vec![]));
    assert_eq!(read_all(&spool, 31).await, (range(31, 50), vec![]));
    // Every segment but the last was rolled at a record boundary past the limit.
    let files = segment_files(dir.path());
    for file in &files[..files.len() - 1] {
        let len = std::fs::metadata(file).unwrap().len();
        assert!((4096..4096 + 400).contains(&len), "{len}");
        assert!(!records_in(file).is_empty());
    }

    // A reader at the end waits for the next durable event.
    let mut reader = spool.reader(51);
    let waiting = tokio::spawn(async move { reader.next(10, 1 << 20).await });
    append(&spool, 1).await;
    let batch = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(batch.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [51]);
    spool.close().await.unwrap();
}

/// Publishers append under one order lock (as the exchange does) and each waits for
/// its own ticket; every acknowledged record must already be in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_are_durable_in_order_in_every_mode() {
    for fsync in [Fsync::Batch, Fsync::Always, Fsync::None] {
        let dir = TempSpool::new();
        let (spool, _) = dir.open_with(&spool_settings(fsync), &["a"]);
        let order = Arc::new(std::sync::Mutex::new(()));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (spool, order, dir) = (spool.clone(), order.clone(), dir.path().to_owned());
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                for _ in 0..25 {
                    let ticket = {
                        let _turn = order.lock().unwrap();
                        spool.append(&event(spool.next_seq())).unwrap()
                    };
                    let seq = ticket.seq;
                    spool.durable(ticket).await.unwrap();
                    assert!(spool.stats().durable_seq >= seq);
                    assert!(
                        on_disk(&dir, seq),
                        "{fsync:?}: seq {seq} acknowledged before written"
                    );
                    mine.push(seq);
                }
                mine
            }));
        }
        for task in tasks {
            let mine = task.await.unwrap();
            assert!(mine.windows(2).all(|w| w[0] < w[1]));
        }
        let stats = spool.stats();
        assert_eq!((stats.next_seq, stats.durable_seq), (201, 200));
        match fsync {
            // Group commit: one sync per written group, shared by its publishers.
            Fsync::Batch => assert_eq!(stats.fsyncs, stats.groups),
            Fsync::Always => assert_eq!(stats.fsyncs, 200),
            Fsync::None => assert_eq!(stats.fsyncs, 0),
        }
        assert_eq!(read_all(&spool, 1).await, (range(1, 200), vec![]));
        spool.close().await.unwrap();
    }
}

fn on_disk(dir: &Path, seq: u64) -> bool {
    segment_files(dir).iter().any(|file| {
        let bytes = std::fs::read(file).unwrap();
        let mut at = 0;
        while let record::Check::Valid { seq: found, len } = record::check(&bytes[at..]) {
            if found == seq {
                return true;
            }
            at += len;
        }
        false
    })
}

#[tokio::test]
async fn reopening_resumes_the_sequence_and_the_cursors() {
    let dir = TempSpool::new();
    let (spool, _) = dir.open(&["a", "b"]);
    append(&spool, 30).await;
    spool.set_cursor("a", 20);
    spool.set_cursor("b", 10);
    spool.set_cursor("b", 5); // never moves back
    spool.set_cursor("nobody", 25);
    assert_eq!((spool.cursor("a"), spool.cursor("b")), (20, 10));
    spool.close().await.unwrap();
    assert!(matches!(spool.append(&event(31)), Err(SpoolError::Closed)));

    let (spool, recovery) = dir.open(&["a", "b", "c"]);
    assert_eq!((recovery.next_seq, recovery.records), (31, 30));
    assert_eq!(recovery.cursors_added, ["c"]);
    assert!(!recovery.damaged());
    assert_eq!(spool.next_seq(), 31);
    assert_eq!(
        (spool.cursor("a"), spool.cursor("b"), spool.cursor("c")),
        (20, 10, 31)
    );
    assert!(matches!(
        spool.append(&event(7)),
        Err(SpoolError::OutOfOrder {
            expected: 31,
            got: 7
        })
    ));
    append(&spool, 1).await;
    spool.close().await.unwrap();

    let (spool, recovery) = dir.open(&["a"]);
    assert_eq!(recovery.cursors_dropped, ["b", "c"]);
    assert_eq!((spool.next_seq(), spool.cursor("a")), (32, 20));
    spool.close().await.unwrap();
}

#[tokio::test]
async fn cursors_reach_the_disk_within_a_second_without_close() {
    let dir = TempSpool::new();
    let (spool, _) = dir.open(&["a"]);
    append(&spool, 10).await;
    spool.set_cursor("a", 8);
    let file = dir.path().join("cursors");
    // A crash from here on re-delivers at most what was set in the last second.
    wait_for(|| std::fs::read_to_string(&file).unwrap().contains("\na 8\n")).await;
    spool.close().await.unwrap();
}

#[tokio::test]
async fn segments_go_once_every_cursor_has_passed_them() {
    let dir = TempSpool::new();
    let (spool, _) = dir.open(&["a", "b"]);
    append(&spool, 40).await;
    let before = segment_files(dir.path()).len();
    spool.set_cursor("a", 41);
    assert_eq!(
        spool.stats().segments,
        before,
        "b still needs every segment"
    );
    spool.set_cursor("b", 30);
    let stats = spool.stats();
    assert!(stats.segments < before);
    assert!(stats.first_seq > 1 && stats.first_seq <= 30);
    wait_for(|| segment_files(dir.path()).len() == stats.segments).await;
    let (seqs, gaps) = read_all(&spool, 1).await;
    assert_eq!(
        gaps,
        [Gap {
            first: 1,
            last: stats.first_seq - 1
        }]
    );
    assert_eq!(seqs, range(stats.first_seq, 40));

    // Even with every segment gone, the sequence never restarts.
    spool.set_cursor("b", 41);
    spool.close().await.unwrap();
    assert_eq!(segment_files(dir.path()).len(), 1);
    let (spool, recovery) = dir.open(&["a", "b"]);
    assert_eq!((recovery.next_seq, spool.cursor("b")), (41, 41));
    spool.close().await.unwrap();
}

#[tokio::test]
async fn a_segment_is_deleted_only_after_the_cursors_that_passed_it_are_persisted() {
    let dir = TempSpool::new();
    let (spool, _) = dir.open(&["a"]);
    append(&spool, 40).await;
    let before = segment_files(dir.path()).len();
    // Within a second of the open: cursors that are not due yet must not let a
    // segment go before them (a crash between the two would leave the persisted
    // cursor pointing into deleted records).
    spool.set_cursor("a", 30);
    wait_for(|| segment_files(dir.path()).len() < before).await;
    let cursors = std::fs::read_to_string(dir.path().join("cursors")).unwrap();
    assert!(cursors.contains("\na 30\n"), "{cursors}");
    spool.close().await.unwrap();
}

#[tokio::test]
async fn an_unusable_directory_is_a_precise_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let error = Spool::open(&file.join("spool"), &spool_settings(Fsync::Batch), &[])
        .err()
        .unwrap();
    let message = error.to_string();
    assert!(message.contains("not-a-dir"), "{message}");
    let mut bad = spool_settings(Fsync::Batch);
    bad.max_bytes = ByteSize(4096);
    let message = Spool::open(dir.path(), &bad, &[])
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("spool.max_bytes"), "{message}");
}

/// Waits for a condition the writer thread brings about, with a deadline.
pub async fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached in 5s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A spool an earlier version left (a record laid out by hand in the format from
/// before origins were kept) is read after the upgrade as live, and a reconciled event
/// appended after it comes back reconciled, with its clock, from a reopened spool.
#[tokio::test]
async fn origins_survive_a_reopen_next_to_records_from_before_them() {
    use crate::event::{Clock, Origin};
    use prost::Message as _;

    let dir = TempSpool::new();
    let old = event(1);
    let mut body = Vec::new();
    body.extend_from_slice(&1u64.to_le_bytes());
    body.extend_from_slice(old.identity.id.as_bytes());
    body.extend_from_slice(&1_714_557_600_000_000_000i64.to_le_bytes());
    body.push(0); // publish, no flags
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&old.envelope.encode_to_vec());
    let mut segment = Vec::new();
    segment.extend_from_slice(&(body.len() as u32).to_le_bytes());
    segment.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    segment.extend_from_slice(&body);
    let dirs = files::Dirs::new(dir.path());
    std::fs::create_dir_all(&dirs.segments).unwrap();
    std::fs::write(dirs.segment(1), &segment).unwrap();

    let reconciled = Origin::reconciled(Clock::Daemon);
    let (spool, recovery) = dir.open(&["a"]);
    assert_eq!((recovery.next_seq, recovery.records), (2, 1));
    let ticket = spool.append(&event(2).with_origin(reconciled)).unwrap();
    spool.durable(ticket).await.unwrap();
    spool.close().await.unwrap();

    let (spool, _) = dir.open(&["a"]);
    let mut reader = spool.reader(1);
    let batch = tokio::time::timeout(Duration::from_secs(5), reader.next(10, 1 << 20))
        .await
        .expect("durable records are returned at once")
        .unwrap();
    let read: Vec<(u64, Origin)> = batch
        .events
        .iter()
        .map(|e| (e.seq, e.identity.origin))
        .collect();
    assert_eq!(read, [(1, Origin::Live), (2, reconciled)]);
    assert_eq!(batch.events[0].identity.id, old.identity.id);
    assert_eq!(batch.events[0].envelope, old.envelope);
    spool.close().await.unwrap();
}
