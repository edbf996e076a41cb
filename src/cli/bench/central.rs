//! `eventgate bench central`: central ingest into PostgreSQL through one and two
//! central gateways, next to a raw COPY of the same rows in the same run; and the
//! pod timeline query on a generated PostgreSQL store.
//!
//! A command of its own rather than a mode of `bench fleet`: fleet compares a
//! source with a plain Kafka consumer and needs only a broker; this compares storing
//! with the database's own COPY, starts a PostgreSQL cluster, and adds the timeline.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::forwarder::find_tansu;
use super::median;
use crate::bench::central::timeline;
use crate::bench::central::{
    Bench, Forwarded, Input, Measured, Outcome, Row, STALL, Setup, load_average, produce,
};
use crate::bench::daemon::Daemon;
use crate::bench::micros;
use crate::bench::postgres::{Cluster, find_bin};
use crate::cli::CliError;
use crate::forward::postgres::DEFAULT_CONNECTIONS;
use crate::postgres::write::MAX_CONNECTIONS;

#[derive(Debug, Args)]
pub struct CentralBenchArgs {
    /// Messages produced once, then stored by each row of every round (0: no ingest
    /// rows, the timeline only).
    #[arg(long, default_value_t = 100_000, value_parser = parse_events)]
    pub events: u32,
    /// Rounds; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
    /// Rows of the generated store the pod timeline is timed on (0: no timeline).
    #[arg(long, default_value_t = 1_000_000, value_parser = parse_rows)]
    pub rows: u64,
    /// Pods whose timeline is timed, spread over the store's pods.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub pods: u32,
    /// Events per transaction in every row: the gateways' `postgres` forwarders'
    /// `batch.events` (written out only when not the default), the raw COPY's and
    /// the writer's batches.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch: u32,
    /// The gateways' `postgres` forwarders' `connections` (written out only when
    /// not the default) and the writer row's.
    #[arg(long, default_value_t = DEFAULT_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..=MAX_CONNECTIONS as i64))]
    pub connections: u32,
    /// Only these rows (repeatable); every row by default.
    #[arg(long, value_enum, value_name = "ROW")]
    pub only: Vec<RowName>,
    /// The tansu binary (the Kafka-protocol broker).
    #[arg(long, default_value = "tansu")]
    pub tansu: PathBuf,
    /// PostgreSQL's server binaries (postgres, initdb); the newest
    /// /usr/lib/postgresql/<major>/bin by default.
    #[arg(long, value_name = "DIR")]
    pub pg_bin: Option<PathBuf>,
    /// Where the cluster's temporary directory goes (the system's temporary
    /// directory by default); 10 million timeline rows take about 10 GiB.
    #[arg(long, value_name = "DIR")]
    pub pg_parent: Option<PathBuf>,
}

/// The rows, as `--only` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RowName {
    Raw1,
    Raw2,
    Writer,
    One,
    Two,
    OneDefaults,
    TwoDefaults,
}

impl RowName {
    fn row(self) -> Row {
        let gateways = |gateways, setup| Row::Gateways { gateways, setup };
        match self {
            RowName::Raw1 => Row::Raw { connections: 1 },
            RowName::Raw2 => Row::Raw { connections: 2 },
            RowName::Writer => Row::Writer,
            RowName::One => gateways(1, Setup::PostgresOnly),
            RowName::Two => gateways(2, Setup::PostgresOnly),
            RowName::OneDefaults => gateways(1, Setup::Defaults),
            RowName::TwoDefaults => gateways(2, Setup::Defaults),
        }
    }
}

fn parse_events(text: &str) -> Result<u32, String> {
    let n: u32 = text.parse().map_err(|e| format!("{e}"))?;
    match n {
        0 | 1000.. => Ok(n),
        _ => Err("0 (no ingest) or at least 1000".into()),
    }
}

fn parse_rows(text: &str) -> Result<u64, String> {
    let n: u64 = text.parse().map_err(|e| format!("{e}"))?;
    match n {
        0 | 1000..=1_000_000_000 => Ok(n),
        _ => Err("0 (no timeline) or 1000 to 1000000000".into()),
    }
}

