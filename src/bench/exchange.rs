//! Exchange throughput and latency: N publishers and M subscribers over a unix socket,
//! against eventgate and against containerd's own exchange, with the same client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use prost::Message;
use prost_types::Timestamp;
use tokio::task::JoinSet;
use tonic::metadata::MetadataValue;

use super::BenchError;
use super::wire::{WireClient, publish_request};
use crate::event::{Event, EventId, Source};
use crate::proto::containerd::events::TaskExit;
use crate::proto::containerd::types::Envelope;
use crate::publisher::Publisher;

const WARMUP_PREFIX: &str = "warmup";

#[derive(Debug, Clone)]
pub(crate) struct ExchangeBench {
    pub publishers: usize,
    pub subscribers: usize,
    /// Events each publisher sends.
    pub events: usize,
    /// Publish calls each publisher keeps outstanding on its connection.
    pub in_flight: usize,
    /// How long to wait for stragglers after the last publish.
    pub drain_timeout: Duration,
}

/// One system's result.
#[derive(Debug)]
pub(crate) struct Measurement {
    pub published: u64,
    pub delivered: u64,
    pub expected: u64,
    /// First publish to last delivery.
    pub elapsed: Duration,
    /// Publish-to-delivery latency in microseconds, over every delivery.
    pub latency: Histogram<u64>,
    /// Warm-up events published before the clock started (a gateway with forwarders
    /// stores these too).
    pub warmups: u64,
    /// When the first publish was sent.
    pub started: Instant,
}

