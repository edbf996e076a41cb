//! A private containerd for tests: its own root, state and socket under a temp dir,
//! no network, the CRI plugin disabled unless asked for (`start_cri`). It can be
//! killed and started again on the same directory (same socket, same images), as a
//! node's daemon restarts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use super::{DEADLINE, Lines, have, path_str, run_with_stdin, signal, wait_exit, wait_for};

// The benchmarks' own daemon configuration (`bench::containerd_config`), compiled here
// so the tests need no `bench` feature.
#[path = "../../src/bench/containerd_config.rs"]
mod config;

pub const NEEDS: &str = "needs containerd, ctr, runc and busybox-static; run tests/run.sh";

pub struct Containerd {
    child: Option<Child>,
    log: Option<Lines>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
}

impl Containerd {
    /// Starts a fresh daemon; the socket accepts connections when this returns.
    pub fn start() -> Containerd {
        let mut containerd = Self::not_started();
        containerd.restart();
        containerd
    }

    /// A daemon's directory and config, with nothing running yet (`restart` starts it).
    pub fn not_started() -> Containerd {
        Self::not_started_in("")
    }

    /// [`not_started`](Self::not_started), with the socket in `subdir` of the daemon's
    /// directory (which the daemon creates at start, as it does its state dir).
    pub fn not_started_in(subdir: &str) -> Containerd {
        Self::configured(subdir, config::containerd_config)
    }

    /// A fresh daemon with containerd's CRI plugin enabled (see
    /// [`not_started_cri`](Self::not_started_cri)); the socket accepts connections
    /// when this returns, the CRI plugin may still be initialising
    /// (`kubelet::Kubelet::connect` waits for it).
    pub fn start_cri() -> Containerd {
        let mut containerd = Self::not_started_cri();
        containerd.restart();
        containerd
    }

    /// [`not_started`](Self::not_started) with the CRI plugin enabled: pods use the
    /// host network (no CNI config), and their sandbox container runs the test image
    /// [`IMAGE`], which [`import_busybox_cri`](Self::import_busybox_cri) imports.
    pub fn not_started_cri() -> Containerd {
        Self::configured("", |dir, socket| {
            config::containerd_cri_config(dir, socket, IMAGE)
        })
    }

    fn configured(subdir: &str, config: impl FnOnce(&Path, &Path) -> String) -> Containerd {
        assert!(
            have("containerd") && have("ctr") && have("runc"),
            "containerd, ctr and runc must be installed; run tests/run.sh"
        );
        let dir = tempfile::Builder::new()
            .prefix("eg-ctd")
            .tempdir()
            .expect("tempdir");
        let socket = dir.path().join(subdir).join("containerd.sock");
        std::fs::write(
            dir.path().join("containerd.toml"),
            config(dir.path(), &socket),
        )
        .expect("write containerd config");
        Containerd {
            child: None,
            log: None,
            dir,
            socket,
        }
    }

    /// Where the socket will be, before the daemon exists (for "started later" tests).
    pub fn address(&self) -> String {
        path_str(&self.socket).to_owned()
    }

    /// Starts the daemon (again, after `kill9`) on the same directory.
    pub fn restart(&mut self) {
        self.restart_timed();
    }

