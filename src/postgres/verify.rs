//! `audit verify --store postgres://... --node NAME`: a central copy of one node's
//! rows checked against that node's signed checkpoints.
//!
//! A node's audit store chains its rows (`crate::store::chain`) and signs
//! checkpoints of the chain's head: row, seq and hash. Each node row a central
//! gateway stored keeps what that hash covers: the node's seq (`node_seq`), how the
//! event entered the node (`node_source`), and every other hashed value as the node
//! stored it. So the node's chain can be recomputed here, row after row in node seq
//! order, and must reach each signed hash exactly at its seq. Between two
//! checkpoints that proves the copy holds exactly the node's rows, unaltered; the
//! row counts (a checkpoint's row is the node's row_id, and the node's row ids are
//! consecutive) tell a row left out from one added or changed.
//!
//! The two values a PostgreSQL row does not keep as the node hashed them are made
//! again as the node made them: `event` is the rendering of the payload (and the
//! stored jsonb must be that rendering, or the row was edited), `labels` the sorted
//! compact JSON of the label map. A node and its verifier must therefore render
//! payloads alike: the same eventgate release line.
//!
//! Streaming: one row in memory at a time, plus the node's checkpoints.

use std::collections::BTreeMap;

use futures::{StreamExt, pin_mut};
use rusqlite::types::ValueRef;

use super::{PostgresError, Target, migrate};
use crate::event::{Event, EventId, Source};
use crate::proto::containerd::types::Envelope;
use crate::store::chain::{Hash, RowHasher, RowValues, ZERO, hex};
use crate::store::verify::shipped::{Shipped, Signed};
use crate::store::verify::{Kind, Problem};

/// The hashed columns in [`chain::COLUMNS`] order (the node's own `seq` is
/// `node_seq` here, its `source` is `node_source`, its `node_seq` NULL), then the
/// stored jsonb `event` to compare with the rendering.
const ROWS: &str = "SELECT node_seq, id, timestamp, received_at, namespace, topic, type_url, payload, \
     node_source, publisher_uid, publisher_gid, publisher_pid, publisher_subject, origin, \
     origin_clock, pod_name, pod_namespace, pod_uid, container_name, container_kind, image, \
     labels, node, reconciled_from, reason, event, row_id \
     FROM events WHERE node = $1 AND node_seq IS NOT NULL ORDER BY node_seq, id";

/// Which of the node's stores to check against, when its checkpoints name several.
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    pub node: String,
    pub store: Option<String>,
}

/// Why the copy could not be checked (exit 2), as opposed to a problem found in it.
#[derive(Debug, thiserror::Error)]
pub enum CentralVerifyError {
    /// A [`PostgresError`], boxed: that type is the crate's own.
    #[error(transparent)]
    Postgres(Box<dyn std::error::Error + Send + Sync>),
    #[error(
        "none of the {checkpoints} signed checkpoints in {input} is of node {node:?}; they are of {others}"
    )]
    NoCheckpointsOfNode {
        checkpoints: usize,
        input: String,
        node: String,
        others: String,
    },
    #[error(
        "the checkpoints of node {node:?} are of {count} stores ({stores}): choose one with --node-store"
    )]
    SeveralStores {
        node: String,
        count: usize,
        stores: String,
    },
    #[error("no checkpoint of node {node:?} is of store {store} (its stores: {stores})")]
    NoSuchStore {
        node: String,
        store: String,
        stores: String,
    },
    #[error("the store holds no row of node {node:?} taken in from it (node_seq set)")]
    NoRows { node: String },
    #[error(
        "none of the node's {checkpoints} checkpoints falls within the copy's rows (node seq {first} to {last}): nothing could be checked"
    )]
    NothingChecked {
        checkpoints: usize,
        first: i64,
        last: i64,
    },
}

impl From<PostgresError> for CentralVerifyError {
    fn from(error: PostgresError) -> Self {
        CentralVerifyError::Postgres(Box::new(error))
    }
}

