//! The SQL a filter becomes must be served by the index meant for it: a plan that
//! sorts a whole namespace to return its first rows is correct and unusable on a
//! store of millions of rows.

use std::time::{Duration, SystemTime};

use super::{T0, store_with, varied_events};
use crate::event::Event;
use crate::filter::Filter;
use crate::query::{Query, Reader, RowRange};

fn query(filter: &str, hour: bool, limit: Option<u64>) -> Query {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(T0 as u64);
    Query {
        filter: Filter::parse(filter).unwrap(),
        since: hour.then_some(t0),
        until: hour.then_some(t0 + Duration::from_secs(3600)),
        limit,
    }
}

fn plan(reader: &Reader, query: &Query) -> String {
    let plan = query.plan(RowRange::ALL);
    let mut stmt = reader
        .conn()
        .prepare(&format!("EXPLAIN QUERY PLAN {}", plan.sql))
        .unwrap();
    let rows = stmt
        .query_map(rusqlite::params_from_iter(plan.params.iter()), |row| {
            row.get::<_, String>(3)
        })
        .unwrap();
    rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
}

#[test]
fn first_rows_of_a_topic_or_namespace_are_read_in_row_order_without_sorting() {
    let dir = tempfile::tempdir().unwrap();
    let events = varied_events();
    let reader = Reader::open(&store_with(dir.path(), &events)).unwrap();
    for (filter, index) in [
        ("namespace==k8s.io", "events_namespace_row"),
        (r#"topic=="/tasks/exit""#, "events_topic_row"),
    ] {
        let q = query(filter, false, Some(2));
        let plan = plan(&reader, &q);
        assert!(plan.contains(index), "{filter}: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{filter}: {plan}");
        // Still the first rows in gateway order, as the matcher picks them.
        let mut seqs = Vec::new();
        reader
            .each(&q, RowRange::ALL, |stored| {
                seqs.push(stored.event.seq);
                true
            })
            .unwrap();
        let expected: Vec<u64> = events
            .iter()
            .filter(|e| q.filter.matches(*e))
            .take(2)
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, expected, "{filter}");
    }
}

#[test]
fn a_time_range_reads_row_ids_from_the_column_and_timestamp_index_and_sorts_only_them() {
    let dir = tempfile::tempdir().unwrap();
    let events = varied_events();
    let reader = Reader::open(&store_with(dir.path(), &events)).unwrap();
    for (filter, index) in [
        (r#"topic=="/tasks/exit""#, "events_topic_timestamp"),
        ("namespace==k8s.io", "events_namespace_timestamp"),
    ] {
        let q = query(filter, true, None);
        let plan = plan(&reader, &q);
        assert!(
            plan.contains(&format!("COVERING INDEX {index} ("))
                && plan.contains("timestamp>? AND timestamp<?"),
            "{filter}: {plan}"
        );
        // Only row_ids are sorted, never whole rows.
        assert!(!plan.contains("TEMP B-TREE"), "{filter}: {plan}");
        let mut seqs = Vec::new();
        reader
            .each(&q, RowRange::ALL, |stored| {
                seqs.push(stored.event.seq);
                true
            })
            .unwrap();
        let in_range = |e: &&Event| {
            e.envelope.timestamp.as_ref().is_some_and(|t| {
                let t = SystemTime::try_from(*t).unwrap();
                q.since.is_none_or(|s| t >= s) && q.until.is_none_or(|u| t < u)
            })
        };
        let expected: Vec<u64> = events
            .iter()
            .filter(|e| q.filter.matches(*e))
            .filter(in_range)
            .map(|e| e.seq)
            .collect();
        assert!(!expected.is_empty(), "{filter}");
        assert_eq!(seqs, expected, "{filter}");
    }
}

#[test]
fn the_first_rows_of_a_time_range_keep_only_that_many_ids() {
    let dir = tempfile::tempdir().unwrap();
    let events = varied_events();
    let reader = Reader::open(&store_with(dir.path(), &events)).unwrap();
    for (filter, index) in [
        (r#"topic=="/tasks/exit""#, "events_topic_timestamp"),
        ("namespace==k8s.io", "events_namespace_timestamp"),
    ] {
        let q = query(filter, true, Some(2));
        let plan = plan(&reader, &q);
        // Still served by the time index, sorting ids only (a top-N sort of 2).
        assert!(
            plan.contains(&format!("COVERING INDEX {index} (")),
            "{filter}: {plan}"
        );
        let mut seqs = Vec::new();
        reader
            .each(&q, RowRange::ALL, |stored| {
                seqs.push(stored.event.seq);
                true
            })
            .unwrap();
        let unlimited = Query {
            limit: None,
            ..q.clone()
        };
        let mut all = Vec::new();
        reader
            .each(&unlimited, RowRange::ALL, |stored| {
                all.push(stored.event.seq);
                true
            })
            .unwrap();
        assert!(
            all.len() > 2,
            "{filter}: the range must hold more than the limit"
        );
        assert_eq!(seqs, all[..2], "{filter}");
    }
}