pub(super) async fn run(args: CentralBenchArgs) -> Result<ExitCode, CliError> {
    let (_, dir) = super::binary_and_dir()?;
    let bin = match &args.pg_bin {
        Some(bin) => bin.clone(),
        None => find_bin()?,
    };
    let load_before = load_average();
    let cluster = Cluster::start(&bin, args.pg_parent.as_deref()).await?;
    println!(
        "PostgreSQL: {}; machine: {} cores; load average before: {load_before}\n",
        cluster.describe(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if args.events > 0 {
        ingest(&args, &cluster, dir.path()).await?;
    }
    if args.rows > 0 {
        pod_timeline(&args, &cluster).await?;
    }
    println!("\nload average after: {}", load_average());
    drop(cluster);
    Ok(ExitCode::SUCCESS)
}

async fn ingest(
    args: &CentralBenchArgs,
    cluster: &Cluster,
    dir: &std::path::Path,
) -> Result<(), CliError> {
    let events = args.events as usize;
    let (broker, brokers) = Daemon::tansu(&find_tansu(&args.tansu), dir).await?;
    let input = Input::make(events)?;
    produce(&brokers, &input).await?;
    let bench = Bench {
        cluster,
        broker: &broker,
        brokers: &brokers,
        input: &input,
        dir,
        batch: args.batch as usize,
        connections: args.connections as usize,
    };
    let wanted: Vec<Row> = args.only.iter().map(|name| name.row()).collect();
    let rows: Vec<Row> = Row::all()
        .into_iter()
        .filter(|row| wanted.is_empty() || wanted.contains(row))
        .collect();
    // [row][round]: None for a round given up.
    let mut results: Vec<Vec<Option<Measured>>> = vec![Vec::new(); rows.len()];
    let mut stalls = Vec::new();
    let mut not_shared = Vec::new();
    for round in 0..args.rounds {
        // The rows take turns going first.
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.rotate_left(round as usize % rows.len());
        for i in order {
            let outcome = match bench.run(rows[i], round).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    broker.stop(Duration::from_secs(5)).await;
                    return Err(e.into());
                }
            };
            match outcome {
                Outcome::Measured(measured) => {
                    eprintln!(
                        "round {} {:>36}: {:>8.0} events/s (steady {:>8.0}), server CPU {:.2} s (+ {:.2} s watching), eventgate CPU {:.2} s",
                        round + 1,
                        rows[i].label(),
                        measured.rate(),
                        measured.steady_rate(),
                        measured.server_cpu.as_secs_f64(),
                        measured.watching_cpu.as_secs_f64(),
                        measured.eventgate_cpu.as_secs_f64(),
                    );
                    results[i].push(Some(*measured));
                }
                Outcome::Stalled(sessions) => {
                    eprintln!("round {} {:>36}: stalled", round + 1, rows[i].label());
                    results[i].push(None);
                    stalls.push((rows[i], round, sessions));
                }
                Outcome::NotShared(who) => {
                    eprintln!(
                        "round {} {:>36}: not shared by every gateway",
                        round + 1,
                        rows[i].label()
                    );
                    results[i].push(None);
                    not_shared.push((rows[i], round, who));
                }
            }
        }
    }
    broker.stop(Duration::from_secs(5)).await;
    // The same rows, whoever wrote them.
    let digests: std::collections::BTreeMap<&str, Vec<String>> = rows
        .iter()
        .zip(&results)
        .flat_map(|(row, rounds)| {
            rounds
                .iter()
                .flatten()
                .map(move |m| (m.digest.as_deref().unwrap_or("none"), row.label()))
        })
        .fold(Default::default(), |mut by, (digest, label)| {
            by.entry(digest).or_insert_with(Vec::new).push(label);
            by
        });
    if digests.len() > 1 {
        let listed: Vec<String> = digests
            .iter()
            .map(|(digest, labels)| format!("{digest}: {}", labels.join(", ")))
            .collect();
        return Err(CliError::Bench(crate::bench::BenchError::Failed {
            what: format!(
                "the rows stored differ between rows of the table (md5 of their columns but \
                 row_id, seq and written_by): {}",
                listed.join("; ")
            ),
        }));
    }
    print_ingest(args, &rows, &results, &input);
    if let Some(digest) = digests.keys().next() {
        println!(
            "- every round of every row above stored the same rows: md5 of their columns but \
             row_id, seq and written_by, row by row in id order, {digest}"
        );
    }
    if !stalls.is_empty() {
        println!(
            "\nStalled rounds: the gateways stored nothing more for {:?}, and the round was \
             given up (its database dropped, which ends their sessions):",
            STALL
        );
        for (row, round, sessions) in &stalls {
            println!("\n- {}, round {}: {sessions}", row.label(), round + 1);
        }
    }
    if !not_shared.is_empty() {
        println!(
            "\nRounds given up because not every gateway of the row wrote rows and held \
             partitions at the end (every event was stored once):"
        );
        for (row, round, who) in &not_shared {
            println!("\n- {}, round {}: {who}", row.label(), round + 1);
        }
    }
    Ok(())
}