/// What the walk found.
#[derive(Debug, Default)]
pub(crate) struct CentralReport {
    pub node: String,
    pub store: String,
    /// The node's rows in the copy, and their node seq range.
    pub rows: u64,
    pub first_seq: Option<i64>,
    pub last_seq: Option<i64>,
    /// Rows proven by a signed checkpoint at or after them.
    pub verified: u64,
    /// Checkpoints whose hash the walk reached exactly.
    pub matched: usize,
    /// Checkpoints of the store in the input (distinct seqs).
    pub checkpoints: usize,
    /// Checkpoints signed before the copy's first row (one of them seeds the walk).
    pub before: usize,
    /// Checkpoints past the copy's last row: events the central has not got yet.
    pub newer: usize,
    /// Rows after the newest checkpoint within the copy: not signed yet.
    pub unsigned: u64,
    /// The checkpoint the walk started from, or `None` for the chain's start.
    pub seeded_at: Option<i64>,
    pub newest: Option<Signed>,
    pub problem: Option<Problem>,
}

/// One checkpoint per seq (the first signed; another hash for the same seq is a
/// conflict).
struct Anchors {
    by_seq: BTreeMap<i64, Signed>,
}

/// Checks the copy of `options.node` in the store at `target` against the node's
/// checkpoints in `shipped` (already opened with the given keys).
pub(crate) async fn verify(
    target: &Target,
    shipped: &Shipped,
    options: &Options,
) -> Result<CentralReport, CentralVerifyError> {
    let (store, anchors, conflict) = anchors(shipped, options)?;
    let mut report = CentralReport {
        node: options.node.clone(),
        store,
        checkpoints: anchors.by_seq.len(),
        ..Default::default()
    };
    if let Some(problem) = conflict {
        report.problem = Some(problem);
        return Ok(report);
    }
    let client = target.connect().await?;
    migrate::check(&client).await?;
    let (first, last): (Option<i64>, Option<i64>) = {
        let row = client
            .query_one(
                "SELECT min(node_seq), max(node_seq) FROM events WHERE node = $1 AND node_seq IS NOT NULL",
                &[&options.node],
            )
            .await
            .map_err(PostgresError::Query)?;
        (row.get(0), row.get(1))
    };
    let (Some(first), Some(last)) = (first, last) else {
        return Err(CentralVerifyError::NoRows {
            node: options.node.clone(),
        });
    };
    report.first_seq = Some(first);
    report.last_seq = Some(last);
    report.before = anchors.by_seq.range(..first).count();
    report.newer = anchors.by_seq.range(last + 1..).count();
    if anchors.by_seq.range(first..=last).next().is_none() {
        return Err(CentralVerifyError::NothingChecked {
            checkpoints: anchors.by_seq.len(),
            first,
            last,
        });
    }
    // The walk starts at the chain's start, or at the newest checkpoint signed before
    // the copy's first row (the copy may begin after the node's first events).
    let seed = anchors.by_seq.range(..first).next_back().map(|(_, s)| s);
    report.seeded_at = seed.and_then(|s| s.checkpoint.seq);
    let mut walk = Walk {
        prev: seed.and_then(|s| s.checkpoint.hash).unwrap_or(ZERO),
        since: seed.map(|s| (s.checkpoint.seq, s.checkpoint.row_id)),
        rows_since: 0,
        hasher: RowHasher::default(),
        pending: anchors.by_seq.range(first..).map(|(_, s)| s).peekable(),
        last_seq: None,
        shipped,
        node: &options.node,
    };
    let rows = client
        .query_raw(ROWS, [&options.node])
        .await
        .map_err(PostgresError::Query)?;
    pin_mut!(rows);
    while let Some(row) = rows.next().await {
        let row = row.map_err(PostgresError::Query)?;
        report.rows += 1;
        match walk.row(&row) {
            Ok(Some(signed)) => {
                report.matched += 1;
                report.verified = report.rows;
                report.newest = Some(signed.clone());
            }
            Ok(None) => {}
            Err(problem) => {
                report.problem = Some(*problem);
                return Ok(report);
            }
        }
    }
    // A checkpoint within the copy's range whose row never came: the copy lacks it.
    if let Some(signed) = walk
        .pending
        .next()
        .filter(|s| s.checkpoint.seq <= Some(last))
    {
        report.problem = Some(Problem {
            kind: Kind::Deleted,
            row: None,
            what: format!(
                "{} names node seq {}, which the copy does not hold (it holds {} to {}): the row was left out or removed",
                describe(shipped, signed),
                signed.checkpoint.seq.unwrap_or_default(),
                first,
                last
            ),
        });
        return Ok(report);
    }
    report.unsigned = report.rows - report.verified;
    Ok(report)
}

