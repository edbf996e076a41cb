//! Subscribers' filters, matched off the path that publishes.
//!
//! A subscriber chooses what its filters cost: up to `max_filters` strings, each
//! with regular expressions. Matched under the exchange's order lock, every
//! publisher would wait for every subscriber's filters on every event. Here the lock
//! only hands each event (one shared `Arc`) to each filtered subscriber's inbound
//! queue; the subscriber's own matching task filters it on a thread of its own, and
//! passes what matches to the subscription's queue. So:
//! - a publisher's cost per subscriber is one `try_send`, whatever the filters;
//! - order is kept: each task sees its inbound queue in exchange order;
//! - a subscriber that reads too slowly is cut off as before, once
//!   `subscriber_queue` *matching* events wait for it;
//! - a subscriber whose filters cannot keep up is cut off once `subscriber_queue`
//!   events wait to be matched, and it only slows itself: each task gets a time
//!   slice per turn (checked between filter strings), so one whose filters are
//!   cheap empties its whole queue in its turn while an expensive one gets through
//!   a few filter strings of one event.
//!
//! Being one thread, matching takes at most one core from the gateway's other work,
//! however many subscribers and filters there are; and it is paced to
//! `exchange.limits.filter_cpu_percent` of that core (25% by default). On a small
//! node any busy core slows everything else (on 2 vCPUs, a plain busy loop doubles a
//! publisher's p99), so filters that ask for more than their share fall behind and
//! are cut off, rather than taking a core from publishers and forwarders.
//!
//! Filters with regular expressions are compiled on that thread too (the regex
//! budget bounds how long that takes), so a Subscribe with costly filters does not
//! hold up the runtime.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::mpsc::{self, error::TrySendError};

use super::Inner;
use crate::event::Event;
use crate::filter::{Filter, FilterError, RegexBudget};

/// How long one matching task may run before it lets the others have the thread.
const SLICE: Duration = Duration::from_millis(1);

/// How much CPU the matching thread uses between two looks at its pace: small
/// enough that a rest is a few milliseconds (never a visible stall for a cheap
/// subscriber), large enough that the clock is read rarely.
const PACE_QUANTUM: Duration = Duration::from_millis(2);

std::thread_local! {
    /// Set on the matching thread only: pacing sleeps the thread, which must never
    /// happen on a runtime that serves anything else.
    static PACER: std::cell::RefCell<Option<Pacer>> = const { std::cell::RefCell::new(None) };
}

/// Where the matching thread's CPU time and the wall clock stood at the last rest.
struct Pacer {
    cpu: Duration,
    wall: Instant,
}

/// This thread's CPU time; zero where it cannot be read (then nothing is paced).
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        now.tv_sec.max(0) as u64,
        now.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Called between matching turns: once the thread has used more than `percent` of
/// the wall time since its last rest, it sleeps until it is back within it. Time
/// the thread spent waiting for events counts, so matching that keeps up never
/// rests.
fn pace(percent: u32) {
    if percent >= 100 {
        return;
    }
    PACER.with(|pacer| {
        let mut pacer = pacer.borrow_mut();
        let Some(pacer) = pacer.as_mut() else {
            return;
        };
        let used = thread_cpu_time().saturating_sub(pacer.cpu);
        if used < PACE_QUANTUM {
            return;
        }
        let due = used * 100 / percent.max(1);
        let elapsed = pacer.wall.elapsed();
        if elapsed < due {
            let rest = due - elapsed;
            std::thread::sleep(rest);
            metrics::histogram!("eventgate_filter_matching_rest_seconds").record(rest);
        }
        pacer.cpu = thread_cpu_time();
        pacer.wall = Instant::now();
    });
}

/// Why a subscription ended early, shared between the exchange, the matching task
/// and the subscription (which reports it).
#[derive(Default)]
pub(super) struct CutOff(AtomicU8);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CutOffReason {
    /// `subscriber_queue` matching events were waiting for the client to read them.
    SlowReader,
    /// `subscriber_queue` events were waiting to be matched against its filters.
    SlowFilters,
}

impl CutOff {
    pub(super) fn set(&self, reason: CutOffReason) {
        let code = match reason {
            CutOffReason::SlowReader => 1,
            CutOffReason::SlowFilters => 2,
        };
        // The first reason stays: it is what ended the subscription.
        let _ = self
            .0
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
    }

    pub(super) fn get(&self) -> Option<CutOffReason> {
        match self.0.load(Ordering::Acquire) {
            1 => Some(CutOffReason::SlowReader),
            2 => Some(CutOffReason::SlowFilters),
            _ => None,
        }
    }
}

/// Counts a cut-off and says so in the log.
pub(super) fn record_cut_off(id: u64, reason: CutOffReason, queue: usize) {
    match reason {
        CutOffReason::SlowReader => {
            metrics::counter!("eventgate_subscribers_cut_off_total").increment(1);
            tracing::warn!(
                subscriber = id,
                queue,
                "subscriber fell too far behind and was cut off"
            );
        }
        CutOffReason::SlowFilters => {
            metrics::counter!("eventgate_subscribers_filter_cut_off_total").increment(1);
            tracing::warn!(
                subscriber = id,
                queue,
                "subscriber's filters could not keep up with the events and it was cut off"
            );
        }
    }
}

