//! The timeline view of one pod, read as a user reads it: a lane per container in the
//! pod's group, its restarts as `stats --by pod` counts them, exits marked by their
//! status, reconstructed events and the gap told apart, a click showing the stored
//! event; zooming and panning change the range in the URL and redraw; a bad filter
//! says containerd's message where it was typed.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

use crate::recorded::pod_stats;
use crate::scenario::{self, APPS, POD, POD_NS};
use crate::support::audit::{Row, stored};
use crate::support::{path_str, stores::query_json};
use crate::ui::{SHOWN, Ui, to_ms};

/// Every exit class; a mark carries exactly one.
const EXIT_CLASSES: [&str; 5] = [
    "exit-zero",
    "exit-uncounted",
    "exit-nonzero",
    "exit-137",
    "exit-oom",
];

/// The stored rows of the scenario's pod.
fn pod_rows(rows: &[Row]) -> Vec<&Row> {
    let ids: BTreeSet<&str> = scenario_containers();
    rows.iter()
        .filter(|r| r.container().is_some_and(|c| ids.contains(c)))
        .collect()
}

fn scenario_containers() -> BTreeSet<&'static str> {
    let mut ids: BTreeSet<&str> = APPS.iter().map(|a| a.0).collect();
    ids.extend([scenario::SANDBOX, scenario::CACHE, scenario::WORKER]);
    ids
}

#[test]
fn a_pods_timeline_shows_its_containers_exits_restarts_gap_and_stored_events() -> Result<()> {
    let ui = Ui::open()?;
    let s = ui.scenario;
    let picture = ui.timeline(&[("pod", POD), ("since", &s.since), ("until", &s.until)])?;
    let key = format!("{POD_NS}/{POD}");

    // One group, the pod, holding one lane per container it had.
    let groups: Vec<_> = picture.groups.iter().map(|g| g.key.clone()).collect();
    ensure!(groups == [Some(key.clone())], "groups: {groups:?}");
    let lanes: BTreeSet<&str> = picture
        .lanes
        .iter()
        .filter_map(|l| l.id.as_deref())
        .collect();
    ensure!(
        lanes == scenario_containers() && picture.lanes.len() == lanes.len(),
        "lanes: {:#?}",
        picture.lanes
    );
    for lane in &picture.lanes {
        ensure!(
            lane.pod.as_deref() == Some(key.as_str()) && lane.group.as_deref() == Some(&key),
            "{lane:?}"
        );
    }
    let apps: Vec<_> = picture
        .lanes
        .iter()
        .filter(|l| l.id.as_deref().is_some_and(|id| id.starts_with("web-app-")))
        .collect();
    ensure!(
        apps.iter().all(|l| l.container.as_deref() == Some("app")),
        "{apps:?}"
    );

    // Restarts as `stats --by pod` counts them for the same range.
    let counts = pod_stats(path_str(&ui.db()), &key);
    let restarts = picture.groups[0].restarts.clone();
    ensure!(
        restarts == Some(counts[0].to_string()) && counts[0] == 3,
        "the page says {restarts:?} restarts, stats {counts:?}"
    );
    let numbered: BTreeSet<String> = picture
        .marks
        .iter()
        .filter(|m| m.has("restart"))
        .filter_map(|m| m.restart.clone())
        .collect();
    ensure!(
        numbered == BTreeSet::from(["1".into(), "2".into(), "3".into()]),
        "restart marks: {numbered:?}"
    );

    // Each exit of the app container marked by its status.
    let rows = stored(&ui.db());
    let pod = pod_rows(&rows);
    for (id, _, _, status, class) in APPS {
        let exit = pod
            .iter()
            .find(|r| r.topic == "/tasks/exit" && r.container() == Some(id))
            .with_context(|| format!("{id}'s stored exit"))?;
        let mark = picture
            .mark(exit.row_id)
            .with_context(|| format!("no mark for {id}'s exit (row {})", exit.row_id))?;
        let classes: Vec<&str> = EXIT_CLASSES.into_iter().filter(|c| mark.has(c)).collect();
        ensure!(
            mark.has("mark-exit") && classes == [class] && mark.status == Some(status.to_string()),
            "{id} exited {status}: {mark:?}"
        );
        ensure!(
            mark.lane.as_deref() == Some(id),
            "{id}'s exit in lane {:?}",
            mark.lane
        );
        // Its tooltip tells the status too.
        ensure!(
            mark.title
                .as_deref()
                .is_some_and(|t| t.contains(&status.to_string())),
            "{id}'s exit mark's title: {:?}",
            mark.title
        );
    }

    // What the reconcile reconstructed, and only that, is marked so.
    let reconciled: BTreeSet<String> = pod
        .iter()
        .filter(|r| r.origin == "reconciled")
        .map(|r| r.row_id.to_string())
        .collect();
    ensure!(reconciled.len() >= 2, "reconstructed rows: {reconciled:?}");
    let marked: BTreeSet<String> = picture
        .marks
        .iter()
        .filter(|m| m.has("reconciled"))
        .filter_map(|m| m.row.clone())
        .collect();
    ensure!(
        marked == reconciled,
        "marked {marked:?}, stored {reconciled:?}"
    );
    // The gap the restart left, the whole outage: from the disconnected marker the
    // stopping gateway wrote to the restarted one's connect.
    let ms = |v: &Option<String>| v.as_deref().and_then(|v| v.parse::<u64>().ok());
    let restart_gap = picture.gaps.iter().any(|g| {
        matches!((ms(&g.from), ms(&g.to)), (Some(from), Some(to))
            if from >= s.stopping_ms && from <= s.stopped_ms && to >= s.restarted_ms
                && to < s.restarted_ms + 20_000)
    });
    ensure!(
        restart_gap,
        "no gap over the outage ({}..{}..{}): {:?}",
        s.stopping_ms,
        s.stopped_ms,
        s.restarted_ms,
        picture.gaps
    );
    ensure!(picture.reconciled_spans >= 1, "no reconciled span");
    ensure!(picture.truncated.is_none(), "{:?}", picture.truncated);

    ui.screenshot("ui-timeline.png")?;

    // A click on the first app's non-zero exit (or whatever mark is drawn over it
    // there) shows that mark's stored event.
    let nonzero = pod
        .iter()
        .find(|r| r.topic == "/tasks/exit" && r.container() == Some(APPS[0].0))
        .context("the non-zero exit")?;
    let row = click_mark(&ui, nonzero.row_id)?;
    let detail = ui
        .browser
        .wait("the stored event in #detail-json", SHOWN, |b| {
            let pre = b.find("#detail-json")?;
            if !pre.displayed()? {
                return Ok(None);
            }
            let text = pre.property("textContent")?;
            let text = text.as_str().unwrap_or_default();
            Ok(serde_json::from_str::<Value>(text)
                .ok()
                .filter(|v| v.get("id").is_some()))
        })?;
    let clicked = rows
        .iter()
        .find(|r| r.row_id == row)
        .context("the clicked row")?;
    let cli = query_json(&ui.db(), &["--pod", POD])
        .into_iter()
        .find(|e| e["id"] == clicked.id.as_str())
        .context("the clicked event in `query --pod`")?;
    for field in [
        "id",
        "topic",
        "origin",
        "node",
        "publisher",
        "timestamp",
        "event",
    ] {
        ensure!(
            detail.get(field) == cli.get(field),
            "{field}: the page shows {:?}, query {:?}",
            detail.get(field),
            cli.get(field)
        );
    }
    ensure!(
        detail["node"].is_string() && detail["origin"] == "live",
        "{detail}"
    );
    Ok(())
}

