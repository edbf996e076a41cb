//! `eventgate stats`: event counts per topic or namespace per time bucket, or
//! restarts, OOMs and non-zero exits per pod, from the audit store (SQLite, or
//! PostgreSQL with `--store`).

use std::io::Write;
use std::process::ExitCode;
use std::time::SystemTime;

use clap::Args;

use super::CliError;
use super::query::{format_time, parse_filters_on, time_bound};
use super::store::StoreArgs;
use crate::query::pods::{PodCounts, PodName};
use crate::query::stats::{Count, GroupBy};
use crate::query::time::bucket_seconds;
use crate::query::{Query, Reader};
use crate::units::parse_duration;

/// What `--by` groups by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// Events per topic per bucket.
    Topic,
    /// Events per namespace per bucket.
    Namespace,
    /// Events per node (where each was captured) per bucket; rows whose node is
    /// unknown (stored before nodes were kept) count under "(node unknown)".
    Node,
    /// Per Kubernetes pod (namespace/name) over the whole range: restarts, OOM
    /// events and non-zero exits, crash-looping pods first.
    Pod,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example: exits per namespace per hour over the last day:\n  \
    eventgate stats --since 1d --by namespace 'topic==\"/tasks/exit\"'\n\n\
    --by pod counts, per pod, over the whole range (--bucket does not apply):\n  \
    RESTARTS  starts of a container after an earlier start of the same container \
    name in the same pod (by uid), that earlier start possibly before --since\n  \
    OOM       /tasks/oom events (the kernel's OOM killer acted in the container's cgroup)\n  \
    NONZERO   exits of a container's main process with a status other than 0 \
    (not an exec's, not the sandbox's)\n  \
    137       of those, status 137: killed by SIGKILL (an OOM kill, or a stop past its \
    grace period)\n  \
    OOMKILLED of those, the ones with a /tasks/oom of the same container before \
    its next start\n\n\
    Example: the pods that crash-looped in namespace shop today:\n  \
    eventgate stats --since 1d --by pod 'pod.namespace==shop'\n\n\
    Events per node per hour, and one node's events per topic:\n  \
    eventgate stats --by node\n  \
    eventgate stats --node web-1"
)]
pub struct StatsArgs {
    #[command(flatten)]
    pub location: StoreArgs,
    /// Events at or after this time: RFC 3339 or a duration back from now (15m, 2h, 7d).
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub since: Option<SystemTime>,
    /// Events before this time (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub until: Option<SystemTime>,
    /// What to count by.
    #[arg(long, value_enum, default_value_t = By::Topic)]
    pub by: By,
    /// Bucket width, aligned to the Unix epoch (whole seconds: 1m, 1h, 1d); 1h
    /// unless given. Not for --by pod.
    #[arg(long, value_parser = bucket)]
    pub bucket: Option<i64>,
    /// Bucket times in UTC instead of local time.
    #[arg(long)]
    pub utc: bool,
    /// Only events captured on this node: the filter `node==NAME`, AND'd with the
    /// filters given.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// containerd filters, as for `eventgate query`.
    pub filters: Vec<String>,
}

fn bucket(text: &str) -> Result<i64, String> {
    bucket_seconds(parse_duration(text)?)
}

pub(super) async fn run(args: StatsArgs) -> Result<ExitCode, CliError> {
    let query = Query {
        filter: parse_filters_on(&args.filters, args.node.as_deref())?,
        since: args.since,
        until: args.until,
        limit: None,
    };
    let store = args.location.resolve()?;
    let by = match args.by {
        By::Topic => GroupBy::Topic,
        By::Namespace => GroupBy::Namespace,
        By::Node => GroupBy::Node,
        By::Pod if args.bucket.is_some() => {
            return Err(CliError::Usage(
                "--by pod counts over the whole range; --bucket does not apply".to_owned(),
            ));
        }
        By::Pod => {
            let pods = tokio::task::spawn_blocking(move || {
                Reader::open_store(&store, None)?.pod_stats(&query)
            })
            .await
            .map_err(|e| {
                CliError::Usage(format!("the statistics query stopped unexpectedly: {e}"))
            })??;
            return Ok(print(&pod_table(&pods)));
        }
    };
    let bucket = args.bucket.unwrap_or(DEFAULT_BUCKET);
    let counts = tokio::task::spawn_blocking(move || {
        Reader::open_store(&store, None)?.stats(&query, by, bucket)
    })
    .await
    .map_err(|e| CliError::Usage(format!("the statistics query stopped unexpectedly: {e}")))??;
    Ok(print(&table(&counts, by, args.utc)))
}

/// `--bucket` when not given: an hour.
const DEFAULT_BUCKET: i64 = 3600;

fn print(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is the reader saying it has enough.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    ExitCode::SUCCESS
}

/// POD (namespace/name) and its counts, aligned, in the order given.
pub(super) fn pod_table(pods: &[(PodName, PodCounts)]) -> String {
    const HEADERS: [&str; 6] = ["POD", "RESTARTS", "OOM", "NONZERO", "137", "OOMKILLED"];
    let names: Vec<String> = pods.iter().map(|(pod, _)| pod.to_string()).collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(HEADERS[0].len());
    let [pod, restarts, oom, nonzero, killed, oom_killed] = HEADERS;
    let mut out = format!("{pod:width$}  {restarts}  {oom}  {nonzero}  {killed}  {oom_killed}\n");
    for (name, (_, c)) in names.iter().zip(pods) {
        out.push_str(&format!(
            "{name:width$}  {:>8}  {:>3}  {:>7}  {:>3}  {:>9}\n",
            c.restarts, c.ooms, c.nonzero_exits, c.killed, c.oom_killed
        ));
    }
    out
}

/// BUCKET, TOPIC (or NAMESPACE), COUNT: aligned, a total per bucket is left to the
/// reader's tools.
pub(super) fn table(counts: &[Count], by: GroupBy, utc: bool) -> String {
    let group_header = match by {
        GroupBy::Topic => "TOPIC",
        GroupBy::Namespace => "NAMESPACE",
        GroupBy::Node => "NODE",
    };
    let rows: Vec<(String, &str, u64)> = counts
        .iter()
        .map(|c| {
            let start = prost_types::Timestamp {
                seconds: c.bucket,
                nanos: 0,
            };
            // With a space, which no node name has, so it cannot be taken for one.
            let group = match (by, c.group.as_str()) {
                (GroupBy::Node, "") => "(node unknown)",
                (_, group) => group,
            };
            (format_time(&start, utc), group, c.count)
        })
        .collect();
    let time = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(6);
    let group = rows
        .iter()
        .map(|r| r.1.chars().count())
        .max()
        .unwrap_or(0)
        .max(group_header.len());
    let mut out = format!("{:time$}  {group_header:group$}  COUNT\n", "BUCKET");
    for (when, name, count) in rows {
        out.push_str(&format!("{when:time$}  {name:group$}  {count}\n"));
    }
    out
}