/// The matching thread's runtime; `None` if the thread could not be started (then
/// matching runs on the caller's runtime, which still keeps it out of the lock).
fn pool() -> Option<&'static Handle> {
    static POOL: OnceLock<Option<Handle>> = OnceLock::new();
    POOL.get_or_init(|| match start_pool() {
        Ok(handle) => Some(handle),
        Err(error) => {
            tracing::error!(%error, "cannot start the filter matching thread; matching on the main runtime");
            None
        }
    })
    .as_ref()
}

fn start_pool() -> std::io::Result<Handle> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("eventgate-match".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build();
            PACER.with(|pacer| {
                *pacer.borrow_mut() = Some(Pacer {
                    cpu: thread_cpu_time(),
                    wall: Instant::now(),
                })
            });
            match runtime {
                Ok(runtime) => {
                    if tx.send(Ok(runtime.handle().clone())).is_ok() {
                        runtime.block_on(std::future::pending::<()>());
                    }
                }
                Err(error) => {
                    let _ = tx.send(Err(error));
                }
            }
        })?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the matching thread ended while starting"))?
}

pub(super) fn spawn<F>(task: F) -> Result<tokio::task::JoinHandle<F::Output>, NoRuntime>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match pool() {
        Some(handle) => Ok(handle.spawn(task)),
        None => Handle::try_current()
            .map(|handle| handle.spawn(task))
            .map_err(|_| NoRuntime),
    }
}

/// Neither the matching thread nor a runtime to fall back on.
#[derive(Debug, Clone, Copy)]
pub(super) struct NoRuntime;

/// Parses and compiles a client's filters, held to `budget`: on the matching thread
/// when they hold regular expressions (compiling those is what costs), at once
/// otherwise, so that a plain subscription is registered as soon as it arrives.
pub(super) async fn compile(
    filters: Vec<String>,
    budget: RegexBudget,
) -> Result<Result<Filter, FilterError>, NoRuntime> {
    if !filters.iter().any(|f| f.contains("~=")) {
        return Ok(Filter::parse_all_within(&filters, budget));
    }
    let task = spawn(async move { Filter::parse_all_within(&filters, budget) })?;
    task.await.map_err(|_| NoRuntime)
}

/// One filtered subscriber's matching task, started on the matching thread.
pub(super) struct Matcher {
    pub(super) id: u64,
    pub(super) filter: Filter,
    pub(super) inbound: mpsc::Receiver<Arc<Event>>,
    pub(super) outbound: mpsc::Sender<Arc<Event>>,
    pub(super) cut_off: Arc<CutOff>,
    pub(super) exchange: Weak<Inner>,
    pub(super) queue: usize,
    /// `exchange.limits.filter_cpu_percent` when it subscribed.
    pub(super) cpu_percent: u32,
}

impl Matcher {
    pub(super) fn start(self) -> Result<(), NoRuntime> {
        spawn(self.run()).map(drop)
    }

    async fn run(mut self) {
        let mut turn = Instant::now();
        loop {
            // A turn ends when the queue is empty or the slice is used: both are
            // where the thread's pace is checked.
            let event = match self.inbound.try_recv() {
                Ok(event) => event,
                Err(mpsc::error::TryRecvError::Empty) => {
                    pace(self.cpu_percent);
                    match self.inbound.recv().await {
                        Some(event) => {
                            turn = Instant::now();
                            event
                        }
                        None => return,
                    }
                }
                Err(mpsc::error::TryRecvError::Disconnected) => return,
            };
            // A client that left takes its backlog with it: matching what is still
            // queued for nobody would cost other subscribers their share.
            if self.outbound.is_closed() {
                return;
            }
            let mut matched = false;
            // One filter string at a time, so a subscription with many costly ones
            // gives the thread up in the middle of an event rather than after it.
            for alternative in self.filter.alternatives() {
                if alternative.matches(&*event) {
                    matched = true;
                    break;
                }
                if turn.elapsed() >= SLICE {
                    pace(self.cpu_percent);
                    tokio::task::yield_now().await;
                    turn = Instant::now();
                    if self.outbound.is_closed() {
                        return;
                    }
                }
            }
            if matched && !self.deliver(event) {
                return;
            }
            if turn.elapsed() >= SLICE {
                pace(self.cpu_percent);
                tokio::task::yield_now().await;
                turn = Instant::now();
            }
        }
    }

    /// Queues a matching event for the client; `false` once the subscription is
    /// over.
    fn deliver(&mut self, event: Arc<Event>) -> bool {
        match self.outbound.try_send(event) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.cut_off.set(CutOffReason::SlowReader);
                record_cut_off(self.id, CutOffReason::SlowReader, self.queue);
                if let Some(exchange) = self.exchange.upgrade() {
                    exchange.remove(self.id);
                }
                false
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pace holds the thread to its share: after 3 ms of CPU at 25%, it has
    /// spent at least three times that asleep.
    #[test]
    fn a_paced_thread_rests_until_it_is_within_its_share() {
        PACER.with(|pacer| {
            *pacer.borrow_mut() = Some(Pacer {
                cpu: thread_cpu_time(),
                wall: Instant::now(),
            })
        });
        let started = Instant::now();
        let cpu = thread_cpu_time();
        let mut busy = Duration::ZERO;
        while busy < Duration::from_millis(3) {
            busy = thread_cpu_time() - cpu;
        }
        pace(25);
        let wall = started.elapsed();
        assert!(wall >= busy * 4 - busy / 10, "{busy:?} of CPU in {wall:?}");
    }
}
