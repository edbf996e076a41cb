//! When an upstream task reconciles, and the work it does between events: listing the
//! daemon (off the stream, which keeps flowing), letting late events arrive, then
//! working out the events that explain the difference. Recording them is the task's,
//! as for any event of the upstream.
//!
//! The order that keeps the record from doubling an event: the subscription is open
//! before the lists are read; while they are read and for [`SETTLE`] after, every
//! object the live stream speaks about is noted and left to the stream. containerd
//! commits a change before it publishes the event, so a list can show a change whose
//! event is still on its way; waiting [`SETTLE`] lets it arrive.

use std::collections::BTreeSet;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use prost_types::Timestamp;

use crate::event::{Clock, Event};
use crate::proto::containerd::types::Envelope;
use crate::proto::eventgate::events::v1::UpstreamReconciled;
use crate::reconcile::NodeState;
use crate::reconcile::apply::Object;
use crate::reconcile::diff::{self, Change};
use crate::reconcile::list::list_node;
use crate::reconcile::snapshot::{SAVE_EVERY, Snapshot, SnapshotError};
use crate::spool::Spool;

/// How long after the lists are read events may still arrive for what they show.
pub(crate) const SETTLE: Duration = Duration::from_secs(1);

/// How long listing a daemon may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// What the marker says cannot be known; the same for every reconcile.
const CANNOT_KNOW: &str = "a container created and removed inside the gap leaves no trace, \
     nor do exec processes, OOM kills, or a pause undone before the lists were read; \
     a task that exited and was removed in the gap has lost its exit status (recorded \
     as 255); times the daemon does not keep (task starts, pauses, deletes, removals) \
     are the reconcile's";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    Connected,
    Interval,
}

impl Trigger {
    fn label(self) -> &'static str {
        match self {
            Trigger::Connected => "connected",
            Trigger::Interval => "interval",
        }
    }
}

/// The lists, or why they could not be read (already rendered with its causes).
type Listing = Pin<Box<dyn Future<Output = Result<NodeState, String>> + Send>>;

enum Phase {
    Idle,
    Listing {
        trigger: Trigger,
        gap_started: SystemTime,
        started: Instant,
        listed_at: SystemTime,
        listing: Listing,
    },
    Settling {
        trigger: Trigger,
        gap_started: SystemTime,
        listed_at: SystemTime,
        took: Duration,
        daemon: NodeState,
        until: tokio::time::Instant,
    },
}

/// What a finished reconcile asks the task to record, in order: the events, then
/// the marker. [`Reconciler::recorded`] completes it.
pub(super) struct Plan {
    pub events: Vec<(Envelope, Clock)>,
    pub marker: Envelope,
    pub daemon: NodeState,
    skip: BTreeSet<Object>,
}

pub(super) struct Reconciler {
    upstream: String,
    address: String,
    connect_timeout: Duration,
    interval: Duration,
    spool: Option<Spool>,
    pub snapshot: Snapshot,
    phase: Phase,
    next_interval: Option<tokio::time::Instant>,
    next_tick: tokio::time::Instant,
    /// Where the record of the daemon last became complete: the start of the next
    /// periodic reconcile's gap.
    last_listed: SystemTime,
}

impl Reconciler {
    pub(super) async fn open(
        upstream: &str,
        address: &str,
        connect_timeout: Duration,
        interval: Duration,
        data_dir: &Path,
        spool: Option<Spool>,
    ) -> Result<Reconciler, SnapshotError> {
        let snapshot = Snapshot::open(data_dir, upstream, spool.as_ref()).await?;
        Ok(Reconciler {
            upstream: upstream.to_owned(),
            address: address.to_owned(),
            connect_timeout,
            interval,
            spool,
            snapshot,
            phase: Phase::Idle,
            next_interval: None,
            next_tick: tokio::time::Instant::now() + SAVE_EVERY,
            last_listed: SystemTime::now(),
        })
    }

