//! What can be checked here of `deploy/` with systemd's own tool: the systemd unit is
//! hardened and passes `systemd-analyze verify`. The rest: tests/plain/deploy.rs.

use crate::support;

use std::process::Command;

use support::deploy::{deploy, service_keys, value};
use support::eventgate_bin;

#[test]
fn the_systemd_unit_is_hardened_and_passes_systemd_analyze() {
    let unit = std::fs::read_to_string(deploy("systemd/eventgate.service")).unwrap();
    let keys = service_keys(&unit);
    for (key, expected) in [
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("StateDirectory", "eventgate"),
        ("UMask", "0027"),
        ("CapabilityBoundingSet", ""),
        ("PrivateTmp", "yes"),
    ] {
        assert_eq!(value(&keys, key), expected, "{key}");
    }
    assert!(value(&keys, "ExecStartPre").contains("eventgate check-config"));
    assert_eq!(value(&keys, "ExecReload"), "/bin/kill -HUP $MAINPID");

    // systemd-analyze wants the binaries to exist: point them at the one built here.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("eventgate.service");
    std::fs::write(
        &local,
        unit.replace("/usr/local/bin/eventgate", eventgate_bin()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&local)
        .output()
        .expect("systemd-analyze (Debian package systemd; ./tests/run.sh installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Unknown keys and bad values are only warnings, exit status 0.
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze complained:\n{stderr}"
    );
}
