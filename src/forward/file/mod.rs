//! The `file` forwarder: an append-only archive of events, one line per event, with
//! rotation by size and age, optional gzip of rotated files, and an fsync policy.
//!
//! - `options`: the kind's keys and their defaults.
//! - `writer`: the blocking writer (batches, commits, torn-line repair, rotation).
//! - `disk`: opening the active file whole; the writer's errors.
//! - `archive`: rotated file names, compression and pruning on their own thread.
//!
//! What a reader can rely on: lines are whole and in gateway order (`seq` ascending);
//! a line is never split across files; an acknowledged event is in the set exactly
//! once unless a retry re-sent it after the process restarted. A partly written
//! batch is cut back before the retry, so a tailing reader may briefly see lines
//! that then disappear and come back. Between the rename of a full file and the
//! creation of the next one, the active path briefly does not exist.
//!
//! Payloads eventgate cannot decode are never dropped: `jsonl` keeps them as base64
//! under `raw` (as `eventgate events --format json` does); `ctr`, where `ctr events`
//! itself would skip the event, writes `{"type_url":...,"raw":...}` as the JSON part
//! and counts it in `eventgate_file_raw_payloads_total`.
//!
//! All file I/O runs on blocking threads: a batch goes to `spawn_blocking` with the
//! writer behind a mutex (the pipeline sends one batch at a time, so the mutex is only
//! shared with the periodic tick and shutdown).

mod archive;
pub(crate) mod checkpoint;
mod disk;
pub(crate) mod metric_table;
mod options;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{BuildError, Context, ForwardError, Forwarder, Kind, Options};
use crate::errors::chain;
use crate::event::Event;
use crate::render;
use archive::{Archive, Housekeeper};
pub use options::Format;
pub(crate) use options::{FileOptions, Fsync};
use writer::{SystemClock, Writer};

pub struct FileKind;

impl Kind for FileKind {
    fn check(&self, options: &Options) -> Result<(), BuildError> {
        FileOptions::parse(options).map(drop)
    }

    fn build<'a>(
        &'a self,
        context: &'a Context,
        options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        Box::pin(async move {
            let options = FileOptions::parse(options)?;
            let path = context.resolve(&options.path);
            let name: Arc<str> = context.name.as_str().into();
            let record = record_path(context);
            let forwarder = tokio::task::spawn_blocking(move || open(name, path, options, record))
                .await
                .map_err(|e| BuildError::start("opening the file forwarder failed", e))??;
            Ok(Arc::new(forwarder) as Arc<dyn Forwarder>)
        })
    }
}

/// Where a file forwarder keeps its checkpoint record: with the gateway's state, not
/// next to the file, where pruning and readers of the directory would see it.
pub(crate) fn record_path(context: &Context) -> PathBuf {
    context
        .data_dir
        .join("checkpoints")
        .join(format!("{}.file", context.name))
}

/// Renders one event as the line the forwarder writes, newline included. Returns
/// `false` when the payload could not be decoded (the line then carries it as base64).
pub(crate) fn render_into(out: &mut Vec<u8>, event: &Event, format: Format) -> bool {
    // Through what the format renders, so that a JSON line keeps no decoded message
    // on the event (see `Event::payload_json`).
    let decoded = event.envelope.event.is_none()
        || match format {
            Format::Jsonl => event.payload_json().is_some(),
            Format::Ctr => event.decoded().is_some(),
        };
    match format {
        Format::Jsonl => render::write_event_json(out, event),
        Format::Ctr => match render::event_ctr_line(event) {
            Some(line) => out.extend_from_slice(line.as_bytes()),
            None => out.extend_from_slice(render::ctr_raw_line(&event.envelope).as_bytes()),
        },
    }
    out.push(b'\n');
    decoded
}

/// One rendered line, newline included: exactly the bytes the forwarder appends for
/// this event (the benchmark writes these through a plain `BufWriter` to compare).
pub fn render_line(event: &Event, format: Format) -> Vec<u8> {
    let mut line = Vec::with_capacity(256);
    render_into(&mut line, event, format);
    line
}

/// The forwarder the `file` kind builds. Stops its periodic tick when dropped; `close`
/// also syncs and waits for pending compression.
pub(crate) struct FileForwarder {
    name: Arc<str>,
    writer: Arc<Mutex<Writer>>,
    housekeeper: Arc<Housekeeper>,
    ticker: CancellationToken,
}

