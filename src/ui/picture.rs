//! The timeline picture: one lane per container (a pod's sandbox included), grouped by
//! pod, namespace or node, each lane's life from create through start to exit and
//! delete, its events as marks, and the stretches where the record broke (gaps) or was
//! reconstructed afterwards (reconciled spans). Built from the audit store through a
//! read-only [`Reader`]; exits and restarts are classified by the rules `query --pod`
//! and `stats --by pod` use ([`crate::query::pods`]), so the three always agree.

use std::collections::HashSet;
use std::str::FromStr;
use std::time::{Instant, SystemTime};

use thiserror::Error;

use super::gaps::GapsError;
use crate::event::Event;
use crate::query::pods::{PodCounts, PodName, Tally, revised};
use crate::query::{Query, QueryError, Reader, StoredEvent};

mod lanes;
mod newest;

/// Rows read between two looks at the deadline.
const DEADLINE_EVERY: u64 = 256;
/// How long after its reconnect a reconcile's reconstructed events still belong to a
/// gap (those stamped by eventgate's clock come when the reconcile ran).
const RECONCILE_SLACK_MS: i64 = 5 * 60 * 1000;
/// The axis without a range given and without events: the last hour.
const EMPTY_AXIS_MS: i64 = 60 * 60 * 1000;

#[derive(Debug, Error)]
pub(crate) enum PictureError {
    /// The request itself is wrong; the message is for the user (HTTP 400).
    #[error("{0}")]
    BadInput(String),
    /// The deadline passed while reading (HTTP 503).
    #[error(
        "the timeline took longer than the time allowed ({rows} rows read); \
         narrow the time range or the filter"
    )]
    Deadline { rows: u64 },
    #[error(transparent)]
    Store(#[from] QueryError),
}

/// What the lanes are grouped by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Group {
    #[default]
    Pod,
    Namespace,
    Node,
}

impl FromStr for Group {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "pod" => Ok(Group::Pod),
            "namespace" => Ok(Group::Namespace),
            "node" => Ok(Group::Node),
            other => Err(format!(
                "{other:?} is not a grouping: pod, namespace or node"
            )),
        }
    }
}

pub(crate) struct PictureQuery {
    /// Filter, since and until (limit ignored).
    pub query: Query,
    /// Narrows to one pod, as `query --pod` does.
    pub pod: Option<PodName>,
    pub group: Group,
    /// Rows drawn at most; beyond, the newest are drawn and the picture is marked
    /// truncated.
    pub max_rows: u64,
    /// Reading gives up (an error) after this.
    pub deadline: Instant,
}

/// The timeline, with every time in unix milliseconds.
#[derive(Debug, Default)]
pub(crate) struct Picture {
    pub from: i64,
    pub to: i64,
    pub grouped_by: Group,
    pub pod: Option<PodName>,
    pub groups: Vec<LaneGroup>,
    /// Where the record broke: a gap marker's gap_started_at..connected_at.
    pub gaps: Vec<Span>,
    /// The span of each gap's reconstructed events.
    pub reconciled: Vec<Span>,
    /// Rows read and drawn.
    pub rows: u64,
    pub truncated: Option<Truncated>,
    /// Every pod's counts added up.
    pub counts: PodCounts,
}

/// Only the newest `drawn` of the `total` events selected are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Truncated {
    pub drawn: u64,
    pub total: u64,
    /// The oldest drawn event's time, where the axis starts.
    pub from: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub from: i64,
    pub to: i64,
}

#[derive(Debug)]
pub(crate) struct LaneGroup {
    /// `ns/pod`, a namespace or a node.
    pub key: String,
    /// The pod's counts, for a group of one pod.
    pub counts: Option<PodCounts>,
    pub lanes: Vec<Lane>,
}

#[derive(Debug)]
pub(crate) struct Lane {
    /// The container's pod; `None` for a container of no pod.
    pub pod: Option<PodName>,
    /// The container's name in its pod, `sandbox`, or empty.
    pub container: String,
    pub container_id: String,
    /// create (or first seen) to delete (or last seen; the axis end while running).
    pub life: Span,
    /// Each start to its exit (the axis end while running).
    pub running: Vec<Span>,
    pub marks: Vec<Mark>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Create,
    Start,
    Exit,
    Oom,
    Delete,
    Other,
}

/// An exit by the pods rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExitClass {
    /// Status 0.
    Zero,
    /// A non-zero status the rules do not count: the sandbox's pause process, killed
    /// whenever its pod stops. Drawn apart, so a kill never looks like a clean exit.
    Uncounted,
    NonZero,
    /// Status 137 without an OOM of the container around it.
    Killed,
    /// Status 137 with a `/tasks/oom` of the container before or after it.
    OomKilled,
}

#[derive(Debug)]
pub(crate) struct Mark {
    pub row: i64,
    pub at: i64,
    pub topic: String,
    pub kind: Kind,
    pub exit: Option<ExitClass>,
    pub status: Option<u32>,
    /// The restart a start is (1 for the first restart).
    pub restart: Option<u64>,
    /// `live`, `reconciled`, or `reconciled by cri` / `docker`.
    pub origin: String,
    pub reconciled: bool,
}

