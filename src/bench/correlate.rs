//! The `correlate` stage's own cost: events through the stage in front of a
//! forwarder that does nothing, next to rendering the same events as JSON lines (the
//! per-event work of the cheapest real sink, the `file` forwarder) in the same run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::BenchError;
use super::load::{as_events, lifecycle};
use crate::config::CorrelateSettings;
use crate::event::Event;
use crate::forward::{Batch, ForwardError, Forwarder};

/// The events the stage sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Load {
    /// Containers going through their lifecycle once each: every object new, so the
    /// stage tracks `max_objects` keys and forgets the oldest all along.
    Lifecycle,
    /// One container crash-looping: a few keys, nearly every event held back.
    Storm,
}

impl Load {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Load::Lifecycle => "many containers, each once",
            Load::Storm => "one container crash-looping",
        }
    }
}

struct Nothing;

impl Forwarder for Nothing {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        std::hint::black_box(batch.len());
        Box::pin(async { Ok(()) })
    }
}

fn events(load: Load, count: usize) -> Vec<Arc<Event>> {
    let events = as_events(&lifecycle(count));
    match load {
        Load::Lifecycle => events,
        Load::Storm => events
            .iter()
            .map(|e| {
                let mut envelope = e.envelope.clone();
                // Every payload about one container: the same object throughout.
                if let Some(any) = &mut envelope.event {
                    let registry = crate::proto::Registry::global();
                    let type_url = any.type_url.clone();
                    let replaced = [r#"{"containerId":"crashloop"}"#, r#"{"id":"crashloop"}"#]
                        .iter()
                        .find_map(|json| registry.encode_json(&type_url, json).ok());
                    if let Some(replaced) = replaced {
                        *any = replaced;
                    }
                }
                Arc::new(Event::new(
                    e.seq,
                    e.identity.id,
                    e.identity.source.clone(),
                    envelope,
                ))
            })
            .collect(),
    }
}

/// `count` events in batches of 1000 through the stage with its defaults; then the
/// same events rendered as JSON lines.
pub(crate) async fn measure(
    dir: &std::path::Path,
    load: Load,
    count: usize,
) -> Result<(Duration, Duration), BenchError> {
    let events = events(load, count);
    let stage = crate::correlate::Correlated::wrap(
        "bench",
        Arc::new(Nothing),
        CorrelateSettings::default(),
        dir,
    );
    let start = Instant::now();
    for chunk in events.chunks(1000) {
        stage
            .send(&Batch::new(chunk.to_vec(), 0))
            .await
            .map_err(|e| BenchError::Failed {
                what: format!("the stage: {e}"),
            })?;
    }
    let through = start.elapsed();
    let fresh = self::events(load, count);
    let start = Instant::now();
    let mut out = Vec::with_capacity(1 << 20);
    for event in &fresh {
        out.clear();
        crate::render::write_event_json(&mut out, event);
        std::hint::black_box(&out);
    }
    Ok((through, start.elapsed()))
}
