//! SQL and the in-memory matcher must keep exactly the same events, whichever way a
//! filter is answered.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::varied_events;
use crate::event::Event;
use crate::filter::Filter;
use crate::query::{Query, Reader, RowRange, sql};
use crate::testing::TempStore;

fn via_store(reader: &Reader, filter: &Filter) -> Vec<String> {
    let query = Query {
        filter: filter.clone(),
        ..Query::default()
    };
    let mut ids = Vec::new();
    reader
        .each(&query, RowRange::ALL, |stored| {
            ids.push(stored.event.identity.id.to_string());
            true
        })
        .unwrap();
    ids
}

fn in_memory(events: &[Event], filter: &Filter) -> Vec<String> {
    events
        .iter()
        .filter(|e| filter.matches(&e.record_fields()))
        .map(|e| e.identity.id.to_string())
        .collect()
}

pub(super) const SELECTORS: &[&str] = &[
    "topic",
    "namespace",
    r#"topic=="/tasks/exit""#,
    r#"topic=="/tasks/exit'; DROP TABLE events; --""#,
    r#"topic.anything=="/tasks/create""#,
    r#"topic!="/tasks/exit""#,
    r#"topic=="""#,
    r#"topic!="""#,
    r#"topic=="/tasks/*""#,
    r#"topic=="/**""#,
    r#"topic=="/tasks/**""#,
    "topic~=^/tasks/",
    "topic~=exit$",
    "namespace==default",
    "namespace==k8s.io",
    r#"namespace=="x' OR '1'='1""#,
    "namespace!=default",
    r#"namespace!="""#,
    "namespace~=^k8s",
    "event.container_id",
    "event.container_id==web",
    r#"event.container_id=="""#,
    "event.container_id!=web",
    r#"event.container_id=="'; DROP TABLE events; --""#,
    "event.id==exec-1",
    r#"event.id=="a\"b""#,
    "event.id",
    "event.pid",
    "event.pid==7",
    "event.exit_status!=137",
    "event.io",
    "event.io.terminal",
    "event.io.terminal==true",
    "event.io.terminal==false",
    "event.io.terminal!=true",
    "event.io.stdout==x",
    "event.io.stdin",
    "event.labels",
    "event.labels.io.k8s.pod==web-0",
    r#"event.labels."io.k8s.pod""#,
    "event.labels.empty",
    r#"event.labels.empty=="""#,
    "event.labels.empty!=x",
    r#"event.labels."quote\"d"=="x' OR 1=1 --""#,
    "event.labels.missing",
    "event.image==docker.io/library/nginx:latest",
    "event.runtime.name==io.containerd.runc.v2",
    "event.runtime.options.binary_name==runc",
    "event.runtime.options.no_pivot_root==true",
    "event.runtime.options",
    "event.name==k8s.io",
    "event",
    "event.container_id~=^w",
    r#"event.container_id~="""#,
    "labels.x",
    "other==y",
    "other!=y",
    r#"other~="^$""#,
    r#"topic=="\xff""#,
    r#"topic!="\xff""#,
    "origin",
    "origin==live",
    "origin==reconciled",
    "origin!=live",
    "origin!=reconciled",
    r#"origin=="""#,
    r#"origin!="""#,
    "origin==Reconciled",
    "origin.any==reconciled",
    "origin~=^rec",
    "node",
    "node==web-1",
    "node!=web-1",
    r#"node=="""#,
    r#"node!="""#,
    "node.any==web-2",
    "node~=^web-",
    r#"node=="x' OR '1'='1""#,
    "node==web-1,namespace==default",
    "origin_clock",
    "origin_clock==daemon",
    "origin_clock==reconcile",
    "origin_clock!=daemon",
    r#"origin_clock=="""#,
    r#"origin_clock!="""#,
    r#"origin_clock~="^$""#,
    "reconciled_from",
    "reconciled_from==containerd",
    "reconciled_from==cri",
    "reconciled_from==docker",
    "reconciled_from!=cri",
    "reconciled_from!=containerd",
    r#"reconciled_from=="""#,
    r#"reconciled_from!="""#,
    "reconciled_from.any==docker",
    "reconciled_from==Cri",
    "reconciled_from~=^c",
    r#"reconciled_from=="x' OR '1'='1""#,
    "reconciled_from==cri,origin_clock==daemon",
    "reason",
    "reason==OOMKilled",
    "reason==Completed",
    "reason!=OOMKilled",
    r#"reason=="""#,
    r#"reason!="""#,
    "reason.any==OOMKilled",
    "reason~=^OOM",
    r#"reason~="^$""#,
    r#"reason=="x' OR '1'='1""#,
    "reason==OOMKilled,reconciled_from==cri",
    "pod",
    "pod.name",
    "pod.name==web-7",
    "pod.name!=web-7",
    r#"pod.name=="""#,
    r#"pod.name!="""#,
    "pod.name.extra==web-7",
    "pod.name~=^web",
    "pod.namespace==shop",
    "pod.namespace==staging",
    "pod.namespace!=shop",
    "pod.uid",
    "pod.uid==uid-shop-web-7",
    "pod.other",
    "pod.name==web-7,pod.namespace==shop",
    "container.name",
    "container.name==nginx",
    r#"container.name=="""#,
    r#"container.name=="x' OR '1'='1""#,
    "container.name!=nginx",
    "container.kind==sandbox",
    "container.kind==container",
    "container.kind",
    "container.image",
    "container.image==busybox",
    "container.image!=busybox",
    r#"container.image=="""#,
    "container.image~=nginx",
    "container.labels",
    "container.labels.app==db",
    "container.labels.app",
    "container.labels.app!=db",
    "container.labels.tier",
    r#"container.labels.tier=="""#,
    r#"container.labels."app.kubernetes.io/name"==web"#,
    "container.labels.a.b.c==dots",
    r#"container.labels."a.b".c==dots"#,
    r#"container.labels."quote\"d"=="x' OR 1=1 --""#,
    "container.labels.missing",
    "container.labels.app~=^d",
    "container",
    r#"container~="^$""#,
];

