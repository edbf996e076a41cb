//! The fleet view: per node, its last event, its events and its gaps, as the CLI
//! reads the same store.

use std::collections::BTreeMap;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::support::{eventgate_stdout, path_str};
use crate::ui::{SHOWN, Ui};

/// Per node: its events outside eventgate's own namespace, and the newest timestamp,
/// from `eventgate query --format json`.
fn nodes_by_cli(db: &str) -> BTreeMap<String, (u64, String)> {
    let out = eventgate_stdout(&["query", "--db", db, "--since", "2h", "--format", "json"]);
    let mut nodes: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for line in out.lines() {
        let event: Value = serde_json::from_str(line).expect("a JSON line");
        if event["namespace"] == "eventgate" {
            continue;
        }
        let node = event["node"].as_str().unwrap_or_default().to_owned();
        let at = event["timestamp"].as_str().unwrap_or_default().to_owned();
        let entry = nodes.entry(node).or_default();
        entry.0 += 1;
        if at > entry.1 {
            entry.1 = at;
        }
    }
    nodes
}

#[test]
fn the_fleet_view_shows_each_nodes_events_last_event_and_gaps() -> Result<()> {
    let ui = Ui::open()?;
    let expected = nodes_by_cli(path_str(&ui.db()));
    ensure!(!expected.is_empty(), "the recorded store has no events");
    // The range is part of the view's URL, so a shared link shows the same numbers.
    ui.browser
        .goto(&ui.url(&[("view", "fleet"), ("since", "2h")]))?;
    let rows = ui.browser.wait("the fleet's rows", SHOWN, |b| {
        let rows = b.script(
            "return [...document.querySelectorAll('table#fleet tr.node-row')].map(tr => ({\n\
               node: tr.getAttribute('data-node'),\n\
               cells: [...tr.cells].map(td => td.textContent),\n\
               last: tr.cells[1].getAttribute('title') }));",
            vec![],
        )?;
        let rows = rows.as_array().cloned().unwrap_or_default();
        Ok((!rows.is_empty()).then_some(rows))
    })?;
    let range = ui.browser.script(
        "return document.getElementById('fleet-since').value;",
        vec![],
    )?;
    ensure!(range == "2h", "the fleet's range from the URL: {range}");
    ensure!(
        ui.param("since")?.as_deref() == Some("2h"),
        "{:?}",
        ui.params()?
    );
    let shown: BTreeMap<String, &Value> = rows
        .iter()
        .map(|r| (r["node"].as_str().unwrap_or_default().to_owned(), r))
        .collect();
    ensure!(
        shown.keys().eq(expected.keys()),
        "nodes shown {:?}, stored {:?}",
        shown.keys(),
        expected.keys()
    );
    for (node, (events, last)) in &expected {
        let row = shown[node];
        let cells: Vec<&str> = row["cells"]
            .as_array()
            .context("cells")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        ensure!(
            cells[2] == events.to_string(),
            "{node}: {cells:?}, {events} stored"
        );
        let shown_last = chrono::DateTime::parse_from_rfc3339(row["last"].as_str().unwrap_or(""))?;
        let stored_last = chrono::DateTime::parse_from_rfc3339(last)?;
        ensure!(
            (shown_last - stored_last).num_milliseconds().abs() < 1,
            "{node}: last event {shown_last}, stored {stored_last}"
        );
    }
    // The recording's node had its gateway stopped and started again: one gap at
    // least (the restart's), told as a count and a duration.
    let recorded = shown
        .values()
        .find(|r| r["node"].as_str() != Some(""))
        .context("the recording node's row")?;
    let gaps: u64 = recorded["cells"][4].as_str().unwrap_or("").parse()?;
    ensure!(gaps >= 1, "no gap shown: {recorded}");
    Ok(())
}
