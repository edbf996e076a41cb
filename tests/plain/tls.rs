//! The TCP listener's protection and the unix socket's group, against the real
//! binary: TLS with certificates made at test time, mutual TLS refusing clients
//! without (or with a foreign) certificate, plaintext refused beyond loopback unless
//! `--insecure` and TLS without client certificates unless `--tls-allow-anonymous`,
//! clear start errors for bad certificate files, and `socket_group`.

use crate::support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use eventgate::proto::containerd::services::events::v1::SubscribeRequest;
use eventgate::tls::ClientTls;
use support::*;

fn tls_client(pki: &certs::Pki, with_cert: bool) -> ClientTls {
    ClientTls {
        ca: Some(pki.ca.clone()),
        cert: with_cert.then(|| pki.client_cert.clone()),
        key: with_cert.then(|| pki.client_key.clone()),
    }
}

/// Subscribes over `addr` with `tls`, publishes one event through the unix socket,
/// and returns whether the subscriber saw it; `Err` says why a connection failed.
async fn round_trip(gw: &Gateway, addr: &str, tls: &ClientTls) -> Result<String, String> {
    let mut client = eventgate::client::connect_tls(addr, Duration::from_secs(5), tls)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let mut stream = tokio::time::timeout(
        DEADLINE,
        client.subscribe(SubscribeRequest { filters: vec![] }),
    )
    .await
    .map_err(|_| "subscribe hung".to_owned())?
    .map_err(|status| format!("{status:?}"))?
    .into_inner();
    let mut unix = gw.client().await;
    unix.publish(exit_request("over-tls"))
        .await
        .expect("publish on the socket");
    let envelope = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .map_err(|_| "no event".to_owned())?
        .map_err(|status| format!("{status:?}"))?
        .ok_or("stream ended")?;
    Ok(envelope.topic)
}

