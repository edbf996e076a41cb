//! Configuration reload (SIGHUP, `POST /reload`, `eventgate reload`): the new
//! configuration is read and checked whole, and every forwarder it adds is built,
//! before anything running is touched; then forwarders are changed by name.
//!
//! - unchanged (an identical `[[forwarder]]` table): left running as they are;
//! - changed: held (offered nothing more, their queue delivered), rebuilt from the
//!   new table and resumed at their own spool cursor; if the new table cannot be
//!   built, every forwarder changed so far goes back to its running table and the
//!   reload is rejected;
//! - added: built up front, offered every event from the reload on;
//! - removed: offered nothing more, their queue delivered, their cursor removed.
//!
//! Other keys (sockets, listeners, the spool, upstreams, ...) need a restart: they
//! are named in the answer and the log, and otherwise left as they run.

pub(crate) mod diff;
pub(crate) mod metric_table;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::config::{Config, ConfigError, ForwarderSpec};
use crate::errors::chain;
use crate::forward::Kinds;
use crate::pipeline::{DeadLetters, Parts, Pipeline, PipelineError};

/// Reads the configuration again, as the gateway was started: defaults, the file,
/// then the command-line flags, validated.
pub(crate) type ConfigSource = Arc<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// What a reload did, for the log, the admin endpoint and `eventgate reload`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub applied: bool,
    /// One line saying what happened (or why not), then the keys that need a restart.
    pub message: String,
}

/// Applies new configurations to a running pipeline, one reload at a time.
pub(crate) struct Reloader {
    pipeline: Arc<Pipeline>,
    kinds: Kinds,
    dead_letters: Option<DeadLetters>,
    /// The configuration running now; `None` once the gateway is stopping.
    running: tokio::sync::Mutex<Option<Config>>,
    source: Mutex<Option<(String, ConfigSource)>>,
}

impl Reloader {
    pub(crate) fn new(
        pipeline: Arc<Pipeline>,
        kinds: Kinds,
        dead_letters: Option<DeadLetters>,
        running: Config,
    ) -> Self {
        Self {
            pipeline,
            kinds,
            dead_letters,
            running: tokio::sync::Mutex::new(Some(running)),
            source: Mutex::new(None),
        }
    }

    /// Where [`Reloader::reload`] reads the configuration; `origin` names it in
    /// messages (the file's path).
    pub(crate) fn set_source(&self, origin: impl Into<String>, source: ConfigSource) {
        *self.source.lock().unwrap_or_else(PoisonError::into_inner) = Some((origin.into(), source));
    }

    /// Reads the configuration from its source and applies it.
    pub(crate) async fn reload(&self) -> Outcome {
        let source = self
            .source
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some((origin, source)) = source else {
            return self.rejected(
                "the configuration",
                "this gateway was started without a configuration source to read again".into(),
            );
        };
        // Reading the file is quick; no need to leave the runtime for it.
        match source() {
            Ok(config) => self.apply(&origin, config).await,
            Err(error) => self.rejected(&origin, chain(&error)),
        }
    }

