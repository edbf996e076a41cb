//! The writer's own thread. The gateway runs its async work on one thread by default
//! (`--worker-threads`); on it, the source, the spool and the other forwarders would
//! take turns with this forwarder's rows and its connection's socket, and the server
//! would wait between the pieces of a COPY. Here the rows are built, encoded and sent
//! on a thread (and a current-thread runtime) of their own, so a batch streams to the
//! server while the gateway's thread takes the next events in.
//!
//! One batch at a time, in the order sent: a caller that stops waiting (the
//! pipeline's per-attempt timeout drops its future) cuts its write off midway, as
//! dropping the write on the caller's thread would, and the next write starts on a
//! new connection ([`Writer::write`]).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt as _;
use tokio::sync::{mpsc, oneshot};

use crate::event::Event;
use crate::postgres::PostgresError;
use crate::postgres::write::{Writer, Written};

enum Command {
    Write {
        events: Vec<Arc<Event>>,
        /// A panic in the write comes back as its payload, to be raised again on
        /// the caller's side, where the pipeline isolates the event at fault.
        reply: oneshot::Sender<std::thread::Result<Result<Written, PostgresError>>>,
    },
    Close(oneshot::Sender<()>),
}

/// The sending side; the thread ends when this is closed or dropped.
pub(crate) struct WriterThread {
    commands: mpsc::UnboundedSender<Command>,
}

/// The thread is gone (it could not build its runtime, or panicked).
#[derive(Debug, thiserror::Error)]
#[error("the postgres writer thread has stopped")]
pub(crate) struct Stopped;

impl WriterThread {
    pub(crate) fn start(name: &str, mut writer: Writer) -> std::io::Result<Self> {
        let (commands, mut received) = mpsc::unbounded_channel::<Command>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("postgres-{name}"))
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(command) = received.recv().await {
                        match command {
                            Command::Write { events, mut reply } => {
                                // A panicked write leaves the writer marked
                                // interrupted: the next one starts on a new connection.
                                let written = tokio::select! {
                                    written = AssertUnwindSafe(writer.write(&events)).catch_unwind() => Some(written),
                                    () = reply.closed() => None,
                                };
                                if let Some(written) = written {
                                    let _ = reply.send(written);
                                }
                            }
                            Command::Close(done) => {
                                writer.disconnect();
                                let _ = done.send(());
                                return;
                            }
                        }
                    }
                });
            })?;
        Ok(Self { commands })
    }

    /// Writes `events` in one transaction on the thread, after the writes sent before.
    /// A panic in the write is raised again here.
    pub(crate) async fn write(
        &self,
        events: &[Arc<Event>],
    ) -> Result<Result<Written, PostgresError>, Stopped> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Write {
                events: events.to_vec(),
                reply,
            })
            .map_err(|_| Stopped)?;
        match answer.await.map_err(|_| Stopped)? {
            Ok(written) => Ok(written),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Closes the connection and ends the thread once the writes sent before are done.
    pub(crate) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.commands.send(Command::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}