fn serve_fails(args: &[&str], data: &Path) -> String {
    let out = eventgate()
        .arg("serve")
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .expect("run serve");
    assert!(!out.status.success(), "serve {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A gateway serving TLS on a free loopback port with `pki`'s server certificate,
/// requiring client certificates from `pki`'s CA when `mutual`; with its address.
fn tls_gateway(pki: &certs::Pki, mutual: bool) -> (Gateway, String) {
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        path_str(&pki.server_cert),
        "--tls-key",
        path_str(&pki.server_key),
    ];
    if mutual {
        args.extend(["--tls-client-ca", path_str(&pki.ca)]);
    }
    let mut gw = Gateway::start(&args);
    let addr = gw.tcp_addr().to_string();
    (gw, addr)
}

#[tokio::test]
async fn tls_listener_serves_clients_that_trust_its_ca() {
    let certs_dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(certs_dir.path(), "main");
    let (gw, addr) = tls_gateway(&pki, false);
    assert_eq!(
        round_trip(&gw, &addr, &tls_client(&pki, false)).await,
        Ok("/tasks/exit".to_owned())
    );

    // A plaintext client gets nowhere, and neither does one trusting another CA.
    assert!(round_trip(&gw, &addr, &ClientTls::default()).await.is_err());
    let other = certs::generate(certs_dir.path(), "other");
    assert!(
        round_trip(&gw, &addr, &tls_client(&other, false))
            .await
            .is_err()
    );

    // The command-line client speaks TLS with --tls-ca.
    let out = eventgate()
        .args(["publish", "--address", &addr, "-n", "default", "-t", "/cli"])
        .args(["--tls-ca", path_str(&pki.ca)])
        .args(["--event-type", "containerd.events.TaskOOM"])
        .args(["--json", r#"{"container_id":"c"}"#])
        .output()
        .expect("publish");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_certificate_from_its_ca() {
    let certs_dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(certs_dir.path(), "main");
    let other = certs::generate(certs_dir.path(), "other");
    let (gw, addr) = tls_gateway(&pki, true);
    assert_eq!(
        round_trip(&gw, &addr, &tls_client(&pki, true)).await,
        Ok("/tasks/exit".to_owned())
    );
    let refused = round_trip(&gw, &addr, &tls_client(&pki, false)).await;
    assert!(refused.is_err(), "no client certificate: {refused:?}");
    // A certificate from another CA, for a client that trusts the server.
    let foreign = ClientTls {
        ca: Some(pki.ca.clone()),
        cert: Some(other.client_cert.clone()),
        key: Some(other.client_key.clone()),
    };
    let refused = round_trip(&gw, &addr, &foreign).await;
    assert!(refused.is_err(), "foreign client certificate: {refused:?}");

    // The command-line client without --tls-cert fails and says so.
    let out = eventgate()
        .args(["events", "--address", &addr, "--tls-ca", path_str(&pki.ca)])
        .output()
        .expect("events");
    assert!(!out.status.success());
}

#[tokio::test]
async fn plaintext_beyond_loopback_needs_insecure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stderr = serve_fails(&["--listen", "0.0.0.0:0"], &dir.path().join("a"));
    assert!(
        stderr.contains("is not a loopback address")
            && stderr.contains("[exchange.tls]")
            && stderr.contains("--insecure"),
        "{stderr}"
    );

    let mut gw = Gateway::start(&["--listen", "0.0.0.0:0", "--insecure"]);
    let local = format!("127.0.0.1:{}", gw.tcp_addr().port());
    assert_eq!(
        round_trip(&gw, &local, &ClientTls::default()).await,
        Ok("/tasks/exit".to_owned())
    );
    let log = gw.stderr_text();
    assert!(
        log.contains("WARN") && log.contains("serving plaintext on a non-loopback address"),
        "{log}"
    );
}

/// TLS without client certificates authenticates nobody: beyond loopback anyone
/// could publish forged audit events. serve and check-config refuse it unless
/// anonymous clients are explicitly allowed, as for plaintext.
#[tokio::test]
async fn tls_beyond_loopback_needs_client_certificates_or_an_explicit_flag() {
    let certs_dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(certs_dir.path(), "main");
    let tls = [
        "--listen",
        "0.0.0.0:0",
        "--tls-cert",
        path_str(&pki.server_cert),
        "--tls-key",
        path_str(&pki.server_key),
    ];
    let stderr = serve_fails(&tls, &certs_dir.path().join("a"));
    assert!(
        stderr.contains("`exchange.tls.client_ca` is not set")
            && stderr.contains("is not a loopback address")
            && stderr.contains("--tls-allow-anonymous"),
        "{stderr}"
    );
    let config = certs_dir.path().join("anonymous.toml");
    let table = format!(
        "[exchange]\nlisten = \"0.0.0.0:7338\"\n[exchange.tls]\ncert = {:?}\nkey = {:?}\n",
        path_str(&pki.server_cert),
        path_str(&pki.server_key)
    );
    std::fs::write(&config, &table).expect("write config");
    let out = eventgate()
        .arg("check-config")
        .arg(&config)
        .output()
        .expect("check-config");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "check-config accepted anonymous TLS");
    assert!(stderr.contains("`exchange.tls.client_ca`"), "{stderr}");
    std::fs::write(&config, format!("{table}allow_anonymous_clients = true\n")).expect("write");
    let out = eventgate()
        .arg("check-config")
        .arg(&config)
        .output()
        .expect("check-config");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Allowed explicitly: served, with a warning.
    let mut args = tls.to_vec();
    args.push("--tls-allow-anonymous");
    let mut gw = Gateway::start(&args);
    let local = format!("127.0.0.1:{}", gw.tcp_addr().port());
    assert_eq!(
        round_trip(&gw, &local, &tls_client(&pki, false)).await,
        Ok("/tasks/exit".to_owned())
    );
    let log = gw.stderr_text();
    assert!(
        log.contains("WARN") && log.contains("serving TLS without client certificates"),
        "{log}"
    );

    // With client certificates required it needs no flag.
    let mut args = tls.to_vec();
    args.extend(["--tls-client-ca", path_str(&pki.ca)]);
    let mut gw = Gateway::start(&args);
    let local = format!("127.0.0.1:{}", gw.tcp_addr().port());
    assert_eq!(
        round_trip(&gw, &local, &tls_client(&pki, true)).await,
        Ok("/tasks/exit".to_owned())
    );
}

#[test]
fn bad_certificate_files_stop_the_start_naming_file_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(dir.path(), "main");
    // Files are read before any listener opens, so the port is never bound.
    let addr = "127.0.0.1:0";
    let missing = dir.path().join("missing.pem");
    let stderr = serve_fails(
        &[
            "--listen",
            addr,
            "--tls-cert",
            path_str(&missing),
            "--tls-key",
            path_str(&pki.server_key),
        ],
        &dir.path().join("a"),
    );
    assert!(
        stderr.contains("cannot read `exchange.tls.cert` file") && stderr.contains("missing.pem"),
        "{stderr}"
    );
    // A certificate where the key should be.
    let stderr = serve_fails(
        &[
            "--listen",
            addr,
            "--tls-cert",
            path_str(&pki.server_cert),
            "--tls-key",
            path_str(&pki.server_cert),
        ],
        &dir.path().join("b"),
    );
    assert!(
        stderr.contains("`exchange.tls.key` file") && stderr.contains("holds no private key"),
        "{stderr}"
    );
    // The key of another certificate.
    let other = certs::generate(dir.path(), "other");
    let stderr = serve_fails(
        &[
            "--listen",
            addr,
            "--tls-cert",
            path_str(&pki.server_cert),
            "--tls-key",
            path_str(&other.server_key),
        ],
        &dir.path().join("c"),
    );
    assert!(stderr.contains("cannot set up TLS"), "{stderr}");

    // check-config reads the files too.
    let config = dir.path().join("tls.toml");
    std::fs::write(
        &config,
        format!(
            "[exchange]\nlisten = \"0.0.0.0:7338\"\n[exchange.tls]\ncert = {:?}\nkey = {:?}\n\
             client_ca = {:?}\n",
            missing.display().to_string(),
            path_str(&pki.server_key),
            path_str(&pki.ca)
        ),
    )
    .expect("write config");
    let out = eventgate()
        .args(["check-config"])
        .arg(&config)
        .output()
        .expect("check-config");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read `exchange.tls.cert` file"),
        "{stderr}"
    );
}