/// Reads the events `q` selects and lays them out.
pub(crate) fn build(reader: &Reader, q: &PictureQuery) -> Result<Picture, PictureError> {
    if let (Some(since), Some(until)) = (q.query.since, q.query.until)
        && since >= until
    {
        return Err(PictureError::BadInput(
            "the time range is empty: --since must come before --until".to_owned(),
        ));
    }
    let mut query = Query {
        limit: None,
        ..q.query.clone()
    };
    let mut tally = Tally::default();
    if let Some(pod) = &q.pod {
        let namespace = (!pod.namespace.is_empty()).then_some(pod.namespace.as_str());
        query.filter = query
            .filter
            .and(&crate::query::pods::pod_filter(&pod.name, namespace));
    }
    let (rows, truncated) = newest::read(reader, &query, q.max_rows, q.deadline)?;
    let drawn = rows.len() as u64;
    // A start drawn is a restart when its container started before what is drawn:
    // before the range, or before the oldest event drawn when only the newest are.
    let start = match truncated {
        Some(cut) => Some(system_time(cut.from)),
        None => query.since,
    };
    if let Some(start) = start {
        for key in reader.started_before(q.pod.as_ref(), start)? {
            tally.started_before(key);
        }
    }
    let changes = revised(&mut tally, rows.iter().map(|s| &s.event));
    let times: Vec<i64> = rows.iter().map(|s| event_ms(&s.event)).collect();
    let (from, to) = axis(&query, &times, truncated);
    let mut picture = Picture {
        from,
        to,
        grouped_by: q.group,
        pod: q.pod.clone(),
        rows: drawn,
        truncated,
        ..Picture::default()
    };
    let nodes: HashSet<Option<&str>> = rows.iter().map(|s| s.event.node()).collect();
    picture.gaps = gaps(reader, &nodes, (from, to), q.deadline)?;
    picture.reconciled = reconciled_spans(&picture.gaps, &rows, &times);
    picture.groups = lanes::lanes(&rows, &changes, &times, q.group, to);
    for group in &mut picture.groups {
        let pod = group.lanes.first().and_then(|l| l.pod.as_ref());
        if q.group == Group::Pod
            && let Some(pod) = pod
        {
            group.counts = Some(tally.pods.get(pod).copied().unwrap_or_default());
        }
    }
    for c in tally.pods.values() {
        picture.counts.restarts += c.restarts;
        picture.counts.ooms += c.ooms;
        picture.counts.nonzero_exits += c.nonzero_exits;
        picture.counts.killed += c.killed;
        picture.counts.oom_killed += c.oom_killed;
    }
    Ok(picture)
}

/// The range asked for, or the events' own with a small margin either side; a
/// truncated picture starts at its oldest event, so that lives are not drawn as if
/// they began with the range.
fn axis(query: &Query, times: &[i64], truncated: Option<Truncated>) -> (i64, i64) {
    let first = times.iter().min().copied();
    let last = times.iter().max().copied();
    let margin = match (first, last) {
        (Some(a), Some(b)) => ((b - a) / 50).max(1000),
        _ => 0,
    };
    let from = match truncated {
        Some(cut) => Some(cut.from),
        None => query.since.map(millis).or(first.map(|t| t - margin)),
    };
    let to = query.until.map(millis).or(last.map(|t| t + margin));
    match (from, to) {
        (Some(from), Some(to)) if to > from => (from, to),
        (Some(from), _) => (from, from.saturating_add(EMPTY_AXIS_MS)),
        (None, Some(to)) => (to - EMPTY_AXIS_MS, to),
        (None, None) => {
            let now = millis(SystemTime::now());
            (now - EMPTY_AXIS_MS, now)
        }
    }
}

/// The gaps ([`super::gaps`]) that overlap the axis, of the gateways that captured the
/// events drawn (all of them when any event's node is unknown); one still open runs
/// to the axis end.
fn gaps(
    reader: &Reader,
    nodes: &HashSet<Option<&str>>,
    (from, to): (i64, i64),
    deadline: Instant,
) -> Result<Vec<Span>, PictureError> {
    let axis_start = system_time(from);
    let every_node = nodes.is_empty() || nodes.contains(&None);
    let found = super::gaps::read(reader, axis_start, deadline).map_err(|e| match e {
        GapsError::Deadline => PictureError::Deadline { rows: 0 },
        GapsError::Store(e) => PictureError::Store(e),
    })?;
    Ok(found
        .into_iter()
        .filter(|g| every_node || g.node.is_empty() || nodes.contains(&Some(g.node.as_str())))
        .map(|g| Span {
            from: millis(g.from),
            to: g.to.map_or(to, millis),
        })
        .filter(|s| s.to > s.from && s.from < to && s.to > from)
        .collect())
}

/// Per gap, from the first to the last reconstructed event that belongs to it.
fn reconciled_spans(gaps: &[Span], rows: &[StoredEvent], times: &[i64]) -> Vec<Span> {
    let mut spans: Vec<Option<Span>> = vec![None; gaps.len()];
    for (stored, &at) in rows.iter().zip(times) {
        if stored.event.identity.origin.witness().is_none() {
            continue;
        }
        let gap = gaps
            .iter()
            .position(|g| g.from <= at && at <= g.to + RECONCILE_SLACK_MS);
        if let Some(span) = gap.and_then(|i| spans.get_mut(i)) {
            let grown = span.map_or(Span { from: at, to: at }, |s| Span {
                from: s.from.min(at),
                to: s.to.max(at),
            });
            *span = Some(grown);
        }
    }
    spans.into_iter().flatten().collect()
}

/// The event's own time, or when eventgate received it when it carries none.
fn event_ms(event: &Event) -> i64 {
    match &event.envelope.timestamp {
        Some(ts) => ts
            .seconds
            .saturating_mul(1000)
            .saturating_add(i64::from(ts.nanos / 1_000_000)),
        None => millis(event.identity.received_at),
    }
}

/// Unix milliseconds as a time; one before 1970 is taken as 1970.
fn system_time(ms: i64) -> SystemTime {
    u64::try_from(ms).map_or(SystemTime::UNIX_EPOCH, |ms| {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms)
    })
}

pub(crate) fn millis(time: SystemTime) -> i64 {
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

#[cfg(test)]
#[path = "picture_tests.rs"]
pub(crate) mod tests;
