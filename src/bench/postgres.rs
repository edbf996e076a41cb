//! A private PostgreSQL cluster for the benchmarks: Debian's server binaries
//! (`/usr/lib/postgresql/<major>/bin`, the newest major, or `--pg-bin`), `initdb` into
//! a temporary directory of its own, the server listening on a free loopback port
//! only (no unix socket), password (SCRAM) logins. PostgreSQL refuses to run as root:
//! run as root, the server runs as the `postgres` user; otherwise as the benchmark's
//! own user. Dropped, it is stopped (a fast shutdown, SIGKILL if that does not end
//! it) and its directory removed.
//!
//! The server is the benchmark's child (`postgres -D`, no `pg_ctl`), so its pid is
//! known and the CPU time of it and its backends can be read from `/proc`.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::BenchError;
use super::daemon::free_port;
use crate::postgres::{ConnectOptions, PostgresError, Target};

/// Where Debian's `postgresql-<major>` packages put the server binaries.
const DEBIAN_BINARIES: &str = "/usr/lib/postgresql";

/// The superuser `initdb` creates (its password is random per cluster).
pub(crate) const SUPERUSER: &str = "postgres";

/// How long the server may take to accept logins, and to stop.
const DEADLINE: Duration = Duration::from_secs(60);

/// Server settings besides initdb's defaults, and why; the benchmark's report
/// prints them.
pub(crate) const SETTINGS: &[(&str, &str)] = &[
    // Room for the pod timeline's indexes; initdb's 128MB is sized for small hosts.
    ("shared_buffers", "512MB"),
    // Fewer forced checkpoints while millions of rows are copied in.
    ("max_wal_size", "4GB"),
];

/// The newest `<DEBIAN_BINARIES>/<major>/bin` holding `postgres` and `initdb`.
pub(crate) fn find_bin() -> Result<PathBuf, BenchError> {
    let newest = std::fs::read_dir(DEBIAN_BINARIES)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            ["postgres", "initdb"]
                .iter()
                .all(|b| bin.join(b).is_file())
                .then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major);
    newest.map(|(_, bin)| bin).ok_or_else(|| BenchError::Failed {
        what: format!(
            "no PostgreSQL server binaries (postgres, initdb) in {DEBIAN_BINARIES}/<major>/bin: \
             install Debian's postgresql package or name the directory with --pg-bin"
        ),
    })
}

/// The uid and gid of `name` from the password database.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: getpwnam_r writes into `entry` and `buffer`, both ours and large enough
    // (it reports ERANGE otherwise), and `found` points into them or is null.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut buffer = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwnam_r(
            name.as_ptr(),
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() {
            return None;
        }
        Some((entry.pw_uid, entry.pw_gid))
    }
}

/// A running cluster.
pub(crate) struct Cluster {
    child: Child,
    bin: PathBuf,
    port: u16,
    /// Holds the password, for `password_file` (the benchmark's user reads it).
    password_file: PathBuf,
    // Last: removed after `Drop::drop` stopped the server.
    _dir: tempfile::TempDir,
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> BenchError {
    move |source| BenchError::Io { context, source }
}

fn pg(what: &str) -> impl FnOnce(PostgresError) -> BenchError + '_ {
    move |e| BenchError::Failed {
        what: format!("{what}: {e}"),
    }
}

