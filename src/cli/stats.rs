//! `eventgate stats`: event counts per topic or namespace per time bucket, from the
//! SQLite audit store.

use std::io::Write;
use std::process::ExitCode;
use std::time::SystemTime;

use clap::Args;

use super::CliError;
use super::query::{StoreLocation, format_time, parse_filters, time_bound};
use crate::config::parse_duration;
use crate::query::stats::{Count, GroupBy};
use crate::query::time::bucket_seconds;
use crate::query::{Query, Reader};

#[derive(Debug, Args)]
#[command(
    after_help = "Example: exits per namespace per hour over the last day:\n  \
    eventgate stats --since 1d --by namespace 'topic==\"/tasks/exit\"'"
)]
pub struct StatsArgs {
    #[command(flatten)]
    pub location: StoreLocation,
    /// Events at or after this time: RFC 3339 or a duration back from now (15m, 2h, 7d).
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub since: Option<SystemTime>,
    /// Events before this time (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub until: Option<SystemTime>,
    /// What to count by.
    #[arg(long, value_enum, default_value_t = GroupBy::Topic)]
    pub by: GroupBy,
    /// Bucket width, aligned to the Unix epoch (whole seconds: 1m, 1h, 1d).
    #[arg(long, default_value = "1h", value_parser = bucket)]
    pub bucket: i64,
    /// Bucket times in UTC instead of local time.
    #[arg(long)]
    pub utc: bool,
    /// containerd filters, as for `eventgate query`.
    pub filters: Vec<String>,
}

fn bucket(text: &str) -> Result<i64, String> {
    bucket_seconds(parse_duration(text)?)
}

pub async fn run(args: StatsArgs) -> Result<ExitCode, CliError> {
    let query = Query {
        filter: parse_filters(&args.filters)?,
        since: args.since,
        until: args.until,
        limit: None,
    };
    let path = args.location.path();
    let counts = tokio::task::spawn_blocking(move || {
        Reader::open(&path)?.stats(&query, args.by, args.bucket)
    })
    .await
    .map_err(|e| CliError::Usage(format!("the statistics query stopped unexpectedly: {e}")))??;
    let text = table(&counts, args.by, args.utc);
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is the reader saying it has enough.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    Ok(ExitCode::SUCCESS)
}

/// BUCKET, TOPIC (or NAMESPACE), COUNT: aligned, a total per bucket is left to the
/// reader's tools.
pub fn table(counts: &[Count], by: GroupBy, utc: bool) -> String {
    let group_header = match by {
        GroupBy::Topic => "TOPIC",
        GroupBy::Namespace => "NAMESPACE",
    };
    let rows: Vec<(String, &str, u64)> = counts
        .iter()
        .map(|c| {
            let start = prost_types::Timestamp {
                seconds: c.bucket,
                nanos: 0,
            };
            (format_time(&start, utc), c.group.as_str(), c.count)
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
