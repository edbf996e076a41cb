//! Durable append throughput: the spool under many concurrent publishers (each waits
//! for its event to be durable before the next), next to the raw limit of the same
//! disk measured in the same run (one thread writing the same record bytes with one
//! fdatasync per group) and to the same records in a SQLite table.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::BenchError;
use crate::event::{Event, EventId, Source};
use crate::proto::containerd::types::Envelope;
use crate::spool::{Fsync, FullPolicy, Spool, SpoolSettings, record};
use crate::units::ByteSize;

#[derive(Clone, Debug)]
pub(crate) struct SpoolBench {
    pub publishers: usize,
    pub events: usize,
    /// Bytes per record on disk (header, ids and envelope).
    pub size: usize,
}

/// One measured run.
#[derive(Clone, Debug)]
pub(crate) struct Figures {
    pub events: usize,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Append (or group start) to durable, in microseconds.
    pub latency: Histogram<u64>,
    /// Records per write group.
    pub group: f64,
    pub fsyncs: u64,
}

impl Figures {
    pub(crate) fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub(crate) fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / 1048576.0 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// `events` events whose records are `size` bytes each.
pub(crate) fn events(count: usize, size: usize) -> Vec<Event> {
    let base = record_len(&event(1, 0));
    let payload = size.saturating_sub(base);
    (0..count).map(|i| event(i as u64 + 1, payload)).collect()
}

fn event(seq: u64, payload: usize) -> Event {
    let envelope = Envelope {
        timestamp: Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        namespace: "k8s.io".into(),
        topic: "/tasks/exit".into(),
        event: Some(prost_types::Any {
            type_url: "containerd.events.TaskExit".into(),
            value: vec![0x5a; payload],
        }),
    };
    Event::new(seq, EventId::generate(), Source::Publish, envelope)
}

fn record_len(event: &Event) -> usize {
    let mut buf = Vec::new();
    record::encode(event, &mut buf).map_or(0, |len| len)
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> BenchError {
    move |source| BenchError::Io { context, source }
}

/// The spool in `dir` with `fsync`, fed by `bench.publishers` tasks.
pub(crate) async fn spool(
    dir: &Path,
    fsync: Fsync,
    bench: &SpoolBench,
    events: Arc<Vec<Event>>,
) -> Result<Figures, BenchError> {
    let settings = SpoolSettings {
        fsync,
        segment_bytes: ByteSize(64 << 20),
        max_bytes: ByteSize(1 << 40),
        full: FullPolicy::Block,
        block_timeout: Duration::from_secs(5),
        ..SpoolSettings::default()
    };
    let (spool, _) = Spool::open(dir, &settings, &["bench"]).map_err(|e| {
        io(format!("cannot open a spool in {}", dir.display()))(std::io::Error::other(e))
    })?;
    let order = Arc::new(Mutex::new(()));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..bench.publishers {
        let (spool, order, next, events) =
            (spool.clone(), order.clone(), next.clone(), events.clone());
        tasks.push(tokio::spawn(async move {
            let mut latency = new_histogram();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(event) = events.get(i) else { break };
                let sent = Instant::now();
                // The exchange appends under its order lock; so do publishers here.
                let ticket = {
                    let _turn = order
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let placed = Event::with_received_at(
                        spool.next_seq(),
                        event.identity.id,
                        event.identity.received_at,
                        event.identity.source.clone(),
                        event.envelope.clone(),
                    );
                    spool.append(&placed)
                };
                let durable = match ticket {
                    Ok(ticket) => spool.durable(ticket).await,
                    Err(e) => Err(e),
                };
                durable.map_err(|e| e.to_string())?;
                let _ = latency.record(sent.elapsed().as_micros() as u64);
            }
            Ok::<_, String>(latency)
        }));
    }
    let mut latency = new_histogram();
    for task in tasks {
        let mine = task
            .await
            .map_err(|e| BenchError::Timeout {
                what: format!("a publisher task failed: {e}"),
            })?
            .map_err(|e| BenchError::Timeout {
                what: format!("append failed: {e}"),
            })?;
        let _ = latency.add(&mine);
    }
    let elapsed = start.elapsed();
    let stats = spool.stats();
    let _ = spool.close().await;
    Ok(Figures {
        events: events.len(),
        bytes: stats.bytes,
        elapsed,
        latency,
        group: events.len() as f64 / stats.groups.max(1) as f64,
        fsyncs: stats.fsyncs,
    })
}

/// One thread writing the same records to one file, one write and (unless
/// `sync` is false) one fdatasync per `group` records.
pub(crate) async fn raw(
    path: PathBuf,
    events: Arc<Vec<Event>>,
    group: usize,
    sync: bool,
) -> Result<Figures, BenchError> {
    tokio::task::spawn_blocking(move || {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for event in events.iter() {
            let _ = record::encode(event, &mut bytes);
            ends.push(bytes.len());
        }
        let mut file =
            File::create(&path).map_err(io(format!("cannot create {}", path.display())))?;
        let mut latency = new_histogram();
        let mut fsyncs = 0;
        let start = Instant::now();
        let mut from = 0;
        for chunk in ends.chunks(group.max(1)) {
            let began = Instant::now();
            let to = chunk[chunk.len() - 1];
            file.write_all(&bytes[from..to])
                .map_err(io(format!("cannot write {}", path.display())))?;
            if sync {
                file.sync_data()
                    .map_err(io(format!("cannot sync {}", path.display())))?;
                fsyncs += 1;
            }
            from = to;
            let _ = latency.record_n(began.elapsed().as_micros() as u64, chunk.len() as u64);
        }
        Ok(Figures {
            events: ends.len(),
            bytes: bytes.len() as u64,
            elapsed: start.elapsed(),
            latency,
            group: group.max(1) as f64,
            fsyncs,
        })
    })
    .await
    .map_err(|e| BenchError::Timeout {
        what: format!("the raw writer failed: {e}"),
    })?
}

/// The same records as rows of a SQLite table (WAL, synchronous=FULL), one
/// transaction per `group` rows.
pub(crate) async fn sqlite(
    path: PathBuf,
    events: Arc<Vec<Event>>,
    group: usize,
) -> Result<Figures, BenchError> {
    tokio::task::spawn_blocking(move || {
        let sql = |e: rusqlite::Error| BenchError::Timeout {
            what: format!("SQLite: {e}"),
        };
        let mut db = rusqlite::Connection::open(&path).map_err(sql)?;
        db.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE spool (seq INTEGER PRIMARY KEY, id BLOB NOT NULL,
                 received_at INTEGER NOT NULL, source INTEGER NOT NULL, envelope BLOB NOT NULL);",
        )
        .map_err(sql)?;
        let rows: Vec<(i64, Vec<u8>, Vec<u8>)> = events
            .iter()
            .map(|e| {
                (
                    e.seq as i64,
                    e.identity.id.as_bytes().to_vec(),
                    prost::Message::encode_to_vec(&e.envelope),
                )
            })
            .collect();
        let mut latency = new_histogram();
        let mut commits = 0;
        let start = Instant::now();
        for chunk in rows.chunks(group.max(1)) {
            let began = Instant::now();
            let tx = db.transaction().map_err(sql)?;
            {
                let mut insert = tx
                    .prepare_cached("INSERT INTO spool VALUES (?1, ?2, ?3, 0, ?4)")
                    .map_err(sql)?;
                for (seq, id, envelope) in chunk {
                    insert
                        .execute(rusqlite::params![
                            seq,
                            id,
                            1_700_000_000_000_000_000i64,
                            envelope
                        ])
                        .map_err(sql)?;
                }
            }
            tx.commit().map_err(sql)?;
            commits += 1;
            let _ = latency.record_n(began.elapsed().as_micros() as u64, chunk.len() as u64);
        }
        let elapsed = start.elapsed();
        Ok(Figures {
            events: rows.len(),
            // The same logical bytes as the spool's records, so MiB/s compare.
            bytes: events.iter().map(|e| record_len(e) as u64).sum(),
            elapsed,
            latency,
            group: group.max(1) as f64,
            fsyncs: commits,
        })
    })
    .await
    .map_err(|e| BenchError::Timeout {
        what: format!("the SQLite writer failed: {e}"),
    })?
}

fn new_histogram() -> Histogram<u64> {
    super::exchange::new_histogram()
}
