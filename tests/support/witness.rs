//! A real `eventgate witness serve`, on a free loopback port it reports in its log.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use super::{DEADLINE, Lines, eventgate, path_str, wait_exit};

/// A running `eventgate witness serve` on a free loopback port.
pub struct Witness {
    pub child: Child,
    pub stderr: Lines,
    pub addr: SocketAddr,
    pub config: PathBuf,
    pub data: PathBuf,
    pub log: String,
}

impl Witness {
    pub fn start(config: &Path, data: &Path) -> Witness {
        let mut child = eventgate()
            .args(["witness", "serve", "--config", path_str(config)])
            .args(["--listen", "127.0.0.1:0", "--data-dir", path_str(data)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn eventgate witness serve");
        let stderr = Lines::new(child.stderr.take().expect("stderr"));
        let mut witness = Witness {
            child,
            stderr,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            config: config.to_owned(),
            data: data.to_owned(),
            log: String::new(),
        };
        let lines = witness.stderr.until("the witness serving line", |line| {
            line.contains("witness serving") || line.contains("error")
        });
        witness.log = lines.join("\n");
        let last = lines.last().expect("a line");
        witness.addr = last
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {last:?}:\n{}", witness.log));
        witness
    }

    /// Stops it with `signal` and waits: a clean exit.
    pub fn stop(&mut self, signal: nix::sys::signal::Signal) {
        super::signal(&self.child, signal);
        let status = wait_exit(&mut self.child, DEADLINE);
        let rest = self.stderr.drain();
        assert!(status.success(), "{status}: {}\n{rest}", self.log);
    }

    pub fn restart(&mut self) {
        self.stop(nix::sys::signal::Signal::SIGTERM);
        *self = Witness::start(&self.config.clone(), &self.data.clone());
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
