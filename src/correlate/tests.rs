//! The stage around a forwarder: retries decide afresh, checkpoints and restarts
//! keep what is held back, a storm that stops is still summed up.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use prost::Message as _;

use super::*;
use crate::proto::eventgate::events::v1::Correlated as Aggregate;
use crate::testing;

/// Keeps every event it accepts; fails the first `fail` calls.
#[derive(Default)]
struct Sink {
    events: Mutex<Vec<Arc<Event>>>,
    fail: AtomicUsize,
    checkpoints: Mutex<Vec<u64>>,
}

impl Forwarder for Sink {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            if self
                .fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(ForwardError::retryable("sink down"));
            }
            self.events
                .lock()
                .unwrap()
                .extend(batch.events().iter().cloned());
            Ok(())
        })
    }

    fn checkpoint(&self, next: u64) -> BoxFuture<'_, Result<(), ForwardError>> {
        self.checkpoints.lock().unwrap().push(next);
        Box::pin(async { Ok(()) })
    }
}

impl Sink {
    fn plain(&self) -> Vec<u64> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|e| e.topic() != aggregate::TOPIC)
            .map(|e| e.seq)
            .collect()
    }

    fn aggregates(&self) -> Vec<Aggregate> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|e| e.topic() == aggregate::TOPIC)
            .map(|e| {
                let any = e.envelope.event.as_ref().unwrap();
                assert_eq!(any.type_url, aggregate::TYPE);
                Aggregate::decode(any.value.as_slice()).unwrap()
            })
            .collect()
    }
}

/// `count` exits of container `id`, seqs from `first`, timed now (so aggregates
/// wait for `flush`).
fn storm(first: u64, count: u64, id: &str) -> Batch {
    let events: Vec<Arc<Event>> = (first..first + count)
        .map(|seq| {
            testing::event(seq)
                .topic("/tasks/exit")
                .now()
                .json(
                    "containerd.events.TaskExit",
                    &format!(r#"{{"containerId":"{id}","id":"{id}","pid":{seq},"exitStatus":1}}"#),
                )
                .arc()
        })
        .collect();
    Batch::new(events, 0)
}

fn settings(flush: Duration) -> CorrelateSettings {
    CorrelateSettings {
        flush,
        ..CorrelateSettings::default()
    }
}

/// A batch sent again after its delivery failed is decided afresh from the state
/// before it: the aggregate counts each held event once.
#[tokio::test]
async fn a_retried_batch_is_not_counted_twice() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(Sink::default());
    sink.fail.store(1, Ordering::SeqCst);
    let stage = Correlated::wrap(
        "alerts",
        sink.clone(),
        settings(Duration::from_secs(3600)),
        dir.path(),
    );
    let batch = storm(1, 30, "web");
    assert!(stage.send(&batch).await.is_err());
    stage.send(&batch).await.unwrap();
    assert_eq!(sink.plain(), (1..=10).collect::<Vec<_>>());
    stage.close().await.unwrap();
    let aggregates = sink.aggregates();
    assert_eq!(aggregates.len(), 1);
    assert_eq!((aggregates[0].count, aggregates[0].similar), (20, 20));
    assert_eq!((aggregates[0].first_seq, aggregates[0].last_seq), (11, 30));
    assert_eq!(aggregates[0].forwarder, "alerts");
}

/// What was held back at a checkpoint survives a restart: the next process, sent
/// everything again from that checkpoint's position, loads the state saved as of
/// it and sums up the held events once.
#[tokio::test]
async fn held_events_survive_a_restart_from_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(Sink::default());
    let hour = settings(Duration::from_secs(3600));
    let stage = Correlated::wrap("alerts", sink.clone(), hour.clone(), dir.path());
    stage.resume(1, 1).await.unwrap();
    stage.send(&storm(1, 25, "web")).await.unwrap();
    stage.checkpoint(26).await.unwrap();
    // After the checkpoint, more is sent, then the process dies (no close).
    stage.send(&storm(26, 5, "web")).await.unwrap();
    drop(stage);
    assert!(sink.aggregates().is_empty());

    let after = Arc::new(Sink::default());
    let restarted = Correlated::wrap("alerts", after.clone(), hour, dir.path());
    assert_eq!(restarted.resume(26, 31).await.unwrap(), 26);
    restarted.send(&storm(26, 5, "web")).await.unwrap();
    assert!(
        after.plain().is_empty(),
        "the window goes on: {:?}",
        after.plain()
    );
    restarted.close().await.unwrap();
    let aggregates = after.aggregates();
    assert_eq!(aggregates.len(), 1);
    assert_eq!(aggregates[0].count, 20, "15 before the checkpoint, 5 after");
    assert_eq!((aggregates[0].first_seq, aggregates[0].last_seq), (11, 30));
}

/// A storm that stops is still summed up once `flush` has passed, with no further
/// batch to carry the aggregate.
#[tokio::test]
async fn a_storm_that_stops_is_summed_up_after_flush() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(Sink::default());
    let stage = Correlated::wrap(
        "alerts",
        sink.clone(),
        settings(Duration::from_secs(1)),
        dir.path(),
    );
    stage.send(&storm(1, 12, "web")).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sink.aggregates().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no aggregate sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sink.aggregates()[0].count, 2);
    stage.close().await.unwrap();
    assert_eq!(sink.aggregates().len(), 1, "nothing more to send at close");
}

/// An aggregate is a record like any other in every form a sink writes: JSON lines
/// with the counts decoded, and each Kafka value format, which a Kafka source reads
/// back into the same event.
#[tokio::test]
async fn an_aggregate_is_a_valid_record_in_every_format() {
    use crate::forward::kafka::{RecordEncoder, TopicTemplate, ValueFormat};
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(Sink::default());
    let stage = Correlated::wrap(
        "alerts",
        sink.clone(),
        settings(Duration::from_secs(3600)),
        dir.path(),
    );
    stage.send(&storm(1, 12, "web")).await.unwrap();
    stage.close().await.unwrap();
    let aggregate = {
        let events = sink.events.lock().unwrap();
        Arc::clone(
            events
                .iter()
                .find(|e| e.topic() == aggregate::TOPIC)
                .unwrap(),
        )
    };
    let line: serde_json::Value =
        serde_json::from_str(&crate::render::event_json(&aggregate)).unwrap();
    assert_eq!(line["type_url"], aggregate::TYPE);
    assert_eq!(line["event"]["object"], "web");
    assert_eq!(line["event"]["count"], 2);
    assert_eq!(
        line["event"]["last_event"]["containerId"]
            .as_str()
            .or(line["event"]["last_event"]["container_id"].as_str()),
        Some("web")
    );
    for format in [
        ValueFormat::Protobuf,
        ValueFormat::Json,
        ValueFormat::CloudeventsBinary,
        ValueFormat::CloudeventsStructured,
    ] {
        let record =
            RecordEncoder::new(TopicTemplate::parse("alerts").unwrap(), format).encode(&aggregate);
        let back = crate::source::decode_record(&record).unwrap();
        assert_eq!(back.envelope, aggregate.envelope, "{format:?}");
        assert_eq!(back.identity.id, aggregate.identity.id, "{format:?}");
        if format == ValueFormat::CloudeventsBinary {
            assert_eq!(record.header("ce_type"), Some(aggregate::TYPE));
        }
    }
}
