//! Changing the set of forwarders while events flow (a configuration reload).
//!
//! - **add**: the new forwarder's route is installed between two events; it sees
//!   every event from the next one on, and its cursor in the backlog starts there.
//! - **remove**: its route goes first (it is offered nothing more), then its worker
//!   delivers what is queued within the deadline, then its cursor is forgotten.
//! - **replace** (`hold`, then `resume`): the old route is swapped for one that
//!   queues nothing, as if spilled, and the old worker drains and stops; its cursor
//!   then says exactly what it finished. The successor starts from that cursor and
//!   reads the backlog until it catches up with routing, so every event accepted
//!   meanwhile reaches it once (twice only if the old worker was cut off in the
//!   middle of a batch it could not confirm).

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::watch;

use super::health::Health;
use super::queue::Queue;
use super::route::RouteState;
use super::router::Route;
use super::{ForwarderHandle, Parts, Pipeline, Report};
use crate::filter::Filter;

#[derive(Debug, Error)]
pub enum SwapError {
    #[error("no forwarder named {0:?} is running")]
    Unknown(String),
    #[error("forwarder {0:?} already exists")]
    Exists(String),
    #[error(
        "forwarder {0:?} cannot be replaced without a backlog: events accepted during the swap would be lost"
    )]
    NoBacklog(String),
}

/// A forwarder between its old worker and its successor: routing records what it
/// would have been offered, which its successor reads from the backlog.
pub struct Held {
    name: Arc<str>,
    state: Arc<RouteState>,
    health: Arc<Health>,
    acked: u64,
    /// What the old worker did before it stopped.
    pub report: Option<Report>,
}

impl Held {
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Pipeline {
    /// Starts another forwarder; it is offered every event from the next one routed.
    pub fn add(&self, part: Parts) -> Result<(), SwapError> {
        if self.forwarder(&part.name).is_some() {
            return Err(SwapError::Exists(part.name));
        }
        let name = part.name.clone();
        let backlog = self.backlog.clone();
        let (_, entry) = self.router.replace(&name, |first| {
            // Under the routing lock: the cursor, the route state and the route are
            // in place before the next event is routed.
            if let Some(b) = &backlog {
                b.backlog.register(&name, first);
            }
            let state = Arc::new(RouteState::new(first, None));
            let (route, entry) = self.launch(part, state, Arc::default(), 0);
            (Some(route), entry)
        });
        self.entries.lock().push(entry);
        tracing::info!(forwarder = %name, "forwarder added");
        Ok(())
    }

    /// Stops offering events to `name`, lets its worker deliver what is queued for at
    /// most `deadline`, and forgets its cursor.
    pub async fn remove(
        &self,
        name: &str,
        deadline: Duration,
    ) -> Result<Option<Report>, SwapError> {
        let worker = {
            let mut entries = self.entries.lock();
            let index = entries
                .iter()
                .position(|e| &*e.handle.name == name)
                .ok_or_else(|| SwapError::Unknown(name.to_owned()))?;
            entries.remove(index).worker
        };
        self.router.replace(name, |_| (None, ()));
        let report = match worker {
            Some(worker) => worker.finish(name, deadline).await,
            None => None,
        };
        if let Some(b) = &self.backlog {
            b.backlog.forget(name);
        }
        tracing::info!(forwarder = name, "forwarder removed");
        Ok(report)
    }

    /// First half of a replacement: `name` is offered nothing from the next event
    /// on (routing only records how far it got), and its worker delivers what is
    /// queued (for at most `deadline`) and stops. Resume it with [`Pipeline::resume`].
    pub async fn hold(&self, name: &str, deadline: Duration) -> Result<Held, SwapError> {
        if self.backlog.is_none() {
            return Err(SwapError::NoBacklog(name.to_owned()));
        }
        let health = Arc::new(Health::default());
        let (worker, acked, settings) = {
            let mut entries = self.entries.lock();
            let entry = entries
                .iter_mut()
                .find(|e| &*e.handle.name == name)
                .ok_or_else(|| SwapError::Unknown(name.to_owned()))?;
            let settings = entry.handle.queue.settings().clone();
            let acked = entry.handle.acked();
            let queue = Arc::new(Queue::with_backlog(settings.clone(), true));
            entry.handle = ForwarderHandle {
                name: Arc::clone(&entry.handle.name),
                queue,
                acked: watch::channel(acked).1,
                health: Arc::clone(&health),
            };
            (entry.worker.take(), acked, settings)
        };
        health.spilling();
        let name: Arc<str> = name.into();
        let (_, state) = self.router.replace(&name, |first| {
            let state = Arc::new(RouteState::held(first));
            let route = Arc::new(Route::new(
                Arc::clone(&name),
                Filter::default(),
                Arc::new(Queue::with_backlog(settings, true)),
                Arc::clone(&state),
                Arc::clone(&health),
            ));
            (Some(route), state)
        });
        let report = match worker {
            Some(worker) => worker.finish(&name, deadline).await,
            None => None,
        };
        Ok(Held {
            name,
            state,
            health,
            acked,
            report,
        })
    }

    /// Second half: starts `part` (built from the new configuration, or the old one
    /// when the new one could not be built) where the held forwarder stopped.
    /// Returns the sequence number it resumes at.
    pub fn resume(&self, held: Held, part: Parts) -> u64 {
        let cursor = self
            .backlog
            .as_ref()
            .map_or(0, |b| b.backlog.cursor(&held.name));
        held.state.resume_at(cursor);
        let (route, entry) = self.launch(part, held.state, held.health, held.acked);
        {
            let mut entries = self.entries.lock();
            match entries.iter_mut().find(|e| e.handle.name == held.name) {
                Some(slot) => *slot = entry,
                None => entries.push(entry),
            }
        }
        self.router.replace(&held.name, |_| (Some(route), ()));
        tracing::info!(forwarder = %held.name, resumed_at = cursor, "forwarder replaced");
        cursor
    }
}
