//! Clients that hold connections without using them, against the real binary: the
//! connection cap per listener, the deadline for a connection's first bytes and
//! for a TLS handshake, HTTP/2 pings that find a client gone quiet, and the deadline
//! for a call's request message.

use crate::support;

use std::io::Read;
use std::time::{Duration, Instant};

use eventgate::tls::ClientTls;
use support::*;

fn start(config: &str, extra: &[&str]) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("limits.toml");
    std::fs::write(&path, config).expect("write config");
    let mut args = vec!["--config", path_str(&path)];
    args.extend(extra);
    Gateway::start_in(dir, &args)
}

fn metric(gw: &mut Gateway, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape(gw).get(name, labels).unwrap_or(0.0)
}

fn open_connections(gw: &mut Gateway, listener: &str) -> f64 {
    metric(gw, "eventgate_connections", &[("listener", listener)])
}

/// Reads until the peer closes; how long that took. Panics if it stays open for the
/// whole deadline.
fn time_until_closed(mut stream: impl Read) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) if started.elapsed() < DEADLINE => return started.elapsed(),
            Ok(_) if started.elapsed() < DEADLINE => continue,
            _ => panic!("the connection was still open after {DEADLINE:?}"),
        }
    }
}

fn unix_stream(gw: &Gateway) -> std::os::unix::net::UnixStream {
    let stream = std::os::unix::net::UnixStream::connect(&gw.socket).expect("connect");
    stream.set_read_timeout(Some(DEADLINE)).expect("timeout");
    stream
}

/// At most `max_connections` per listener: one more is closed at once and counted,
/// the open ones keep working, and a closed one frees its place.
// Multi-threaded: `wait_for` blocks its thread while the clients' connection tasks
// must run (to close a dropped client's connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_refused_and_the_others_keep_working() {
    let mut gw = start("[exchange.limits]\nmax_connections = 3\n", &[]);
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut client = gw.client().await;
        client
            .publish(exit_request("held"))
            .await
            .expect("publish on a held connection");
        clients.push(client);
    }
    wait_for("3 open connections", DEADLINE, || {
        (open_connections(&mut gw, "unix") == 3.0).then_some(())
    });

    let refused = time_until_closed(unix_stream(&gw));
    assert!(refused < Duration::from_secs(5), "closed after {refused:?}");
    // A gRPC client fails too: the connection is closed before HTTP/2 starts, which
    // tonic reports as a transport error (grpc-go: UNAVAILABLE), or, when the close
    // races with the first request, as that request cancelled by hyper.
    match eventgate::client::connect(&gw.address(), Duration::from_secs(5)).await {
        Err(error) => assert!(format!("{error:?}").contains("Transport"), "{error:?}"),
        Ok(mut extra) => {
            let status = extra
                .publish(exit_request("fourth"))
                .await
                .expect_err("a fourth connection");
            assert!(
                matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
                ),
                "{status:?}"
            );
        }
    }
    assert!(
        metric(
            &mut gw,
            "eventgate_limit_rejections_total",
            &[("limit", "max_connections")]
        ) >= 2.0
    );

    for client in &mut clients {
        client
            .publish(exit_request("still"))
            .await
            .expect("the open connections keep working");
    }
    clients.pop();
    wait_for("a place to free up", DEADLINE, || {
        (open_connections(&mut gw, "unix") == 2.0).then_some(())
    });
    let mut next = gw.client().await;
    next.publish(exit_request("next"))
        .await
        .expect("a new connection takes the freed place");
}

