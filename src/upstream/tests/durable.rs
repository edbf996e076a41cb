//! An upstream's events between the stream and the disk: many in flight at once,
//! sharing the spool's fdatasyncs, and the state snapshot recording each only once
//! the spool holds it. The spool's syncs are held back (or failed) by a test gate.

use std::time::Duration;

use prost::Message;

use super::{DEADLINE, Server_, connected, next, serve_exchange, socket, spec};
use crate::event::Source;
use crate::exchange::{ExchangeParts, ExchangeSettings, Incoming, Subscription};
use crate::filter::Filter;
use crate::proto::containerd::events::ContainerCreate;
use crate::proto::containerd::types::Envelope;
use crate::reconcile::NodeState;
use crate::reconcile::snapshot;
use crate::spool::{Gate, Spool, SpoolSettings};
use crate::testing;
use crate::upstream::*;

/// Container `id` created now.
fn create(id: &str) -> Envelope {
    let create = ContainerCreate {
        id: id.into(),
        image: "busybox".into(),
        runtime: None,
    };
    testing::envelope()
        .topic("/containers/create")
        .now()
        .message("containerd.events.ContainerCreate", &create)
        .build()
}

fn container_id(event: &crate::event::Event) -> String {
    let any = event.envelope.event.as_ref().expect("payload");
    ContainerCreate::decode(any.value.as_slice())
        .expect("a ContainerCreate")
        .id
}

