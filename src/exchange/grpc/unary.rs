//! Publish and Forward served straight from the HTTP/2 request: one length-prefixed
//! message in, an empty message and `grpc-status: 0` out.
//!
//! tonic's generic unary path (a `Streaming` decoder, metadata conversion, an encoder
//! stream and a boxed body per call) was about a tenth of the gateway's CPU per
//! Publish in profiles of the exchange benchmark, for two methods whose request is
//! one small message and whose answer is always empty. The statuses for malformed
//! calls are tonic's own, so clients see no difference.

use std::pin::{Pin, pin};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use http_body::Frame;
use http_body_util::BodyExt;
use prost::Message;
use tonic::Status;

use super::service::{EventsService, forward, publish};
use crate::exchange::limits::{self, Limit};
use crate::proto::containerd::services::events::v1::{ForwardRequest, PublishRequest};
use crate::publisher::Publisher;

pub(crate) const PUBLISH_PATH: &str = "/containerd.services.events.v1.Events/Publish";
pub(crate) const FORWARD_PATH: &str = "/containerd.services.events.v1.Events/Forward";

/// gRPC's length prefix: a compression flag and a big-endian u32 length.
const PREFIX: usize = 5;

#[derive(Clone, Copy)]
pub(crate) enum Method {
    Publish,
    Forward,
}

impl Method {
    pub(super) fn of(path: &str) -> Option<Self> {
        match path {
            PUBLISH_PATH => Some(Method::Publish),
            FORWARD_PATH => Some(Method::Forward),
            _ => None,
        }
    }
}

/// Answers one Publish or Forward call.
pub(crate) async fn serve<B>(
    method: Method,
    service: EventsService,
    request: http::Request<B>,
) -> http::Response<tonic::body::Body>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<tonic::codegen::StdError>,
{
    match answer(method, &service, request).await {
        Ok(()) => {
            let mut response = http::Response::new(tonic::body::Body::new(Empty::default()));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/grpc"),
            );
            response
        }
        Err(status) => status.into_http(),
    }
}

async fn answer<B>(
    method: Method,
    service: &EventsService,
    request: http::Request<B>,
) -> Result<(), Status>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<tonic::codegen::StdError>,
{
    let (parts, body) = request.into_parts();
    if let Some(encoding) = parts.headers.get("grpc-encoding")
        && encoding.as_bytes() != b"identity"
    {
        return Err(unsupported_encoding(encoding));
    }
    let limits = service.exchange().limits();
    let message =
        within_body_timeout(limits, read_message(body, limits.max_request_bytes())).await?;
    // tonic puts the connection's peer credentials or client certificates here.
    let publisher = Publisher::of_request(&parts.extensions);
    match method {
        Method::Publish => {
            let request = PublishRequest::decode(message).map_err(decode_error)?;
            publish(service.exchange(), publisher, &parts.headers, request).await
        }
        Method::Forward => {
            let request = ForwardRequest::decode(message).map_err(decode_error)?;
            forward(service.exchange(), publisher, request).await
        }
    }
}

/// Bounds the wait for a call's request message by `exchange.limits.body_timeout`: a
/// client that trickles its request in holds a stream (and its buffers) for as long
/// as it takes.
pub(super) async fn within_body_timeout<T>(
    limits: &limits::LimitSettings,
    read: impl std::future::Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(limits.body_timeout, read).await {
        Ok(result) => result,
        Err(_) => Err(Limit::BodyTimeout.reject(format!(
            "the request message did not arrive within {} (exchange.limits.body_timeout): \
             deadline exceeded",
            humantime::format_duration(limits.body_timeout)
        ))),
    }
}

/// Reads the request's one message. Whatever follows it is ignored, as tonic does.
async fn read_message<B>(body: B, limit: usize) -> Result<Bytes, Status>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<tonic::codegen::StdError>,
{
    let mut body = pin!(body);
    // Nearly always one DATA frame holds the whole call: keep it without copying.
    let mut first: Option<Bytes> = None;
    let mut more = BytesMut::new();
    loop {
        let held = first.as_ref().map_or(0, Bytes::len) + more.len();
        if held >= PREFIX {
            let header = match &first {
                Some(bytes) if bytes.len() >= PREFIX => &bytes[..PREFIX],
                _ => &more[..PREFIX],
            };
            let len = check_prefix(header, limit)?;
            if held >= PREFIX + len {
                let mut whole = match first {
                    Some(bytes) if more.is_empty() => bytes,
                    _ => more.freeze(),
                };
                whole.advance(PREFIX);
                whole.truncate(len);
                return Ok(whole);
            }
        }
        match body.as_mut().frame().await {
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                match first.take() {
                    None if more.is_empty() => first = Some(data),
                    taken => {
                        if let Some(bytes) = taken {
                            more.extend_from_slice(&bytes);
                        }
                        more.extend_from_slice(&data);
                    }
                }
            }
            Some(Err(error)) => return Err(Status::from_error(error.into())),
            None if held == 0 => return Err(Status::internal("Missing request message.")),
            None => return Err(Status::internal("Unexpected EOF decoding stream.")),
        }
    }
}

