//! The configuration of a private containerd. Standalone (std only): `tests/support`
//! compiles this file itself, so the tests that start containerd need no `bench`
//! feature.

use std::path::Path;

/// A containerd config (version 2, understood by 1.6 through 2.x) that keeps
/// everything under `dir` and leaves the host's containerd alone.
pub fn containerd_config(dir: &Path, socket: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

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
