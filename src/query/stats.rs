//! `eventgate stats`: how many events per group (topic or namespace) per time bucket.
//! Buckets are aligned to the Unix epoch and taken from the envelope's timestamp, or
//! from when the gateway received the event if it had none.

use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

use super::sql::Dialect;
use super::{Query, QueryError, Reader, RowRange};
use crate::filter::Filter;

/// Unix seconds of the text `t` (an RFC 3339 time as stored) in PostgreSQL, NULL where
/// it is not one: the date's days and the time of day's seconds, the fraction dropped,
/// as SQLite's unixepoch reads them. Year 0000 is 1 BC to PostgreSQL. (Arithmetic on
/// the date is twice as fast as casting the whole text to a timestamptz.)
const POSTGRES_SECONDS: &str = "CASE WHEN t LIKE '____-__-__T__:__:__%' THEN \
     ((CASE WHEN left(t, 4) = '0000' THEN '0001' || substr(t, 5, 6) || ' BC' \
     ELSE left(t, 10) END)::date - date '1970-01-01')::bigint * 86400 \
     + substr(t, 12, 2)::int * 3600 + substr(t, 15, 2)::int * 60 + substr(t, 18, 2)::int END";

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

/// `query`, leaving out the live events that repeat a change a reconcile recorded
/// (`origin == repeat`): each change is counted once.
fn counted(query: &Query) -> Query {
    let live_or_reconciled = Filter::parse("origin!=repeat").unwrap_or_default();
    Query {
        filter: query.filter.and(&live_or_reconciled),
        ..query.clone()
    }
}

impl Reader {
    /// Counts ordered by bucket, then group, each change once (see [`counted`]).
    /// `bucket_secs` must be at least 1.
    pub fn stats(
        &self,
        query: &Query,
        by: GroupBy,
        bucket_secs: i64,
    ) -> Result<Vec<Count>, QueryError> {
        let bucket_secs = bucket_secs.max(1);
        let query = &counted(query);
        let mut bind = self.binder();
        let width = bind.int(bucket_secs);
        let predicate = query.predicate_in(RowRange::ALL, bind);
        if predicate.recheck {
            return self.stats_by_matching(query, by, bucket_secs);
        }
        let sql = match predicate.bind.dialect {
            // rem_euclid in SQL: `%` keeps the sign of the dividend.
            Dialect::Sqlite => format!(
                "SELECT b - ((b % ?1) + ?1) % ?1 AS bucket, g, count(*) FROM \
                 (SELECT unixepoch(coalesce(timestamp, received_at)) AS b, {} AS g \
                  FROM events WHERE {}) GROUP BY bucket, g ORDER BY bucket, g",
                by.column(),
                // SQLite numbers each bare `?` one above the highest so far: 2, 3, ...
                predicate.sql,
            ),
            // The seconds of the stored text, as SQLite's unixepoch reads them; groups
            // in byte order, as SQLite sorts them.
            Dialect::Postgres => format!(
                "SELECT b - ((b % {width}) + {width}) % {width} AS bucket, g, count(*) FROM \
                 (SELECT {POSTGRES_SECONDS} AS b, {} AS g FROM \
                  (SELECT coalesce(timestamp, received_at) AS t, * FROM events WHERE {}) AS e) AS s \
                 GROUP BY bucket, g ORDER BY bucket, g COLLATE \"C\"",
                by.column(),
                predicate.sql,
            ),
        };
        let rows = self.cells(&sql, predicate.params(), "running the statistics query")?;
        rows.iter()
            .map(|row| match (row[0].int(), row[1].text(), row[2].int()) {
                (Some(bucket), Some(group), Some(count)) => Ok(Count {
                    bucket,
                    group: group.to_owned(),
                    count: count.try_into().unwrap_or(0),
                }),
                _ => Err(self.bad_value(format!(
                    "reading the statistics: {row:?} (an event time the store cannot read \
                     as seconds?)"
                ))),
            })
            .collect()
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
