//! A small W3C WebDriver client: one HTTP/1.1 request per connection to chromedriver
//! (loopback, so a connection costs less than the command), JSON bodies, and the
//! few commands the browser tests use. Waits poll a condition until a deadline.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use serde_json::{Value, json};

use super::chromium::{self, Chromedriver};

/// The key of an element reference in WebDriver's JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long one command may take: a navigation waits for the page's load event, and
/// a new session for Chromium to start on a busy machine.
const COMMAND: Duration = Duration::from_secs(60);

/// An error chromedriver answered with: its code (`no such element`, `no such alert`,
/// `javascript error`, ...) and message.
#[derive(Debug)]
pub struct WebDriverError {
    pub code: String,
    pub message: String,
}

impl std::fmt::Display for WebDriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "webdriver: {}: {}", self.code, self.message)
    }
}

impl std::error::Error for WebDriverError {}

/// Whether `error` is chromedriver's answer with this code.
pub fn is_code(error: &anyhow::Error, code: &str) -> bool {
    error
        .downcast_ref::<WebDriverError>()
        .is_some_and(|e| e.code == code)
}

/// One request to chromedriver on `port`: (HTTP status, JSON body).
pub fn request(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connect to chromedriver on port {port}"))?;
    stream.set_read_timeout(Some(COMMAND))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    // chromedriver keeps the connection open whatever the request says: the answer
    // ends where its Content-Length (or last chunk) says.
    let mut response = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    let (head, body) = loop {
        if let Some(split) = response.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
            let body = &response[split + 4..];
            let done = match content_length(&head) {
                Some(length) => (body.len() >= length).then(|| body[..length].to_vec()),
                None if head.contains("transfer-encoding: chunked") => dechunk(body),
                None => None,
            };
            if let Some(body) = done {
                break (head, body);
            }
        }
        let n = stream
            .read(&mut buf)
            .with_context(|| format!("{method} {path}: read the answer"))?;
        if n == 0 {
            // No length given: the answer ends with the connection.
            if let Some(split) = response.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
                break (head, response[split + 4..].to_vec());
            }
            bail!(
                "{method} {path}: connection closed mid-answer: {}",
                String::from_utf8_lossy(&response)
            );
        }
        response.extend_from_slice(&buf[..n]);
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("{method} {path}: no status in {head:?}"))?;
    let json = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).with_context(|| {
            format!(
                "{method} {path}: not JSON: {}",
                String::from_utf8_lossy(&body)
            )
        })?
    };
    Ok((status, json))
}

fn content_length(head: &str) -> Option<usize> {
    head.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
}

/// A chunked body, once all of it (the last, empty chunk) has arrived.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&body[..line]).ok()?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        let start = line + 2;
        out.extend_from_slice(body.get(start..start + size)?);
        body = body.get(start + size + 2..)?;
    }
}

