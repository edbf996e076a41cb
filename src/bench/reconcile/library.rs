//! eventgate's own share of a reconcile, without containerd: the diff between the
//! recorded state and the daemon's, the merged state the snapshot takes, and saving
//! it, in this process on a state listed from the benchmark's node.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::super::BenchError;
use super::super::daemon::{memory, reset_peak};
use super::Changes;
use crate::reconcile::diff::diff;
use crate::reconcile::merge::merged;
use crate::reconcile::snapshot::Snapshot;
use crate::reconcile::{NodeState, TaskState, TaskStatus};

/// One pass: the three steps' times, what the diff found, what it cost in memory.
#[derive(Clone, Debug)]
pub(crate) struct Pass {
    pub diff: Duration,
    pub merged: Duration,
    pub save: Duration,
    pub events: usize,
    /// This process's peak RSS during the pass, over its RSS before it.
    pub peak_growth: Option<u64>,
    /// The saved snapshot's size.
    pub snapshot_bytes: u64,
}

impl Pass {
    pub(crate) fn total(&self) -> Duration {
        self.diff + self.merged + self.save
    }
}

/// `recorded` compared with `daemon`, merged and saved under `dir`.
pub(crate) async fn pass(
    recorded: &NodeState,
    daemon: &NodeState,
    dir: &Path,
) -> Result<Pass, BenchError> {
    let mut snapshot =
        Snapshot::open(dir, "library", None)
            .await
            .map_err(|e| BenchError::Failed {
                what: format!("cannot open a snapshot: {}", crate::errors::chain(&e)),
            })?;
    let skip = BTreeSet::new();
    let before = memory("self", "VmRSS");
    let reset = reset_peak("self");

    let started = Instant::now();
    let found = diff(recorded, daemon, &skip);
    let diff_took = started.elapsed();

    let started = Instant::now();
    let state = merged(recorded, daemon, &skip);
    let merged_took = started.elapsed();

    let started = Instant::now();
    snapshot
        .reset(state, None)
        .map_err(|e| BenchError::Failed {
            what: format!("cannot save the snapshot: {}", crate::errors::chain(&e)),
        })?;
    let save_took = started.elapsed();

    let peak = memory("self", "VmHWM");
    let path = crate::reconcile::snapshot::path(dir, "library");
    let snapshot_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    Ok(Pass {
        diff: diff_took,
        merged: merged_took,
        save: save_took,
        events: found.changes.len(),
        peak_growth: reset
            .then(|| peak.zip(before).map(|(p, b)| p.saturating_sub(b)))
            .flatten(),
        snapshot_bytes,
    })
}

/// `listed` as the daemon would list it after `changes`: the same containers
/// relabelled, removed and created, the same tasks killed.
pub(crate) fn after(listed: &NodeState, namespace: &str, changes: &Changes) -> NodeState {
    let mut node = listed.clone();
    let Some(ns) = node.namespaces.get_mut(namespace) else {
        return node;
    };
    let now = SystemTime::now();
    let template = ns.containers.values().next().cloned().unwrap_or_default();
    for id in &changes.relabeled {
        if let Some(container) = ns.containers.get_mut(id) {
            container
                .labels
                .get_or_insert_default()
                .insert(super::ROUND_LABEL.into(), changes.round.to_string());
            container.updated_at = Some(now);
        }
    }
    for id in &changes.removed {
        ns.containers.remove(id);
    }
    for id in &changes.created {
        let mut container = template.clone();
        container.created_at = Some(now);
        container.updated_at = Some(now);
        ns.containers.insert(id.clone(), container);
    }
    for id in &changes.killed {
        if let Some(task) = ns.tasks.get_mut(id) {
            *task = TaskState {
                pid: task.pid,
                status: TaskStatus::Stopped,
                exit_status: Some(137),
                exited_at: Some(now),
                ..TaskState::default()
            };
        }
    }
    node
}
