//! Central ingest into PostgreSQL: node gateways' messages, produced once into a
//! local tansu broker, taken in by one and by two central gateways (each a Kafka
//! `[[source]]` whose offsets the `postgres` forwarder's database keeps) into a fresh
//! database, next to the same rows written by a raw tokio-postgres binary COPY in the
//! same run. [`timeline`] times the pod timeline query on a generated store.
//!
//! Every gateway, and the raw client, runs on a thread and runtime of its own, as a
//! separate process would: the benchmark's own runtime only watches the database.

mod copy;
pub(crate) mod timeline;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{Barrier, oneshot};
use tokio_util::sync::CancellationToken;

use super::BenchError;
use super::daemon::{Daemon, own_cpu_time};
use super::fleet::{TOPIC, node_events, produce_records, records};
use super::load::lifecycle;
use super::postgres::Cluster;
use super::postgres::process_cpu_time;
use crate::config::Config;
use crate::event::Event;
use crate::forward::kafka::Record;
use crate::forward::postgres::DEFAULT_CONNECTIONS;
use crate::gateway::Gateway;
use crate::postgres::write::Writer;
use crate::postgres::{Period, migrate, partitions};
use crate::source::kafka::decode;

/// Events per transaction: the `postgres` forwarder's default batch (the raw COPY
/// and the writer alone use the same).
pub(crate) const BATCH: usize = 1000;

/// The gateways' sources' `heartbeat.interval.ms` (librdkafka's default is 3000): a
/// member learns of a rebalance with its next heartbeat, so with the default a
/// second gateway joining after the first was given every partition would wait up
/// to 3 s for its share, most of a round. It matters only when members come and go.
pub(crate) const HEARTBEAT_MS: u32 = 100;

/// How long the gateways may store nothing before the benchmark gives up on a row.
pub(crate) const STALL: Duration = Duration::from_secs(30);

/// How long a central gateway may take to stop.
const STOP_GRACE: Duration = Duration::from_secs(60);

/// How long one row may take before the benchmark gives up.
const DEADLINE: Duration = Duration::from_secs(900);

/// What the central gateways run besides their source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Setup {
    /// Only the `postgres` forwarder (the stripped-down central).
    PostgresOnly,
    /// The default forwarders (`log`, a JSON-lines file, and `audit`, the SQLite
    /// store) and the `postgres` forwarder.
    Defaults,
}

/// One row of the table: who writes the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Row {
    /// tokio-postgres binary COPY into `events`, on `connections` connections.
    Raw { connections: usize },
    /// The `postgres` forwarder's writer (`postgres::write::Writer`) in-process,
    /// handed the events in batches: no Kafka, no spool, no pipeline.
    Writer,
    /// `gateways` central gateways in one consumer group.
    Gateways { gateways: usize, setup: Setup },
}

impl Row {
    /// Every row, in the table's order.
    pub(crate) fn all() -> Vec<Row> {
        vec![
            Row::Raw { connections: 1 },
            Row::Raw { connections: 2 },
            Row::Writer,
            Row::Gateways {
                gateways: 1,
                setup: Setup::PostgresOnly,
            },
            Row::Gateways {
                gateways: 2,
                setup: Setup::PostgresOnly,
            },
            Row::Gateways {
                gateways: 1,
                setup: Setup::Defaults,
            },
            Row::Gateways {
                gateways: 2,
                setup: Setup::Defaults,
            },
        ]
    }

    /// The table's first cell.
    pub(crate) fn label(self) -> String {
        match self {
            Row::Raw { connections: 1 } => "raw COPY, 1 connection".into(),
            Row::Raw { connections } => format!("raw COPY, {connections} connections"),
            Row::Writer => "forwarder's writer alone".into(),
            Row::Gateways { gateways, setup } => {
                let what = match gateways {
                    1 => "1 gateway".to_owned(),
                    n => format!("{n} gateways"),
                };
                match setup {
                    Setup::PostgresOnly => format!("{what}, postgres only"),
                    Setup::Defaults => format!("{what}, defaults + postgres"),
                }
            }
        }
    }

