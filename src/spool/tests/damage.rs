use super::*;

#[tokio::test]
async fn a_torn_tail_is_cut_at_every_offset_and_only_that_record_is_lost() {
    let dir = filled(20).await;
    let last = segment_files(dir.path()).pop().unwrap();
    let original = std::fs::read(&last).unwrap();
    let &(offset, len) = records_in(&last).last().unwrap();
    assert_eq!(offset + len, original.len());
    for cut in offset..offset + len {
        std::fs::write(&last, &original[..cut]).unwrap();
        let (spool, recovery) = dir.open(&["a"]);
        assert_eq!(
            recovery.truncated_bytes,
            (cut - offset) as u64,
            "cut at {cut}"
        );
        assert_eq!((recovery.next_seq, recovery.corrupt_ranges), (20, 0));
        assert!(!recovery.damaged());
        assert_eq!(read_all(&spool, 1).await, (range(1, 19), vec![]));
        spool.close().await.unwrap();
        assert_eq!(std::fs::metadata(&last).unwrap().len(), offset as u64);
    }
    assert!(corrupt_files(dir.path()).is_empty());
    // Appending goes on right where the intact records end.
    let (spool, _) = dir.open(&["a"]);
    append(&spool, 3).await;
    assert_eq!(read_all(&spool, 1).await, (range(1, 22), vec![]));
    spool.close().await.unwrap();
}

#[tokio::test]
async fn bit_flips_in_the_middle_lose_only_the_damaged_records() {
    let dir = filled(40).await;
    let files = segment_files(dir.path());
    // Record 3 of the first segment gets a bad length, record 5 of the second a
    // flipped bit in its payload.
    let (first, second) = (&files[0], &files[1]);
    let first_records = records_in(first);
    let second_records = records_in(second);
    let lost_a = 3;
    let lost_b = first_records.len() as u64 + 5;
    flip(first, first_records[2].0 + 1, 0x40);
    flip(second, second_records[4].0 + 200, 0x01);

    let (spool, recovery) = dir.open(&["a"]);
    assert_eq!(recovery.corrupt_ranges, 2, "{recovery:?}");
    assert_eq!(recovery.missing_records, 2);
    assert_eq!(recovery.records, 38);
    assert_eq!(recovery.next_seq, 41);
    let mut kept = corrupt_files(dir.path());
    kept.sort();
    assert_eq!(kept, {
        let mut q = recovery.quarantined.clone();
        q.sort();
        q
    });
    let sizes: Vec<u64> = kept
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .collect();
    assert_eq!(
        sizes,
        [first_records[2].1 as u64, second_records[4].1 as u64]
    );
    let (seqs, gaps) = read_all(&spool, 1).await;
    let expected: Vec<u64> = (1..=40).filter(|s| *s != lost_a && *s != lost_b).collect();
    assert_eq!(seqs, expected);
    assert_eq!(
        gaps,
        [
            Gap {
                first: lost_a,
                last: lost_a
            },
            Gap {
                first: lost_b,
                last: lost_b
            }
        ]
    );
    spool.close().await.unwrap();

    // Repaired for good: the next open finds nothing to move aside; the gaps stay.
    let (spool, recovery) = dir.open(&["a"]);
    assert!(!recovery.damaged(), "{recovery:?}");
    assert_eq!((recovery.records, recovery.missing_records), (38, 2));
    spool.close().await.unwrap();
}

#[tokio::test]
async fn a_damaged_last_record_is_kept_aside_not_just_cut() {
    let dir = filled(5).await;
    let last = segment_files(dir.path()).pop().unwrap();
    let &(offset, _) = records_in(&last).last().unwrap();
    flip(&last, offset + 100, 0x80);
    let (spool, recovery) = dir.open(&["a"]);
    assert_eq!((recovery.corrupt_ranges, recovery.next_seq), (1, 5));
    assert_eq!(corrupt_files(dir.path()).len(), 1);
    assert_eq!(read_all(&spool, 1).await, (range(1, 4), vec![]));
    spool.close().await.unwrap();
}

#[tokio::test]
async fn garbage_files_are_moved_aside_and_the_spool_opens() {
    let dir = filled(20).await;
    let segments = dir.path().join("segments");
    std::fs::write(segments.join("00000000000000000100.log"), vec![0xab; 5000]).unwrap();
    std::fs::write(segments.join("notes.txt"), "hello").unwrap();
    let (spool, recovery) = dir.open(&["a"]);
    assert_eq!(recovery.corrupt_ranges, 2);
    assert_eq!(recovery.next_seq, 21);
    let mut names: Vec<String> = corrupt_files(dir.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["00000000000000000100.log", "notes.txt"]);
    assert_eq!(read_all(&spool, 1).await, (range(1, 20), vec![]));
    spool.close().await.unwrap();
}

#[tokio::test]
async fn a_damaged_cursors_file_means_redelivery_not_loss() {
    let dir = TempSpool::new();
    let (spool, _) = dir.open(&["a"]);
    append(&spool, 10).await;
    spool.set_cursor("a", 8);
    spool.close().await.unwrap();
    let cursors = dir.path().join("cursors");
    let text = std::fs::read_to_string(&cursors).unwrap();
    assert!(text.contains("a 8\n"), "{text}");
    std::fs::write(&cursors, text.replace("a 8", "a 9")).unwrap();
    let (spool, recovery) = dir.open(&["a"]);
    assert!(recovery.cursors_reset && recovery.damaged());
    assert_eq!(spool.cursor("a"), 1);
    assert_eq!(corrupt_files(dir.path()).len(), 1);
    spool.close().await.unwrap();
}
