//! The modules' metric tables against the recorder and against docs/observability.md,
//! which lists every metric as a table row whose first cell is its backticked name
//! and whose second cell starts with its type: "| `eventgate_x_total` | counter | ...".

use std::collections::{BTreeMap, BTreeSet};

use crate::metric::{Metric, MetricKind};

use super::{TABLES, builder, describe};

const OBSERVABILITY: &str = include_str!("../../docs/observability.md");

fn described() -> impl Iterator<Item = &'static Metric> {
    TABLES.iter().flat_map(|table| table.iter())
}

fn type_word(kind: MetricKind) -> &'static str {
    match kind {
        MetricKind::Counter => "counter",
        MetricKind::Gauge => "gauge",
        MetricKind::Histogram => "histogram",
    }
}

/// Name to the first word of the type column, for every metric row of the doc.
fn documented() -> BTreeMap<&'static str, &'static str> {
    let mut rows = BTreeMap::new();
    for line in OBSERVABILITY.lines() {
        if !line.starts_with("| `eventgate_") {
            continue;
        }
        let mut cells = line.split('|').skip(1).map(str::trim);
        let name = cells.next().unwrap_or_default().trim_matches('`');
        let kind = cells
            .next()
            .and_then(|cell| cell.split_whitespace().next())
            .unwrap_or_default();
        assert!(
            rows.insert(name, kind).is_none(),
            "{name} is listed twice in docs/observability.md"
        );
    }
    rows
}

#[test]
fn every_metric_is_described_once_with_a_prometheus_name() {
    let mut names = BTreeSet::new();
    for metric in described() {
        assert!(
            names.insert(metric.name),
            "{} is described twice",
            metric.name
        );
        assert!(metric.name.starts_with("eventgate_"), "{}", metric.name);
        assert!(
            metric
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{}",
            metric.name
        );
        assert_eq!(
            metric.kind == MetricKind::Counter,
            metric.name.ends_with("_total"),
            "{}: counters, and only counters, end in _total",
            metric.name
        );
        assert!(!metric.help.is_empty(), "{} has no help", metric.name);
    }
}

#[test]
fn the_documented_metrics_are_the_described_ones() {
    let documented = documented();
    // The doc's table must have been found, or an empty list would pass.
    assert!(documented.len() > 50, "{documented:?}");
    let described: BTreeMap<_, _> = described()
        .map(|metric| (metric.name, type_word(metric.kind)))
        .collect();
    let undocumented: Vec<_> = described
        .keys()
        .filter(|name| !documented.contains_key(*name))
        .collect();
    let undescribed: Vec<_> = documented
        .keys()
        .filter(|name| !described.contains_key(*name))
        .collect();
    assert!(
        undocumented.is_empty() && undescribed.is_empty(),
        "described but not in docs/observability.md: {undocumented:?}; \
         in docs/observability.md but not described: {undescribed:?}"
    );
    for (name, kind) in &described {
        assert_eq!(
            documented.get(name),
            Some(kind),
            "{name}'s type in docs/observability.md"
        );
    }
}

#[test]
fn the_recorder_gives_every_metric_its_help_and_type() {
    let recorder = builder().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        describe();
        for metric in described() {
            match metric.kind {
                MetricKind::Counter => metrics::counter!(metric.name).increment(1),
                MetricKind::Gauge => metrics::gauge!(metric.name).set(1.0),
                MetricKind::Histogram => metrics::histogram!(metric.name).record(1.0),
            }
        }
    });
    let text = handle.render();
    for metric in described() {
        let help = format!("# HELP {} {}\n", metric.name, metric.help);
        let kind = format!("# TYPE {} {}\n", metric.name, type_word(metric.kind));
        assert!(text.contains(&help), "{help:?} missing from:\n{text}");
        assert!(text.contains(&kind), "{kind:?} missing from:\n{text}");
    }
}

/// Every metric the code names is described: one recorded without a table entry
/// would have no `# HELP` line and, by the test above, no row in the docs. Any
/// `"eventgate_..."` string in `src` counts, whether a macro records it or a series
/// is built from it once (`pipeline/meters.rs`).
#[test]
fn every_metric_named_in_the_code_is_described() {
    // Names unit tests make up to test the recording itself.
    const MADE_UP: [&str; 2] = ["eventgate_test_total", "eventgate_missing"];
    // Names of other things: the PostgreSQL writer's temporary table.
    const NOT_METRICS: [&str; 1] = [crate::postgres::write::STAGING];
    let named = regex::Regex::new(r#""(eventgate_[a-z0-9_]+)""#).expect("the pattern compiles");
    let described: BTreeSet<&str> = described().map(|metric| metric.name).collect();
    let is_described = |name: &str| {
        described.contains(name)
            || ["_count", "_sum", "_bucket"].iter().any(|suffix| {
                name.strip_suffix(suffix)
                    .is_some_and(|base| described.contains(base))
            })
    };
    let mut seen = BTreeSet::new();
    let mut pending = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("src is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                for found in named.captures_iter(&text) {
                    let name = found.get(1).map_or("", |m| m.as_str()).to_owned();
                    assert!(
                        is_described(&name)
                            || MADE_UP.contains(&name.as_str())
                            || NOT_METRICS.contains(&name.as_str()),
                        "{} names {name}, which no metric table describes",
                        path.display()
                    );
                    seen.insert(name);
                }
            }
        }
    }
    // The scan must have found the crate's metrics, or a wrong path would pass.
    assert!(seen.len() > 90, "{} names: {seen:?}", seen.len());
}
