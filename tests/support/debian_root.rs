//! Minimal Debian 12 roots (`debootstrap --variant=minbase`, plus what the eventgate
//! package depends on and systemd for `systemd-analyze`, or the image's runtime
//! packages), made once per machine under /var/cache/eventgate-tests (a minute or a
//! few, from deb.debian.org) and reused: each package test works in an overlay of
//! one, thrown away at the end; the image test imports one.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the cached root holds beside minbase: the package's `Depends` (Cargo.toml,
/// `[package.metadata.deb]`) and systemd. A change here makes a new cache.
pub const INCLUDE: &str = "adduser,procps,systemd,libssl3,libsasl2-2,libsasl2-modules-gssapi-mit,libcurl4,ca-certificates,zlib1g";

const CACHE: &str = "/var/cache/eventgate-tests";

/// The cached root for the package tests ([`INCLUDE`]).
pub fn cached() -> PathBuf {
    cached_with(INCLUDE)
}

/// The cached root of minbase with `include` (debootstrap's comma-separated list),
/// made first when missing (one maker at a time, by a lock).
pub fn cached_with(include: &str) -> PathBuf {
    // The include list names the cache, so another list makes another root.
    let tag: u32 = include.bytes().fold(2_166_136_261_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    });
    let root = Path::new(CACHE).join(format!("bookworm-minbase-{tag:08x}"));
    if root.join("usr/bin/dpkg").exists() {
        return root;
    }
    std::fs::create_dir_all(CACHE).expect("the cache directory");
    // Held until this function returns: another test process waits for the root.
    let lock = std::fs::File::create(Path::new(CACHE).join(".lock")).expect("the cache lock");
    lock.lock().expect("the cache lock");
    if root.join("usr/bin/dpkg").exists() {
        return root;
    }
    let partial = root.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    eprintln!("making {} (debootstrap, once per machine)", root.display());
    let made = Command::new("debootstrap")
        .args([
            "--variant=minbase",
            &format!("--include={include}"),
            "bookworm",
        ])
        .arg(&partial)
        .arg("http://deb.debian.org/debian")
        .output()
        .expect("debootstrap (apt-get install debootstrap; tests/run.sh does)");
    assert!(
        made.status.success(),
        "debootstrap failed:\n{}",
        String::from_utf8_lossy(&made.stdout)
    );
    std::fs::rename(&partial, &root).expect("the finished root in place");
    root
}

/// An overlay of the cached root: writes go to a temporary directory, unmounted
/// and removed on drop.
pub struct Overlay {
    merged: PathBuf,
    _dir: tempfile::TempDir,
}

impl Overlay {
    pub fn new() -> Overlay {
        let lower = cached();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let [upper, work, merged] = ["upper", "work", "merged"].map(|d| dir.path().join(d));
        for d in [&upper, &work, &merged] {
            std::fs::create_dir(d).expect("an overlay directory");
        }
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        );
        let mounted = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &options])
            .arg(&merged)
            .status()
            .expect("mount");
        assert!(
            mounted.success(),
            "mounting the overlay of {}",
            lower.display()
        );
        Overlay { merged, _dir: dir }
    }

    pub fn path(&self) -> &Path {
        &self.merged
    }

    /// Runs `args` in the root (chroot), as `user` when given; answers (success,
    /// stdout, stderr).
    pub fn run(&self, user: Option<&str>, args: &[&str]) -> (bool, String, String) {
        let mut command = Command::new("chroot");
        if let Some(user) = user {
            command.arg(format!("--userspec={user}:{user}"));
        }
        let out = command
            .arg(&self.merged)
            .args(args)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .expect("chroot");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.merged).status();
    }
}
