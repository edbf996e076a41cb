//! One subscription's stream into the exchange, pipelined: events are appended in the
//! stream's order as they arrive and become durable in groups, while a bounded
//! number wait for the disk (see `inflight`). Whatever can hold an event (a full
//! spool, a full `block` queue, a disk below `spool.min_free`, the in-flight bound)
//! holds the stream, so containerd keeps the rest; meanwhile the events already
//! appended keep becoming durable and recorded, and the snapshot keeps being saved.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use prost::Message as _;
use tonic::Status;

use super::enrich::{Enricher, Lookup};
use super::inflight::{InFlight, Then};
use super::reconciler::{Plan, Reconciler};
use super::task::{Ended, Opened, Task, describe};
use crate::event::{Origin, Source};
use crate::exchange::{AcceptError, Appended, Incoming};
use crate::proto::containerd::types::Envelope;
use crate::reconcile::state::NodeState;

/// Events read ahead of the first one still waiting for its container's record, at
/// most (and their envelopes' bytes): the `Get`s of several new containers overlap.
const LOOKAHEAD: usize = 1024;
const LOOKAHEAD_BYTES: usize = 4 << 20;

/// An event waiting for its place in the order.
pub(super) struct Outgoing {
    pub source: Source,
    pub envelope: Envelope,
    pub origin: Origin,
    /// What its container's record says, or the `Get` it waits for.
    pub workload: Lookup,
    pub then: Then,
}

/// The append of the next outgoing event, waiting for room; `None` when the event
/// was refused and skipped.
type Appending<'a> =
    Pin<Box<dyn Future<Output = Result<Option<(Appended, Then)>, Ended>> + Send + 'a>>;

impl Task {
    /// Feeds the exchange from the subscription until it ends; then waits for what is
    /// in flight to be durable and recorded, so the subscription's events are all
    /// behind the disconnected marker that follows.
    pub(super) async fn stream(
        &self,
        opened: Opened,
        received: &mut u64,
        mut reconciler: Option<&mut Reconciler>,
        enricher: &mut Enricher,
    ) -> Ended {
        let mut in_flight = InFlight::new(&self.name);
        let ended = self
            .pipeline(
                opened,
                received,
                reconciler.as_deref_mut(),
                &mut in_flight,
                enricher,
            )
            .await;
        while !in_flight.is_empty() {
            let (event, then, synced) = in_flight.next().await;
            if let Err(error) = synced {
                tracing::error!(upstream = %self.name, %error, "events of the ended subscription could not be made durable");
                break;
            }
            completed(&event, then, reconciler.as_deref_mut());
        }
        ended
    }

