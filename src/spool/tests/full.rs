use super::*;

fn small(full: FullPolicy) -> SpoolSettings {
    SpoolSettings {
        max_bytes: ByteSize(3 * 4096),
        full,
        block_timeout: Duration::from_millis(300),
        ..spool_settings(Fsync::Batch)
    }
}

/// Appends with `reserve` first, as the exchange does, until `reserve` refuses.
async fn fill(spool: &Spool) -> Result<Vec<Dropped>, SpoolFull> {
    let mut dropped = Vec::new();
    for _ in 0..200 {
        dropped.extend(spool.reserve(330).await?);
        append(spool, 1).await;
    }
    Ok(dropped)
}

#[tokio::test]
async fn block_waits_for_room_then_refuses_and_proceeds_once_a_cursor_frees_a_segment() {
    let dir = TempSpool::new();
    let (spool, _) = dir.open_with(&small(FullPolicy::Block), &["a"]);
    let started = tokio::time::Instant::now();
    let full = fill(&spool).await.unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(full.max, 3 * 4096);
    assert!(full.bytes + 330 > full.max, "{full}");
    let appended = spool.next_seq() - 1;
    assert!((30..=40).contains(&appended), "{appended}");
    assert_eq!(spool.cursor("a"), 1, "nothing was dropped");

    let waiting = tokio::spawn({
        let spool = spool.clone();
        async move { spool.reserve(330).await }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        !waiting.is_finished(),
        "reserve waits while the spool is full"
    );
    spool.set_cursor("a", 13);
    let dropped = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(dropped.is_empty());
    append(&spool, 1).await;
    assert_eq!(
        read_all(&spool, 13).await,
        (range(13, appended + 1), vec![])
    );
    spool.close().await.unwrap();
}

#[tokio::test]
async fn drop_oldest_discards_the_slowest_forwarders_records_and_says_which() {
    let dir = TempSpool::new();
    let (spool, _) = dir.open_with(&small(FullPolicy::DropOldest), &["a", "b"]);
    append(&spool, 4).await;
    spool.set_cursor("b", 5);
    let dropped = fill(&spool).await.unwrap();
    assert_eq!(spool.next_seq(), 205, "drop_oldest never refuses");
    let stats = spool.stats();
    assert!(stats.bytes <= 3 * 4096 + 400, "{stats:?}");

    // Each forwarder lost one contiguous run: from its cursor to just before the
    // oldest record kept, reported in pieces (one per dropped segment).
    for (name, from) in [("a", 1), ("b", 5)] {
        let lost: Vec<&Dropped> = dropped.iter().filter(|d| d.forwarder == name).collect();
        assert_eq!(lost[0].first_seq, from);
        for pair in lost.windows(2) {
            assert_eq!(pair[1].first_seq, pair[0].last_seq + 1);
        }
        let last = lost.last().unwrap();
        assert_eq!(last.last_seq + 1, stats.first_seq);
        let count: u64 = lost.iter().map(|d| d.count).sum();
        assert_eq!(count, stats.first_seq - from);
        assert_eq!(spool.cursor(name), stats.first_seq);
    }
    wait_for(|| segment_files(dir.path()).len() == stats.segments).await;
    let (seqs, gaps) = read_all(&spool, 1).await;
    assert_eq!(
        gaps,
        [Gap {
            first: 1,
            last: stats.first_seq - 1
        }]
    );
    assert_eq!(seqs, range(stats.first_seq, 204));
    spool.close().await.unwrap();
}

use super::basic::wait_for;

#[tokio::test]
async fn drop_oldest_reports_no_loss_for_records_a_sink_already_received() {
    let dir = TempSpool::new();
    let (spool, _) = dir.open_with(&small(FullPolicy::DropOldest), &["a", "b"]);
    append(&spool, 4).await;
    // "a" has sent everything so far to its sink and waits for its checkpoint;
    // "b" has received nothing.
    spool.set_delivered("a", 5);
    let mut dropped = Vec::new();
    for _ in 0..200 {
        dropped.extend(spool.reserve(330).await.unwrap());
        append(&spool, 1).await;
        spool.set_delivered("a", spool.next_seq());
    }
    assert!(
        dropped.iter().any(|d| d.forwarder == "b"),
        "the spool dropped records: {dropped:?}"
    );
    assert!(
        dropped.iter().all(|d| d.forwarder == "b"),
        "only b lost any: {dropped:?}"
    );
    // Both cursors move past what was dropped all the same.
    let first = spool.stats().first_seq;
    assert_eq!(spool.cursor("a"), first);
    assert_eq!(spool.cursor("b"), first);
    spool.close().await.unwrap();
}