/// A gateway's side: a spool with the defaults (`fsync = "batch"`) holding the
/// snapshot's cursor, an exchange on it, and a subscriber watching everything; then
/// the upstream `node` on an in-process eventgate, subscribed.
struct Setup {
    _dir: tempfile::TempDir,
    data_dir: std::path::PathBuf,
    spool: Spool,
    sub: Subscription,
    upstream: Exchange,
    server: Server_,
    upstreams: Upstreams,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "up.sock");
    let data_dir = dir.path().join("data");
    let cursor = snapshot::cursor_name("node");
    let (spool, _) = Spool::open(
        &data_dir.join("spool"),
        &SpoolSettings::default(),
        &[cursor.as_str()],
    )
    .unwrap();
    let parts = ExchangeParts {
        spool: Some(spool.clone()),
        ..ExchangeParts::default()
    };
    let exchange = Exchange::new(ExchangeSettings::default(), parts);
    let mut sub = exchange
        .subscribe(Filter::parse_all::<&str>(&[]).unwrap())
        .unwrap();
    // A snapshot an earlier reconcile left: only then are saves written (a reconcile
    // against this in-process upstream cannot list a daemon, so none completes here).
    let seeded = serde_json::json!({
        "version": 1,
        "upstream": "node",
        "next_seq": 1,
        "state": NodeState::default(),
    });
    let state_file = snapshot::path(&data_dir, "node");
    std::fs::create_dir_all(state_file.parent().unwrap()).unwrap();
    std::fs::write(&state_file, seeded.to_string()).unwrap();
    let (upstream, server) = serve_exchange(&path);
    let upstreams = Upstreams::start(&[spec(&path)], &exchange, &data_dir, Some(spool.clone()));
    assert_eq!(
        next(&mut sub).await.envelope.topic,
        "/eventgate/upstream/connected"
    );
    connected(&upstreams).await;
    // Connected counts from the request on the wire; events count from the upstream's
    // side having the subscriber.
    tokio::time::timeout(DEADLINE, async {
        while upstream.subscriber_count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the upstream has the subscription");
    Setup {
        _dir: dir,
        data_dir,
        spool,
        sub,
        upstream,
        server,
        upstreams,
    }
}

async fn durable_through(spool: &Spool, seq: u64) {
    tokio::time::timeout(DEADLINE, async {
        while spool.stats().durable_seq < seq {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("durable within the deadline");
}

#[tokio::test]
async fn a_burst_is_read_while_earlier_events_wait_for_the_disk_and_shares_its_syncs() {
    let mut s = setup().await;
    s.spool.gate_syncs(Gate::Held);
    let fsyncs = s.spool.stats().fsyncs;
    let ids: Vec<String> = (0..100).map(|i| format!("c{i:03}")).collect();
    for id in &ids {
        testing::accept(&s.upstream, Incoming::checked(Source::Forward, create(id)))
            .await
            .unwrap();
    }
    // Every one of them taken in, in the stream's order, while none is durable: the
    // upstream is not held one sync per event.
    let mut got = Vec::new();
    for _ in &ids {
        got.push(next(&mut s.sub).await);
    }
    assert_eq!(got.iter().map(|e| container_id(e)).collect::<Vec<_>>(), ids);
    assert!(got.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    let last = got.last().unwrap().seq;
    assert!(
        s.spool.stats().durable_seq < got[0].seq,
        "nothing durable yet"
    );

    s.spool.gate_syncs(Gate::Open);
    durable_through(&s.spool, last).await;
    // The sync held at the gate (the first event or few), then one for the rest.
    let synced = s.spool.stats().fsyncs - fsyncs;
    assert!(synced <= 2, "100 events took {synced} fdatasyncs");
    s.upstreams.stop(DEADLINE).await;
    s.server.stop().await;
    s.spool.close().await.unwrap();
}

#[tokio::test]
async fn the_snapshot_records_an_upstream_event_only_once_the_spool_has_it() {
    let mut s = setup().await;
    testing::accept(
        &s.upstream,
        Incoming::checked(Source::Forward, create("kept")),
    )
    .await
    .unwrap();
    let kept = next(&mut s.sub).await;
    durable_through(&s.spool, kept.seq).await;

    // Appended and delivered to subscribers, but held back from the disk...
    s.spool.gate_syncs(Gate::Held);
    testing::accept(
        &s.upstream,
        Incoming::checked(Source::Forward, create("lost")),
    )
    .await
    .unwrap();
    let lost = next(&mut s.sub).await;
    assert_eq!(container_id(&lost), "lost");
    assert!(s.spool.stats().durable_seq < lost.seq);
    // ...and then never durable: the sync fails. The subscription ends, the task
    // stops (nothing more can be spooled) and saves its snapshot as it goes.
    s.spool.gate_syncs(Gate::Failing);
    s.upstreams
        .wait_for("node", DEADLINE, |state| *state == UpstreamState::Stopped)
        .await
        .expect("the upstream task stopped");

    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snapshot::path(&s.data_dir, "node")).unwrap())
            .unwrap();
    let state: NodeState = serde_json::from_value(saved["state"].clone()).unwrap();
    let containers: Vec<&String> = state.namespaces["default"].containers.keys().collect();
    assert_eq!(
        containers,
        ["kept"],
        "only what the spool holds is recorded"
    );
    let next_seq = saved["next_seq"].as_u64().unwrap();
    assert!(
        next_seq > kept.seq && next_seq <= lost.seq,
        "the snapshot is good up to {next_seq}: past what it recorded, not past what is not durable"
    );
    s.upstreams.stop(DEADLINE).await;
    s.server.stop().await;
}

#[tokio::test]
async fn a_subscription_that_ends_makes_its_events_durable_before_the_disconnected_marker() {
    let mut s = setup().await;
    s.spool.gate_syncs(Gate::Held);
    for id in ["a", "b", "c"] {
        testing::accept(&s.upstream, Incoming::checked(Source::Forward, create(id)))
            .await
            .unwrap();
    }
    let mut last = 0;
    for _ in 0..3 {
        last = next(&mut s.sub).await.seq;
    }
    let stop = s.upstreams.stop(DEADLINE);
    tokio::pin!(stop);
    let spool = s.spool.clone();
    let marker = async {
        // While the syncs are held the marker must not come; given a moment to show
        // up if it did, then the syncs go on.
        let early = tokio::time::timeout(Duration::from_millis(300), next(&mut s.sub)).await;
        let marker = match early {
            Ok(marker) => marker,
            Err(_) => {
                spool.gate_syncs(Gate::Open);
                next(&mut s.sub).await
            }
        };
        (marker, spool.stats().durable_seq)
    };
    let ((marker, durable_then), ()) = tokio::join!(marker, &mut stop);
    assert_eq!(marker.envelope.topic, "/eventgate/upstream/disconnected");
    assert!(
        durable_then >= last,
        "the marker came while event {last} was not durable (durable through {durable_then})"
    );
    s.server.stop().await;
    s.spool.close().await.unwrap();
}