    async fn pipeline(
        &self,
        mut opened: Opened,
        received: &mut u64,
        mut reconciler: Option<&mut Reconciler>,
        in_flight: &mut InFlight,
        enricher: &mut Enricher,
    ) -> Ended {
        let mut outbox: VecDeque<Outgoing> = VecDeque::new();
        // Bytes of the envelopes in `outbox`, bounded with its length.
        let mut outbox_bytes = 0usize;
        let mut appending: Option<Appending<'_>> = None;
        // Once set, nothing more is read; what was read is recorded, then this returns.
        let mut ending: Option<Ended> = None;
        // Looked up at the first event, not at each: a labelled `counter!` allocates
        // its label and hashes its key on every call.
        let mut events_total: Option<metrics::Counter> = None;
        loop {
            // Start the next append; it usually completes at once, without a round
            // through the select below. An event waiting for its container's record
            // holds the ones behind it.
            while appending.is_none()
                && in_flight.has_room()
                && outbox.front().is_some_and(|item| item.workload.is_ready())
            {
                let Some(item) = outbox.pop_front() else {
                    break;
                };
                outbox_bytes -= item.envelope.encoded_len();
                let mut append: Appending<'_> = Box::pin(self.append(item));
                match futures::poll!(append.as_mut()) {
                    Poll::Ready(Ok(Some((appended, then)))) => in_flight.push(appended, then),
                    Poll::Ready(Ok(None)) => {}
                    Poll::Ready(Err(ended)) => return ended,
                    Poll::Pending => appending = Some(append),
                }
            }
            let idle = appending.is_none() && outbox.is_empty();
            if idle && let Some(ended) = ending.take() {
                return ended;
            }
            let settled = reconciler.as_deref().is_some_and(Reconciler::settled);
            // Read on while events only wait for container records (bounded), never
            // while one waits for room: that is how the upstream is held.
            let may_read = ending.is_none()
                && appending.is_none()
                && in_flight.has_room()
                && enricher.has_room()
                && outbox.len() < LOOKAHEAD
                && outbox_bytes < LOOKAHEAD_BYTES
                && !settled;
            let quiet = idle && in_flight.is_empty();
            let oldest = in_flight.first_seq();
            tokio::select! {
                biased;
                () = self.cancel.cancelled(), if ending.is_none() => {
                    // Stopping: what was read is recorded without waiting for records.
                    for item in &mut outbox {
                        Enricher::give_up(&mut item.workload);
                    }
                    ending = Some(Ended::Cancelled);
                }
                (event, then, synced) = in_flight.next() => {
                    if let Err(error) = synced {
                        return self.spool_failed(error);
                    }
                    completed(&event, then, reconciler.as_deref_mut());
                }
                appended = resolve(&mut appending), if appending.is_some() => {
                    appending = None;
                    match appended {
                        Ok(Some((appended, then))) => in_flight.push(appended, then),
                        Ok(None) => {}
                        Err(ended) => return ended,
                    }
                }
                fetched = enricher.fetched(), if enricher.is_fetching() => {
                    for fetched in &fetched {
                        for item in &mut outbox {
                            enricher.settle(&mut item.workload, fetched);
                        }
                    }
                }
                plan = next_plan(reconciler.as_deref_mut(), oldest, quiet), if ending.is_none() => {
                    let recorded = reconciler.as_deref().map(|r| &r.snapshot.state);
                    for item in self.plan_items(plan, enricher, recorded) {
                        outbox_bytes += item.envelope.encoded_len();
                        outbox.push_back(item);
                    }
                }
                message = next_message(&mut opened), if may_read => {
                    let envelope = match message {
                        Ok(Some(envelope)) => envelope,
                        Ok(None) => {
                            ending = Some(Ended::Broke("the upstream ended the subscription".into()));
                            continue;
                        }
                        Err(status) => {
                            ending = Some(Ended::Broke(describe(&status)));
                            continue;
                        }
                    };
                    *received += 1;
                    events_total
                        .get_or_insert_with(|| {
                            metrics::counter!("eventgate_upstream_events_total", "upstream" => self.label())
                        })
                        .increment(1);
                    if let Err(error) = self.exchange.check_envelope(&envelope) {
                        // Kept out of the pipeline like an invalid Forward, but never silently.
                        metrics::counter!("eventgate_upstream_events_rejected_total", "upstream" => self.label(), "reason" => error.reason())
                            .increment(1);
                        tracing::warn!(
                            upstream = %self.name,
                            namespace = %envelope.namespace,
                            topic = %envelope.topic,
                            %error,
                            "upstream sent an envelope eventgate cannot accept; skipped"
                        );
                        continue;
                    }
                    let workload = enricher.begin(&envelope);
                    outbox_bytes += envelope.encoded_len();
                    let repeat = reconciler.as_deref_mut().is_some_and(|r| r.repeats(&envelope));
                    outbox.push_back(Outgoing {
                        source: Source::Upstream(Arc::clone(&self.name)),
                        envelope,
                        origin: if repeat { Origin::Repeat } else { Origin::Live },
                        workload,
                        then: Then::Record,
                    });
                }
            }
        }
    }

