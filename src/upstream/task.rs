//! One upstream's life: connect, subscribe, feed the exchange, and when the stream
//! breaks, say so in the audit trail and reconnect with backoff (cut short when a
//! unix socket is created again), until shutdown.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Response, Status, Streaming};

use super::backoff::Backoff;
use super::enrich::{Enricher, Lookup};
use super::inflight::Then;
use super::reconciler::{Reconciler, Trigger};
use super::settings::UpstreamSpec;
use super::status::{UpstreamState, UpstreamStatus};
use super::stream::Outgoing;
use super::transport::NotifySent;
use super::watch::SocketWake;
use crate::client;
use crate::errors;
use crate::event::{Origin, Source};
use crate::exchange::Exchange;
use crate::markers::{self, Connected, Disconnected};
use crate::proto::containerd::services::events::v1::SubscribeRequest;
use crate::proto::containerd::services::events::v1::events_client::EventsClient;
use crate::proto::containerd::types::Envelope;

type SubscribeCall =
    Pin<Box<dyn Future<Output = Result<Response<Streaming<Envelope>>, Status>> + Send>>;

/// A subscription whose request is on the wire; the response may not have started.
pub(super) enum Opened {
    Waiting(SubscribeCall),
    Streaming(Box<Streaming<Envelope>>),
}

/// How a subscription ended.
pub(super) enum Ended {
    Broke(String),
    /// Shutdown was requested.
    Cancelled,
    /// The exchange is closed; nothing more can be accepted.
    ExchangeClosed,
}

pub(super) struct Task {
    pub spec: UpstreamSpec,
    pub name: Arc<str>,
    pub exchange: Exchange,
    pub status: watch::Sender<UpstreamStatus>,
    pub cancel: CancellationToken,
    /// When the gateway started: the first connection closes the gap that began then.
    pub started: SystemTime,
    /// Where the state snapshot lives, and the spool that holds what it has not saved.
    pub data_dir: std::path::PathBuf,
    pub spool: Option<crate::spool::Spool>,
}

impl Task {
    pub(super) async fn run(self) {
        let mut reconciler = match Reconciler::open(
            &self.name,
            &self.spec,
            &self.data_dir,
            self.spool.clone(),
            Some(self.status.clone()),
        )
        .await
        {
            Ok(reconciler) => Some(reconciler),
            Err(error) => {
                tracing::error!(upstream = %self.name, error = %errors::chain(&error), "cannot open the state snapshot; this upstream is not reconciled");
                None
            }
        };
        let mut enricher = Enricher::new(
            Arc::clone(&self.name),
            self.spec.enrich,
            self.spec.docker.clone(),
        );
        let mut backoff = Backoff::new(&self.spec.reconnect);
        let mut wake = SocketWake::new(&self.spec.address, &self.name);
        let mut gap_started = self.started;
        let mut attempts = 0u64;
        let mut reported_failure = false;
        loop {
            attempts += 1;
            let opened = tokio::select! {
                () = self.cancel.cancelled() => break,
                opened = self.open() => opened,
            };
            let opened = match opened {
                Ok((opened, channel)) => {
                    enricher.connected(channel);
                    opened
                }
                Err(error) => {
                    metrics::counter!("eventgate_upstream_connect_failures_total", "upstream" => self.label())
                        .increment(1);
                    // Once per outage at warn; every attempt at debug.
                    if reported_failure {
                        tracing::debug!(upstream = %self.name, attempts, %error, "upstream still unreachable");
                    } else {
                        tracing::warn!(
                            upstream = %self.name,
                            address = %self.spec.address,
                            %error,
                            "upstream unreachable; retrying with backoff"
                        );
                        reported_failure = true;
                    }
                    self.set_state(UpstreamState::Connecting {
                        since: gap_started,
                        attempts,
                        last_error: Some(error),
                    });
                    if !self.pause(&mut backoff, &mut wake).await {
                        break;
                    }
                    continue;
                }
            };

            let connected_at = SystemTime::now();
            let marker = markers::connected(&Connected {
                upstream: &self.name,
                address: &self.spec.address,
                filters: &self.spec.filters,
                connected_at,
                gap_started_at: gap_started,
                attempts,
            });
            if !self.accept_marker(marker).await {
                break;
            }
            tracing::info!(
                upstream = %self.name,
                address = %self.spec.address,
                attempts,
                gap = %humantime::format_duration(whole_ms(connected_at.duration_since(gap_started).unwrap_or_default())),
                "upstream subscribed"
            );
            metrics::gauge!("eventgate_upstream_connected", "upstream" => self.label()).set(1.0);
            metrics::counter!("eventgate_upstream_connects_total", "upstream" => self.label())
                .increment(1);
            self.set_state(UpstreamState::Connected {
                since: connected_at,
            });
            attempts = 0;
            reported_failure = false;
            wake.subscribed();

            if let Some(reconciler) = &mut reconciler {
                reconciler.begin(Trigger::Connected, gap_started);
            }
            let mut received = 0u64;
            let ended = self
                .stream(opened, &mut received, reconciler.as_mut(), &mut enricher)
                .await;
            if let Some(reconciler) = &mut reconciler {
                reconciler.pause();
            }
            let disconnected_at = SystemTime::now();
            metrics::gauge!("eventgate_upstream_connected", "upstream" => self.label()).set(0.0);
            let reason = match &ended {
                Ended::Broke(reason) => reason.as_str(),
                Ended::Cancelled | Ended::ExchangeClosed => "eventgate is stopping",
            };
            let marker = markers::disconnected(&Disconnected {
                upstream: &self.name,
                address: &self.spec.address,
                reason,
                connected_at,
                disconnected_at,
                events_received: received,
            });
            let recorded =
                !matches!(ended, Ended::ExchangeClosed) && self.accept_marker(marker).await;
            if !matches!(ended, Ended::Broke(_)) {
                if !recorded {
                    tracing::warn!(upstream = %self.name, "the exchange closed before the disconnect could be recorded");
                }
                break;
            }
            tracing::warn!(
                upstream = %self.name,
                address = %self.spec.address,
                reason,
                events = received,
                "upstream subscription broke; reconnecting"
            );
            metrics::counter!("eventgate_upstream_disconnects_total", "upstream" => self.label())
                .increment(1);
            gap_started = disconnected_at;
            self.set_state(UpstreamState::Connecting {
                since: disconnected_at,
                attempts: 0,
                last_error: Some(reason.to_owned()),
            });
            let lasted = disconnected_at
                .duration_since(connected_at)
                .unwrap_or_default();
            if lasted >= self.spec.reconnect.stable {
                backoff.reset();
            }
            if !recorded || !self.pause(&mut backoff, &mut wake).await {
                break;
            }
        }
        if let Some(reconciler) = &mut reconciler {
            reconciler.close();
        }
        self.set_state(UpstreamState::Stopped);
        metrics::gauge!("eventgate_upstream_connected", "upstream" => self.label()).set(0.0);
    }

