use std::time::{Duration, Instant};

use super::*;
use crate::exchange::{ExchangeParts, ExchangeSettings};
use crate::note::{Signer, SigningSettings, open};
use crate::store::checkpoint::Checkpoint;

fn sqlite(path: &Path) -> ForwarderSpec {
    let mut options = crate::forward::Options::new();
    options.insert("path".into(), path.display().to_string().into());
    ForwarderSpec::new("audit", "sqlite", options)
}

async fn wait(what: &str, mut check: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A store that cannot be read is a failing signer (loud, retried) while events go
/// on; once it can be read, the next try signs and the failure is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_read_fails_loudly_and_is_retried_until_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    // A directory where the store should be: SQLite cannot open it.
    std::fs::create_dir(&path).unwrap();
    let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
    let signer = Signer::generate("node-7").unwrap();
    let verifier = signer.verifier();
    let settings = SigningSettings {
        interval: Duration::from_secs(3600),
        ..SigningSettings::default()
    };
    let signers = Signers::start(
        Some(signer),
        &settings,
        &[sqlite(&path)],
        dir.path(),
        "node-7",
        &exchange,
    );
    let status = signers.watch().remove(0);
    wait("the failure to show", || status.borrow().failing.is_some()).await;
    let failing = status.borrow().failing.clone().unwrap();
    assert!(failing.1.contains("cannot open"), "{failing:?}");
    let before = exchange.next_seq();
    std::fs::remove_dir(&path).unwrap();
    crate::testing::insert(&path, &[crate::testing::event(1).at(0).build()]);
    wait("the retry to sign", || {
        let s = status.borrow();
        s.failing.is_none() && s.last.is_some()
    })
    .await;
    assert!(exchange.next_seq() > before, "the checkpoint was published");
    let kept = std::fs::read_to_string(dir.path().join("state/checkpoint-audit.note")).unwrap();
    let opened = open(&kept, &[verifier]).unwrap();
    let checkpoint = Checkpoint::parse(&opened.text).unwrap();
    assert_eq!((checkpoint.node.as_str(), checkpoint.row_id), ("node-7", 1));
    assert_eq!(checkpoint.prev, None);
    signers.stop(Duration::from_secs(5)).await;
    // The stop signed one more, naming the first.
    let last = std::fs::read_to_string(dir.path().join("state/checkpoint-audit.note")).unwrap();
    assert_ne!(last, kept);
    let text = last.split("\n\n").next().unwrap().to_owned() + "\n";
    let stopped = Checkpoint::parse(&text).unwrap();
    assert_eq!(stopped.prev, Some(checkpoint::note_hash(&kept)));
}
