//! Debian's Chromium driven by its chromedriver: the driver on a port of its own
//! choosing, read from its first lines, and the capabilities of a headless browser
//! with a throwaway profile. Both go away with the values that hold them.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::Lines;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const NEEDS: &str = "needs Debian's chromium and chromium-driver (/usr/bin/chromium, \
                         /usr/bin/chromedriver); run tests/run.sh";

/// How long chromedriver may take to listen: it starts no browser until a session.
const START: Duration = Duration::from_secs(20);

/// A running chromedriver, killed on drop.
pub struct Chromedriver {
    child: Child,
    pub port: u16,
    /// What it printed, kept for error messages.
    output: Lines,
}

impl Chromedriver {
    /// Starts chromedriver on a free port (`--port=0`: it picks and prints one) and
    /// waits until its `/status` says it is ready.
    pub fn start() -> Result<Chromedriver> {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            if !Path::new(binary).exists() {
                bail!("{binary} is missing: {NEEDS}");
            }
        }
        // A process group of its own, which the browsers it starts join: dropping
        // the driver ends them too, even when a session never got its id.
        let mut child = Command::new(CHROMEDRIVER)
            .process_group(0)
            .args(["--port=0", "--log-level=WARNING"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("spawn {CHROMEDRIVER}"))?;
        let output = Lines::new(child.stdout.take().context("chromedriver's stdout")?);
        let mut driver = Chromedriver {
            child,
            port: 0,
            output,
        };
        let end = Instant::now() + START;
        let mut seen = Vec::new();
        driver.port = loop {
            let left = end.saturating_duration_since(Instant::now());
            let Some(line) = driver.output.next(left) else {
                bail!("chromedriver printed no port within {START:?}: {seen:?}");
            };
            // "ChromeDriver was started successfully on port 36161."
            if let Some(port) = line
                .split("started successfully on port ")
                .nth(1)
                .and_then(|rest| rest.trim_end_matches('.').trim().parse().ok())
            {
                break port;
            }
            seen.push(line);
        };
        driver.wait_ready(end)?;
        Ok(driver)
    }

    fn wait_ready(&mut self, end: Instant) -> Result<()> {
        loop {
            match super::webdriver::request(self.port, "GET", "/status", None) {
                Ok((_, body)) if body["value"]["ready"] == true => return Ok(()),
                result => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        bail!("chromedriver exited: {status}: {}", self.output.drain());
                    }
                    if Instant::now() >= end {
                        bail!("chromedriver not ready within {START:?}: {result:?}");
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whatever chromedriver printed since the last call.
    pub fn output(&mut self) -> String {
        self.output.drain()
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let group = nix::unistd::Pid::from_raw(-pid);
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// New-session capabilities: headless Chromium (as root, hence no sandbox) with its
/// profile in `profile`, a fixed window so screenshots have one size, and the
/// browser's console kept for [`super::webdriver::Browser::console`].
pub fn capabilities(profile: &Path) -> Value {
    json!({
        "capabilities": {
            "alwaysMatch": {
                "browserName": "chrome",
                "acceptInsecureCerts": false,
                "unhandledPromptBehavior": "ignore",
                "goog:loggingPrefs": { "browser": "ALL" },
                "goog:chromeOptions": {
                    "binary": CHROMIUM,
                    "args": [
                        "--headless=new",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-dev-shm-usage",
                        "--window-size=1400,900",
                        "--no-first-run",
                        "--no-default-browser-check",
                        "--disable-background-networking",
                        "--disable-extensions",
                        format!("--user-data-dir={}", profile.display()),
                    ],
                }
            }
        }
    })
}
