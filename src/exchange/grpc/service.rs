//! containerd's `containerd.services.events.v1.Events` service over the exchange: the
//! checks each call makes before it reaches the hub, and their gRPC statuses.

use tonic::Status;

use super::routes::EventsRoutes;
use crate::exchange::limits::{self, Limit};
use crate::exchange::matching;
use crate::exchange::{AcceptError, Exchange, Incoming, Subscription};
use crate::filter::{FilterError, RegexBudget};
use crate::proto::containerd::services::events::v1::{ForwardRequest, PublishRequest};
use crate::publisher::Publisher;

/// The gRPC metadata key containerd clients put the namespace in.
pub(crate) const NAMESPACE_HEADER: &str = "containerd-namespace";

#[derive(Clone)]
pub(crate) struct EventsService {
    exchange: Exchange,
}

impl EventsService {
    pub(crate) fn new(exchange: Exchange) -> Self {
        Self { exchange }
    }

    pub(crate) fn into_server(self) -> EventsRoutes {
        EventsRoutes::new(self)
    }

    pub(super) fn exchange(&self) -> &Exchange {
        &self.exchange
    }
}

/// Subscribe's checks and registration, for the route that serves it ([`EventsRoutes`]).
/// Filters are compiled on the matching thread, within
/// `exchange.limits.max_regex_memory`.
pub(super) async fn subscribe(
    exchange: &Exchange,
    filters: Vec<String>,
) -> Result<Subscription, Status> {
    let filter = compile_filters(exchange, filters).await?;
    exchange.subscribe(filter).map_err(|e| e.status())
}

/// Subscribe's filter checks and compilation, with its limits and status codes; the
/// resumable Subscribe applies the same.
pub(crate) async fn compile_filters(
    exchange: &Exchange,
    filters: Vec<String>,
) -> Result<crate::filter::Filter, Status> {
    limits::check_filters(exchange.limits(), &filters)?;
    let budget = RegexBudget::total(exchange.limits().max_regex_memory.get());
    let filter = match matching::compile(filters, budget).await {
        Ok(Ok(filter)) => filter,
        // containerd answers UNKNOWN here (its Subscribe skips error mapping);
        // INVALID_ARGUMENT is what the error actually is. Same message text.
        Ok(Err(FilterError::Parse(e))) => {
            metrics::counter!("eventgate_subscribe_rejected_total", "reason" => "invalid_filter")
                .increment(1);
            return Err(Status::invalid_argument(format!(
                "subscription error: failed parsing subscription filters: {e}: invalid argument"
            )));
        }
        Ok(Err(FilterError::OverBudget { index, limit })) => {
            return Err(Limit::RegexMemory.reject(limits::regex_memory(index, limit)));
        }
        Err(_) => return Err(crate::exchange::SubscribeError::NoMatcher.status()),
    };
    Ok(filter)
}

fn status(error: AcceptError) -> Status {
    Status::new(error.code(), error.to_string())
}

/// Runs a Publish or Forward under `exchange.limits.request_timeout`. A call that runs
/// out of time may still have been taken (it can be sequenced before the wait for
/// the disk ends), as with any gRPC deadline: the client cannot tell, and retries.
async fn within_timeout<T>(
    exchange: &Exchange,
    call: &'static str,
    work: impl std::future::Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let timeout = exchange.limits().request_timeout;
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(Limit::RequestTimeout.reject(format!(
            "{call} did not finish within {} (exchange.limits.request_timeout); the gateway \
             is waiting for room in the spool or a forwarder's queue: deadline exceeded",
            humantime::format_duration(timeout)
        ))),
    }
}

/// Publish, as [`super::unary`] serves it: the namespace comes from the request's
/// headers.
pub(super) async fn publish(
    exchange: &Exchange,
    publisher: Option<Publisher>,
    headers: &http::HeaderMap,
    request: PublishRequest,
) -> Result<(), Status> {
    // The first value wins, as in containerd: Go clients prepend the newest namespace.
    let namespace = match headers.get(NAMESPACE_HEADER) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| status(AcceptError::UnreadableNamespace))?,
        ),
    };
    let PublishRequest { topic, event } = request;
    let accepted = within_timeout(exchange, "publish", async {
        let incoming = Incoming::publish(namespace, topic, event).publisher(publisher);
        let appended = exchange.append(incoming).await.map_err(status)?;
        appended.acknowledged().await.map_err(status)
    })
    .await?;
    tracing::trace!(seq = accepted.seq, topic = accepted.topic(), "published");
    Ok(())
}

/// Forward, as [`super::unary`] serves it.
pub(super) async fn forward(
    exchange: &Exchange,
    publisher: Option<Publisher>,
    request: ForwardRequest,
) -> Result<(), Status> {
    let accepted = within_timeout(exchange, "forward", async {
        let incoming = Incoming::forward(request.envelope).publisher(publisher);
        let appended = exchange.append(incoming).await.map_err(status)?;
        appended.acknowledged().await.map_err(status)
    })
    .await?;
    tracing::trace!(seq = accepted.seq, topic = accepted.topic(), "forwarded");
    Ok(())
}
