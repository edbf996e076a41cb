//! A private PostgreSQL cluster for tests: Debian's server binaries
//! (`/usr/lib/postgresql/<major>/bin`, newest major), `initdb` into a temp dir, a free
//! loopback port, password (SCRAM) logins only, optionally TLS with a test CA. The
//! server runs as the unprivileged `postgres` user when the tests run as root (as in
//! CI; PostgreSQL refuses to run as root), as the tests' own user otherwise. Drop
//! stops it (`pg_ctl stop -m immediate`), unmounts its small table spaces and removes
//! the directory, also when the test panicked.
//!
//! Layout of the temp dir (mode 0700, owned by the server's user):
//! `data/` (PGDATA), `sock/` (the unix socket, which only the harness's `psql` uses),
//! `server.log`, `tls/` (the test CAs), `tablespaces/<name>/` (tmpfs mounts).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{DEADLINE, certs, free_port};

/// Where Debian's `postgresql-<major>` packages put the server binaries.
const DEBIAN_BINARIES: &str = "/usr/lib/postgresql";

pub const NEEDS: &str = "needs PostgreSQL's server binaries (Debian's postgresql package: \
     /usr/lib/postgresql/<major>/bin and the postgres user); run tests/run.sh";

/// The superuser `initdb` creates; its password is random per cluster.
pub const SUPERUSER: &str = "postgres";

/// The newest `/usr/lib/postgresql/<major>/bin` with a server in it, or a panic naming
/// what is missing.
pub fn bin_dir() -> PathBuf {
    let majors = std::fs::read_dir(DEBIAN_BINARIES)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            ["postgres", "initdb", "pg_ctl", "psql"]
                .iter()
                .all(|b| bin.join(b).is_file())
                .then_some((major, bin))
        });
    majors
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin)
        .unwrap_or_else(|| {
            panic!("no postgres, initdb, pg_ctl and psql in {DEBIAN_BINARIES}/<major>/bin: {NEEDS}")
        })
}

/// The user and group the server runs as: `postgres` when the tests run as root,
/// `None` (the tests' own user, already unprivileged) otherwise.
fn server_user() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            panic!("no `postgres` user to run the server as (PostgreSQL refuses root): {NEEDS}")
        });
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

/// A running (or stopped, between `stop` and `start`) private cluster.
pub struct Postgres {
    bin: PathBuf,
    run_as: Option<(u32, u32)>,
    port: u16,
    password: String,
    /// The CA that signed the server's certificate, in TLS mode.
    ca: Option<PathBuf>,
    /// tmpfs mounts under the temp dir, unmounted on drop.
    mounts: Vec<PathBuf>,
    // Last: removed after `Drop::drop` stopped the server and unmounted.
    dir: tempfile::TempDir,
}

impl Postgres {
    /// A fresh cluster accepting password logins on 127.0.0.1 without TLS.
    pub fn start() -> Postgres {
        Self::start_with(false)
    }

    /// A fresh cluster that accepts TCP logins only over TLS, with a certificate for
    /// `localhost` and 127.0.0.1 signed by [`ca`](Self::ca): clients can use
    /// `sslmode=verify-full`.
    pub fn start_tls() -> Postgres {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> Postgres {
        let bin = bin_dir();
        let run_as = server_user();
        // 0700: the unix socket and TLS key inside are the server user's alone.
        let dir = tempfile::Builder::new()
            .prefix("eg-pg")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .expect("tempdir");
        let mut pg = Postgres {
            bin,
            run_as,
            port: 0,
            password: format!("{:032x}", rand::random::<u128>()),
            ca: None,
            mounts: Vec::new(),
            dir,
        };
        // From here on, Drop cleans up whatever a panic leaves behind.
        pg.give(pg.dir.path());
        pg.init();
        if tls {
            pg.make_tls();
        }
        pg.write_hba();
        // A port that was free a moment ago may be taken by the time the server binds
        // it: a server that cannot bind is started again on another port.
        for _ in 0..3 {
            pg.port = free_port();
            pg.write_settings();
            match pg.launch() {
                Ok(()) => {
                    pg.wait_accepting();
                    return pg;
                }
                Err(log) if log.contains("could not bind") => continue,
                Err(log) => panic!("PostgreSQL did not start:\n{log}"),
            }
        }
        panic!(
            "PostgreSQL could not bind a free port in 3 tries:\n{}",
            pg.log()
        );
    }

    /// `initdb` as the server's user: SCRAM passwords for every login, the superuser's
    /// from a file, no fsync of the fresh files (a test's cluster outlives no crash).
    fn init(&self) {
        let pwfile = self.dir.path().join("pwfile");
        std::fs::write(&pwfile, format!("{}\n", self.password)).expect("write pwfile");
        self.give(&pwfile);
        let out = self
            .server_cmd("initdb")
            .arg("--pgdata")
            .arg(self.data_dir())
            .args(["--username", SUPERUSER, "--pwfile"])
            .arg(&pwfile)
            .args(["--auth-host=scram-sha-256", "--auth-local=scram-sha-256"])
            .args(["--encoding=UTF8", "--locale=C", "--no-sync"])
            .output()
            .expect("run initdb");
        let _ = std::fs::remove_file(&pwfile);
        assert!(
            out.status.success(),
            "initdb failed:\n{}",
            output_text(&out)
        );
        let socket = self.socket_dir();
        std::fs::create_dir(&socket).expect("socket dir");
        self.give(&socket);
        // The harness's own settings live in one file, rewritten before each start.
        let conf = self.data_dir().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("read postgresql.conf");
        text.push_str("\ninclude 'eventgate-test.conf'\n");
        std::fs::write(&conf, text).expect("write postgresql.conf");
    }

    fn write_settings(&self) {
        let mut text = format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = {}\n",
            self.port,
            literal(&self.socket_dir().display().to_string()),
        );
        if self.ca.is_some() {
            text.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        }
        let path = self.data_dir().join("eventgate-test.conf");
        std::fs::write(&path, text).expect("write eventgate-test.conf");
        self.give(&path);
    }

