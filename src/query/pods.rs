//! Pods in the audit store (the workload columns of schema version 8): what `eventgate
//! query --pod` shows and `eventgate stats --by pod` counts. One set of rules serves
//! both, so a pod's timeline and its line in the statistics always agree:
//!
//! - a **restart** is a `/tasks/start` of a container (not the sandbox) whose pod (by
//!   uid: a pod recreated under the same name is another pod) already had a start of a
//!   container of the same name; what `kubectl` counts as restarts, where each restart
//!   is a new container with the old one's name;
//! - an **OOM** is a `/tasks/oom` event: containerd's report that the kernel's OOM
//!   killer acted in the container's cgroup (sandbox included);
//! - a **non-zero exit** is a `/tasks/exit` of a container's main process with a
//!   status other than 0: not an exec'd process's (a failing probe is not the
//!   container exiting), not the sandbox's (its pause process is killed whenever the
//!   pod stops). Among them, status **137** is a SIGKILL: what the OOM killer sends,
//!   and also what a stop whose grace period ran out ends with. It is counted as an
//!   **OOM kill** when a `/tasks/oom` of the same container came between its last
//!   start and its next one, before the exit or after it: containerd's shim may
//!   publish the exit of an OOM-killed task before its `/tasks/oom`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::SystemTime;

use super::sql::Dialect;
use super::{Query, QueryError, Reader, RowRange, time};
use crate::event::Event;
use crate::filter::{Filter, quote};
use prost_reflect::{DynamicMessage, Value as Field};

/// The exit status of a process killed by SIGKILL (128 + 9).
pub(crate) const SIGKILL_STATUS: u32 = 137;

/// A pod by namespace and name, the way people name it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodName {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for PodName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One container of one pod across its restarts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerKey {
    pub pod: PodName,
    pub uid: String,
    pub container: String,
}

/// What one pod did, by the rules in the module's documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodCounts {
    pub restarts: u64,
    pub ooms: u64,
    pub nonzero_exits: u64,
    /// Non-zero exits with status 137.
    pub killed: u64,
    /// Of those, the ones after a `/tasks/oom` of the same container.
    pub oom_killed: u64,
}

/// What an event meant for the counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// A container's start: its `n`th restart, 0 for its first start.
    Start { restart: u64 },
    /// A container's main process exited with a non-zero status.
    Failed { status: u32, oom_killed: bool },
    /// A `/tasks/oom`; `explains` is the position (among the events fed to the
    /// tally, from 0) of the status-137 exit of the same container it turns into an
    /// OOM kill, when that exit came first.
    Oom { explains: Option<u64> },
    /// Anything else (a sandbox's or an exec's exit, a zero exit, creates, deletes).
    Other,
}

/// The counts so far, fed events in store order.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    starts: HashMap<ContainerKey, u64>,
    /// Container ids with a `/tasks/oom` since their last start.
    oomed: HashSet<String>,
    /// Container ids whose main process exited with status 137 since their last start,
    /// no `/tasks/oom` seen yet, and the exit's position.
    killed: HashMap<String, u64>,
    /// Events fed so far.
    added: u64,
    pub pods: BTreeMap<PodName, PodCounts>,
}

impl Tally {
    /// A container that started before the events fed here (an earlier time range).
    pub(crate) fn started_before(&mut self, key: ContainerKey) {
        self.starts.entry(key).or_insert(1);
    }

    /// How many events were fed (the position the next one gets).
    pub(crate) fn added(&self) -> u64 {
        self.added
    }

