//! The Events service as served. Subscribe is served here so that each event is
//! protobuf-encoded once, not once per subscriber: every subscriber's stream carries
//! the same shared bytes, where the generated server would clone the envelope and
//! encode it again for each of them. Publish and Forward are answered straight from
//! the request ([`super::unary`]). Every other path is answered UNIMPLEMENTED here, as
//! the generated server would: nothing routes through the generated `EventsServer`,
//! so the service has no `Events` trait implementation to keep in step.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes};
use futures::{Stream, StreamExt};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{Grpc, NamedService, ServerStreamingService};
use tonic::{Request, Response, Status};

use super::service::{EventsService, subscribe};
use super::unary;
use crate::proto::containerd::services::events::v1::SubscribeRequest;
use crate::proto::containerd::services::events::v1::events_server::SERVICE_NAME;

const SUBSCRIBE_PATH: &str = "/containerd.services.events.v1.Events/Subscribe";

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What `Server::add_service` takes: answers to containerd's Events service name.
#[derive(Clone)]
pub(crate) struct EventsRoutes {
    service: EventsService,
}

impl EventsRoutes {
    pub(super) fn new(service: EventsService) -> Self {
        Self { service }
    }
}

impl NamedService for EventsRoutes {
    const NAME: &'static str = SERVICE_NAME;
}

impl<B> tower::Service<http::Request<B>> for EventsRoutes
where
    B: tonic::codegen::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if let Some(method) = unary::Method::of(request.uri().path()) {
            let service = self.service.clone();
            return Box::pin(async move { Ok(unary::serve(method, service, request).await) });
        }
        if request.uri().path() != SUBSCRIBE_PATH {
            return Box::pin(async { Ok(unimplemented()) });
        }
        let method = SubscribeMethod(self.service.clone());
        let limits = self.service.exchange().limits().clone();
        Box::pin(async move {
            // Until the request is read and the subscription set up, the same bound
            // as Publish's request message.
            let mut grpc = Grpc::new(SharedEnvelopeCodec);
            let answer = grpc.server_streaming(method, request);
            let answer = unary::within_body_timeout(&limits, async { Ok(answer.await) }).await;
            Ok(answer.unwrap_or_else(Status::into_http))
        })
    }
}

/// The generated server's answer to a method it does not know: headers only,
/// `grpc-status` UNIMPLEMENTED and no message.
fn unimplemented() -> http::Response<tonic::body::Body> {
    let mut response = http::Response::new(tonic::body::Body::default());
    let headers = response.headers_mut();
    headers.insert(
        Status::GRPC_STATUS,
        (tonic::Code::Unimplemented as i32).into(),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        tonic::metadata::GRPC_CONTENT_TYPE,
    );
    response
}

type EncodedStream = Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>;

struct SubscribeMethod(EventsService);

impl ServerStreamingService<SubscribeRequest> for SubscribeMethod {
    type Response = Bytes;
    type ResponseStream = EncodedStream;
    type Future = BoxFuture<Result<Response<EncodedStream>, Status>>;

    fn call(&mut self, request: Request<SubscribeRequest>) -> Self::Future {
        let exchange = self.0.exchange().clone();
        let filters = request.into_inner().filters;
        Box::pin(async move {
            let subscribed = subscribe(&exchange, filters).await?;
            let stream = subscribed.map(|item| match item {
                Ok(event) => Ok(event.encoded_envelope().clone()),
                Err(end) => Err(Status::new(end.code(), end.to_string())),
            });
            Ok(Response::new(Box::pin(stream) as EncodedStream))
        })
    }
}

/// Writes already encoded envelopes; reads SubscribeRequests as prost would.
struct SharedEnvelopeCodec;

impl Codec for SharedEnvelopeCodec {
    type Encode = Bytes;
    type Decode = SubscribeRequest;
    type Encoder = SharedEnvelopeCodec;
    type Decoder = SharedEnvelopeCodec;

    fn encoder(&mut self) -> Self::Encoder {
        SharedEnvelopeCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        SharedEnvelopeCodec
    }
}

impl Encoder for SharedEnvelopeCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for SharedEnvelopeCodec {
    type Item = SubscribeRequest;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<SubscribeRequest>, Status> {
        SubscribeRequest::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use tower::Service;

    use super::*;
    use crate::exchange::{Exchange, ExchangeParts, ExchangeSettings};

    /// What tonic's generated server answered before these routes took every path.
    #[tokio::test]
    async fn an_unknown_method_is_unimplemented_as_the_generated_server_answers() {
        let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
        let mut routes = EventsService::new(exchange).into_server();
        let request = http::Request::builder()
            .method("POST")
            .uri("/containerd.services.events.v1.Events/Replay")
            .body(tonic::body::Body::empty())
            .expect("request");
        let response = routes.call(request).await.expect("infallible");
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "12");
        assert_eq!(response.headers()["content-type"], "application/grpc");
        assert!(response.headers().get("grpc-message").is_none());
    }
}