/// The store's checkpoints of the node by seq; a second hash for one seq is a
/// conflict (the node signed two histories).
fn anchors(
    shipped: &Shipped,
    options: &Options,
) -> Result<(String, Anchors, Option<Problem>), CentralVerifyError> {
    let of_node: Vec<&Signed> = shipped
        .checkpoints
        .iter()
        .filter(|s| s.checkpoint.node == options.node)
        .collect();
    if of_node.is_empty() {
        let mut others: Vec<&str> = shipped
            .checkpoints
            .iter()
            .map(|s| s.checkpoint.node.as_str())
            .collect();
        others.sort_unstable();
        others.dedup();
        return Err(CentralVerifyError::NoCheckpointsOfNode {
            checkpoints: shipped.checkpoints.len(),
            input: shipped.input.clone(),
            node: options.node.clone(),
            others: match others.is_empty() {
                true => "none".to_owned(),
                false => others.join(", "),
            },
        });
    }
    let mut stores: Vec<&str> = of_node
        .iter()
        .map(|s| s.checkpoint.store.as_str())
        .collect();
    stores.sort_unstable();
    stores.dedup();
    let store = match (&options.store, stores.as_slice()) {
        (Some(wanted), _) if stores.contains(&wanted.as_str()) => wanted.clone(),
        (Some(wanted), _) => {
            return Err(CentralVerifyError::NoSuchStore {
                node: options.node.clone(),
                store: wanted.clone(),
                stores: stores.join(", "),
            });
        }
        (None, [one]) => (*one).to_owned(),
        (None, _) => {
            return Err(CentralVerifyError::SeveralStores {
                node: options.node.clone(),
                count: stores.len(),
                stores: stores.join(", "),
            });
        }
    };
    let mut by_seq: BTreeMap<i64, Signed> = BTreeMap::new();
    let mut conflict = None;
    for signed in of_node.into_iter().filter(|s| s.checkpoint.store == store) {
        let (Some(seq), Some(_)) = (signed.checkpoint.seq, signed.checkpoint.hash) else {
            // Signed before anything was chained: nothing to check.
            continue;
        };
        match by_seq.get(&seq) {
            None => {
                by_seq.insert(seq, signed.clone());
            }
            Some(earlier) if earlier.checkpoint.hash != signed.checkpoint.hash => {
                conflict.get_or_insert_with(|| Problem {
                    kind: Kind::Conflicting,
                    row: None,
                    what: format!(
                        "{} and {} record different hashes for node seq {seq}: the node's key signed two histories",
                        describe(shipped, earlier),
                        describe(shipped, signed)
                    ),
                });
            }
            Some(_) => {}
        }
    }
    Ok((store, Anchors { by_seq }, conflict))
}

/// `the checkpoint signed at TIME for node seq S (row R, line L of INPUT)`.
fn describe(shipped: &Shipped, signed: &Signed) -> String {
    format!(
        "the checkpoint signed at {} for node seq {} (row_id {} on the node, {})",
        crate::store::verify::checkpoints::time(&signed.checkpoint),
        signed.checkpoint.seq.unwrap_or_default(),
        signed.checkpoint.row_id,
        shipped.at(signed.line)
    )
}

struct Walk<'a, I: Iterator<Item = &'a Signed>> {
    prev: Hash,
    /// The checkpoint the current stretch began at (seq, node row_id); `None` for
    /// the chain's start.
    since: Option<(Option<i64>, i64)>,
    rows_since: u64,
    hasher: RowHasher,
    pending: std::iter::Peekable<I>,
    last_seq: Option<i64>,
    shipped: &'a Shipped,
    node: &'a str,
}