impl Cluster {
    /// `initdb` and start a server in a new temporary directory (under `parent`, or
    /// the system's temporary directory), waiting until it accepts a login.
    pub(crate) async fn start(bin: &Path, parent: Option<&Path>) -> Result<Self, BenchError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let run_as = match unsafe { libc::geteuid() } == 0 {
            true => Some(user_ids(SUPERUSER).ok_or_else(|| {
                BenchError::Failed {
                    what: "running as root, and there is no `postgres` user to run the \
                       PostgreSQL server as (it refuses root): install Debian's postgresql \
                       package, or run the benchmark as another user"
                        .into(),
                }
            })?),
            false => None,
        };
        let mut builder = tempfile::Builder::new();
        builder
            .prefix("eg-bench-pg")
            .permissions(std::fs::Permissions::from_mode(0o700));
        let dir = match parent {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        }
        .map_err(io("cannot create the PostgreSQL cluster's directory".into()))?;
        give(run_as, dir.path())?;
        let password = format!("{:032x}", rand::random::<u128>());
        // The benchmark's copy (the forwarders' `password_file`), its own user's.
        let password_file = dir.path().join("bench-password");
        std::fs::write(&password_file, &password)
            .map_err(io(format!("cannot write {}", password_file.display())))?;
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600))
            .map_err(io(format!("cannot chmod {}", password_file.display())))?;
        let data = dir.path().join("data");
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, format!("{password}\n"))
            .map_err(io(format!("cannot write {}", pwfile.display())))?;
        give(run_as, &pwfile)?;
        let out = server_cmd(bin, run_as, dir.path(), "initdb")
            .arg("--pgdata")
            .arg(&data)
            .args(["--username", SUPERUSER, "--pwfile"])
            .arg(&pwfile)
            .args(["--auth-host=scram-sha-256", "--auth-local=scram-sha-256"])
            .args(["--encoding=UTF8", "--locale=C", "--no-sync"])
            .output()
            .map_err(|source| BenchError::Spawn {
                what: "initdb",
                source,
            })?;
        let _ = std::fs::remove_file(&pwfile);
        if !out.status.success() {
            return Err(BenchError::Failed {
                what: format!(
                    "initdb failed ({}): {}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        // Logins over loopback TCP only, with the password.
        let hba = data.join("pg_hba.conf");
        std::fs::write(&hba, "host all all 127.0.0.1/32 scram-sha-256\n")
            .map_err(io(format!("cannot write {}", hba.display())))?;
        // A port free a moment ago may be taken by the time the server binds it.
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let mut child = launch(bin, run_as, dir.path(), &data, port)?;
            let target = target_db(port, &password_file, "postgres")
                .map_err(pg("the benchmark's cluster"))?;
            match wait_accepting(&mut child, &target, dir.path()).await {
                Ok(()) => {
                    return Ok(Cluster {
                        child,
                        bin: bin.to_path_buf(),
                        port,
                        password_file,
                        _dir: dir,
                    });
                }
                Err(log) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    if !log.contains("could not bind") {
                        return Err(BenchError::Failed {
                            what: format!("PostgreSQL did not start: {log}"),
                        });
                    }
                    last = log;
                }
            }
        }
        Err(BenchError::Failed {
            what: format!("PostgreSQL could not bind a free port in 3 tries: {last}"),
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's major version and settings, for the report.
    pub(crate) fn describe(&self) -> String {
        let version = Command::new(self.bin.join("postgres"))
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "PostgreSQL".into());
        let settings: Vec<String> = SETTINGS.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        format!(
            "{version}, initdb's defaults (fsync and synchronous_commit on) except {}",
            settings.join(", ")
        )
    }

    /// The connection settings of database `db` as the superuser, as a `postgres`
    /// forwarder's keys: `url`, `password_file`, `tls = "disable"`.
    pub(crate) fn forwarder_keys(&self, db: &str) -> String {
        format!(
            "url = {url:?}\npassword_file = {file:?}\ntls = \"disable\"\n",
            url = self.url(db),
            file = self.password_file.display().to_string(),
        )
    }

    fn url(&self, db: &str) -> String {
        url(self.port, db)
    }

    /// What the forwarder connects with, for database `db`.
    pub(crate) fn target(&self, db: &str) -> Result<Target, PostgresError> {
        target_db(self.port, &self.password_file, db)
    }

    /// A new connection to database `db`.
    pub(crate) async fn connect(&self, db: &str) -> Result<tokio_postgres::Client, BenchError> {
        let target = self.target(db).map_err(pg("the benchmark's cluster"))?;
        target
            .connect()
            .await
            .map_err(pg("the benchmark's cluster"))
    }

    /// A new, empty database `name` (dropped first if it is there).
    pub(crate) async fn fresh_database(&self, name: &str) -> Result<(), BenchError> {
        let admin = self.connect("postgres").await?;
        let ident = format!("\"{}\"", name.replace('"', "\"\""));
        // Two statements: neither may run inside a transaction block.
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {ident} WITH (FORCE)"))
            .await
            .map_err(|e| failed("dropping an old database", &e))?;
        admin
            .batch_execute(&format!("CREATE DATABASE {ident}"))
            .await
            .map_err(|e| failed("creating a database", &e))?;
        Ok(())
    }

    /// Drops database `name` (its files with it).
    pub(crate) async fn drop_database(&self, name: &str) -> Result<(), BenchError> {
        let admin = self.connect("postgres").await?;
        let ident = format!("\"{}\"", name.replace('"', "\"\""));
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {ident} WITH (FORCE)"))
            .await
            .map_err(|e| failed("dropping a database", &e))
    }

    /// A checkpoint now, so that one row's dirty pages are not written during the next.
    pub(crate) async fn checkpoint(&self) -> Result<(), BenchError> {
        let admin = self.connect("postgres").await?;
        admin
            .batch_execute("CHECKPOINT")
            .await
            .map_err(|e| failed("CHECKPOINT", &e))
    }

    /// CPU time (user + system) of the server so far: the postmaster, the children it
    /// has reaped, and those running (its backends and background processes).
    pub(crate) fn cpu_time(&self) -> Duration {
        let pid = self.pid();
        let mut ticks = stat_fields(pid).map_or(0, |f| f.own + f.children);
        for child in children_of(pid) {
            ticks += stat_fields(child).map_or(0, |f| f.own);
        }
        Duration::from_secs_f64(ticks as f64 / clock_ticks())
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A fast shutdown (SIGINT: clients disconnected, a checkpoint), waited for; a
    /// SIGKILL if it has not ended within the deadline.
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: a plain syscall on our child's pid (not yet reaped, so not reused).
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        let end = Instant::now() + DEADLINE;
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!(
            pid = self.child.id(),
            "the benchmark's PostgreSQL did not stop within {DEADLINE:?}; killing it"
        );
        self.kill();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        // `dir` (a TempDir) is removed after this.
    }
}

fn failed(what: &str, error: &tokio_postgres::Error) -> BenchError {
    BenchError::Failed {
        what: format!("{what}: {}", crate::postgres::describe(error)),
    }
}

/// Hands `path` to the server's user (nothing to do when that is us).
fn give(run_as: Option<(u32, u32)>, path: &Path) -> Result<(), BenchError> {
    if let Some((uid, gid)) = run_as {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(io(format!("cannot hand {} to postgres", path.display())))?;
    }
    Ok(())
}

/// A command for one of the server's binaries, as the server's user, without the
/// caller's PG* settings.
fn server_cmd(bin: &Path, run_as: Option<(u32, u32)>, dir: &Path, program: &str) -> Command {
    let mut cmd = Command::new(bin.join(program));
    // std drops supplementary groups too when it changes the uid.
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid).gid(gid);
    }
    cmd.current_dir(dir);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// `postgres -D data` on `port`, its output in `server.log`.
fn launch(
    bin: &Path,
    run_as: Option<(u32, u32)>,
    dir: &Path,
    data: &Path,
    port: u16,
) -> Result<Child, BenchError> {
    let log = dir.join("server.log");
    let file =
        std::fs::File::create(&log).map_err(io(format!("cannot create {}", log.display())))?;
    let err = file
        .try_clone()
        .map_err(io(format!("cannot reuse {}", log.display())))?;
    give(run_as, &log)?;
    let mut cmd = server_cmd(bin, run_as, dir, "postgres");
    cmd.arg("-D")
        .arg(data)
        .args(["-c", "listen_addresses=127.0.0.1"])
        .args(["-c", &format!("port={port}")])
        .args(["-c", "unix_socket_directories="]);
    for (key, value) in SETTINGS {
        cmd.args(["-c", &format!("{key}={value}")]);
    }
    // Its own process group: a Ctrl-C meant for the benchmark reaches the server
    // through the benchmark's Drop, not at once. And a fast shutdown when the
    // benchmark dies without its Drop (SIGKILL, a timeout): the parent-death signal,
    // set after the uid change (which would clear it). It follows the thread that
    // spawned the server, the benchmark's runtime thread, which lives as long as it.
    // SAFETY: prctl is async-signal-safe and touches only the new process.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err);
    cmd.spawn().map_err(|source| BenchError::Spawn {
        what: "postgres",
        source,
    })
}

fn url(port: u16, db: &str) -> String {
    format!("postgres://{SUPERUSER}@127.0.0.1:{port}/{db}")
}

fn target_db(port: u16, password_file: &Path, db: &str) -> Result<Target, PostgresError> {
    ConnectOptions {
        url: url(port, db),
        password_file: Some(password_file.to_path_buf()),
        password_env: None,
        tls: crate::postgres::connect::TlsMode::Disable,
        ca_file: None,
        connect_timeout: Duration::from_secs(10),
    }
    .target()
}

/// The last lines the server logged in `dir`, for failure messages.
fn log_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Until a password login answers (or an error with the server's log): only a
/// server still coming up is waited for.
async fn wait_accepting(child: &mut Child, target: &Target, dir: &Path) -> Result<(), String> {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the server exited ({status}):\n{}", log_tail(dir)));
        }
        let why = match target.connect().await {
            Ok(client) => match client.simple_query("SELECT 1").await {
                Ok(_) => return Ok(()),
                Err(e) => crate::postgres::describe(&e),
            },
            Err(e) => e.to_string(),
        };
        let coming_up = ["Connection refused", "57P03", "starting up"]
            .iter()
            .any(|transient| why.contains(transient));
        if !coming_up || Instant::now() > end {
            return Err(format!(
                "{} accepted no login: {why}\nserver log:\n{}",
                target.describe(),
                log_tail(dir)
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Ticks {
    /// utime + stime.
    own: u64,
    /// cutime + cstime: children waited for.
    children: u64,
}

/// A process's CPU ticks from `/proc/<pid>/stat`.
fn stat_fields(pid: u32) -> Option<Ticks> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the parenthesised command name, which may hold anything.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(Ticks {
        own: field(11)? + field(12)?,
        children: field(13)? + field(14)?,
    })
}

/// The pids whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = stat.rsplit_once(')')?.1.to_owned();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// CPU time (user + system) of process `pid` so far (zero once it is gone).
pub(crate) fn process_cpu_time(pid: u32) -> Duration {
    let ticks = stat_fields(pid).map_or(0, |f| f.own);
    Duration::from_secs_f64(ticks as f64 / clock_ticks())
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_is_read_from_proc() {
        let me = std::process::id();
        let process_cpu = |pid| stat_fields(pid).map_or(0, |f| f.own);
        let before = process_cpu(me);
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(120) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(
            process_cpu(me) > before,
            "busy for 120 ms, no CPU time counted"
        );
        assert!(children_of(1).iter().all(|pid| *pid != 1));
    }
}
