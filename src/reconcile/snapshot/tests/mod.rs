mod two_phase;

use std::sync::Arc;

use super::*;
use crate::event::Source;
use crate::proto::containerd::events as ev;
use crate::testing::{self, TempSpool};

/// Event `seq` from `source`: container `id` created now.
pub(super) fn create(seq: u64, source: Source, id: &str) -> Event {
    let create = ev::ContainerCreate {
        id: id.into(),
        image: "busybox".into(),
        runtime: None,
    };
    testing::event(seq)
        .source(source)
        .topic("/containers/create")
        .now()
        .message("containerd.events.ContainerCreate", &create)
        .build()
}

pub(super) fn node() -> Source {
    Source::Upstream(Arc::from("node"))
}

pub(super) fn containers(snapshot: &Snapshot) -> Vec<String> {
    snapshot
        .state
        .namespaces
        .get("default")
        .map(|ns| ns.containers.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_saved_snapshot_opens_as_it_was_and_only_its_upstream_moves_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut snapshot = Snapshot::open(dir.path(), "node", None).await.unwrap();
    assert!(
        !snapshot.known,
        "nothing saved yet: the next reconcile is a baseline"
    );
    snapshot.record(&create(1, node(), "a"));
    snapshot.record(&create(2, Source::Publish, "published"));
    snapshot.record(&create(3, Source::Upstream(Arc::from("other")), "other"));
    assert_eq!(containers(&snapshot), ["a"]);
    // Until a reconcile has seen the daemon, there is nothing worth keeping.
    snapshot.save(None).unwrap();
    assert!(!path(dir.path(), "node").exists());
    snapshot.known = true;
    snapshot.save(None).unwrap();
    let reopened = Snapshot::open(dir.path(), "node", None).await.unwrap();
    assert!(reopened.known);
    assert_eq!(reopened.state, snapshot.state);
    // Another upstream's file is its own.
    let other = Snapshot::open(dir.path(), "other", None).await.unwrap();
    assert!(!other.known && containers(&other).is_empty());
}

#[tokio::test]
async fn an_unreadable_snapshot_is_set_aside_and_the_next_reconcile_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let file = path(dir.path(), "node");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, b"{\"version\": 1, \"upstr").unwrap();
    let snapshot = Snapshot::open(dir.path(), "node", None).await.unwrap();
    assert!(!snapshot.known);
    assert!(!file.exists());
    assert_eq!(
        std::fs::read(file.with_extension("json.unreadable")).unwrap(),
        b"{\"version\": 1, \"upstr"
    );
}

#[tokio::test]
async fn a_snapshot_a_newer_eventgate_wrote_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let file = path(dir.path(), "node");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let newer = br#"{"version": 2, "upstream": "node", "next_seq": 3, "state": {}}"#;
    std::fs::write(&file, newer).unwrap();
    let error = Snapshot::open(dir.path(), "node", None)
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(&error, SnapshotError::Newer(n) if n.found == 2 && n.known == 1),
        "{error:?}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), newer);
    assert!(!file.with_extension("json.unreadable").exists());
    // An older or equal version is this eventgate's to read.
    let state = serde_json::to_string(&crate::reconcile::NodeState::default()).unwrap();
    let current =
        format!(r#"{{"version": 1, "upstream": "node", "next_seq": 3, "state": {state}}}"#);
    std::fs::write(&file, current).unwrap();
    assert!(
        Snapshot::open(dir.path(), "node", None)
            .await
            .unwrap()
            .known
    );
}

#[tokio::test]
async fn events_after_the_last_save_are_read_back_from_the_spool() {
    let dir = TempSpool::new();
    let cursor = cursor_name("node");
    let (spool, _) = dir.open(&[cursor.as_str()]);
    let mut snapshot = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    let append = |source: Source, id: &str| {
        let event = create(spool.next_seq(), source, id);
        let ticket = spool.append(&event).unwrap();
        (event, ticket)
    };
    let (first, ticket) = append(node(), "saved");
    spool.durable(ticket).await.unwrap();
    snapshot.record(&first);
    snapshot
        .reset(snapshot.state.clone(), Some(&spool))
        .unwrap();
    // Recorded after the save, then a crash: only the spool has them.
    for (source, id) in [
        (node(), "after"),
        (Source::Publish, "published"),
        (node(), "last"),
    ] {
        let (event, ticket) = append(source, id);
        spool.durable(ticket).await.unwrap();
        snapshot.record(&event);
    }
    spool.close().await.unwrap();
    drop(spool);

    let (spool, _) = dir.open(&[cursor.as_str()]);
    let reopened = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    assert!(reopened.known);
    assert_eq!(containers(&reopened), ["after", "last", "saved"]);
    assert_eq!(reopened.state, snapshot.state);
    spool.close().await.unwrap();
}

/// A save between the upstream's events claims only what was recorded: an event of
/// the upstream already numbered by the spool but still on its way to the disk (in
/// flight, not recorded) is read back from the spool after a crash, not skipped.
#[tokio::test]
async fn a_save_while_an_event_is_in_flight_leaves_that_event_to_the_spool() {
    let dir = TempSpool::new();
    let cursor = cursor_name("node");
    let (spool, _) = dir.open(&[cursor.as_str()]);
    let mut snapshot = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    snapshot.reset(NodeState::default(), Some(&spool)).unwrap();
    let append = |source: Source, id: &str| {
        let event = create(spool.next_seq(), source, id);
        let ticket = spool.append(&event).unwrap();
        (event, ticket)
    };
    let (before, ticket) = append(Source::Publish, "published before");
    spool.durable(ticket).await.unwrap();
    snapshot.record(&before);
    let (in_flight, in_flight_ticket) = append(node(), "in flight");
    let (after, after_ticket) = append(Source::Publish, "published after");

    snapshot.tick(Some(&spool), Some(in_flight.seq)).unwrap();
    snapshot.save(Some(&spool)).unwrap();
    assert_eq!(spool.cursor(&cursor), in_flight.seq, "the spool keeps it");
    spool.durable(in_flight_ticket).await.unwrap();
    spool.durable(after_ticket).await.unwrap();
    // Nothing saved it into the snapshot before the crash.
    spool.close().await.unwrap();
    drop(spool);

    let (spool, _) = dir.open(&[cursor.as_str()]);
    let reopened = Snapshot::open(dir.data_dir(), "node", Some(&spool))
        .await
        .unwrap();
    assert_eq!(containers(&reopened), ["in flight"]);
    // Nothing in flight: the snapshot is good up to the spool's end.
    let mut reopened = reopened;
    reopened.tick(Some(&spool), None).unwrap();
    reopened.save(Some(&spool)).unwrap();
    assert_eq!(spool.cursor(&cursor), after.seq + 1);
    spool.close().await.unwrap();
}
