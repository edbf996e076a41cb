//! The `correlate` stage: an optional wrapper around one forwarder that spares a
//! notification sink the repeats of an event storm (a crash-looping container, a
//! large image pull), the way Kubernetes' event recorder protects its sinks.
//!
//! Per object and topic, the first `aggregate_after` similar events of a window go
//! through; identical repeats (`duplicate_window`), later similar events, and events
//! beyond the object's token bucket (`burst`, one per `refill`) are held back and
//! counted, and one `eventgate.events.v1.Correlated` event (topic
//! `/eventgate/correlated`) per object and topic is sent in their place every
//! `flush`, with the counts, the first and last times and seqs, and the last
//! payload. Nothing is lost from the record: the spool and every forwarder without
//! `correlate` keep every event.
//!
//! Retries see the same state: a batch is correlated on a copy that is kept only
//! once the wrapped forwarder took the result, so a batch sent again (or split by
//! isolation) is decided afresh, the same way (decisions use event times). At each
//! checkpoint the state is saved as of the checkpoint's position
//! (`<data_dir>/correlate/<forwarder>/<next>.json`, the last two kept), and when the
//! pipeline sends again from a position the state saved as of that position is
//! loaded: after a crash, what was held back and not yet sent in an aggregate is
//! still counted, and events sent again are decided as before.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::event::Event;
use crate::forward::{Batch, ForwardError, Forwarder};
use crate::pipeline::meters::{GaugeKey, LazyCounter};

mod aggregate;
pub(crate) mod metric_table;
mod settings;
mod state;

pub use settings::CorrelateSettings;
use state::{Correlator, Held, Reason, Verdict, unix_nanos};

/// How often due aggregates are looked for when no batch comes.
const TICK: Duration = Duration::from_secs(1);
/// How long the stage's own send of due aggregates may take.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

struct Shared {
    name: Arc<str>,
    inner: Arc<dyn Forwarder>,
    settings: CorrelateSettings,
    dir: PathBuf,
    /// The committed state; held across every call into `inner`, so the stage's own
    /// sends and the pipeline's never interleave.
    state: Mutex<Correlator>,
    meters: Meters,
}

/// The stage's series, looked up once: `send` updates them for every batch.
struct Meters {
    /// Held back, by reason: duplicate, similar, rate limited.
    held: [LazyCounter; 3],
    aggregates: LazyCounter,
    held_events: GaugeKey,
    objects: GaugeKey,
}

impl Meters {
    fn new(name: &str) -> Self {
        let held = |reason: Reason| {
            LazyCounter::with_reason("eventgate_correlate_held_total", name, reason.label())
        };
        Self {
            held: [
                held(Reason::Duplicate),
                held(Reason::Similar),
                held(Reason::RateLimited),
            ],
            aggregates: LazyCounter::new("eventgate_correlate_aggregates_total", name),
            held_events: GaugeKey::new("eventgate_correlate_held_events", name),
            objects: GaugeKey::new("eventgate_correlate_objects", name),
        }
    }
}

pub(crate) struct Correlated {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Correlated {
    pub(crate) fn wrap(
        name: &str,
        inner: Arc<dyn Forwarder>,
        settings: CorrelateSettings,
        data_dir: &std::path::Path,
    ) -> Arc<dyn Forwarder> {
        let shared = Arc::new(Shared {
            name: Arc::from(name),
            inner,
            settings,
            dir: data_dir.join("correlate").join(name),
            state: Mutex::new(Correlator::default()),
            meters: Meters::new(name),
        });
        let stop = CancellationToken::new();
        tokio::spawn(flush_due(Arc::clone(&shared), stop.clone()));
        Arc::new(Correlated { shared, stop })
    }
}

impl Drop for Correlated {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Shared {
    /// Sends `events` (possibly none) followed by `aggregates` through the wrapped
    /// forwarder; on `Ok` the caller keeps its staged state.
    async fn deliver(
        &self,
        mut out: Vec<Arc<Event>>,
        aggregates: &[Held],
    ) -> Result<(), ForwardError> {
        out.extend(
            aggregates
                .iter()
                .map(|held| Arc::new(aggregate::event(&self.name, held))),
        );
        if out.is_empty() {
            return Ok(());
        }
        let bytes = out.iter().map(|e| e.encoded_envelope().len()).sum();
        self.inner.send(&Batch::new(out, bytes)).await
    }

    fn committed(&self, state: &Correlator, held: [u64; 3], aggregates: usize) {
        for (counter, count) in self.meters.held.iter().zip(held) {
            if count > 0 {
                counter.increment(count);
            }
        }
        if aggregates > 0 {
            self.meters.aggregates.increment(aggregates as u64);
        }
        self.meters.held_events.set(state.held_events() as f64);
        self.meters.objects.set(state.objects() as f64);
    }

    fn snapshot_path(&self, next: u64) -> PathBuf {
        self.dir.join(format!("{next}.json"))
    }