    /// Who may log in how: a password (SCRAM) always; over TCP only from 127.0.0.1,
    /// and only over TLS in TLS mode (a client that does not ask for it is refused).
    fn write_hba(&self) {
        let host = if self.ca.is_some() { "hostssl" } else { "host" };
        let text =
            format!("local all all scram-sha-256\n{host} all all 127.0.0.1/32 scram-sha-256\n");
        let path = self.data_dir().join("pg_hba.conf");
        std::fs::write(&path, text).expect("write pg_hba.conf");
        self.give(&path);
    }

    /// A test CA and a server certificate it signed, the server's copy in PGDATA
    /// (PostgreSQL wants its key owned by it, mode 0600).
    fn make_tls(&mut self) {
        let tls = self.dir.path().join("tls");
        std::fs::create_dir(&tls).expect("tls dir");
        let pki = certs::generate(&tls, "postgres");
        for (from, to) in [
            (&pki.server_cert, "server.crt"),
            (&pki.server_key, "server.key"),
        ] {
            let to = self.data_dir().join(to);
            std::fs::copy(from, &to).expect("copy the server's certificate");
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))
                .expect("chmod 0600");
            self.give(&to);
        }
        self.ca = Some(pki.ca);
    }

    /// `pg_ctl start` on `self.port`: Err(the server's log) if it did not come up.
    fn launch(&self) -> Result<(), String> {
        let out = self
            .server_cmd("pg_ctl")
            .arg("start")
            .arg("--pgdata")
            .arg(self.data_dir())
            .arg("--log")
            .arg(self.log_path())
            .args(["--wait", "--timeout", &DEADLINE.as_secs().to_string()])
            .stdin(Stdio::null())
            .output()
            .expect("run pg_ctl start");
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl start on port {}: {}\nserver log:\n{}",
                self.port,
                output_text(&out),
                self.log()
            ))
        }
    }

    /// Until a password login over TCP answers a query (pg_ctl's wait only reads the
    /// pid file), or a panic with the server's log.
    fn wait_accepting(&self) {
        let url = self.url();
        let env = self.client_env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let end = Instant::now() + DEADLINE;
        loop {
            let why = match psql(&url, "SELECT 1", &env) {
                Ok(_) => return,
                Err(why) => why,
            };
            // Only a server still coming up is worth waiting for; a refused login or
            // a TLS failure will not change.
            let coming_up = ["Connection refused", "starting up", "timeout expired"]
                .iter()
                .any(|transient| why.contains(transient));
            assert!(
                coming_up && Instant::now() < end,
                "PostgreSQL on port {} accepted no login: {why}\nserver log:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the server again after [`stop`](Self::stop), on the same port.
    pub fn start_again(&mut self) {
        self.write_settings();
        if let Err(log) = self.launch() {
            panic!("PostgreSQL did not start again:\n{log}");
        }
        self.wait_accepting();
    }

    /// A clean shutdown (`pg_ctl stop -m fast`): clients are disconnected, everything
    /// committed is kept.
    pub fn stop(&mut self) {
        self.pg_ctl_stop("fast")
            .unwrap_or_else(|why| panic!("{why}"));
    }

    /// A crash-like shutdown (`pg_ctl stop -m immediate`): no checkpoint, the next
    /// start recovers from the WAL.
    pub fn stop_immediate(&mut self) {
        self.pg_ctl_stop("immediate")
            .unwrap_or_else(|why| panic!("{why}"));
    }

    /// [`stop`](Self::stop), then [`start_again`](Self::start_again) on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Stops the server, then waits until the postmaster's process is gone (pg_ctl
    /// returns when the pid file is, a moment before the process exits).
    fn pg_ctl_stop(&self, mode: &str) -> Result<(), String> {
        let pid = self.try_pid();
        let out = self
            .server_cmd("pg_ctl")
            .arg("stop")
            .arg("--pgdata")
            .arg(self.data_dir())
            .args(["--mode", mode, "--wait"])
            .args(["--timeout", &DEADLINE.as_secs().to_string()])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run pg_ctl stop: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_ctl stop -m {mode}: {}\nserver log:\n{}",
                output_text(&out),
                self.log()
            ));
        }
        if let Some(pid) = pid {
            let end = Instant::now() + DEADLINE;
            while alive(pid) {
                if Instant::now() > end {
                    return Err(format!("the postmaster (pid {pid}) outlived pg_ctl stop"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(())
    }

    /// The postmaster's pid, from `postmaster.pid`; panics if the server is not running.
    pub fn pid(&self) -> i32 {
        self.try_pid()
            .unwrap_or_else(|| panic!("no postmaster.pid: the server is not running"))
    }

    fn try_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The superuser's password (user [`SUPERUSER`]).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The harness's temp dir (PGDATA is `data/` in it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Everything the server has logged (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The superuser's URL for database `postgres`.
    pub fn url(&self) -> String {
        self.url_for(SUPERUSER, &self.password, "postgres")
    }

    /// `postgres://user:password@127.0.0.1:PORT/db`, user and password percent-encoded.
    pub fn url_for(&self, user: &str, password: &str, db: &str) -> String {
        format!(
            "postgres://{}:{}@127.0.0.1:{}/{}",
            percent(user),
            percent(password),
            self.port,
            percent(db)
        )
    }

    /// The CA that signed the server's certificate; panics unless started with
    /// [`start_tls`](Self::start_tls).
    pub fn ca(&self) -> &Path {
        self.ca
            .as_deref()
            .expect("a CA only for a cluster from Postgres::start_tls")
    }

    /// A CA that did not sign the server's certificate, for "wrong CA" tests (a new
    /// one per call).
    pub fn wrong_ca(&self) -> PathBuf {
        let other = tempfile::Builder::new()
            .prefix("other-ca")
            .tempdir_in(self.dir.path())
            .expect("tempdir")
            .keep();
        certs::generate(&other, "stranger").ca
    }

    /// A login role with `password`.
    pub fn create_role(&self, name: &str, password: &str) {
        self.sql(&format!(
            "CREATE ROLE {} LOGIN PASSWORD {}",
            ident(name),
            literal(password)
        ));
    }

    /// A database owned by `owner`.
    pub fn create_database(&self, name: &str, owner: &str) {
        self.sql(&format!(
            "CREATE DATABASE {} OWNER {}",
            ident(name),
            ident(owner)
        ));
    }

    /// Closes every client's connection (`pg_terminate_backend`) except the one asking:
    /// a dropped connection as clients see it. Returns how many were closed.
    pub fn terminate_connections(&self) -> u64 {
        let n = self.sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        );
        n.parse()
            .unwrap_or_else(|_| panic!("a count from pg_terminate_backend, got {n:?}"))
    }

    /// `sql` (statements separated by `;`) as the superuser in database `postgres`;
    /// the rows `psql -At` prints (columns separated by `|`), or a panic with its error.
    pub fn sql(&self, sql: &str) -> String {
        self.sql_in("postgres", sql)
    }

    /// [`sql`](Self::sql) in database `db`.
    pub fn sql_in(&self, db: &str, sql: &str) -> String {
        self.try_sql_in(db, sql)
            .unwrap_or_else(|why| panic!("psql in {db}: {sql}\n{why}"))
    }

    /// [`sql_in`](Self::sql_in), the error (psql's message) returned.
    pub fn try_sql_in(&self, db: &str, sql: &str) -> Result<String, String> {
        // Through the unix socket, not TCP: this works in TLS mode and whatever
        // pg_hba.conf says about 127.0.0.1.
        let conninfo = format!(
            "host={} port={} user={} dbname={}",
            conninfo_value(&self.socket_dir().display().to_string()),
            self.port,
            conninfo_value(SUPERUSER),
            conninfo_value(db)
        );
        psql(&conninfo, sql, &[("PGPASSWORD", &self.password)])
    }

    /// Client settings for the harness's own logins over TCP: the server's CA in TLS
    /// mode.
    fn client_env(&self) -> Vec<(&'static str, String)> {
        match &self.ca {
            Some(ca) => vec![
                ("PGSSLMODE", "verify-full".into()),
                ("PGSSLROOTCERT", ca.display().to_string()),
            ],
            None => vec![],
        }
    }

    /// A table space `name` owned by `owner` on a tmpfs of `mib` MiB of its own, so a
    /// test can fill it up. Mounting needs root: without it, a panic saying so. The
    /// mount goes when the cluster is dropped. Returns the mount point.
    pub fn small_tablespace(&mut self, name: &str, owner: &str, mib: u32) -> PathBuf {
        let Some((uid, gid)) = self.run_as else {
            panic!(
                "a small table space is a tmpfs mount, which needs root (these tests run \
                 as root in CI, with the privileged-tests feature)"
            );
        };
        let parent = self.dir.path().join("tablespaces");
        if !parent.exists() {
            std::fs::create_dir(&parent).expect("tablespaces dir");
            self.give(&parent);
        }
        let at = parent.join(name);
        std::fs::create_dir(&at).expect("table space mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={mib}m,mode=0700,uid={uid},gid={gid}"))
            .arg("tmpfs")
            .arg(&at)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a {mib} MiB tmpfs on {} failed (needs root and mounts allowed): {}",
            at.display(),
            output_text(&out)
        );
        self.mounts.push(at.clone());
        self.sql(&format!(
            "CREATE TABLESPACE {} OWNER {} LOCATION {}",
            ident(name),
            ident(owner),
            literal(&at.display().to_string())
        ));
        at
    }

    /// A command for one of the server's binaries, as the server's user, in the
    /// harness's dir, without the tests' PG* settings.
    fn server_cmd(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        // std drops supplementary groups too when it changes the uid.
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd.current_dir(self.dir.path());
        without_pg_env(&mut cmd);
        cmd
    }

    /// Hands `path` to the server's user (nothing to do when that is us).
    fn give(&self, path: &Path) {
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {} to postgres: {e}", path.display()));
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // No panics here: a drop while unwinding from a failed test would abort.
        let pid = self.try_pid();
        if let Err(why) = self.pg_ctl_stop("immediate")
            && let Some(pid) = pid
        {
            eprintln!("postgres harness: {why}; killing pid {pid}");
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for at in self.mounts.drain(..).rev() {
            let unmounted = Command::new("umount")
                .arg(&at)
                .status()
                .is_ok_and(|s| s.success());
            if !unmounted {
                let _ = Command::new("umount").arg("-l").arg(&at).status();
            }
        }
        // `dir` (a TempDir) is removed after this.
    }
}

/// Runs `sql` with psql against `url` (a URL or a conninfo string), with `env` on top
/// of a clean environment (no PG* variables, no ~/.pgpass): the rows `psql -At`
/// printed, or psql's error.
pub fn psql(url: &str, sql: &str, env: &[(&str, &str)]) -> Result<String, String> {
    use std::io::Write;
    let mut cmd = Command::new(bin_dir().join("psql"));
    without_pg_env(&mut cmd);
    cmd.args(["--no-psqlrc", "--no-align", "--tuples-only", "--quiet"])
        .args(["--set", "ON_ERROR_STOP=1", "--file", "-", "--dbname", url])
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGPASSFILE", "/nonexistent/eventgate-test-pgpass")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("run psql: {e}"))?;
    // psql may exit before reading (a refused login): a broken pipe is not the error.
    let _ = child
        .stdin
        .take()
        .expect("psql stdin")
        .write_all(sql.as_bytes());
    let out = child.wait_with_output().map_err(|e| format!("psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
    } else {
        Err(output_text(&out))
    }
}

fn without_pg_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold any.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// An SQL identifier, quoted.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// An SQL string literal (standard_conforming_strings is on).
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A value in a libpq conninfo string, quoted.
fn conninfo_value(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn output_text(out: &Output) -> String {
    format!(
        "{}{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