impl<'a, I: Iterator<Item = &'a Signed>> Walk<'a, I> {
    /// Chains one row; the checkpoint it reached, if one is signed at its seq.
    fn row(&mut self, row: &tokio_postgres::Row) -> Result<Option<&'a Signed>, Box<Problem>> {
        let stored = Stored::read(row).map_err(|e| self.problem_at(row, Kind::Modified, e))?;
        if self.last_seq == Some(stored.node_seq) {
            return Err(self.problem_at(
                row,
                Kind::Inserted,
                format!(
                    "a second row of node {} claims node seq {}: one of them is not the node's",
                    self.node, stored.node_seq
                ),
            ));
        }
        self.last_seq = Some(stored.node_seq);
        // A checkpoint whose seq the walk passed without a row: the copy lacks it.
        if let Some(signed) = self
            .pending
            .next_if(|s| s.checkpoint.seq.is_some_and(|seq| seq < stored.node_seq))
        {
            return Err(self.problem_at(
                row,
                Kind::Deleted,
                format!(
                    "{} names node seq {}, which the copy does not hold: the row was left out or removed",
                    describe(self.shipped, signed),
                    signed.checkpoint.seq.unwrap_or_default()
                ),
            ));
        }
        let event = stored.rendered();
        if !stored.event_matches(event.as_deref()) {
            return Err(self.problem_at(
                row,
                Kind::Modified,
                "its event column is not its payload's rendering: the JSON was edited".to_owned(),
            ));
        }
        let values = stored.values(event.as_deref());
        self.prev = self.hasher.hash(&self.prev, &values);
        self.rows_since += 1;
        let Some(signed) = self
            .pending
            .next_if(|s| s.checkpoint.seq == Some(stored.node_seq))
        else {
            return Ok(None);
        };
        let signed_hash = signed.checkpoint.hash.unwrap_or(ZERO);
        if signed_hash == self.prev {
            self.since = Some((signed.checkpoint.seq, signed.checkpoint.row_id));
            self.rows_since = 0;
            return Ok(Some(signed));
        }
        let (from, expected) = match self.since {
            Some((seq, row_id)) => (
                format!("after node seq {}", seq.unwrap_or_default()),
                signed.checkpoint.row_id - row_id,
            ),
            None => (
                "from the chain's start".to_owned(),
                signed.checkpoint.row_id,
            ),
        };
        let held = i64::try_from(self.rows_since).unwrap_or(i64::MAX);
        let (kind, why) = match held.cmp(&expected) {
            std::cmp::Ordering::Equal => (
                Kind::Modified,
                "as many rows as the node chained: a row's content differs from the node's"
                    .to_owned(),
            ),
            std::cmp::Ordering::Less => (
                Kind::Deleted,
                format!(
                    "{} fewer than the node chained: rows were left out or removed{}",
                    expected - held,
                    match self.since {
                        None =>
                            " (or the copy begins after the node's first events, with no checkpoint before it)",
                        Some(_) => "",
                    }
                ),
            ),
            std::cmp::Ordering::Greater => (
                Kind::Inserted,
                format!(
                    "{} more than the node chained: rows were added",
                    held - expected
                ),
            ),
        };
        Err(self.problem_at(
            row,
            kind,
            format!(
                "the copy's {held} rows {from} up to node seq {} hash to {}, but {} signed {}: {why}",
                stored.node_seq,
                short(&self.prev),
                describe(self.shipped, signed),
                short(&signed_hash),
            ),
        ))
    }

    fn problem_at(&self, row: &tokio_postgres::Row, kind: Kind, what: String) -> Box<Problem> {
        let row_id: i64 = row.try_get("row_id").unwrap_or_default();
        let seq: Option<i64> = row.try_get("node_seq").ok();
        let time: Option<String> = row.try_get("received_at").ok();
        Box::new(Problem {
            kind,
            row: Some(crate::store::verify::RowRef { row_id, seq, time }),
            what: format!("of node {} (the seq is the node's): {what}", self.node),
        })
    }
}

