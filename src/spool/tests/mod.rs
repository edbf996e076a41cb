//! Spool tests on real files in temporary directories.

mod basic;
mod chunks;
mod damage;
mod format;
mod full;
mod props;

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::reader::Gap;
use super::*;
use crate::testing::{self, TempSpool, spool_settings};
use crate::units::ByteSize;

/// Event `seq` in a ~330-byte record, 12 to a segment of [`spool_settings`]; its
/// payload's bytes are its seq, which [`read_all`] checks.
fn event(seq: u64) -> Event {
    testing::event(seq)
        .raw("containerd.events.TaskExit", vec![seq as u8; 250])
        .build()
}

/// Appends `n` events and waits until each is durable.
async fn append(spool: &Spool, n: usize) {
    for _ in 0..n {
        let ticket = spool.append(&event(spool.next_seq())).unwrap();
        spool.durable(ticket).await.unwrap();
    }
}

/// Everything a reader from `from` returns up to the spool's end: seqs and gaps.
/// A closed spool holding `n` events, its one cursor `a` at the start.
async fn filled(n: usize) -> TempSpool {
    let dir = TempSpool::new();
    let (spool, _) = dir.open(&["a"]);
    append(&spool, n).await;
    spool.close().await.unwrap();
    dir
}

async fn read_all(spool: &Spool, from: u64) -> (Vec<u64>, Vec<Gap>) {
    let mut reader = spool.reader(from);
    let (mut seqs, mut gaps) = (Vec::new(), Vec::new());
    while reader.position() < spool.next_seq() {
        let batch = tokio::time::timeout(Duration::from_secs(5), reader.next(7, 1 << 20))
            .await
            .expect("a reader behind the durable position returns promptly")
            .unwrap();
        gaps.extend(batch.gap);
        for event in &batch.events {
            assert_eq!(event.envelope.topic, "/tasks/exit");
            assert_eq!(
                event.envelope.event.as_ref().unwrap().value[0],
                event.seq as u8
            );
        }
        seqs.extend(batch.events.iter().map(|e| e.seq));
    }
    (seqs, gaps)
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

fn corrupt_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir.join("corrupt"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

/// Record boundaries `(offset, len)` of an intact segment file.
fn records_in(path: &Path) -> Vec<(usize, usize)> {
    let bytes = std::fs::read(path).unwrap();
    let mut at = 0;
    let mut out = Vec::new();
    while at < bytes.len() {
        match record::check(&bytes[at..]) {
            record::Check::Valid { len, .. } => {
                out.push((at, len));
                at += len;
            }
            other => panic!("{} at {at}: {other:?}", path.display()),
        }
    }
    out
}

fn range(first: u64, last: u64) -> Vec<u64> {
    (first..=last).collect()
}

fn flip(path: &Path, at: usize, mask: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= mask;
    std::fs::write(path, bytes).unwrap();
}