    /// What the row runs with batches of `batch` events and the postgres
    /// forwarder's `connections`, for the table's second cell.
    pub(crate) fn configuration(self, batch: usize, connections: usize) -> String {
        let split = match connections {
            1 => "one transaction per batch".to_owned(),
            n => format!(
                "each batch split over {n} connections, a transaction each, written at once"
            ),
        };
        match self {
            Row::Raw { connections } => format!(
                "tokio-postgres binary COPY straight into the partitioned `events` (no staging, \
                 no ON CONFLICT), {batch} rows per transaction, {connections} connection(s) \
                 splitting the rows; the events decoded and their JSON rendered before the clock"
            ),
            Row::Writer => format!(
                "`postgres::write::Writer` in-process, batches of {batch}, {split}: COPY \
                 straight into `events` (none of the rows is stored before, so never the \
                 staging table and ON CONFLICT)"
            ),
            Row::Gateways { gateways, setup } => {
                let mut keys = Vec::new();
                if batch != BATCH {
                    keys.push(format!("`batch = {{ events = {batch} }}`"));
                }
                if connections != DEFAULT_CONNECTIONS {
                    keys.push(format!("`connections = {connections}`"));
                }
                let batched = match keys.is_empty() {
                    true => String::new(),
                    false => format!(" with {}", keys.join(", ")),
                };
                let forwarders = match setup {
                    Setup::PostgresOnly => {
                        format!("`forwarder` = the `postgres` one{batched} only")
                    }
                    Setup::Defaults => format!(
                        "the default forwarders `log` (file) + `audit` (SQLite), and `postgres`{batched}"
                    ),
                };
                format!(
                    "{gateways} in-process `Gateway`(s), each on its own thread: a kafka \
                     source (`offsets` = the postgres forwarder, `heartbeat.interval.ms` = \
                     {HEARTBEAT_MS}) in one group, the spool (`fsync = \"batch\"`), {forwarders}"
                )
            }
        }
    }

    fn key(self) -> String {
        match self {
            Row::Raw { connections } => format!("raw{connections}"),
            Row::Writer => "writer".into(),
            Row::Gateways { gateways, setup } => format!(
                "gw{gateways}{}",
                match setup {
                    Setup::PostgresOnly => "p",
                    Setup::Defaults => "d",
                }
            ),
        }
    }
}

/// The node events, as produced and as the raw rows.
pub(crate) struct Input {
    records: Vec<Record>,
    /// Decoded from the records as the source decodes them, JSON rendered.
    events: Arc<Vec<Event>>,
    /// The same, shared, for the writer.
    shared: Arc<Vec<Arc<Event>>>,
    /// Their ids: each must be stored exactly once.
    ids: Vec<uuid::Uuid>,
    /// Decoding and rendering, per event: what the raw rows did before their clock.
    pub prepared_per_event: Duration,
}

