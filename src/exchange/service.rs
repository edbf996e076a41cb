//! containerd's `containerd.services.events.v1.Events` gRPC service over the exchange.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::limits::{self, Limit};
use super::matching;
use super::routes::EventsRoutes;
use super::{AcceptError, Exchange, Incoming, Subscription};
use crate::filter::{FilterError, RegexBudget};
use crate::proto::containerd::services::events::v1::events_server::Events;
use crate::proto::containerd::services::events::v1::{
    ForwardRequest, PublishRequest, SubscribeRequest,
};
use crate::proto::containerd::types::Envelope;
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

/// Subscribe's checks and registration, shared by the generated method and the route
/// that actually serves it ([`EventsRoutes`]). Filters are compiled on the matching
/// thread, within `exchange.limits.max_regex_memory`.
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
        Err(_) => return Err(super::SubscribeError::NoMatcher.status()),
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

/// Publish, whichever way it was served: the namespace comes from the request's
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

/// Forward, whichever way it was served.
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

type EnvelopeStream = Pin<Box<dyn Stream<Item = Result<Envelope, Status>> + Send>>;

#[tonic::async_trait]
impl Events for EventsService {
    async fn publish(&self, request: Request<PublishRequest>) -> Result<Response<()>, Status> {
        let (metadata, extensions, request) = request.into_parts();
        let publisher = Publisher::of_request(&extensions);
        publish(&self.exchange, publisher, metadata.as_ref(), request).await?;
        Ok(Response::new(()))
    }

    async fn forward(&self, request: Request<ForwardRequest>) -> Result<Response<()>, Status> {
        let (_, extensions, request) = request.into_parts();
        forward(&self.exchange, Publisher::of_request(&extensions), request).await?;
        Ok(Response::new(()))
    }

    type SubscribeStream = EnvelopeStream;

    /// Returning the stream makes tonic send response headers at once, so a client
    /// knows its subscription is live; containerd sends none until the first event.
    /// Served by [`EventsRoutes`], which encodes each event once for all subscribers;
    /// this is what the generated server alone would do.
    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let subscription = subscribe(&self.exchange, request.into_inner().filters).await?;
        let stream = subscription.map(|item| match item {
            Ok(event) => Ok(event.envelope.clone()),
            Err(end) => Err(Status::new(end.code(), end.to_string())),
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
