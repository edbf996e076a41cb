//! The pod timeline on a PostgreSQL store: the query benchmark's generated events
//! (`bench::query::generate`: realistic containerd payloads, their JSON rendered as
//! the forwarders render it, the `k8s.io` containers three to a pod) copied into a
//! fresh database, then many pods' timelines read:
//!
//! - as `eventgate query --pod` reads them: `query::Reader::each` on a PostgreSQL
//!   store (the filter translated to SQL, every row decoded into an event);
//! - as `eventgate timeline --pod` and `/ui` draw them: a connection opened (as each
//!   `/ui` read opens one), the rows read, the lanes laid out, the SVG written;
//! - the reader's SQL text run by plain tokio-postgres, every column decoded into an
//!   owned value: what the server and the client library take on their own.

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::oneshot;
use tokio_postgres::types::{ToSql, Type};

use super::{copy, failed, on_own_runtime, query_failed, thread_answer};
use crate::bench::BenchError;
use crate::bench::postgres::Cluster;
use crate::bench::query::generate::{Generator, Params};
use crate::event::Event;
use crate::filter::{Filter, quote};
use crate::postgres::{Period, Target, migrate, partitions};
use crate::query::pods::PodName;
use crate::query::sql::Param;
use crate::query::{Query, Reader, RowRange, StoreSpec};
use crate::ui::picture::{self, Group, PictureError, PictureQuery};
use crate::ui::svg;

/// The database the generated store is written to.
pub(crate) const DATABASE: &str = "timeline";

/// Rows per COPY transaction while the store is generated (a bulk load, not what is
/// measured).
const LOAD_ROWS: usize = 50_000;

/// One way of reading the pods' timelines, timed pod by pod.
#[derive(Clone, Debug)]
pub(crate) struct Timing {
    pub name: &'static str,
    /// One timing per pod, sorted.
    pub times: Vec<Duration>,
    /// Rows returned per pod, sorted.
    pub rows: Vec<u64>,
}

impl Timing {
    /// The `q` quantile (0..=1) of the pods' times.
    pub(crate) fn quantile(&self, q: f64) -> Duration {
        quantile(&self.times, q)
    }
}

/// What the timeline measurement found.
#[derive(Clone, Debug)]
pub(crate) struct Measured {
    pub rows: u64,
    pub load: Duration,
    /// The database's size after the load (tables and indexes).
    pub bytes: u64,
    pub containers: u32,
    pub pods_in_store: usize,
    pub pods_timed: usize,
    pub timings: Vec<Timing>,
    /// The SQL `query --pod` runs (its placeholders numbered).
    pub sql: String,
    /// The pod the plan is shown for.
    pub explained: PodName,
    /// `EXPLAIN (ANALYZE, BUFFERS)` of the pod's query.
    pub plan: Vec<String>,
}

impl Measured {
    /// What the plan does, from its lines.
    pub(crate) fn summary(&self) -> PlanSummary {
        summarize(&self.plan)
    }
}

/// How the pod's rows were found, read off the plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PlanSummary {
    /// Partitions scanned through their `events_pod` index (an index scan, or a
    /// bitmap index scan feeding a bitmap heap scan).
    pub index_scans: usize,
    /// Scans that were not (a sequential scan of an empty partition, say), and how
    /// many rows those found.
    pub other_scans: usize,
    pub other_rows: u64,
    /// The rows sorted after the scans (`Sort`), rather than merged in index order.
    pub sorted: bool,
}

impl PlanSummary {
    /// Every row came through a pod index.
    pub(crate) fn all_through_the_index(&self) -> bool {
        self.index_scans > 0 && self.other_rows == 0
    }
}

fn summarize(plan: &[String]) -> PlanSummary {
    let mut summary = PlanSummary::default();
    for line in plan {
        let node = line.trim_start().trim_start_matches("->").trim_start();
        if node.starts_with("Sort ") || node.starts_with("Incremental Sort ") {
            summary.sorted = true;
        }
        let scan = node.split("  (").next().unwrap_or_default();
        // A bitmap heap scan fetches what the bitmap index scan under it found: that
        // one says which index.
        if !scan.contains("Scan") || scan.starts_with("Bitmap Heap Scan") {
            continue;
        }
        if scan.contains("pod_namespace_pod_name_time_idx") {
            summary.index_scans += 1;
        } else {
            summary.other_scans += 1;
            summary.other_rows += actual_rows(node);
        }
    }
    summary
}