/// A connection that sends nothing is closed after `handshake_timeout`, on the unix
/// socket and on a TLS listener (where it never starts its handshake); clients that
/// do talk are served meanwhile, and the place comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_after_the_handshake_timeout() {
    let certs_dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(certs_dir.path(), "main");
    let mut gw = start(
        "[exchange.limits]\nhandshake_timeout = \"1s\"\n",
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            path_str(&pki.server_cert),
            "--tls-key",
            path_str(&pki.server_key),
        ],
    );
    let addr = gw.tcp_addr();

    let silent_unix = unix_stream(&gw);
    let silent_tcp = std::net::TcpStream::connect(addr).expect("connect");
    silent_tcp
        .set_read_timeout(Some(DEADLINE))
        .expect("timeout");
    let tcp = std::thread::spawn(move || time_until_closed(silent_tcp));
    let unix = std::thread::spawn(move || time_until_closed(silent_unix));

    // Others are served while the silent ones wait.
    let tls = ClientTls {
        ca: Some(pki.ca.clone()),
        ..ClientTls::default()
    };
    let mut client =
        eventgate::client::connect_tls(&addr.to_string(), Duration::from_secs(5), &tls)
            .await
            .expect("TLS client");
    client
        .publish(exit_request("talks"))
        .await
        .expect("publish over TLS");

    for (listener, closed) in [("tcp", tcp), ("unix", unix)] {
        let after = closed.join().expect("reader");
        assert!(
            after >= Duration::from_millis(900) && after < Duration::from_secs(10),
            "the silent {listener} connection was closed after {after:?}"
        );
    }
    wait_for(
        "the silent connections' places to free up",
        DEADLINE,
        || {
            (open_connections(&mut gw, "tcp") == 1.0 && open_connections(&mut gw, "unix") == 0.0)
                .then_some(())
        },
    );
    assert_eq!(
        metric(
            &mut gw,
            "eventgate_limit_rejections_total",
            &[("limit", "handshake_timeout")]
        ),
        2.0,
        "both closings counted"
    );
    client
        .publish(exit_request("still"))
        .await
        .expect("the talking client is unaffected");
}

/// The HTTP/2 client preface and an empty SETTINGS frame: a connection that is set
/// up and then never answers anything.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// A client that stops answering (a host gone without closing the connection) is
/// found by HTTP/2 pings: unanswered for `keepalive_timeout`, the connection closes.
#[test]
fn a_client_that_stops_answering_pings_is_disconnected() {
    use std::io::Write;
    let gw = start(
        "[exchange.limits]\nkeepalive_interval = \"300ms\"\nkeepalive_timeout = \"300ms\"\n",
        &[],
    );
    let mut quiet = unix_stream(&gw);
    quiet.write_all(PREFACE).expect("preface");
    let after = time_until_closed(quiet);
    assert!(
        after >= Duration::from_millis(500) && after < Duration::from_secs(10),
        "closed after {after:?}"
    );

    // Without pings the same connection stays open.
    let gw = start("[exchange.limits]\nkeepalive_interval = \"0s\"\n", &[]);
    let mut quiet = unix_stream(&gw);
    quiet.write_all(PREFACE).expect("preface");
    quiet
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut buf = [0u8; 4096];
    loop {
        match quiet.read(&mut buf) {
            Ok(0) => panic!("closed without keepalive"),
            Ok(_) => continue,
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
                break;
            }
        }
    }
}

/// A Publish whose request message trickles in is answered DEADLINE_EXCEEDED after
/// `body_timeout`, naming the key, and counted.
#[tokio::test]
async fn a_request_message_that_does_not_arrive_in_time_is_refused() {
    let mut gw = start("[exchange.limits]\nbody_timeout = \"500ms\"\n", &[]);
    let stream = tokio::net::UnixStream::connect(&gw.socket)
        .await
        .expect("connect");
    let (send, connection) = h2::client::handshake(stream).await.expect("handshake");
    tokio::spawn(connection);
    let request =
        http::Request::post("http://localhost/containerd.services.events.v1.Events/Publish")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("containerd-namespace", "default")
            .body(())
            .expect("request");
    let mut send = send.ready().await.expect("ready");
    let started = Instant::now();
    let (response, mut body) = send.send_request(request, false).expect("send");
    // The prefix announces 100 bytes; 10 come, then nothing.
    body.send_data(
        bytes::Bytes::from_static(&[
            0, 0, 0, 0, 100, 10, 8, b'/', b't', b'a', b's', b'k', b's', b'/', b'x',
        ]),
        false,
    )
    .expect("body");
    let response = tokio::time::timeout(DEADLINE, response)
        .await
        .expect("an answer before the deadline")
        .expect("response");
    let took = started.elapsed();
    let headers = response.headers();
    assert_eq!(
        headers.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"4"[..]),
        "{headers:?}"
    );
    let message = headers
        .get("grpc-message")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    assert!(message.contains("body_timeout"), "{message}");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(10),
        "answered after {took:?}"
    );
    assert_eq!(
        metric(
            &mut gw,
            "eventgate_limit_rejections_total",
            &[("limit", "body_timeout")]
        ),
        1.0
    );
}
