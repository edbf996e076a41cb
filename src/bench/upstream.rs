//! Upstream capture under a burst: a real containerd takes Publish calls from several
//! clients while eventgate, subscribed to it as a node's gateway is (its default
//! forwarders, the given `spool.fsync`), stores what containerd publishes. Both rates
//! come from the same run: containerd's accepted/s and eventgate's stored/s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use prost::Message;
use prost_types::{Any, Timestamp};
use tonic::metadata::MetadataValue;

use super::BenchError;
use super::daemon::Daemon;
use super::load::{lifecycle, publish_all};
use super::signing::{Signed, SigningKey, checkpoints};
use super::wire::{WireClient, publish_request};
use crate::proto::containerd::events::TaskExit;
use crate::store;

/// The upstream's name in eventgate: its events are stored with source `upstream:node`.
const UPSTREAM: &str = "node";

/// Warm-up events go to a namespace of their own, so they are never counted.
const WARMUP_NAMESPACE: &str = "warmup";

#[derive(Clone, Debug)]
pub(crate) struct UpstreamBench {
    pub events: usize,
    pub publishers: usize,
    /// Publish calls each publisher keeps outstanding.
    pub in_flight: usize,
    /// How long to wait, after the first publish, for the store to hold every event.
    pub timeout: Duration,
    /// The gateway's `spool.fsync`.
    pub spool_fsync: &'static str,
    /// The upstream's `enrich` (reading each new container's record from containerd).
    pub enrich: bool,
    /// Signed checkpoints of the audit store (`[signing]`, with a key written for
    /// the round and the benchmark's interval and row count).
    pub signing: bool,
    pub containerd: PathBuf,
}

/// One round's figures.
#[derive(Debug, Clone)]
pub(crate) struct Round {
    /// First publish until containerd had answered every call.
    pub accepted: Duration,
    /// First publish until the audit store held every event (to within one look at
    /// it, every 5 ms); `None` when it did not within the timeout.
    pub stored: Option<Duration>,
    /// Events in the store at the end (all of them, unless the timeout passed).
    pub stored_events: u64,
    /// How long the round ran for the store: `stored`, or the timeout.
    pub watched: Duration,
    /// Events not yet in the store when containerd answered the last call.
    pub behind_when_accepted: u64,
    pub peak_rss: Option<u64>,
    /// With signing on: the checkpoints the store held at the end of the round.
    pub signed: Option<Signed>,
}

impl Round {
    /// The store's rate: every event over the time to the last one, or what it held
    /// at the timeout over the timeout.
    pub(crate) fn stored_per_sec(&self) -> f64 {
        self.stored_events as f64 / self.watched.as_secs_f64().max(1e-9)
    }

    pub(crate) fn accepted_per_sec(&self, events: usize) -> f64 {
        events as f64 / self.accepted.as_secs_f64().max(1e-9)
    }

    /// eventgate's rate over containerd's, in the same round: 1.0 when the store had
    /// every event as soon as containerd had answered every call.
    pub(crate) fn ratio(&self, events: usize) -> f64 {
        self.stored_per_sec() / self.accepted_per_sec(events).max(1e-9)
    }

    /// From containerd's answer to the last call until the store held every event.
    pub(crate) fn lag(&self) -> Option<Duration> {
        self.stored.map(|s| s.saturating_sub(self.accepted))
    }
}

