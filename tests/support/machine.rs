//! A Debian root booted as a machine: `systemd-nspawn --boot` runs systemd as PID 1
//! in it (its own PID, mount and network namespaces; Debian's `systemd-container`),
//! so a unit runs under the real service manager with every setting it has. Commands
//! run inside with `nsenter` into its namespaces. Powered off, or killed, on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::{DEADLINE, Lines, have, wait_exit, wait_for};

pub const NEEDS: &str = "needs root and systemd-nspawn (systemd-container); run tests/run.sh";

/// How long a boot may take: a few seconds on an idle machine.
const BOOT: std::time::Duration = std::time::Duration::from_secs(60);

pub struct Machine {
    nspawn: Option<Child>,
    console: Lines,
    nspawn_log: Lines,
    /// The machine's PID 1 (systemd) as the host sees it.
    pub leader: u32,
}

impl Machine {
    /// Boots `root` (which must hold systemd) and waits until systemd says the boot
    /// is done.
    pub fn boot(root: &Path, name: &str) -> Machine {
        assert!(have("systemd-nspawn"), "{NEEDS}");
        // No registration with a host machined or scope unit (the host need not run
        // systemd); a network of its own, so its ports are its own.
        let mut nspawn = Command::new("systemd-nspawn")
            .arg("--directory")
            .arg(root)
            .args([
                "--boot",
                "--register=no",
                "--keep-unit",
                "--private-network",
            ])
            .args(["--machine", name, "--console=read-only"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn systemd-nspawn");
        let console = Lines::new(nspawn.stdout.take().expect("stdout"));
        let nspawn_log = Lines::new(nspawn.stderr.take().expect("stderr"));
        let parent = nspawn.id();
        let leader = wait_for("the machine's systemd", DEADLINE, || {
            let children =
                std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
            children
                .split_whitespace()
                .filter_map(|pid| pid.parse::<u32>().ok())
                .find(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|comm| comm.trim() == "systemd")
                })
        });
        let mut machine = Machine {
            nspawn: Some(nspawn),
            console,
            nspawn_log,
            leader,
        };
        // `--wait` returns once the boot is finished, running or degraded; before
        // systemd's bus is up, systemctl fails at once and says nothing.
        let end = std::time::Instant::now() + BOOT;
        loop {
            let (_, state, error) = machine.run(&["systemctl", "is-system-running", "--wait"]);
            if matches!(state.trim(), "running" | "degraded") {
                break;
            }
            assert!(
                std::time::Instant::now() < end,
                "the machine did not boot within {BOOT:?}: {state}{error}\n{}\n{}",
                machine.nspawn_log.drain(),
                machine.console.drain()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        machine
    }

    /// Runs `args` in the machine (all its namespaces, as root); (success, stdout,
    /// stderr).
    pub fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new("nsenter")
            .args(["--target", &self.leader.to_string(), "--all"])
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .expect("nsenter");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// [`run`](Self::run), which must succeed; its stdout.
    pub fn must(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.run(args);
        assert!(ok, "{args:?} in the machine failed:\n{stdout}\n{stderr}");
        stdout
    }

    /// `systemctl show UNIT -p PROPERTY`'s value.
    pub fn property(&self, unit: &str, property: &str) -> String {
        let line = self.must(&["systemctl", "show", unit, "-p", property]);
        line.trim()
            .strip_prefix(&format!("{property}="))
            .unwrap_or_else(|| panic!("{property} of {unit}: {line}"))
            .to_owned()
    }

    /// `systemctl poweroff`, and waits for systemd-nspawn to exit: its status.
    pub fn poweroff(mut self) -> std::process::ExitStatus {
        // The request returns as the shutdown begins (or the bus goes away mid-call).
        let _ = self.run(&["systemctl", "poweroff"]);
        let mut nspawn = self.nspawn.take().expect("running");
        wait_exit(&mut nspawn, DEADLINE)
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Some(mut nspawn) = self.nspawn.take() {
            // The PID namespace ends with its PID 1.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.leader as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = nspawn.kill();
            let _ = nspawn.wait();
        }
    }
}
