//! `eventgate stats`: how many events per group (topic or namespace) per time bucket.
//! Buckets are aligned to the Unix epoch and taken from the envelope's timestamp, or
//! from when the gateway received the event if it had none.

use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

use super::{Query, QueryError, Reader, RowRange};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    Topic,
    Namespace,
    /// The node each event was captured on; rows whose node is unknown (stored
    /// before nodes were kept) count under the empty group.
    Node,
}

impl GroupBy {
    fn column(self) -> &'static str {
        match self {
            GroupBy::Topic => "topic",
            GroupBy::Namespace => "namespace",
            GroupBy::Node => "coalesce(node, '')",
        }
    }
}

/// One line of the result: `count` events of `group` in the bucket starting at
/// `bucket` (Unix seconds).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Count {
    pub bucket: i64,
    pub group: String,
    pub count: u64,
}

impl Reader {
    /// Counts ordered by bucket, then group. `bucket_secs` must be at least 1.
    pub fn stats(
        &self,
        query: &Query,
        by: GroupBy,
        bucket_secs: i64,
    ) -> Result<Vec<Count>, QueryError> {
        let bucket_secs = bucket_secs.max(1);
        let predicate = query.predicate(RowRange::ALL);
        if predicate.recheck {
            return self.stats_by_matching(query, by, bucket_secs);
        }
        // rem_euclid in SQL: `%` keeps the sign of the dividend.
        let sql = format!(
            "SELECT b - ((b % ?1) + ?1) % ?1 AS bucket, g, count(*) FROM \
             (SELECT unixepoch(coalesce(timestamp, received_at)) AS b, {} AS g \
              FROM events WHERE {}) GROUP BY bucket, g ORDER BY bucket, g",
            by.column(),
            // SQLite numbers each bare `?` one above the highest so far: 2, 3, ...
            predicate.sql,
        );
        let mut params = vec![rusqlite::types::Value::Integer(bucket_secs)];
        params.extend(predicate.params);
        let mut stmt = self
            .conn()
            .prepare(&sql)
            .map_err(self.sqlite("preparing the statistics query"))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(params.iter()), |row| {
                Ok(Count {
                    bucket: row.get(0)?,
                    group: row.get(1)?,
                    count: row.get::<_, i64>(2)?.try_into().unwrap_or(0),
                })
            })
            .map_err(self.sqlite("running the statistics query"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.sqlite("reading the statistics"))
    }

    /// The same counts when the filter needs the in-memory matcher.
    fn stats_by_matching(
        &self,
        query: &Query,
        by: GroupBy,
        bucket_secs: i64,
    ) -> Result<Vec<Count>, QueryError> {
        let mut counts: BTreeMap<(i64, String), u64> = BTreeMap::new();
        let query = Query {
            limit: None,
            ..query.clone()
        };
        self.each(&query, RowRange::ALL, |stored| {
            let event = &stored.event;
            let seconds = match &event.envelope.timestamp {
                Some(ts) => ts.seconds,
                None => match event.identity.received_at.duration_since(UNIX_EPOCH) {
                    Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
                },
            };
            let bucket = seconds - seconds.rem_euclid(bucket_secs);
            let group = match by {
                GroupBy::Topic => event.topic(),
                GroupBy::Namespace => event.namespace(),
                GroupBy::Node => event.node().unwrap_or_default(),
            };
            *counts.entry((bucket, group.to_owned())).or_default() += 1;
            true
        })?;
        Ok(counts
            .into_iter()
            .map(|((bucket, group), count)| Count {
                bucket,
                group,
                count,
            })
            .collect())
    }
}
