//! Load on every core (stress-ng), for tests of what a busy machine does to timing:
//! a group rejoin, a session timeout.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{have, signal, wait_exit};

/// stress-ng's CPU workers, one per online core, for as long as this lives.
pub struct Load {
    child: Child,
}

impl Load {
    /// Starts the load; panics naming stress-ng when it is not installed.
    pub fn all_cores() -> Load {
        assert!(
            have("stress-ng"),
            "stress-ng is not installed: this test loads every core with it \
             (apt-get install stress-ng; tests/run.sh installs it)"
        );
        let child = Command::new("stress-ng")
            // 0 workers means one per online core; the timeout ends the load even
            // if this test is killed before it can stop it.
            .args(["--cpu", "0", "--timeout", "900s", "--quiet"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn stress-ng");
        let mut load = Load { child };
        // An option this stress-ng does not know ends it at once: say so rather
        // than run the test unloaded.
        std::thread::sleep(Duration::from_millis(300));
        if let Ok(Some(status)) = load.child.try_wait() {
            panic!("stress-ng exited at once ({status}): the test would run without load");
        }
        load
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // SIGTERM: stress-ng stops its workers and then exits (SIGKILL would leave
        // the workers running until the timeout).
        if let Ok(None) = self.child.try_wait() {
            signal(&self.child, nix::sys::signal::Signal::SIGTERM);
            wait_exit(&mut self.child, Duration::from_secs(20));
        }
    }
}
