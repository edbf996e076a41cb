//! A reconcile's snapshot across a crash at each point of its two-phase save: staged
//! and its marker never durable, marker durable and not promoted, promoted and the
//! pending file not yet removed.

use prost_types::Timestamp;

use super::{containers, create, node};
use crate::event::Source;
use crate::proto::eventgate::events::v1::UpstreamReconciled;
use crate::reconcile::snapshot::*;
use crate::spool::Ticket;
use crate::testing::{self, TempSpool};

const LISTED: Timestamp = Timestamp {
    seconds: 1_700_000_000,
    nanos: 5,
};

fn marker_id() -> String {
    pending::marker_id(&LISTED)
}

/// `upstream`'s reconciled marker for lists read at `LISTED`.
fn marker(seq: u64, upstream: &str) -> Event {
    let payload = UpstreamReconciled {
        upstream: upstream.into(),
        listed_at: Some(LISTED),
        ..UpstreamReconciled::default()
    };
    testing::event(seq)
        .source(Source::Internal)
        .namespace(crate::markers::NAMESPACE)
        .topic(crate::markers::RECONCILED_TOPIC)
        .now()
        .message(crate::markers::RECONCILED_TYPE, &payload)
        .build()
}

/// A node state holding these containers in `default`.
fn holding(ids: &[&str]) -> NodeState {
    let mut state = NodeState::default();
    for (seq, id) in ids.iter().enumerate() {
        state.apply(
            "default",
            "/containers/create",
            create(seq as u64 + 1, node(), id).envelope.event.as_ref(),
        );
    }
    state
}

async fn append(spool: &Spool, event: Event) -> Event {
    let ticket: Ticket = spool.append(&event).unwrap();
    spool.durable(ticket).await.unwrap();
    event
}

/// The process ends: the spool as a crash leaves it (durable records only).
async fn crash(spool: Spool) {
    spool.close().await.unwrap();
    drop(spool);
}

#[tokio::test]
async fn a_reconcile_whose_marker_never_became_durable_is_done_again_after_a_crash() {
    let dir = TempSpool::new();
    let cursor = cursor_name("node");
    let (spool, _) = dir.open(&[cursor.as_str()]);
    let mut snapshot = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    snapshot.reset(holding(&["saved"]), Some(&spool)).unwrap();
    // Staged with two reconstructed creates; only the first reaches the disk.
    let staged = holding(&["saved", "reconstructed", "lost"]);
    snapshot.stage(&marker_id(), &staged, Some(&spool)).unwrap();
    let pending_file = pending::path(dir.data_dir(), "node");
    assert!(pending_file.exists(), "written before anything is appended");
    let first = append(&spool, create(spool.next_seq(), node(), "reconstructed")).await;
    snapshot.record(&first);
    crash(spool).await;

    let (spool, _) = dir.open(&[cursor.as_str()]);
    let reopened = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    assert!(!pending_file.exists());
    assert!(reopened.known, "not a baseline: the saved snapshot stands");
    // What the record holds, no more: the next reconcile reconstructs `lost` again.
    assert_eq!(containers(&reopened), ["reconstructed", "saved"]);
    spool.close().await.unwrap();
}

#[tokio::test]
async fn a_first_reconcile_whose_marker_is_durable_is_promoted_after_a_crash() {
    let dir = TempSpool::new();
    let cursor = cursor_name("node");
    let (spool, _) = dir.open(&[cursor.as_str()]);
    let mut snapshot = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    assert!(!snapshot.known);
    append(
        &spool,
        create(spool.next_seq(), Source::Publish, "published"),
    )
    .await;
    // A baseline: no events, the daemon's state, then the marker.
    let baseline = holding(&["listed"]);
    snapshot
        .stage(&marker_id(), &baseline, Some(&spool))
        .unwrap();
    // Another upstream's marker of the same instant is not this one.
    append(&spool, marker(spool.next_seq(), "other")).await;
    let ours = append(&spool, marker(spool.next_seq(), "node")).await;
    // Held in the spool until promoted, whatever saves meanwhile.
    snapshot.tick(Some(&spool), None).unwrap();
    snapshot.save(Some(&spool)).unwrap();
    assert!(spool.cursor(&cursor) <= ours.seq);
    // Live after the marker, then a crash before the promotion.
    let after = append(&spool, create(spool.next_seq(), node(), "after")).await;
    snapshot.record(&after);
    assert!(!path(dir.data_dir(), "node").exists());
    crash(spool).await;

    let (spool, _) = dir.open(&[cursor.as_str()]);
    let reopened = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    assert!(reopened.known, "the baseline was recorded: no new baseline");
    assert_eq!(containers(&reopened), ["after", "listed"]);
    assert!(!pending::path(dir.data_dir(), "node").exists());
    assert!(path(dir.data_dir(), "node").exists(), "promoted onto disk");
    spool.close().await.unwrap();

    // Opened again, it is the same: the promotion was saved.
    let (spool, _) = dir.open(&[cursor.as_str()]);
    let again = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    assert_eq!(again.state, reopened.state);
    spool.close().await.unwrap();
}

