//! Catch-up rate of a resumed subscription (`eventgate.services.events.v1`
//! Subscribe from `after_seq = 0`), from the audit store and from the spool, each
//! next to its peer in the same run: the same rows read with plain rusqlite, the
//! same records read with the spool's own reader, with no gRPC, filter or record
//! in between.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::BenchError;
use super::daemon::Daemon;
use super::load::{as_events, lifecycle};
use crate::event::Event;
use crate::proto::eventgate::services::events::v1::events_client::EventsClient;
use crate::proto::eventgate::services::events::v1::{SubscribeRequest, subscribe_request};
use crate::spool::{Spool, SpoolSettings};

/// Where the resumer's history comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum From {
    /// Small segments that the sqlite forwarder's cursor releases: the store.
    Store,
    /// One large segment and no forwarder: the spool keeps everything.
    Spool,
}

impl From {
    pub(crate) fn label(self) -> &'static str {
        match self {
            From::Store => "audit store",
            From::Spool => "spool",
        }
    }

    fn config(self) -> &'static str {
        match self {
            From::Store => {
                "[spool]\nsegment_bytes = \"64KiB\"\n\n[[forwarder]]\nname = \"audit\"\n\
                 kind = \"sqlite\"\npath = \"audit.db\"\ncheckpoint = { interval = \"100ms\" }\n"
            }
            From::Spool => "forwarder = []\n\n[spool]\nsegment_bytes = \"512MiB\"\n",
        }
    }
}

/// One source's figures.
#[derive(Clone, Debug)]
pub(crate) struct Measured {
    pub from: From,
    /// The resumer, from Subscribe to the last record received.
    pub resume: Duration,
    /// The peer: the same rows or records read raw.
    pub raw: Duration,
}

/// Publishes `events` into a fresh gateway, waits until history is where `from`
/// says, resumes from the first event, then stops the gateway and reads the same
/// history raw.
pub(crate) async fn measure(
    eventgate: &Path,
    dir: &Path,
    from: From,
    events: usize,
) -> Result<Measured, BenchError> {
    let data = dir.join(format!("resume-{}", from.label().replace(' ', "-")));
    std::fs::create_dir_all(&data).map_err(|source| BenchError::Io {
        context: format!("cannot create {}", data.display()),
        source,
    })?;
    let config = data.join("eventgate.toml");
    std::fs::write(&config, from.config()).map_err(|source| BenchError::Io {
        context: format!("cannot write {}", config.display()),
        source,
    })?;
    let config = config.display().to_string();
    let daemon = Daemon::eventgate(eventgate, &data, &["--config", &config]).await?;
    // Daemon keeps its data directory in `eventgate` under the directory it is given.
    let gateway_data = data.join("eventgate");
    let load: Vec<Arc<Event>> = as_events(&lifecycle(events));
    super::replay::forward_all(&daemon, &load, 8).await?;
    if from == From::Store {
        wait_released(&gateway_data.join("spool/segments"), events as u64 * 9 / 10).await?;
    }
    let resume = resume_all(&daemon, events).await?;
    daemon.stop(Duration::from_secs(30)).await;
    let raw = match from {
        From::Store => raw_store(&gateway_data.join("audit.db"), events)?,
        From::Spool => raw_spool(&gateway_data.join("spool"), events).await?,
    };
    let _ = std::fs::remove_dir_all(&data);
    Ok(Measured { from, resume, raw })
}

/// Until the spool's oldest segment starts at `seq` or later: what comes before is
/// only in the store.
async fn wait_released(segments: &Path, seq: u64) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let first = std::fs::read_dir(segments)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let name = e.ok()?.file_name();
                name.to_str()?.strip_suffix(".log")?.parse::<u64>().ok()
            })
            .min();
        if first.is_some_and(|first| first >= seq) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Timeout {
                what: format!("the spool did not release segments before seq {seq} in 120s"),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn resume_all(daemon: &Daemon, events: usize) -> Result<Duration, BenchError> {
    let address = daemon.socket().display().to_string();
    let channel = crate::client::connect_channel(&address, Duration::from_secs(5)).await?;
    let start = Instant::now();
    let mut stream = EventsClient::new(channel)
        .subscribe(SubscribeRequest {
            filters: Vec::new(),
            start: Some(subscribe_request::Start::AfterSeq(0)),
            until: None,
        })
        .await
        .map_err(|source| BenchError::Rpc {
            what: "resumable Subscribe",
            source,
        })?
        .into_inner();
    let mut received = 0;
    while received < events {
        match stream.message().await {
            Ok(Some(_)) => received += 1,
            Ok(None) => break,
            Err(source) => {
                return Err(BenchError::Rpc {
                    what: "reading the resumed stream",
                    source,
                });
            }
        }
    }
    if received < events {
        return Err(BenchError::Failed {
            what: format!("the resumed stream ended after {received} of {events} events"),
        });
    }
    Ok(start.elapsed())
}

/// The same rows in seq order with plain rusqlite: every column the resumer reads.
fn raw_store(path: &Path, events: usize) -> Result<Duration, BenchError> {
    let sqlite = |what| move |source| BenchError::Sqlite { what, source };
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(sqlite("opening the store"))?;
    let start = Instant::now();
    let mut stmt = conn
        .prepare("SELECT * FROM events ORDER BY seq")
        .map_err(sqlite("preparing"))?;
    let columns = stmt.column_count();
    let mut rows = stmt.query([]).map_err(sqlite("reading"))?;
    let mut read = 0;
    let mut bytes = 0usize;
    while let Some(row) = rows.next().map_err(sqlite("reading a row"))? {
        for i in 0..columns {
            if let Ok(rusqlite::types::ValueRef::Blob(b) | rusqlite::types::ValueRef::Text(b)) =
                row.get_ref(i)
            {
                bytes += b.len();
            }
        }
        read += 1;
    }
    std::hint::black_box(bytes);
    check_count("store rows", read, events)?;
    Ok(start.elapsed())
}

/// The same records with the spool's reader, in the resumer's batch size.
async fn raw_spool(dir: &Path, events: usize) -> Result<Duration, BenchError> {
    let failed = |e: crate::spool::SpoolError| BenchError::Failed {
        what: format!("the spool: {}", crate::errors::chain(&e)),
    };
    let (spool, _) = Spool::open(dir, &SpoolSettings::default(), &[]).map_err(failed)?;
    let start = Instant::now();
    let mut reader = spool.reader(1);
    let mut read = 0;
    while read < events {
        let batch = reader.next(512, 1 << 20).await.map_err(failed)?;
        read += batch.events.len();
    }
    let elapsed = start.elapsed();
    let _ = spool.close().await;
    check_count("spool records", read, events)?;
    Ok(elapsed)
}

fn check_count(what: &str, read: usize, events: usize) -> Result<(), BenchError> {
    if read < events {
        return Err(BenchError::Failed {
            what: format!("read {read} {what}, expected {events}"),
        });
    }
    Ok(())
}
