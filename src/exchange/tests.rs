use futures::StreamExt;
use prost_types::{Any, Timestamp};

use super::grpc::SubscriptionEnd;
use super::*;
use crate::proto::containerd::types::Envelope;
use crate::testing;

fn exchange(queue: usize) -> Exchange {
    Exchange::new(
        ExchangeSettings {
            subscriber_queue: queue,
            ..ExchangeSettings::default()
        },
        ExchangeParts::default(),
    )
}

fn any() -> Option<Any> {
    Some(Any {
        type_url: "containerd.events.TaskOOM".into(),
        value: vec![],
    })
}

/// An envelope as the forward tests send it: [`any`] in `ns` on `topic`.
fn envelope(ns: &str, topic: &str, ts: Option<Timestamp>) -> Envelope {
    testing::envelope()
        .namespace(ns)
        .topic(topic)
        .timestamp(ts)
        .payload(any())
        .build()
}

fn ts() -> Option<Timestamp> {
    Some(Timestamp {
        seconds: 1_700_000_000,
        nanos: 5,
    })
}

#[tokio::test]
async fn publish_validates_like_containerd() {
    let x = exchange(8);
    let err = testing::accept(&x, Incoming::publish(None, "/a".into(), any()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        err.to_string(),
        "failed publishing event: namespace is required: failed precondition"
    );
    let err = testing::accept(&x, Incoming::publish(Some(""), "/a".into(), any()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);

    let err = testing::accept(&x, Incoming::publish(Some("bad ns"), "/a".into(), any()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.to_string(),
        r#"failed publishing event: namespace validation: identifier "bad ns" must match ^[A-Za-z0-9]+(?:[._-](?:[A-Za-z0-9]+))*$: invalid argument"#
    );

    let err = testing::accept(
        &x,
        Incoming::publish(Some("default"), "tasks".into(), any()),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.to_string(),
        r#"envelope topic "tasks": must start with '/': invalid argument"#
    );
    let err = testing::accept(&x, Incoming::publish(Some("default"), "".into(), any()))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"envelope topic "": must not be empty: invalid argument"#
    );

    let ok = testing::accept(
        &x,
        Incoming::publish(Some("default"), "/tasks/exit".into(), any()),
    )
    .await
    .unwrap();
    assert_eq!(ok.namespace(), "default");
    assert!(ok.envelope.timestamp.is_some(), "server sets the timestamp");
    assert_eq!(ok.envelope.event, any(), "payload passes through untouched");
}

/// Publish and Forward refuse the gateway's own namespace and topics, counting
/// nothing in the order; the gateway's own events and another gateway's, taken in,
/// are not refused.
#[tokio::test]
async fn own_namespace_and_topics_are_refused_to_clients_only() {
    let x = exchange(8);
    let err = testing::accept(
        &x,
        Incoming::publish(Some("eventgate"), "/tasks/exit".into(), any()),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(err.reason(), "reserved");
    assert_eq!(
        err.to_string(),
        "namespace \"eventgate\" is reserved for eventgate's own events (markers, signed \
         checkpoints); publish under another namespace: invalid argument"
    );
    for topic in ["/eventgate", "/eventgate/audit/checkpoint"] {
        let err = testing::accept(&x, Incoming::publish(Some("default"), topic.into(), any()))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(err.reason(), "reserved");
        assert_eq!(
            err.to_string(),
            format!(
                "topic {topic:?} is reserved: topics under /eventgate/ are eventgate's own \
                 events; publish under another topic: invalid argument"
            )
        );
    }
    for (ns, topic) in [
        ("eventgate", "/eventgate/upstream/connected"),
        ("eventgate", "/tasks/exit"),
        ("default", "/eventgate/spool/dropped"),
    ] {
        let err = testing::accept(&x, Incoming::forward(Some(envelope(ns, topic, ts()))))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "reserved", "{ns} {topic}: {err}");
    }
    assert_eq!(x.next_seq(), 1, "no refusal took a place in the order");

    // A name that only begins like the gateway's is anyone's.
    testing::accept(
        &x,
        Incoming::publish(Some("eventgateway"), "/eventgateway/x".into(), any()),
    )
    .await
    .unwrap();
    let marker = envelope("eventgate", "/eventgate/upstream/connected", ts());
    let own = testing::accept(&x, Incoming::checked(Source::Internal, marker.clone()))
        .await
        .unwrap();
    assert_eq!(own.envelope, marker);
    let theirs = testing::event(7)
        .node("web-1")
        .envelope(marker.clone())
        .build();
    let taken = testing::accept(&x, Incoming::taken_in(theirs.identity, marker))
        .await
        .unwrap();
    assert_eq!(taken.node(), Some("web-1"));
    assert_eq!(taken.envelope.topic, "/eventgate/upstream/connected");
}

#[tokio::test]
async fn forward_validates_namespace_then_topic_then_timestamp() {
    let x = exchange(8);
    let err = testing::accept(&x, Incoming::forward(None))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.to_string(),
        "forward request has no envelope: invalid argument"
    );

    // Everything wrong: the namespace is reported first.
    let err = testing::accept(&x, Incoming::forward(Some(envelope("", "bad", None))))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "event envelope has invalid namespace: identifier must not be empty: invalid argument"
    );
    let err = testing::accept(&x, Incoming::forward(Some(envelope("ns", "bad", None))))
        .await
        .unwrap_err();
    assert!(matches!(err, AcceptError::InvalidTopic { .. }), "{err}");
    let err = testing::accept(&x, Incoming::forward(Some(envelope("ns", "/ok", None))))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "timestamp must be set on forwarded event: invalid argument"
    );
    let go_zero = Some(Timestamp {
        seconds: GO_ZERO_TIME_SECONDS,
        nanos: 0,
    });
    assert!(matches!(
        testing::accept(&x, Incoming::forward(Some(envelope("ns", "/ok", go_zero)))).await,
        Err(AcceptError::MissingTimestamp)
    ));
    let bad_nanos = Some(Timestamp {
        seconds: 1,
        nanos: 1_000_000_000,
    });
    assert!(matches!(
        testing::accept(
            &x,
            Incoming::forward(Some(envelope("ns", "/ok", bad_nanos)))
        )
        .await,
        Err(AcceptError::InvalidTimestamp { .. })
    ));

    let ok = testing::accept(&x, Incoming::forward(Some(envelope("other", "/x/y", ts()))))
        .await
        .unwrap();
    assert_eq!(
        ok.envelope,
        envelope("other", "/x/y", ts()),
        "kept as received"
    );
}