    /// Connects and sends Subscribe. Done as soon as the request is on the wire or the
    /// upstream answers, whichever comes first (see `transport`).
    /// The connection comes back too, for the enricher's calls.
    async fn open(&self) -> Result<(Opened, Channel), String> {
        let timeout = self.spec.connect_timeout;
        let channel = client::connect_channel(&self.spec.address, timeout)
            .await
            .map_err(|e| errors::chain(&e))?;
        let (service, sent) = NotifySent::new(channel.clone());
        let mut client = EventsClient::new(service);
        let request = SubscribeRequest {
            filters: self.spec.filters.clone(),
        };
        let mut call: SubscribeCall = Box::pin(async move { client.subscribe(request).await });
        let outcome = tokio::time::timeout(timeout, async {
            tokio::select! {
                biased;
                response = &mut call => Some(response),
                // A dropped sender means the body was never sent; the call says why.
                sent = sent => if sent.is_ok() { None } else { Some(call.as_mut().await) },
            }
        })
        .await
        .map_err(|_| {
            format!("the upstream did not take the Subscribe request within {timeout:?}")
        })?;
        match outcome {
            None => Ok((Opened::Waiting(call), channel)),
            Some(Ok(response)) => Ok((Opened::Streaming(Box::new(response.into_inner())), channel)),
            Some(Err(status)) => Err(describe(&status)),
        }
    }

    /// Accepts a gap marker and waits until it is durable, waiting out full `block`
    /// queues, a full spool and a disk below `spool.min_free` as events do. Only
    /// between subscriptions, when nothing of the upstream is in flight.
    async fn accept(&self, source: Source, envelope: Envelope) -> Result<(), Ended> {
        let item = Outgoing {
            source,
            envelope,
            origin: Origin::Live,
            workload: Lookup::Ready(None),
            then: Then::Record,
        };
        match self.append(item).await? {
            Some((appended, _)) => appended
                .durable
                .await
                .map_err(|error| self.spool_failed(error)),
            None => Ok(()),
        }
    }

    /// Records a gap marker; false if the exchange is closed (or we are cancelled
    /// while it waits for queue room), which ends the task.
    async fn accept_marker(&self, marker: Envelope) -> bool {
        match self.accept(Source::Internal, marker).await {
            Ok(_) => true,
            Err(Ended::Cancelled) => {
                tracing::warn!(upstream = %self.name, "stopped before a gap marker could be queued");
                false
            }
            Err(_) => false,
        }
    }

    /// Waits out the next backoff delay, or less if the upstream's socket is created
    /// meanwhile; false if shutdown came first. After such a wake-up the next attempts
    /// come quickly for a short while (the daemon may answer a moment after its socket
    /// appears), without advancing the backoff; then the backoff resumes where it was.
    async fn pause(&self, backoff: &mut Backoff, wake: &mut SocketWake) -> bool {
        if let Some(delay) = wake.burst_delay(&self.name) {
            return tokio::select! {
                () = self.cancel.cancelled() => false,
                () = tokio::time::sleep(delay) => true,
            };
        }
        let delay = backoff.next_delay(&mut rand::rng());
        tokio::select! {
            () = self.cancel.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
            () = wake.socket_created(&self.name) => {
                metrics::counter!("eventgate_upstream_socket_wakeups_total", "upstream" => self.label())
                    .increment(1);
                true
            }
        }
    }

    fn set_state(&self, state: UpstreamState) {
        self.status.send_modify(|status| status.state = state);
    }

    pub(super) fn label(&self) -> String {
        self.name.to_string()
    }
}

fn whole_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// "Unavailable: connection reset" rather than tonic's Debug dump.
pub(super) fn describe(status: &Status) -> String {
    let head = format!("{:?}: {}", status.code(), status.message());
    errors::with_sources(head, std::error::Error::source(status))
}