/// The `rows=N` of a plan node's `(actual ...)` part (times its loops).
fn actual_rows(node: &str) -> u64 {
    let Some((_, actual)) = node.split_once("(actual ") else {
        return 0;
    };
    let number = |key: &str| -> u64 {
        actual
            .split_once(key)
            .and_then(|(_, rest)| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    number("rows=") * number("loops=").max(1)
}

pub(crate) fn quantile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// The store's parameters: the query benchmark's defaults (7 days, 20,000
/// containers, seed 1) but the row count, and for a smaller store one container per
/// 500 rows (at least 30), so that every pod still has a life to read.
pub(crate) fn params(rows: u64) -> Params {
    Params {
        rows,
        span_secs: 7 * 86_400,
        containers: u32::try_from(rows / 500)
            .unwrap_or(u32::MAX)
            .clamp(30, 20_000),
        seed: 1,
    }
}

/// Generates `rows` events into a fresh database [`DATABASE`], then times the pod
/// timeline of `pods` pods spread over the store's pods.
pub(crate) async fn run(
    cluster: &Cluster,
    rows: u64,
    pods: usize,
    progress: impl Fn(u64, Duration) + Send + 'static,
) -> Result<Measured, BenchError> {
    let params = params(rows);
    cluster.fresh_database(DATABASE).await?;
    let mut client = cluster.connect(DATABASE).await?;
    migrate::migrate(&mut client)
        .await
        .map_err(failed("migrating"))?;
    let started = Instant::now();
    let loaded = load(cluster, &params, progress).await?;
    let load_time = started.elapsed();
    // As autovacuum would in time: statistics for the planner, hint bits set.
    client
        .batch_execute("VACUUM (ANALYZE) events")
        .await
        .map_err(query_failed("VACUUM (ANALYZE)"))?;
    let bytes: i64 = client
        .query_one("SELECT pg_database_size(current_database())", &[])
        .await
        .map_err(query_failed("the database's size"))?
        .get(0);
    let all = Generator::new(&params).pods();
    let chosen = spread(&all, pods);
    let Some(first) = chosen.first().cloned() else {
        return Err(BenchError::Failed {
            what: "the generated store has no pods (too few --rows?)".into(),
        });
    };
    let target = cluster.target(DATABASE).map_err(failed("the cluster"))?;
    let plans = {
        let target = target.clone();
        let chosen = chosen.clone();
        blocking(move || reader_plans(&target, &chosen)).await?
    };
    let sql = plans[0].0.clone();
    // Warm cache: every timed pod's rows read once, untimed, first.
    for (sql, params) in &plans {
        read_plain(&client, sql, params).await?;
    }
    let (query_timing, picture_timing) = {
        let chosen = chosen.clone();
        blocking(move || time_reader(&target, &chosen)).await?
    };
    let mut plain = Timing {
        name: "the same SQL, plain tokio-postgres",
        times: Vec::with_capacity(plans.len()),
        rows: Vec::with_capacity(plans.len()),
    };
    for (sql, params) in &plans {
        let start = Instant::now();
        let n = read_plain(&client, sql, params).await?;
        plain.times.push(start.elapsed());
        plain.rows.push(n);
    }
    let mut timings = vec![query_timing, picture_timing, plain];
    for timing in &mut timings {
        timing.times.sort();
        timing.rows.sort();
    }
    let plan = explain(&client, &plans[0].0, &plans[0].1).await?;
    Ok(Measured {
        rows: loaded,
        load: load_time,
        bytes: u64::try_from(bytes).unwrap_or(0),
        containers: params.containers,
        pods_in_store: all.len(),
        pods_timed: chosen.len(),
        timings,
        sql,
        explained: first,
        plan,
    })
}

/// Runs blocking `work` (the readers are blocking code with runtimes of their own)
/// on a thread of its own.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BenchError> + Send + 'static,
) -> Result<T, BenchError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| BenchError::Failed {
            what: format!("a reader's thread failed: {e}"),
        })?
}

