//! `[[source]]`: event streams that other gateways produced, taken into this
//! gateway's exchange as they were (a central gateway consuming a fleet's Kafka
//! topic). Each source is a task that appends what it reads and acknowledges it to
//! its origin only once it is durable here.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::exchange::Exchange;
use crate::forward::Options;
use crate::pipeline::ForwarderSpec;

pub(crate) mod kafka;
pub(crate) mod metric_table;
pub(crate) mod starvation;
mod stats;

pub(crate) use stats::{Assignment, SourceFailing, SourceHealth, SourceStats, Starved};

/// A Kafka record as the `kafka` forwarder encodes it, read back as a source reads
/// it (tests check that what one writes the other takes in).
#[cfg(test)]
pub(crate) fn decode_record(
    record: &crate::forward::kafka::Record,
) -> Result<crate::event::Event, String> {
    kafka::decode_record(record)
}

/// One `[[source]]` table: `name`, `kind` and the kind's options.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSpec {
    /// Labels metrics and logs and names the source in each event's `source`
    /// (`kafka:NAME`); the kind by default.
    pub name: String,
    pub kind: String,
    pub options: Options,
}

#[derive(Debug, Error)]
pub enum SourceError {
    #[error("source {name:?}: {problem}")]
    Invalid { name: String, problem: String },
}

impl SourceSpec {
    /// Every check `serve` makes before it starts the source, the librdkafka
    /// configuration included, and that the forwarder named by `offsets` is a
    /// `postgres` one of `forwarders`; `check-config` runs the same. `node` is the
    /// gateway's node name (the default `instance_id` is made of it).
    pub(crate) fn validate(&self, node: &str, forwarders: &[ForwarderSpec]) -> Result<(), String> {
        crate::pipeline::check_name(&self.name)?;
        match self.kind.as_str() {
            "kafka" => {
                let options = kafka::SourceOptions::parse(&self.options)
                    .and_then(|options| options.probe(&self.name, node).map(|()| options))
                    .map_err(|e| e.to_string())?;
                if let Some(store) = &options.offsets {
                    offsets_store(store, forwarders)?;
                }
                Ok(())
            }
            other => Err(format!(
                "`kind` {other:?} is not a source kind (known: \"kafka\")"
            )),
        }
    }
}

/// Where the forwarder named by a source's `offsets` connects.
fn offsets_store(
    store: &str,
    forwarders: &[ForwarderSpec],
) -> Result<crate::postgres::Target, String> {
    let Some(forwarder) = forwarders.iter().find(|f| f.name == store) else {
        let postgres: Vec<&str> = forwarders
            .iter()
            .filter(|f| f.kind == "postgres")
            .map(|f| f.name.as_str())
            .collect();
        return Err(format!(
            "`offsets` names forwarder {store:?}, which is not configured (postgres forwarders: {})",
            match postgres.is_empty() {
                true => "none".to_owned(),
                false => postgres.join(", "),
            }
        ));
    };
    if forwarder.kind != "postgres" {
        return Err(format!(
            "`offsets` names forwarder {store:?} of kind {:?}: only a `postgres` forwarder keeps offsets with its rows",
            forwarder.kind
        ));
    }
    crate::forward::postgres::PostgresOptions::parse(&forwarder.options)
        .and_then(|options| {
            options
                .connect
                .target()
                .map_err(|e| crate::forward::BuildError::Options(e.to_string()))
        })
        .map_err(|e| format!("`offsets` names forwarder {store:?}, whose options are invalid: {e}"))
}

impl<'de> Deserialize<'de> for SourceSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut options = Options::deserialize(d)?;
        let text = |options: &mut Options, key: &str| match options.remove(key) {
            None => Ok(None),
            Some(toml::Value::String(text)) => Ok(Some(text)),
            Some(_) => Err(D::Error::custom(format!("`{key}` must be a string"))),
        };
        let kind = text(&mut options, "kind")?
            .ok_or_else(|| D::Error::custom("a [[source]] needs a `kind` (\"kafka\")"))?;
        let name = text(&mut options, "name")?.unwrap_or_else(|| kind.clone());
        Ok(Self {
            name,
            kind,
            options,
        })
    }
}

impl Serialize for SourceSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut table = self.options.clone();
        table.insert("name".into(), self.name.clone().into());
        table.insert("kind".into(), self.kind.clone().into());
        table.serialize(s)
    }
}

