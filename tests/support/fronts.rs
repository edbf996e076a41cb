//! Secured endpoints in front of a plaintext tansu broker (`Tansu::behind`), so the
//! Kafka forwarder's TLS and SASL settings meet real servers: stunnel for TLS (with
//! client certificates required), and `saslproxy.py` for SASL PLAIN and SCRAM,
//! optionally over TLS. Each listens on a loopback port and is killed on drop.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{DEADLINE, Lines, path_str, wait_for};

pub struct Front {
    child: Child,
    pub port: u16,
    log: Lines,
}

impl Front {
    /// A TLS endpoint on `port` for the broker at `upstream`, presenting
    /// `cert`/`key` and requiring a client certificate signed by `client_ca`.
    pub fn stunnel(
        dir: &Path,
        port: u16,
        upstream: &str,
        cert: &Path,
        key: &Path,
        client_ca: &Path,
    ) -> Front {
        let conf = dir.join(format!("stunnel-{port}.conf"));
        std::fs::write(
            &conf,
            format!(
                "foreground = yes\npid =\n[kafka]\naccept = 127.0.0.1:{port}\n\
                 connect = {upstream}\ncert = {}\nkey = {}\nverify = 2\nCAfile = {}\n",
                path_str(cert),
                path_str(key),
                path_str(client_ca)
            ),
        )
        .expect("write stunnel.conf");
        let child = Command::new(stunnel_bin())
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn stunnel (tests/run.sh installs stunnel4)");
        Self::listening(child, port, "stunnel")
    }

    /// A SASL endpoint on `port` for the broker at `upstream` that admits only
    /// `user` with the password in `password_file`, over TLS when `tls` names
    /// a certificate and key.
    pub fn sasl(
        port: u16,
        upstream: &str,
        user: &str,
        password_file: &Path,
        tls: Option<(&Path, &Path)>,
    ) -> Front {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/saslproxy.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script)
            .args(["--port", &port.to_string(), "--upstream", upstream])
            .args(["--user", user, "--password-file", path_str(password_file)]);
        if let Some((cert, key)) = tls {
            cmd.args(["--cert", path_str(cert), "--key", path_str(key)]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn python3 saslproxy.py");
        Self::listening(child, port, "saslproxy")
    }

    fn listening(mut child: Child, port: u16, what: &str) -> Front {
        // The SASL proxy reports on stdout, stunnel on stderr: keep the one that talks.
        let log = match child.stdout.take() {
            Some(stdout) => Lines::new(stdout),
            None => Lines::new(child.stderr.take().expect("stderr")),
        };
        let mut front = Front { child, port, log };
        let started = wait_for(&format!("{what} to listen on {port}"), DEADLINE, || {
            if let Ok(Some(status)) = front.child.try_wait() {
                return Some(Err(status));
            }
            let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            TcpStream::connect_timeout(&address, Duration::from_millis(200))
                .ok()
                .map(|_| Ok(()))
        });
        if let Err(status) = started {
            panic!("{what} exited at start ({status}): {}", front.log.drain());
        }
        front
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What the endpoint has reported so far.
    pub fn log_text(&mut self) -> String {
        self.log.drain()
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian installs stunnel as `stunnel4` (with `stunnel` as an alternative).
fn stunnel_bin() -> &'static str {
    if super::have("stunnel4") {
        "stunnel4"
    } else {
        "stunnel"
    }
}
