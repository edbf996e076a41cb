//! Arbitrary damage to segment files: opening recovers without panicking, and
//! reading back returns only records that were written, never fabricated ones.

use proptest::prelude::*;

use super::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Reads everything from seq 1, checking each event is one `event(seq)` made.
async fn read_back(spool: &Spool) -> Vec<u64> {
    read_all(spool, 1).await.0
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Overwrites, truncations and garbage appended anywhere in any segment.
    #[test]
    fn damaged_segments_recover_to_a_subset_of_what_was_written(
        damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..20),
        truncate in proptest::option::of(any::<prop::sample::Index>()),
        garbage in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let runtime = runtime();
        let dir = TempSpool::new();
        runtime.block_on(async {
            let (spool, _) = dir.open(&["a"]);
            append(&spool, 30).await;
            spool.close().await.unwrap();
        });
        let files = segment_files(dir.path());
        for (at, byte) in &damage {
            let file = &files[at.index(files.len())];
            let mut bytes = std::fs::read(file).unwrap();
            if !bytes.is_empty() {
                let i = at.index(bytes.len());
                bytes[i] = *byte;
            }
            std::fs::write(file, bytes).unwrap();
        }
        let last = files.last().unwrap();
        let mut bytes = std::fs::read(last).unwrap();
        if let Some(at) = truncate {
            bytes.truncate(at.index(bytes.len() + 1));
        }
        bytes.extend_from_slice(&garbage);
        std::fs::write(last, bytes).unwrap();

        let seqs = runtime.block_on(async {
            let (spool, _) = dir.open(&["a"]);
            let seqs = read_back(&spool).await;
            // The spool stays writable after any recovery.
            append(&spool, 1).await;
            spool.close().await.unwrap();
            seqs
        });
        prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
        prop_assert!(seqs.iter().all(|s| (1..=30).contains(s)), "only written seqs: {seqs:?}");
    }

    /// A segment file of pure noise is quarantined or cut, never read as events.
    #[test]
    fn a_segment_of_noise_yields_no_events(noise in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let runtime = runtime();
        let dir = TempSpool::new();
        runtime.block_on(async {
            let (spool, _) = dir.open(&["a"]);
            append(&spool, 1).await;
            spool.close().await.unwrap();
        });
        let files = segment_files(dir.path());
        std::fs::write(&files[0], &noise).unwrap();
        let seqs = runtime.block_on(async {
            let (spool, _) = dir.open(&["a"]);
            let seqs = read_back(&spool).await;
            spool.close().await.unwrap();
            seqs
        });
        // Noise can only pass the CRC-32 by astronomically unlikely chance.
        prop_assert!(seqs.iter().all(|&s| s == 1), "{seqs:?}");
    }
}