impl Input {
    /// `events` lifecycle events of node `web-1`'s pods, as its `kafka` forwarder
    /// writes them; and the same decoded as a central source decodes them.
    pub(crate) fn make(events: usize) -> Result<Self, BenchError> {
        let records = records(&node_events(&lifecycle(events), true))?;
        let started = Instant::now();
        let source: Arc<str> = Arc::from("kafka");
        let mut decoded = Vec::with_capacity(records.len());
        for (i, record) in records.iter().enumerate() {
            let message = decode::Message {
                topic: &record.topic,
                partition: 0,
                offset: i as i64,
                headers: record
                    .headers
                    .iter()
                    .map(|(k, v)| (*k, v.as_bytes()))
                    .collect(),
                value: record.value.as_deref(),
            };
            let event = decode::decode(&message, decode_format(), &source).map_err(|e| {
                BenchError::Failed {
                    what: format!("decoding a produced record: {e}"),
                }
            })?;
            let event = Event::from_identity(i as u64 + 1, event.identity, event.envelope);
            // Rendered once, as the pipeline renders it for every forwarder.
            event.payload_json();
            decoded.push(event);
        }
        let prepared_per_event = started.elapsed() / records.len().max(1) as u32;
        let shared: Vec<Arc<Event>> = decoded
            .iter()
            .map(|e| {
                let shared = Event::from_identity(e.seq, e.identity.clone(), e.envelope.clone());
                shared.payload_json();
                Arc::new(shared)
            })
            .collect();
        let ids = decoded
            .iter()
            .map(|e| uuid::Uuid::from_bytes(*e.identity.id.as_bytes()))
            .collect();
        Ok(Self {
            records,
            ids,
            events: Arc::new(decoded),
            shared: Arc::new(shared),
            prepared_per_event,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// The partitions the events' received times fall in.
    fn ranges(&self) -> BTreeSet<partitions::Range> {
        self.events
            .iter()
            .map(|e| Period::Day.range(e.identity.received_at))
            .collect()
    }
}

fn decode_format() -> crate::source::kafka::options::Format {
    crate::source::kafka::options::Format::Auto
}

/// Produces the input's records into the broker (once per run).
pub(crate) async fn produce(brokers: &str, input: &Input) -> Result<(), BenchError> {
    produce_records(brokers, &input.records).await
}

/// How one row's round ended.
#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    Measured(Box<Measured>),
    /// The gateways stopped storing (the server's sessions then, as text).
    Stalled(String),
    /// Not every one of the row's gateways wrote rows and held partitions at the
    /// end: not a figure of that many gateways (who did, as text).
    NotShared(String),
}

/// One row's figures in one round.
#[derive(Clone, Debug)]
pub(crate) struct Measured {
    /// From the start (the first COPY; the gateways' start) to the last row committed.
    pub elapsed: Duration,
    /// Gateways: from their start to the first rows committed (joining the group,
    /// claiming the partitions, the first batch).
    pub first_rows: Option<Duration>,
    /// Gateways: from their start to the last claim of a partition (the group's
    /// last rebalance; with two gateways, the one that split the partitions).
    pub last_claim: Option<Duration>,
    /// Gateways: where the steady rate is taken from, the later of the two above,
    /// and the rows committed by then.
    pub steady_from: Option<(Duration, u64)>,
    /// Rows in `events` afterwards (counted).
    pub rows: u64,
    /// What they hold ([`digest_sql`]): the same in every row of a run.
    pub digest: Option<String>,
    /// Gateways: the sum of the partitions' stored offsets when every row was in:
    /// the messages the offsets say are stored.
    pub offsets_stored: Option<u64>,
    /// Gateways: looks at the server (every 10 ms) that found a gateway waiting for
    /// a lock, of all looks.
    pub lock_waits: Option<(u64, u64)>,
    /// Gateways: the statements found waiting for a lock (their start), and in how
    /// many looks.
    pub waiting_in: Vec<(String, u64)>,
    /// Rows per `written_by`, for the gateway rows.
    pub by_writer: Vec<(String, u64)>,
    /// Partitions per claim owner at the end, for the gateway rows.
    pub partitions_by_owner: Vec<(String, u64)>,
    /// Gateways: what their `postgres` forwarders reported (their metrics).
    pub forwarded: Option<Forwarded>,
    /// The server's, less what the benchmark's own watching cost it.
    pub server_cpu: Duration,
    /// The server's CPU time for the benchmark's watching (the gateway rows' looks
    /// at the table and at the sessions every 10 ms), left out of `server_cpu`.
    pub watching_cpu: Duration,
    /// The benchmark's process: the gateways, or the raw client.
    pub eventgate_cpu: Duration,
    pub broker_cpu: Duration,
}

impl Measured {
    /// Rows per second from the start.
    pub(crate) fn rate(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Rows per second from the first rows committed and the last claim (the
    /// gateways' start-up and the group's rebalances left out) to the last row; the
    /// whole rate for the raw rows.
    pub(crate) fn steady_rate(&self) -> f64 {
        match self.steady_from {
            Some((from, rows)) if self.elapsed > from => {
                (self.rows.saturating_sub(rows)) as f64
                    / (self.elapsed - from).as_secs_f64().max(1e-9)
            }
            _ => self.rate(),
        }
    }
}

/// What the gateways' `postgres` forwarders did in a row, from their metrics (the
/// process's recorder, shared by the gateways in it).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Forwarded {
    /// Batches written (transactions committed or not).
    pub transactions: f64,
    /// Their time, summed over the gateways.
    pub transaction_seconds: f64,
    /// Events in the batches handed to the forwarders.
    pub batch_events: f64,
    pub batches: f64,
    /// Rows the batches inserted, and found stored before (read again).
    pub inserted: f64,
    pub duplicates: f64,
    pub fenced: f64,
}

impl Forwarded {
    /// The forwarders' figures so far.
    fn now() -> Self {
        let Some(handle) = crate::admin::metrics::install() else {
            return Self::default();
        };
        let text = handle.render();
        let sum = |name: &str, labels: &[&str]| -> f64 {
            text.lines()
                .filter(|line| {
                    line.starts_with(name)
                        && line[name.len()..].starts_with('{')
                        && labels.iter().all(|l| line.contains(l))
                })
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let ours = "forwarder=\"central\"";
        Self {
            transactions: sum("eventgate_postgres_transaction_seconds_count", &[ours]),
            transaction_seconds: sum("eventgate_postgres_transaction_seconds_sum", &[ours]),
            batch_events: sum("eventgate_forwarder_batch_events_sum", &[ours]),
            batches: sum("eventgate_forwarder_batch_events_count", &[ours]),
            inserted: sum(
                "eventgate_postgres_rows_total",
                &[ours, "outcome=\"inserted\""],
            ),
            duplicates: sum(
                "eventgate_postgres_rows_total",
                &[ours, "outcome=\"duplicate\""],
            ),
            fenced: sum(
                "eventgate_postgres_rows_total",
                &[ours, "outcome=\"fenced\""],
            ),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            transactions: self.transactions - before.transactions,
            transaction_seconds: self.transaction_seconds - before.transaction_seconds,
            batch_events: self.batch_events - before.batch_events,
            batches: self.batches - before.batches,
            inserted: self.inserted - before.inserted,
            duplicates: self.duplicates - before.duplicates,
            fenced: self.fenced - before.fenced,
        }
    }
}

/// What every row needs.
pub(crate) struct Bench<'a> {
    pub cluster: &'a Cluster,
    pub broker: &'a Daemon,
    pub brokers: &'a str,
    pub input: &'a Input,
    /// The gateways' data directories go under it.
    pub dir: &'a Path,
    /// Events per batch (transaction), every row.
    pub batch: usize,
    /// The postgres forwarder's `connections` (and the writer row's).
    pub connections: usize,
}

fn failed(what: &str) -> impl FnOnce(crate::postgres::PostgresError) -> BenchError + '_ {
    move |e| BenchError::Failed {
        what: format!("{what}: {e}"),
    }
}

fn query_failed(what: &str) -> impl FnOnce(tokio_postgres::Error) -> BenchError + '_ {
    move |e| BenchError::Failed {
        what: format!("{what}: {}", crate::postgres::describe(&e)),
    }
}

impl Bench<'_> {
    /// Runs `row` once into a fresh database, counts what it stored, drops it.
    pub(crate) async fn run(&self, row: Row, round: u32) -> Result<Outcome, BenchError> {
        let db = format!("central_{round}_{}", row.key());
        self.cluster.fresh_database(&db).await?;
        let mut client = self.cluster.connect(&db).await?;
        // The store exists before anyone writes: schema and the day's partition.
        migrate::migrate(&mut client)
            .await
            .map_err(failed("migrating"))?;
        partitions::ensure(&mut client, &self.input.ranges())
            .await
            .map_err(failed("making partitions"))?;
        self.cluster.checkpoint().await?;
        let group = format!("central-{round}-{}", row.key());
        let watcher_pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .map_err(query_failed("asking for the server process"))?
            .get(0);
        let cpu = Cpu::now(self, u32::try_from(watcher_pid).unwrap_or(0));
        let mut measured = match row {
            Row::Raw { connections } => self.raw(&db, connections, &cpu).await?,
            Row::Writer => self.writer(&db, &cpu).await?,
            Row::Gateways { gateways, setup } => {
                match self
                    .gateways(&db, &client, &group, gateways, setup, round, &cpu)
                    .await?
                {
                    Ok(measured) => measured,
                    Err(stalled) => {
                        drop(client);
                        self.cluster.drop_database(&db).await?;
                        return Ok(Outcome::Stalled(stalled));
                    }
                }
            }
        };
        // Every event exactly once: as many rows as events, each id once, and none
        // of the input's ids missing.
        let counted = client
            .query_one(
                "SELECT count(*), count(DISTINCT id), \
                 (SELECT count(*) FROM unnest($1::uuid[]) AS input(id) \
                  WHERE NOT EXISTS (SELECT 1 FROM events WHERE events.id = input.id)) \
                 FROM events",
                &[&self.input.ids],
            )
            .await
            .map_err(query_failed("counting rows"))?;
        let count = |i| u64::try_from(counted.get::<_, i64>(i)).unwrap_or(0);
        let (rows, distinct, missing) = (count(0), count(1), count(2));
        measured.rows = rows;
        measured.digest = client
            .query_one(&digest_sql(), &[])
            .await
            .map_err(query_failed("digesting the rows"))?
            .get(0);
        if matches!(row, Row::Gateways { .. }) {
            measured.by_writer = counts(
                &client,
                "SELECT written_by, count(*) FROM events GROUP BY 1 ORDER BY 1",
            )
            .await?;
            measured.partitions_by_owner = counts(
                &client,
                "SELECT owner, count(*) FROM kafka_offsets GROUP BY 1 ORDER BY 1",
            )
            .await?;
        }
        drop(client);
        self.cluster.drop_database(&db).await?;
        let total = self.input.len() as u64;
        if rows != total || distinct != total || missing != 0 {
            return Err(BenchError::Failed {
                what: format!(
                    "{}: not every event stored exactly once: {rows} rows for {total} events, \
                     {distinct} distinct ids, {missing} of the events missing",
                    row.label(),
                ),
            });
        }
        if let Row::Gateways { gateways, .. } = row
            && (measured.by_writer.len() != gateways
                || measured.partitions_by_owner.len() != gateways)
        {
            return Ok(Outcome::NotShared(format!(
                "rows by gateway: {}; partitions claimed at the end: {}; not a figure of \
                 {gateways} gateways",
                listed(&measured.by_writer),
                listed(&measured.partitions_by_owner),
            )));
        }
        Ok(Outcome::Measured(Box::new(measured)))
    }

