//! `replay --to-address` throughput into a running eventgate, next to its peer in the
//! same run: the same envelopes sent with plain Forward calls from as many concurrent
//! callers, with no store to read, no ordering to keep and no progress to save.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::daemon::Daemon;
use super::forwarder::Sink;
use super::load::{as_events, lifecycle};
use super::{BenchError, sinks};
use crate::event::Event;
use crate::forward::Kinds;
use crate::proto::containerd::services::events::v1::ForwardRequest;
use crate::replay::{self, Options, ProgressMode, Selection, Stop, TargetSpec};
use crate::store::{EventRow, WriterOptions, insert_rows, open_writer};
use crate::tls::ClientTls;

#[derive(Clone, Debug)]
pub(crate) struct ReplayBench {
    pub events: usize,
    /// Events per replay batch (`--batch`); `None`: replay's default.
    pub batch: Option<usize>,
    /// The target gateway's `spool.fsync`.
    pub spool_fsync: &'static str,
}

/// One window size's figures in one round.
#[derive(Clone, Debug)]
pub(crate) struct Round {
    pub in_flight: usize,
    /// `replay --to-address --in-flight N`, from start to summary.
    pub replay: Duration,
    /// The same envelopes as plain Forward calls, N at a time.
    pub forward: Duration,
}

/// Writes the store every round replays: container lifecycles (six events per
/// container, in order, three namespaces), as the `sqlite` forwarder stores them.
pub(crate) fn write_store(path: &Path, events: usize) -> Result<Vec<Arc<Event>>, BenchError> {
    let events = as_events(&lifecycle(events));
    let mut conn = open_writer(path, &WriterOptions::default())?;
    let rows: Vec<EventRow<'_>> = events.iter().map(|e| EventRow::from_event(e)).collect();
    for chunk in rows.chunks(1000) {
        insert_rows(&mut conn, chunk).map_err(|e| BenchError::Sqlite {
            what: "writing the store to replay",
            source: e.source,
        })?;
    }
    Ok(events)
}

/// Replays the whole store into a fresh gateway with `in_flight` calls at once, and sends the
/// same envelopes with plain Forward calls into another fresh gateway.
pub(crate) async fn round(
    eventgate: &Path,
    dir: &Path,
    store: &Path,
    events: &[Arc<Event>],
    bench: &ReplayBench,
    in_flight: usize,
) -> Result<Round, BenchError> {
    let fsync = bench.spool_fsync;
    let target_dir = dir.join(format!("replay-{in_flight}"));
    let target = start(eventgate, &target_dir, fsync).await?;
    let replay = replay_once(store, &target, bench.batch, in_flight).await?;
    target.stop(Duration::from_secs(10)).await;

    let peer_dir = dir.join(format!("forward-{in_flight}"));
    let peer = start(eventgate, &peer_dir, fsync).await?;
    let forward = forward_all(&peer, events, in_flight).await?;
    peer.stop(Duration::from_secs(10)).await;
    remove(&target_dir);
    remove(&peer_dir);
    Ok(Round {
        in_flight,
        replay,
        forward,
    })
}

async fn start(eventgate: &Path, dir: &Path, fsync: &str) -> Result<Daemon, BenchError> {
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
        context: format!("cannot create {}", dir.display()),
        source,
    })?;
    // No forwarders: the target's own work per event is its spool append.
    let config = dir.join("eventgate.toml");
    std::fs::write(&config, sinks::config(&Sink::None, 0, 0, fsync)).map_err(|source| {
        BenchError::Io {
            context: format!("cannot write {}", config.display()),
            source,
        }
    })?;
    let config = config.display().to_string();
    Daemon::eventgate(eventgate, dir, &["--config", &config]).await
}

fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

async fn replay_once(
    store: &Path,
    target: &Daemon,
    batch: Option<usize>,
    in_flight: usize,
) -> Result<Duration, BenchError> {
    let selection = Selection {
        store: store.to_path_buf(),
        filters: Vec::new(),
        since: None,
        until: None,
    };
    let spec = TargetSpec::Address {
        address: target.socket().display().to_string(),
        timeout: Duration::from_secs(5),
        tls: ClientTls::default(),
        in_flight,
    };
    // A fresh replay each time, not a rerun of the last one.
    let _ = std::fs::remove_dir_all(replay::state_dir(store));
    let options = Options {
        batch,
        rate: None,
        restart: false,
        progress: ProgressMode::Never,
    };
    let start = Instant::now();
    replay::run(&Kinds::default(), selection, spec, options, Stop::default())
        .await
        .map_err(|e| BenchError::Failed {
            what: format!("the replay failed: {}", crate::errors::chain(&e)),
        })?;
    Ok(start.elapsed())
}

/// Every envelope once, with `in_flight` callers on one connection, each sending
/// the next envelope when its previous call is answered.
pub(crate) async fn forward_all(
    target: &Daemon,
    events: &[Arc<Event>],
    in_flight: usize,
) -> Result<Duration, BenchError> {
    let address = target.socket().display().to_string();
    let client = crate::client::connect(&address, Duration::from_secs(5)).await?;
    let envelopes: Arc<Vec<_>> = Arc::new(events.iter().map(|e| e.envelope.clone()).collect());
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for lane in 0..in_flight {
        let mut client = client.clone();
        let envelopes = Arc::clone(&envelopes);
        tasks.spawn(async move {
            for envelope in envelopes.iter().skip(lane).step_by(in_flight) {
                let mut request = tonic::Request::new(ForwardRequest {
                    envelope: Some(envelope.clone()),
                });
                if let Ok(value) = envelope.namespace.parse() {
                    request
                        .metadata_mut()
                        .insert(crate::exchange::NAMESPACE_HEADER, value);
                }
                client
                    .forward(request)
                    .await
                    .map_err(|source| BenchError::Rpc {
                        what: "Forward",
                        source,
                    })?;
            }
            Ok::<_, BenchError>(())
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.map_err(|e| BenchError::Failed {
            what: format!("a Forward task failed: {e}"),
        })??;
    }
    Ok(start.elapsed())
}