/// `query --pod`'s filter for `pod`: what `pods::pod_filter` narrows to.
fn pod_query(pod: &PodName) -> Result<Query, BenchError> {
    let text = format!(
        "pod.name=={},pod.namespace=={}",
        quote(&pod.name),
        quote(&pod.namespace)
    );
    let filter = Filter::parse(&text).map_err(|e| BenchError::Failed {
        what: format!("filter {text}: {e}"),
    })?;
    Ok(Query {
        filter,
        ..Query::default()
    })
}

fn open(target: &Target) -> Result<Reader, BenchError> {
    Ok(Reader::open_store(
        &StoreSpec::Postgres(Box::new(target.clone())),
        None,
    )?)
}

/// The SQL text and parameters the PostgreSQL reader runs for each pod's query.
fn reader_plans(
    target: &Target,
    pods: &[PodName],
) -> Result<Vec<(String, Vec<Param>)>, BenchError> {
    let reader = open(target)?;
    pods.iter()
        .map(|pod| {
            let plan = pod_query(pod)?.plan_in(RowRange::ALL, reader.binder());
            if plan.recheck {
                return Err(BenchError::Failed {
                    what: format!("the pod filter of {pod} is rechecked in Rust: not all SQL"),
                });
            }
            Ok((plan.sql, plan.params))
        })
        .collect()
}

/// `query --pod` (one reader kept, as the command keeps its connection) and the
/// timeline picture (a connection per picture, as `/ui` connects per read) for
/// every pod.
fn time_reader(target: &Target, pods: &[PodName]) -> Result<(Timing, Timing), BenchError> {
    let reader = open(target)?;
    let mut query = Timing {
        name: "query --pod (Reader::each)",
        times: Vec::with_capacity(pods.len()),
        rows: Vec::with_capacity(pods.len()),
    };
    for pod in pods {
        let narrowed = pod_query(pod)?;
        let start = Instant::now();
        let n = reader.each(&narrowed, RowRange::ALL, |stored| {
            std::hint::black_box(stored);
            true
        })?;
        query.times.push(start.elapsed());
        query.rows.push(n);
    }
    let mut picture = Timing {
        name: "timeline picture (connect + build + SVG)",
        times: Vec::with_capacity(pods.len()),
        rows: Vec::with_capacity(pods.len()),
    };
    for pod in pods {
        let start = Instant::now();
        let reader = open(target)?;
        let request = PictureQuery {
            query: Query::default(),
            pod: Some(pod.clone()),
            group: Group::Pod,
            max_rows: PICTURE_MAX_ROWS,
            deadline: std::time::Instant::now() + Duration::from_secs(600),
        };
        let drawn = picture::build(&reader, &request).map_err(|e| match e {
            PictureError::Store(e) => BenchError::from(e),
            other => BenchError::Failed {
                what: format!("the pod timeline picture of {pod}: {other}"),
            },
        })?;
        std::hint::black_box(svg::render(&drawn));
        picture.times.push(start.elapsed());
        picture.rows.push(drawn.rows);
    }
    Ok((query, picture))
}

/// The picture's row cap, as `eventgate timeline` has it by default.
const PICTURE_MAX_ROWS: u64 = 100_000;

fn bound(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(Param::postgres).collect()
}

/// `count` pods spread evenly over `all`, the first among them.
fn spread(all: &[PodName], count: usize) -> Vec<PodName> {
    if all.is_empty() || count == 0 {
        return Vec::new();
    }
    let count = count.min(all.len());
    (0..count)
        .map(|i| all[i * all.len() / count].clone())
        .collect()
}