    /// The raw COPY: `connections` threads, each its share of the rows, started
    /// together once all are connected.
    async fn raw(&self, db: &str, connections: usize, cpu: &Cpu) -> Result<Measured, BenchError> {
        let connections = connections.max(1);
        let barrier = Arc::new(Barrier::new(connections + 1));
        let total = self.input.events.len();
        let share = total.div_ceil(connections).max(1);
        let batch = self.batch;
        let release = CancellationToken::new();
        let mut done = Vec::new();
        for i in 0..connections {
            let (tx, rx) = oneshot::channel();
            done.push(rx);
            let barrier = Arc::clone(&barrier);
            let target = self.cluster.target(db).map_err(failed("the cluster"))?;
            let events = Arc::clone(&self.input.events);
            let range = (i * share).min(total)..((i + 1) * share).min(total);
            let release = release.clone();
            std::thread::spawn(move || {
                let ran = on_own_runtime(async move {
                    let connected = target.connect().await;
                    barrier.wait().await;
                    let copied = match connected {
                        Ok(mut client) => {
                            let copied = copy::copy_batches(
                                &mut client,
                                &events[range],
                                batch,
                                &format!("raw-{i}"),
                            )
                            .await
                            .map_err(|e| crate::postgres::describe(&e));
                            (copied, Some(client))
                        }
                        Err(e) => (Err(e.to_string()), None),
                    };
                    let (copied, client) = copied;
                    let _ = tx.send(copied);
                    // The connection (and its server process) lives until the CPU
                    // times are read: an ended process is counted once reaped.
                    release.cancelled().await;
                    drop(client);
                });
                if let Err(e) = ran {
                    tracing::error!(error = %e, "a raw COPY thread could not run");
                }
            });
        }
        barrier.wait().await;
        let start = Instant::now();
        let mut answers = Vec::new();
        for rx in done {
            answers.push(thread_answer(rx.await, "the raw COPY"));
        }
        let elapsed = start.elapsed();
        let measured = cpu.measured(self, elapsed);
        release.cancel();
        answers.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(measured)
    }

