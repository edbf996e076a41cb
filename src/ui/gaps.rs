//! Where the record broke, from the markers the upstreams write. A
//! `/eventgate/upstream/connected` marker ends a gap of its upstream on its node. The
//! gap began at that upstream's first `/eventgate/upstream/disconnected` marker when
//! one came after its previous connect (a stop, or the daemon going away), else at
//! the connected marker's own `gap_started_at`: after a crash nothing recorded the
//! break, and the new process's start bounds it from the other side. A disconnected
//! marker that no connect followed is a gap still open at the end of the record,
//! unless a later start recorded the upstream's removal from the configuration (a
//! disconnected marker with that reason), which ends it.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use prost::Message;
use prost_types::Timestamp;

use crate::markers::{CONNECTED_TOPIC, DISCONNECTED_TOPIC, NAMESPACE};
use crate::proto::eventgate::events::v1::{UpstreamConnected, UpstreamDisconnected};
use crate::query::sql::{Dialect, Param};
use crate::query::time::stored_form;
use crate::query::{QueryError, Reader};
use crate::upstream::roster::REMOVED;

/// How long before the range a disconnected marker is looked for: a gateway stopped
/// for longer shows its gap from its restart only.
const LOOKBACK: Duration = Duration::from_secs(7 * 24 * 3600);
/// Markers read at most, the newest: one pair per reconnect.
const MAX_MARKERS: i64 = 20_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gap {
    /// The node that stored the markers (empty for rows without one).
    pub node: String,
    pub upstream: String,
    pub from: SystemTime,
    /// `None`: no reconnect is recorded yet.
    pub to: Option<SystemTime>,
}

#[derive(Debug)]
pub(crate) enum GapsError {
    Deadline,
    Store(QueryError),
}

impl From<QueryError> for GapsError {
    fn from(error: QueryError) -> Self {
        GapsError::Store(error)
    }
}

/// The gaps that end at or after `since` (or are still open), oldest first.
pub(crate) fn read(
    reader: &Reader,
    since: SystemTime,
    deadline: Instant,
) -> Result<Vec<Gap>, GapsError> {
    let earliest = since
        .checked_sub(LOOKBACK)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let sql = match reader.dialect() {
        Dialect::Sqlite => {
            "SELECT coalesce(node, ''), topic, payload FROM events \
             WHERE namespace = ?1 AND topic IN (?2, ?3) AND timestamp >= ?4 \
             ORDER BY row_id DESC LIMIT ?5"
        }
        Dialect::Postgres => {
            "SELECT coalesce(node, ''), topic, payload FROM events \
             WHERE namespace = $1::text AND topic IN ($2::text, $3::text) \
             AND timestamp COLLATE \"C\" >= $4::text ORDER BY row_id DESC LIMIT $5::bigint"
        }
    };
    let params = [
        Param::Text(NAMESPACE.to_owned()),
        Param::Text(CONNECTED_TOPIC.to_owned()),
        Param::Text(DISCONNECTED_TOPIC.to_owned()),
        Param::Text(stored_form(earliest)),
        Param::Integer(MAX_MARKERS),
    ];
    let rows = reader.cells(sql, &params, "reading the gap markers")?;
    if Instant::now() > deadline {
        return Err(GapsError::Deadline);
    }
    let mut markers = Vec::with_capacity(rows.len());
    for row in rows {
        let [node, topic, payload] = row.as_slice() else {
            return Err(reader
                .bad_value("a gap marker read as other columns")
                .into());
        };
        let (Some(node), Some(topic)) = (node.text(), topic.text()) else {
            return Err(reader
                .bad_value(format!("a gap marker read as {row:?}"))
                .into());
        };
        markers.push((
            node.to_owned(),
            topic.to_owned(),
            payload.bytes().map(<[u8]>::to_vec),
        ));
    }
    markers.reverse();
    let mut open: HashMap<(String, String), SystemTime> = HashMap::new();
    let mut gaps = Vec::new();
    for (node, topic, payload) in markers {
        let payload = payload.unwrap_or_default();
        if topic == DISCONNECTED_TOPIC {
            let Ok(m) = UpstreamDisconnected::decode(payload.as_slice()) else {
                continue;
            };
            let Some(at) = time(m.disconnected_at) else {
                continue;
            };
            let key = (node, m.upstream);
            if m.reason == REMOVED {
                // No longer watched on purpose: the outage it was in ends here.
                if let Some(from) = open.remove(&key)
                    && at >= since
                {
                    gaps.push(Gap {
                        node: key.0,
                        upstream: key.1,
                        from,
                        to: Some(at),
                    });
                }
                continue;
            }
            // The first break since the last connect is where the outage began.
            open.entry(key).or_insert(at);
            continue;
        }
        let Ok(m) = UpstreamConnected::decode(payload.as_slice()) else {
            continue;
        };
        let (Some(started), Some(to)) = (time(m.gap_started_at), time(m.connected_at)) else {
            continue;
        };
        let key = (node, m.upstream);
        let from = open
            .remove(&key)
            .filter(|broke| *broke <= started)
            .unwrap_or(started);
        if from < to && to >= since {
            gaps.push(Gap {
                node: key.0,
                upstream: key.1,
                from,
                to: Some(to),
            });
        }
    }
    let mut still_open: Vec<Gap> = open
        .into_iter()
        .map(|((node, upstream), from)| Gap {
            node,
            upstream,
            from,
            to: None,
        })
        .collect();
    still_open.sort_by_key(|g| g.from);
    gaps.extend(still_open);
    Ok(gaps)
}

fn time(t: Option<Timestamp>) -> Option<SystemTime> {
    t.and_then(|t| SystemTime::try_from(t).ok())
}

#[cfg(test)]
#[path = "gaps_tests.rs"]
mod tests;