/// Clicks at the centre of row `row`'s mark, as a user would; returns the row of the
/// mark that took the click (the one drawn on top there).
pub fn click_mark(ui: &Ui, row: i64) -> Result<i64> {
    let top = ui.browser.script(
        "const m = document.querySelector(`#timeline .mark[data-row=\"${arguments[0]}\"]`);\n\
         if (!m) return null;\n\
         m.scrollIntoView({block: 'center', inline: 'center'});\n\
         const r = m.getBoundingClientRect();\n\
         const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);\n\
         const mark = hit && hit.closest('.mark');\n\
         return mark ? mark.getAttribute('data-row') : null;",
        vec![Value::from(row)],
    )?;
    let top = top
        .as_str()
        .with_context(|| format!("no mark can be clicked where row {row}'s is drawn"))?
        .to_owned();
    ui.browser
        .find(&format!("#timeline .mark[data-row=\"{top}\"]"))?
        .click()?;
    top.parse().context("data-row")
}

/// The axis range in the URL, milliseconds.
fn url_range(ui: &Ui) -> Result<(u64, u64)> {
    let since = ui.param("since")?.context("no since in the URL")?;
    let until = ui.param("until")?.context("no until in the URL")?;
    Ok((to_ms(&since)?, to_ms(&until)?))
}

/// Whether the URL's range is the picture's, to the second the URL may round to.
fn same_range(url: (u64, u64), picture: (u64, u64)) -> bool {
    url.0.abs_diff(picture.0) < 1000 && url.1.abs_diff(picture.1) < 1000
}

