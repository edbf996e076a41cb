//! What every UI test starts from: a gateway serving a copy of the recorded store
//! (its admin listener on a free loopback port), Chromium, and the timeline picture
//! read back from the page as data. One browser at a time: the machine's cores go to
//! the page under test, so the live test measures the gateway, not contention.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde::Deserialize;
use serde_json::Value;

use crate::scenario::{self, Scenario};
use crate::support::Gateway;
use crate::support::webdriver::Browser;

/// How long the page may take to show what a test waits for.
pub const SHOWN: Duration = Duration::from_secs(15);

/// A test's browser, its gateway and its copy of the store.
pub struct Ui {
    // Field order: the browser closes before the gateway stops, the turn last.
    pub browser: Browser,
    pub gateway: Gateway,
    pub admin: SocketAddr,
    pub scenario: &'static Scenario,
    _turn: MutexGuard<'static, ()>,
}

impl Ui {
    pub fn open() -> Result<Ui> {
        let scenario = scenario::get();
        let turn = turn();
        let dir = tempfile::Builder::new().prefix("eg-ui").tempdir()?;
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)?;
        for entry in std::fs::read_dir(&scenario.data)? {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("audit.db") {
                std::fs::copy(entry.path(), data.join(&name))?;
            }
        }
        // Its default configuration: the sqlite forwarder at data/audit.db.
        let mut gateway = Gateway::start_in(dir, &[]);
        let admin = gateway.admin_addr();
        let browser = Browser::start()?;
        Ok(Ui {
            browser,
            gateway,
            admin,
            scenario,
            _turn: turn,
        })
    }

    /// The store this test's gateway serves.
    pub fn db(&self) -> PathBuf {
        self.gateway.dir.path().join("data/audit.db")
    }

    /// `/ui?` with these parameters, as a URL of the admin listener.
    pub fn url(&self, params: &[(&str, &str)]) -> String {
        format!("http://{}/ui?{}", self.admin, query(params))
    }

    /// Opens the timeline of `params` and waits for its picture.
    pub fn timeline(&self, params: &[(&str, &str)]) -> Result<Picture> {
        let mut all = vec![("view", "timeline")];
        all.extend_from_slice(params);
        self.browser.goto(&self.url(&all))?;
        self.wait_picture(SHOWN)
    }

    /// Waits for a picture in `#timeline` that has not been read before; reads it.
    pub fn wait_picture(&self, deadline: Duration) -> Result<Picture> {
        let value = self.browser.wait("a new timeline picture", deadline, |b| {
            let found = b.script(
                &format!(
                    "const svg = document.querySelector('#timeline svg.eg-timeline');\n\
                     if (!svg || svg.__read) return null;\n\
                     svg.__read = true;\n\
                     return ({READ})(svg);"
                ),
                vec![],
            )?;
            Ok((!found.is_null()).then_some(found))
        })?;
        Picture::from_json(value)
    }

    /// The page's URL parameters now.
    pub fn params(&self) -> Result<Vec<(String, String)>> {
        let url = self.browser.url()?;
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let query = query.split('#').next().unwrap_or_default();
        Ok(query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k), decode(v))
            })
            .collect())
    }

    pub fn param(&self, name: &str) -> Result<Option<String>> {
        Ok(self
            .params()?
            .into_iter()
            .find_map(|(k, v)| (k == name).then_some(v)))
    }

    /// Saves the page as `target/screenshots/NAME`.
    pub fn screenshot(&self, name: &str) -> Result<PathBuf> {
        let path = screenshots().join(name);
        self.browser.save_screenshot(&path)?;
        Ok(path)
    }

    /// Whether any markup from the store ran: the flag the hostile names set, or an
    /// alert left open.
    pub fn assert_nothing_ran(&self) -> Result<()> {
        let pwned = self
            .browser
            .script("return typeof window.__pwned;", vec![])?;
        anyhow::ensure!(
            pwned == "undefined",
            "window.__pwned is {pwned}: markup ran"
        );
        let alert = self.browser.alert()?;
        anyhow::ensure!(alert.is_none(), "an alert is open: {alert:?}");
        Ok(())
    }
}

/// This test's turn with the browser: one Chromium at a time.
pub fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    // A test that failed while holding the turn leaves nothing behind to guard.
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// `target/screenshots`.
pub fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("screenshots")
}

