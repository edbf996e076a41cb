//! One rule for what eventgate creates, whatever the umask: directories 0750, files
//! 0640, the socket 0660, nothing for others. The gateway runs under `umask 000`
//! with a file forwarder (in a subdirectory, rotating), an audit store, signed
//! checkpoints and dead letters, and every path under its data directory is judged.

use crate::support;

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use support::*;

/// Runs `cmd` with umask 000: a file or directory created without an explicit mode
/// would be open to everyone.
fn permissive(cmd: &mut std::process::Command) -> &mut std::process::Command {
    // SAFETY: umask(2) is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        })
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        out.push(path.clone());
        if fs::symlink_metadata(&path).unwrap().is_dir() {
            walk(&path, out);
        }
    }
}

struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        signal(&self.0, nix::sys::signal::Signal::SIGTERM);
        wait_exit(&mut self.0, DEADLINE);
    }
}

#[test]
fn everything_under_the_data_dir_is_owner_and_group_only_under_umask_000() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let key = dir.path().join("node-1.key");
    let out = permissive(eventgate().args(["audit", "keygen", "node-1", "--out", path_str(&key)]))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |path: &Path| fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&key), 0o600, "the signing key stays owner-only");

    let config = dir.path().join("eventgate.toml");
    fs::write(
        &config,
        format!(
            "node = \"node-1\"\n\
             [signing]\nkey = \"{}\"\ninterval = \"1s\"\nevery_rows = 10\n\
             [dead_letter]\npoll_interval = \"50ms\"\n\
             [[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"logs/deep/events.jsonl\"\n\
             max_size = \"2KiB\"\n\
             [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n\
             [[forwarder]]\nname = \"full\"\nkind = \"file\"\npath = \"/dev/full\"\n\
             batch = {{ events = 1, linger = \"0s\" }}\n\
             retry = {{ initial = \"10ms\", max = \"10ms\", attempts = 2 }}\n",
            path_str(&key)
        ),
    )
    .unwrap();
    let mut child = permissive(
        eventgate()
            .args([
                "serve",
                "--data-dir",
                path_str(&data),
                "--config",
                path_str(&config),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .spawn()
    .unwrap();
    let socket = data.join("eventgate.sock");
    wait_for("the gateway socket", DEADLINE, || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("eventgate exited: {status}");
        }
        std::os::unix::net::UnixStream::connect(&socket).ok()
    });
    let gateway = Stop(child);
    for n in 0..40 {
        let (ok, err) = publish_json(
            path_str(&socket),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &format!("{{\"container_id\":\"c{n}\",\"exit_status\":{}}}", n % 3),
        );
        assert!(ok, "{err}");
    }
    let names = |all: &[PathBuf]| -> Vec<String> {
        all.iter()
            .map(|p| p.strip_prefix(&data).unwrap().display().to_string())
            .collect()
    };
    let expected = [
        "eventgate.sock",
        "audit.db",
        "audit.db-wal",
        "audit.db-shm",
        "logs/deep/events.jsonl",
        "state/checkpoint-audit.note",
    ];
    wait_for(
        "the stores, a rotation, a checkpoint and a dead letter",
        DEADLINE,
        || {
            let mut all = Vec::new();
            walk(&data, &mut all);
            let names = names(&all);
            let rotated = names.iter().any(|n| n.starts_with("logs/deep/events-"));
            let dead = names
                .iter()
                .any(|n| n.contains("dead") && n.ends_with(".db"));
            (expected.iter().all(|e| names.iter().any(|n| n == e)) && rotated && dead).then_some(())
        },
    );
    let mut all = Vec::new();
    walk(&data, &mut all);
    let mut wrong = Vec::new();
    for path in std::iter::once(data.clone()).chain(all.iter().cloned()) {
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(_) => continue, // removed meanwhile (a .tmp renamed, a segment dropped)
        };
        let want = if meta.is_dir() {
            0o750
        } else if meta.file_type().is_socket() {
            0o660
        } else {
            0o640
        };
        let got = meta.permissions().mode() & 0o7777;
        if got != want {
            wrong.push(format!("{} is {got:o}, not {want:o}", path.display()));
        }
    }
    drop(gateway);
    assert!(
        wrong.is_empty(),
        "{}\nall: {:?}",
        wrong.join("\n"),
        names(&all)
    );
}