#[tokio::test]
async fn subscribers_see_one_order_and_only_matching_events() {
    let x = exchange(64);
    let mut all = x.subscribe(Filter::always()).unwrap();
    let mut exits = x
        .subscribe(Filter::parse_all(&[r#"topic=="/tasks/exit""#]).unwrap())
        .unwrap();
    for topic in [
        "/tasks/start",
        "/tasks/exit",
        "/tasks/delete",
        "/tasks/exit",
    ] {
        testing::accept(&x, Incoming::publish(Some("default"), topic.into(), any()))
            .await
            .unwrap();
    }
    let mut seqs = Vec::new();
    for _ in 0..4 {
        seqs.push(all.next().await.unwrap().unwrap().seq);
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let a = exits.next().await.unwrap().unwrap();
    let b = exits.next().await.unwrap().unwrap();
    assert_eq!((a.topic(), b.topic()), ("/tasks/exit", "/tasks/exit"));
    assert_eq!((a.seq, b.seq), (seqs[1], seqs[3]));
}

#[tokio::test]
async fn a_full_subscriber_is_cut_off_without_affecting_others() {
    let x = exchange(2);
    let mut stalled = x.subscribe(Filter::always()).unwrap();
    let mut healthy = x.subscribe(Filter::always()).unwrap();
    for i in 0..5 {
        testing::accept(&x, Incoming::publish(Some("default"), "/t".into(), any()))
            .await
            .unwrap();
        // The healthy one keeps up.
        let got = healthy.next().await.unwrap().unwrap();
        assert_eq!(got.seq, i + 1);
    }
    assert_eq!(
        x.subscriber_count(),
        1,
        "the stalled subscriber was removed"
    );
    // It still gets what was queued, then a clear reason.
    assert!(stalled.next().await.unwrap().is_ok());
    assert!(stalled.next().await.unwrap().is_ok());
    let end = stalled.next().await.unwrap().unwrap_err();
    assert_eq!(end, SubscriptionEnd::CutOff { capacity: 2 });
    assert_eq!(end.code(), tonic::Code::ResourceExhausted);
    assert!(stalled.next().await.is_none());
}

#[tokio::test]
async fn dropping_a_subscription_unsubscribes_and_close_ends_the_rest() {
    let x = exchange(4);
    let first = x.subscribe(Filter::always()).unwrap();
    let mut second = x.subscribe(Filter::always()).unwrap();
    assert_eq!(x.subscriber_count(), 2);
    drop(first);
    assert_eq!(x.subscriber_count(), 1);
    x.close();
    assert_eq!(
        second.next().await.unwrap().unwrap_err(),
        SubscriptionEnd::Closed
    );
    assert!(matches!(
        testing::accept(&x, Incoming::publish(Some("default"), "/t".into(), any())).await,
        Err(AcceptError::Closed)
    ));
    assert!(x.subscribe(Filter::always()).is_err());
}

/// A filtered subscriber is matched by its own task: the publisher only queues the
/// event for it. A filtered subscriber that does not read is cut off once its
/// queue holds `subscriber_queue` *matching* events, as before.
#[tokio::test]
async fn a_filtered_subscriber_that_does_not_read_is_cut_off_after_its_matching_events() {
    let x = exchange(2);
    let exits = Filter::parse_all(&[r#"topic~="^/tasks/exit$""#]).unwrap();
    let mut stalled = x.subscribe(exits).unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    for i in 0..12 {
        let topic = if i % 3 == 0 {
            "/tasks/exit"
        } else {
            "/tasks/start"
        };
        testing::accept(&x, Incoming::publish(Some("default"), topic.into(), any()))
            .await
            .unwrap();
        // Matching keeps up (the queue only holds 2 events waiting to be matched).
        while x.unmatched_events() > 0 {
            assert!(tokio::time::Instant::now() < deadline, "matching stalled");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
    // 4 matching events for a queue of 2: the matching task has cut it off.
    assert_eq!(x.subscriber_count(), 0);
    assert_eq!(stalled.next().await.unwrap().unwrap().seq, 1);
    assert_eq!(stalled.next().await.unwrap().unwrap().seq, 4);
    let end = stalled.next().await.unwrap().unwrap_err();
    assert_eq!(end, SubscriptionEnd::CutOff { capacity: 2 });
}

/// While a subscriber's matching falls `subscriber_queue` events behind, it is cut
/// off with its own reason, and publishers never wait for it.
#[tokio::test]
async fn a_subscriber_whose_filters_fall_behind_is_cut_off_saying_why() {
    let x = exchange(2);
    let mut slow = x
        .subscribe(Filter::parse_all(&["topic~=|^/t|"]).unwrap())
        .unwrap();
    // Hold the matching thread, so nothing is matched until it is released.
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    matching::spawn(async move {
        let _ = held_tx.send(());
        let _ = release_rx.recv_timeout(std::time::Duration::from_secs(20));
    })
    .unwrap();
    held_rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the matching thread runs the hold");
    for _ in 0..3 {
        testing::accept(&x, Incoming::publish(Some("default"), "/t".into(), any()))
            .await
            .unwrap();
    }
    assert_eq!(x.subscriber_count(), 0, "cut off while publishing");
    release_tx.send(()).unwrap();
    // What was waiting is still matched and delivered, then the reason.
    assert_eq!(slow.next().await.unwrap().unwrap().seq, 1);
    assert_eq!(slow.next().await.unwrap().unwrap().seq, 2);
    let end = slow.next().await.unwrap().unwrap_err();
    assert_eq!(end, SubscriptionEnd::FiltersTooSlow { capacity: 2 });
    assert_eq!(end.code(), tonic::Code::ResourceExhausted);
}