#[tokio::test]
async fn a_promoted_reconcile_is_not_applied_twice_when_its_pending_file_outlives_it() {
    let dir = TempSpool::new();
    let cursor = cursor_name("node");
    let (spool, _) = dir.open(&[cursor.as_str()]);
    let mut snapshot = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    snapshot.reset(holding(&["gone"]), Some(&spool)).unwrap();
    let staged = holding(&["kept"]);
    snapshot.stage(&marker_id(), &staged, Some(&spool)).unwrap();
    let ours = append(&spool, marker(spool.next_seq(), "node")).await;
    snapshot
        .promote(&marker_id(), staged.clone(), ours.seq, Some(&spool))
        .unwrap();
    let pending_file = pending::path(dir.data_dir(), "node");
    assert!(!pending_file.exists());
    assert_eq!(spool.cursor(&cursor), ours.seq + 1);
    // A crash between the save and the removal leaves both files.
    pending::write(
        &pending_file,
        "node",
        &marker_id(),
        ours.seq,
        &holding(&["stale"]),
    )
    .unwrap();
    let after = append(&spool, create(spool.next_seq(), node(), "after")).await;
    snapshot.record(&after);
    crash(spool).await;

    let (spool, _) = dir.open(&[cursor.as_str()]);
    let reopened = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    assert!(!pending_file.exists());
    assert_eq!(containers(&reopened), ["after", "kept"]);
    spool.close().await.unwrap();
}

#[tokio::test]
async fn a_subscription_that_ends_before_the_marker_drops_the_staged_snapshot() {
    let dir = TempSpool::new();
    let cursor = cursor_name("node");
    let (spool, _) = dir.open(&[cursor.as_str()]);
    let mut snapshot = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    snapshot.reset(holding(&["saved"]), Some(&spool)).unwrap();
    let from = spool.next_seq();
    snapshot
        .stage(&marker_id(), &holding(&["never"]), Some(&spool))
        .unwrap();
    append(
        &spool,
        create(spool.next_seq(), Source::Publish, "published"),
    )
    .await;
    snapshot.tick(Some(&spool), None).unwrap();
    snapshot.save(Some(&spool)).unwrap();
    assert_eq!(spool.cursor(&cursor), from, "kept while staged");
    snapshot.discard_pending();
    assert!(!pending::path(dir.data_dir(), "node").exists());
    snapshot.save(Some(&spool)).unwrap();
    assert_eq!(
        spool.cursor(&cursor),
        spool.next_seq(),
        "released once dropped"
    );
    assert_eq!(containers(&snapshot), ["saved"]);
    spool.close().await.unwrap();
}

#[tokio::test]
async fn a_snapshot_file_written_before_the_two_phases_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let file = path(dir.path(), "node");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let state = serde_json::to_string(&holding(&["old"])).unwrap();
    std::fs::write(
        &file,
        format!("{{\"version\":1,\"upstream\":\"node\",\"next_seq\":7,\"state\":{state}}}"),
    )
    .unwrap();
    let snapshot = Snapshot::open(dir.path(), "node", None).await.unwrap();
    assert!(snapshot.known);
    assert_eq!(containers(&snapshot), ["old"]);
}
