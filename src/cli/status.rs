//! `eventgate status`: a one-screen summary of a running gateway, read from its admin
//! endpoint's `/status`; `eventgate top` redraws it every second.
//!
//! `/status` is JSON the gateway builds from the state readiness reads, rather than
//! the metrics text parsed here: it carries what metrics cannot (an upstream's or a
//! forwarder's last error) and stays readable when metrics are renamed.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::CliError;
use crate::admin::client::{self, FetchError};
use crate::admin::settings::DEFAULT_LISTEN;
use crate::admin::status::Status;
use crate::units::parse_duration;
use crate::units::{human_bytes, human_duration};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The gateway's admin endpoint (its `admin.listen`).
    #[arg(long, value_name = "ADDR", env = "EVENTGATE_ADMIN", default_value = DEFAULT_LISTEN)]
    pub admin: String,
    /// Take a second sample this much later to show delivery rates; "0s" shows
    /// totals only.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub sample: Duration,
    /// How long to wait for each answer.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
}

impl From<FetchError> for CliError {
    fn from(error: FetchError) -> Self {
        CliError::Io {
            context: "cannot read the gateway's status".into(),
            source: std::io::Error::other(error),
        }
    }
}

/// Exits 0 when the gateway is ready, 2 when it is not, 1 when it cannot be asked.
pub(super) async fn run(args: StatusArgs) -> Result<ExitCode, CliError> {
    let first = client::status(&args.admin, args.timeout).await?;
    let (status, previous) = if args.sample.is_zero() {
        (first, None)
    } else {
        tokio::time::sleep(args.sample).await;
        let second = client::status(&args.admin, args.timeout).await?;
        (second, Some(first))
    };
    print!("{}", render(&status, previous.as_ref()));
    Ok(if status.ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// The summary; with an earlier sample, delivery rates per forwarder.
pub(super) fn render(status: &Status, previous: Option<&Status>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "eventgate {} | up {} | {} | next seq {} | {} subscriber(s)",
        status.version,
        human_duration(Duration::from_secs_f64(status.uptime_seconds.max(0.0))),
        if status.ready { "ready" } else { "NOT READY" },
        status.next_seq,
        status.subscribers
    );
    if let Some(spool) = &status.spool {
        let disk = match (spool.disk_free_bytes, spool.min_free_bytes) {
            (Some(free), Some(reserve)) => format!(
                "; disk {} free (refusing below {})",
                human_bytes(free),
                human_bytes(reserve)
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "spool: {} of {} ({:.0}%; not ready from {}), {} segment(s){disk}",
            human_bytes(spool.bytes),
            human_bytes(spool.max_bytes),
            spool.bytes as f64 * 100.0 / spool.max_bytes.max(1) as f64,
            human_bytes(spool.high_water_bytes),
            spool.segments
        );
    }
    let elapsed = previous.map(|p| status.uptime_seconds - p.uptime_seconds);
    let mut rows = vec![
        [
            "FORWARDER",
            "STATE",
            "EVENTS/S",
            "QUEUE",
            "BACKLOG",
            "OLDEST",
            "DELIVERED",
            "RETRIES",
            "DROPPED",
            "DEAD",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for f in &status.forwarders {
        let rate = match (previous, elapsed) {
            (Some(p), Some(secs)) if secs > 0.0 => p
                .forwarders
                .iter()
                .find(|pf| pf.name == f.name)
                .map_or("-".into(), |pf| {
                    format!(
                        "{:.1}",
                        f.delivered.saturating_sub(pf.delivered) as f64 / secs
                    )
                }),
            _ => "-".into(),
        };
        let state = if f.ready {
            f.state.clone()
        } else {
            format!("{} (!)", f.state)
        };
        rows.push(vec![
            f.name.clone(),
            state,
            rate,
            format!("{}/{}", f.queue_events, f.queue_limit_events),
            f.backlog_events.map_or("-".into(), |b| b.to_string()),
            f.oldest_pending_seconds.map_or("-".into(), |s| {
                human_duration(Duration::from_secs_f64(s.max(0.0)))
            }),
            f.delivered.to_string(),
            f.retries.to_string(),
            f.dropped.to_string(),
            f.dead_lettered.to_string(),
        ]);
    }
    out.push('\n');
    table(&mut out, &rows);
    for f in &status.forwarders {
        if let Some(error) = &f.last_error {
            let _ = writeln!(
                out,
                "  {}: attempt {} failed: {error}",
                f.name,
                f.failing_attempts.unwrap_or(0)
            );
        }
    }
    if !status.upstreams.is_empty() {
        out.push('\n');
        let mut rows = vec![vec!["UPSTREAM".to_string(), "STATE".to_string()]];
        for u in &status.upstreams {
            let state = u
                .detail
                .strip_prefix(&format!("upstream {} ({}): ", u.name, u.address))
                .unwrap_or(&u.detail);
            rows.push(vec![
                format!("{} ({})", u.name, u.address),
                state.to_owned(),
            ]);
        }
        table(&mut out, &rows);
    }
    if !status.sources.is_empty() {
        out.push('\n');
        let mut rows = vec![
            [
                "SOURCE",
                "STATE",
                "TOPICS",
                "GROUP",
                "PARTITIONS",
                "TAKEN IN",
                "SKIPPED",
                "RESTARTS",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for s in &status.sources {
            let state = match (s.state.as_str(), s.ready) {
                ("", _) => "-".to_owned(),
                (state, true) => state.to_owned(),
                (state, false) => format!("{state} (!)"),
            };
            rows.push(vec![
                s.name.clone(),
                state,
                s.topics.join(","),
                s.group.clone(),
                partitions(s),
                s.taken_in.to_string(),
                s.skipped.to_string(),
                s.restarts.to_string(),
            ]);
        }
        table(&mut out, &rows);
        for s in &status.sources {
            if let Some(error) = &s.last_error {
                let _ = writeln!(out, "  {}: {error}", s.name);
            }
        }
    }
    if !status.problems.is_empty() {
        out.push_str("\nnot ready:\n");
        for problem in &status.problems {
            let _ = writeln!(out, "  {problem}");
        }
    }
    out
}

/// What a source holds, per topic: `fleet:0,1,3 audit:2`; `none (for 12s)` or `-`
/// (a document from a version that did not say).
fn partitions(source: &crate::admin::status::SourceStatus) -> String {
    if source.partitions.is_empty() {
        return match source.unassigned_seconds {
            Some(seconds) => format!(
                "none (for {})",
                human_duration(Duration::from_secs_f64(seconds.max(0.0)))
            ),
            None => "-".into(),
        };
    }
    let mut by_topic: Vec<(&str, Vec<String>)> = Vec::new();
    for p in &source.partitions {
        match by_topic.iter_mut().find(|(topic, _)| *topic == p.topic) {
            Some((_, ids)) => ids.push(p.partition.to_string()),
            None => by_topic.push((&p.topic, vec![p.partition.to_string()])),
        }
    }
    by_topic
        .iter()
        .map(|(topic, ids)| format!("{topic}:{}", ids.join(",")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Left-aligned columns, two spaces apart; the last column is not padded.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
