//! A unix socket in front of another that holds back what the server sends on the
//! first connection made through it, by a set delay: a subscription on a slow link,
//! while every later connection (a reconcile's lists) goes at full speed.
//!
//! eventgate opens its subscription to an upstream before anything else on that
//! address, so the first connection is the event stream. Bytes keep their order;
//! each is sent on no sooner than `delay` after it arrived.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct SlowStream {
    path: PathBuf,
    delay_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

impl SlowStream {
    /// Listens on a new socket, passing every connection on to `target`.
    pub fn start(target: &Path) -> SlowStream {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("slow.sock");
        let listener = UnixListener::bind(&path).expect("bind the slow socket");
        listener.set_nonblocking(true).expect("nonblocking");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let target = target.to_path_buf();
        let (delay, stopping) = (Arc::clone(&delay_ms), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut first = true;
            while !stopping.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = UnixStream::connect(&target) else {
                            continue;
                        };
                        let held = first.then(|| Arc::clone(&delay));
                        first = false;
                        pass(client, server, held);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        SlowStream {
            path,
            delay_ms,
            stop,
            _dir: dir,
        }
    }

    pub fn address(&self) -> String {
        self.path.to_str().expect("UTF-8 path").to_owned()
    }

    /// From now on, what the server sends on the first connection arrives `delay`
    /// late.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Drop for SlowStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Copies both ways; the server's bytes through a queue that holds each for the
/// delay, when there is one.
fn pass(client: UnixStream, server: UnixStream, delay: Option<Arc<AtomicU64>>) {
    let (mut client_read, mut server_write) = (
        client.try_clone().expect("clone"),
        server.try_clone().expect("clone"),
    );
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_read, &mut server_write);
        let _ = server_write.shutdown(std::net::Shutdown::Write);
    });
    let (mut server_read, mut client_write) = (server, client);
    let (chunks, held) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match server_read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = Instant::now()
                        + Duration::from_millis(
                            delay.as_ref().map_or(0, |d| d.load(Ordering::SeqCst)),
                        );
                    if chunks.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (due, chunk) in held {
            let wait = due.saturating_duration_since(Instant::now());
            std::thread::sleep(wait);
            if client_write.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = client_write.shutdown(std::net::Shutdown::Write);
    });
}