/// Reads an `svg.eg-timeline` into plain data (the classes and attributes the
/// timeline's shape defines); the same for the page and for exported files.
pub const READ: &str = r#"function (svg) {
  const a = (e, n) => e.getAttribute(n);
  const text = (e, css) => { const t = e.querySelector(css); return t ? t.textContent : null; };
  const up = (e, css, n) => { const p = e.parentElement && e.parentElement.closest(css); return p ? a(p, n) : null; };
  return {
    from: a(svg, 'data-from'), to: a(svg, 'data-to'),
    groups: [...svg.querySelectorAll('.group')].map(g => ({
      key: a(g, 'data-group'), label: text(g, '.group-label'),
      restarts: g.querySelector('.restarts') ? a(g.querySelector('.restarts'), 'data-restarts') : null })),
    lanes: [...svg.querySelectorAll('.lane')].map(l => ({
      pod: a(l, 'data-pod'), container: a(l, 'data-container'), id: a(l, 'data-container-id'),
      label: text(l, '.lane-label'), group: up(l, '.group', 'data-group') })),
    marks: [...svg.querySelectorAll('.mark')].map(m => ({
      row: a(m, 'data-row'), topic: a(m, 'data-topic'), classes: [...m.classList].sort(),
      status: a(m, 'data-status'), restart: a(m, 'data-restart'),
      lane: up(m, '.lane', 'data-container-id'), title: text(m, 'title') })),
    gaps: [...svg.querySelectorAll('.gap')].map(g => ({ from: a(g, 'data-from'), to: a(g, 'data-to') })),
    reconciled_spans: svg.querySelectorAll('.reconciled-span').length,
    truncated: text(svg, '.truncated'),
  };
}"#;

/// A timeline picture as the page (or a file) shows it.
#[derive(Debug, Deserialize)]
pub struct Picture {
    pub from: Option<String>,
    pub to: Option<String>,
    pub groups: Vec<GroupView>,
    pub lanes: Vec<Lane>,
    pub marks: Vec<Mark>,
    pub gaps: Vec<Gap>,
    pub reconciled_spans: usize,
    pub truncated: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct GroupView {
    pub key: Option<String>,
    pub label: Option<String>,
    pub restarts: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Lane {
    pub pod: Option<String>,
    pub container: Option<String>,
    pub id: Option<String>,
    pub label: Option<String>,
    pub group: Option<String>,
}

#[derive(Debug, Deserialize, Clone)]
pub struct Mark {
    pub row: Option<String>,
    pub topic: Option<String>,
    pub classes: Vec<String>,
    pub status: Option<String>,
    pub restart: Option<String>,
    pub lane: Option<String>,
    pub title: Option<String>,
}

impl Mark {
    pub fn has(&self, class: &str) -> bool {
        self.classes.iter().any(|c| c == class)
    }
}

#[derive(Debug, Deserialize)]
pub struct Gap {
    pub from: Option<String>,
    pub to: Option<String>,
}

impl Picture {
    pub fn from_json(value: Value) -> Result<Picture> {
        serde_json::from_value(value.clone()).with_context(|| format!("not a picture: {value}"))
    }

    /// The axis range, unix milliseconds.
    pub fn range(&self) -> Result<(u64, u64)> {
        let ms = |v: &Option<String>| {
            v.as_deref().and_then(|v| v.parse().ok()).ok_or_else(|| {
                anyhow!(
                    "no axis range on the picture: {:?}..{:?}",
                    self.from,
                    self.to
                )
            })
        };
        Ok((ms(&self.from)?, ms(&self.to)?))
    }

    /// The mark of a stored row.
    pub fn mark(&self, row: i64) -> Option<&Mark> {
        let row = row.to_string();
        self.marks
            .iter()
            .find(|m| m.row.as_deref() == Some(row.as_str()))
    }
}

/// Percent-encodes a query parameter (everything but unreserved characters).
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn query(params: &[(&str, &str)]) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Decodes a query parameter (`+` is a space, as forms and URLSearchParams write it).
pub fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&text[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An RFC 3339 time or unix milliseconds (what the URL may hold) as milliseconds.
pub fn to_ms(text: &str) -> Result<u64> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let t = chrono::DateTime::parse_from_rfc3339(text)
        .with_context(|| format!("not a time: {text:?}"))?;
    u64::try_from(t.timestamp_millis()).with_context(|| format!("before 1970: {text}"))
}
