//! Knowing when a subscription is open without waiting for the upstream to answer.
//!
//! containerd (Go gRPC) sends a streaming response's headers together with its first
//! message, so `subscribe().await` on an idle daemon blocks until something happens
//! on the node. The request, though, is complete as soon as its one message has been
//! handed to the HTTP/2 connection; from then on the daemon has everything it needs to
//! register the subscriber. [`NotifySent`] wraps the channel and reports that moment.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::oneshot;
use tonic::body::Body;
use tonic::transport::Channel;
use tower::Service;

type Notifier = Arc<Mutex<Option<oneshot::Sender<()>>>>;

/// A channel whose next request reports, once, when its body has been fully sent.
#[derive(Clone)]
pub(super) struct NotifySent {
    channel: Channel,
    notifier: Notifier,
}

impl NotifySent {
    pub(super) fn new(channel: Channel) -> (Self, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let service = Self {
            channel,
            notifier: Arc::new(Mutex::new(Some(tx))),
        };
        (service, rx)
    }
}

impl Service<http::Request<Body>> for NotifySent {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let notifier = Arc::clone(&self.notifier);
        let request = request.map(|inner| Body::new(NotifyOnEnd { inner, notifier }));
        Box::pin(self.channel.call(request))
    }
}

struct NotifyOnEnd {
    inner: Body,
    notifier: Notifier,
}

impl NotifyOnEnd {
    fn notify(&self) {
        let sender = self
            .notifier
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(sender) = sender {
            let _ = sender.send(());
        }
    }
}

impl HttpBody for NotifyOnEnd {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // The connection may stop polling as soon as the body says it has ended, so
        // the end is noticed on the last frame as well as on the final `None`.
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.notify();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let ended = self.inner.is_end_stream();
        if ended {
            self.notify();
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