    /// The forwarder's writer alone, on its own thread.
    async fn writer(&self, db: &str, cpu: &Cpu) -> Result<Measured, BenchError> {
        let target = self.cluster.target(db).map_err(failed("the cluster"))?;
        let events = Arc::clone(&self.input.shared);
        let batch = self.batch;
        let connections = self.connections;
        let (tx, rx) = oneshot::channel();
        let release = CancellationToken::new();
        let released = release.clone();
        std::thread::spawn(move || {
            let ran = on_own_runtime(async move {
                let mut writer =
                    Writer::new(target, Period::Day, Arc::from("writer"), Arc::from("bench"))
                        .connections(connections);
                let written = async {
                    // Connected (and the schema checked) before the clock.
                    writer.connect_all().await.map_err(|e| e.to_string())?;
                    let start = Instant::now();
                    for batch in events.chunks(batch) {
                        writer.write(batch).await.map_err(|e| e.to_string())?;
                    }
                    Ok::<_, String>(start.elapsed())
                }
                .await;
                let _ = tx.send(written);
                // See `raw`.
                released.cancelled().await;
                drop(writer);
            });
            if let Err(e) = ran {
                tracing::error!(error = %e, "the writer's thread could not run");
            }
        });
        let elapsed = thread_answer(rx.await, "the writer");
        let measured = elapsed.map(|elapsed| cpu.measured(self, elapsed));
        release.cancel();
        measured
    }

