//! The live view: an event published now is on the page within a second, newest
//! first, without a reload.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};

use crate::support::eventgate;
use crate::ui::{SHOWN, Ui};

/// What the issue promises: new events appear within a second.
const WITHIN: Duration = Duration::from_secs(1);

/// Publishes a `/tasks/oom` of `container` through the gateway's socket, as `eventgate
/// publish` does, and waits for it on the page; the time from publishing to showing.
fn publish_and_see(ui: &Ui, container: &str) -> Result<Duration> {
    let json = serde_json::json!({ "container_id": container }).to_string();
    let start = Instant::now();
    let mut publish = eventgate()
        .args(["publish", "--address", &ui.gateway.address()])
        .args(["--namespace", "default", "--topic", "/tasks/oom"])
        .args(["--event-type", "containerd.events.TaskOOM", "--json", &json])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let shown = ui
        .browser
        .wait(&format!("{container} in #live-events"), WITHIN, |b| {
            let first = b.script(
                "const li = document.querySelector('ul#live-events li.live-event');\n\
             return li ? li.textContent : null;",
                vec![],
            )?;
            Ok(first
                .as_str()
                .is_some_and(|text| text.contains(container))
                .then(|| start.elapsed()))
        });
    let status = publish.wait()?;
    ensure!(status.success(), "eventgate publish failed: {status}");
    shown
}

#[test]
fn an_event_published_now_is_shown_live_within_a_second() -> Result<()> {
    let ui = Ui::open()?;
    ui.browser.goto(&ui.url(&[("view", "live")]))?;
    ui.browser
        .wait("#live-status to say connected", SHOWN, |b| {
            Ok((b.find("#live-status")?.text()?.trim() == "connected").then_some(()))
        })?;
    let mut latencies = Vec::new();
    for i in 0..5 {
        let container = format!("live-{i}-{}", std::process::id());
        latencies.push(publish_and_see(&ui, &container)?);
    }
    // Newest first, each once.
    let shown = ui.browser.script(
        "return [...document.querySelectorAll('ul#live-events li.live-event')].map(li => li.textContent);",
        vec![],
    )?;
    let shown: Vec<String> = serde_json::from_value(shown)?;
    let order: Vec<usize> = (0..5)
        .rev()
        .filter_map(|i| {
            let id = format!("live-{i}-{}", std::process::id());
            shown.iter().position(|t| t.contains(&id))
        })
        .collect();
    ensure!(
        order.len() == 5 && order.windows(2).all(|w| w[0] < w[1]),
        "not newest first: {shown:#?}"
    );
    eprintln!("live: published to shown in {latencies:?}");
    Ok(())
}