/// A group this process may give its files to: as root any group other than its
/// own (so the change is visible); otherwise a supplementary group if it has one,
/// else its own primary group.
fn assignable_group() -> (String, u32) {
    let egid = nix::unistd::getegid().as_raw();
    let root = nix::unistd::geteuid().is_root();
    let candidates: Vec<u32> = if root {
        std::fs::read_to_string("/etc/group")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(':').nth(2)?.parse().ok())
            .filter(|gid| *gid != egid)
            .collect()
    } else {
        nix::unistd::getgroups()
            .unwrap_or_default()
            .into_iter()
            .map(|g| g.as_raw())
            .filter(|gid| *gid != egid)
            .collect()
    };
    let gid = candidates.first().copied().unwrap_or(egid);
    // By name when the group database has one, to exercise the lookup.
    let name = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name);
    (name, gid)
}

#[test]
fn the_socket_is_given_to_the_configured_group() {
    let (group, gid) = assignable_group();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("group.toml");
    std::fs::write(&config, format!("[exchange]\nsocket_group = {group:?}\n"))
        .expect("write config");
    let gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let meta = std::fs::metadata(&gw.socket).expect("socket");
    assert_eq!(meta.gid(), gid, "socket group (configured {group:?})");
    assert_eq!(meta.mode() & 0o777, 0o660);

    let other = tempfile::tempdir().expect("tempdir");
    let config = other.path().join("nogroup.toml");
    std::fs::write(
        &config,
        "[exchange]\nsocket_group = \"no-such-group-eventgate\"\n",
    )
    .expect("write config");
    let stderr = serve_fails(&["--config", path_str(&config)], &other.path().join("data"));
    assert!(
        stderr.contains("`exchange.socket_group` \"no-such-group-eventgate\": no such group"),
        "{stderr}"
    );
    assert!(
        !other.path().join("data/eventgate.sock").exists(),
        "no socket is left behind"
    );
}
