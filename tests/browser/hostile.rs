//! Names, labels and payloads are hostile input: a pod named `<img onerror=...>` in a
//! namespace `<script>...`, a container named `javascript:...`, and a published event
//! whose container id is a script element are shown as text in every view, and
//! nothing of them runs.

use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::scenario::{EVIL, EVIL_CONTAINER, EVIL_ID, EVIL_NS, EVIL_POD};
use crate::support::audit::stored;
use crate::support::publish_json;
use crate::ui::{SHOWN, Ui};

/// The page holds no element made from event text: no image, frame, object or
/// script but the page's own, no event-handler attribute, no `javascript:` link.
fn assert_no_markup_from_events(ui: &Ui) -> Result<()> {
    let found = ui.browser.script(
        "const bad = [];\n\
         for (const e of document.querySelectorAll('*')) {\n\
           const tag = e.localName;\n\
           if (['img', 'iframe', 'object', 'embed', 'image', 'foreignobject'].includes(tag)) bad.push(e.outerHTML);\n\
           if (tag === 'script' && !(e.src || '').endsWith('/ui/app.js')) bad.push(e.outerHTML);\n\
           for (const a of e.attributes) {\n\
             if (a.name.startsWith('on') || /^\\s*javascript:/i.test(a.value) && /href|src|action/.test(a.name)) bad.push(tag + ' ' + a.name + '=' + a.value);\n\
           }\n\
         }\n\
         return bad;",
        vec![],
    )?;
    ensure!(
        found == serde_json::json!([]),
        "markup from events: {found}"
    );
    ui.assert_nothing_ran()
}

#[test]
fn markup_in_names_and_payloads_is_shown_as_text_and_never_runs() -> Result<()> {
    let ui = Ui::open()?;
    let s = ui.scenario;
    let picture = ui.timeline(&[("since", &s.since), ("until", &s.until)])?;
    let key = format!("{EVIL_NS}/{EVIL_POD}");
    let group = picture
        .groups
        .iter()
        .find(|g| g.key.as_deref() == Some(key.as_str()))
        .with_context(|| format!("no group {key:?}: {:#?}", picture.groups))?;
    ensure!(
        group.label.as_deref().is_some_and(|l| l.contains(EVIL_POD)),
        "the group's label shows {:?}",
        group.label
    );
    let lane = picture
        .lanes
        .iter()
        .find(|l| l.id.as_deref() == Some(EVIL))
        .context("no lane for the hostile pod's container")?;
    ensure!(
        lane.container.as_deref() == Some(EVIL_CONTAINER)
            && lane
                .label
                .as_deref()
                .is_some_and(|l| l.contains(EVIL_CONTAINER)),
        "{lane:?}"
    );
    ensure!(
        picture
            .lanes
            .iter()
            .any(|l| l.id.as_deref() == Some(EVIL_ID)),
        "no lane for the published event's container {EVIL_ID:?}"
    );
    assert_no_markup_from_events(&ui)?;

    // Its stored event, on a click, is text too.
    let rows = stored(&ui.db());
    let exit = rows
        .iter()
        .find(|r| r.topic == "/tasks/exit" && r.container() == Some(EVIL))
        .context("the hostile container's exit")?;
    crate::timeline::click_mark(&ui, exit.row_id)?;
    let shown = ui.browser.wait("the hostile event's JSON", SHOWN, |b| {
        let text = b.find("#detail-json")?.text()?;
        Ok(serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .filter(|json| json["event"]["container_id"] == EVIL))
    })?;
    ensure!(
        shown["pod"]["name"] == EVIL_POD
            && shown["pod"]["namespace"] == EVIL_NS
            && shown["container"]["name"] == EVIL_CONTAINER,
        "{shown}"
    );
    assert_no_markup_from_events(&ui)?;

    // In the search view's cells.
    let view = [
        ("view", "search"),
        ("filter", "topic~=\"^/tasks/(exit|oom)$\""),
        ("since", s.since.as_str()),
        ("until", s.until.as_str()),
    ];
    ui.browser.goto(&ui.url(&view))?;
    let cells = ui.browser.wait("the hostile rows", SHOWN, |b| {
        let all = b.script(
            "return [...document.querySelectorAll('table#results tr.event-row')]\
               .map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent));",
            vec![],
        )?;
        let all: Vec<Vec<String>> = serde_json::from_value(all)?;
        let evil = |t: &str| all.iter().any(|row| row.iter().any(|c| c.contains(t)));
        Ok((evil(EVIL_POD) && evil(EVIL_CONTAINER) && evil(EVIL_ID)).then_some(all))
    })?;
    ensure!(!cells.is_empty());
    assert_no_markup_from_events(&ui)?;

    // And live.
    ui.browser.goto(&ui.url(&[("view", "live")]))?;
    ui.browser
        .wait("#live-status to say connected", SHOWN, |b| {
            Ok((b.find("#live-status")?.text()?.trim() == "connected").then_some(()))
        })?;
    let (ok, err) = publish_json(
        &ui.gateway.address(),
        "default",
        "/tasks/oom",
        "containerd.events.TaskOOM",
        &serde_json::json!({ "container_id": EVIL_ID }).to_string(),
    );
    ensure!(ok, "{err}");
    ui.browser
        .wait("the hostile live event", Duration::from_secs(5), |b| {
            let text = b.find("#live-events")?.text()?;
            Ok(text.contains(EVIL_ID).then_some(()))
        })?;
    assert_no_markup_from_events(&ui)
}
