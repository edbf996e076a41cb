//! A node for the reconcile benchmark: a private containerd filled with `ctr`, as an
//! operator's tools would fill it, and emptied again however the benchmark ends.
//!
//! Every task it starts has a shim and a process outside this one, which outlive
//! containerd if they are not removed first. [`Node::shutdown`] removes them all
//! (whatever `ctr task ls` shows in every namespace, so a task whose `ctr run` was
//! cut short goes too) before stopping containerd; dropping a `Node` that was not shut
//! down (an error, a signal) does the same, blocking.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt, TryStreamExt};
use tokio::process::Command;

use super::BenchError;
use super::daemon::Daemon;

/// The image every container is made from.
pub(crate) const IMAGE: &str = "eventgate.bench/busybox:1";

/// The containerd namespace of the CRI plugin's pods, containers and images.
pub(crate) const CRI_NAMESPACE: &str = "k8s.io";

/// How long a `ctr` call may take: a busy 2-core machine runs 8 at once.
const CTR_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) struct Node {
    containerd: Option<Daemon>,
    ctr: PathBuf,
    socket: PathBuf,
    pub namespace: String,
}

impl Node {
    /// Starts containerd in `dir` and imports the busybox image into `namespace`.
    pub(crate) async fn start(
        containerd: &Path,
        ctr: &Path,
        dir: &Path,
        namespace: &str,
    ) -> Result<Node, BenchError> {
        std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
            context: format!("cannot create {}", dir.display()),
            source,
        })?;
        let daemon = Daemon::containerd(containerd, dir).await?;
        Self::import(daemon, ctr, dir, namespace).await
    }

    /// [`Node::start`] with containerd's CRI plugin enabled, [`IMAGE`] as its pods'
    /// sandbox image, imported into the CRI's namespace `k8s.io` (where the plugin
    /// learns of it from containerd's image events, a moment after the import).
    pub(crate) async fn start_cri(
        containerd: &Path,
        ctr: &Path,
        dir: &Path,
    ) -> Result<Node, BenchError> {
        std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
            context: format!("cannot create {}", dir.display()),
            source,
        })?;
        let daemon = Daemon::containerd_cri(containerd, dir, IMAGE).await?;
        Self::import(daemon, ctr, dir, CRI_NAMESPACE).await
    }

    async fn import(
        daemon: Daemon,
        ctr: &Path,
        dir: &Path,
        namespace: &str,
    ) -> Result<Node, BenchError> {
        let node = Node {
            socket: daemon.socket().to_path_buf(),
            containerd: Some(daemon),
            ctr: ctr.to_path_buf(),
            namespace: namespace.to_owned(),
        };
        let tarball = dir.join("busybox.tar");
        let bytes = super::image::busybox_oci_tar(IMAGE)?;
        std::fs::write(&tarball, bytes).map_err(|source| BenchError::Io {
            context: format!("cannot write {}", tarball.display()),
            source,
        })?;
        node.ctr(&["image", "import", &tarball.display().to_string()])
            .await?;
        Ok(node)
    }

    /// containerd's socket.
    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// `ctr --address SOCKET --namespace NAMESPACE ARGS...` in the node's namespace:
    /// its stdout once it succeeded.
    pub(crate) async fn ctr(&self, args: &[&str]) -> Result<String, BenchError> {
        self.ctr_in(&self.namespace, args).await
    }

    pub(crate) async fn ctr_in(
        &self,
        namespace: &str,
        args: &[&str],
    ) -> Result<String, BenchError> {
        let mut command = Command::new(&self.ctr);
        command
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", namespace])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let what = format!("ctr -n {namespace} {}", args.join(" "));
        let out = tokio::time::timeout(CTR_TIMEOUT, command.output())
            .await
            .map_err(|_| BenchError::Timeout {
                what: format!("{what} did not finish within {CTR_TIMEOUT:?}"),
            })?
            .map_err(|source| BenchError::Spawn {
                what: "ctr",
                source,
            })?;
        if !out.status.success() {
            return Err(BenchError::Failed {
                what: format!(
                    "{what}: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs `ctr` once per item in the node's namespace, `at_once` at a time.
    pub(crate) async fn each<T, F>(
        &self,
        items: &[T],
        at_once: usize,
        args: F,
    ) -> Result<(), BenchError>
    where
        F: Fn(&T) -> Vec<String>,
    {
        self.each_in(&self.namespace, items, at_once, args).await
    }

    async fn each_in<T, F>(
        &self,
        namespace: &str,
        items: &[T],
        at_once: usize,
        args: F,
    ) -> Result<(), BenchError>
    where
        F: Fn(&T) -> Vec<String>,
    {
        stream::iter(items.iter().map(|item| {
            let args = args(item);
            async move {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                self.ctr_in(namespace, &args).await.map(drop)
            }
        }))
        .buffer_unordered(at_once.max(1))
        .try_collect::<()>()
        .await
    }

    /// `ctr container create` for each id, labelled with its number.
    pub(crate) async fn create_containers(
        &self,
        ids: &[String],
        at_once: usize,
    ) -> Result<(), BenchError> {
        self.each(ids, at_once, |id| {
            let label = format!("bench.n={}", id.rsplit('-').next().unwrap_or(id));
            strings(&["container", "create", "--label", &label, IMAGE, id])
        })
        .await
    }

    /// `ctr run -d` of a `sleep` for each id: a container and its running task.
    pub(crate) async fn run_tasks(&self, ids: &[String], at_once: usize) -> Result<(), BenchError> {
        self.each(ids, at_once, |id| {
            strings(&[
                "run",
                "-d",
                "--null-io",
                IMAGE,
                id,
                "/bin/busybox",
                "sleep",
                "1000000",
            ])
        })
        .await
    }

    /// SIGKILL to each task; returns once `ctr task ls` shows them all stopped.
    pub(crate) async fn kill_tasks(
        &self,
        ids: &[String],
        at_once: usize,
    ) -> Result<(), BenchError> {
        self.each(ids, at_once, |id| {
            strings(&["task", "kill", "-s", "SIGKILL", id])
        })
        .await?;
        let deadline = Instant::now() + CTR_TIMEOUT;
        loop {
            let listed = self.ctr(&["task", "ls"]).await?;
            let running = ids
                .iter()
                .filter(|id| {
                    !listed.lines().any(|line| {
                        let mut columns = line.split_whitespace();
                        columns.next() == Some(id.as_str()) && columns.nth(1) == Some("STOPPED")
                    })
                })
                .count();
            if running == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::Timeout {
                    what: format!("{running} killed tasks were not stopped within {CTR_TIMEOUT:?}"),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Deletes each stopped task and starts its container's task again.
    pub(crate) async fn restart_tasks(
        &self,
        ids: &[String],
        at_once: usize,
    ) -> Result<(), BenchError> {
        self.each(ids, at_once, |id| strings(&["task", "rm", id]))
            .await?;
        self.each(ids, at_once, |id| {
            strings(&["task", "start", "-d", "--null-io", id])
        })
        .await
    }

    /// Removes every task in every namespace (killing it first), then stops
    /// containerd.
    pub(crate) async fn shutdown(mut self, at_once: usize) -> Result<(), BenchError> {
        let removed = self.remove_all_tasks(at_once).await;
        if let Some(daemon) = self.containerd.take() {
            daemon.stop(Duration::from_secs(10)).await;
        }
        removed
    }

    async fn remove_all_tasks(&self, at_once: usize) -> Result<(), BenchError> {
        for namespace in self.ctr(&["namespaces", "ls", "-q"]).await?.lines() {
            let tasks: Vec<String> = self
                .ctr_in(namespace, &["task", "ls", "-q"])
                .await?
                .lines()
                .map(str::to_owned)
                .collect();
            self.each_in(namespace, &tasks, at_once, |id| {
                strings(&["task", "rm", "-f", id])
            })
            .await?;
        }
        Ok(())
    }

    /// The blocking form of [`Node::remove_all_tasks`], for `Drop`.
    fn remove_all_tasks_now(&self) {
        let ctr = |namespace: &str, args: &[&str]| {
            std::process::Command::new(&self.ctr)
                .arg("--address")
                .arg(&self.socket)
                .args(["--namespace", namespace])
                .args(args)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
                .unwrap_or_default()
        };
        for namespace in ctr("default", &["namespaces", "ls", "-q"]).lines() {
            let tasks = ctr(namespace, &["task", "ls", "-q"]);
            let ids: Vec<&str> = tasks.lines().collect();
            for chunk in ids.chunks(8) {
                let children: Vec<_> = chunk
                    .iter()
                    .filter_map(|id| {
                        std::process::Command::new(&self.ctr)
                            .arg("--address")
                            .arg(&self.socket)
                            .args(["--namespace", namespace, "task", "rm", "-f", id])
                            .stdin(Stdio::null())
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .spawn()
                            .ok()
                    })
                    .collect();
                for mut child in children {
                    let _ = child.wait();
                }
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Not after a shutdown; the daemon is killed as it drops.
        if self.containerd.is_some() {
            eprintln!("removing the benchmark's tasks before stopping containerd");
            self.remove_all_tasks_now();
        }
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}
