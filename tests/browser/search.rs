//! The search view: rows of the stored events the view's filter and range select,
//! paged; its export links download exactly that selection.

use std::collections::BTreeSet;

use anyhow::{Context, Result, ensure};

use crate::scenario::{BATCH, BATCH_NS, POD, POD_NS};
use crate::support::http_get;
use crate::ui::{SHOWN, Ui, decode};

/// The rows shown: (data-row, the cells' text).
fn rows(ui: &Ui) -> Result<Vec<(String, Vec<String>)>> {
    ui.browser
        .find_all("table#results tbody tr.event-row")?
        .iter()
        .map(|tr| {
            let row = tr.attr("data-row")?.context("a row without data-row")?;
            let cells = tr
                .find_all("td")?
                .iter()
                .map(|td| td.text())
                .collect::<Result<_>>()?;
            Ok((row, cells))
        })
        .collect()
}

/// Waits until the rows shown are not `before`'s; returns them.
fn wait_rows(ui: &Ui, before: &[String]) -> Result<Vec<(String, Vec<String>)>> {
    ui.browser.wait("new result rows", SHOWN, |_| {
        let now = rows(ui)?;
        let ids: Vec<String> = now.iter().map(|r| r.0.clone()).collect();
        Ok((!now.is_empty() && ids != before).then_some(now))
    })
}

/// An export link's path and parameters.
fn link(ui: &Ui, css: &str) -> Result<(String, Vec<(String, String)>)> {
    let href = ui.browser.find(css)?.attr("href")?.context("no href")?;
    let (path, query) = href.split_once('?').unwrap_or((&href, ""));
    let path = path
        .strip_prefix(&format!("http://{}", ui.admin))
        .unwrap_or(path)
        .to_owned();
    let params = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    Ok((path, params))
}

#[test]
fn search_pages_through_the_selection_and_exports_it() -> Result<()> {
    let ui = Ui::open()?;
    let s = ui.scenario;
    // The pod's events: its own columns filled in.
    let pod = format!("pod.namespace=={POD_NS}");
    ui.browser.goto(&ui.url(&[
        ("view", "search"),
        ("filter", pod.as_str()),
        ("since", &s.since),
        ("until", &s.until),
    ]))?;
    let rows_of_pod = wait_rows(&ui, &[])?;
    for (row, cells) in &rows_of_pod {
        ensure!(
            cells[4] == format!("{POD_NS}/{POD}") && cells[2] == "k8s.io",
            "row {row}: {cells:?}"
        );
    }
    ensure!(
        rows_of_pod.iter().any(|r| r.1[6] == "reconciled"),
        "no reconstructed event among the pod's"
    );
    ui.screenshot("ui-search.png")?;

    let filter = format!("namespace=={BATCH_NS}");
    let view = [
        ("view", "search"),
        ("filter", filter.as_str()),
        ("since", &s.since),
        ("until", &s.until),
    ];
    ui.browser.goto(&ui.url(&view))?;
    let first = wait_rows(&ui, &[])?;
    ensure!(
        first.len() < BATCH,
        "one page held all {} rows; paging is not tested",
        first.len()
    );
    for (row, cells) in &first {
        ensure!(cells.len() == 8, "row {row}: {cells:?}");
        // time, node, namespace, topic, pod, container, origin, summary
        ensure!(
            cells[2] == BATCH_NS && cells[3] == "/images/create" && cells[6] == "live",
            "row {row}: {cells:?}"
        );
    }

    // Every page is new rows of the same selection, until all of it was shown.
    let mut seen: BTreeSet<String> = first.iter().map(|r| r.0.clone()).collect();
    let mut page: Vec<String> = first.iter().map(|r| r.0.clone()).collect();
    while seen.len() < BATCH {
        ui.browser.find("#next-page")?.click()?;
        let next = wait_rows(&ui, &page)?;
        page = next.iter().map(|r| r.0.clone()).collect();
        for (row, cells) in &next {
            ensure!(seen.insert(row.clone()), "row {row} shown twice");
            ensure!(cells[2] == BATCH_NS, "row {row}: {cells:?}");
        }
    }
    ensure!(seen.len() == BATCH, "{} rows shown of {BATCH}", seen.len());
    ui.browser.find("#prev-page")?.click()?;
    let back = wait_rows(&ui, &page)?;
    ensure!(
        back.iter().all(|r| seen.contains(&r.0)),
        "the previous page holds rows never shown"
    );
    ensure!(
        ui.param("view")?.as_deref() == Some("search")
            && ui.param("filter")?.as_deref() == Some(filter.as_str()),
        "the URL lost the view: {}",
        ui.browser.url()?
    );

    // The export links are the view's selection, in each format.
    for (css, format) in [("a#export-jsonl", "jsonl"), ("a#export-csv", "csv")] {
        let (path, params) = link(&ui, css)?;
        ensure!(path == "/ui/api/export", "{css}: {path}");
        let has = |k: &str, v: &str| params.iter().any(|(pk, pv)| pk == k && pv == v);
        ensure!(
            has("format", format)
                && has("filter", &filter)
                && has("since", &s.since)
                && has("until", &s.until),
            "{css}: {params:?}"
        );
        let href = ui.browser.find(css)?.attr("href")?.context("href")?;
        let href = href
            .strip_prefix(&format!("http://{}", ui.admin))
            .unwrap_or(&href);
        let (code, body) = http_get(ui.admin, href);
        ensure!(code == 200, "{href}: {code} {body}");
        let lines: Vec<&str> = body.lines().filter(|l| !l.is_empty()).collect();
        match format {
            "jsonl" => {
                ensure!(lines.len() == BATCH, "{} lines", lines.len());
                for line in lines {
                    let event: serde_json::Value = serde_json::from_str(line)?;
                    ensure!(event["namespace"] == BATCH_NS, "{line}");
                }
            }
            _ => {
                // A header, then one line per event (no field here holds a newline).
                ensure!(lines.len() == BATCH + 1, "{} lines", lines.len());
                ensure!(
                    lines[1..].iter().all(|l| l.contains(BATCH_NS)),
                    "{}",
                    lines[1]
                );
            }
        }
    }
    Ok(())
}
