//! Lanes from events: which lane an event goes in, what mark it makes there, and the
//! life and running stretches its marks give the lane.

use std::collections::{BTreeMap, HashMap};

use super::{ExitClass, Group, Kind, Lane, LaneGroup, Mark, Span};
use crate::event::{Event, Witness};
use crate::query::StoredEvent;
use crate::query::pods::{Change, PodName, SIGKILL_STATUS, text, uint};

/// Lanes by group key and container, in the order they first appear.
pub(super) fn lanes(
    rows: &[StoredEvent],
    changes: &[Change],
    times: &[i64],
    group: Group,
    axis_end: i64,
) -> Vec<LaneGroup> {
    let mut groups: BTreeMap<String, Vec<Lane>> = BTreeMap::new();
    let mut index: HashMap<(String, String, String, String), usize> = HashMap::new();
    for ((stored, change), &at) in rows.iter().zip(changes).zip(times) {
        let event = &stored.event;
        let Some(who) = Who::of(event) else {
            continue;
        };
        let key = match group {
            Group::Pod => match &who.pod {
                Some(pod) => pod.to_string(),
                None => who.namespace.clone(),
            },
            Group::Namespace => who.namespace.clone(),
            Group::Node => event.node().unwrap_or("unknown node").to_owned(),
        };
        let lanes = groups.entry(key.clone()).or_default();
        let id = (key, who.uid.clone(), who.container.clone(), who.id.clone());
        let at_lane = *index.entry(id).or_insert_with(|| {
            lanes.push(Lane {
                pod: who.pod.clone(),
                container: who.container.clone(),
                container_id: who.id.clone(),
                life: Span { from: at, to: at },
                running: Vec::new(),
                marks: Vec::new(),
            });
            lanes.len() - 1
        });
        if let Some(lane) = lanes.get_mut(at_lane) {
            lane.marks.push(mark(stored, *change, at));
        }
    }
    let mut out: Vec<LaneGroup> = groups
        .into_iter()
        .map(|(key, mut lanes)| {
            for lane in &mut lanes {
                shape_life(lane, axis_end);
            }
            // The sandbox first, then containers as they appeared.
            lanes.sort_by_key(|l| (l.container != "sandbox", l.life.from));
            LaneGroup {
                key,
                counts: None,
                lanes,
            }
        })
        .collect();
    out.sort_by_key(|g| g.lanes.first().map_or(i64::MAX, |l| l.life.from));
    out
}

/// The life and running stretches of a lane from its marks.
fn shape_life(lane: &mut Lane, axis_end: i64) {
    let first = lane.marks.first().map_or(lane.life.from, |m| m.at);
    let last = lane.marks.last().map_or(lane.life.to, |m| m.at);
    let mut started: Option<i64> = None;
    let mut deleted = None;
    for mark in &lane.marks {
        match mark.kind {
            Kind::Start => {
                if let Some(from) = started.replace(mark.at) {
                    lane.running.push(Span { from, to: mark.at });
                }
            }
            Kind::Exit => {
                if let Some(from) = started.take() {
                    lane.running.push(Span { from, to: mark.at });
                }
            }
            Kind::Delete => deleted = Some(mark.at),
            _ => {}
        }
    }
    if let Some(from) = started {
        lane.running.push(Span {
            from,
            to: axis_end.max(from),
        });
    }
    let to = match (deleted, started) {
        (Some(at), _) => at,
        (None, Some(_)) => axis_end.max(last),
        (None, None) => last,
    };
    lane.life = Span { from: first, to };
}

/// Whose lane an event goes in.
struct Who {
    pod: Option<PodName>,
    uid: String,
    namespace: String,
    container: String,
    id: String,
}

impl Who {
    /// `None` for an event about no container (images, eventgate's own markers).
    fn of(event: &Event) -> Option<Who> {
        let payload = event.decoded();
        let field = |name: &str| payload.and_then(|m| text(m, name));
        let topic = event.topic();
        let id = field("container_id").or_else(|| {
            (topic.starts_with("/containers/") || topic.starts_with("/tasks/"))
                .then(|| field("id"))
                .flatten()
        });
        let workload = event.identity.workload.as_deref();
        let pod = workload.and_then(|w| {
            Some(PodName {
                namespace: w.pod_namespace.clone().unwrap_or_default(),
                name: w.pod_name.clone()?,
            })
        });
        if id.is_none() && pod.is_none() {
            return None;
        }
        let sandbox = workload.is_some_and(|w| w.kind.as_deref() == Some("sandbox"));
        let container = match sandbox {
            true => "sandbox".to_owned(),
            false => workload
                .and_then(|w| w.container_name.clone())
                .unwrap_or_default(),
        };
        let namespace = match &pod {
            Some(pod) => pod.namespace.clone(),
            None => event.namespace().to_owned(),
        };
        Some(Who {
            pod,
            uid: workload.and_then(|w| w.pod_uid.clone()).unwrap_or_default(),
            namespace,
            container,
            id: id.unwrap_or_default(),
        })
    }
}

fn mark(stored: &StoredEvent, change: Change, at: i64) -> Mark {
    let event = &stored.event;
    let payload = event.decoded();
    let topic = event.topic();
    let status = payload.and_then(|m| uint(m, "exit_status"));
    let sandbox = event
        .identity
        .workload
        .as_deref()
        .is_some_and(|w| w.kind.as_deref() == Some("sandbox"));
    let exec = payload.and_then(|m| text(m, "id"));
    let main = exec.is_none() || exec == payload.and_then(|m| text(m, "container_id"));
    let kind = match topic {
        "/containers/create" => Kind::Create,
        "/tasks/start" => Kind::Start,
        "/tasks/exit" if main => Kind::Exit,
        "/tasks/oom" => Kind::Oom,
        "/containers/delete" => Kind::Delete,
        _ => Kind::Other,
    };
    let exit = (kind == Kind::Exit).then_some(match change {
        Change::Failed {
            oom_killed: true, ..
        } => ExitClass::OomKilled,
        Change::Failed { status, .. } if status == SIGKILL_STATUS => ExitClass::Killed,
        Change::Failed { .. } => ExitClass::NonZero,
        _ => match status.unwrap_or(0) {
            0 => ExitClass::Zero,
            _ if sandbox => ExitClass::Uncounted,
            // A container of no pod: the pods rules do not see it, its status still
            // says how it ended.
            SIGKILL_STATUS => ExitClass::Killed,
            _ => ExitClass::NonZero,
        },
    });
    let origin = event.identity.origin;
    Mark {
        row: stored.row_id,
        at,
        topic: topic.to_owned(),
        kind,
        exit,
        status: exit.map(|_| status.unwrap_or(0)),
        restart: match change {
            Change::Start { restart } if restart > 0 => Some(restart),
            _ => None,
        },
        origin: match origin.witness() {
            None => "live".to_owned(),
            Some(Witness::Containerd) => "reconciled".to_owned(),
            Some(from) => format!("reconciled by {}", from.label()),
        },
        reconciled: origin.witness().is_some(),
    }
}