impl Measurement {
    pub(crate) fn delivered_per_sec(&self) -> f64 {
        self.delivered as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub(crate) fn published_per_sec(&self) -> f64 {
        self.published as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub(crate) fn lost(&self) -> u64 {
        self.expected.saturating_sub(self.delivered)
    }

    pub(crate) fn quantile(&self, q: f64) -> u64 {
        self.latency.value_at_quantile(q)
    }
}

/// Drives the Events endpoint at `address`. Subscriptions are proven live with warm-up
/// events first, because containerd sends nothing (not even headers) until an event.
pub(crate) async fn measure(
    address: &str,
    bench: &ExchangeBench,
) -> Result<Measurement, BenchError> {
    let timeout = Duration::from_secs(5);
    let expected_each = (bench.publishers * bench.events) as u64;
    let live = Arc::new(AtomicUsize::new(0));
    let mut subscribers = JoinSet::new();
    for _ in 0..bench.subscribers {
        let client = WireClient::connect(address, timeout).await?;
        subscribers.spawn(subscribe(client, expected_each, Arc::clone(&live)));
    }

    let mut warmup = WireClient::connect(address, timeout).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut warmups = 0;
    while live.load(Ordering::Acquire) < bench.subscribers {
        if Instant::now() > deadline {
            return Err(BenchError::Timeout {
                what: "subscribers did not receive warm-up events within 20s".into(),
            });
        }
        publish(&mut warmup, WARMUP_PREFIX.into(), 0).await?;
        warmups += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut publishers = Vec::new();
    for _ in 0..bench.publishers {
        publishers.push(WireClient::connect(address, timeout).await?);
    }
    let start = Instant::now();
    let mut publishing = JoinSet::new();
    let lanes = bench.in_flight.max(1);
    for (p, client) in publishers.into_iter().enumerate() {
        for lane in 0..lanes {
            // Lanes split the publisher's events; each waits for its own replies.
            let events = bench.events / lanes + usize::from(lane < bench.events % lanes);
            let mut client = client.clone();
            publishing.spawn(async move {
                for i in 0..events {
                    publish(&mut client, container_id(p, lane), i as u32).await?;
                }
                Ok::<_, BenchError>(events as u64)
            });
        }
    }
    let mut published = 0;
    while let Some(result) = publishing.join_next().await {
        published += joined(result)??;
    }

    let mut latency = new_histogram();
    let mut delivered = 0;
    let mut last = start;
    let drain = async {
        while let Some(result) = subscribers.join_next().await {
            let (hist, count, at) = joined(result)??;
            latency.add(&hist).ok();
            delivered += count;
            last = last.max(at);
        }
        Ok::<_, BenchError>(())
    };
    if tokio::time::timeout(bench.drain_timeout, drain)
        .await
        .is_err()
    {
        subscribers.abort_all();
        return Err(BenchError::Timeout {
            what: format!(
                "subscribers had not received every event {:?} after the last publish",
                bench.drain_timeout
            ),
        });
    }
    Ok(Measurement {
        published,
        delivered,
        expected: expected_each * bench.subscribers as u64,
        elapsed: last.duration_since(start),
        latency,
        warmups,
        started: start,
    })
}

fn joined<T>(result: Result<T, tokio::task::JoinError>) -> Result<T, BenchError> {
    result.map_err(|e| BenchError::Timeout {
        what: format!("a benchmark task failed: {e}"),
    })
}

pub(crate) fn new_histogram() -> Histogram<u64> {
    // 1 µs to 60 s at 3 significant figures; construction cannot fail for these bounds.
    Histogram::new_with_bounds(1, 60_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).expect("valid"))
}

const NAMESPACE: &str = "bench";
const TOPIC: &str = "/tasks/exit";
const TYPE_URL: &str = "containerd.events.TaskExit";

fn container_id(publisher: usize, lane: usize) -> String {
    format!("bench-{publisher}-{lane}")
}

/// A realistic payload that also carries its send time (in `exited_at`).
fn task_exit(container_id: String, pid: u32) -> TaskExit {
    TaskExit {
        id: container_id.clone(),
        container_id,
        pid,
        exit_status: 0,
        exited_at: Some(Timestamp::from(SystemTime::now())),
    }
}

async fn publish(
    client: &mut WireClient,
    container_id: String,
    pid: u32,
) -> Result<(), BenchError> {
    let value = task_exit(container_id, pid).encode_to_vec();
    let request = publish_request(TOPIC, TYPE_URL, &value);
    client
        .publish(&MetadataValue::from_static(NAMESPACE), request)
        .await
}

/// The events one round publishes, as the gateway keeps them (namespace from the
/// header, a receive timestamp, the publishing process): a disk baseline writing
/// their spool records writes the gateway's bytes.
pub(crate) fn published_events(bench: &ExchangeBench) -> Vec<Event> {
    let lanes = bench.in_flight.max(1);
    let me = Publisher::Process {
        uid: 0,
        gid: 0,
        pid: Some(std::process::id()),
    };
    let mut seq = 0;
    let mut events = Vec::with_capacity(bench.publishers * bench.events);
    for p in 0..bench.publishers {
        for lane in 0..lanes {
            let count = bench.events / lanes + usize::from(lane < bench.events % lanes);
            for i in 0..count {
                seq += 1;
                let envelope = Envelope {
                    timestamp: Some(Timestamp::from(SystemTime::now())),
                    namespace: NAMESPACE.into(),
                    topic: TOPIC.into(),
                    event: Some(prost_types::Any {
                        type_url: TYPE_URL.into(),
                        value: task_exit(container_id(p, lane), i as u32).encode_to_vec(),
                    }),
                };
                events.push(
                    Event::new(seq, EventId::generate(), Source::Publish, envelope)
                        .with_publisher(Some(me.clone())),
                );
            }
        }
    }
    events
}

async fn subscribe(
    mut client: WireClient,
    expected: u64,
    live: Arc<AtomicUsize>,
) -> Result<(Histogram<u64>, u64, Instant), BenchError> {
    let mut stream = client.subscribe().await?;
    let mut hist = new_histogram();
    let mut count = 0;
    let mut counted_live = false;
    let mut last = Instant::now();
    while count < expected {
        let delivered = stream.message().await.map_err(|source| BenchError::Rpc {
            what: "subscribe",
            source,
        })?;
        let Some(exit) = delivered else {
            break;
        };
        let Some(exit) = exit else {
            continue;
        };
        if exit.container_id.starts_with(WARMUP_PREFIX.as_bytes()) {
            if !counted_live {
                counted_live = true;
                live.fetch_add(1, Ordering::AcqRel);
            }
            continue;
        }
        last = Instant::now();
        count += 1;
        if let Some(sent) = exit.exited_at.and_then(|t| SystemTime::try_from(t).ok()) {
            let us = SystemTime::now()
                .duration_since(sent)
                .unwrap_or_default()
                .as_micros();
            hist.saturating_record(us.max(1) as u64);
        }
    }
    Ok((hist, count, last))
}
