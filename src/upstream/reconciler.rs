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

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use prost_types::Timestamp;

use crate::event::{Clock, Event, Origin};
use crate::proto::containerd::types::Envelope;
use crate::proto::eventgate::events::v1::{ManagerListing, UpstreamReconciled};
use crate::reconcile::NodeState;
use crate::reconcile::diff::{self, Change};
use crate::reconcile::list::list_node;
use crate::reconcile::managed;
use crate::reconcile::run::GapRuns;
use crate::reconcile::snapshot::{SAVE_EVERY, Snapshot, SnapshotError};
use crate::spool::Spool;

use super::managers::{Asked, Known, ManagerReport, Managers, Outcome};
use super::repeats::Told;
use super::settings::UpstreamSpec;
use super::status::UpstreamStatus;
use tokio::sync::watch;

/// How long after the lists are read events may still arrive for what they show.
pub(crate) const SETTLE: Duration = Duration::from_secs(1);

/// How long listing a daemon may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// The first retry of a reconcile whose manager failed, doubling up to the max.
const MANAGER_RETRY: Duration = Duration::from_secs(1);
const MANAGER_RETRY_MAX: Duration = Duration::from_secs(300);

/// What the marker says cannot be known; the same for every reconcile.
const CANNOT_KNOW: &str = "a container created and removed inside the gap leaves no trace, \
     nor do exec processes, OOM kills, or a pause undone before the lists were read; \
     a task that exited and was removed in the gap has lost its exit status (recorded \
     as 255); times the daemon does not keep (task starts, pauses, deletes, removals) \
     are the reconcile's";

/// What the marker adds when a manager above containerd was listed.
const CANNOT_KNOW_MANAGED: &str = "; a manager keeps only a container's last run: \
     a container the kubelet or `docker rm` removed inside the gap leaves only what \
     containerd kept; a Docker container's earlier runs inside the gap are told from \
     dockerd's event log while it still reaches back past what the record knows of \
     the container (its last 256 events; the oldest is in the docker listing), and \
     otherwise only as many as its RestartCount proves for a container the record \
     never saw run, with unknown exits (recorded as 255) and times (the container's \
     creation, on the reconcile's clock); of a container the record saw run, only \
     the last run is told then";

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
type Listing = Pin<Box<dyn Future<Output = Result<(NodeState, Asked), String>> + Send>>;

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
        asked: Asked,
        until: tokio::time::Instant,
    },
}

/// One event a reconcile reconstructed.
pub(super) struct Reconstructed {
    pub envelope: Envelope,
    pub origin: Origin,
    /// The manager's reason, on an exit it told.
    pub reason: Option<String>,
}

/// What a finished reconcile asks the task to record, in order: the events, then
/// the marker. [`Reconciler::recorded`] completes it.
pub(super) struct Plan {
    pub events: Vec<Reconstructed>,
    pub marker: Envelope,
    pub daemon: NodeState,
    /// What the snapshot is once the marker is recorded: the daemon's view, except
    /// for what was left to the stream. Staged on disk before anything is appended.
    state: NodeState,
    /// The marker's id, which the staged snapshot waits for.
    marker_id: String,
}

pub(super) struct Reconciler {
    upstream: String,
    address: String,
    connect_timeout: Duration,
    managers: Managers,
    /// Where the upstream's status shows how asking the managers went.
    status: Option<watch::Sender<UpstreamStatus>>,
    /// After a manager failed: the next reconcile comes sooner, backing off.
    manager_retry: Option<Duration>,
    interval: Duration,
    spool: Option<Spool>,
    pub snapshot: Snapshot,
    phase: Phase,
    next_interval: Option<tokio::time::Instant>,
    next_tick: tokio::time::Instant,
    /// Where the record of the daemon last became complete: the start of the next
    /// periodic reconcile's gap.
    last_listed: SystemTime,
    /// What recent reconciles told, to know a late live event that repeats it.
    told: Told,
}

impl Reconciler {
    pub(super) async fn open(
        upstream: &str,
        spec: &UpstreamSpec,
        data_dir: &Path,
        spool: Option<Spool>,
        status: Option<watch::Sender<UpstreamStatus>>,
    ) -> Result<Reconciler, SnapshotError> {
        let snapshot = Snapshot::open(data_dir, upstream, spool.as_ref()).await?;
        let (address, connect_timeout, interval) = (
            spec.address.as_str(),
            spec.connect_timeout,
            spec.reconcile_interval,
        );
        Ok(Reconciler {
            upstream: upstream.to_owned(),
            address: address.to_owned(),
            connect_timeout,
            managers: Managers {
                cri: spec.cri.clone(),
                docker: spec.docker.clone(),
                upstream: address.to_owned(),
                connect_timeout,
            },
            status,
            manager_retry: None,
            interval,
            spool,
            snapshot,
            phase: Phase::Idle,
            next_interval: None,
            next_tick: tokio::time::Instant::now() + SAVE_EVERY,
            last_listed: SystemTime::now(),
            told: Told::default(),
        })
    }

