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
use std::time::{Duration, Instant};

use tokio::sync::{Barrier, oneshot};
use tokio_util::sync::CancellationToken;

use super::BenchError;
use super::daemon::{Daemon, own_cpu_time};
use super::fleet::{TOPIC, node_events, produce_records, records};
use super::load::lifecycle;
use super::postgres::Cluster;
use crate::config::Config;
use crate::event::Event;
use crate::forward::kafka::Record;
use crate::gateway::Gateway;
use crate::postgres::write::Writer;
use crate::postgres::{Period, migrate, partitions};
use crate::source::kafka::decode;

/// Events per transaction: the `postgres` forwarder's default batch, used by the raw
/// COPY and the writer alone too.
pub(crate) const BATCH: usize = 1000;

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

    /// What the row runs, for the table's second cell.
    pub(crate) fn configuration(self) -> String {
        match self {
            Row::Raw { connections } => format!(
                "tokio-postgres binary COPY straight into the partitioned `events` (no staging, \
                 no ON CONFLICT), {BATCH} rows per transaction, {connections} connection(s) \
                 splitting the rows; rows built before the clock"
            ),
            Row::Writer => format!(
                "`postgres::write::Writer` in-process, batches of {BATCH}: COPY into its \
                 temporary staging table, then INSERT ... ON CONFLICT DO NOTHING, one \
                 transaction per batch"
            ),
            Row::Gateways { gateways, setup } => {
                let forwarders = match setup {
                    Setup::PostgresOnly => "`forwarder` = the `postgres` one only",
                    Setup::Defaults => {
                        "the default forwarders `log` (file) + `audit` (SQLite), and `postgres`"
                    }
                };
                format!(
                    "{gateways} in-process `Gateway`(s), each on its own thread: a kafka \
                     source (`offsets` = the postgres forwarder) in one group, the spool \
                     (`fsync = \"batch\"`), {forwarders}"
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
        Ok(Self {
            records,
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

/// One row's figures in one round.
#[derive(Clone, Debug)]
pub(crate) struct Measured {
    /// From the start (the first COPY; the gateways' start) to the last row committed.
    pub elapsed: Duration,
    /// Gateways: from their start to the first rows committed (joining the group,
    /// claiming the partitions, the first batch).
    pub first_rows: Option<Duration>,
    /// Rows committed at the first look that found any, for the steady rate.
    pub rows_at_first: u64,
    /// Rows in `events` afterwards (counted).
    pub rows: u64,
    /// Rows per `written_by`, for the gateway rows.
    pub by_writer: Vec<(String, u64)>,
    /// Partitions per claim owner at the end, for the gateway rows.
    pub partitions_by_owner: Vec<(String, u64)>,
    pub server_cpu: Duration,
    /// The benchmark's process: the gateways, or the raw client.
    pub eventgate_cpu: Duration,
    pub broker_cpu: Duration,
}

impl Measured {
    /// Rows per second from the start.
    pub(crate) fn rate(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Rows per second from the first rows committed to the last (the gateways'
    /// start-up left out); the whole rate for the raw rows.
    pub(crate) fn steady_rate(&self) -> f64 {
        match self.first_rows {
            Some(first) if self.elapsed > first => {
                (self.rows.saturating_sub(self.rows_at_first)) as f64
                    / (self.elapsed - first).as_secs_f64().max(1e-9)
            }
            _ => self.rate(),
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
    pub(crate) async fn run(&self, row: Row, round: u32) -> Result<Measured, BenchError> {
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
        let cpu = Cpu::now(self);
        let mut measured = match row {
            Row::Raw { connections } => self.raw(&db, connections, &cpu).await?,
            Row::Writer => self.writer(&db, &cpu).await?,
            Row::Gateways { gateways, setup } => {
                self.gateways(&db, &client, &group, gateways, setup, round, &cpu)
                    .await?
            }
        };
        let rows: i64 = client
            .query_one("SELECT count(*) FROM events", &[])
            .await
            .map_err(query_failed("counting rows"))?
            .get(0);
        measured.rows = u64::try_from(rows).unwrap_or(0);
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
        if measured.rows != self.input.len() as u64 {
            return Err(BenchError::Failed {
                what: format!(
                    "{}: {} rows stored of {}",
                    row.label(),
                    measured.rows,
                    self.input.len()
                ),
            });
        }
        Ok(measured)
    }

    /// The raw COPY: `connections` threads, each its share of the rows, started
    /// together once all are connected.
    async fn raw(&self, db: &str, connections: usize, cpu: &Cpu) -> Result<Measured, BenchError> {
        let connections = connections.max(1);
        let barrier = Arc::new(Barrier::new(connections + 1));
        let total = self.input.events.len();
        let share = total.div_ceil(connections).max(1);
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
                                BATCH,
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
        let measured = cpu.measured(self, elapsed, None, 0);
        release.cancel();
        answers.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(measured)
    }

    /// The forwarder's writer alone, on its own thread.
    async fn writer(&self, db: &str, cpu: &Cpu) -> Result<Measured, BenchError> {
        let target = self.cluster.target(db).map_err(failed("the cluster"))?;
        let events = Arc::clone(&self.input.shared);
        let (tx, rx) = oneshot::channel();
        let release = CancellationToken::new();
        let released = release.clone();
        std::thread::spawn(move || {
            let ran = on_own_runtime(async move {
                let mut writer =
                    Writer::new(target, Period::Day, Arc::from("writer"), Arc::from("bench"));
                let written = async {
                    // Connected (and the schema checked) before the clock.
                    writer.client().await.map_err(|e| e.to_string())?;
                    let start = Instant::now();
                    for batch in events.chunks(BATCH) {
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
        let measured = elapsed.map(|elapsed| cpu.measured(self, elapsed, None, 0));
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
    ) -> Result<Measured, BenchError> {
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
        let stop = CancellationToken::new();
        let mut started = Vec::new();
        let mut ended = Vec::new();
        let start = Instant::now();
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
            watch(client, group, total, start).await
        }
        .await;
        // Measured before the gateways stop: stopping is not ingest.
        let measured = watched.map(|(elapsed, first, rows_at_first)| {
            cpu.measured(self, elapsed, Some(first), rows_at_first)
        });
        stop.cancel();
        for rx in ended {
            let _ = rx.await;
        }
        for dir in dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        measured
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

/// Polls the offsets the gateways stored in `group` until they cover `total`
/// messages: (elapsed, time to the first rows, rows then).
async fn watch(
    client: &tokio_postgres::Client,
    group: &str,
    total: u64,
    start: Instant,
) -> Result<(Duration, Duration, u64), BenchError> {
    // The offsets move in each batch's own transaction: their sum is the rows
    // committed (every partition starts at offset 0 in a fresh topic).
    let statement = client
        .prepare(
            "SELECT coalesce(sum(next_offset), 0)::bigint FROM kafka_offsets \
             WHERE consumer_group = $1",
        )
        .await
        .map_err(query_failed("preparing the watch"))?;
    let mut first = None;
    loop {
        let stored: i64 = client
            .query_one(&statement, &[&group])
            .await
            .map_err(query_failed("watching the offsets"))?
            .get(0);
        let stored = u64::try_from(stored).unwrap_or(0);
        if stored > 0 && first.is_none() {
            first = Some((start.elapsed(), stored));
        }
        if stored >= total {
            let (first, at_first) = first.unwrap_or((start.elapsed(), stored));
            return Ok((start.elapsed(), first, at_first));
        }
        if start.elapsed() > DEADLINE {
            return Err(BenchError::Timeout {
                what: format!(
                    "the central gateways stored {stored} of {total} rows within {DEADLINE:?}"
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A central gateway's configuration: node `name`, data in `dir`, the forwarders of
/// `setup`, one kafka source in `group` whose offsets the postgres forwarder keeps.
pub(crate) fn gateway_config(
    name: &str,
    dir: &Path,
    setup: Setup,
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
    format!(
        "node = {name:?}\ndata_dir = {dir:?}\n[admin]\nlisten = \"\"\n[exchange]\nsocket = {socket:?}\n\n\
         {defaults}[[forwarder]]\nname = \"central\"\nkind = \"postgres\"\n{postgres_keys}writer = {name:?}\n\n\
         [[source]]\nkind = \"kafka\"\nbrokers = {brokers:?}\ntopics = [{TOPIC:?}]\ngroup = {group:?}\noffsets = \"central\"\n",
        dir = dir.display().to_string(),
        socket = dir.join("eventgate.sock").display().to_string(),
    )
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
}

impl Cpu {
    fn now(bench: &Bench<'_>) -> Self {
        Self {
            server: bench.cluster.cpu_time(),
            eventgate: own_cpu_time(),
            broker: bench.broker.cpu_time().unwrap_or_default(),
        }
    }

    fn measured(
        &self,
        bench: &Bench<'_>,
        elapsed: Duration,
        first_rows: Option<Duration>,
        rows_at_first: u64,
    ) -> Measured {
        let now = Cpu::now(bench);
        Measured {
            elapsed,
            first_rows,
            rows_at_first,
            rows: 0,
            by_writer: Vec::new(),
            partitions_by_owner: Vec::new(),
            server_cpu: now.server.saturating_sub(self.server),
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