fn open(
    name: Arc<str>,
    path: PathBuf,
    options: FileOptions,
    record: PathBuf,
) -> Result<FileForwarder, BuildError> {
    if let Some(dir) = path.parent() {
        create_dirs(dir).map_err(|e| {
            BuildError::start(format!("cannot create the directory {}", dir.display()), e)
        })?;
    }
    let archive = Arc::new(Archive::new(
        Arc::clone(&name),
        &path,
        options.keep,
        options.compress,
    ));
    let housekeeper = Arc::new(Housekeeper::spawn(Arc::clone(&archive)).map_err(|e| {
        BuildError::start("cannot start the file forwarder's housekeeping thread", e)
    })?);
    let nudge = Arc::clone(&housekeeper);
    let tick = tick_period(&options);
    let writer = Writer::open(
        Arc::clone(&name),
        path,
        options,
        archive,
        Box::new(move || nudge.nudge()),
        Arc::new(SystemClock),
        record,
    );
    let writer = match writer {
        Ok(writer) => writer,
        Err(error) => {
            housekeeper.finish();
            let message = error.to_string();
            return Err(BuildError::start(message, error.into_io()));
        }
    };
    // Finish what an earlier run left: compression, pruning.
    housekeeper.nudge();
    tracing::info!(forwarder = %name, path = %writer.path().display(), "file forwarder writing");
    let writer = Arc::new(Mutex::new(writer));
    let ticker = CancellationToken::new();
    if let Some(period) = tick {
        tokio_spawn_ticker(Arc::clone(&writer), period, ticker.clone());
    }
    Ok(FileForwarder {
        name,
        writer,
        housekeeper,
        ticker,
    })
}

/// How often the writer needs a look while idle: for interval syncs and age
/// rotation. `None` when neither is configured.
fn tick_period(options: &FileOptions) -> Option<Duration> {
    let mut period = None::<Duration>;
    if options.fsync == Fsync::Interval {
        period = Some(options.fsync_interval);
    }
    if !options.max_age.is_zero() {
        let age = (options.max_age / 4).max(Duration::from_millis(10));
        period = Some(period.map_or(age, |p| p.min(age)));
    }
    period.map(|p| p.min(Duration::from_secs(1)))
}

fn tokio_spawn_ticker(writer: Arc<Mutex<Writer>>, period: Duration, stop: CancellationToken) {
    // `open` runs on a blocking thread of the runtime, so the handle is there.
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = interval.tick() => {}
            }
            let writer = Arc::clone(&writer);
            let _ = tokio::task::spawn_blocking(move || lock(&writer).tick()).await;
        }
    });
}

impl Forwarder for FileForwarder {
    fn send<'a>(&'a self, batch: &'a super::Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        let writer = Arc::clone(&self.writer);
        let batch = batch.clone();
        self.blocking(move || lock(&writer).write_batch(batch.events()))
    }

    fn checkpoint(&self, next: u64) -> BoxFuture<'_, Result<(), ForwardError>> {
        let writer = Arc::clone(&self.writer);
        self.blocking(move || lock(&writer).checkpoint(next))
    }

    fn resume(&self, cursor: u64, end: u64) -> BoxFuture<'_, Result<u64, ForwardError>> {
        let writer = Arc::clone(&self.writer);
        self.blocking(move || lock(&writer).resume(cursor, end))
    }

    fn close(&self) -> BoxFuture<'_, Result<(), ForwardError>> {
        self.ticker.cancel();
        let writer = Arc::clone(&self.writer);
        let housekeeper = Arc::clone(&self.housekeeper);
        Box::pin(async move {
            let closed = tokio::task::spawn_blocking(move || {
                let flushed = lock(&writer).flush();
                housekeeper.finish();
                flushed
            })
            .await;
            match closed {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(ForwardError::retryable(chain(&error)).with_source(error)),
                Err(error) => {
                    Err(ForwardError::retryable("closing the file failed").with_source(error))
                }
            }
        })
    }
}

impl FileForwarder {
    /// Runs one of the writer's calls on a blocking thread; its errors are retryable.
    fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> Result<T, writer::WriteError> + Send + 'static,
    ) -> BoxFuture<'_, Result<T, ForwardError>> {
        Box::pin(async move {
            match tokio::task::spawn_blocking(call).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(ForwardError::retryable(chain(&error)).with_source(error)),
                Err(error) => Err(ForwardError::retryable(format!(
                    "forwarder {:?}: the file task failed: {error}",
                    self.name
                ))
                .with_source(error)),
            }
        })
    }
}

impl Drop for FileForwarder {
    fn drop(&mut self) {
        self.ticker.cancel();
    }
}

/// A poisoned writer is still consistent on disk: every error path cuts the file back
/// before returning, and the next batch repairs a cut that failed.
fn lock(writer: &Mutex<Writer>) -> MutexGuard<'_, Writer> {
    writer.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Creates `dir` and its missing parents with [`crate::fsmode::DIR_MODE`] (whatever the umask).
fn create_dirs(dir: &Path) -> io::Result<()> {
    crate::fsmode::create_dir_all(dir)
}

#[cfg(test)]
mod tests;
