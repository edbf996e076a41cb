//! The `events` table's time partitions: one per day (or month) of `received`, made
//! before the first row that needs it, dropped whole by retention.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use serde::Deserialize;
use tokio_postgres::Client;

use super::PostgresError;

/// `partition`: how much time one partition of `events` holds.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Period {
    #[default]
    Day,
    Month,
}

/// One partition's range, `[start, end)` in days since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Range {
    start: NaiveDate,
    end: NaiveDate,
}

impl Period {
    /// The partition holding `at`.
    pub(crate) fn range(self, at: SystemTime) -> Range {
        let at: DateTime<Utc> = at.into();
        let day = at.date_naive();
        match self {
            Period::Day => Range {
                start: day,
                end: day.succ_opt().unwrap_or(day),
            },
            Period::Month => {
                let start = day.with_day(1).unwrap_or(day);
                let end = match start.month() {
                    12 => NaiveDate::from_ymd_opt(start.year() + 1, 1, 1),
                    month => NaiveDate::from_ymd_opt(start.year(), month + 1, 1),
                }
                .unwrap_or(start);
                Range { start, end }
            }
        }
    }
}

impl Range {
    /// `events_p20261128` (a day) or `events_p202611` (a month).
    pub(crate) fn table(&self) -> String {
        let days = (self.end - self.start).num_days();
        if days > 1 {
            format!("events_p{}", self.start.format("%Y%m"))
        } else {
            format!("events_p{}", self.start.format("%Y%m%d"))
        }
    }

    fn bounds(&self) -> (String, String) {
        (
            format!("{} 00:00:00+00", self.start.format("%Y-%m-%d")),
            format!("{} 00:00:00+00", self.end.format("%Y-%m-%d")),
        )
    }
}

/// Makes every partition in `ranges` that does not exist yet. Serialized with other
/// gateways by the schema's advisory lock: two writers making the same partition at
/// once would otherwise race on the catalog.
pub(crate) async fn ensure(
    client: &mut Client,
    ranges: &BTreeSet<Range>,
) -> Result<(), PostgresError> {
    if ranges.is_empty() {
        return Ok(());
    }
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&super::migrate::LOCK])
        .await?;
    for range in ranges {
        let (from, to) = range.bounds();
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} PARTITION OF events FOR VALUES FROM ('{from}') TO ('{to}')",
            range.table()
        );
        tx.batch_execute(&sql).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// A partition retention may drop: its name and where its range ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Partition {
    pub(crate) table: String,
    pub(crate) end: SystemTime,
}

/// The partitions of `events` whose whole range ends at or before `cutoff`, oldest
/// first.
pub(crate) async fn older_than(
    client: &Client,
    cutoff: SystemTime,
) -> Result<Vec<Partition>, PostgresError> {
    // The bound expression reads back as "FOR VALUES FROM ('...') TO ('...')".
    let rows = client
        .query(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'events'::regclass",
            &[],
        )
        .await?;
    let mut old = Vec::new();
    for row in rows {
        let table: String = row.get(0);
        let bound: Option<String> = row.get(1);
        let Some(end) = bound.as_deref().and_then(upper_bound) else {
            continue;
        };
        if end <= cutoff {
            old.push(Partition { table, end });
        }
    }
    old.sort_by_key(|p| p.end);
    Ok(old)
}

/// The `TO ('2026-11-29 00:00:00+00')` of a range partition's bound.
fn upper_bound(bound: &str) -> Option<SystemTime> {
    let (_, to) = bound.split_once(" TO ('")?;
    let text = to.split('\'').next()?;
    let parsed = DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%#z").ok()?;
    let seconds = u64::try_from(parsed.timestamp()).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Drops one partition (its rows with it).
pub(crate) async fn drop(client: &Client, partition: &Partition) -> Result<u64, PostgresError> {
    let rows: i64 = client
        .query_one(&format!("SELECT count(*) FROM {}", partition.table), &[])
        .await?
        .get(0);
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS {}", partition.table))
        .await?;
    Ok(u64::try_from(rows).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SystemTime {
        DateTime::parse_from_rfc3339(text).unwrap().into()
    }

    #[test]
    fn ranges_name_their_day_or_month() {
        let day = Period::Day.range(at("2026-11-28T23:59:59.999Z"));
        assert_eq!(day.table(), "events_p20261128");
        assert_eq!(day.bounds().1, "2026-11-29 00:00:00+00");
        let december = Period::Month.range(at("2026-12-31T10:00:00Z"));
        assert_eq!(december.table(), "events_p202612");
        assert_eq!(
            december.bounds(),
            (
                "2026-12-01 00:00:00+00".into(),
                "2027-01-01 00:00:00+00".into()
            )
        );
    }

    #[test]
    fn upper_bounds_read_back_from_the_catalog() {
        let bound = "FOR VALUES FROM ('2026-11-28 00:00:00+00') TO ('2026-11-29 00:00:00+00')";
        assert_eq!(upper_bound(bound), Some(at("2026-11-29T00:00:00Z")));
        assert_eq!(upper_bound("DEFAULT"), None);
        let elsewhere =
            "FOR VALUES FROM ('2026-11-28 05:30:00+05:30') TO ('2026-11-29 05:30:00+05:30')";
        assert_eq!(upper_bound(elsewhere), Some(at("2026-11-29T00:00:00Z")));
    }
}
