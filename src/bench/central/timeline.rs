//! The pod timeline on a PostgreSQL store: the query benchmark's generated events
//! (`bench::query::generate`: realistic containerd payloads, their JSON rendered as
//! the forwarders render it, the `k8s.io` containers three to a pod) copied into a
//! fresh database, then one pod's rows read in time order, as `query --pod` reads a
//! pod, for many pods.
//!
//! The SQL is the pod timeline's own: the pod's namespace and name, ordered by
//! `time`, which the `events_pod (pod_namespace, pod_name, time)` index of each
//! partition answers in order (PostgreSQL merges the partitions' index scans).

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::oneshot;

use super::{copy, failed, on_own_runtime, query_failed, thread_answer};
use crate::bench::BenchError;
use crate::bench::postgres::Cluster;
use crate::bench::query::generate::{Generator, Params};
use crate::event::Event;
use crate::postgres::{Period, migrate, partitions};
use crate::query::pods::PodName;

/// The database the generated store is written to.
pub(crate) const DATABASE: &str = "timeline";

/// Rows per COPY transaction while the store is generated (a bulk load, not what is
/// measured).
const LOAD_ROWS: usize = 50_000;

/// The pod timeline's SQL: every column of the pod's rows, oldest first.
pub(crate) const POD_SQL: &str = "SELECT row_id, received, id, seq, timestamp, time, received_at, \
     namespace, topic, type_url, payload, event::text, source, publisher_uid, publisher_gid, \
     publisher_pid, publisher_subject, origin, origin_clock, pod_name, pod_namespace, pod_uid, \
     container_name, container_kind, image, labels::text, node, node_seq, reconciled_from, \
     reason, written_by \
     FROM events WHERE pod_namespace = $1 AND pod_name = $2 ORDER BY time";

/// What the timeline measurement found.
#[derive(Clone, Debug)]
pub(crate) struct Measured {
    pub rows: u64,
    pub load: Duration,
    /// The database's size after the load (tables and indexes).
    pub bytes: u64,
    pub pods_in_store: usize,
    /// One timing per pod, sorted.
    pub times: Vec<Duration>,
    /// Rows returned per pod, sorted.
    pub pod_rows: Vec<u64>,
    /// The pod the plan is shown for.
    pub explained: PodName,
    /// `EXPLAIN (ANALYZE, BUFFERS)` of the pod's query.
    pub plan: Vec<String>,
}

impl Measured {
    /// The `q` quantile (0..=1) of the pods' times.
    pub(crate) fn quantile(&self, q: f64) -> Duration {
        quantile(&self.times, q)
    }

    /// What the plan does, from its lines.
    pub(crate) fn summary(&self) -> PlanSummary {
        summarize(&self.plan)
    }
}

/// How the pod's rows were found, read off the plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PlanSummary {
    /// Partitions scanned through their `events_pod` index.
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
        if !scan.contains("Scan") {
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

/// The store's parameters: the query benchmark's defaults but the row count.
pub(crate) fn params(rows: u64) -> Params {
    Params {
        rows,
        span_secs: 7 * 86_400,
        containers: 20_000,
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
    let statement = client
        .prepare(POD_SQL)
        .await
        .map_err(query_failed("preparing the pod timeline"))?;
    // One untimed run first: the connection's plan cache and catalog lookups.
    read_pod(&client, &statement, &first).await?;
    let mut times = Vec::with_capacity(chosen.len());
    let mut pod_rows = Vec::with_capacity(chosen.len());
    for pod in &chosen {
        let start = Instant::now();
        let n = read_pod(&client, &statement, pod).await?;
        times.push(start.elapsed());
        pod_rows.push(n);
    }
    times.sort();
    pod_rows.sort();
    let plan = explain(&client, &first).await?;
    Ok(Measured {
        rows: loaded,
        load: load_time,
        bytes: u64::try_from(bytes).unwrap_or(0),
        pods_in_store: all.len(),
        times,
        pod_rows,
        explained: first,
        plan,
    })
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

/// Reads `pod`'s rows, every column into an owned value; returns how many.
async fn read_pod(
    client: &tokio_postgres::Client,
    statement: &tokio_postgres::Statement,
    pod: &PodName,
) -> Result<u64, BenchError> {
    let rows = client
        .query(statement, &[&pod.namespace, &pod.name])
        .await
        .map_err(query_failed("the pod timeline"))?;
    let mut bytes = 0usize;
    for row in &rows {
        let decoded = decode(row).map_err(query_failed("decoding a pod timeline row"))?;
        bytes += decoded;
    }
    std::hint::black_box(bytes);
    Ok(rows.len() as u64)
}

/// Every column of a row, as owned values; returns their size (so nothing is
/// optimized away).
fn decode(row: &tokio_postgres::Row) -> Result<usize, tokio_postgres::Error> {
    let text = |i: usize| -> Result<usize, tokio_postgres::Error> {
        Ok(row.try_get::<_, Option<String>>(i)?.map_or(0, |s| s.len()))
    };
    let int = |i: usize| -> Result<usize, tokio_postgres::Error> {
        Ok(row.try_get::<_, Option<i64>>(i)?.map_or(0, |_| 8))
    };
    let time = |i: usize| -> Result<usize, tokio_postgres::Error> {
        Ok(row.try_get::<_, Option<SystemTime>>(i)?.map_or(0, |_| 12))
    };
    let mut size = int(0)? + time(1)?;
    size += row.try_get::<_, uuid::Uuid>(2)?.as_bytes().len();
    size += int(3)? + text(4)? + time(5)?;
    for i in 6..=9 {
        size += text(i)?;
    }
    size += row
        .try_get::<_, Option<Vec<u8>>>(10)?
        .map_or(0, |b| b.len());
    size += text(11)? + text(12)?;
    for i in 13..=15 {
        size += int(i)?;
    }
    for i in 16..=26 {
        size += text(i)?;
    }
    size += int(27)?;
    for i in 28..=30 {
        size += text(i)?;
    }
    Ok(size)
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of `pod`'s timeline, line by line.
async fn explain(
    client: &tokio_postgres::Client,
    pod: &PodName,
) -> Result<Vec<String>, BenchError> {
    let rows = client
        .query(
            &format!("EXPLAIN (ANALYZE, BUFFERS) {POD_SQL}"),
            &[&pod.namespace, &pod.name],
        )
        .await
        .map_err(query_failed("EXPLAIN of the pod timeline"))?;
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