/// Runs one round in `dir/round-N`: a fresh containerd and a fresh eventgate.
pub(crate) async fn round(
    eventgate: &Path,
    dir: &Path,
    bench: &UpstreamBench,
    round: usize,
) -> Result<Round, BenchError> {
    let enrich = if bench.enrich { "enrich" } else { "plain" };
    let signing = if bench.signing { "-signing" } else { "" };
    let run_dir = dir.join(format!("{}-{enrich}{signing}-{round}", bench.spool_fsync));
    let containerd_dir = run_dir.join("containerd");
    create_dir(&containerd_dir)?;
    let key = match bench.signing {
        true => Some(SigningKey::write(&run_dir)?),
        false => None,
    };
    let containerd = Daemon::containerd(&bench.containerd, &containerd_dir).await?;
    let socket = containerd.socket().display().to_string();

    // Nothing but the fsync mode, enrichment and signing is set: the forwarders are
    // the defaults (the `log` file and the `audit` SQLite store).
    let config = run_dir.join("eventgate.toml");
    let mut text = format!(
        "[spool]\nfsync = \"{}\"\n\n[[upstream]]\nname = \"{UPSTREAM}\"\naddress = {:?}\nenrich = {}\n",
        bench.spool_fsync, socket, bench.enrich
    );
    if let Some(key) = &key {
        text.push('\n');
        text.push_str(&key.config_table());
    }
    std::fs::write(&config, text).map_err(|source| BenchError::Io {
        context: format!("cannot write {}", config.display()),
        source,
    })?;
    let config = config.display().to_string();
    let gateway = Daemon::eventgate(eventgate, &run_dir, &["--config", &config]).await?;
    let mut counter = Counter::new(run_dir.join("eventgate").join("audit.db"));
    warm_up(&socket, &mut counter).await?;

    let items = Arc::new(lifecycle(bench.events));
    let expected = items.len() as u64;
    // The store is looked at every 5 ms from the start, so each look only counts the
    // rows added since the last one and the end is seen within a look. Each look is
    // timed from before its query: the store held what it counts by then.
    let publishing = publish_all(
        &socket,
        Arc::clone(&items),
        bench.publishers,
        bench.in_flight,
    );
    tokio::pin!(publishing);
    let mut looks: Vec<(Instant, u64)> = Vec::new();
    let accepted = loop {
        tokio::select! {
            accepted = &mut publishing => break accepted?,
            () = tokio::time::sleep(Duration::from_millis(5)) => {
                let at = Instant::now();
                looks.push((at, counter.count()?));
            }
        }
    };
    // publish_all's clock starts once its clients are connected and its requests
    // encoded; both rates count from there.
    let start = Instant::now() - accepted;
    let deadline = start + bench.timeout;
    let mut behind_when_accepted = None;
    let (held, stored) = loop {
        let at = Instant::now();
        let held = counter.count()?;
        behind_when_accepted.get_or_insert(expected.saturating_sub(held));
        if held >= expected {
            // Everything was in already, perhaps before containerd's last answer.
            let first = looks
                .iter()
                .find(|(_, count)| *count >= expected)
                .map_or(at, |(at, _)| *at);
            break (held, Some(first.saturating_duration_since(start)));
        }
        if Instant::now() > deadline {
            break (held, None);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let watched = stored.unwrap_or_else(|| start.elapsed());
    let behind_when_accepted = behind_when_accepted.unwrap_or(expected);
    if stored.is_none() {
        eprintln!(
            "  the store held {held} of {expected} events after {:?}; see {}",
            bench.timeout,
            run_dir.join("eventgate.log").display()
        );
    }
    let peak_rss = gateway.peak_rss();
    // A row that claims signing but signed nothing fails the run.
    let signed = match &key {
        Some(key) => {
            let data_dir = run_dir.join("eventgate");
            match checkpoints(&data_dir, key, None).await {
                Ok(signed) => Some(signed),
                Err(e) => {
                    gateway.stop(Duration::from_secs(30)).await;
                    containerd.stop(Duration::from_secs(5)).await;
                    return Err(e);
                }
            }
        }
        None => None,
    };
    gateway.stop(Duration::from_secs(30)).await;
    containerd.stop(Duration::from_secs(5)).await;
    Ok(Round {
        accepted,
        stored,
        stored_events: held,
        watched,
        behind_when_accepted,
        peak_rss,
        signed,
    })
}

/// Publishes warm-up events until one is in the store: containerd has registered the
/// subscription (it sends nothing back until an event) and every stage is open.
async fn warm_up(socket: &str, counter: &mut Counter) -> Result<(), BenchError> {
    let mut client = WireClient::connect(socket, Duration::from_secs(5)).await?;
    let namespace = MetadataValue::from_static(WARMUP_NAMESPACE);
    let exit = TaskExit {
        container_id: "warmup".into(),
        id: "warmup".into(),
        exited_at: Some(Timestamp::from(SystemTime::now())),
        ..TaskExit::default()
    };
    let any = Any {
        type_url: "containerd.events.TaskExit".into(),
        value: exit.encode_to_vec(),
    };
    let request = publish_request("/tasks/exit", &any.type_url, &any.value);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        client.publish(&namespace, request.clone()).await?;
        if counter.warmed()? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Timeout {
                what: "no warm-up event reached the audit store within 30s".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Counts the upstream's stored events, reading only rows added since the last look
/// (the benchmark shares the machine with the gateway it measures).
struct Counter {
    path: PathBuf,
    conn: Option<rusqlite::Connection>,
    after_row: i64,
    count: u64,
}

impl Counter {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            conn: None,
            after_row: 0,
            count: 0,
        }
    }

    fn conn(&mut self) -> Result<Option<&rusqlite::Connection>, BenchError> {
        if self.conn.is_none() && self.path.exists() {
            self.conn = Some(store::open_reader(&self.path, Duration::from_secs(5))?);
        }
        Ok(self.conn.as_ref())
    }

    /// Whether a warm-up event is stored; the count starts after the last one.
    fn warmed(&mut self) -> Result<bool, BenchError> {
        let Some(conn) = self.conn()? else {
            return Ok(false);
        };
        let last: Option<i64> = conn
            .query_row(
                "SELECT max(row_id) FROM events WHERE namespace = ?1",
                [WARMUP_NAMESPACE],
                |row| row.get(0),
            )
            .map_err(sqlite("look for warm-up events"))?;
        if let Some(last) = last {
            self.after_row = last;
        }
        Ok(last.is_some())
    }

    /// The upstream's events stored after the warm-up.
    fn count(&mut self) -> Result<u64, BenchError> {
        let after = self.after_row;
        let Some(conn) = self.conn()? else {
            return Ok(0);
        };
        let source = format!("upstream:{UPSTREAM}");
        let (count, last): (i64, Option<i64>) = conn
            .query_row(
                "SELECT count(*), max(row_id) FROM events \
                 WHERE row_id > ?1 AND source = ?2 AND namespace != ?3",
                rusqlite::params![after, source, WARMUP_NAMESPACE],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(sqlite("count stored events"))?;
        self.count += count as u64;
        if let Some(last) = last {
            self.after_row = last;
        }
        Ok(self.count)
    }
}

fn sqlite(what: &'static str) -> impl Fn(rusqlite::Error) -> BenchError {
    move |source| BenchError::Sqlite { what, source }
}

fn create_dir(path: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(path).map_err(|source| BenchError::Io {
        context: format!("cannot create {}", path.display()),
        source,
    })
}