/// The message length from a gRPC prefix, refusing compressed and oversized messages.
fn check_prefix(header: &[u8], limit: usize) -> Result<usize, Status> {
    match header[0] {
        0 => {}
        // No encoding is accepted, so a compressed message is always ill-formed.
        1 => {
            return Err(Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            ));
        }
        flag => {
            return Err(Status::internal(format!(
                "protocol error: received message with invalid compression flag: {flag} (valid flags are 0 and 1), while sending request"
            )));
        }
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > limit {
        // Checked before the body is read; the message says which key to raise.
        return Err(Limit::EventBytes.reject(limits::event_too_large("request", len, limit)));
    }
    Ok(len)
}

fn unsupported_encoding(encoding: &HeaderValue) -> Status {
    let name = String::from_utf8_lossy(encoding.as_bytes());
    let mut status = Status::unimplemented(format!(
        "Content is compressed with `{name}` which isn't supported"
    ));
    status.metadata_mut().insert(
        "grpc-accept-encoding",
        tonic::metadata::MetadataValue::from_static("identity"),
    );
    status
}

fn decode_error(error: prost::DecodeError) -> Status {
    Status::internal(error.to_string())
}

/// The answer to a successful call: an empty message, then `grpc-status: 0`.
#[derive(Default)]
struct Empty {
    sent: u8,
}

