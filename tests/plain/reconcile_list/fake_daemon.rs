//! A scripted stand-in for containerd's gRPC socket, for what a real daemon will not
//! do on demand: lack a method, answer too much, or not answer at all. It speaks
//! plain HTTP/2 gRPC framing, so the client under test is exercised end to end.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::UnixListener;

/// How the fake answers one call.
pub enum Answer {
    /// One encoded response message, then status OK.
    Message(Vec<u8>),
    /// A trailers-only answer with this gRPC status code.
    Status(tonic::Code),
    /// Nothing, ever.
    Never,
}

/// `(gRPC path, containerd-namespace header)` of each call, in arrival order.
pub type Calls = Arc<Mutex<Vec<(String, Option<String>)>>>;

type Script = Arc<dyn Fn(&str, Option<&str>) -> Answer + Send + Sync>;

pub struct FakeDaemon {
    pub socket: PathBuf,
    pub calls: Calls,
    _dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl FakeDaemon {
    /// Listens on a fresh socket; `script` picks the answer for each call.
    pub fn start(script: impl Fn(&str, Option<&str>) -> Answer + Send + Sync + 'static) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("fake-containerd.sock");
        let listener = UnixListener::bind(&socket).expect("bind the fake daemon's socket");
        let calls = Calls::default();
        let script: Script = Arc::new(script);
        let server = tokio::spawn(serve(listener, script, Arc::clone(&calls)));
        FakeDaemon {
            socket,
            calls,
            _dir: dir,
            server,
        }
    }

    pub fn address(&self) -> String {
        self.socket.to_str().expect("UTF-8 temp path").to_owned()
    }

    pub fn calls(&self) -> Vec<(String, Option<String>)> {
        self.calls.lock().expect("calls lock").clone()
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn serve(listener: UnixListener, script: Script, calls: Calls) {
    while let Ok((stream, _)) = listener.accept().await {
        let script = Arc::clone(&script);
        let calls = Arc::clone(&calls);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let script = Arc::clone(&script);
                let calls = Arc::clone(&calls);
                async move { Ok::<_, Infallible>(answer(request, &script, &calls).await) }
            });
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    request: Request<Incoming>,
    script: &Script,
    calls: &Calls,
) -> Response<BoxBody<Bytes, Infallible>> {
    let path = request.uri().path().to_owned();
    let namespace = request
        .headers()
        .get("containerd-namespace")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    calls
        .lock()
        .expect("calls lock")
        .push((path.clone(), namespace.clone()));
    let grpc = |builder: http::response::Builder| {
        builder
            .status(200)
            .header("content-type", "application/grpc")
    };
    match script(&path, namespace.as_deref()) {
        Answer::Message(message) => {
            let mut framed = BytesMut::with_capacity(5 + message.len());
            framed.put_u8(0);
            framed.put_u32(u32::try_from(message.len()).expect("message under 4 GiB"));
            framed.put_slice(&message);
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            let frames = vec![
                Ok(Frame::data(framed.freeze())),
                Ok(Frame::trailers(trailers)),
            ];
            let body = StreamBody::new(futures::stream::iter(frames));
            grpc(Response::builder())
                .body(body.boxed())
                .expect("response")
        }
        Answer::Status(code) => grpc(Response::builder())
            .header("grpc-status", (code as i32).to_string())
            .header("grpc-message", "scripted")
            .body(Empty::new().boxed())
            .expect("response"),
        Answer::Never => std::future::pending().await,
    }
}