    /// `count` central gateways in group `group`, until the offsets they stored
    /// cover every message.
    #[allow(clippy::too_many_arguments)]
    async fn gateways(
        &self,
        db: &str,
        client: &tokio_postgres::Client,
        group: &str,
        count: usize,
        setup: Setup,
        round: u32,
        cpu: &Cpu,
    ) -> Result<Result<Measured, String>, BenchError> {
        let mut configs = Vec::new();
        let mut dirs = Vec::new();
        for i in 0..count {
            let name = format!("central-{}", (b'a' + i as u8) as char);
            let dir = self.dir.join(format!("{round}-{db}-{name}"));
            std::fs::create_dir_all(&dir).map_err(|source| BenchError::Io {
                context: format!("cannot create {}", dir.display()),
                source,
            })?;
            let text = gateway_config(
                &name,
                &dir,
                setup,
                (self.batch, self.connections),
                &self.cluster.forwarder_keys(db),
                self.brokers,
                group,
            );
            let config = Config::parse(&text, "(bench)").map_err(|e| BenchError::Failed {
                what: format!("the central gateway's configuration: {e}"),
            })?;
            configs.push(config);
            dirs.push(dir);
        }
        let total = self.input.len() as u64;
        let forwarded = Forwarded::now();
        let stop = CancellationToken::new();
        let mut started = Vec::new();
        let mut ended = Vec::new();
        let start = Instant::now();
        let start_wall = SystemTime::now();
        for config in configs {
            let (started_tx, started_rx) = oneshot::channel();
            let (ended_tx, ended_rx) = oneshot::channel();
            started.push(started_rx);
            ended.push(ended_rx);
            let stop = stop.clone();
            std::thread::spawn(move || {
                let outcome = on_own_runtime(async move {
                    match Gateway::start(&config).await {
                        Ok(gateway) => {
                            let _ = started_tx.send(Ok(()));
                            stop.cancelled().await;
                            gateway.stop().await;
                        }
                        Err(e) => {
                            let _ = started_tx.send(Err(crate::errors::chain(&e)));
                        }
                    }
                });
                let _ = ended_tx.send(outcome);
            });
        }
        let watched = async {
            for rx in started {
                thread_answer(rx.await, "a central gateway's start")?;
            }
            let Watched {
                samples,
                lock_waits,
                waiting_in,
            } = match watch(client, total, start).await? {
                Ok(watched) => watched,
                Err(stalled) => return Ok(Err(stalled)),
            };
            // Measured before the gateways stop: stopping is not ingest.
            let mut measured = cpu.measured(self, start.elapsed());
            measured.forwarded = Some(Forwarded::now().since(forwarded));
            measured.elapsed = samples.last().map_or(measured.elapsed, |(at, _)| *at);
            measured.lock_waits = Some((lock_waits, samples.len() as u64));
            measured.waiting_in = waiting_in.into_iter().collect();
            // What the clock's end claims: every row is in the table.
            let rows: i64 = client
                .query_one("SELECT count(*) FROM events", &[])
                .await
                .map_err(query_failed("counting rows"))?
                .get(0);
            if u64::try_from(rows).unwrap_or(0) != total {
                return Err(BenchError::Failed {
                    what: format!(
                        "the offsets say every row is stored, the table holds {rows} of {total}"
                    ),
                });
            }
            let offsets: i64 = client
                .query_one(
                    "SELECT coalesce(sum(next_offset), 0)::bigint FROM kafka_offsets \
                     WHERE consumer_group = $1",
                    &[&group],
                )
                .await
                .map_err(query_failed("reading the offsets"))?
                .get(0);
            measured.offsets_stored = Some(u64::try_from(offsets).unwrap_or(0));
            let last_claim: Option<f64> = client
                .query_one(
                    "SELECT extract(epoch FROM max(claimed_at))::float8 FROM kafka_offsets \
                     WHERE consumer_group = $1",
                    &[&group],
                )
                .await
                .map_err(query_failed("reading the claims"))?
                .get(0);
            let since = |at: f64| {
                let at = UNIX_EPOCH + Duration::from_secs_f64(at.max(0.0));
                at.duration_since(start_wall).unwrap_or_default()
            };
            measured.last_claim = last_claim.map(since);
            measured.first_rows = samples.iter().find(|(_, n)| *n > 0).map(|(at, _)| *at);
            let from = measured
                .first_rows
                .max(measured.last_claim)
                .unwrap_or_default();
            // The rows committed by then: the last look at or before it.
            let rows_then = samples
                .iter()
                .take_while(|(at, _)| *at <= from)
                .last()
                .map_or(0, |(_, n)| *n);
            measured.steady_from = Some((from, rows_then));
            Ok(Ok(measured))
        }
        .await;
        stop.cancel();
        if !matches!(watched, Ok(Ok(_))) {
            // Stuck gateways may be waiting on each other through the server: ending
            // their sessions (and the database) lets them fail, and stop.
            let _ = self.cluster.drop_database(db).await;
        }
        for rx in ended {
            if tokio::time::timeout(STOP_GRACE, rx).await.is_err() {
                tracing::warn!("a central gateway did not stop within {STOP_GRACE:?}; left behind");
            }
        }
        for dir in dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        watched
    }
}

/// What a benchmark thread answered: its value, or its error as the benchmark's.
fn thread_answer<T>(
    answer: Result<Result<T, String>, oneshot::error::RecvError>,
    what: &str,
) -> Result<T, BenchError> {
    match answer {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(BenchError::Failed {
            what: format!("{what}: {e}"),
        }),
        Err(_) => Err(BenchError::Failed {
            what: format!("{what}: its thread ended without an answer"),
        }),
    }
}