#[test]
fn every_selector_alone_keeps_what_the_matcher_keeps() {
    let events = varied_events();
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    let mut answered_by_sql = 0;
    for text in SELECTORS {
        let filter = Filter::parse(text).unwrap();
        if !sql::translate(&filter).recheck {
            answered_by_sql += 1;
        }
        assert_eq!(
            via_store(&reader, &filter),
            in_memory(&events, &filter),
            "filter {text}"
        );
    }
    // The translation must actually carry most selectors, or this proves little.
    assert!(
        answered_by_sql >= SELECTORS.len() * 2 / 3,
        "{answered_by_sql}"
    );
}

/// Reconciled rows stored before schema version 12 have no `reconciled_from` and read
/// back as containerd's: SQL must keep them where the matcher keeps the events they
/// read back as.
#[test]
fn reconciled_rows_from_before_the_witness_column_are_containerd_s() {
    let events = varied_events();
    let store = TempStore::with(&events);
    let changed = rusqlite::Connection::open(store.path())
        .unwrap()
        .execute(
            "UPDATE events SET reconciled_from = NULL WHERE reconciled_from = 'containerd'",
            [],
        )
        .unwrap();
    assert!(changed > 0);
    let reader = Reader::open(store.path()).unwrap();
    let mut read_back = Vec::new();
    reader
        .each(&Query::default(), RowRange::ALL, |stored| {
            read_back.push(stored.event);
            true
        })
        .unwrap();
    let origins = |events: &[Event]| events.iter().map(|e| e.identity.origin).collect::<Vec<_>>();
    assert_eq!(origins(&read_back), origins(&events));
    let workloads = |events: &[Event]| {
        events
            .iter()
            .map(|e| e.identity.workload.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        workloads(&read_back),
        workloads(&events),
        "reasons read back"
    );
    for text in SELECTORS {
        let filter = Filter::parse(text).unwrap();
        assert_eq!(
            via_store(&reader, &filter),
            in_memory(&events, &filter),
            "filter {text}"
        );
    }
}

#[test]
fn random_filters_keep_what_the_matcher_keeps() {
    let events = varied_events();
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    let mut rng = StdRng::seed_from_u64(0x4576_4774);
    for _ in 0..400 {
        let strings: Vec<String> = (0..rng.random_range(1..=3))
            .map(|_| {
                let n = rng.random_range(1..=3);
                (0..n)
                    .map(|_| SELECTORS[rng.random_range(0..SELECTORS.len())])
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        let filter = Filter::parse_all(&strings).unwrap();
        assert_eq!(
            via_store(&reader, &filter),
            in_memory(&events, &filter),
            "filters {strings:?}"
        );
    }
}

#[test]
fn regex_topic_globs_and_nested_any_paths_are_rechecked_the_rest_is_not() {
    for (text, recheck) in [
        (r#"topic=="/tasks/exit",event.container_id==web"#, false),
        ("namespace!=default,event.labels.a", false),
        ("topic~=exit", true),
        (r#"topic=="/tasks/*""#, true),
        ("event.runtime.options.binary_name==runc", true),
        ("other~=x", false),
        ("origin==reconciled,origin_clock!=daemon", false),
        ("origin_clock~=^d", true),
        (
            "reconciled_from==cri,reason==OOMKilled,reason!=Error",
            false,
        ),
        ("reconciled_from~=^c", true),
        ("reason~=OOM", true),
        (
            "pod.name==web-7,container.labels.a.b==c,container.image!=x",
            false,
        ),
        ("container.labels.app~=^d", true),
        ("pod~=x", false),
    ] {
        let filter = Filter::parse(text).unwrap();
        assert_eq!(sql::translate(&filter).recheck, recheck, "{text}");
    }
}

#[test]
fn count_agrees_with_the_rows_emitted_within_a_row_range() {
    let events = varied_events();
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    let rows = RowRange {
        after: 3,
        up_to: 20,
    };
    for text in SELECTORS {
        let query = Query {
            filter: Filter::parse(text).unwrap(),
            limit: Some(1),
            ..Query::default()
        };
        let unlimited = Query {
            limit: None,
            ..query.clone()
        };
        let emitted = reader.each(&unlimited, rows, |_| true).unwrap();
        assert_eq!(
            reader.count(&query, rows).unwrap(),
            emitted,
            "filter {text}"
        );
    }
}

#[test]
fn every_selector_with_time_bounds_keeps_what_the_matcher_keeps() {
    use std::time::{Duration, SystemTime};
    let events = varied_events();
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    let at = |secs: i64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64);
    let t0 = super::T0;
    for (since, until) in [
        (Some(at(t0)), Some(at(t0 + 1800))),
        (Some(at(t0 + 60)), None),
        (None, Some(at(t0 + 3600))),
    ] {
        for text in SELECTORS {
            let filter = Filter::parse(text).unwrap();
            let query = Query {
                filter: filter.clone(),
                since,
                until,
                limit: None,
            };
            let mut got = Vec::new();
            reader
                .each(&query, RowRange::ALL, |stored| {
                    got.push(stored.event.identity.id.to_string());
                    true
                })
                .unwrap();
            let expected: Vec<String> = events
                .iter()
                .filter(|e| filter.matches(&e.record_fields()))
                .filter(|e| {
                    e.envelope.timestamp.as_ref().is_some_and(|t| {
                        let t = SystemTime::try_from(*t).unwrap();
                        since.is_none_or(|s| t >= s) && until.is_none_or(|u| t < u)
                    })
                })
                .map(|e| e.identity.id.to_string())
                .collect();
            assert_eq!(got, expected, "{text} {since:?} {until:?}");
        }
    }
}