    /// A reconcile's events as the upstream's own (they are what it would have
    /// published), then its marker, which completes the reconcile once durable. Each
    /// carries its container's record from the lists (or, for a container deleted
    /// meanwhile, from what was `recorded`).
    fn plan_items(
        &self,
        mut plan: Plan,
        enricher: &mut Enricher,
        recorded: Option<&NodeState>,
    ) -> Vec<Outgoing> {
        let events = std::mem::take(&mut plan.events);
        let empty = NodeState::default();
        let recorded = recorded.unwrap_or(&empty);
        let mut items: Vec<Outgoing> = events
            .into_iter()
            .map(|event| {
                let mut workload = enricher.reconciled(&event.envelope, &plan.daemon, recorded);
                if let Some(reason) = event.reason {
                    let mut with_reason = workload.as_deref().cloned().unwrap_or_default();
                    with_reason.reason = Some(reason);
                    workload = Some(Arc::new(with_reason));
                }
                Outgoing {
                    source: Source::Upstream(Arc::clone(&self.name)),
                    workload: Lookup::Ready(workload),
                    envelope: event.envelope,
                    origin: event.origin,
                    then: Then::Record,
                }
            })
            .collect();
        enricher.listed(&plan.daemon);
        items.push(Outgoing {
            source: Source::Internal,
            envelope: plan.marker.clone(),
            origin: Origin::Live,
            workload: Lookup::Ready(None),
            then: Then::Reconciled(Box::new(plan)),
        });
        items
    }

    /// Appends an event, waiting out full `block` queues, a full spool and a disk
    /// below `spool.min_free`: an upstream event has nowhere else to go, and while we
    /// wait the upstream holds the rest for us.
    pub(super) async fn append(
        &self,
        mut item: Outgoing,
    ) -> Result<Option<(Appended, Then)>, Ended> {
        let workload = item.workload.take();
        let mut warned = false;
        loop {
            let incoming = Incoming::checked(item.source.clone(), item.envelope.clone())
                .origin(item.origin)
                .workload(workload.clone());
            let appended = self.exchange.append(incoming).await;
            match appended {
                Ok(appended) => return Ok(Some((appended, item.then))),
                Err(
                    full @ (AcceptError::QueueFull(_)
                    | AcceptError::SpoolFull(_)
                    | AcceptError::DiskLow(_)),
                ) => {
                    if !warned {
                        tracing::warn!(upstream = %self.name, error = %full, "no room for upstream events; holding the upstream until there is");
                        warned = true;
                    }
                    tokio::select! {
                        () = self.cancel.cancelled() => return Err(Ended::Cancelled),
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
                Err(AcceptError::Closed) => return Err(Ended::ExchangeClosed),
                Err(error @ AcceptError::Spool(_)) => return Err(self.spool_failed(error)),
                Err(error) => {
                    // check_envelope ran first, so this is not expected; say so loudly.
                    tracing::error!(upstream = %self.name, %error, "upstream event refused");
                    return Ok(None);
                }
            }
        }
    }

    /// The disk failed: the event cannot be kept. Say so, and say where the record
    /// breaks, rather than pretend.
    pub(super) fn spool_failed(&self, error: AcceptError) -> Ended {
        let reason = match &error {
            AcceptError::Spool(error) => format!("eventgate cannot write its spool: {error}"),
            other => format!("eventgate cannot keep upstream events: {other}"),
        };
        tracing::error!(upstream = %self.name, %error, "cannot spool an upstream event; ending the subscription");
        Ended::Broke(reason)
    }
}

/// What follows an event's durability, in order.
fn completed(event: &crate::event::Event, then: Then, reconciler: Option<&mut Reconciler>) {
    let Some(reconciler) = reconciler else {
        return;
    };
    match then {
        Then::Record => reconciler.record(event),
        Then::Reconciled(plan) => reconciler.recorded(*plan, event.seq),
    }
}

async fn resolve<T>(pending: &mut Option<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> T {
    match pending {
        Some(future) => future.as_mut().await,
        None => std::future::pending().await,
    }
}

/// The next message of the subscription; containerd answers Subscribe only with its
/// first event, so until then this awaits the answer. Cancel-safe.
async fn next_message(opened: &mut Opened) -> Result<Option<Envelope>, Status> {
    loop {
        match opened {
            Opened::Waiting(call) => {
                let response = call.as_mut().await?;
                *opened = Opened::Streaming(Box::new(response.into_inner()));
            }
            Opened::Streaming(stream) => return stream.message().await,
        }
    }
}

/// The next reconcile ready to be recorded; never, for an upstream without one.
async fn next_plan(
    reconciler: Option<&mut Reconciler>,
    in_flight: Option<u64>,
    quiet: bool,
) -> Plan {
    match reconciler {
        Some(reconciler) => reconciler.ready(in_flight, quiet).await,
        None => std::future::pending().await,
    }
}