fn short(hash: &Hash) -> String {
    hex(&hash[..8])
}

/// One row as PostgreSQL holds it, owned.
struct Stored {
    node_seq: i64,
    id: String,
    timestamp: Option<String>,
    received_at: String,
    namespace: String,
    topic: String,
    type_url: Option<String>,
    payload: Option<Vec<u8>>,
    node_source: String,
    publisher: (Option<i64>, Option<i64>, Option<i64>, Option<String>),
    origin: String,
    origin_clock: Option<String>,
    /// pod_name ... image, then labels as the node wrote them.
    workload: [Option<String>; 7],
    node: String,
    reconciled_from: Option<String>,
    reason: Option<String>,
    event: Option<serde_json::Value>,
}

impl Stored {
    fn read(row: &tokio_postgres::Row) -> Result<Self, String> {
        let get_error = |e: tokio_postgres::Error| format!("the row cannot be read: {e}");
        let id: uuid::Uuid = row.try_get(1).map_err(get_error)?;
        let node_source: Option<String> = row.try_get(8).map_err(get_error)?;
        let Some(node_source) = node_source else {
            return Err(
                "it has no node_source (written before schema version 2, or its Kafka record did not say how the event entered the node): its node hash cannot be made again"
                    .to_owned(),
            );
        };
        let mut workload: [Option<String>; 7] = Default::default();
        for (i, column) in workload.iter_mut().enumerate().take(6) {
            *column = row.try_get(15 + i).map_err(get_error)?;
        }
        // The node wrote its labels as serde_json writes a sorted map: compact, keys
        // in byte order, which is also how a parsed object is written again.
        let labels: Option<serde_json::Value> = row.try_get(21).map_err(get_error)?;
        workload[6] = labels.map(|labels| labels.to_string());
        Ok(Self {
            node_seq: row.try_get(0).map_err(get_error)?,
            id: id.hyphenated().to_string(),
            timestamp: row.try_get(2).map_err(get_error)?,
            received_at: row.try_get(3).map_err(get_error)?,
            namespace: row.try_get(4).map_err(get_error)?,
            topic: row.try_get(5).map_err(get_error)?,
            type_url: row.try_get(6).map_err(get_error)?,
            payload: row.try_get(7).map_err(get_error)?,
            node_source,
            publisher: (
                row.try_get(9).map_err(get_error)?,
                row.try_get(10).map_err(get_error)?,
                row.try_get(11).map_err(get_error)?,
                row.try_get(12).map_err(get_error)?,
            ),
            origin: row.try_get(13).map_err(get_error)?,
            origin_clock: row.try_get(14).map_err(get_error)?,
            workload,
            node: row.try_get(22).map_err(get_error)?,
            reconciled_from: row.try_get(23).map_err(get_error)?,
            reason: row.try_get(24).map_err(get_error)?,
            event: row.try_get(25).map_err(get_error)?,
        })
    }

    /// The payload's JSON as the node rendered it for its `event` column.
    fn rendered(&self) -> Option<String> {
        let type_url = self.type_url.clone()?;
        let envelope = Envelope {
            timestamp: None,
            namespace: String::new(),
            topic: String::new(),
            event: Some(prost_types::Any {
                type_url,
                value: self.payload.clone().unwrap_or_default(),
            }),
        };
        let event = Event::new(0, EventId::generate(), Source::Internal, envelope);
        event.payload_json().map(str::to_owned)
    }

    /// Whether the stored jsonb is the rendering (which the writer leaves out when it
    /// holds a NUL, as jsonb cannot).
    fn event_matches(&self, rendered: Option<&str>) -> bool {
        match (rendered, &self.event) {
            (None, None) => true,
            (Some(json), None) => json.contains("\\u0000"),
            (None, Some(_)) => false,
            (Some(json), Some(stored)) => {
                serde_json::from_str::<serde_json::Value>(json).is_ok_and(|v| v == *stored)
            }
        }
    }

