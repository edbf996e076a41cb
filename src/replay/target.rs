//! Where a replay sends events: one forwarder of a configuration file, built with the
//! gateway's own registry of kinds, or another exchange's socket.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::ReplayError;
use super::exchange::ExchangeTarget;
use crate::client::{self, Address};
use crate::config::{Config, ForwarderSpec};
use crate::filter::Filter;
use crate::forward::{Context, Forwarder, Kinds};
use crate::pipeline::settings::RetrySettings;
use crate::tls::ClientTls;

/// `--to-forwarder NAME --config FILE` or `--to-address SOCK`.
#[derive(Clone, Debug)]
pub(crate) enum TargetSpec {
    Forwarder {
        name: String,
        config: PathBuf,
    },
    Address {
        address: String,
        timeout: Duration,
        tls: ClientTls,
        /// Forward calls in flight at once (`--in-flight`).
        in_flight: usize,
    },
}

/// Events per Forward batch (and per state-file update) with `--to-address`.
pub(crate) const ADDRESS_BATCH: usize = 100;

/// The same with `--in-flight` above 1: a batch is also how far ahead the window
/// looks for events of other objects, and it drains at each batch's end.
pub(crate) const ADDRESS_BATCH_IN_FLIGHT: usize = 1000;

/// Retries towards another exchange: the pipeline's backoff for transient answers
/// (UNAVAILABLE while it restarts, RESOURCE_EXHAUSTED while its queues are full), for
/// at most a minute; then the replay stops, resumable.
fn address_retry() -> RetrySettings {
    RetrySettings {
        max: Duration::from_secs(5),
        elapsed: Duration::from_secs(60),
        ..RetrySettings::default()
    }
}

/// A target resolved far enough to name it (for the state file), not yet built.
pub(crate) struct Resolved {
    /// As people read it: `forwarder "kafka" of /etc/eventgate.toml`.
    pub label: String,
    /// Part of the state file's name.
    pub slug: String,
    plan: Plan,
}

enum Plan {
    Forwarder {
        spec: Box<ForwarderSpec>,
        data_dir: PathBuf,
    },
    Address {
        address: String,
        timeout: Duration,
        tls: ClientTls,
        in_flight: usize,
    },
}

/// A built target, ready to send.
pub(crate) struct Target {
    pub label: String,
    pub name: String,
    pub forwarder: Arc<dyn Forwarder>,
    pub retry: RetrySettings,
    /// The forwarder's own route filters; events they leave out are skipped.
    pub filter: Option<Filter>,
    /// The target refuses eventgate's own events ([`crate::markers::is_own`]), so
    /// they are skipped rather than sent: another exchange's Forward takes no marker
    /// or checkpoint from a client. A forwarder carries them, as the pipeline does.
    pub refuses_own: bool,
    pub batch_events: usize,
    pub batch_bytes: usize,
    /// Targets that take a batch event by event say how much of a failed one they
    /// took, so that part is not sent again.
    pub partial: Option<Arc<ExchangeTarget>>,
}

impl TargetSpec {
    /// Reads the configuration (or looks at the socket) without connecting anywhere.
    pub(crate) fn resolve(&self) -> Result<Resolved, ReplayError> {
        match self {
            TargetSpec::Forwarder { name, config } => {
                let loaded = Config::load(config)?;
                let Some(spec) = loaded.forwarders.iter().find(|f| &f.name == name) else {
                    let known: Vec<String> = loaded
                        .forwarders
                        .iter()
                        .map(|f| format!("{:?}", f.name))
                        .collect();
                    return Err(ReplayError::UnknownForwarder {
                        name: name.clone(),
                        config: config.clone(),
                        known: match known.is_empty() {
                            true => "none".to_owned(),
                            false => known.join(", "),
                        },
                    });
                };
                let canonical = std::fs::canonicalize(config).unwrap_or_else(|_| config.clone());
                Ok(Resolved {
                    label: format!("forwarder {name:?} of {}", canonical.display()),
                    slug: format!("forwarder-{name}"),
                    plan: Plan::Forwarder {
                        spec: Box::new(spec.clone()),
                        data_dir: loaded.data_dir.clone(),
                    },
                })
            }
            TargetSpec::Address {
                address,
                timeout,
                tls,
                in_flight,
            } => {
                let label = match Address::parse(address)? {
                    Address::Unix(path) => {
                        let canonical = std::fs::canonicalize(&path)
                            .map_err(|source| ReplayError::NoSocket { path, source })?;
                        canonical.display().to_string()
                    }
                    Address::Tcp(uri) => uri,
                };
                Ok(Resolved {
                    label: format!("exchange at {label}"),
                    slug: "address".to_owned(),
                    plan: Plan::Address {
                        address: address.clone(),
                        timeout: *timeout,
                        tls: tls.clone(),
                        in_flight: *in_flight,
                    },
                })
            }
        }
    }
}

impl Resolved {
    /// Builds the forwarder (opening files, connecting to brokers) or connects to the
    /// exchange. `batch` overrides the configured batch size.
    pub(crate) async fn build(
        &self,
        kinds: &Kinds,
        batch: Option<usize>,
    ) -> Result<Target, ReplayError> {
        match &self.plan {
            Plan::Forwarder { spec, data_dir } => {
                let build_error = |source| ReplayError::Build {
                    name: spec.name.clone(),
                    source,
                };
                let kind = kinds.get(&spec.kind).map_err(build_error)?;
                kind.check(&spec.options).map_err(build_error)?;
                let context = Context {
                    name: spec.name.clone(),
                    data_dir: data_dir.clone(),
                };
                let forwarder = kind
                    .build(&context, &spec.options)
                    .await
                    .map_err(build_error)?;
                let filter = match spec.filters.is_empty() {
                    true => None,
                    false => Some(spec.filter().map_err(|source| ReplayError::Filter {
                        name: spec.name.clone(),
                        source,
                    })?),
                };
                let configured = match spec.batch.events {
                    0 => kind.default_batch_events(),
                    n => n,
                };
                Ok(Target {
                    label: self.label.clone(),
                    name: spec.name.clone(),
                    forwarder,
                    retry: spec.retry.clone(),
                    filter,
                    refuses_own: false,
                    batch_events: batch.unwrap_or(configured),
                    batch_bytes: spec.batch.bytes.get(),
                    partial: None,
                })
            }
            Plan::Address {
                address,
                timeout,
                tls,
                in_flight,
            } => {
                let events_client = client::connect_tls(address, *timeout, tls).await?;
                let exchange = Arc::new(ExchangeTarget::new(
                    address.clone(),
                    events_client,
                    *in_flight,
                ));
                Ok(Target {
                    label: self.label.clone(),
                    name: "replay".to_owned(),
                    forwarder: exchange.clone(),
                    retry: address_retry(),
                    filter: None,
                    refuses_own: true,
                    batch_events: batch.unwrap_or(match *in_flight {
                        1 => ADDRESS_BATCH,
                        _ => ADDRESS_BATCH_IN_FLIGHT,
                    }),
                    batch_bytes: usize::MAX,
                    partial: Some(exchange),
                })
            }
        }
    }
}