fn seconds(s: f64) -> String {
    format!("{s:.2} s")
}

fn per_event(cpu: Duration, rows: u64) -> String {
    micros((cpu.as_secs_f64() * 1e6 / rows.max(1) as f64).round() as u64)
}

fn split(counts: &[(String, u64)]) -> String {
    if counts.is_empty() {
        return "-".into();
    }
    counts
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The median over the rounds that were measured.
fn med(measured: &[&Measured], f: impl Fn(&Measured) -> f64) -> f64 {
    median(measured.iter().map(|m| f(m)).collect())
}

/// A ratio's goal: how it reads, and whether a value meets it.
type Goal = (&'static str, fn(f64) -> bool);

fn print_ingest(
    args: &CentralBenchArgs,
    rows: &[Row],
    results: &[Vec<Option<Measured>>],
    input: &Input,
) {
    println!(
        "Central ingest: {} messages (a node's container lifecycle events with their pods' \
         workload columns, protobuf values with the kafka forwarder's headers, node `web-1`) \
         produced once into a {}-partition topic of a local tansu broker (in-memory storage); \
         each row, each round, writes them all into a fresh database (schema and the day's \
         partition made before the clock, a CHECKPOINT before each row); median of {} rounds, \
         the rows taking turns going first.\n",
        input.len(),
        crate::bench::fleet::PARTITIONS,
        args.rounds
    );
    println!(
        "| row | configuration | events/s (start to last row) | steady events/s | start to first rows | start to last claim | rows stored | offsets stored at the end | rows by gateway | partitions claimed at the end | looks finding a gateway waiting for a lock | server CPU / event | eventgate CPU / event | broker CPU / event | cores busy | rounds given up |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|");
    for (row, rounds) in rows.iter().zip(results) {
        let measured: Vec<&Measured> = rounds.iter().flatten().collect();
        let stalled = format!("{} of {}", rounds.len() - measured.len(), rounds.len());
        let Some(last) = measured.last() else {
            println!(
                "| {} | {} | - | - | - | - | - | - | - | - | - | - | - | - | - | {stalled} |",
                row.label(),
                row.configuration(args.batch as usize, args.connections as usize)
            );
            continue;
        };
        let gateways = matches!(row, Row::Gateways { .. });
        let time = |f: fn(&Measured) -> Option<Duration>| match gateways {
            true => seconds(med(&measured, |m| f(m).unwrap_or_default().as_secs_f64())),
            false => "-".into(),
        };
        let cpu = |f: fn(&Measured) -> Duration| {
            Duration::from_secs_f64(med(&measured, |m| f(m).as_secs_f64()))
        };
        let lock_waits = match gateways {
            true => format!(
                "{:.0}%",
                med(&measured, |m| {
                    let (waits, looks) = m.lock_waits.unwrap_or_default();
                    100.0 * waits as f64 / looks.max(1) as f64
                })
            ),
            false => "-".into(),
        };
        println!(
            "| {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {lock_waits} | {} | {} | {} | {:.2} | {stalled} |",
            row.label(),
            row.configuration(args.batch as usize, args.connections as usize),
            med(&measured, Measured::rate),
            med(&measured, Measured::steady_rate),
            time(|m| m.first_rows),
            time(|m| m.last_claim),
            last.rows,
            last.offsets_stored.map_or("-".into(), |n| n.to_string()),
            split(&last.by_writer),
            split(&last.partitions_by_owner),
            per_event(cpu(|m| m.server_cpu), last.rows),
            per_event(cpu(|m| m.eventgate_cpu), last.rows),
            per_event(cpu(|m| m.broker_cpu), last.rows),
            med(&measured, |m| {
                (m.server_cpu + m.eventgate_cpu + m.broker_cpu).as_secs_f64()
                    / m.elapsed.as_secs_f64().max(1e-9)
            }),
        );
    }
    let watching: Vec<String> = rows
        .iter()
        .zip(results)
        .filter(|(row, _)| matches!(row, Row::Gateways { .. }))
        .filter_map(|(row, rounds)| {
            let measured: Vec<&Measured> = rounds.iter().flatten().collect();
            (!measured.is_empty()).then(|| {
                format!(
                    "{} {}",
                    row.label(),
                    seconds(med(&measured, |m| m.watching_cpu.as_secs_f64()))
                )
            })
        })
        .collect();
    if !watching.is_empty() {
        println!(
            "\nThe server's CPU for the benchmark's own looks at the gateways' table and sessions \
             (every 10 ms), left out of the server CPU above (medians): {}",
            watching.join(", ")
        );
    }
    println!(
        "\nThe gateways' `postgres` forwarders in those rows (their metrics, summed over the gateways; medians over the rounds):\n"
    );
    println!(
        "| row | transactions | events per batch | time per transaction | time in transactions (of each gateway's clock) | rows found stored before | rows fenced |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (row, rounds) in rows.iter().zip(results) {
        let Row::Gateways { gateways, .. } = row else {
            continue;
        };
        let measured: Vec<&Measured> = rounds.iter().flatten().collect();
        if measured.is_empty() {
            continue;
        }
        let f = |g: fn(&Forwarded) -> f64| med(&measured, |m| m.forwarded.as_ref().map_or(0.0, g));
        let transactions = f(|f| f.transactions);
        println!(
            "| {} | {:.0} | {:.0} | {} | {:.0}% | {:.0} | {:.0} |",
            row.label(),
            transactions,
            f(|f| f.batch_events / f.batches.max(1.0)),
            micros((f(|f| f.transaction_seconds / f.transactions.max(1.0)) * 1e6) as u64),
            med(&measured, |m| {
                let seconds = m.forwarded.as_ref().map_or(0.0, |f| f.transaction_seconds);
                100.0 * seconds / (*gateways as f64 * m.elapsed.as_secs_f64()).max(1e-9)
            }),
            f(|f| f.duplicates),
            f(|f| f.fenced),
        );
    }
    for (row, rounds) in rows.iter().zip(results) {
        let mut waits: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
        for measured in rounds.iter().flatten() {
            for (statement, looks) in &measured.waiting_in {
                *waits.entry(statement).or_insert(0) += looks;
            }
        }
        if waits.is_empty() {
            continue;
        }
        let mut waits: Vec<_> = waits.into_iter().collect();
        waits.sort_by_key(|(_, looks)| std::cmp::Reverse(*looks));
        let listed: Vec<String> = waits
            .iter()
            .map(|(statement, looks)| format!("`{statement}...` ({looks})"))
            .collect();
        println!(
            "- {}: the statements found waiting for a lock (looks, all rounds): {}",
            row.label(),
            listed.join(", ")
        );
    }
    println!();
    let find = |wanted: Row| rows.iter().position(|r| *r == wanted);
    let ratio = |label: &str, top: Row, bottom: Row, goal: Option<Goal>| {
        let (Some(t), Some(b)) = (find(top), find(bottom)) else {
            return;
        };
        for (what, rate) in [
            ("", Measured::rate as fn(&Measured) -> f64),
            (", steady", Measured::steady_rate as fn(&Measured) -> f64),
        ] {
            // Rounds where both rows were measured.
            let rounds: Vec<f64> = results[t]
                .iter()
                .zip(&results[b])
                .filter_map(|(t, b)| Some(rate(t.as_ref()?) / rate(b.as_ref()?).max(1e-9)))
                .collect();
            if rounds.is_empty() {
                println!("- {label}{what}: no round measured both");
                continue;
            }
            let value = median(rounds.clone());
            let listed: Vec<String> = rounds.iter().map(|r| format!("{r:.2}")).collect();
            let verdict = match goal {
                Some((text, met)) if what.is_empty() => format!(
                    "; goal {text}: {}",
                    if met(value) { "met" } else { "not met" }
                ),
                _ => String::new(),
            };
            println!(
                "- {label}{what}: **{value:.2}x** (rounds {}){verdict}",
                listed.join(", ")
            );
        }
    };
    let one = |setup| Row::Gateways { gateways: 1, setup };
    let two = |setup| Row::Gateways { gateways: 2, setup };
    let raw = Row::Raw { connections: 1 };
    ratio(
        "one gateway (postgres only) / raw COPY",
        one(Setup::PostgresOnly),
        raw,
        Some((">= 0.7", |v| v >= 0.7)),
    );
    ratio(
        "two gateways / one (postgres only)",
        two(Setup::PostgresOnly),
        one(Setup::PostgresOnly),
        Some(("> 1.5", |v| v > 1.5)),
    );
    ratio(
        "one gateway (defaults + postgres) / raw COPY",
        one(Setup::Defaults),
        raw,
        Some((">= 0.7", |v| v >= 0.7)),
    );
    ratio(
        "two gateways / one (defaults + postgres)",
        two(Setup::Defaults),
        one(Setup::Defaults),
        Some(("> 1.5", |v| v > 1.5)),
    );
    ratio(
        "raw COPY, 2 connections / 1 (the server's own scaling here)",
        Row::Raw { connections: 2 },
        raw,
        None,
    );
    ratio(
        "forwarder's writer alone / raw COPY (its savepoint and row building)",
        Row::Writer,
        raw,
        None,
    );
    ratio(
        "one gateway (postgres only) / the writer alone (Kafka, spool and pipeline)",
        one(Setup::PostgresOnly),
        Row::Writer,
        None,
    );
    println!(
        "- raw rows prepared before their clock (decoded as the source decodes them, JSON rendered): {} per event",
        micros(input.prepared_per_event.as_micros() as u64)
    );
}

async fn pod_timeline(args: &CentralBenchArgs, cluster: &Cluster) -> Result<(), CliError> {
    let step = (args.rows / 10).max(1_000_000);
    let rows = args.rows;
    let reported = std::sync::atomic::AtomicU64::new(0);
    let measured = timeline::run(cluster, args.rows, args.pods as usize, move |n, elapsed| {
        use std::sync::atomic::Ordering::Relaxed;
        if n >= reported.load(Relaxed) + step || n == rows {
            reported.store(n, Relaxed);
            eprintln!(
                "generated {n} rows in {:.0} s ({:.0} rows/s)",
                elapsed.as_secs_f64(),
                n as f64 / elapsed.as_secs_f64().max(1e-9)
            );
        }
    })
    .await?;
    let gib = measured.bytes as f64 / (1u64 << 30) as f64;
    println!(
        "\nPod timeline: {} rows generated (the query benchmark's generator: 7 days, {} \
         containers, seed 1; the k8s.io containers three to a pod) and copied into a fresh \
         database with binary COPY in {:.0} s ({:.0} rows/s); then VACUUM (ANALYZE); {:.2} GiB \
         with its indexes. {} of the store's {} pods, spread over them; every one's rows read \
         once untimed first (warm cache), then each way below once per pod.\n",
        measured.rows,
        measured.containers,
        measured.load.as_secs_f64(),
        measured.rows as f64 / measured.load.as_secs_f64().max(1e-9),
        gib,
        measured.pods_timed,
        measured.pods_in_store,
    );
    println!(
        "The SQL `query --pod` runs on PostgreSQL:\n\n```sql\n{}\n```\n",
        measured.sql
    );
    println!(
        "| read | store rows | pods timed | rows per pod (min / median / max) | p50 | p99 | max | goal |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---|");
    for timing in &measured.timings {
        let p99 = timing.quantile(0.99);
        let rows_per_pod = |q| timeline::quantile(&timing.rows, q);
        println!(
            "| {} | {} | {} | {} / {} / {} | {} | {} | {} | < 300 ms: {} |",
            timing.name,
            measured.rows,
            timing.times.len(),
            rows_per_pod(0.0),
            rows_per_pod(0.5),
            rows_per_pod(1.0),
            micros(timing.quantile(0.5).as_micros() as u64),
            micros(p99.as_micros() as u64),
            micros(timing.quantile(1.0).as_micros() as u64),
            if p99 < Duration::from_millis(300) {
                "met (p99)"
            } else {
                "not met (p99)"
            },
        );
    }
    let plan = measured.summary();
    println!(
        "\n- plan: {} partition(s) read through their events_pod index (index or bitmap index scans){}, {}; every row through the index: {}",
        plan.index_scans,
        match plan.other_scans {
            0 => String::new(),
            n => format!(", {n} other scan(s) finding {} row(s)", plan.other_rows),
        },
        match plan.sorted {
            true => "then the rows sorted",
            false => "merged in order (no sort)",
        },
        if plan.all_through_the_index() {
            "yes"
        } else {
            "no"
        }
    );
    println!(
        "\nEXPLAIN (ANALYZE, BUFFERS) of that SQL for {}/{}:\n",
        measured.explained.namespace, measured.explained.name
    );
    for line in &measured.plan {
        println!("    {line}");
    }
    cluster.drop_database(timeline::DATABASE).await?;
    Ok(())
}