/// Runs a source's consumer, and starts a new one if it ever ends (a panic, a
/// failed write) before the gateway stops: the new consumer reads on from the
/// group's last commit, and stores drop what it reads twice.
async fn supervise(source: Supervised, mut consumer: kafka::Consumer, cancel: CancellationToken) {
    let Supervised {
        name,
        options,
        node,
        exchange,
        stats,
        claims,
    } = source;
    loop {
        let running = tokio::spawn(consumer.run());
        // Aborted with the supervisor (a stop that timed out), not left running.
        let _abort = AbortOnDrop(running.abort_handle());
        let ended = running.await;
        // The next consumer claims its partitions anew.
        if let Some(claims) = &claims {
            claims.clear();
        }
        if cancel.is_cancelled() {
            return;
        }
        let how = match ended {
            Ok(()) => "stopped".to_owned(),
            Err(error) => format!("failed: {error}"),
        };
        metrics::counter!("eventgate_source_restarts_total", "source" => name.to_string())
            .increment(1);
        stats.restarted(format!("the consumer {how}; started again"));
        tracing::error!(source = %name, "the source {how} while the gateway runs; starting it again in 1s (it reads on from the group's last commit)");
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(RESTART_PAUSE) => {}
            }
            let started = kafka::SourceOptions::parse(&options).and_then(|options| {
                kafka::Consumer::start(
                    Arc::clone(&name),
                    &options,
                    &node,
                    exchange.clone(),
                    cancel.child_token(),
                    Arc::clone(&stats),
                    claims.clone(),
                )
            });
            match started {
                Ok(started) => {
                    stats.running_again();
                    consumer = started;
                    break;
                }
                Err(error) => {
                    stats.consumer_failed(format!("the consumer cannot start again: {error}"));
                    tracing::error!(source = %name, %error, "the source cannot start again; trying again in 1s")
                }
            }
        }
    }
}

/// What it takes to start a source's consumer again.
struct Supervised {
    name: Arc<str>,
    /// Parsed again at each start.
    options: Options,
    node: Arc<str>,
    exchange: Exchange,
    stats: Arc<SourceStats>,
    claims: Option<Arc<kafka::Claims>>,
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Between a source's unexpected end and its new start.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// The running sources.
pub(crate) struct Sources {
    cancel: CancellationToken,
    tasks: Vec<(String, JoinHandle<()>)>,
    views: Vec<Arc<SourceStats>>,
}

impl Sources {
    /// Starts every source, each with a watch on whether it is starved; options
    /// were validated with the configuration. `node` is the gateway's node name.
    pub(crate) fn start(
        specs: &[SourceSpec],
        forwarders: &[ForwarderSpec],
        node: &str,
        exchange: &Exchange,
    ) -> Result<Self, SourceError> {
        let cancel = CancellationToken::new();
        let mut tasks = Vec::new();
        let mut views = Vec::new();
        let node: Arc<str> = Arc::from(node);
        for spec in specs {
            let invalid = |problem: String| SourceError::Invalid {
                name: spec.name.clone(),
                problem,
            };
            let name: Arc<str> = Arc::from(spec.name.as_str());
            let options =
                kafka::SourceOptions::parse(&spec.options).map_err(|e| invalid(e.to_string()))?;
            let instance = options
                .group_instance_id(&name, &node)
                .map_err(|e| invalid(e.to_string()))?;
            let stats = Arc::new(SourceStats::new(
                &spec.name,
                &options.topics,
                &options.group,
                instance,
            ));
            let claims = match &options.offsets {
                Some(store) => {
                    let target = offsets_store(store, forwarders).map_err(&invalid)?;
                    tracing::info!(source = %name, store = %store, group = %options.group, "kafka source keeps its offsets in the postgres store");
                    Some(Arc::new(kafka::Claims::new(
                        Arc::from(store.as_str()),
                        Arc::from(options.group.trim()),
                        format!("{node}/{name}"),
                        target,
                    )))
                }
                None => None,
            };
            let backlog =
                kafka::KafkaBacklog::new(&name, &options).map_err(|e| invalid(e.to_string()))?;
            let consumer = kafka::Consumer::start(
                Arc::clone(&name),
                &options,
                &node,
                exchange.clone(),
                cancel.child_token(),
                Arc::clone(&stats),
                claims.clone(),
            )
            .map_err(|e| invalid(e.to_string()))?;
            views.push(Arc::clone(&stats));
            let watch = starvation::watch(
                Arc::clone(&stats),
                Arc::new(backlog),
                options.session_timeout(),
                options.start == kafka::options::Start::Latest,
                cancel.child_token(),
            );
            tasks.push((
                format!("{} (starvation watch)", spec.name),
                tokio::spawn(watch),
            ));
            let supervised = Supervised {
                name,
                options: spec.options.clone(),
                node: Arc::clone(&node),
                exchange: exchange.clone(),
                stats,
                claims,
            };
            let task = supervise(supervised, consumer, cancel.clone());
            tasks.push((spec.name.clone(), tokio::spawn(task)));
        }
        Ok(Self {
            cancel,
            tasks,
            views,
        })
    }

    /// What each source has done, for `/status`.
    pub(crate) fn views(&self) -> Vec<Arc<SourceStats>> {
        self.views.clone()
    }

    /// Stops reading, waits (up to `timeout`) for what was read to be durable and
    /// commits its offsets, so the next start reads on from there.
    pub(crate) async fn stop(&mut self, timeout: Duration) {
        self.cancel.cancel();
        for stats in &self.views {
            stats.stopped();
        }
        for (name, task) in self.tasks.drain(..) {
            let abort = task.abort_handle();
            match tokio::time::timeout(timeout, task).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::error!(source = %name, %error, "the source's task failed")
                }
                Err(_) => {
                    abort.abort();
                    tracing::warn!(
                        source = %name,
                        ?timeout,
                        "the source did not stop in time; what it read since its last commit is read again at the next start"
                    )
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