    /// Counts `event`, which must have a pod (events without one change nothing).
    pub(crate) fn add(&mut self, event: &Event) -> Change {
        let position = self.added;
        self.added += 1;
        // A live event repeating a change a reconcile recorded: counted there.
        if event.identity.origin == crate::event::Origin::Repeat {
            return Change::Other;
        }
        let Some(workload) = event.identity.workload.as_deref() else {
            return Change::Other;
        };
        let Some(name) = workload.pod_name.clone() else {
            return Change::Other;
        };
        let pod = PodName {
            namespace: workload.pod_namespace.clone().unwrap_or_default(),
            name,
        };
        let sandbox = workload.kind.as_deref() == Some("sandbox");
        let payload = event.decoded();
        let container_id = payload.and_then(|m| text(m, "container_id"));
        let change = match (event.topic(), &workload.container_name) {
            ("/tasks/start", Some(container)) if !sandbox => {
                let key = ContainerKey {
                    pod: pod.clone(),
                    uid: workload.pod_uid.clone().unwrap_or_default(),
                    container: container.clone(),
                };
                let seen = self.starts.entry(key).or_default();
                *seen += 1;
                if let Some(id) = &container_id {
                    self.oomed.remove(id);
                    self.killed.remove(id);
                }
                Change::Start { restart: *seen - 1 }
            }
            ("/tasks/oom", _) => {
                let explains = container_id.as_ref().and_then(|id| self.killed.remove(id));
                if explains.is_none() {
                    self.oomed.extend(container_id);
                }
                Change::Oom { explains }
            }
            ("/tasks/exit", _) if !sandbox => {
                let exec = payload.and_then(|m| text(m, "id"));
                let main = exec.is_none() || exec == container_id;
                let status = payload.and_then(|m| uint(m, "exit_status")).unwrap_or(0);
                if !main || status == 0 {
                    Change::Other
                } else {
                    let oom_killed = status == SIGKILL_STATUS
                        && container_id
                            .as_ref()
                            .is_some_and(|id| self.oomed.contains(id));
                    if status == SIGKILL_STATUS && !oom_killed {
                        self.killed.extend(container_id.map(|id| (id, position)));
                    }
                    Change::Failed { status, oom_killed }
                }
            }
            _ => Change::Other,
        };
        let counts = self.pods.entry(pod).or_default();
        match change {
            Change::Start { restart } => counts.restarts += u64::from(restart > 0),
            Change::Oom { explains } => {
                counts.ooms += 1;
                counts.oom_killed += u64::from(explains.is_some());
            }
            Change::Failed { status, oom_killed } => {
                counts.nonzero_exits += 1;
                counts.killed += u64::from(status == SIGKILL_STATUS);
                counts.oom_killed += u64::from(oom_killed);
            }
            Change::Other => {}
        }
        change
    }

    /// Pods, crash-looping ones first: most restarts, then OOMs, then non-zero exits,
    /// then by name.
    pub(crate) fn ranked(self) -> Vec<(PodName, PodCounts)> {
        let mut pods: Vec<_> = self.pods.into_iter().collect();
        pods.sort_by(|(a_name, a), (b_name, b)| {
            let key = |c: &PodCounts| (c.restarts, c.ooms, c.nonzero_exits);
            key(b).cmp(&key(a)).then_with(|| a_name.cmp(b_name))
        });
        pods
    }
}

/// What each event meant, with what a later event revealed written back: a status-137
/// exit that a `/tasks/oom` after it explains reads as the OOM kill it was (the oom
/// then needs no note). Only a followed timeline's new lines cannot be revised.
pub(crate) fn revised<'a>(
    tally: &mut Tally,
    events: impl Iterator<Item = &'a Event>,
) -> Vec<Change> {
    let mut changes: Vec<Change> = events.map(|e| tally.add(e)).collect();
    let base = tally.added() - changes.len() as u64;
    for at in 0..changes.len() {
        let Change::Oom {
            explains: Some(exit),
        } = changes[at]
        else {
            continue;
        };
        let exit = usize::try_from(exit - base).unwrap_or(usize::MAX);
        if let Some(Change::Failed { oom_killed, .. }) = changes.get_mut(exit) {
            *oom_killed = true;
            changes[at] = Change::Oom { explains: None };
        }
    }
    changes
}