/// What the database's sessions are doing, for a stalled run's error: each one's
/// state, what it waits for, who blocks it, and its query.
async fn sessions(client: &tokio_postgres::Client) -> String {
    let rows = client
        .query(
            "SELECT pid, state, coalesce(wait_event_type, ''), coalesce(wait_event, ''), \
             pg_blocking_pids(pid)::text, left(regexp_replace(query, '\\s+', ' ', 'g'), 160) \
             FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid() ORDER BY pid",
            &[],
        )
        .await;
    match rows {
        Ok(rows) => rows
            .iter()
            .map(|row| {
                format!(
                    "  pid {} {} waiting {}/{} blocked by {}: {}",
                    row.get::<_, i32>(0),
                    row.get::<_, Option<String>>(1).unwrap_or_default(),
                    row.get::<_, String>(2),
                    row.get::<_, String>(3),
                    row.get::<_, String>(4),
                    row.get::<_, String>(5),
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!(
            "  (cannot read pg_stat_activity: {})",
            crate::postgres::describe(&e)
        ),
    }
}

/// What watching the gateways' store saw.
struct Watched {
    /// (time since the start, rows committed), the last at the end.
    samples: Vec<(Duration, u64)>,
    /// Looks that found a gateway's connection waiting for a lock (another's
    /// transaction holding a row it needs).
    lock_waits: u64,
    /// The statements found waiting (their start), and how often.
    waiting_in: std::collections::BTreeMap<String, u64>,
}

/// Polls the gateways' store until `events` holds `total` rows: every look's (time
/// since `start`, rows committed), the last at the end.
///
/// The rows committed are read off the largest `row_id` (one index probe; the
/// sequence hands out ids in insert order, so it runs ahead of the count by at most
/// the batches still uncommitted), and the end is confirmed by a count. Not off the
/// stored Kafka offsets: events a forwarder reads back from the spool (after its
/// queue overflowed, or a restart) carry no offset, and move none.
async fn watch(
    client: &tokio_postgres::Client,
    total: u64,
    start: Instant,
) -> Result<Result<Watched, String>, BenchError> {
    let waiting = client
        .prepare(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 72) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock' \
             AND pid <> pg_backend_pid()",
        )
        .await
        .map_err(query_failed("preparing the watch"))?;
    let top = client
        .prepare("SELECT coalesce(max(row_id), 0) FROM events")
        .await
        .map_err(query_failed("preparing the watch"))?;
    let count = client
        .prepare("SELECT count(*) FROM events")
        .await
        .map_err(query_failed("preparing the watch"))?;
    let mut samples = Vec::new();
    let mut lock_waits = 0;
    let mut waiting_in = std::collections::BTreeMap::new();
    let mut counted_at: Option<Instant> = None;
    // The last time the rows moved, and where they were.
    let mut moved = (Instant::now(), 0);
    loop {
        let waiters = client
            .query(&waiting, &[])
            .await
            .map_err(query_failed("watching the locks"))?;
        lock_waits += u64::from(!waiters.is_empty());
        for waiter in &waiters {
            let statement: Option<String> = waiter.get(0);
            *waiting_in.entry(statement.unwrap_or_default()).or_insert(0) += 1;
        }
        let highest: i64 = client
            .query_one(&top, &[])
            .await
            .map_err(query_failed("watching the rows"))?
            .get(0);
        let highest = u64::try_from(highest).unwrap_or(0);
        samples.push((start.elapsed(), highest.min(total)));
        if highest != moved.1 {
            moved = (Instant::now(), highest);
        } else if moved.0.elapsed() > STALL {
            return Ok(Err(format!(
                "stored about {highest} of {total} rows, then nothing for {STALL:?}; the \
                 database's sessions then:\n{}",
                sessions(client).await
            )));
        }
        // Repeats (an event read again after a rebalance) use ids too: the count
        // decides, at most every 100 ms.
        if highest >= total
            && counted_at.is_none_or(|at| at.elapsed() >= Duration::from_millis(100))
        {
            counted_at = Some(Instant::now());
            let rows: i64 = client
                .query_one(&count, &[])
                .await
                .map_err(query_failed("counting rows"))?
                .get(0);
            if u64::try_from(rows).unwrap_or(0) >= total {
                samples.push((start.elapsed(), total));
                return Ok(Ok(Watched {
                    samples,
                    lock_waits,
                    waiting_in,
                }));
            }
        }
        if start.elapsed() > DEADLINE {
            return Err(BenchError::Timeout {
                what: format!(
                    "the central gateways stored about {highest} of {total} rows within {DEADLINE:?}"
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A central gateway's configuration: node `name`, data in `dir`, the forwarders of
/// `setup` (the postgres one's batch size and connections as given), one kafka
/// source in `group` whose offsets the postgres forwarder keeps.
pub(crate) fn gateway_config(
    name: &str,
    dir: &Path,
    setup: Setup,
    (batch, connections): (usize, usize),
    postgres_keys: &str,
    brokers: &str,
    group: &str,
) -> String {
    let defaults = match setup {
        Setup::PostgresOnly => "",
        Setup::Defaults => {
            "[[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n\n\
             [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n\n"
        }
    };
    // Only a batch size other than the forwarder's default is written out.
    let mut batched = match batch {
        BATCH => String::new(),
        n => format!("batch = {{ events = {n} }}\n"),
    };
    if connections != DEFAULT_CONNECTIONS {
        batched.push_str(&format!("connections = {connections}\n"));
    }
    format!(
        "node = {name:?}\ndata_dir = {dir:?}\n[admin]\nlisten = \"\"\n[exchange]\nsocket = {socket:?}\n\n\
         {defaults}[[forwarder]]\nname = \"central\"\nkind = \"postgres\"\n{postgres_keys}writer = {name:?}\n{batched}\n\
         [[source]]\nkind = \"kafka\"\nbrokers = {brokers:?}\ntopics = [{TOPIC:?}]\ngroup = {group:?}\noffsets = \"central\"\n\
         properties = {{ \"heartbeat.interval.ms\" = \"{HEARTBEAT_MS}\" }}\n",
        dir = dir.display().to_string(),
        socket = dir.join("eventgate.sock").display().to_string(),
    )
}

/// The columns every row writes alike: all but `row_id` (the server's), `seq` (each
/// writer's own numbering) and `written_by` (who wrote it).
fn same_columns() -> impl Iterator<Item = &'static str> {
    copy::COLUMNS
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !matches!(*name, "seq" | "written_by"))
}

/// An md5 of the stored rows' [`same_columns`], row by row in id order: equal for
/// two rows of the table that stored the same events with the same values.
fn digest_sql() -> String {
    format!(
        "SELECT md5(string_agg(md5(row({})::text), '' ORDER BY id, received)) FROM events",
        same_columns().collect::<Vec<_>>().join(", ")
    )
}

/// `name count, name count`, or `none`.
fn listed(counts: &[(String, u64)]) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `(name, count)` rows of `sql`.
async fn counts(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<(String, u64)>, BenchError> {
    let rows = client
        .query(sql, &[])
        .await
        .map_err(query_failed("counting rows per gateway"))?;
    Ok(rows
        .iter()
        .map(|row| {
            let n: i64 = row.get(1);
            (row.get::<_, String>(0), u64::try_from(n).unwrap_or(0))
        })
        .collect())
}

/// CPU times at a row's start.
struct Cpu {
    server: Duration,
    eventgate: Duration,
    broker: Duration,
    /// The server process of the benchmark's own connection (the one that watches
    /// the gateways' rows), and its CPU time: not the row's, and left out of it.
    watcher_pid: u32,
    watcher: Duration,
}

impl Cpu {
    fn now(bench: &Bench<'_>, watcher_pid: u32) -> Self {
        Self {
            server: bench.cluster.cpu_time(),
            eventgate: own_cpu_time(),
            broker: bench.broker.cpu_time().unwrap_or_default(),
            watcher_pid,
            watcher: process_cpu_time(watcher_pid),
        }
    }

    fn measured(&self, bench: &Bench<'_>, elapsed: Duration) -> Measured {
        let now = Cpu::now(bench, self.watcher_pid);
        let watching = now.watcher.saturating_sub(self.watcher);
        Measured {
            elapsed,
            first_rows: None,
            last_claim: None,
            steady_from: None,
            offsets_stored: None,
            lock_waits: None,
            waiting_in: Vec::new(),
            forwarded: None,
            rows: 0,
            digest: None,
            by_writer: Vec::new(),
            partitions_by_owner: Vec::new(),
            server_cpu: now
                .server
                .saturating_sub(self.server)
                .saturating_sub(watching),
            watching_cpu: watching,
            eventgate_cpu: now.eventgate.saturating_sub(self.eventgate),
            broker_cpu: now.broker.saturating_sub(self.broker),
        }
    }
}

/// Runs `future` to its end on a current-thread runtime of its own, on this thread:
/// a gateway or client there has a thread to itself, as in a process of its own.
fn on_own_runtime<T>(future: impl std::future::Future<Output = T>) -> Result<T, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|runtime| runtime.block_on(future))
        .map_err(|e| format!("cannot build a runtime for a benchmark thread: {e}"))
}

/// The load average (1, 5, 15 minutes), for the report.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "unknown".into())
}