    /// The values the node's row hashed, in [`chain::COLUMNS`] order.
    fn values<'v>(&'v self, event: Option<&'v str>) -> RowValues<'v> {
        let text = |s: Option<&'v str>| s.map_or(ValueRef::Null, |s| ValueRef::Text(s.as_bytes()));
        let int = |i: Option<i64>| i.map_or(ValueRef::Null, ValueRef::Integer);
        let w = |i: usize| text(self.workload[i].as_deref());
        [
            ValueRef::Integer(self.node_seq),
            ValueRef::Text(self.id.as_bytes()),
            text(self.timestamp.as_deref()),
            ValueRef::Text(self.received_at.as_bytes()),
            ValueRef::Text(self.namespace.as_bytes()),
            ValueRef::Text(self.topic.as_bytes()),
            text(self.type_url.as_deref()),
            self.payload
                .as_deref()
                .map_or(ValueRef::Null, ValueRef::Blob),
            text(event),
            ValueRef::Text(self.node_source.as_bytes()),
            int(self.publisher.0),
            int(self.publisher.1),
            int(self.publisher.2),
            text(self.publisher.3.as_deref()),
            ValueRef::Text(self.origin.as_bytes()),
            text(self.origin_clock.as_deref()),
            w(0),
            w(1),
            w(2),
            w(3),
            w(4),
            w(5),
            w(6),
            ValueRef::Text(self.node.as_bytes()),
            // The node's own row: its seq is its own.
            ValueRef::Null,
            text(self.reconciled_from.as_deref()),
            text(self.reason.as_deref()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{EventRow, chain};

    /// The values made again from what PostgreSQL keeps are the values the node's
    /// store hashed, for an event with every column set.
    #[test]
    fn a_stored_row_hashes_as_the_nodes_row() {
        let mut workload = crate::testing::pod_workload("shop", "web-0", Some("nginx"));
        workload.image = "nginx:1.27".into();
        workload.labels = [("team", "a"), ("app", "web"), ("ünï", "\"q\"\n")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        workload.reason = Some("OOMKilled".into());
        let event = crate::testing::event(7)
            .upstream("containerd")
            .node("web-1")
            .at_nanos(1_700_000_000, 5)
            .json(
                "containerd.events.TaskExit",
                r#"{"container_id":"c1","id":"c1","pid":42,"exit_status":137}"#,
            )
            .workload(Some(std::sync::Arc::new(workload)))
            .build();
        let row = EventRow::from_event(&event);
        let node_hash = chain::row_hash(&ZERO, &chain::values(7, &row));
        let labels: Option<serde_json::Value> = row
            .workload
            .labels
            .as_deref()
            .map(|l| serde_json::from_str(l).unwrap());
        let stored = Stored {
            node_seq: 7,
            id: row.id.clone(),
            timestamp: row.timestamp.clone(),
            received_at: row.received_at.clone(),
            namespace: row.namespace.to_owned(),
            topic: row.topic.to_owned(),
            type_url: row.type_url.map(str::to_owned),
            payload: row.payload.map(<[u8]>::to_vec),
            node_source: row.source.to_string(),
            publisher: (
                row.publisher.0,
                row.publisher.1,
                row.publisher.2,
                row.publisher.3.map(str::to_owned),
            ),
            origin: row.origin.to_owned(),
            origin_clock: row.origin_clock.map(str::to_owned),
            workload: [
                row.workload.pod_name.map(str::to_owned),
                row.workload.pod_namespace.map(str::to_owned),
                row.workload.pod_uid.map(str::to_owned),
                row.workload.container_name.map(str::to_owned),
                row.workload.container_kind.map(str::to_owned),
                row.workload.image.map(str::to_owned),
                labels.map(|l| l.to_string()),
            ],
            node: "web-1".to_owned(),
            reconciled_from: row.reconciled_from.map(str::to_owned),
            reason: row.reason.map(str::to_owned),
            event: row.event.map(|e| serde_json::from_str(e).unwrap()),
        };
        let rendered = stored.rendered();
        assert_eq!(rendered.as_deref(), row.event);
        assert!(stored.event_matches(rendered.as_deref()));
        let hash = RowHasher::default().hash(&ZERO, &stored.values(rendered.as_deref()));
        assert_eq!(hash, node_hash);
    }
}
