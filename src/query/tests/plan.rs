//! The SQL a filter becomes must be served by the index meant for it: a plan that
//! sorts a whole namespace to return its first rows is correct and unusable on a
//! store of millions of rows.

use std::time::{Duration, SystemTime};

use super::{T0, varied_events};
use crate::event::Event;
use crate::filter::Filter;
use crate::query::{Query, Reader, RowRange};
use crate::testing::TempStore;

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
        .unwrap()
        .prepare(&format!("EXPLAIN QUERY PLAN {}", plan.sql))
        .unwrap();
    let rows = stmt
        .query_map(rusqlite::params_from_iter(plan.params.iter()), |row| {
            row.get::<_, String>(3)
        })
        .unwrap();
    rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
}

/// The seqs `each` emits for `query`, in order.
fn seqs(reader: &Reader, query: &Query) -> Vec<u64> {
    let mut seqs = Vec::new();
    reader
        .each(query, RowRange::ALL, |stored| {
            seqs.push(stored.event.seq);
            true
        })
        .unwrap();
    seqs
}

#[test]
fn first_rows_of_a_topic_or_namespace_are_read_in_row_order_without_sorting() {
    let events = varied_events();
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    for (filter, index) in [
        ("namespace==k8s.io", "events_namespace_row"),
        (r#"topic=="/tasks/exit""#, "events_topic_row"),
    ] {
        let q = query(filter, false, Some(2));
        let plan = plan(&reader, &q);
        assert!(plan.contains(index), "{filter}: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{filter}: {plan}");
        // Still the first rows in gateway order, as the matcher picks them.
        let got = seqs(&reader, &q);
        let expected: Vec<u64> = events
            .iter()
            .filter(|e| q.filter.matches(*e))
            .take(2)
            .map(|e| e.seq)
            .collect();
        assert_eq!(got, expected, "{filter}");
    }
}

#[test]
fn a_time_range_reads_row_ids_from_the_column_and_timestamp_index_and_sorts_only_them() {
    let events = varied_events();
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    for (filter, index) in [
        (r#"topic=="/tasks/exit""#, "events_topic_timestamp"),
        ("namespace==k8s.io", "events_namespace_timestamp"),
    ] {
        let q = query(filter, true, None);
        let used = plan(&reader, &q);
        assert!(
            used.contains(&format!("COVERING INDEX {index} ("))
                && used.contains("timestamp>? AND timestamp<?"),
            "{filter}: {used}"
        );
        // Only row_ids are sorted, never whole rows.
        assert!(!used.contains("TEMP B-TREE"), "{filter}: {used}");
        let got = seqs(&reader, &q);
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
        assert!(expected.len() > 2, "{filter}");
        assert_eq!(got, expected, "{filter}");

        // With a limit only that many ids are kept (a top-N sort), still from the
        // time index, and they are the range's first rows.
        let limited = query(filter, true, Some(2));
        let used = plan(&reader, &limited);
        assert!(
            used.contains(&format!("COVERING INDEX {index} (")),
            "{filter}: {used}"
        );
        assert_eq!(seqs(&reader, &limited), expected[..2], "{filter}");
    }
}

/// Reconciled rows are few: the partial index holding only them serves
/// `origin==reconciled`, with or without a time range, instead of a walk over every
/// row.
#[test]
fn reconciled_rows_are_read_from_their_partial_index() {
    let events = varied_events();
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    for (filter, hour, limit) in [
        ("origin==reconciled", false, None),
        ("origin==reconciled", false, Some(2)),
        ("origin==reconciled,origin_clock==daemon", true, None),
        ("origin==reconciled", true, Some(2)),
        ("reconciled_from==cri", false, None),
        ("reconciled_from", true, Some(2)),
        ("reconciled_from==docker,reason", false, None),
    ] {
        let q = query(filter, hour, limit);
        let used = plan(&reader, &q);
        assert!(used.contains("events_reconciled"), "{filter}: {used}");
        let expected: Vec<u64> = events
            .iter()
            .filter(|e| q.filter.matches(&e.record_fields()))
            .filter(|e| {
                !hour
                    || e.envelope.timestamp.as_ref().is_some_and(|t| {
                        let t = SystemTime::try_from(*t).unwrap();
                        q.since.is_none_or(|s| t >= s) && q.until.is_none_or(|u| t < u)
                    })
            })
            .map(|e| e.seq)
            .take(limit.map_or(usize::MAX, |n| n as usize))
            .collect();
        assert!(!expected.is_empty(), "{filter}");
        assert_eq!(seqs(&reader, &q), expected, "{filter}");
    }
    // `live` is most rows: no index would help, and the partial one cannot.
    let used = plan(&reader, &query("origin==live", false, None));
    assert!(!used.contains("events_reconciled"), "{used}");
}

/// One pod's rows come from the partial index on (pod_name, pod_namespace), in store
/// order: `--pod` with `--limit` sorts nothing, and a name alone is a range of it.
#[test]
fn a_pods_rows_are_read_from_its_index_in_row_order() {
    let events = varied_events();
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    for (filter, limit) in [
        ("pod.name==web-7,pod.namespace==shop", Some(2)),
        ("pod.name==web-7,pod.namespace==shop", None),
        ("pod.name==web-7", None),
    ] {
        let q = query(filter, false, limit);
        let used = plan(&reader, &q);
        assert!(used.contains("events_pod"), "{filter}: {used}");
        if limit.is_some() {
            assert!(!used.contains("TEMP B-TREE"), "{filter}: {used}");
        }
        let expected: Vec<u64> = events
            .iter()
            .filter(|e| q.filter.matches(&e.record_fields()))
            .map(|e| e.seq)
            .take(limit.map_or(usize::MAX, |n| n as usize))
            .collect();
        assert!(!expected.is_empty(), "{filter}");
        assert_eq!(seqs(&reader, &q), expected, "{filter}");
    }
}

/// `nth_newest` finds the row the matcher would put `n`th from the end, whether SQL
/// answers the filter (one query, its `+row_id` keeping a time range on its index)
/// or the rows are matched newest first.
#[test]
fn the_nth_newest_row_is_the_one_the_matcher_puts_nth_from_the_end() {
    let events = varied_events();
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    for filter in [
        "",
        r#"topic=="/tasks/exit""#,
        "namespace==k8s.io",
        r#"topic~="^/tasks/(exit|create)$""#,
        "origin==reconciled",
        r#"topic=="/tasks/*",namespace==default"#,
    ] {
        for hour in [false, true] {
            let q = query(filter, hour, None);
            let mut ids = Vec::new();
            reader
                .each(&q, RowRange::ALL, |stored| {
                    ids.push(stored.row_id);
                    true
                })
                .unwrap();
            assert!(!ids.is_empty(), "{filter}");
            for n in 0..=ids.len() as u64 + 1 {
                let expected = n
                    .checked_sub(1)
                    .and_then(|back| ids.iter().rev().nth(back as usize))
                    .copied();
                let got = reader.nth_newest(&q, RowRange::ALL, n, |_| true).unwrap();
                assert_eq!(got, expected, "{filter} hour={hour} n={n}");
            }
            let last = *ids.last().unwrap();
            let within = RowRange {
                after: 0,
                up_to: last - 1,
            };
            let expected = ids.iter().rev().nth(1).copied();
            assert_eq!(
                reader.nth_newest(&q, within, 1, |_| true).unwrap(),
                expected,
                "{filter} hour={hour}: the range bounds the rows"
            );
        }
    }
    // Told to stop, a walk that must match in Rust gives up without an answer.
    let regex = query(r#"topic~="^/tasks/""#, false, None);
    assert!(regex.predicate(RowRange::ALL).recheck);
    let mut seen = 0;
    let got = reader.nth_newest(&regex, RowRange::ALL, 1000, |read| {
        seen = read;
        read < 3
    });
    assert_eq!((got.unwrap(), seen), (None, 3));
}
