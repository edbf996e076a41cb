//! A private dockerd for tests (Debian's `docker.io`, 20.10), on the test's own
//! containerd: its own data root, exec root and socket under a temp dir, no network
//! (no bridge, no iptables), the vfs storage driver. It can be stopped and started
//! again on the same directories, as a host's dockerd restarts.
//!
//! The docker CLI used is Debian's `/usr/bin/docker`: another one on `PATH` may be a
//! newer client that dockerd 20.10 refuses.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::containerd::{Containerd, IMAGE, busybox_image};
use super::{DEADLINE, Lines, have, path_str, signal, wait_exit, wait_for};

pub const NEEDS: &str =
    "needs root, dockerd (docker.io), containerd, runc and busybox-static; run tests/run.sh";

/// Debian's docker CLI, which matches its dockerd.
pub const DOCKER_CLI: &str = "/usr/bin/docker";

pub struct Dockerd {
    child: Option<Child>,
    log: Option<Lines>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    containerd: PathBuf,
    /// Containers this harness created, removed at drop.
    created: Vec<String>,
}

impl Dockerd {
    /// Starts a dockerd on `containerd`; its socket accepts connections when this
    /// returns.
    pub fn start(containerd: &Containerd) -> Dockerd {
        assert!(
            have("dockerd") && Path::new(DOCKER_CLI).exists(),
            "dockerd and {DOCKER_CLI} must be installed (Debian's docker.io); run tests/run.sh"
        );
        let dir = tempfile::Builder::new()
            .prefix("eg-dkd")
            .tempdir()
            .expect("tempdir");
        // Nothing from the host's /etc/docker/daemon.json.
        std::fs::write(dir.path().join("daemon.json"), "{}").expect("write daemon.json");
        let mut dockerd = Dockerd {
            child: None,
            log: None,
            socket: dir.path().join("docker.sock"),
            dir,
            containerd: containerd.socket.clone(),
            created: Vec::new(),
        };
        dockerd.restart();
        dockerd
    }

    /// Starts dockerd (again, after [`stop`](Self::stop)) on the same directories.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "dockerd is already running");
        let d = self.dir.path();
        let mut child = Command::new("dockerd")
            .arg("--containerd")
            .arg(&self.containerd)
            .arg("--config-file")
            .arg(d.join("daemon.json"))
            .arg("--data-root")
            .arg(d.join("root"))
            .arg("--exec-root")
            .arg(d.join("exec"))
            .arg("--pidfile")
            .arg(d.join("pid"))
            .arg("-H")
            .arg(format!("unix://{}", path_str(&self.socket)))
            .args(["--storage-driver", "vfs", "--bridge", "none"])
            .args([
                "--iptables=false",
                "--ip6tables=false",
                "--log-level",
                "warn",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dockerd");
        self.log = Some(Lines::new(child.stderr.take().expect("stderr")));
        let end = Instant::now() + DEADLINE;
        loop {
            // dockerd opens its API socket last, once it is initialised.
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "dockerd exited during start-up: {status}\n{}",
                    self.log.as_mut().map(|l| l.drain()).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < end,
                "dockerd's socket did not accept connections within {DEADLINE:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.child = Some(child);
    }

    /// SIGTERM, and waits for dockerd to exit (it removes its socket).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, nix::sys::signal::Signal::SIGTERM);
            wait_exit(&mut child, DEADLINE);
        }
    }

    pub fn address(&self) -> String {
        path_str(&self.socket).to_owned()
    }

    /// `/usr/bin/docker -H unix://SOCKET`.
    pub fn docker(&self) -> Command {
        let mut cmd = Command::new(DOCKER_CLI);
        cmd.arg("-H")
            .arg(format!("unix://{}", path_str(&self.socket)))
            .env("DOCKER_CONFIG", self.dir.path().join("cli"));
        cmd
    }