    /// Starts listing the daemon (a reconcile under way is abandoned: its lists may
    /// predate the new subscription).
    pub(super) fn begin(&mut self, trigger: Trigger, gap_started: SystemTime) {
        let address = self.address.clone();
        let timeout = self.connect_timeout;
        let managers = self.managers.clone();
        let listed_at = SystemTime::now();
        let known = Known::of(&self.snapshot.state, listed_at);
        let listing: Listing = Box::pin(async move {
            let channel = crate::client::connect_channel(&address, timeout)
                .await
                .map_err(|e| crate::errors::chain(&e))?;
            let daemon = list_node(channel, LIST_TIMEOUT)
                .await
                .map_err(|e| crate::errors::chain(&e))?;
            let asked = managers.ask(&daemon, &known).await;
            Ok((daemon, asked))
        });
        self.snapshot.begin_listing();
        self.phase = Phase::Listing {
            trigger,
            gap_started,
            started: Instant::now(),
            listed_at,
            listing,
        };
    }

    /// Stops reconciling until the next connection (the subscription broke). A
    /// planned reconcile whose marker did not become durable (everything in flight
    /// has resolved by now) will not be: its staged snapshot goes.
    pub(super) fn pause(&mut self) {
        self.phase = Phase::Idle;
        self.snapshot.end_listing();
        self.snapshot.discard_pending();
        self.next_interval = None;
    }