    /// [`restart`](Self::restart), returning when the socket first accepted a
    /// connection, to within a fraction of a millisecond: it is tried in a tight loop
    /// from the moment the daemon is spawned.
    pub fn restart_timed(&mut self) -> SystemTime {
        assert!(self.child.is_none(), "containerd is already running");
        let mut child = Command::new("containerd")
            .arg("--config")
            .arg(self.dir.path().join("containerd.toml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn containerd");
        self.log = Some(Lines::new(child.stderr.take().expect("stderr")));
        let end = Instant::now() + DEADLINE;
        let accepted = loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                break SystemTime::now();
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("containerd exited during start-up: {status}");
            }
            assert!(
                Instant::now() < end,
                "containerd's socket did not accept connections within {DEADLINE:?}"
            );
            // Short enough to time the moment closely, long enough to leave the two
            // cores to the daemon and the gateway being timed.
            std::thread::sleep(std::time::Duration::from_micros(200));
        };
        self.child = Some(child);
        accepted
    }

    /// SIGKILL, as when the daemon crashes; the socket file may stay behind.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, nix::sys::signal::Signal::SIGKILL);
            wait_exit(&mut child, DEADLINE);
        }
    }

    /// [`ctr_at`] on this containerd.
    pub fn ctr_in(&self, namespace: &str, args: &[&str]) -> String {
        ctr_at(&self.socket, namespace, args)
    }

    pub fn ctr(&self) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address").arg(&self.socket);
        cmd
    }

    /// Imports the test image (busybox-static as an OCI tarball); returns its name.
    pub fn import_busybox(&self) -> &'static str {
        let out = self
            .ctr()
            .args(["image", "import"])
            .arg(busybox_image())
            .output()
            .expect("run ctr image import");
        assert!(
            out.status.success(),
            "ctr image import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        IMAGE
    }

    /// [`import_busybox`](Self::import_busybox) into namespace [`CRI_NAMESPACE`], where
    /// the CRI plugin looks images up by name (as the sandbox image and as the image of
    /// a container): what `ctr -n k8s.io image import` does on a node.
    pub fn import_busybox_cri(&self) -> &'static str {
        let out = self
            .ctr()
            .args(["--namespace", CRI_NAMESPACE, "image", "import"])
            .arg(busybox_image())
            .output()
            .expect("run ctr image import");
        assert!(
            out.status.success(),
            "ctr -n {CRI_NAMESPACE} image import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        IMAGE
    }

    /// `ctr run --rm IMAGE ID sh -c SCRIPT` in namespace `default`; returns the exit code.
    pub fn run(&self, id: &str, script: &str) -> i32 {
        let fifos = self.dir.path().join("fifo");
        let mut child = self
            .ctr()
            .args(["run", "--rm", "--fifo-dir", path_str(&fifos), IMAGE, id])
            .args(["/bin/busybox", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ctr run");
        let stderr = Lines::new(child.stderr.take().expect("stderr"));
        let status = wait_exit(&mut child, DEADLINE);
        let mut stderr = stderr;
        status
            .code()
            .unwrap_or_else(|| panic!("ctr run was killed: {}", stderr.drain()))
    }

    /// `containerd publish`, as shims and other clients publish.
    pub fn publish(&self, namespace: &str, topic: &str, any: &prost_types::Any) {
        use prost::Message;
        let mut cmd = Command::new("containerd");
        cmd.arg("--address").arg(&self.socket).args([
            "publish",
            "--namespace",
            namespace,
            "--topic",
            topic,
        ]);
        let (ok, err) = run_with_stdin(&mut cmd, &any.encode_to_vec());
        assert!(ok, "containerd publish failed: {err}");
    }

    /// Waits until `ctr task ls` in `namespace` shows `id` STOPPED.
    pub fn wait_stopped(&self, namespace: &str, id: &str) {
        wait_for(&format!("task {id} to stop"), DEADLINE, || {
            let listed = self.ctr_in(namespace, &["task", "ls"]);
            listed
                .lines()
                .any(|line| line.starts_with(id) && line.contains("STOPPED"))
                .then_some(())
        });
    }

    pub fn log_text(&mut self) -> String {
        self.log.as_mut().map(|l| l.drain()).unwrap_or_default()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub const IMAGE: &str = "eventgate.test/busybox:1";

/// The containerd namespace of everything containerd's CRI plugin does.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// The image tarball, built once per test process from Debian's busybox-static.
pub fn busybox_image() -> &'static Path {
    static IMAGE_TAR: OnceLock<PathBuf> = OnceLock::new();
    IMAGE_TAR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join(format!("busybox-image-{}.tar", std::process::id()));
        let bytes = super::image::busybox_oci_tar(IMAGE);
        std::fs::write(&path, bytes).expect("write the image tarball");
        path
    })
}

/// `ctr --address SOCKET --namespace NAMESPACE ARGS...`; its stdout, after it
/// succeeded. By socket path, for threads (a `Containerd` stays on its own).
pub fn ctr_at(socket: &Path, namespace: &str, args: &[&str]) -> String {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", namespace])
        .args(args)
        .output()
        .expect("run ctr");
    assert!(
        out.status.success(),
        "ctr -n {namespace} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("ctr prints UTF-8")
}

/// Tasks started by a test, killed and deleted however the test ends, so no shim or
/// `sleep` outlives it.
pub struct Tasks<'a> {
    containerd: &'a Containerd,
    started: Vec<(String, String)>,
}

impl<'a> Tasks<'a> {
    pub fn new(containerd: &'a Containerd) -> Self {
        Self {
            containerd,
            started: Vec::new(),
        }
    }

    /// `ctr run -d IMAGE ID ARGS...` in `namespace`.
    pub fn run(&mut self, namespace: &str, id: &str, extra: &[&str], args: &[&str]) {
        let fifos = self.containerd.dir.path().join("fifo");
        let mut command = vec!["run", "-d", "--fifo-dir", path_str(&fifos)];
        command.extend_from_slice(extra);
        command.extend_from_slice(&[IMAGE, id]);
        command.extend_from_slice(args);
        self.started.push((namespace.to_owned(), id.to_owned()));
        self.containerd.ctr_in(namespace, &command);
    }
}

impl Drop for Tasks<'_> {
    fn drop(&mut self) {
        for (namespace, id) in &self.started {
            let _ = self
                .containerd
                .ctr()
                .args(["--namespace", namespace, "task", "rm", "-f", id])
                .output();
        }
    }
}

/// `ctr container create`'s `--label` arguments for the labels the CRI plugin gives a
/// pod's container (`None`: its sandbox), as the workload columns read them.
pub fn cri_labels(ns: &str, pod: &str, uid: &str, container: Option<&str>) -> Vec<String> {
    let mut labels = vec![
        format!("io.kubernetes.pod.name={pod}"),
        format!("io.kubernetes.pod.namespace={ns}"),
        format!("io.kubernetes.pod.uid={uid}"),
    ];
    match container {
        Some(name) => {
            labels.push("io.cri-containerd.kind=container".into());
            labels.push(format!("io.kubernetes.container.name={name}"));
        }
        None => labels.push("io.cri-containerd.kind=sandbox".into()),
    }
    labels
        .into_iter()
        .flat_map(|l| ["--label".to_owned(), l])
        .collect()
}
