//! The signing key as an operator meets it through the real binary: `audit keygen`
//! writes a private key and prints its verifier key, and `check-config` and `serve`
//! refuse a `[signing]` table whose key cannot be used, naming `signing.key`.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use eventgate::note::{Verifier, load_key, open};
use support::*;

fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("run eventgate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

#[test]
fn keygen_writes_a_private_key_and_prints_its_verifier_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("node-1.key");
    let (ok, out, err) = run(eventgate().args([
        "audit",
        "keygen",
        "audit.example/node-1",
        "--out",
        path_str(&key),
    ]));
    assert!(ok, "{err}");
    assert_eq!(mode(&key), 0o600);
    assert_eq!(out.lines().count(), 1, "one line on stdout: {out:?}");
    let verifier = Verifier::from_text(&out).expect("a verifier key");
    assert_eq!(verifier.name(), "audit.example/node-1");
    assert!(
        err.contains(path_str(&key)) && err.contains("audit verify --key"),
        "{err}"
    );
    // The file holds the signer of that verifier key: what it signs opens with it.
    let signer = load_key(&key).expect("the key loads");
    assert_eq!(signer.verifier(), verifier);
    let note = signer.sign("checkpoint\n").expect("sign");
    assert_eq!(
        open(&note, &[verifier]).expect("opens").signed_by,
        ["audit.example/node-1"]
    );

    // Never overwritten: an error naming the file, the key unchanged, exit 1.
    let before = std::fs::read(&key).expect("read");
    let out = eventgate()
        .args(["audit", "keygen", "other", "--out", path_str(&key)])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(path_str(&key)) && err.contains("already exists"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read(&key).expect("read"), before);

    // Without --out: NAME.key in the working directory, slashes made underscores.
    let (ok, out, err) =
        run(eventgate()
            .current_dir(dir.path())
            .args(["audit", "keygen", "audit.example/node-2"]));
    assert!(ok, "{err}");
    let default = dir.path().join("audit.example_node-2.key");
    assert_eq!(mode(&default), 0o600);
    assert_eq!(
        load_key(&default).expect("loads").verifier(),
        Verifier::from_text(&out).expect("verifier")
    );

    // A name the format cannot carry is refused, and no file is left.
    let (ok, _, err) = run(eventgate()
        .current_dir(dir.path())
        .args(["audit", "keygen", "a+b"]));
    assert!(!ok && err.contains("'+'"), "{err}");
    assert!(!dir.path().join("a+b.key").exists());
}

#[test]
fn check_config_and_serve_refuse_an_unusable_signing_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("gw.key");
    let verifier = eventgate_stdout(&["audit", "keygen", "gw", "--out", path_str(&key)]);
    let config = dir.path().join("eventgate.toml");
    let with_key = |path: &Path| {
        std::fs::write(
            &config,
            format!(
                "data_dir = {:?}\n[signing]\nkey = {:?}\ninterval = \"30s\"\nevery_rows = 500\n",
                path_str(&dir.path().join("data")),
                path_str(path)
            ),
        )
        .expect("write config");
    };
    with_key(&key);
    let (ok, out, err) = run(eventgate().args(["check-config", path_str(&config), "--print"]));
    assert!(ok, "{err}");
    assert!(
        out.contains("[signing]") && out.contains("every_rows = 500"),
        "{out}"
    );

    // Each bad key file, refused by both, naming `signing.key` and what is wrong.
    let verifier_file = dir.path().join("verifier.key");
    std::fs::write(&verifier_file, &verifier).expect("write");
    std::fs::set_permissions(&verifier_file, std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    let malformed = dir.path().join("malformed.key");
    std::fs::write(&malformed, "PRIVATE+KEY+gw+0000000+AQ==\n").expect("write");
    std::fs::set_permissions(&malformed, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let pem = dir.path().join("tls.key");
    std::fs::write(&pem, "-----BEGIN PRIVATE KEY-----\nMC4CAQ\n").expect("write");
    std::fs::set_permissions(&pem, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let cases = [
        (dir.path().join("missing.key"), "does not exist"),
        (verifier_file, "verifier key"),
        (malformed, "8 hex digits"),
        (pem, "not an eventgate/sumdb note signer key"),
        (key.clone(), "chmod 600"),
    ];
    for (path, expected) in &cases {
        if path == &key {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        with_key(path);
        for command in ["check-config", "serve --config"] {
            let mut cmd = eventgate();
            cmd.args(command.split(' ')).arg(&config);
            let (ok, _, err) = run(&mut cmd);
            assert!(!ok, "{command} accepted {}", path.display());
            assert!(
                err.contains("`signing.key`")
                    && err.contains(expected)
                    && !err.contains("panicked"),
                "{command} {}: {err}",
                path.display()
            );
        }
    }
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    // serve --signing-key takes the same checks, over a file without [signing].
    std::fs::write(
        &config,
        format!("data_dir = {:?}\n", path_str(&dir.path().join("data"))),
    )
    .expect("write config");
    let (ok, _, err) = run(eventgate().args([
        "serve",
        "--config",
        path_str(&config),
        "--signing-key",
        path_str(&dir.path().join("missing.key")),
    ]));
    assert!(
        !ok && err.contains("`signing.key`") && err.contains("does not exist"),
        "{err}"
    );

    // Zeros are refused naming their keys.
    for (key_line, name) in [
        ("interval = \"0s\"", "signing.interval"),
        ("every_rows = 0", "signing.every_rows"),
        ("unknown = 1", "unknown"),
    ] {
        std::fs::write(&config, format!("[signing]\n{key_line}\n")).expect("write config");
        let (ok, _, err) = run(eventgate().args(["check-config", path_str(&config)]));
        assert!(!ok && err.contains(name), "{key_line}: {err}");
    }
}
