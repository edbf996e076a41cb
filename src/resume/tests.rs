//! The hand-over between stored and live events, in process: publishers keep
//! publishing while a resumer catches up from the spool, and every event arrives
//! once, in order, whichever side of the boundary it fell on.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::catchup::{self, Plan};
use super::history::History;
use super::metrics::Metrics;
use crate::event::Source;
use crate::exchange::{Exchange, ExchangeParts, ExchangeSettings, Incoming};
use crate::filter::Filter;
use crate::proto::eventgate::services::events::v1::Record;
use crate::testing::{self, TempSpool};

const BEFORE: u64 = 2_000;
const DURING: u64 = 2_000;

async fn publish(exchange: &Exchange, topic: &str, n: u64) {
    for _ in 0..n {
        let envelope = testing::envelope().topic(topic).now().build();
        testing::accept(exchange, Incoming::checked(Source::Publish, envelope))
            .await
            .expect("accepted");
    }
}

/// A resumer's task (its `Err` is the stream's final status, as
/// `ResumeService::subscribe` would send it) and the records it sends.
type Resumer = (
    tokio::task::JoinHandle<Result<(), tonic::Status>>,
    mpsc::Receiver<Result<Record, tonic::Status>>,
);

/// Starts a resumer at `from`.
fn start_resumer(
    exchange: &Exchange,
    spool: &crate::spool::Spool,
    filter: &Filter,
    from: u64,
) -> Resumer {
    let (tx, rx) = mpsc::channel(64);
    let plan = Plan {
        filter: filter.clone(),
        from,
        since: None,
        until: None,
    };
    let resumer = tokio::spawn(catchup::run(
        exchange.clone(),
        History::new(spool.clone(), None),
        plan,
        super::Chasing(Arc::new(std::sync::atomic::AtomicUsize::new(1))),
        tx,
        Arc::new(Metrics::new()),
    ));
    (resumer, rx)
}

/// Runs a resumer from seq 1 while two publishers add `DURING` events each; answers
/// the seqs it delivered (with their topics) once it has `expect` of them. `queue`
/// is `exchange.subscriber_queue`: half of it is how close to the head the resumer
/// goes live.
///
/// The publishers do not wait for the reader, so a reader held off the CPU for
/// longer than `queue` publishes is cut off (RESOURCE_EXHAUSTED), as any slow
/// subscriber is; then it resumes after the last seq it got, as a client would, and
/// the hand-over must still be exact across the resumes. Any other end fails.
async fn resume_while_publishing(
    filter: Filter,
    queue: usize,
    expect: usize,
) -> Vec<(u64, String)> {
    let temp = TempSpool::new();
    let (spool, _) = temp.open(&[]);
    let settings = ExchangeSettings {
        subscriber_queue: queue,
        ..ExchangeSettings::default()
    };
    let parts = ExchangeParts {
        spool: Some(spool.clone()),
        ..ExchangeParts::default()
    };
    let exchange = Exchange::new(settings, parts);
    publish(&exchange, "/tasks/exit", BEFORE).await;

    let (mut resumer, mut rx) = start_resumer(&exchange, &spool, &filter, 1);
    let publishers = [
        tokio::spawn({
            let exchange = exchange.clone();
            async move { publish(&exchange, "/tasks/exit", DURING).await }
        }),
        tokio::spawn({
            let exchange = exchange.clone();
            async move { publish(&exchange, "/tasks/oom", DURING).await }
        }),
    ];
    let mut got = Vec::new();
    let mut cut_offs = 0;
    while got.len() < expect {
        let next = tokio::time::timeout(std::time::Duration::from_secs(20), rx.recv())
            .await
            .expect("a record in time");
        let Some(next) = next else {
            // The resumer ended: only a cut-off may end it early.
            let status = match resumer.await.expect("the resumer task") {
                Ok(()) => panic!("the resumer ended without a status after {}", got.len()),
                Err(status) => status,
            };
            assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
            let last = got.last().map_or(0, |(seq, _)| *seq);
            // Every matching event up to the seq it names was delivered (with a
            // filter it may name a later seq than the last one sent).
            let named: u64 = status
                .message()
                .rsplit_once("resume with after_seq ")
                .and_then(|(_, seq)| seq.parse().ok())
                .unwrap_or_else(|| panic!("names where to resume: {status:?}"));
            assert!(named >= last, "named {named}, last delivered {last}");
            eprintln!("cut off after seq {named}; resuming there");
            cut_offs += 1;
            assert!(cut_offs < 1_000, "cut off again and again");
            (resumer, rx) = start_resumer(&exchange, &spool, &filter, named + 1);
            continue;
        };
        let record = next.expect("the final status comes from the task");
        let topic = record.envelope.map(|e| e.topic).unwrap_or_default();
        got.push((record.seq, topic));
    }
    for publisher in publishers {
        publisher.await.expect("publisher");
    }
    resumer.abort();
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_then_live_events_arrive_once_each_in_gateway_order() {
    let total = (BEFORE + 2 * DURING) as usize;
    let got = resume_while_publishing(Filter::default(), 64, total).await;
    let seqs: Vec<u64> = got.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (1..=total as u64).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_applies_to_stored_and_live_events_alike() {
    let filter = Filter::parse(r#"topic=="/tasks/oom""#).expect("filter");
    // Filtered live events wait for the paced matching thread; a queue that holds
    // everything published keeps a loaded machine from cutting this one off.
    let got = resume_while_publishing(filter, 2 * DURING as usize, DURING as usize).await;
    assert!(got.iter().all(|(_, topic)| topic == "/tasks/oom"));
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "in gateway order");
}