    /// Starts listing the daemon (a reconcile under way is abandoned: its lists may
    /// predate the new subscription).
    pub(super) fn begin(&mut self, trigger: Trigger, gap_started: SystemTime) {
        let address = self.address.clone();
        let timeout = self.connect_timeout;
        let listing: Listing = Box::pin(async move {
            let channel = crate::client::connect_channel(&address, timeout)
                .await
                .map_err(|e| crate::errors::chain(&e))?;
            list_node(channel, LIST_TIMEOUT)
                .await
                .map_err(|e| crate::errors::chain(&e))
        });
        self.snapshot.begin_listing();
        self.phase = Phase::Listing {
            trigger,
            gap_started,
            started: Instant::now(),
            listed_at: SystemTime::now(),
            listing,
        };
    }

    /// Stops reconciling until the next connection (the subscription broke).
    pub(super) fn pause(&mut self) {
        self.phase = Phase::Idle;
        self.snapshot.end_listing();
        self.next_interval = None;
    }

    /// Advances the snapshot by one of the upstream's events, once the spool has it.
    pub(super) fn record(&mut self, event: &Event) {
        self.snapshot.record(event);
    }

    /// Whether a reconcile has settled and waits for the task to be quiet (see
    /// [`Reconciler::ready`]): the task reads no more of the stream until it is.
    pub(super) fn settled(&self) -> bool {
        matches!(&self.phase, Phase::Settling { until, .. } if tokio::time::Instant::now() >= *until)
    }

    /// Runs until a reconcile is ready to be recorded. Saves the snapshot now and
    /// then meanwhile, and starts the periodic reconcile when it is due. Safe to drop
    /// at any await (the task selects it against the stream).
    ///
    /// The task passes where its own events stand: `in_flight`, the seq of the
    /// oldest it has appended that is not durable and recorded yet (the snapshot is
    /// saved as good up to there only), and `quiet`, true when every event the stream
    /// delivered is recorded. A settled reconcile is planned only when quiet: an event
    /// still on its way to the disk would look like a change the stream missed, and be
    /// recorded twice.
    pub(super) async fn ready(&mut self, in_flight: Option<u64>, quiet: bool) -> Plan {
        loop {
            let now = tokio::time::Instant::now();
            if now >= self.next_tick {
                self.next_tick = now + SAVE_EVERY;
                if let Err(error) = self.snapshot.tick(self.spool.as_ref(), in_flight) {
                    self.failed("save", &crate::errors::chain(&error));
                }
            }
            match &mut self.phase {
                Phase::Idle => {
                    let due = self
                        .next_interval
                        .unwrap_or(self.next_tick)
                        .min(self.next_tick);
                    tokio::time::sleep_until(due).await;
                    if self
                        .next_interval
                        .is_some_and(|at| tokio::time::Instant::now() >= at)
                    {
                        self.next_interval = None;
                        self.begin(Trigger::Interval, self.last_listed);
                    }
                }
                Phase::Listing { listing, .. } => {
                    let tick = tokio::time::sleep_until(self.next_tick);
                    let listed = tokio::select! {
                        listed = listing.as_mut() => listed,
                        () = tick => continue,
                    };
                    let Phase::Listing {
                        trigger,
                        gap_started,
                        started,
                        listed_at,
                        ..
                    } = std::mem::replace(&mut self.phase, Phase::Idle)
                    else {
                        continue;
                    };
                    match listed {
                        Ok(daemon) => {
                            self.phase = Phase::Settling {
                                trigger,
                                gap_started,
                                listed_at,
                                took: started.elapsed(),
                                daemon,
                                until: tokio::time::Instant::now() + SETTLE,
                            }
                        }
                        Err(error) => {
                            self.snapshot.end_listing();
                            self.failed("list", &error);
                            self.schedule();
                        }
                    }
                }
                Phase::Settling { until, .. } => {
                    // Not quiet: the task holds the stream once settled, and calls
                    // again when what is in flight is recorded.
                    let until = match quiet {
                        true => (*until).min(self.next_tick),
                        false => self.next_tick,
                    };
                    tokio::time::sleep_until(until).await;
                    if quiet && let Some(plan) = self.plan() {
                        return plan;
                    }
                }
            }
        }
    }