    /// Saves `state` as of `next`, keeping this snapshot and the one before.
    fn save(&self, state: &Correlator, next: u64) -> Result<(), ForwardError> {
        let failed = |what: &str, error: &dyn std::fmt::Display| {
            ForwardError::retryable(format!(
                "correlate: cannot {what} the state in {}: {error}",
                self.dir.display()
            ))
        };
        crate::fsmode::create_dir_all(&self.dir)
            .map_err(|e| failed("create the directory of", &e))?;
        let bytes = serde_json::to_vec(state).map_err(|e| failed("encode", &e))?;
        crate::spool::write_atomic(&self.snapshot_path(next), &bytes)
            .map_err(|e| failed("save", &e))?;
        let mut saved = self.saved();
        saved.sort_unstable();
        let keep: Vec<u64> = saved.iter().rev().take(2).copied().collect();
        for old in saved.into_iter().filter(|seq| !keep.contains(seq)) {
            let _ = std::fs::remove_file(self.snapshot_path(old));
        }
        Ok(())
    }

    /// The positions snapshots were saved as of.
    fn saved(&self) -> Vec<u64> {
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let name = entry.ok()?.file_name();
                name.to_str()?.strip_suffix(".json")?.parse::<u64>().ok()
            })
            .collect()
    }

    /// The state as of `position`: its snapshot, or a fresh state when there is
    /// none (said loudly when other snapshots exist: what they held back is lost).
    fn load(&self, position: u64) -> Correlator {
        let path = self.snapshot_path(position);
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(state) => return state,
                Err(error) => {
                    tracing::error!(forwarder = %self.name, path = %path.display(), %error, "the correlate state cannot be read; starting afresh")
                }
            },
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let saved = self.saved();
                if saved.is_empty() {
                    return Correlator::default();
                }
                tracing::warn!(forwarder = %self.name, position, ?saved, "no correlate state as of the position events are sent again from; starting afresh");
            }
            Err(error) => {
                tracing::error!(forwarder = %self.name, path = %path.display(), %error, "the correlate state cannot be read; starting afresh")
            }
        }
        metrics::counter!("eventgate_correlate_state_resets_total", "forwarder" => self.name.to_string())
            .increment(1);
        Correlator::default()
    }
}

impl Forwarder for Correlated {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            let shared = &self.shared;
            let settings = &shared.settings;
            let mut state = shared.state.lock().await;
            let mut staged = state.clone();
            let mut out = Vec::with_capacity(batch.len());
            let mut aggregates = Vec::new();
            let mut held = [0u64; 3];
            let mut latest = unix_nanos(SystemTime::now());
            for event in batch.events() {
                let (verdict, forgotten) = staged.offer(event, settings);
                aggregates.extend(forgotten);
                latest = latest.max(state::event_time(event));
                match verdict {
                    Verdict::Send => out.push(Arc::clone(event)),
                    Verdict::Hold(Reason::Duplicate) => held[0] += 1,
                    Verdict::Hold(Reason::Similar) => held[1] += 1,
                    Verdict::Hold(Reason::RateLimited) => held[2] += 1,
                }
            }
            aggregates.extend(staged.due(latest, settings));
            shared.deliver(out, &aggregates).await?;
            *state = staged;
            shared.committed(&state, held, aggregates.len());
            Ok(())
        })
    }

    fn checkpoint(&self, next: u64) -> BoxFuture<'_, Result<(), ForwardError>> {
        Box::pin(async move {
            // Held across both: an aggregate sent in between would be in the saved
            // state as sent but not in the sink's checkpoint.
            let state = self.shared.state.lock().await;
            self.shared.inner.checkpoint(next).await?;
            self.shared.save(&state, next)
        })
    }

    fn resume(&self, cursor: u64, end: u64) -> BoxFuture<'_, Result<u64, ForwardError>> {
        Box::pin(async move {
            let mut state = self.shared.state.lock().await;
            let position = self.shared.inner.resume(cursor, end).await?;
            *state = self.shared.load(position);
            self.shared.committed(&state, [0; 3], 0);
            Ok(position)
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<(), ForwardError>> {
        Box::pin(async move {
            self.stop.cancel();
            let mut state = self.shared.state.lock().await;
            let mut staged = state.clone();
            let aggregates = staged.drain();
            // Early delivery only: the state saved at the last checkpoint still holds
            // them, so a sink that loses this (no checkpoint follows) gets them again.
            match self.shared.deliver(Vec::new(), &aggregates).await {
                Ok(()) => {
                    *state = staged;
                    self.shared.committed(&state, [0; 3], aggregates.len());
                }
                Err(error) => {
                    tracing::warn!(forwarder = %self.shared.name, %error, "the held-back aggregates could not be sent at stop; they are sent after the next start")
                }
            }
            drop(state);
            self.shared.inner.close().await
        })
    }
}

/// Sends aggregates that are due while no batch comes (a storm that stopped).
async fn flush_due(shared: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = unix_nanos(SystemTime::now());
        let mut state = shared.state.lock().await;
        if !state.any_due(now, &shared.settings) {
            continue;
        }
        let mut staged = state.clone();
        let due = staged.due(now, &shared.settings);
        match tokio::time::timeout(FLUSH_TIMEOUT, shared.deliver(Vec::new(), &due)).await {
            Ok(Ok(())) => {
                *state = staged;
                shared.committed(&state, [0; 3], due.len());
            }
            Ok(Err(error)) => {
                tracing::warn!(forwarder = %shared.name, %error, aggregates = due.len(), "sending held-back aggregates failed; trying again");
            }
            Err(_) => {
                tracing::warn!(forwarder = %shared.name, timeout = ?FLUSH_TIMEOUT, "sending held-back aggregates timed out; trying again");
            }
        }
    }
}

#[cfg(test)]
mod tests;
