//! The self-contained file: its CSP, no script, every mark in the table, hostile
//! text escaped.

use super::*;
use crate::query::Reader;
use crate::testing::TempStore;
use crate::ui::picture::build;
use crate::ui::picture::tests::{Life, web7, web7_query, workload};

#[test]
fn the_file_has_the_csp_the_picture_and_a_row_per_mark_and_no_script() {
    let store = TempStore::with(&web7());
    let reader = Reader::open(store.path()).unwrap();
    let picture = build(&reader, &web7_query()).unwrap();
    let html = render(&picture, "pod shop/web-7");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains(
        r#"<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">"#
    ));
    assert!(html.contains("<meta charset=\"utf-8\">"));
    assert!(!html.to_lowercase().contains("<script"));
    assert!(html.contains(r#"<svg xmlns="http://www.w3.org/2000/svg" class="eg-timeline""#));
    assert!(html.contains("<title>pod shop/web-7</title>"));
    assert!(html.contains(
        "restarts 5, OOM events 2, non-zero exits 4 (status 137: 3, OOM kills: 2); 17 events"
    ));
    assert_eq!(html.matches("<tr class=\"mark-row\">").count(), 17);
    assert!(html.contains("/tasks/exit status 137: OOM-killed"));
}

#[test]
fn hostile_text_in_the_title_and_the_marks_is_escaped() {
    let name = "<script>alert(1)</script>";
    let mut life = Life::new();
    life.add(
        "/tasks/start",
        r#"{"container_id":"<img src=x onerror=alert(1)>"}"#,
        Some(workload(name, name, Some("javascript:alert(1)"))),
    );
    let store = TempStore::with(&life.events);
    let reader = Reader::open(store.path()).unwrap();
    let mut q = web7_query();
    q.pod = None;
    let picture = build(&reader, &q).unwrap();
    let html = render(&picture, &format!("pod {name}"));
    let lower = html.to_lowercase();
    assert!(!lower.contains("<script"), "{html}");
    assert!(!lower.contains("<img"), "{html}");
    assert!(html.contains("<title>pod &lt;script&gt;alert(1)&lt;/script&gt;</title>"));
    assert!(html.contains("javascript:alert(1) &lt;img src=x onerror=alert(1)&gt;"));
}

#[test]
fn a_truncated_file_says_which_events_it_draws() {
    let store = TempStore::with(&web7());
    let reader = Reader::open(store.path()).unwrap();
    let mut q = web7_query();
    q.max_rows = 5;
    let picture = build(&reader, &q).unwrap();
    let html = render(&picture, "pod shop/web-7");
    let from = crate::ui::svg::when((crate::testing::T0 + 12) * 1000);
    let note = format!(
        "truncated: drew the newest 5 of 17 events, from {from}; narrow the time range or the filter"
    );
    assert!(
        html.contains(&format!("<p class=\"meta truncated\">{note}</p>")),
        "{html}"
    );
    assert!(html.contains(&format!("<p class=\"meta range\">from {from} to ")));
    assert!(html.contains(r#"<text class="truncated" x="8" y="#));
    assert_eq!(html.matches("<tr class=\"mark-row\">").count(), 5);
}
