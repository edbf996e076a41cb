//! The Debian package as a user installs it: `deploy/debian/package.sh` packages
//! the release binary; `dpkg -i` into a minimal Debian 12 (an overlay of a cached
//! debootstrap root, tests/support/debian_root.rs); then what the package promises
//! is checked there, the unit's command line serves as its user, and `dpkg -r` and
//! `dpkg -P` leave nothing of it behind. Then the same install is booted
//! (systemd-nspawn) and the unit enabled, started, reloaded and stopped by systemd.
//!
//! The figures it prints (`--nocapture`) are docs/operations.md's: the time to a
//! ready `/readyz` and memory at rest, from the package, and the time to ready
//! under systemd.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::debian_root::Overlay;
use crate::support::deploy::{service_keys, value};
use crate::support::machine::Machine;
use crate::support::{
    DEADLINE, free_port, http_in_netns, rss_kib, signal, try_http, wait_exit, wait_for,
};

/// The installed unit's `ExecStart` run as its `User` with its `Environment`, in the
/// root (chroot), the admin endpoint on `port`; returns once `/readyz` answers 200:
/// the process, the time from spawning it and its resident memory then (KiB).
fn serve_as_the_unit(root: &Overlay, port: u16) -> (std::process::Child, Duration, u64) {
    let unit =
        std::fs::read_to_string(root.path().join("usr/lib/systemd/system/eventgate.service"))
            .unwrap();
    let keys = service_keys(&unit);
    let user = value(&keys, "User");
    let (env_key, env_value) = value(&keys, "Environment").split_once('=').unwrap();
    let spawned = Instant::now();
    let mut child = Command::new("chroot")
        .arg(format!("--userspec={user}:{user}"))
        .arg(root.path())
        .args(value(&keys, "ExecStart").split_whitespace())
        .args(["--admin", &format!("127.0.0.1:{port}")])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env(env_key, env_value)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chroot");
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    while !matches!(try_http(admin, "GET", "/readyz"), Ok((200, _))) {
        if spawned.elapsed() > DEADLINE || child.try_wait().is_ok_and(|s| s.is_some()) {
            // Not left running over the overlay it serves from.
            let _ = child.kill();
            panic!(
                "the installed service was not ready within {DEADLINE:?}: {:?}",
                child.wait()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let ready = spawned.elapsed();
    let rss = rss_kib(child.id());
    (child, ready, rss)
}

/// The package of the release binary, built once per test process (both tests
/// install it; package.sh's staging directory is not for two at once).
fn package() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    DEB.get_or_init(|| {
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
        // No EVENTGATE_BINARY: the script builds (or finds fresh) the release binary,
        // the one users install.
        let built = Command::new(checkout.join("deploy/debian/package.sh"))
            .output()
            .expect("deploy/debian/package.sh");
        let stdout = String::from_utf8_lossy(&built.stdout);
        assert!(
            built.status.success(),
            "packaging failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        checkout.join(stdout.lines().last().expect("the package's path"))
    })
}

/// A fresh overlay of the cached root with the package installed by `dpkg -i`.
fn installed() -> Overlay {
    let root = Overlay::new();
    std::fs::copy(package(), root.path().join("tmp/eventgate.deb")).unwrap();
    in_root(&root, None, &["dpkg", "-i", "/tmp/eventgate.deb"]);
    root
}

fn in_root(root: &Overlay, user: Option<&str>, args: &[&str]) -> String {
    let (ok, stdout, stderr) = root.run(user, args);
    assert!(ok, "{args:?} in the root failed:\n{stdout}\n{stderr}");
    stdout
}

/// The package's files, as `dpkg-deb -c` lists them (directories left out).
fn files_of(deb: &Path) -> Vec<String> {
    let out = Command::new("dpkg-deb")
        .arg("-c")
        .arg(deb)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| !line.starts_with('d'))
        .filter_map(|line| line.split_whitespace().last())
        .map(|path| path.trim_start_matches('.').to_owned())
        .collect()
}

#[test]
fn the_package_installs_configures_and_purges_cleanly() {
    let deb = package();
    let files = files_of(deb);
    for wanted in [
        "/usr/bin/eventgate",
        "/etc/eventgate/eventgate.toml",
        "/usr/lib/systemd/system/eventgate.service",
        "/usr/share/man/man1/eventgate.1.gz",
        "/usr/share/man/man1/eventgate-serve.1.gz",
        "/usr/share/bash-completion/completions/eventgate",
        "/usr/share/zsh/vendor-completions/_eventgate",
        "/usr/share/fish/vendor_completions.d/eventgate.fish",
    ] {
        assert!(files.iter().any(|f| f == wanted), "{wanted} in {files:?}");
    }

    // The root holds what the package depends on (tests/support/debian_root.rs):
    // each of those must be in its Depends, or a host without it would be short.
    let depends = Command::new("dpkg-deb")
        .args(["-f"])
        .arg(deb)
        .arg("Depends")
        .output()
        .unwrap();
    let depends = String::from_utf8_lossy(&depends.stdout).into_owned();
    for package in crate::support::debian_root::INCLUDE.split(',') {
        let needed = !matches!(
            package,
            "systemd" | "ca-certificates" | "libsasl2-modules-gssapi-mit"
        );
        assert!(
            !needed || depends.split(',').any(|d| d.trim().starts_with(package)),
            "{package} not in Depends: {depends}"
        );
    }

    let root = installed();

    // The system user, the data directory only it reads, the configuration root's
    // and readable by the service's group, and a conffile.
    let passwd = in_root(&root, None, &["getent", "passwd", "eventgate"]);
    let fields: Vec<&str> = passwd.trim().split(':').collect();
    assert_eq!(
        (fields[5], fields[6]),
        ("/var/lib/eventgate", "/usr/sbin/nologin"),
        "{passwd}"
    );
    let uid: u32 = fields[2].parse().unwrap();
    let gid: u32 = fields[3].parse().unwrap();
    assert!(uid < 1000, "a system user: {passwd}");
    let meta = |path: &str| std::fs::metadata(root.path().join(path)).unwrap();
    let data = meta("var/lib/eventgate");
    assert_eq!(
        (data.mode() & 0o7777, data.uid(), data.gid()),
        (0o750, uid, gid)
    );
    let config = meta("etc/eventgate/eventgate.toml");
    assert_eq!(
        (config.mode() & 0o7777, config.uid(), config.gid()),
        (0o640, 0, gid)
    );
    let conffiles = in_root(
        &root,
        None,
        &["dpkg-query", "-W", "-f=${Conffiles}", "eventgate"],
    );
    assert!(
        conffiles.contains("/etc/eventgate/eventgate.toml"),
        "{conffiles}"
    );

    // The unit as systemd reads it, the binary's libraries all found, and the
    // installed configuration valid to the service's user.
    in_root(
        &root,
        None,
        &[
            "systemd-analyze",
            "verify",
            "/usr/lib/systemd/system/eventgate.service",
        ],
    );
    let libraries = in_root(&root, None, &["ldd", "/usr/bin/eventgate"]);
    assert!(!libraries.contains("not found"), "{libraries}");
    let checked = in_root(
        &root,
        Some("eventgate"),
        &[
            "/usr/bin/eventgate",
            "check-config",
            "/etc/eventgate/eventgate.toml",
        ],
    );
    assert!(checked.contains(": ok"), "{checked}");
    // The unit's command line, as its user: ready on an empty data directory, and
    // again on the one it left.
    let port = free_port();
    let (mut first, first_ready, _) = serve_as_the_unit(&root, port);
    signal(&first, nix::sys::signal::Signal::SIGTERM);
    assert!(wait_exit(&mut first, DEADLINE).success());
    let (mut again, ready_again, rss) = serve_as_the_unit(&root, port);
    signal(&again, nix::sys::signal::Signal::SIGTERM);
    assert!(wait_exit(&mut again, DEADLINE).success());
    assert!(root.path().join("var/lib/eventgate/audit.db").exists());
    eprintln!(
        "package: ready {} ms after start on an empty data dir, {} ms on the existing \
         one; VmRSS at rest {rss} KiB",
        first_ready.as_millis(),
        ready_again.as_millis()
    );

    // Not enabled or started by the package: the configuration comes first.
    assert!(
        !root
            .path()
            .join("etc/systemd/system/multi-user.target.wants/eventgate.service")
            .exists()
    );

    // Removed: the binary goes, the configuration stays; purged: nothing stays.
    in_root(&root, None, &["dpkg", "-r", "eventgate"]);
    assert!(!root.path().join("usr/bin/eventgate").exists());
    assert!(root.path().join("etc/eventgate/eventgate.toml").exists());
    in_root(&root, None, &["dpkg", "-P", "eventgate"]);
    for file in &files {
        let left = root.path().join(file.trim_start_matches('/'));
        assert!(!left.exists(), "{file} left after purge");
    }
    for dir in ["etc/eventgate", "var/lib/eventgate"] {
        assert!(!root.path().join(dir).exists(), "{dir} left after purge");
    }
    let (known, status, _) = root.run(None, &["dpkg-query", "-W", "-f=${Status}", "eventgate"]);
    assert!(!known || !status.contains("installed"), "{status}");
}

/// Waits for the example configuration's admin endpoint, on the machine's own
/// loopback, to say ready.
fn ready(machine: &Machine) {
    wait_for("the service to be ready", DEADLINE, || match http_in_netns(
        machine.leader,
        9464,
        "/readyz",
    ) {
        Ok((200, _)) => Some(()),
        _ => {
            std::thread::sleep(Duration::from_millis(10));
            None
        }
    })
}

/// What the README says a user does after installing: `systemctl enable --now
/// eventgate`, on a booted Debian 12 (systemd 252 as PID 1, systemd-nspawn) with the
/// unit's hardening in force. It serves; `systemctl reload` keeps the same process;
/// `systemctl stop` ends it with status 0; it comes back enabled after a reboot.
#[test]
fn the_installed_unit_is_enabled_started_reloaded_and_stopped_by_systemd() {
    let root = installed();
    let name = format!("eg-package-{}", std::process::id());
    let machine = Machine::boot(root.path(), &name);
    let enabling = Instant::now();
    machine.must(&["systemctl", "enable", "--now", "eventgate"]);
    ready(&machine);
    let ready_in = enabling.elapsed();
    assert_eq!(
        machine
            .must(&["systemctl", "is-enabled", "eventgate"])
            .trim(),
        "enabled"
    );
    assert_eq!(machine.property("eventgate", "User"), "eventgate");
    let pid = machine.property("eventgate", "MainPID");

    // A client on the machine publishes through the socket in the data directory.
    machine.must(&[
        "/usr/bin/eventgate",
        "publish",
        "--address",
        "/var/lib/eventgate/eventgate.sock",
        "--namespace",
        "default",
        "--topic",
        "/tasks/oom",
        "--event-type",
        "containerd.events.TaskOOM",
        "--json",
        r#"{"container_id":"under-systemd"}"#,
    ]);
    let log = root.path().join("var/lib/eventgate/events.jsonl");
    wait_for("the event in the log file", DEADLINE, || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|text| text.contains("under-systemd"))
    });

    machine.must(&["systemctl", "reload", "eventgate"]);
    ready(&machine);
    assert_eq!(
        machine.property("eventgate", "MainPID"),
        pid,
        "reloaded, not restarted"
    );
    assert_eq!(machine.property("eventgate", "ActiveState"), "active");

    machine.must(&["systemctl", "stop", "eventgate"]);
    assert_eq!(machine.property("eventgate", "Result"), "success");
    assert_eq!(machine.property("eventgate", "ExecMainStatus"), "0");
    let (_, warnings, _) = machine.run(&[
        "journalctl",
        "--unit",
        "eventgate",
        "--priority",
        "warning",
        "--no-pager",
        "--quiet",
    ]);
    assert!(
        warnings.trim().is_empty(),
        "the service logged warnings:\n{warnings}"
    );
    assert!(machine.poweroff().success());

    // Enabled: the next boot starts it.
    let machine = Machine::boot(root.path(), &name);
    let booted = Instant::now();
    ready(&machine);
    eprintln!(
        "package under systemd: ready {} ms after `systemctl enable --now` began, {} ms \
         after the next boot finished",
        ready_in.as_millis(),
        booted.elapsed().as_millis()
    );
    assert!(machine.poweroff().success());
}