    /// Applies `new` (from `origin`) to the running gateway, or rejects it whole.
    pub(crate) async fn apply(&self, origin: &str, new: Config) -> Outcome {
        let mut guard = self.running.lock().await;
        let Some(running) = guard.as_mut() else {
            return self.rejected(origin, "the gateway is shutting down".into());
        };
        if let Err(error) = new.validate().and_then(|()| new.check_kinds(&self.kinds)) {
            return self.rejected(origin, chain(&error));
        }
        let restart = diff::restart_keys(running, &new);
        let plan = diff::forwarders(&running.forwarders, &new.forwarders);
        let drain = running.pipeline.drain_timeout;
        let unchanged: Vec<String> = plan.unchanged.iter().map(|s| s.name.clone()).collect();

        let mut built: Vec<Parts> = Vec::new();
        for spec in &plan.added {
            match self.build(running, spec).await {
                Ok(part) => built.push(part),
                Err(error) => {
                    close_unused(built).await;
                    return self.rejected(origin, chain(&error));
                }
            }
        }
        let mut done: Vec<String> = Vec::new();
        let mut swapped: Vec<(&ForwarderSpec, &ForwarderSpec)> = Vec::new();
        for &(old, changed) in &plan.changed {
            match self.swap(running, old, changed, drain).await {
                Ok(resumed_at) => {
                    swapped.push((old, changed));
                    done.push(format!(
                        "forwarder {:?} replaced (resumed at seq {resumed_at})",
                        old.name
                    ));
                }
                Err(error) => {
                    for &(old, changed) in swapped.iter().rev() {
                        if let Err(error) = self.swap(running, changed, old, drain).await {
                            tracing::error!(forwarder = %old.name, error = %chain(&error), "cannot go back to the running forwarder settings");
                        }
                    }
                    close_unused(built).await;
                    return self.rejected(origin, chain(&error));
                }
            }
        }
        for part in built {
            let name = part.name.clone();
            match self.pipeline.add(part) {
                Ok(()) => done.push(format!("forwarder {name:?} added")),
                Err(error) => {
                    tracing::error!(forwarder = %name, %error, "cannot add the forwarder")
                }
            }
        }
        for spec in &plan.removed {
            match self.pipeline.remove(&spec.name, drain).await {
                Ok(report) => {
                    let left = report.as_ref().map_or(0, |r| r.undelivered);
                    done.push(format!(
                        "forwarder {:?} removed ({left} event(s) it had not delivered dropped with its cursor)",
                        spec.name
                    ));
                }
                Err(error) => {
                    tracing::error!(forwarder = %spec.name, %error, "cannot remove the forwarder")
                }
            }
        }
        running.forwarders = new.forwarders;

        let mut message = format!("reload of {origin} applied: ");
        if done.is_empty() {
            message.push_str("no forwarder changed");
        } else {
            message.push_str(&done.join("; "));
        }
        if !unchanged.is_empty() {
            let _ = write!(message, "; unchanged: {}", unchanged.join(", "));
        }
        metrics::counter!("eventgate_config_reloads_total", "result" => "ok").increment(1);
        tracing::info!(file = origin, "{message}");
        if !restart.is_empty() {
            let keys = restart.join(", ");
            tracing::warn!(
                file = origin,
                keys,
                "needs a restart: {keys} (they keep their running values until then)"
            );
            let _ = write!(
                message,
                "\nneeds a restart: {keys} (they keep their running values until then)"
            );
        }
        Outcome {
            applied: true,
            message,
        }
    }

    /// Stops reloads: the gateway is shutting down. Waits for a reload in progress.
    pub(crate) async fn close(&self) {
        self.running.lock().await.take();
    }

    async fn build(&self, running: &Config, spec: &ForwarderSpec) -> Result<Parts, PipelineError> {
        Pipeline::build(
            spec,
            &self.kinds,
            &running.data_dir,
            self.dead_letters.clone(),
        )
        .await
    }

    /// Replaces the running forwarder `old` by one built from `new`. When `new`
    /// cannot be built, `old` is built again and resumed, and the error returned.
    async fn swap(
        &self,
        running: &Config,
        old: &ForwarderSpec,
        new: &ForwarderSpec,
        drain: Duration,
    ) -> Result<u64, PipelineError> {
        let held = self
            .pipeline
            .hold(&old.name, drain)
            .await
            .map_err(|source| PipelineError::Swap {
                name: old.name.clone(),
                source,
            })?;
        match self.build(running, new).await {
            Ok(part) => Ok(self.pipeline.resume(held, part)),
            Err(error) => {
                match self.build(running, old).await {
                    Ok(part) => {
                        self.pipeline.resume(held, part);
                    }
                    Err(again) => tracing::error!(
                        forwarder = %old.name,
                        error = %chain(&again),
                        "the forwarder cannot be started again with its running settings either; it stays stopped and its events wait in the spool"
                    ),
                }
                Err(error)
            }
        }
    }

    fn rejected(&self, origin: &str, why: String) -> Outcome {
        metrics::counter!("eventgate_config_reloads_total", "result" => "rejected").increment(1);
        tracing::error!(
            file = origin,
            "reload rejected, the running configuration is kept: {why}"
        );
        Outcome {
            applied: false,
            message: format!(
                "reload of {origin} rejected, the running configuration is kept: {why}"
            ),
        }
    }
}

/// Forwarders built for a reload that was then rejected: released again.
async fn close_unused(built: Vec<Parts>) {
    for part in built {
        if let Err(error) = part.forwarder.close().await {
            tracing::warn!(forwarder = %part.name, %error, "closing an unused forwarder failed");
        }
    }
}
