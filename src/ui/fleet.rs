//! `/ui/api/fleet?since=...`: per node (the `node` column: where each event was
//! captured) over `since` (default 24h): its last event, how many events and per hour,
//! and the gaps in its record: the `/eventgate/upstream/connected` markers it stored,
//! each covering `gap_started_at..connected_at`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use http::Response;
use prost::Message;
use rusqlite::types::Value;
use serde::Serialize;

use crate::markers::{CONNECTED_TOPIC, NAMESPACE};
use crate::proto::eventgate::events::v1::UpstreamConnected;
use crate::query::time::{parse_bound, stored_form};

use super::params::Params;
use super::reads::{self, ReadError, expired, too_long};
use super::{Body, Ui, UiError, json};

const DEFAULT_SINCE: Duration = Duration::from_secs(24 * 3600);
/// Nodes listed at most (a fleet is tens or hundreds of nodes).
const MAX_NODES: usize = 10_000;
/// Gap markers read at most.
const MAX_MARKERS: usize = 100_000;

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
    let sql = "SELECT coalesce(node, ''), sum(namespace != ?2), \
               max(CASE WHEN namespace != ?2 THEN timestamp END) \
               FROM events WHERE timestamp >= ?1 GROUP BY 1 ORDER BY 1 LIMIT ?3";
    let params = [
        Value::Text(stored_form(since)),
        Value::Text(NAMESPACE.to_owned()),
        Value::Integer(MAX_NODES as i64),
    ];
    let mut stmt = reader
        .conn()
        .prepare(sql)
        .map_err(reader.sqlite("preparing the fleet query"))?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params.iter()), |row| {
            let events: i64 = row.get(1)?;
            let events = u64::try_from(events).unwrap_or(0);
            Ok(Node {
                node: row.get(0)?,
                last_event: row.get(2)?,
                events,
                events_per_hour: events as f64 / hours,
                ..Node::default()
            })
        })
        .map_err(reader.sqlite("running the fleet query"))?;
    let mut nodes = BTreeMap::new();
    for node in rows {
        let node = node.map_err(reader.sqlite("reading the fleet query"))?;
        nodes.insert(node.node.clone(), node);
    }
    Ok(nodes)
}

/// Adds each node's gaps: the connected markers stored since `since`, each counting
/// from its `gap_started_at` (or `since`, if later) to its `connected_at`.
fn gaps(
    reader: &crate::query::Reader,
    since: SystemTime,
    deadline: std::time::Instant,
    nodes: &mut BTreeMap<String, Node>,
) -> Result<(), ReadError> {
    let sql = "SELECT coalesce(node, ''), payload FROM events \
               WHERE timestamp >= ?1 AND topic = ?2 AND namespace = ?3 ORDER BY row_id LIMIT ?4";
    let params = [
        Value::Text(stored_form(since)),
        Value::Text(CONNECTED_TOPIC.to_owned()),
        Value::Text(NAMESPACE.to_owned()),
        Value::Integer(MAX_MARKERS as i64),
    ];
    let mut stmt = reader
        .conn()
        .prepare(sql)
        .map_err(reader.sqlite("preparing the gaps query"))?;
    let mut rows = stmt
        .query(rusqlite::params_from_iter(params.iter()))
        .map_err(reader.sqlite("running the gaps query"))?;
    while let Some(row) = rows.next().map_err(reader.sqlite("reading a gap"))? {
        if expired(deadline) {
            return Err(ReadError::Ui(too_long()));
        }
        let node: String = row.get(0).map_err(reader.sqlite("reading a gap"))?;
        let payload: Option<Vec<u8>> = row.get(1).map_err(reader.sqlite("reading a gap"))?;
        let Some(marker) = payload.and_then(|p| UpstreamConnected::decode(p.as_slice()).ok())
        else {
            continue;
        };
        let (Some(from), Some(to)) = (
            marker
                .gap_started_at
                .and_then(|t| SystemTime::try_from(t).ok()),
            marker
                .connected_at
                .and_then(|t| SystemTime::try_from(t).ok()),
        ) else {
            continue;
        };
        let seconds = to
            .duration_since(from.max(since))
            .unwrap_or_default()
            .as_secs_f64();
        let entry = nodes.entry(node.clone()).or_insert_with(|| Node {
            node,
            ..Node::default()
        });
        entry.gaps += 1;
        entry.gap_seconds += seconds;
    }
    Ok(())
}