/// Copies the generated events into the store: one thread builds them (payloads
/// encoded, JSON rendered), another copies them in.
async fn load(
    cluster: &Cluster,
    params: &Params,
    progress: impl Fn(u64, Duration) + Send + 'static,
) -> Result<u64, BenchError> {
    let (batches_tx, batches) = mpsc::sync_channel::<Vec<Event>>(2);
    let generator_params = params.clone();
    let producer = std::thread::spawn(move || {
        let mut generator = Generator::new(&generator_params);
        loop {
            let batch = generator.batch(LOAD_ROWS);
            if batch.is_empty() {
                break;
            }
            for event in &batch {
                event.payload_json();
            }
            if batches_tx.send(batch).is_err() {
                break;
            }
        }
    });
    let target = cluster.target(DATABASE).map_err(failed("the cluster"))?;
    let (tx, rx) = oneshot::channel();
    std::thread::spawn(move || {
        let copied = on_own_runtime(async move {
            let mut client = target.connect().await.map_err(|e| e.to_string())?;
            let started = Instant::now();
            let mut copied = 0;
            let mut made = BTreeSet::new();
            for batch in batches {
                // The partitions the batch needs, made first, as the writer does.
                let ranges: BTreeSet<_> = batch
                    .iter()
                    .map(|e| Period::Day.range(e.identity.received_at))
                    .filter(|range| !made.contains(range))
                    .collect();
                partitions::ensure(&mut client, &ranges)
                    .await
                    .map_err(|e| e.to_string())?;
                made.extend(ranges);
                copied += copy::copy_batches(&mut client, &batch, LOAD_ROWS, "generated")
                    .await
                    .map_err(|e| crate::postgres::describe(&e))?;
                progress(copied, started.elapsed());
            }
            Ok(copied)
        });
        let _ = tx.send(copied.and_then(|copied| copied));
    });
    let copied = thread_answer(rx.await, "loading the generated store");
    // The loader dropped the receiver by now: the generator stops if it has not.
    if producer.join().is_err() {
        return Err(BenchError::Failed {
            what: "the event generator thread panicked".into(),
        });
    }
    copied
}

/// Runs `sql` with `params`, every column of every row read into an owned value;
/// returns the rows.
async fn read_plain(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[Param],
) -> Result<u64, BenchError> {
    let rows = client
        .query(sql, &bound(params))
        .await
        .map_err(query_failed("the pod's rows"))?;
    let mut bytes = 0usize;
    for row in &rows {
        bytes += decode(row).map_err(|what| BenchError::Failed { what })?;
    }
    std::hint::black_box(bytes);
    Ok(rows.len() as u64)
}