impl http_body::Body for Empty {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.sent += 1;
        Poll::Ready(match self.sent {
            1 => Some(Ok(Frame::data(Bytes::from_static(&[0; PREFIX])))),
            2 => {
                let mut trailers = HeaderMap::with_capacity(1);
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                Some(Ok(Frame::trailers(trailers)))
            }
            _ => None,
        })
    }

    fn is_end_stream(&self) -> bool {
        self.sent >= 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut out = vec![flag];
        out.extend_from_slice(&(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    fn body(chunks: Vec<Vec<u8>>) -> impl http_body::Body<Data = Bytes, Error = Status> {
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, Status>(Frame::data(Bytes::from(c))));
        http_body_util::StreamBody::new(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn one_message_split_anywhere_is_read_whole() {
        let wire = framed(0, b"hello world");
        for cut in 0..=wire.len() {
            let chunks = vec![wire[..cut].to_vec(), wire[cut..].to_vec()];
            let message = read_message(body(chunks), 100).await.expect("read");
            assert_eq!(&message[..], b"hello world", "cut at {cut}");
        }
        let bytes: Vec<Vec<u8>> = wire.iter().map(|b| vec![*b]).collect();
        let message = read_message(body(bytes), 100).await.expect("read");
        assert_eq!(&message[..], b"hello world");
    }

    #[tokio::test]
    async fn malformed_calls_get_tonics_statuses() {
        let cases: Vec<(Vec<Vec<u8>>, tonic::Code, &str)> = vec![
            (vec![], tonic::Code::Internal, "Missing request message."),
            (
                vec![framed(0, b"abc")[..6].to_vec()],
                tonic::Code::Internal,
                "Unexpected EOF",
            ),
            (vec![vec![0, 0]], tonic::Code::Internal, "Unexpected EOF"),
            (
                vec![framed(1, b"abc")],
                tonic::Code::Internal,
                "compressed-flag",
            ),
            (
                vec![framed(7, b"abc")],
                tonic::Code::Internal,
                "invalid compression flag: 7",
            ),
            (
                vec![framed(0, &[0; 101])],
                tonic::Code::InvalidArgument,
                "request is 101 bytes, more than the 100 bytes exchange.limits.max_event_bytes",
            ),
        ];
        for (chunks, code, text) in cases {
            let status = read_message(body(chunks.clone()), 100)
                .await
                .expect_err("malformed");
            assert_eq!(status.code(), code, "{chunks:?}: {status:?}");
            assert!(status.message().contains(text), "{chunks:?}: {status:?}");
        }
    }

    fn call(
        path: &str,
        headers: &[(&str, &str)],
        message: &[u8],
    ) -> http::Request<impl http_body::Body<Data = Bytes, Error = Status>> {
        let mut request = http::Request::builder().method("POST").uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request
            .body(body(vec![framed(0, message)]))
            .expect("request")
    }

    fn grpc_status(response: &http::Response<tonic::body::Body>) -> Option<&str> {
        response
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn a_publish_reaches_subscribers_and_is_answered_ok() {
        use futures::StreamExt;

        use crate::exchange::{Exchange, ExchangeParts, ExchangeSettings};
        use crate::filter::Filter;
        use prost_types::Any;

        let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
        let mut subscription = exchange.subscribe(Filter::default()).expect("subscribe");
        let service = EventsService::new(exchange);
        let request = PublishRequest {
            topic: "/tasks/exit".into(),
            event: Some(Any {
                type_url: "containerd.events.TaskExit".into(),
                value: vec![0x0a, 0x02, b'c', b'1'],
            }),
        };
        let response = serve(
            Method::Publish,
            service.clone(),
            call(
                PUBLISH_PATH,
                &[("containerd-namespace", "default")],
                &request.encode_to_vec(),
            ),
        )
        .await;
        assert_eq!(response.headers()["content-type"], "application/grpc");
        assert_eq!(grpc_status(&response), None, "status comes in the trailers");
        let collected = response.into_body().collect().await.expect("body");
        let trailers = collected.trailers().cloned().expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
        let event = subscription
            .next()
            .await
            .expect("an event")
            .expect("delivered");
        assert_eq!(event.envelope.namespace, "default");
        assert_eq!(event.envelope.topic, "/tasks/exit");
        assert_eq!(event.envelope.event, request.event);

        // Without a namespace: containerd's FAILED_PRECONDITION, as a trailers-only answer.
        let response = serve(
            Method::Publish,
            service.clone(),
            call(PUBLISH_PATH, &[], &request.encode_to_vec()),
        )
        .await;
        assert_eq!(grpc_status(&response), Some("9"));

        // A compressed request: tonic's UNIMPLEMENTED, naming the encoding.
        let response = serve(
            Method::Forward,
            service,
            call(FORWARD_PATH, &[("grpc-encoding", "gzip")], b""),
        )
        .await;
        assert_eq!(grpc_status(&response), Some("12"));
        let message = response.headers()["grpc-message"].to_str().expect("ascii");
        assert!(message.contains("gzip"), "{message}");
    }

    /// The unix peer's credentials tonic puts in the request reach the event.
    #[tokio::test]
    async fn the_connections_peer_is_the_events_publisher() {
        use futures::StreamExt;
        use tonic::transport::server::UdsConnectInfo;

        use crate::exchange::{Exchange, ExchangeParts, ExchangeSettings};
        use crate::filter::Filter;

        let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
        let mut subscription = exchange.subscribe(Filter::default()).expect("subscribe");
        let service = EventsService::new(exchange);
        let (ours, _theirs) = tokio::net::UnixStream::pair().expect("a socket pair");
        let cred = ours.peer_cred().expect("peer credentials");
        let request = PublishRequest {
            topic: "/tasks/exit".into(),
            event: None,
        };
        let bytes = request.encode_to_vec();
        let headers = [("containerd-namespace", "default")];
        let mut from_peer = call(PUBLISH_PATH, &headers, &bytes);
        from_peer.extensions_mut().insert(UdsConnectInfo {
            peer_addr: None,
            peer_cred: Some(cred),
        });
        let response = serve(Method::Publish, service.clone(), from_peer).await;
        assert_eq!(grpc_status(&response), None);
        let event = subscription
            .next()
            .await
            .expect("an event")
            .expect("delivered");
        assert_eq!(
            event.identity.publisher,
            Some(Publisher::Process {
                uid: unsafe { libc::geteuid() },
                gid: unsafe { libc::getegid() },
                pid: Some(std::process::id()),
            })
        );

        // Without connection information (in-process callers), no publisher.
        serve(
            Method::Publish,
            service,
            call(PUBLISH_PATH, &headers, &bytes),
        )
        .await;
        let event = subscription
            .next()
            .await
            .expect("an event")
            .expect("delivered");
        assert_eq!(event.identity.publisher, None);
    }

    #[tokio::test]
    async fn the_empty_answer_is_a_message_then_status_ok() {
        let collected = Empty::default().collect().await.expect("body");
        let trailers = collected.trailers().cloned().expect("trailers");
        assert_eq!(trailers.get("grpc-status").expect("status"), "0");
        assert_eq!(&collected.to_bytes()[..], &[0; PREFIX]);
    }
}