/// A string field, `None` when empty.
pub(crate) fn text(message: &DynamicMessage, field: &str) -> Option<String> {
    match message.get_field_by_name(field).as_deref() {
        Some(Field::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// An unsigned integer field (`pid`, `exit_status`); the adaptor behind filters has
/// none, so read from the message.
pub(crate) fn uint(message: &DynamicMessage, field: &str) -> Option<u32> {
    match message.get_field_by_name(field).as_deref() {
        Some(Field::U32(n)) => Some(*n),
        _ => None,
    }
}

/// `pod.name==NAME` and, with one, `pod.namespace==NAMESPACE`.
pub(crate) fn pod_filter(name: &str, namespace: Option<&str>) -> Filter {
    let mut text = format!("pod.name=={}", quote(name));
    if let Some(namespace) = namespace {
        text.push_str(&format!(",pod.namespace=={}", quote(namespace)));
    }
    // Quoted literals always parse; the fallback only keeps this total.
    Filter::parse(&text).unwrap_or_default()
}

/// The topics the counts look at, as a filter.
fn counted_topics() -> Filter {
    Filter::parse_all(&[
        r#"pod.name,topic=="/tasks/start""#,
        r#"pod.name,topic=="/tasks/exit""#,
        r#"pod.name,topic=="/tasks/oom""#,
    ])
    .unwrap_or_default()
}

/// A pod named without its namespace, looked up among the rows a query selects.
pub(crate) enum PodLookup {
    Found(PodName),
    Missing,
    /// Pods of that name in several namespaces: `list` names each with its row count
    /// (`shop (12 events), staging (2 events)`).
    Ambiguous {
        namespaces: usize,
        list: String,
    },
}

impl Reader {
    /// The pod named `name` among the rows `query` selects: refused when there is
    /// none, or when the name is used in several namespaces rather than mixing two
    /// pods into one timeline.
    pub(crate) fn lookup_pod(&self, name: &str, query: &Query) -> Result<PodLookup, QueryError> {
        let found = self.pod_namespaces(name, query)?;
        Ok(match found.as_slice() {
            [] => PodLookup::Missing,
            [(namespace, _)] => PodLookup::Found(PodName {
                namespace: namespace.clone(),
                name: name.to_owned(),
            }),
            many => PodLookup::Ambiguous {
                namespaces: many.len(),
                list: many
                    .iter()
                    .map(|(ns, n)| format!("{ns} ({n} events)"))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        })
    }

    /// The namespaces with a pod named `name` among the rows `query` selects, and how
    /// many rows each: more than one, and `--pod NAME` alone is ambiguous.
    pub fn pod_namespaces(
        &self,
        name: &str,
        query: &Query,
    ) -> Result<Vec<(String, u64)>, QueryError> {
        let query = Query {
            filter: query.filter.and(&pod_filter(name, None)),
            limit: None,
            ..query.clone()
        };
        let predicate = query.predicate_in(RowRange::ALL, self.binder());
        let mut found: BTreeMap<String, u64> = BTreeMap::new();
        if predicate.recheck {
            self.each(&query, RowRange::ALL, |stored| {
                let ns = stored
                    .event
                    .identity
                    .workload
                    .as_deref()
                    .and_then(|w| w.pod_namespace.clone());
                *found.entry(ns.unwrap_or_default()).or_default() += 1;
                true
            })?;
        } else {
            let sql = format!(
                "SELECT coalesce(pod_namespace, ''), count(*) FROM events WHERE {} GROUP BY 1",
                predicate.sql
            );
            for row in self.cells(&sql, predicate.params(), "looking up the pod")? {
                let (Some(namespace), Some(count)) = (row[0].text(), row[1].int()) else {
                    return Err(self.bad_value(format!("the pod lookup returned {row:?}")));
                };
                found.insert(namespace.to_owned(), u64::try_from(count).unwrap_or(0));
            }
        }
        Ok(found.into_iter().collect())
    }

    /// The containers (of `pod`, or of every pod) that started before `before`: what
    /// makes a start inside a time range a restart.
    pub fn started_before(
        &self,
        pod: Option<&PodName>,
        before: SystemTime,
    ) -> Result<Vec<ContainerKey>, QueryError> {
        let mut bind = self.binder();
        // Compared as bytes, as SQLite compares text (not by the database's collation).
        let timestamp = match bind.dialect {
            Dialect::Sqlite => "timestamp",
            Dialect::Postgres => "timestamp COLLATE \"C\"",
        };
        let mut sql = format!(
            "SELECT DISTINCT coalesce(pod_namespace, ''), pod_name, coalesce(pod_uid, ''), \
             container_name FROM events WHERE topic = '/tasks/start' AND {timestamp} < {} \
             AND pod_name IS NOT NULL AND container_name IS NOT NULL \
             AND coalesce(container_kind, '') <> 'sandbox'",
            bind.text(time::stored_form(before))
        );
        if let Some(pod) = pod {
            sql.push_str(&format!(
                " AND pod_name = {} AND pod_namespace = {}",
                bind.text(&pod.name),
                bind.text(&pod.namespace)
            ));
        }
        let rows = self.cells(&sql, &bind.params, "reading the earlier starts")?;
        rows.iter()
            .map(
                |row| match (row[0].text(), row[1].text(), row[2].text(), row[3].text()) {
                    (Some(namespace), Some(name), Some(uid), Some(container)) => Ok(ContainerKey {
                        pod: PodName {
                            namespace: namespace.to_owned(),
                            name: name.to_owned(),
                        },
                        uid: uid.to_owned(),
                        container: container.to_owned(),
                    }),
                    _ => Err(self.bad_value(format!("an earlier start read as {row:?}"))),
                },
            )
            .collect()
    }

    /// `stats --by pod`: restarts, OOMs and non-zero exits per pod among the rows
    /// `query` selects, crash-looping pods first.
    pub fn pod_stats(&self, query: &Query) -> Result<Vec<(PodName, PodCounts)>, QueryError> {
        let mut tally = Tally::default();
        if let Some(since) = query.since {
            for key in self.started_before(None, since)? {
                tally.started_before(key);
            }
        }
        let query = Query {
            filter: query.filter.and(&counted_topics()),
            limit: None,
            ..query.clone()
        };
        self.each(&query, RowRange::ALL, |stored| {
            tally.add(&stored.event);
            true
        })?;
        Ok(tally.ranked())
    }
}

#[cfg(test)]
#[path = "pods_tests.rs"]
mod tests;
