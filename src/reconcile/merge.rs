//! The snapshot after a reconcile: the daemon's view, except for the objects the live
//! stream spoke about meanwhile, which keep what the stream said.

use std::collections::BTreeSet;

use super::apply::Object;
use super::state::{NamespaceState, NodeState};

/// `daemon`, with `recorded`'s version of every object in `skip`.
pub(crate) fn merged(
    recorded: &NodeState,
    daemon: &NodeState,
    skip: &BTreeSet<Object>,
) -> NodeState {
    let mut merged = daemon.clone();
    // One reconcile's: told now, and the daemon's side's tasks are their end.
    for ns in merged.namespaces.values_mut() {
        ns.gap_runs.clear();
    }
    for object in skip {
        match object {
            Object::Namespace(name) => match recorded.namespaces.get(name) {
                Some(r) => {
                    merged.namespaces.entry(name.clone()).or_default().labels = r.labels.clone()
                }
                None => {
                    if merged.namespaces.get(name).is_some_and(is_empty) {
                        merged.namespaces.remove(name);
                    }
                }
            },
            Object::Container(ns, id) => {
                let kept = recorded
                    .namespaces
                    .get(ns)
                    .and_then(|n| n.containers.get(id))
                    .cloned();
                let target = &mut merged.namespaces.entry(ns.clone()).or_default().containers;
                match kept {
                    Some(c) => target.insert(id.clone(), c),
                    None => target.remove(id),
                };
            }
            Object::Task(ns, id) => {
                let kept = recorded
                    .namespaces
                    .get(ns)
                    .and_then(|n| n.tasks.get(id))
                    .cloned();
                let target = &mut merged.namespaces.entry(ns.clone()).or_default().tasks;
                match kept {
                    Some(t) => target.insert(id.clone(), t),
                    None => target.remove(id),
                };
            }
            Object::Image(ns, name) => {
                let kept = recorded
                    .namespaces
                    .get(ns)
                    .and_then(|n| n.images.get(name))
                    .cloned();
                let target = &mut merged.namespaces.entry(ns.clone()).or_default().images;
                match kept {
                    Some(i) => target.insert(name.clone(), i),
                    None => target.remove(name),
                };
            }
        }
    }
    merged
}

fn is_empty(ns: &NamespaceState) -> bool {
    ns.containers.is_empty() && ns.tasks.is_empty() && ns.images.is_empty()
}
