//! `/ui/api/fleet?since=...`: per node (the `node` column: where each event was
//! captured) over `since` (default 24h): its last event, how many events and per hour,
//! and the gaps in its record, from the upstream markers it stored ([`super::gaps`]).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use http::Response;
use serde::Serialize;

use crate::markers::NAMESPACE;
use crate::query::sql::{Dialect, Param};
use crate::query::time::{parse_bound, stored_form};

use super::gaps::GapsError;
use super::params::Params;
use super::reads::{self, ReadError, too_long};
use super::{Body, Ui, UiError, json};

const DEFAULT_SINCE: Duration = Duration::from_secs(24 * 3600);
/// Nodes listed at most (a fleet is tens or hundreds of nodes).
const MAX_NODES: usize = 10_000;

#[derive(Debug, Default, Serialize, PartialEq)]
pub(super) struct Node {
    node: String,
    last_event: Option<String>,
    events: u64,
    events_per_hour: f64,
    gaps: u64,
    gap_seconds: f64,
}

pub(super) async fn fleet(ui: &Ui, query: &str) -> Result<Response<Body>, UiError> {
    let params = Params::parse(query);
    let now = SystemTime::now();
    let since = match params.get("since") {
        Some(text) => parse_bound(text, now).map_err(|message| UiError::BadParam {
            param: "since",
            message,
        })?,
        None => now
            .checked_sub(DEFAULT_SINCE)
            .unwrap_or(SystemTime::UNIX_EPOCH),
    };
    let hours = now
        .duration_since(since)
        .unwrap_or_default()
        .as_secs_f64()
        .max(1.0)
        / 3600.0;
    let nodes = reads::read(ui, move |reader, deadline| {
        let mut nodes = counts(reader, since, hours)?;
        gaps(reader, since, deadline, &mut nodes)?;
        Ok(nodes.into_values().collect::<Vec<_>>())
    })
    .await?;
    let body = serde_json::json!({ "nodes": nodes });
    Ok(json(body.to_string()))
}

/// Events and the last event per node, by SQL (the gateway's own markers, in its
/// namespace, are not counted as a node's events).
fn counts(
    reader: &crate::query::Reader,
    since: SystemTime,
    hours: f64,
) -> Result<BTreeMap<String, Node>, ReadError> {
    let sql = match reader.dialect() {
        Dialect::Sqlite => {
            "SELECT coalesce(node, ''), sum(namespace != ?2), \
             max(CASE WHEN namespace != ?2 THEN timestamp END) \
             FROM events WHERE timestamp >= ?1 GROUP BY 1 ORDER BY 1 LIMIT ?3"
        }
        // Texts compared and sorted as bytes, as SQLite does.
        Dialect::Postgres => {
            "SELECT coalesce(node, ''), count(*) FILTER (WHERE namespace <> $2::text), \
             max(CASE WHEN namespace <> $2::text THEN timestamp END COLLATE \"C\") \
             FROM events WHERE timestamp COLLATE \"C\" >= $1::text \
             GROUP BY 1 ORDER BY coalesce(node, '') COLLATE \"C\" LIMIT $3::bigint"
        }
    };
    let params = [
        Param::Text(stored_form(since)),
        Param::Text(NAMESPACE.to_owned()),
        Param::Integer(MAX_NODES as i64),
    ];
    let mut nodes = BTreeMap::new();
    for row in reader.cells(sql, &params, "running the fleet query")? {
        let (Some(node), Some(events)) = (row[0].text(), row[1].int()) else {
            return Err(reader
                .bad_value(format!("the fleet query returned {row:?}"))
                .into());
        };
        let events = u64::try_from(events).unwrap_or(0);
        let node = Node {
            node: node.to_owned(),
            last_event: row[2].text().map(str::to_owned),
            events,
            events_per_hour: events as f64 / hours,
            ..Node::default()
        };
        nodes.insert(node.node.clone(), node);
    }
    Ok(nodes)
}

/// Adds each node's gaps ([`super::gaps`]) that end after `since` or are still open,
/// each counted from its start (or `since`, if later) to its end (or now).
fn gaps(
    reader: &crate::query::Reader,
    since: SystemTime,
    deadline: std::time::Instant,
    nodes: &mut BTreeMap<String, Node>,
) -> Result<(), ReadError> {
    let found = super::gaps::read(reader, since, deadline).map_err(|e| match e {
        GapsError::Deadline => ReadError::Ui(too_long()),
        GapsError::Store(e) => ReadError::Query(e),
    })?;
    let now = SystemTime::now();
    for gap in found {
        let seconds = gap
            .to
            .unwrap_or(now)
            .duration_since(gap.from.max(since))
            .unwrap_or_default()
            .as_secs_f64();
        let entry = nodes.entry(gap.node.clone()).or_insert_with(|| Node {
            node: gap.node,
            ..Node::default()
        });
        entry.gaps += 1;
        entry.gap_seconds += seconds;
    }
    Ok(())
}