    /// Whether a live event repeats a change a recent reconcile told: the upstream
    /// published it before that reconcile's lists were read (its own timestamp says
    /// so: containerd commits a change before it publishes the event), so the lists
    /// showed the change, and the stream brought it only after the reconcile had
    /// recorded it. Each told change is repeated once at most.
    pub(super) fn repeats(&mut self, envelope: &Envelope) -> bool {
        let repeat = self.told.repeats(envelope);
        if repeat {
            metrics::counter!("eventgate_upstream_repeats_total", "upstream" => self.upstream.clone())
                .increment(1);
            tracing::debug!(upstream = %self.upstream, namespace = %envelope.namespace, topic = %envelope.topic, "a live event repeats a change the reconcile recorded; marked as a repeat");
        }
        repeat
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
                        Ok((daemon, asked)) => {
                            self.phase = Phase::Settling {
                                trigger,
                                gap_started,
                                listed_at,
                                took: started.elapsed(),
                                daemon,
                                asked,
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
            mut daemon,
            asked,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return None;
        };
        let skip = self.snapshot.end_listing();
        let baseline = !self.snapshot.known;
        for view in &asked.views {
            managed::fold(&mut daemon, &self.snapshot.state, view);
        }
        if baseline {
            // Nothing is told at a baseline: nor are earlier runs counted as told.
            for ns in daemon.namespaces.values_mut() {
                ns.gap_runs.clear();
            }
        }
        self.note_managers(&asked.reports);
        if let Some(status) = &self.status {
            // A manager `auto` found absent is no news on the upstream's line.
            let reports: Vec<ManagerReport> = asked
                .reports
                .iter()
                .filter(|r| r.outcome != Outcome::Absent)
                .cloned()
                .collect();
            status.send_if_modified(|s| {
                let changed = s.managers != reports;
                s.managers = reports;
                changed
            });
        }
        let found = if baseline {
            diff::Diff::default()
        } else {
            diff::diff(&self.snapshot.state, &daemon, &skip)
        };
        self.told.remember(&found.changes, listed_at);
        let events = found
            .changes
            .iter()
            .map(|change| {
                let clock = match change.daemon_time.is_some() && !change.bound {
                    true => Clock::Daemon,
                    false => Clock::Reconcile,
                };
                Reconstructed {
                    envelope: envelope(change, listed_at),
                    origin: Origin::Reconciled {
                        clock,
                        from: change.from,
                    },
                    reason: change.reason.clone(),
                }
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
            cannot_know: match asked
                .reports
                .iter()
                .any(|r| matches!(r.outcome, Outcome::Listed { .. }))
            {
                true => format!("{CANNOT_KNOW}{CANNOT_KNOW_MANAGED}"),
                false => CANNOT_KNOW.to_owned(),
            },
            managers: asked
                .reports
                .iter()
                .map(|report| listing_of(report, &daemon))
                .collect(),
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
        // Everything of the upstream the stream delivered is recorded (the plan is
        // made only when quiet), and the reconstructed events change only objects
        // outside `skip`, which the merge takes from the daemon: this is already the
        // state the snapshot has once the marker is recorded.
        let state = crate::reconcile::merge::merged(&self.snapshot.state, &daemon, &skip);
        let marker_id = crate::reconcile::pending::marker_id(&Timestamp::from(listed_at));
        if let Err(error) = self.snapshot.stage(&marker_id, &state, self.spool.as_ref()) {
            // Recorded all the same: the snapshot is then saved after the marker only,
            // and a crash in between costs what it did before the two phases.
            self.failed("save", &crate::errors::chain(&error));
        }
        Some(Plan {
            events,
            marker: crate::markers::reconciled(marker, listed_at),
            daemon,
            state,
            marker_id,
        })
    }

    /// Once the plan's marker is durable at `marker_seq` (its events, each recorded
    /// through [`Reconciler::record`], are before it): the staged snapshot is
    /// promoted, and the next periodic reconcile is scheduled.
    pub(super) fn recorded(&mut self, plan: Plan, marker_seq: u64) {
        if let Err(error) =
            self.snapshot
                .promote(&plan.marker_id, plan.state, marker_seq, self.spool.as_ref())
        {
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
        let after = match (self.manager_retry, self.interval.is_zero()) {
            (Some(retry), true) => Some(retry),
            (Some(retry), false) => Some(retry.min(self.interval)),
            (None, true) => None,
            (None, false) => Some(self.interval),
        };
        self.next_interval = after.map(|after| tokio::time::Instant::now() + after);
    }

    /// Logs how asking the managers went, and backs off the next reconcile's
    /// retry of a manager that failed (1 s doubling to the interval or 5 min).
    fn note_managers(&mut self, reports: &[ManagerReport]) {
        for report in reports {
            if let Some(Err(error)) = &report.log {
                tracing::warn!(upstream = %self.upstream, manager = report.name, address = %report.address, %error, "dockerd's event log could not be read; each Docker container's last run only is told");
            }
        }
        let failed: Vec<&ManagerReport> = reports.iter().filter(|r| r.failed()).collect();
        for report in &failed {
            metrics::counter!("eventgate_reconcile_failures_total", "upstream" => self.upstream.clone(), "stage" => report.name)
                .increment(1);
            tracing::warn!(upstream = %self.upstream, manager = report.name, address = %report.address, detail = %report, "a manager above containerd could not be asked; containerd's lists are used alone and it is asked again sooner");
        }
        self.manager_retry = match failed.is_empty() {
            true => None,
            false => Some(match self.manager_retry {
                None => MANAGER_RETRY,
                Some(last) => (last * 2).min(MANAGER_RETRY_MAX),
            }),
        };
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

/// A manager's report as the marker carries it; for dockerd, with the runs before
/// each container's last that `daemon` (folded) tells.
fn listing_of(report: &ManagerReport, daemon: &NodeState) -> ManagerListing {
    let (sandboxes, containers, status_calls, error) = match &report.outcome {
        Outcome::Listed {
            sandboxes,
            containers,
            status_calls,
        } => (*sandboxes, *containers, *status_calls, String::new()),
        Outcome::Absent => (0, 0, 0, String::new()),
        Outcome::Failed(error) => (0, 0, 0, error.clone()),
    };
    let (log_events, log_oldest, log_error) = match &report.log {
        Some(Ok(read)) => (read.events, read.oldest.map(Timestamp::from), String::new()),
        Some(Err(error)) => (0, None, error.clone()),
        None => (0, None, String::new()),
    };
    let (mut runs_logged, mut runs_counted) = (0, 0);
    if report.name == "docker" {
        let told = daemon
            .namespaces
            .get(managed::DOCKER_NAMESPACE)
            .into_iter()
            .flat_map(|ns| ns.gap_runs.values());
        for runs in told {
            match runs {
                GapRuns::Logged { .. } => runs_logged += runs.count(),
                GapRuns::Counted { .. } => runs_counted += runs.count(),
            }
        }
    }
    ManagerListing {
        name: report.name.to_owned(),
        address: report.address.clone(),
        state: report.state().to_owned(),
        error,
        sandboxes,
        containers,
        status_calls,
        log_events,
        log_oldest,
        log_error,
        runs_logged,
        runs_counted,
    }
}
