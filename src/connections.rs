//! Client connections to the exchange's listeners, counted and capped
//! (`exchange.limits.max_connections`, per listener). Every connection holds
//! buffers, an HTTP/2 state machine and, with TLS, a handshake in progress; without
//! a cap a client that opens connections and never closes them grows the gateway
//! until it runs out of file descriptors, and then nobody else can connect.
//!
//! A connection over the cap is closed as soon as it is accepted, before HTTP/2
//! starts (grpc-go reports UNAVAILABLE, tonic a transport error), counted
//! in `eventgate_limit_rejections_total{limit="max_connections"}`. The ones already
//! open are not affected.
//!
//! A place is not held for free: a connection must send its first bytes (the
//! HTTP/2 preface, or the start of a TLS handshake) within
//! `exchange.limits.handshake_timeout`, or it is closed.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Future, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;
use tonic::transport::server::Connected;

use crate::exchange::Limit;
use crate::metric::Metric;

/// The metric the connection counts record.
pub(crate) const METRICS: &[Metric] = &[Metric::gauge(
    "eventgate_connections",
    metrics::Unit::Count,
    "Client connections open on an exchange listener (unix, tcp).",
)];

/// The connections open on one listener; cheap to clone, clones share the count.
#[derive(Clone, Debug)]
pub(crate) struct OpenConnections {
    listener: &'static str,
    open: Arc<AtomicUsize>,
}

impl OpenConnections {
    /// `listener` labels the gauge: `unix` or `tcp`.
    pub(crate) fn new(listener: &'static str) -> Self {
        Self {
            listener,
            open: Arc::default(),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Sets `eventgate_connections{listener}`; also called at each scrape, so the
    /// gauge stays while nothing changes.
    pub(crate) fn publish(&self) {
        metrics::gauge!("eventgate_connections", "listener" => self.listener)
            .set(self.count() as f64);
    }

    /// Takes a place for a new connection, or `None` when `limit` are open.
    fn admit(&self, limit: usize) -> Option<()> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < limit).then_some(open + 1)
            })
            .ok()
            .map(|_| self.publish())
    }

    fn release(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.publish();
    }
}

/// The HTTP/2 client preface's length: what a connection must send in time.
const PREFACE: usize = 24;

/// An accepting stream (what `serve_with_incoming` takes) that closes connections
/// over the cap and counts the rest while they are open.
pub(crate) struct Capped<S> {
    inner: S,
    open: OpenConnections,
    limit: usize,
    first_bytes_within: Duration,
}

impl<S> Capped<S> {
    /// At most `limit` connections open at once, each sending its first bytes
    /// within `first_bytes_within`.
    pub(crate) fn new(
        inner: S,
        open: OpenConnections,
        limit: usize,
        first_bytes_within: Duration,
    ) -> Self {
        Self {
            inner,
            open,
            limit,
            first_bytes_within,
        }
    }
}

impl<S, IO> Stream for Capped<S>
where
    S: Stream<Item = io::Result<IO>> + Unpin,
{
    type Item = io::Result<Counted<IO>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let io = match Pin::new(&mut self.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(io))) => io,
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            };
            if self.open.admit(self.limit).is_some() {
                return Poll::Ready(Some(Ok(Counted {
                    io,
                    open: self.open.clone(),
                    deadline: Some(Box::pin(tokio::time::sleep(self.first_bytes_within))),
                    preface_left: PREFACE,
                })));
            }
            Limit::Connections.count();
            tracing::warn!(
                listener = self.open.listener,
                limit = self.limit,
                "connection refused: exchange.limits.max_connections are open"
            );
            drop(io);
        }
    }
}

/// An accepted connection that gives its place back when it closes.
pub(crate) struct Counted<IO> {
    io: IO,
    open: OpenConnections,
    /// Until the first [`PREFACE`] bytes arrived: when they must have.
    deadline: Option<Pin<Box<Sleep>>>,
    preface_left: usize,
}

impl<IO> Drop for Counted<IO> {
    fn drop(&mut self) {
        self.open.release();
    }
}

impl<IO: Connected> Connected for Counted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        let Some(deadline) = self.deadline.as_mut() else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) => {
                let got = buf.filled().len() - before;
                self.preface_left = self.preface_left.saturating_sub(got);
                if self.preface_left == 0 || got == 0 {
                    self.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    Limit::HandshakeTimeout.count();
                    tracing::debug!(
                        listener = self.open.listener,
                        "connection closed: it sent nothing in time (exchange.limits.handshake_timeout)"
                    );
                    Poll::Ready(Err(io::ErrorKind::TimedOut.into()))
                }
                Poll::Pending => Poll::Pending,
            },
            error => error,
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn connections_over_the_cap_are_closed_and_places_come_back() {
        let open = OpenConnections::new("test");
        let accepted = futures::stream::iter((0..5).map(io::Result::Ok));
        let mut capped = Capped::new(accepted, open.clone(), 2, Duration::from_secs(1));
        let first = capped.next().await.unwrap().unwrap();
        let second = capped.next().await.unwrap().unwrap();
        assert_eq!((first.io, second.io, open.count()), (0, 1, 2));
        drop(first);
        // A closed connection frees its place for the next one.
        let third = capped.next().await.unwrap().unwrap();
        assert_eq!(third.io, 2);
        // Now 3 and 4 find both places taken and are closed; the stream ends.
        assert!(capped.next().await.is_none());
        assert_eq!(open.count(), 2);
    }
}