/// One headless Chromium session; the session is deleted and chromedriver stopped on
/// drop.
pub struct Browser {
    session: String,
    // Field order: the session goes before its driver, the profile last.
    driver: Chromedriver,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn start() -> Result<Browser> {
        let driver = Chromedriver::start()?;
        let profile = tempfile::Builder::new().prefix("eg-chromium").tempdir()?;
        let (status, answer) = request(
            driver.port,
            "POST",
            "/session",
            Some(&chromium::capabilities(profile.path())),
        )?;
        let session = answer["value"]["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no session (HTTP {status}): {answer}"))?
            .to_owned();
        Ok(Browser {
            session,
            driver,
            _profile: profile,
        })
    }

    /// A command of this session: its `value`, or the WebDriver error.
    pub fn command(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let path = format!("/session/{}{path}", self.session);
        let (status, mut answer) = request(self.driver.port, method, &path, body.as_ref())?;
        let value = answer["value"].take();
        if status == 200 {
            return Ok(value);
        }
        Err(WebDriverError {
            code: value["error"].as_str().unwrap_or("unknown").to_owned(),
            message: value["message"].as_str().unwrap_or_default().to_owned(),
        })
        .with_context(|| format!("{method} {path} (HTTP {status})"))
    }

    pub fn goto(&self, url: &str) -> Result<()> {
        self.command("POST", "/url", Some(json!({ "url": url })))
            .map(drop)
    }

    pub fn url(&self) -> Result<String> {
        let url = self.command("GET", "/url", None)?;
        url.as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("not a URL: {url}"))
    }

    /// The first element `css` selects, or the `no such element` error.
    pub fn find(&self, css: &str) -> Result<Element<'_>> {
        let found = self.command(
            "POST",
            "/element",
            Some(json!({ "using": "css selector", "value": css })),
        )?;
        Element::from_json(self, &found)
    }

    /// Every element `css` selects, in document order.
    pub fn find_all(&self, css: &str) -> Result<Vec<Element<'_>>> {
        let found = self.command(
            "POST",
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        )?;
        elements(self, &found)
    }

    /// Runs `body` as a function in the page with `args`; its return value.
    pub fn script(&self, body: &str, args: Vec<Value>) -> Result<Value> {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": body, "args": args })),
        )
    }

    /// The text of an open alert, confirm or prompt; `None` when there is none.
    pub fn alert(&self) -> Result<Option<String>> {
        match self.command("GET", "/alert/text", None) {
            Ok(text) => Ok(Some(text.as_str().unwrap_or_default().to_owned())),
            Err(e) if is_code(&e, "no such alert") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The page as a PNG.
    pub fn screenshot(&self) -> Result<Vec<u8>> {
        let png = self.command("GET", "/screenshot", None)?;
        let png = png.as_str().ok_or_else(|| anyhow!("not base64: {png}"))?;
        Ok(base64::engine::general_purpose::STANDARD.decode(png)?)
    }

    /// [`screenshot`](Self::screenshot) written to `path` (its folder created).
    pub fn save_screenshot(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, self.screenshot()?)
            .with_context(|| format!("write {}", path.display()))
    }

    /// The browser console's messages since the last call (chromedriver's log).
    pub fn console(&self) -> Result<Vec<String>> {
        let entries = self.command("POST", "/se/log", Some(json!({ "type": "browser" })))?;
        Ok(entries
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|e| format!("{} {}", e["level"], e["message"]))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Polls `check` until it returns `Some`, failing with `what` at the deadline. A
    /// WebDriver error from `check` (an element replaced while read) is tried again;
    /// the last one is in the failure.
    pub fn wait<T>(
        &self,
        what: &str,
        deadline: Duration,
        mut check: impl FnMut(&Browser) -> Result<Option<T>>,
    ) -> Result<T> {
        let end = Instant::now() + deadline;
        let mut last = None;
        loop {
            match check(self) {
                Ok(Some(value)) => return Ok(value),
                Ok(None) => {}
                Err(e) => last = Some(e),
            }
            if Instant::now() >= end {
                let console = self.console().unwrap_or_default();
                match last {
                    Some(e) => bail!(
                        "timed out after {deadline:?} waiting for {what}: {e:#}\nconsole: {console:#?}"
                    ),
                    None => bail!(
                        "timed out after {deadline:?} waiting for {what}\nconsole: {console:#?}"
                    ),
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until `css` selects at least one element; all of them then.
    pub fn wait_for_all(&self, css: &str, deadline: Duration) -> Result<Vec<Element<'_>>> {
        let found = self.wait(&format!("an element at {css:?}"), deadline, |b| {
            let all = b.find_all(css)?;
            Ok((!all.is_empty()).then(|| all.iter().map(|e| e.id.clone()).collect::<Vec<_>>()))
        })?;
        Ok(found
            .into_iter()
            .map(|id| Element { browser: self, id })
            .collect())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let path = format!("/session/{}", self.session);
        let _ = request(self.driver.port, "DELETE", &path, None);
    }
}

fn elements<'a>(browser: &'a Browser, found: &Value) -> Result<Vec<Element<'a>>> {
    found
        .as_array()
        .ok_or_else(|| anyhow!("not a list of elements: {found}"))?
        .iter()
        .map(|e| Element::from_json(browser, e))
        .collect()
}

/// An element of the page (a reference chromedriver hands out).
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl<'a> Element<'a> {
    fn from_json(browser: &'a Browser, found: &Value) -> Result<Element<'a>> {
        let id = found[ELEMENT]
            .as_str()
            .ok_or_else(|| anyhow!("not an element: {found}"))?;
        Ok(Element {
            browser,
            id: id.to_owned(),
        })
    }

    fn command(&self, method: &str, what: &str, body: Option<Value>) -> Result<Value> {
        self.browser
            .command(method, &format!("/element/{}{what}", self.id), body)
    }

    /// This element, as an argument to [`Browser::script`].
    pub fn json(&self) -> Value {
        json!({ ELEMENT: self.id })
    }

    /// Its rendered text (what a reader sees).
    pub fn text(&self) -> Result<String> {
        let text = self.command("GET", "/text", None)?;
        Ok(text.as_str().unwrap_or_default().to_owned())
    }

    /// An attribute as written in the markup; `None` when absent.
    pub fn attr(&self, name: &str) -> Result<Option<String>> {
        let value = self.command("GET", &format!("/attribute/{name}"), None)?;
        Ok(value.as_str().map(str::to_owned))
    }

    /// A DOM property (`value` of an input, `href` resolved, `textContent`).
    pub fn property(&self, name: &str) -> Result<Value> {
        self.command("GET", &format!("/property/{name}"), None)
    }

    pub fn displayed(&self) -> Result<bool> {
        Ok(self.command("GET", "/displayed", None)? == true)
    }

    pub fn click(&self) -> Result<()> {
        self.command("POST", "/click", Some(json!({}))).map(drop)
    }

    pub fn clear(&self) -> Result<()> {
        self.command("POST", "/clear", Some(json!({}))).map(drop)
    }

    pub fn send_keys(&self, text: &str) -> Result<()> {
        self.command("POST", "/value", Some(json!({ "text": text })))
            .map(drop)
    }

    pub fn find(&self, css: &str) -> Result<Element<'a>> {
        let found = self.command(
            "POST",
            "/element",
            Some(json!({ "using": "css selector", "value": css })),
        )?;
        Element::from_json(self.browser, &found)
    }

    pub fn find_all(&self, css: &str) -> Result<Vec<Element<'a>>> {
        let found = self.command(
            "POST",
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        )?;
        elements(self.browser, &found)
    }
}
