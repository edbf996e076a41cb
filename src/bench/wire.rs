//! The load generator's side of the wire, kept cheap because it shares the machine
//! with the system under test: Publish requests are sent as bytes encoded up front
//! (or once per call, for payloads that carry their send time), and subscribers
//! decode only the two fields they read, without allocating. Both systems are driven
//! by this same code.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http::Uri;
use http::uri::PathAndQuery;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint, skip_field};
use prost_types::Timestamp;
use tonic::Status;
use tonic::body::Body;
use tonic::client::Grpc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder, Streaming};
use tonic::metadata::MetadataValue;

use super::BenchError;
use crate::client;
use crate::exchange::NAMESPACE_HEADER;
use crate::proto::containerd::services::events::v1::SubscribeRequest;

const PUBLISH: &str = "/containerd.services.events.v1.Events/Publish";
const SUBSCRIBE: &str = "/containerd.services.events.v1.Events/Subscribe";

/// An encoded `PublishRequest{topic, event: Any{type_url, value}}`, exactly what
/// prost would produce for the same message.
pub(crate) fn publish_request(topic: &str, type_url: &str, value: &[u8]) -> Bytes {
    let any_len = field_len(1, type_url.len()) + field_len(2, value.len());
    let mut out = Vec::with_capacity(field_len(1, topic.len()) + field_len(2, any_len));
    put_bytes_field(&mut out, 1, topic.as_bytes());
    encode_key(2, WireType::LengthDelimited, &mut out);
    encode_varint(any_len as u64, &mut out);
    put_bytes_field(&mut out, 1, type_url.as_bytes());
    put_bytes_field(&mut out, 2, value);
    out.into()
}

fn field_len(tag: u32, len: usize) -> usize {
    prost::encoding::key_len(tag) + prost::encoding::encoded_len_varint(len as u64) + len
}

fn put_bytes_field(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.put_slice(bytes);
}

/// A delivered envelope the benchmark cannot read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    #[error("malformed protobuf")]
    Decode(#[from] prost::DecodeError),
    #[error("a field's length runs past the end of its message")]
    Truncated,
}

/// The parts of a delivered `TaskExit` the benchmark reads.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct DeliveredExit {
    pub container_id: Bytes,
    pub exited_at: Option<Timestamp>,
}

/// A connection that publishes encoded requests and subscribes with [`DeliveredExit`]s.
///
/// It speaks HTTP/2 over its own hyper connection rather than a tonic `Channel`: a
/// `Channel` queues every call through a buffer task (one more task hop and wake-up
/// per call), which matters when the client shares two cores with the server.
#[derive(Clone)]
pub(crate) struct WireClient {
    grpc: Grpc<H2Connection>,
}

impl WireClient {
    /// Connects to a socket path or `HOST:PORT`, as [`client::connect_channel`] does.
    pub(crate) async fn connect(address: &str, timeout: Duration) -> Result<Self, BenchError> {
        let failed = |source: std::io::Error| BenchError::Io {
            context: format!("cannot connect to {address}"),
            source,
        };
        let attempt = async {
            let send = match client::Address::parse(address)? {
                client::Address::Unix(path) => {
                    let stream = tokio::net::UnixStream::connect(&path)
                        .await
                        .map_err(failed)?;
                    handshake(stream).await
                }
                client::Address::Tcp(uri) => {
                    let host = uri.trim_start_matches("http://");
                    let stream = tokio::net::TcpStream::connect(host).await.map_err(failed)?;
                    stream.set_nodelay(true).map_err(failed)?;
                    handshake(stream).await
                }
            }
            .map_err(|e| failed(std::io::Error::other(e)))?;
            Ok::<_, BenchError>(Self {
                grpc: Grpc::with_origin(H2Connection(send), Uri::from_static("http://localhost")),
            })
        };
        tokio::time::timeout(timeout, attempt)
            .await
            .map_err(|_| BenchError::Timeout {
                what: format!("connecting to {address} within {timeout:?}"),
            })?
    }

    /// One Publish call with an already encoded request.
    pub(crate) async fn publish(
        &mut self,
        namespace: &MetadataValue<tonic::metadata::Ascii>,
        request: Bytes,
    ) -> Result<(), BenchError> {
        let rpc = |source| BenchError::Rpc {
            what: "publish",
            source,
        };
        self.grpc
            .ready()
            .await
            .map_err(|e| rpc(Status::unavailable(e.to_string())))?;
        let mut request = tonic::Request::new(request);
        request
            .metadata_mut()
            .insert(NAMESPACE_HEADER, namespace.clone());
        let path = PathAndQuery::from_static(PUBLISH);
        self.grpc
            .unary(request, path, WireCodec::<Bytes, ()>::new())
            .await
            .map_err(rpc)?;
        Ok(())
    }