#[test]
fn zoom_and_pan_change_the_range_in_the_url_and_redraw() -> Result<()> {
    let ui = Ui::open()?;
    let s = ui.scenario;
    let before = ui
        .timeline(&[("pod", POD), ("since", &s.since), ("until", &s.until)])?
        .range()?;
    ensure!(same_range(url_range(&ui)?, before), "{before:?}");
    let url = ui.browser.url()?;

    ui.browser.find("#zoom-in")?.click()?;
    let zoomed = ui.wait_picture(SHOWN)?.range()?;
    ensure!(ui.browser.url()? != url, "zooming left the URL as it was");
    ensure!(
        same_range(url_range(&ui)?, zoomed),
        "URL {:?}, picture {zoomed:?}",
        url_range(&ui)?
    );
    ensure!(
        zoomed.0 >= before.0 && zoomed.1 <= before.1 && zoomed.1 - zoomed.0 < before.1 - before.0,
        "zoomed in from {before:?} to {zoomed:?}"
    );

    ui.browser.find("#pan-left")?.click()?;
    let panned = ui.wait_picture(SHOWN)?.range()?;
    ensure!(
        same_range(url_range(&ui)?, panned),
        "URL {:?}, picture {panned:?}",
        url_range(&ui)?
    );
    ensure!(
        panned.0 < zoomed.0 && (panned.1 - panned.0).abs_diff(zoomed.1 - zoomed.0) < 1000,
        "panned left from {zoomed:?} to {panned:?}"
    );

    ui.browser.find("#zoom-out")?.click()?;
    let out = ui.wait_picture(SHOWN)?.range()?;
    ensure!(
        same_range(url_range(&ui)?, out),
        "URL {:?}, picture {out:?}",
        url_range(&ui)?
    );
    ensure!(
        out.1 - out.0 > panned.1 - panned.0,
        "zoomed out from {panned:?} to {out:?}"
    );

    // The URL is the view: loading it again draws the same range.
    let shared = ui.browser.url()?;
    ui.browser.goto(&shared)?;
    let again = ui.wait_picture(SHOWN)?.range()?;
    ensure!(
        same_range(again, out),
        "{shared} drew {again:?}, not {out:?}"
    );
    Ok(())
}

#[test]
fn a_bad_filter_shows_containerds_message_under_the_filter() -> Result<()> {
    let ui = Ui::open()?;
    let s = ui.scenario;
    ui.timeline(&[("since", &s.since), ("until", &s.until)])?;
    let bad = "topic==";
    // What the CLI says of the same filter.
    let out = crate::support::eventgate()
        .args(["query", "--db", path_str(&ui.db()), bad])
        .output()?;
    ensure!(!out.status.success(), "the CLI took {bad:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    // containerd's parser message: after the CLI's `error: ` and the `filters: ` it
    // puts before any filter's error.
    let message = said
        .trim()
        .trim_start_matches("error: ")
        .trim_start_matches("filters: ")
        .to_owned();
    ensure!(message.contains("parse error"), "{said}");

    let filter = ui.browser.find("#filter")?;
    filter.clear()?;
    filter.send_keys(bad)?;
    ui.browser.find("#apply")?.click()?;
    let shown = ui.browser.wait("the filter's error", SHOWN, |b| {
        let error = b.find("#filter-error")?;
        let text = error.text()?;
        Ok((error.displayed()? && !text.is_empty()).then_some(text))
    })?;
    ensure!(
        shown.contains(&message),
        "#filter-error says {shown:?}; the CLI {message:?}"
    );
    // Right under the field it is about.
    let boxes = ui.browser.script(
        "const f = document.querySelector('#filter').getBoundingClientRect();\n\
         const e = document.querySelector('#filter-error').getBoundingClientRect();\n\
         return [f.left, f.right, f.bottom, e.left, e.right, e.top];",
        vec![],
    )?;
    let b: Vec<f64> = serde_json::from_value(boxes)?;
    ensure!(
        b[5] >= b[2] - 1.0 && b[5] - b[2] < 60.0 && b[3] < b[1] && b[4] > b[0],
        "#filter at x {}..{} bottom {}; #filter-error at x {}..{} top {}",
        b[0],
        b[1],
        b[2],
        b[3],
        b[4],
        b[5]
    );

    // A good filter clears it.
    filter.clear()?;
    filter.send_keys("topic==\"/tasks/exit\"")?;
    ui.browser.find("#apply")?.click()?;
    ui.browser.wait("the error to go", SHOWN, |b| {
        Ok((!b.find("#filter-error")?.displayed()?).then_some(()))
    })?;
    let picture = ui.wait_picture(SHOWN)?;
    let topics: BTreeMap<String, usize> =
        picture.marks.iter().fold(BTreeMap::new(), |mut all, m| {
            *all.entry(m.topic.clone().unwrap_or_default()).or_default() += 1;
            all
        });
    ensure!(
        topics.keys().all(|t| t == "/tasks/exit") && !topics.is_empty(),
        "{topics:?}"
    );
    Ok(())
}

/// A bare `/ui` opens on the last hour, not on the store's oldest events (a picture
/// draws its first rows), and says so in its URL.
#[test]
fn a_bare_url_opens_on_the_last_hour() -> Result<()> {
    let ui = Ui::open()?;
    ui.browser.goto(&format!("http://{}/ui", ui.admin))?;
    let picture = ui.wait_picture(SHOWN)?;
    ensure!(
        ui.param("since")?.as_deref() == Some("1h"),
        "{:?}",
        ui.params()?
    );
    let (from, _) = picture.range()?;
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64
        - 3_600_000;
    ensure!(
        from.abs_diff(hour_ago) < 60_000,
        "the axis starts at {from}, an hour ago was {hour_ago}"
    );
    ensure!(
        !picture.lanes.is_empty(),
        "nothing recorded in the last hour drawn"
    );
    Ok(())
}
