//! The watch against a real file system: sockets bound, renamed into place, and
//! their directories removed and made again, as containerd does at start.

use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::Duration;

use super::*;

const DEADLINE: Duration = Duration::from_secs(10);
/// Long enough for an event already queued to be read; a change that is reported
/// at all is reported within microseconds.
const QUIET: Duration = Duration::from_millis(300);

async fn reported(watch: &mut SocketWatch) {
    tokio::time::timeout(DEADLINE, watch.changed())
        .await
        .expect("the change to be reported")
        .expect("no watch error");
}

async fn stays_quiet(watch: &mut SocketWatch, after: &str) {
    if let Ok(result) = tokio::time::timeout(QUIET, watch.changed()).await {
        panic!("reported a change after {after}: {result:?}");
    }
}

fn bind(path: &Path) {
    // Dropped at once: like a daemon's socket left behind, the file stays.
    UnixListener::bind(path).expect("bind");
}

#[tokio::test]
async fn a_socket_bound_in_place_is_reported_once_and_nothing_else_is() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("containerd.sock");
    let mut watch = SocketWatch::new(&socket).unwrap();

    // What else happens in containerd's state directory.
    std::fs::write(dir.path().join("containerd.sock.ttrpc"), b"").unwrap();
    std::fs::create_dir(dir.path().join("io.containerd.runtime.v2.task")).unwrap();
    stays_quiet(&mut watch, "other files were created").await;

    bind(&socket);
    reported(&mut watch).await;
    // The same creation does not wake a waiter twice, and changes to the socket file
    // or its removal are not a new socket.
    std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o660)).unwrap();
    stays_quiet(&mut watch, "one creation was already reported").await;
    std::fs::remove_file(&socket).unwrap();
    stays_quiet(&mut watch, "the socket was removed").await;

    // A daemon's restart: remove the stale socket, bind again.
    bind(&socket);
    std::fs::remove_file(&socket).unwrap();
    bind(&socket);
    reported(&mut watch).await;
}

#[tokio::test]
async fn a_socket_created_before_anyone_waits_is_still_reported() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("containerd.sock");
    let mut watch = SocketWatch::new(&socket).unwrap();
    bind(&socket);
    reported(&mut watch).await;
}

#[tokio::test]
async fn a_socket_renamed_into_place_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("containerd.sock");
    let mut watch = SocketWatch::new(&socket).unwrap();
    let elsewhere = dir.path().join("tmp.sock");
    bind(&elsewhere);
    stays_quiet(&mut watch, "another name was bound").await;
    std::fs::rename(&elsewhere, &socket).unwrap();
    reported(&mut watch).await;
}

#[tokio::test]
async fn the_watch_follows_directories_that_are_removed_and_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("run/containerd");
    let socket = state.join("containerd.sock");
    std::fs::create_dir_all(&state).unwrap();
    let mut watch = SocketWatch::new(&socket).unwrap();

    // The state directory goes away with the daemon, and comes back one level at a
    // time: nothing is reported until the socket itself is there.
    std::fs::remove_dir_all(dir.path().join("run")).unwrap();
    stays_quiet(&mut watch, "the directories were removed").await;
    std::fs::create_dir(dir.path().join("run")).unwrap();
    stays_quiet(&mut watch, "the first directory came back").await;
    std::fs::create_dir(&state).unwrap();
    stays_quiet(&mut watch, "the socket's directory came back").await;
    bind(&socket);
    reported(&mut watch).await;

    // All at once, faster than the watch can follow step by step: the socket is
    // found in the directory the watch arrives at.
    std::fs::remove_dir_all(dir.path().join("run")).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    bind(&socket);
    reported(&mut watch).await;
    stays_quiet(&mut watch, "that socket was reported").await;
}

#[tokio::test]
async fn a_socket_whose_directories_do_not_exist_yet_is_watched_from_above() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("a/b/c/eventgate.sock");
    let mut watch = SocketWatch::new(&socket).unwrap();
    assert_eq!(watch.watched, dir.path());
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    stays_quiet(&mut watch, "only the directories were made").await;
    assert_eq!(watch.watched, socket.parent().unwrap());
    bind(&socket);
    reported(&mut watch).await;
}

#[tokio::test]
async fn only_unix_addresses_are_watched() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("containerd.sock");
    let wake = SocketWake::new(&format!("unix://{}", socket.display()), "node");
    assert!(wake.watch.is_some());
    let wake = SocketWake::new(socket.to_str().unwrap(), "node");
    assert!(wake.watch.is_some());
    let wake = SocketWake::new("127.0.0.1:7338", "node");
    assert!(wake.watch.is_none());
}

#[tokio::test]
async fn a_wake_up_starts_a_bounded_burst_that_a_subscription_ends() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("containerd.sock");
    let mut wake = SocketWake::new(socket.to_str().unwrap(), "node");
    assert_eq!(wake.burst_delay("node"), None, "no burst before a wake-up");
    bind(&socket);
    tokio::time::timeout(DEADLINE, wake.socket_created("node"))
        .await
        .expect("the wake-up");
    let delays: Vec<_> = (0..6).filter_map(|_| wake.burst_delay("node")).collect();
    let ms = Duration::from_millis;
    assert_eq!(delays, [ms(1), ms(2), ms(4), ms(8), ms(10), ms(10)]);
    wake.subscribed();
    assert_eq!(
        wake.burst_delay("node"),
        None,
        "a subscription ends the burst"
    );

    std::fs::remove_file(&socket).unwrap();
    bind(&socket);
    tokio::time::timeout(DEADLINE, wake.socket_created("node"))
        .await
        .expect("the second wake-up");
    assert_eq!(
        wake.burst_delay("node"),
        Some(BURST_FIRST),
        "each burst starts quick"
    );
    tokio::time::pause();
    tokio::time::advance(BURST_WINDOW).await;
    assert_eq!(wake.burst_delay("node"), None, "the burst has an end");
}
