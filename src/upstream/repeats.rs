//! Knowing a late live event for what it is: a repeat of a change a reconcile
//! already told.
//!
//! A reconcile leaves to the stream every object the stream spoke about while the
//! lists were read and for a second after; an event the upstream published before
//! the lists but that reaches eventgate later still (a slow link, a busy daemon) finds
//! its change told already. It is recorded all the same, marked `Origin::Repeat`,
//! so that it is counted once. Its own timestamp is what gives it away: containerd
//! commits a change before it publishes the event, so an event published before the
//! lists began is of a change the lists showed.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use prost::Message as _;
use prost_types::Any;

use crate::proto::containerd::events::TaskExit;
use crate::proto::containerd::types::Envelope;
use crate::reconcile::NodeState;
use crate::reconcile::apply::Object;
use crate::reconcile::diff::Change;

/// Told changes remembered at most (oldest forgotten first): a late event comes
/// seconds after its reconcile, not thousands of changes later.
const MAX_TOLD: usize = 4096;

/// How far past a reconcile's lists the stream must be (by its events' own times)
/// before that reconcile's told changes are forgotten: room for events published
/// out of order by the upstream's publishers' races.
const STREAM_PAST: Duration = Duration::from_secs(10);

/// What recent reconciles told, oldest first.
#[derive(Debug, Default)]
pub(super) struct Told {
    changes: VecDeque<ToldChange>,
}

/// One change a reconcile told.
#[derive(Debug)]
struct ToldChange {
    namespace: String,
    topic: &'static str,
    object: Object,
    /// The exit status told, for an exit.
    exit_status: Option<u32>,
    /// When that reconcile's lists began: the change happened before.
    listed_at: SystemTime,
}

impl Told {
    /// Remembers what a reconcile whose lists began at `listed_at` told.
    pub(super) fn remember(&mut self, changes: &[Change], listed_at: SystemTime) {
        for change in changes {
            if self.changes.len() == MAX_TOLD {
                self.changes.pop_front();
            }
            self.changes.push_back(ToldChange {
                namespace: change.namespace.clone(),
                topic: change.topic,
                object: change.object.clone(),
                exit_status: exit_status(change.topic, Some(&change.event)),
                listed_at,
            });
        }
    }

    /// Whether a live event repeats a told change (same namespace, topic and object;
    /// for an exit, the same status) and was published before that reconcile's lists
    /// began. Each told change is repeated once at most.
    pub(super) fn repeats(&mut self, envelope: &Envelope) -> bool {
        if self.changes.is_empty() {
            return false;
        }
        let Some(published) = envelope
            .timestamp
            .and_then(|t| SystemTime::try_from(t).ok())
        else {
            return false;
        };
        // The stream brings events in the order they were published: once it is
        // well past a reconcile's lists, nothing it brings can repeat what that
        // reconcile told, and each event is spared the search.
        while self
            .changes
            .front()
            .is_some_and(|told| told.listed_at + STREAM_PAST < published)
        {
            self.changes.pop_front();
        }
        if self.changes.is_empty() {
            return false;
        }
        let Some(object) = NodeState::default().apply(
            &envelope.namespace,
            &envelope.topic,
            envelope.event.as_ref(),
        ) else {
            return false;
        };
        let exit_status = exit_status(&envelope.topic, envelope.event.as_ref());
        let found = self.changes.iter().position(|told| {
            told.topic == envelope.topic
                && told.namespace == envelope.namespace
                && told.object == object
                && told.exit_status == exit_status
                && published < told.listed_at
        });
        found.map(|at| self.changes.remove(at)).is_some()
    }
}

/// The exit status of a `/tasks/exit`'s payload.
fn exit_status(topic: &str, event: Option<&Any>) -> Option<u32> {
    let event = event.filter(|_| topic == "/tasks/exit")?;
    TaskExit::decode(event.value.as_slice())
        .ok()
        .map(|exit| exit.exit_status)
}

#[cfg(test)]
#[path = "repeats_tests.rs"]
mod tests;