    /// The events and the marker of a settled reconcile; `None` while it settles.
    fn plan(&mut self) -> Option<Plan> {
        let Phase::Settling { until, .. } = &self.phase else {
            return None;
        };
        if tokio::time::Instant::now() < *until {
            return None;
        }
        let Phase::Settling {
            trigger,
            gap_started,
            listed_at,
            took,
            daemon,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return None;
        };
        let skip = self.snapshot.end_listing();
        let baseline = !self.snapshot.known;
        let found = if baseline {
            diff::Diff::default()
        } else {
            diff::diff(&self.snapshot.state, &daemon, &skip)
        };
        let events = found
            .changes
            .iter()
            .map(|change| {
                let clock = if change.daemon_time.is_some() {
                    Clock::Daemon
                } else {
                    Clock::Reconcile
                };
                (envelope(change, listed_at), clock)
            })
            .collect();
        let count = |f: fn(&crate::reconcile::NamespaceState) -> usize| {
            daemon.namespaces.values().map(f).sum::<usize>() as u64
        };
        let marker = UpstreamReconciled {
            upstream: self.upstream.clone(),
            gap_started_at: Some(Timestamp::from(gap_started)),
            listed_at: Some(Timestamp::from(listed_at)),
            trigger: trigger.label().to_owned(),
            recorded: found
                .counts()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            unknown_exits: found
                .unknown_exits
                .iter()
                .map(|(ns, id)| format!("{ns}/{id}"))
                .collect(),
            left_to_stream: skip.len() as u64,
            baseline,
            namespaces: daemon.namespaces.len() as u64,
            containers: count(|ns| ns.containers.len()),
            tasks: count(|ns| ns.tasks.len()),
            images: count(|ns| ns.images.len()),
            list_duration: prost_types::Duration::try_from(took).ok(),
            cannot_know: CANNOT_KNOW.to_owned(),
        };
        metrics::counter!("eventgate_reconciles_total", "upstream" => self.upstream.clone(), "trigger" => trigger.label())
            .increment(1);
        metrics::histogram!("eventgate_reconcile_list_seconds", "upstream" => self.upstream.clone())
            .record(took);
        for change in &found.changes {
            metrics::counter!("eventgate_reconcile_events_total", "upstream" => self.upstream.clone(), "topic" => change.topic)
                .increment(1);
        }
        if !found.unknown_exits.is_empty() {
            tracing::warn!(upstream = %self.upstream, tasks = ?marker.unknown_exits, "tasks exited and were removed while unrecorded; their exit status is lost");
        }
        tracing::info!(
            upstream = %self.upstream,
            trigger = trigger.label(),
            events = found.changes.len(),
            baseline,
            list_ms = took.as_millis() as u64,
            "reconciled with the daemon's state"
        );
        self.last_listed = listed_at;
        Some(Plan {
            events,
            marker: crate::markers::reconciled(marker, listed_at),
            daemon,
            skip,
        })
    }

    /// After the plan's events are recorded (each through [`Reconciler::record`]):
    /// the snapshot takes the daemon's view, saved, and the next periodic reconcile
    /// is scheduled.
    pub(super) fn recorded(&mut self, plan: Plan) {
        let state = crate::reconcile::merge::merged(&self.snapshot.state, &plan.daemon, &plan.skip);
        if let Err(error) = self.snapshot.reset(state, self.spool.as_ref()) {
            self.failed("save", &crate::errors::chain(&error));
        }
        self.schedule();
    }

    /// Saves the snapshot as the upstream stops.
    pub(super) fn close(&mut self) {
        if let Err(error) = self.snapshot.save(self.spool.as_ref()) {
            self.failed("save", &crate::errors::chain(&error));
        }
    }

    fn schedule(&mut self) {
        self.next_interval =
            (!self.interval.is_zero()).then(|| tokio::time::Instant::now() + self.interval);
    }

    fn failed(&self, stage: &'static str, error: &str) {
        metrics::counter!("eventgate_reconcile_failures_total", "upstream" => self.upstream.clone(), "stage" => stage)
            .increment(1);
        tracing::warn!(upstream = %self.upstream, stage, %error, "reconcile failed; it runs again on the next connection or interval");
    }
}

/// A change as the envelope to record: stamped with the daemon's time for it when
/// there is one, with the time the lists were read otherwise.
fn envelope(change: &Change, listed_at: SystemTime) -> Envelope {
    Envelope {
        timestamp: Some(Timestamp::from(change.daemon_time.unwrap_or(listed_at))),
        namespace: change.namespace.clone(),
        topic: change.topic.to_owned(),
        event: Some(change.event.clone()),
    }
}
