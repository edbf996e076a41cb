//! Recovery reads segments through a bounded window: whatever the chunk size, it
//! keeps, cuts and quarantines exactly the same bytes, and never holds more than a
//! chunk (or one record, when a record is larger) of a segment in memory.

use super::*;
use crate::spool::files::Dirs;
use crate::spool::recovery::recover_in_chunks;

/// What recovery of a copy of a spool directory left behind, with quarantined files
/// named relative to their directory so that copies compare equal.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    report: Recovery,
    segments: Vec<(u64, u64, u64)>,
    last_seq: u64,
    files: Vec<(String, Vec<u8>)>,
    corrupt: Vec<(String, Vec<u8>)>,
}

fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Recovers a copy of `spool` reading `chunk` bytes at a time.
fn recover_copy(spool: &Path, chunk: usize) -> (Outcome, usize) {
    let copy = tempfile::tempdir().unwrap();
    for sub in ["segments", "corrupt"] {
        std::fs::create_dir_all(copy.path().join(sub)).unwrap();
    }
    for path in segment_files(spool) {
        std::fs::copy(
            &path,
            copy.path().join("segments").join(path.file_name().unwrap()),
        )
        .unwrap();
    }
    let dirs = Dirs::new(copy.path());
    let mut report = Recovery::default();
    let recovered = recover_in_chunks(&dirs, &mut report, chunk).unwrap();
    for path in &mut report.quarantined {
        *path = PathBuf::from(path.file_name().unwrap());
    }
    report.quarantined.sort();
    let outcome = Outcome {
        report,
        segments: recovered
            .segments
            .iter()
            .map(|s| (s.first_seq, s.end_seq, s.bytes))
            .collect(),
        last_seq: recovered.last_seq,
        files: contents(&dirs.segments),
        corrupt: contents(&dirs.corrupt),
    };
    (outcome, recovered.read_peak)
}

#[tokio::test]
async fn recovery_in_small_chunks_finds_and_repairs_exactly_what_whole_reads_do() {
    let dir = TempSpool::new();
    let (spool, _) = dir.open(&["a"]);
    append(&spool, 40).await;
    spool.close().await.unwrap();
    let files = segment_files(dir.path());
    let record_len = records_in(&files[0])[0].1;
    // A bad length in the first segment, a flipped payload bit in the second, a torn
    // tail on the last: resyncing, cutting out and cutting off, across chunk edges.
    let first = records_in(&files[0]);
    let second = records_in(&files[1]);
    flip(&files[0], first[2].0 + 1, 0x40);
    flip(&files[1], second[4].0 + 200, 0x01);
    let last = files.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(last)
        .unwrap()
        .set_len(len - 7)
        .unwrap();

    let (whole, _) = recover_copy(dir.path(), 1 << 20);
    assert_eq!(whole.report.corrupt_ranges, 2, "{:?}", whole.report);
    assert_eq!(whole.report.missing_records, 2);
    assert_eq!(whole.report.truncated_bytes, record_len as u64 - 7);
    assert_eq!(whole.last_seq, 39);
    for chunk in [1000, 333, record_len - 1, 17] {
        let (chunked, peak) = recover_copy(dir.path(), chunk);
        assert_eq!(chunked, whole, "chunk {chunk}");
        // A chunk at a time, or one record when a record is larger than a chunk:
        // never a whole 4 KiB segment.
        assert!(
            peak <= chunk.max(record_len),
            "chunk {chunk}: held {peak} bytes"
        );
    }
}

#[tokio::test]
async fn a_large_spool_is_opened_holding_one_chunk_of_it() {
    let dir = TempSpool::new();
    let mut big = spool_settings(Fsync::Batch);
    big.segment_bytes = ByteSize(256 << 10);
    big.max_bytes = ByteSize(4 << 20);
    let (spool, _) = dir.open_with(&big, &["a"]);
    // Segments several times the chunk below: a whole read would hold 256 KiB.
    let mut tickets = Vec::new();
    for _ in 0..3000 {
        tickets.push(spool.append(&event(spool.next_seq())).unwrap());
    }
    for ticket in tickets {
        spool.durable(ticket).await.unwrap();
    }
    spool.close().await.unwrap();
    let (outcome, peak) = recover_copy(dir.path(), 16 << 10);
    assert_eq!(outcome.report.records, 3000);
    assert_eq!(outcome.last_seq, 3000);
    assert!(!outcome.report.damaged() && outcome.report.truncated_bytes == 0);
    assert!(outcome.segments.len() > 2, "{:?}", outcome.segments);
    assert!(peak <= 16 << 10, "held {peak} bytes");
    // And the spool opened that way reads back every event.
    let (spool, recovery) = dir.open_with(&big, &["a"]);
    assert_eq!(recovery.next_seq, 3001);
    assert_eq!(read_all(&spool, 1).await, (range(1, 3000), vec![]));
    spool.close().await.unwrap();
}
