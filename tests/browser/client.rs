//! The WebDriver client itself, on a page of the test's own: what the UI tests
//! build on (finding, reading, typing, clicking, scripts, alerts, screenshots) works
//! in this Chromium, so a failure there is the UI's.

use std::time::Duration;

use serde_json::json;

use crate::support::webdriver::{Browser, is_code};

const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>probe</title></head>
<body>
<p id="greeting" data-kind="plain">Hello &lt;b&gt;</p>
<input id="name"><button id="go" onclick="document.getElementById('out').textContent = 'hi ' + document.getElementById('name').value; setTimeout(function () { document.body.insertAdjacentHTML('beforeend', '<span class=late>late</span>'); }, 50)">go</button>
<p id="out"></p>
<ul><li class="item">a</li><li class="item">b</li></ul>
<button id="warn" onclick="alert('careful')">warn</button>
</body></html>"#;

#[test]
fn the_webdriver_client_reads_types_clicks_and_sees_alerts() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let page = dir.path().join("page.html");
    std::fs::write(&page, PAGE)?;
    let _turn = crate::ui::turn();
    let browser = Browser::start()?;
    let url = format!("file://{}", page.display());
    browser.goto(&url)?;
    assert_eq!(browser.url()?, url);

    let greeting = browser.find("#greeting")?;
    assert_eq!(greeting.text()?, "Hello <b>");
    assert_eq!(greeting.attr("data-kind")?.as_deref(), Some("plain"));
    assert_eq!(greeting.attr("data-missing")?, None);
    assert!(greeting.displayed()?);
    let items: Vec<String> = browser
        .find_all("li.item")?
        .iter()
        .map(|e| e.text())
        .collect::<Result<_, _>>()?;
    assert_eq!(items, ["a", "b"]);
    let missing = browser.find("#nothing").err().expect("no such element");
    assert!(is_code(&missing, "no such element"), "{missing:#}");

    let name = browser.find("#name")?;
    name.send_keys("<world>")?;
    assert_eq!(name.property("value")?, json!("<world>"));
    browser.find("#go")?.click()?;
    assert_eq!(browser.find("#out")?.text()?, "hi <world>");
    let late = browser.wait_for_all("span.late", Duration::from_secs(5))?;
    assert_eq!(late.len(), 1);
    name.clear()?;
    assert_eq!(name.property("value")?, json!(""));

    let sum = browser.script(
        "return arguments[0] + arguments[1].textContent.length;",
        vec![json!(40), greeting.json()],
    )?;
    assert_eq!(sum, json!(49));
    assert_eq!(
        browser.script("return window.__nothing === undefined;", vec![])?,
        json!(true)
    );

    assert_eq!(browser.alert()?, None);
    browser.find("#warn")?.click()?;
    assert_eq!(browser.alert()?.as_deref(), Some("careful"));
    browser.command("POST", "/alert/accept", Some(json!({})))?;
    assert_eq!(browser.alert()?, None);

    let png = browser.screenshot()?;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // The window's size, as asked: 1400 wide (IHDR's width, big-endian, at byte 16).
    let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
    assert_eq!(width, 1400);
    Ok(())
}