    /// Subscribes with no filters; each item is the delivered envelope's TaskExit
    /// payload (`None` for other payloads).
    pub(crate) async fn subscribe(
        &mut self,
    ) -> Result<Streaming<Option<DeliveredExit>>, BenchError> {
        let rpc = |source| BenchError::Rpc {
            what: "subscribe",
            source,
        };
        self.grpc
            .ready()
            .await
            .map_err(|e| rpc(Status::unavailable(e.to_string())))?;
        let request = tonic::Request::new(SubscribeRequest { filters: vec![] });
        let path = PathAndQuery::from_static(SUBSCRIBE);
        let response = self
            .grpc
            .server_streaming(request, path, WireCodec::new())
            .await
            .map_err(rpc)?;
        Ok(response.into_inner())
    }
}

async fn handshake<T>(io: T) -> Result<SendRequest<Body>, hyper::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await?;
    tokio::spawn(async move {
        // The connection ends when every handle is dropped or the peer goes away;
        // calls in flight then fail with their own error.
        let _ = connection.await;
    });
    Ok(send)
}

/// One HTTP/2 connection as the service tonic's client calls.
#[derive(Clone)]
struct H2Connection(SendRequest<Body>);

impl tower::Service<http::Request<Body>> for H2Connection {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// Encodes what it is given (prost messages or ready bytes); decodes Publish's empty
/// reply and delivered envelopes.
struct WireCodec<E, D>(PhantomData<fn(E) -> D>);

impl<E, D> WireCodec<E, D> {
    fn new() -> Self {
        Self(PhantomData)
    }
}

impl<E, D> Codec for WireCodec<E, D>
where
    E: WireEncode + Send + 'static,
    D: WireDecode + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = WireCodec<E, D>;
    type Decoder = WireCodec<E, D>;

    fn encoder(&mut self) -> Self::Encoder {
        WireCodec::new()
    }

    fn decoder(&mut self) -> Self::Decoder {
        WireCodec::new()
    }
}

trait WireEncode {
    fn write(self, dst: &mut EncodeBuf<'_>);
}

impl WireEncode for Bytes {
    fn write(self, dst: &mut EncodeBuf<'_>) {
        dst.put_slice(&self);
    }
}

impl WireEncode for SubscribeRequest {
    fn write(self, dst: &mut EncodeBuf<'_>) {
        // An EncodeBuf grows as needed, so encoding cannot run out of room.
        let _ = self.encode(dst);
    }
}

trait WireDecode: Sized {
    fn read(src: &mut DecodeBuf<'_>) -> Result<Self, WireError>;
}

impl WireDecode for () {
    fn read(src: &mut DecodeBuf<'_>) -> Result<Self, WireError> {
        src.advance(src.remaining());
        Ok(())
    }
}

impl WireDecode for Option<DeliveredExit> {
    fn read(src: &mut DecodeBuf<'_>) -> Result<Self, WireError> {
        let envelope = src.copy_to_bytes(src.remaining());
        delivered_exit(envelope)
    }
}

impl<E: WireEncode, D> Encoder for WireCodec<E, D> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.write(dst);
        Ok(())
    }
}

impl<E, D: WireDecode> Decoder for WireCodec<E, D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        D::read(src)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