/// Every column of a row as an owned value of its type; returns their size (so
/// nothing is optimized away).
fn decode(row: &tokio_postgres::Row) -> Result<usize, String> {
    let mut size = 0;
    for (i, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let got = match *ty {
            Type::INT8 => row.try_get::<_, Option<i64>>(i).map(|v| v.map_or(0, |_| 8)),
            Type::INT4 => row.try_get::<_, Option<i32>>(i).map(|v| v.map_or(0, |_| 4)),
            Type::TEXT | Type::VARCHAR => row
                .try_get::<_, Option<String>>(i)
                .map(|v| v.map_or(0, |s| s.len())),
            Type::BYTEA => row
                .try_get::<_, Option<Vec<u8>>>(i)
                .map(|v| v.map_or(0, |b| b.len())),
            Type::UUID => row
                .try_get::<_, Option<uuid::Uuid>>(i)
                .map(|v| v.map_or(0, |_| 16)),
            Type::TIMESTAMPTZ => row
                .try_get::<_, Option<SystemTime>>(i)
                .map(|v| v.map_or(0, |_| 12)),
            Type::JSONB | Type::JSON => row
                .try_get::<_, Option<serde_json::Value>>(i)
                .map(|v| v.map_or(0, |v| v.to_string().len())),
            _ => {
                return Err(format!(
                    "column {} has type {ty}, not decoded here",
                    column.name()
                ));
            }
        };
        size += got.map_err(|e| format!("column {}: {e}", column.name()))?;
    }
    Ok(size)
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of `sql`, line by line.
async fn explain(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[Param],
) -> Result<Vec<String>, BenchError> {
    let rows = client
        .query(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"), &bound(params))
        .await
        .map_err(query_failed("EXPLAIN of the pod's query"))?;
    rows.iter()
        .map(|row| row.try_get::<_, String>(0))
        .collect::<Result<_, _>>()
        .map_err(query_failed("reading the plan"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_spread_over_the_store_from_the_first() {
        let all: Vec<PodName> = (0..10)
            .map(|i| PodName {
                namespace: "shop".into(),
                name: format!("app-{i}"),
            })
            .collect();
        let names =
            |pods: Vec<PodName>| -> Vec<String> { pods.into_iter().map(|p| p.name).collect() };
        assert_eq!(names(spread(&all, 3)), ["app-0", "app-3", "app-6"]);
        assert_eq!(names(spread(&all, 50)).len(), 10);
        assert!(spread(&all, 0).is_empty());
        assert!(spread(&[], 5).is_empty());
    }

    #[test]
    fn the_plan_says_which_scans_used_the_pod_index() {
        let plan: Vec<String> = [
            "Sort  (cost=66.54..66.56 rows=9 width=691) (actual time=0.056..0.057 rows=2 loops=1)",
            "  Sort Key: events.\"time\"",
            "  ->  Append  (cost=0.28..66.40 rows=9 width=691) (actual time=0.015..0.052 rows=2 loops=1)",
            "        ->  Index Scan using events_p20240501_pod_namespace_pod_name_time_idx on events_p20240501 events_1  (cost=0.28..8.31 rows=1 width=691) (actual time=0.015..0.015 rows=1 loops=1)",
            "              Index Cond: ((pod_namespace = 'shop'::text) AND (pod_name = 'app-0'::text))",
            "        ->  Index Scan using events_p20240502_pod_namespace_pod_name_time_idx on events_p20240502 events_2  (cost=0.28..8.31 rows=1 width=691) (actual time=0.006..0.006 rows=1 loops=1)",
            "        ->  Seq Scan on events_p20240509 events_9  (cost=0.00..0.01 rows=1 width=691) (actual time=0.001..0.001 rows=0 loops=1)",
            "              Filter: ((pod_namespace = 'shop'::text) AND (pod_name = 'app-0'::text))",
        ]
        .map(String::from)
        .to_vec();
        let summary = summarize(&plan);
        assert_eq!(
            summary,
            PlanSummary {
                index_scans: 2,
                other_scans: 1,
                other_rows: 0,
                sorted: true,
            }
        );
        assert!(summary.all_through_the_index());
        let mut seq = plan.clone();
        seq[6] = seq[6].replace("rows=0 loops=1", "rows=40 loops=1");
        assert!(!summarize(&seq).all_through_the_index());
        let merged: Vec<String> = plan[2..6].to_vec();
        assert!(!summarize(&merged).sorted);
        let bitmap: Vec<String> = [
            "Sort  (cost=876.31..877.12 rows=326 width=616) (actual time=2.644..2.722 rows=1483 loops=1)",
            "  ->  Append  (cost=4.73..862.50 rows=326 width=616) (actual time=0.065..2.400 rows=1483 loops=1)",
            "        ->  Bitmap Heap Scan on events_p20240501 events_1  (cost=4.73..118.12 rows=44 width=615) (actual time=0.065..0.414 rows=201 loops=1)",
            "              ->  Bitmap Index Scan on events_p20240501_pod_namespace_pod_name_time_idx  (cost=0.00..4.72 rows=44 width=0) (actual time=0.043..0.043 rows=201 loops=1)",
        ]
        .map(String::from)
        .to_vec();
        let summary = summarize(&bitmap);
        assert_eq!((summary.index_scans, summary.other_scans), (1, 0));
        assert!(summary.all_through_the_index());
    }

    #[test]
    fn quantiles_pick_from_the_sorted_values() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&values, 0.5), 51);
        assert_eq!(quantile(&values, 0.99), 99);
        assert_eq!(quantile(&values, 1.0), 100);
        assert_eq!(quantile::<u64>(&[], 0.5), 0);
    }
}
