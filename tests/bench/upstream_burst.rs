//! A burst through a real containerd: several clients publish to the daemon as fast
//! as it answers while eventgate, subscribed with its defaults (`spool.fsync =
//! "batch"`, the `log` and `audit` forwarders), stores what containerd distributes.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use eventgate::internal::bench::load::{lifecycle, publish_all};
use eventgate::proto::Registry;
use eventgate::proto::containerd::services::events::v1::SubscribeRequest;
use eventgate::proto::containerd::services::events::v1::events_client::EventsClient;
use rusqlite::{Connection, OpenFlags};
use support::audit::{stored, wait_stored};
use support::containerd::Containerd;
use support::*;

const EVENTS: usize = 5_000;
const HELD_EVENTS: usize = 30_000;
const WARMUP: &str = "warmup";

/// What tells one event of the burst from another: (namespace, topic, container).
type Key = (String, String, String);

/// Upstream rows of the burst in the store (warm-up events left out).
fn burst_rows(db: &Path) -> u64 {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return 0;
    };
    conn.query_row(
        "SELECT count(*) FROM events WHERE source = 'upstream:node' AND namespace != ?1",
        [WARMUP],
        |r| r.get::<_, i64>(0),
    )
    .map_or(0, |n| n as u64)
}

#[test]
fn a_burst_from_four_clients_is_stored_whole_and_in_containerds_order() {
    let containerd = Containerd::start();
    let dir = tempfile::tempdir().expect("tempdir");
    // No [spool] and no [[forwarder]]: the defaults.
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"node\"\naddress = \"{}\"\n",
            containerd.address()
        ),
    )
    .expect("write config");
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let db = gateway.dir.path().join("data/audit.db");
    wait_stored(&db, "the connected marker", |r| {
        r.topic == "/eventgate/upstream/connected"
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // containerd's own order, as any subscriber of the daemon receives it.
    let (order_tx, order) = mpsc::channel::<Key>();
    let address = containerd.address();
    runtime.spawn(async move {
        let channel = eventgate::client::connect_channel(&address, Duration::from_secs(5))
            .await
            .expect("connect to containerd");
        // containerd answers only with its first event.
        let mut stream = EventsClient::new(channel)
            .subscribe(SubscribeRequest::default())
            .await
            .expect("subscribe to containerd")
            .into_inner();
        while let Ok(Some(envelope)) = stream.message().await {
            let any = envelope.event.expect("payload");
            let message = Registry::global().decode(&any).expect("a known type");
            let container = ["container_id", "id"]
                .iter()
                .find_map(|f| message.get_field_by_name(f))
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            if order_tx
                .send((envelope.namespace, envelope.topic, container))
                .is_err()
            {
                break;
            }
        }
    });
    // Until both subscribers are live: ours, and eventgate's store end to end.
    let warmup = Registry::global()
        .encode_json("containerd.events.TaskOOM", r#"{"container_id":"warmup"}"#)
        .expect("encode");
    let mut seen_directly = false;
    wait_for(
        "a warm-up event in containerd's stream and the store",
        DEADLINE,
        || {
            containerd.publish(WARMUP, "/tasks/oom", &warmup);
            seen_directly |= order.try_iter().any(|(ns, _, _)| ns == WARMUP);
            let stored = stored(&db).iter().any(|r| r.namespace == WARMUP);
            (seen_directly && stored).then_some(())
        },
    );

    // 4 clients, each publishing back to back (as shims do).
    let items = Arc::new(lifecycle(EVENTS));
    runtime
        .block_on(publish_all(&containerd.address(), Arc::clone(&items), 4, 1))
        .expect("containerd took every publish");
    let mut expected: Vec<Key> = Vec::with_capacity(EVENTS);
    while expected.len() < EVENTS {
        let key = order
            .recv_timeout(DEADLINE)
            .expect("containerd distributes every event");
        if key.0 != WARMUP {
            expected.push(key);
        }
    }

    // The order of the stream, not only of each client: a check the store could
    // not pass by accident with four interleaved clients.
    wait_for(
        "every event of the burst in the audit store",
        Duration::from_secs(120),
        || (burst_rows(&db) >= EVENTS as u64).then_some(()),
    );
    let rows = stored(&db);
    let got: Vec<Key> = rows
        .iter()
        .filter(|r| r.source == "upstream:node" && r.namespace != WARMUP)
        .map(|r| {
            (
                r.namespace.clone(),
                r.topic.clone(),
                r.container().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(got.len(), EVENTS, "stored once each");
    let first_difference = got.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(
        first_difference,
        None,
        "stored in containerd's order; first difference: {:?}",
        first_difference.map(|i| (&got[i], &expected[i]))
    );

    // Forwarders take events from memory, so the store can hold the whole burst
    // while the spool's last fdatasync is still under way: in flight drains to 0
    // soon after, and must not stay above it.
    wait_for("nothing left in flight", Duration::from_secs(30), || {
        let inflight = scrape(&mut gateway).get(
            "eventgate_upstream_inflight_events",
            &[("upstream", "node")],
        );
        (inflight == Some(0.0)).then_some(())
    });
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
    runtime.shutdown_timeout(Duration::from_secs(1));
}

/// `bench upstream` end to end at a small size: it starts its own containerd and
/// gateway, and its row says every event was stored.
#[test]
fn the_upstream_benchmark_prints_its_table() {
    assert!(have("containerd"), "containerd must be installed");
    let out = eventgate()
        .args(["bench", "upstream", "--events", "600", "--rounds", "1"])
        .args(["--timeout", "60s"])
        .output()
        .expect("run eventgate bench upstream");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("| defaults, spool.fsync = \"batch\" |"))
        .unwrap_or_else(|| panic!("no batch row in:\n{table}\n{stderr}"));
    assert!(row.contains("| 600 of 600 |"), "{row}");
}

/// A held upstream stays subscribed: while a `block` forwarder cannot deliver (its
/// broker is a closed port), eventgate stops reading the subscription and containerd
/// holds the rest; the burst piles up unread in the connection (thousands of small
/// frames). Once the broker is reachable, every event is stored, with no
/// disconnection (HTTP/2 clients close connections that buffer too many small
/// frames unread; eventgate's windows keep a held subscription within that limit).
#[test]
fn a_held_upstream_stays_subscribed_and_loses_nothing() {
    let cluster = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("events", 1, 1).expect("topic");
    let closed = ClosedPort::new();
    let containerd = Containerd::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            "[[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n\n\
             [[forwarder]]\nname = \"kafka\"\nkind = \"kafka\"\nbrokers = \"127.0.0.1:{}\"\n\
             topic = \"events\"\nmessage_timeout = \"2s\"\n\
             queue = {{ events = 16, overflow = \"block\", block_timeout = \"100ms\" }}\n\
             retry = {{ timeout = \"5s\", initial = \"50ms\", max = \"200ms\" }}\n\
             properties = {{ \"reconnect.backoff.max.ms\" = 200 }}\n\n\
             [[upstream]]\nname = \"node\"\naddress = \"{}\"\n",
            closed.port(),
            containerd.address()
        ),
    )
    .expect("write config");
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let db = gateway.dir.path().join("data/audit.db");
    wait_stored(&db, "the connected marker", |r| {
        r.topic == "/eventgate/upstream/connected"
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // Small events (a `TaskOOM` of a short id: a 40-byte frame each), as many as
    // pass h2's limit on small frames held unread with its default windows (their
    // overhead past 2.5 MiB).
    let oom = Registry::global()
        .encode_json("containerd.events.TaskOOM", r#"{"container_id":"c"}"#)
        .expect("encode");
    let item = eventgate::internal::bench::load::Item {
        namespace: "default".into(),
        topic: "/tasks/oom",
        event: oom,
    };
    let items = Arc::new(vec![item; HELD_EVENTS]);
    runtime
        .block_on(publish_all(&containerd.address(), Arc::clone(&items), 4, 8))
        .expect("containerd took every publish");
    // containerd sends what the connection's windows allow within milliseconds of
    // the publishes; the gateway holds it for a second longer before the broker
    // comes back, and reads nothing meanwhile (16 queued, a few in flight).
    std::thread::sleep(Duration::from_secs(1));
    let held = burst_rows(&db);
    assert!(held < 100, "{held} stored while the kafka queue was full");
    relay(closed.open(), cluster.bootstrap_servers());

    wait_for(
        "every event of the burst in the audit store",
        Duration::from_secs(120),
        || (burst_rows(&db) >= HELD_EVENTS as u64).then_some(()),
    );
    let rows = stored(&db);
    let markers: Vec<&str> = rows
        .iter()
        .map(|r| r.topic.as_str())
        .filter(|t| t.ends_with("/connected") || t.ends_with("/disconnected"))
        .collect();
    assert_eq!(
        markers,
        ["/eventgate/upstream/connected"],
        "subscribed once, never disconnected"
    );
    assert_eq!(burst_rows(&db), HELD_EVENTS as u64, "stored once each");
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}
