//! `--in-flight N` towards another exchange: which events of a batch may be sent
//! while others are still unanswered, so that each object's events arrive in their
//! order.
//!
//! An exchange numbers events in the order calls reach it, and calls in flight
//! together can reach it in any order. So two events may only be in flight together
//! when nobody depends on their relative order: events about different objects (a
//! container and its task, an image, a snapshot, ...). An event whose object cannot
//! be named (a payload of an unknown type, a message without an identifying field)
//! is a barrier: it goes alone, after everything before it and before everything
//! after it.

use std::collections::HashSet;

use crate::event::Event;

/// The object an event is about, within its namespace; `None` for a barrier.
pub(super) fn object(event: &Event) -> Option<String> {
    let id = event.object_id()?;
    Some(format!("{}\0{id}", event.namespace()))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    Waiting,
    InFlight,
    Done,
}

/// The waiting events that may start now, at most `room` of them, earliest first.
///
/// A waiting event may start when no earlier event of its object is waiting or in
/// flight, and no barrier is before it; a barrier starts when everything before it
/// is done.
pub(super) fn startable(objects: &[Option<String>], slots: &[Slot], room: usize) -> Vec<usize> {
    let mut ready = Vec::new();
    // Objects with an event in flight or waiting earlier in the batch.
    let mut busy: HashSet<&str> = HashSet::new();
    let mut pending_before = false;
    for (i, (object, slot)) in objects.iter().zip(slots).enumerate() {
        if ready.len() >= room {
            break;
        }
        match (slot, object) {
            (Slot::Done, _) => {}
            (Slot::InFlight, None) => break,
            (Slot::Waiting, None) => {
                if !pending_before && ready.is_empty() {
                    ready.push(i);
                }
                break;
            }
            (Slot::InFlight, Some(object)) => {
                busy.insert(object);
                pending_before = true;
            }
            (Slot::Waiting, Some(object)) => {
                if busy.insert(object) {
                    ready.push(i);
                }
                pending_before = true;
            }
        }
    }
    ready
}

#[cfg(test)]
mod tests {
    use super::Slot::{Done, InFlight, Waiting};
    use super::*;
    use crate::testing;

    fn objects(names: &[Option<&str>]) -> Vec<Option<String>> {
        names.iter().map(|n| n.map(str::to_owned)).collect()
    }

    #[test]
    fn different_objects_start_together_up_to_the_room() {
        let o = objects(&[Some("a"), Some("b"), Some("c"), Some("d")]);
        assert_eq!(startable(&o, &[Waiting; 4], 3), [0, 1, 2]);
        assert_eq!(
            startable(&o, &[InFlight, InFlight, InFlight, Waiting], 1),
            [3]
        );
    }

    #[test]
    fn an_object_waits_for_its_earlier_event_but_others_go_past_it() {
        let o = objects(&[Some("a"), Some("a"), Some("b"), Some("a"), Some("c")]);
        assert_eq!(startable(&o, &[Waiting; 5], 8), [0, 2, 4]);
        assert_eq!(
            startable(&o, &[InFlight, Waiting, Done, Waiting, Done], 8),
            Vec::<usize>::new()
        );
        assert_eq!(startable(&o, &[Done, Waiting, Done, Waiting, Done], 8), [1]);
    }

    #[test]
    fn a_barrier_goes_alone() {
        let o = objects(&[Some("a"), None, Some("b")]);
        assert_eq!(startable(&o, &[Waiting; 3], 8), [0]);
        assert_eq!(
            startable(&o, &[InFlight, Waiting, Waiting], 8),
            Vec::<usize>::new()
        );
        assert_eq!(startable(&o, &[Done, Waiting, Waiting], 8), [1]);
        assert_eq!(
            startable(&o, &[Done, InFlight, Waiting], 8),
            Vec::<usize>::new()
        );
        assert_eq!(startable(&o, &[Done, Done, Waiting], 8), [2]);
    }

    #[test]
    fn objects_come_from_the_identifying_field_within_the_namespace() {
        let exit = testing::event(1)
            .at(0)
            .json(
                "containerd.events.TaskExit",
                r#"{"container_id":"c1","id":"e1"}"#,
            )
            .build();
        assert_eq!(object(&exit).as_deref(), Some("default\0c1"));
        let mut create = testing::event(2)
            .at(0)
            .topic("/containers/create")
            .json(
                "containerd.events.ContainerCreate",
                r#"{"id":"c1","image":"busybox"}"#,
            )
            .build();
        assert_eq!(object(&create).as_deref(), Some("default\0c1"));
        create.envelope.namespace = "k8s.io".into();
        assert_eq!(object(&create).as_deref(), Some("k8s.io\0c1"));
        let image = testing::event(3)
            .at(0)
            .topic("/images/create")
            .json(
                "containerd.services.images.v1.ImageCreate",
                r#"{"name":"busybox"}"#,
            )
            .build();
        assert_eq!(object(&image).as_deref(), Some("default\0busybox"));
        let oom = testing::event(4)
            .at(0)
            .topic("/tasks/oom")
            .json("containerd.events.TaskOOM", "{}")
            .build();
        assert_eq!(object(&oom), None, "no identifying field: a barrier");
        let mut unknown = testing::event(5)
            .at(0)
            .topic("/tasks/oom")
            .json("containerd.events.TaskOOM", "{}")
            .build();
        if let Some(any) = unknown.envelope.event.as_mut() {
            any.type_url = "example.com/Unknown".into();
        }
        assert_eq!(object(&unknown), None, "an unknown type: a barrier");
    }
}