    /// Runs `docker ARGS...`; its stdout, trimmed, after it succeeded.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.docker().args(args).output().expect("run docker");
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("docker prints UTF-8")
            .trim()
            .to_owned()
    }

    /// Loads the test image ([`IMAGE`]) with `docker load`; returns its name.
    pub fn load_busybox(&self) -> &'static str {
        let tarball = self.dir.path().join("busybox-docker.tar");
        std::fs::write(&tarball, docker_archive(busybox_image())).expect("write the tarball");
        let loaded = self.cli(&["load", "--input", path_str(&tarball)]);
        assert!(loaded.contains(IMAGE), "docker load: {loaded}");
        IMAGE
    }

    /// `docker run -d --name NAME --network none --label K=V... IMAGE /bin/busybox sh
    /// -c SCRIPT`; returns the container's id.
    pub fn run(&mut self, name: &str, labels: &[(&str, &str)], script: &str) -> String {
        self.run_with(name, labels, &[], script)
    }

    /// [`run`](Self::run) with more `docker run` options (`--memory 16m`).
    pub fn run_with(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        options: &[&str],
        script: &str,
    ) -> String {
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args = vec!["run", "-d", "--name", name, "--network", "none"];
        for label in &labels {
            args.extend(["--label", label.as_str()]);
        }
        args.extend_from_slice(options);
        args.extend([IMAGE, "/bin/busybox", "sh", "-c", script]);
        self.created.push(name.to_owned());
        self.cli(&args)
    }

    /// `docker run -d --name NAME OPTIONS... IMAGE ARGS...` (no `--network` of its own:
    /// `options` say it); returns the container's id.
    pub fn run_image(
        &mut self,
        name: &str,
        options: &[String],
        image: &str,
        args: &[String],
    ) -> String {
        let mut all: Vec<&str> = vec!["run", "-d", "--name", name];
        all.extend(options.iter().map(String::as_str));
        all.push(image);
        all.extend(args.iter().map(String::as_str));
        self.created.push(name.to_owned());
        self.cli(&all)
    }

    /// `docker inspect ID`: the container's object.
    pub fn inspect(&self, id: &str) -> serde_json::Value {
        let text = self.cli(&["inspect", id]);
        let mut all: Vec<serde_json::Value> =
            serde_json::from_str(&text).expect("docker inspect prints a JSON array");
        assert_eq!(all.len(), 1, "{text}");
        all.remove(0)
    }

    /// Waits until dockerd shows the container exited; its inspect then.
    pub fn wait_exited(&self, id: &str) -> serde_json::Value {
        wait_for(&format!("container {id} to exit"), DEADLINE, || {
            let inspect = self.inspect(id);
            (inspect["State"]["Status"] == "exited").then_some(inspect)
        })
    }

    /// `docker rm ID`.
    pub fn rm(&mut self, id: &str) {
        self.cli(&["rm", id]);
    }

    pub fn log_text(&mut self) -> String {
        self.log.as_mut().map(|l| l.drain()).unwrap_or_default()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if self.child.is_some() {
            for name in &self.created {
                let _ = self
                    .docker()
                    .args(["rm", "-f", name])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        if let Some(mut child) = self.child.take() {
            signal(&child, nix::sys::signal::Signal::SIGTERM);
            let end = Instant::now() + DEADLINE;
            while Instant::now() < end && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The OCI layout tarball at `oci` with a `manifest.json` added, as `docker save`
/// writes it: dockerd 20.10's `docker load` reads that, not the OCI index.
pub fn docker_archive(oci: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    std::fs::File::open(oci)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .expect("read the image tarball");
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut archive = tar::Archive::new(bytes.as_slice());
    for entry in archive.entries().expect("a tarball") {
        let mut entry = entry.expect("a tar entry");
        let path = entry.path().expect("a path").display().to_string();
        let mut content = Vec::new();
        entry.read_to_end(&mut content).expect("read a tar entry");
        files.push((path, content));
    }
    let blob = |digest: &str| -> &[u8] {
        let path = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
        &files
            .iter()
            .find(|(p, _)| *p == path)
            .unwrap_or_else(|| panic!("no {path} in the image"))
            .1
    };
    let json = |bytes: &[u8]| -> serde_json::Value {
        serde_json::from_slice(bytes).expect("the image's JSON")
    };
    let index = json(
        &files
            .iter()
            .find(|(p, _)| p == "index.json")
            .expect("index.json")
            .1,
    );
    let manifest = json(blob(
        index["manifests"][0]["digest"]
            .as_str()
            .expect("a manifest"),
    ));
    let path_of = |descriptor: &serde_json::Value| {
        let digest = descriptor["digest"].as_str().expect("a digest");
        format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"))
    };
    let layers: Vec<String> = manifest["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(path_of)
        .collect();
    let saved = serde_json::json!([{
        "Config": path_of(&manifest["config"]),
        "RepoTags": [IMAGE],
        "Layers": layers,
    }])
    .to_string();
    let mut out = tar::Builder::new(Vec::new());
    for (path, content) in files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_slice()))
        .chain([("manifest.json", saved.as_bytes())])
    {
        let mut header = tar::Header::new_gnu();
        header.set_path(path).expect("a tar path");
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        out.append(&header, content).expect("append");
    }
    out.into_inner().expect("the docker archive")
}
