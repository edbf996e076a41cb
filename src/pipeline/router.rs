//! The router: offers every accepted event to each forwarder's route, in sequence
//! order, under the exchange lock. Its set of routes can be replaced while events
//! flow (a configuration reload): the replacement happens under the same lock that
//! routing holds, between two events, at a sequence number the caller learns.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use prost::Message;
use tokio::time::Instant;

use super::QueueFull;
use super::health::Health;
use super::meters::LazyCounter;
use super::queue::{Pushed, Queue};
use super::route::RouteState;
use crate::event::Event;
use crate::filter::Filter;

/// One forwarder's place in the router.
pub(super) struct Route {
    pub name: Arc<str>,
    pub filter: Filter,
    pub queue: Arc<Queue>,
    pub state: Arc<RouteState>,
    pub health: Arc<Health>,
    drops: DropLog,
    meters: RouteMeters,
}

impl Route {
    pub(super) fn new(
        name: Arc<str>,
        filter: Filter,
        queue: Arc<Queue>,
        state: Arc<RouteState>,
        health: Arc<Health>,
    ) -> Self {
        let meters = RouteMeters::new(&name, &queue);
        Self {
            name,
            filter,
            queue,
            state,
            health,
            drops: DropLog::default(),
            meters,
        }
    }
}

/// The route's series, looked up once: routing runs under the exchange lock.
struct RouteMeters {
    /// Counted per event while the queue is full.
    spilled: metrics::Counter,
    blocked_timeouts: LazyCounter,
    /// Dropped by the queue's `overflow` policy (its label is the reason).
    overflowed: LazyCounter,
    closed: LazyCounter,
}

impl RouteMeters {
    fn new(name: &str, queue: &Queue) -> Self {
        const DROPPED: &str = "eventgate_forwarder_dropped_total";
        let policy = queue.settings().overflow.label();
        Self {
            spilled: metrics::counter!("eventgate_forwarder_spilled_total", "forwarder" => name.to_string()),
            blocked_timeouts: LazyCounter::new("eventgate_forwarder_blocked_timeouts_total", name),
            overflowed: LazyCounter::with_reason(DROPPED, name, policy),
            closed: LazyCounter::with_reason(DROPPED, name, "closed"),
        }
    }
}

/// Hands accepted events to the forwarders' queues. Cheap to clone; clones share
/// one set of routes.
#[derive(Clone, Default)]
pub struct Router {
    inner: Arc<Mutex<Routes>>,
}

#[derive(Default)]
pub(super) struct Routes {
    pub list: Arc<[Arc<Route>]>,
    /// The last sequence number routed (0: none yet); a route installed now sees
    /// every event from `last_routed + 1` on.
    pub last_routed: u64,
}

impl Router {
    /// A router whose first event will carry `start_seq`.
    pub(super) fn new(routes: Vec<Arc<Route>>, start_seq: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Routes {
                list: routes.into(),
                last_routed: start_seq.saturating_sub(1),
            })),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Routes> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn snapshot(&self) -> Arc<[Arc<Route>]> {
        Arc::clone(&self.lock().list)
    }

    /// Waits until every `block` queue this event is routed to has room. Called
    /// before the event takes its place in the order, outside any lock.
    pub async fn admit(&self, event: &Event) -> Result<(), QueueFull> {
        for route in self.snapshot().iter() {
            let settings = route.queue.settings();
            if !route.queue.blocks() || !route.filter.matches(&event.record_fields()) {
                continue;
            }
            let deadline = Instant::now() + settings.block_timeout;
            if !route.queue.wait_for_room(deadline).await {
                route.meters.blocked_timeouts.increment(1);
                return Err(QueueFull {
                    forwarder: route.name.to_string(),
                    events: settings.events,
                    bytes: settings.bytes,
                    waited: settings.block_timeout,
                });
            }
        }
        Ok(())
    }

    /// Offers an event to every forwarder. Never waits: runs under the exchange lock
    /// so that every queue receives events in sequence order.
    pub fn route(&self, event: &Arc<Event>) {
        let mut routes = self.lock();
        routes.last_routed = event.seq;
        if routes.list.is_empty() {
            return;
        }
        let size = event.envelope.encoded_len();
        for route in routes.list.iter() {
            let matches = route.filter.matches(&event.record_fields());
            match route.state.route(event, matches, &route.queue, size) {
                Pushed::Queued => {}
                Pushed::Spilled => {
                    route.health.spilling();
                    route.meters.spilled.increment(1);
                }
                Pushed::Dropped(n) => {
                    let policy = route.queue.settings().overflow.label();
                    route.meters.overflowed.increment(n as u64);
                    route.health.dropped(n as u64);
                    route.drops.record(&route.name, policy, n, event.seq);
                }
                Pushed::Closed => {
                    route.health.dropped(1);
                    route.meters.closed.increment(1);
                }
            }
        }
    }

    /// Replaces the route named `name` (adds it when there is none; removes it when
    /// `make` gives `None`), between two events. `make` runs under the routing lock
    /// with the first sequence number the new set will route. Returns the route that
    /// was there and what `make` returned besides.
    pub(super) fn replace<T>(
        &self,
        name: &str,
        make: impl FnOnce(u64) -> (Option<Arc<Route>>, T),
    ) -> (Option<Arc<Route>>, T) {
        let mut routes = self.lock();
        let (route, extra) = make(routes.last_routed + 1);
        let mut list: Vec<Arc<Route>> = routes.list.to_vec();
        let position = list.iter().position(|r| &*r.name == name);
        let old = position.map(|i| list.remove(i));
        if let Some(route) = route {
            // A replacement keeps its place, so routing order stays the config's.
            list.insert(position.unwrap_or(list.len()), route);
        }
        routes.list = list.into();
        (old, extra)
    }

    /// Every route, for a pipeline shutting down.
    pub(super) fn all(&self) -> Arc<[Arc<Route>]> {
        self.snapshot()
    }
}

/// Drop logging for one forwarder: at most one line a second, with the count since
/// the last line. A flood of drops must not become a flood of log lines, but no drop
/// goes unmentioned.
#[derive(Default)]
struct DropLog {
    state: Mutex<(Option<Instant>, u64)>,
}

impl DropLog {
    fn record(&self, forwarder: &str, policy: &'static str, dropped: usize, seq: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.1 += dropped as u64;
        let now = Instant::now();
        if state.0.is_some_and(|at| now - at < Duration::from_secs(1)) {
            return;
        }
        let pending = std::mem::take(&mut state.1);
        state.0 = Some(now);
        drop(state);
        tracing::warn!(
            forwarder,
            policy,
            dropped = pending,
            at_seq = seq,
            "forwarder queue full: events dropped (counted in eventgate_forwarder_dropped_total)"
        );
    }
}