/// Envelope field 4 (`event`, an Any), then, when the Any's field 1 (`type_url`)
/// names a TaskExit, its field 2 (`value`), read as a TaskExit's fields 1
/// (`container_id`) and 5 (`exited_at`). Slices, never copies. Other payloads (the
/// gateway's own events, such as its signed checkpoints) are `None`.
pub(crate) fn delivered_exit(envelope: Bytes) -> Result<Option<DeliveredExit>, WireError> {
    let Some(mut any) = length_delimited_field(envelope, 4)? else {
        return Ok(None);
    };
    let (mut type_url, mut value) = (None, None);
    while any.has_remaining() {
        let (tag, wire_type) = decode_key(&mut any)?;
        match (tag, wire_type) {
            (1, WireType::LengthDelimited) => {
                let len = decode_len(&mut any)?;
                type_url = Some(any.split_to(len));
            }
            (2, WireType::LengthDelimited) => {
                let len = decode_len(&mut any)?;
                value = Some(any.split_to(len));
            }
            _ => skip_field(wire_type, tag, &mut any, Default::default())?,
        }
    }
    let task_exit = type_url.is_some_and(|t| t.ends_with(TASK_EXIT_TYPE.as_bytes()));
    let (true, Some(mut exit)) = (task_exit, value) else {
        return Ok(None);
    };
    let mut delivered = DeliveredExit::default();
    while exit.has_remaining() {
        let (tag, wire_type) = decode_key(&mut exit)?;
        match (tag, wire_type) {
            (1, WireType::LengthDelimited) => {
                let len = decode_len(&mut exit)?;
                delivered.container_id = exit.split_to(len);
            }
            (5, WireType::LengthDelimited) => {
                let len = decode_len(&mut exit)?;
                delivered.exited_at = Some(Timestamp::decode(exit.split_to(len))?);
            }
            _ => skip_field(wire_type, tag, &mut exit, Default::default())?,
        }
    }
    Ok(Some(delivered))
}

/// The type of the payloads [`delivered_exit`] reads (with or without a
/// `type.googleapis.com/` prefix).
const TASK_EXIT_TYPE: &str = "containerd.events.TaskExit";

/// The last occurrence of a length-delimited field, as protobuf's merge rules have
/// it for a scalar; good enough for the messages the benchmark sends.
fn length_delimited_field(mut message: Bytes, wanted: u32) -> Result<Option<Bytes>, WireError> {
    let mut found = None;
    while message.has_remaining() {
        let (tag, wire_type) = decode_key(&mut message)?;
        if tag == wanted && wire_type == WireType::LengthDelimited {
            let len = decode_len(&mut message)?;
            found = Some(message.split_to(len));
        } else {
            skip_field(wire_type, tag, &mut message, Default::default())?;
        }
    }
    Ok(found)
}

fn decode_len(buf: &mut Bytes) -> Result<usize, WireError> {
    let len = decode_varint(buf)?;
    match usize::try_from(len) {
        Ok(len) if len <= buf.remaining() => Ok(len),
        _ => Err(WireError::Truncated),
    }
}

#[cfg(test)]
mod tests {
    use prost_types::Any;

    use super::*;
    use crate::proto::containerd::events::TaskExit;
    use crate::proto::containerd::services::events::v1::PublishRequest;
    use crate::proto::containerd::types::Envelope;

    #[test]
    fn publish_requests_are_what_prost_encodes() {
        let value = vec![7u8; 300];
        let request = PublishRequest {
            topic: "/tasks/exit".into(),
            event: Some(Any {
                type_url: "containerd.events.TaskExit".into(),
                value: value.clone(),
            }),
        };
        assert_eq!(
            publish_request("/tasks/exit", "containerd.events.TaskExit", &value),
            request.encode_to_vec()
        );
    }

    #[test]
    fn delivered_exits_are_read_from_the_envelope() {
        let exited_at = Some(Timestamp {
            seconds: 1_714_557_600,
            nanos: 5,
        });
        let exit = TaskExit {
            container_id: "bench-3".into(),
            id: "bench-3".into(),
            pid: 9,
            exit_status: 1,
            exited_at,
        };
        let envelope = Envelope {
            timestamp: exited_at,
            namespace: "bench".into(),
            topic: "/tasks/exit".into(),
            event: Some(Any {
                type_url: "containerd.events.TaskExit".into(),
                value: exit.encode_to_vec(),
            }),
        };
        let got = delivered_exit(envelope.encode_to_vec().into()).unwrap();
        assert_eq!(
            got,
            Some(DeliveredExit {
                container_id: Bytes::from_static(b"bench-3"),
                exited_at,
            })
        );
        let other = Envelope {
            event: Some(Any {
                type_url: "eventgate.events.v1.AuditCheckpoint".into(),
                value: exit.encode_to_vec(),
            }),
            ..envelope
        };
        assert_eq!(delivered_exit(other.encode_to_vec().into()).unwrap(), None);
        let empty = Envelope::default().encode_to_vec();
        assert_eq!(delivered_exit(empty.into()).unwrap(), None);
        assert!(delivered_exit(Bytes::from_static(&[0x22, 50, 1])).is_err());
    }
}
