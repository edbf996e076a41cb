//! The configuration of a private containerd. Standalone (std only): `tests/support`
//! compiles this file itself, so the tests that start containerd need no `bench`
//! feature.

use std::path::Path;

/// A containerd config (version 2, understood by 1.6 through 2.x) that keeps
/// everything under `dir` and leaves the host's containerd alone.
pub(crate) fn containerd_config(dir: &Path, socket: &Path) -> String {
    format!(
        "{}disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n{}",
        head(dir),
        daemon(dir, socket)
    )
}

/// [`containerd_config`] with the CRI plugin enabled, for tests that drive it as the
/// kubelet does: pods run `sandbox_image` (a name in namespace `k8s.io`) as their
/// sandbox container, and use the host network, so the CNI directories under `dir`
/// stay empty (the plugin logs that it found no network config; host-network pods
/// need none). The plugin's own root and state are containerd's default, its plugin
/// directory under the daemon's (`root/io.containerd.grpc.v1.cri`,
/// `state/io.containerd.grpc.v1.cri`). Its streaming server (exec, attach) listens on
/// a free loopback port.
pub(crate) fn containerd_cri_config(dir: &Path, socket: &Path, sandbox_image: &str) -> String {
    let d = dir.display();
    format!(
        r#"{head}{daemon}
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{d}/cni/bin"
  conf_dir = "{d}/cni/conf"
"#,
        head = head(dir),
        daemon = daemon(dir, socket),
    )
}

fn head(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
"#
    )
}

fn daemon(dir: &Path, socket: &Path) -> String {
    let d = dir.display();
    format!(
        r#"
[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  address = "{d}/debug.sock"
  level = "warn"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
"#,
        socket = socket.display()
    )
}
