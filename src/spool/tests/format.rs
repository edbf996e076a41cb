//! The format stamp: written for new and older spools, and a newer or damaged one
//! refused before anything in the spool is touched.

use std::collections::BTreeMap;

use super::*;
use crate::spool::format as stamp;

fn stamp_path(dir: &Path) -> PathBuf {
    dir.join("format")
}

/// Every file under `dir` with its bytes: what "left untouched" compares.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.insert(path.clone(), Vec::new());
                pending.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[tokio::test]
async fn a_new_spool_is_stamped_with_the_current_format() {
    let dir = filled(3).await;
    assert_eq!(
        std::fs::read(stamp_path(dir.path())).unwrap(),
        stamp::render(stamp::CURRENT).as_bytes()
    );
    assert_eq!(stamp::check(dir.path()).unwrap(), Some(stamp::CURRENT));
}

#[tokio::test]
async fn a_spool_from_before_stamps_is_stamped_format_1_and_read_whole() {
    let dir = filled(5).await;
    std::fs::remove_file(stamp_path(dir.path())).unwrap();
    let (spool, recovery) = dir.open(&["a"]);
    assert!(!recovery.damaged());
    assert_eq!(read_all(&spool, 1).await, (range(1, 5), vec![]));
    spool.close().await.unwrap();
    assert_eq!(stamp::check(dir.path()).unwrap(), Some(1));
}

#[tokio::test]
async fn a_newer_format_is_refused_naming_both_and_nothing_is_touched() {
    let dir = filled(20).await;
    std::fs::write(stamp_path(dir.path()), stamp::render(2)).unwrap();
    let before = snapshot(dir.path());
    let error = match Spool::open(dir.path(), &spool_settings(Fsync::Batch), &["a", "b"]) {
        Ok(_) => panic!("a format 2 spool was opened"),
        Err(error) => error,
    };
    assert!(
        matches!(
            error,
            SpoolError::TooNew {
                found: 2,
                known: 1,
                ..
            }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("has format 2")
            && message.contains("reads format 1 and older")
            && message.contains(&dir.path().display().to_string()),
        "{message}"
    );
    assert_eq!(snapshot(dir.path()), before);
}

#[tokio::test]
async fn a_newer_spool_missing_a_subdirectory_is_not_filled_in() {
    let dir = TempSpool::new();
    std::fs::create_dir_all(dir.path()).unwrap();
    std::fs::write(stamp_path(dir.path()), stamp::render(3)).unwrap();
    let opened = Spool::open(dir.path(), &spool_settings(Fsync::Batch), &["a"]);
    assert!(matches!(opened, Err(SpoolError::TooNew { found: 3, .. })));
    assert_eq!(snapshot(dir.path()).len(), 1, "only the stamp");
}

#[tokio::test]
async fn a_damaged_stamp_is_refused_not_rewritten() {
    let dir = filled(4).await;
    let stamp = stamp_path(dir.path());
    for damaged in [
        "eventgate spool format 1\ncrc32 00000000\n".to_string(),
        stamp::render(1).replace("format 1", "format 2"),
        "eventgate spool format 1\n".to_string(),
        String::new(),
    ] {
        std::fs::write(&stamp, &damaged).unwrap();
        let before = snapshot(dir.path());
        let error = match Spool::open(dir.path(), &spool_settings(Fsync::Batch), &["a"]) {
            Ok(_) => panic!("a damaged stamp was accepted: {damaged:?}"),
            Err(error) => error,
        };
        assert!(
            matches!(&error, SpoolError::FormatDamaged { path, .. } if *path == stamp),
            "{error:?}"
        );
        assert!(error.to_string().contains("delete the stamp"), "{error}");
        assert_eq!(snapshot(dir.path()), before, "{damaged:?}");
    }
    // The way out the message gives: without the stamp, the spool is read whole.
    std::fs::remove_file(&stamp).unwrap();
    let (spool, recovery) = dir.open(&["a"]);
    assert!(!recovery.damaged());
    assert_eq!(read_all(&spool, 1).await, (range(1, 4), vec![]));
    spool.close().await.unwrap();
}
