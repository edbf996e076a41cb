//! The signer key's file: created 0600 and never overwritten; refused when others can
//! read it, when it holds something else, or nothing.

use std::os::unix::fs::PermissionsExt;

use crate::note::*;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_new_key_is_0600_loads_back_and_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.key");
    let signer = write_new_key(&path, "node.example/audit").unwrap();
    assert_eq!(mode(&path), 0o600);
    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(written, format!("{}\n", signer.to_text()));
    let loaded = load_key(&path).unwrap();
    assert_eq!(loaded.verifier(), signer.verifier());

    let error = write_new_key(&path, "node.example/audit").unwrap_err();
    assert!(matches!(error, KeyFileError::Exists { .. }), "{error:?}");
    assert!(error.to_string().contains("node.key"), "{error}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        written,
        "untouched"
    );

    // A bad name creates no file.
    let other = dir.path().join("bad.key");
    assert!(matches!(
        write_new_key(&other, "a b"),
        Err(KeyFileError::Generate { .. })
    ));
    assert!(!other.exists());
    // A directory that does not exist is an error naming the file.
    let error = write_new_key(&dir.path().join("no/such.key"), "n").unwrap_err();
    assert!(matches!(error, KeyFileError::Create { .. }), "{error:?}");
}

#[test]
fn a_key_others_can_read_or_write_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.key");
    write_new_key(&path, "n").unwrap();
    for bad in [0o644, 0o640, 0o604, 0o620, 0o602, 0o660] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(bad)).unwrap();
        let error = load_key(&path).unwrap_err();
        assert!(
            matches!(error, KeyFileError::Permissions { mode, .. } if mode == bad),
            "{bad:o}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&format!("{bad:04o}"))
                && message.contains(&format!("chmod 600 {}", path.display())),
            "{message}"
        );
    }
    for good in [0o600, 0o400] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(good)).unwrap();
        assert!(load_key(&path).is_ok(), "{good:o}");
    }
}

/// A file of mode 0600 holding `text`.
fn key_file(dir: &tempfile::TempDir, name: &str, text: &[u8]) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

#[test]
fn what_is_not_a_signer_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let signer = Signer::generate("n").unwrap();

    let path = key_file(&dir, "verifier", signer.verifier().to_text().as_bytes());
    let error = load_key(&path).unwrap_err();
    assert!(
        matches!(error, KeyFileError::VerifierKey { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("verifier key"), "{error}");

    for (text, what) in [
        (
            &b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n"[..],
            "OpenSSH private key",
        ),
        (b"-----BEGIN PRIVATE KEY-----\nMC4CAQ\n", "PEM"),
        (b"ssh-ed25519 AAAAC3Nza user@host\n", "OpenSSH public key"),
        (b"", "empty"),
        (b"\xff\xfe binary", "not text"),
        (b"hello\n", "PRIVATE+KEY+"),
    ] {
        let path = key_file(&dir, "other", text);
        let error = load_key(&path).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, KeyFileError::NotASignerKey { .. })
                && message.contains("not an eventgate/sumdb note signer key")
                && message.contains(what),
            "{message}"
        );
    }

    // Malformed: the key id does not match; the chain says so, never the secret.
    let text = signer.to_text();
    // The key is the last 44 characters (33 bytes in base64), which may hold '+'.
    let (head, key) = (text.split_at(text.len() - 45).0, &text[text.len() - 44..]);
    let wrong = format!(
        "{}+{:08x}+{key}\n",
        &head[..head.len() - 9],
        signer.key_id() ^ 1
    );
    let path = key_file(&dir, "wrong", wrong.as_bytes());
    let error = load_key(&path).unwrap_err();
    assert!(matches!(error, KeyFileError::Malformed { .. }), "{error:?}");
    let chain = format!("{:#}", anyhow::Error::from(error));
    assert!(chain.contains("key id") && !chain.contains(key), "{chain}");

    let path = key_file(&dir, "big", &vec![b'a'; 2000]);
    assert!(matches!(
        load_key(&path),
        Err(KeyFileError::TooLarge { .. })
    ));

    let error = load_key(&dir.path().join("missing")).unwrap_err();
    assert!(matches!(error, KeyFileError::Missing { .. }), "{error:?}");
    assert!(error.to_string().contains("audit keygen"), "{error}");

    let error = load_key(dir.path()).unwrap_err();
    assert!(matches!(error, KeyFileError::NotAFile { .. }), "{error:?}");
    // A FIFO fails at once instead of waiting for a writer.
    let fifo = dir.path().join("fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the file.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    assert!(matches!(
        load_key(&fifo),
        Err(KeyFileError::NotAFile { .. })
    ));
}

#[test]
fn a_witness_key_file_is_held_to_the_same_rules_and_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w1.key");
    let cosigner = write_new_cosigner(&path, "witness.example/w1").unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(
        load_cosigner(&path).unwrap().witness_key(),
        cosigner.witness_key()
    );
    assert!(matches!(
        write_new_cosigner(&path, "witness.example/w1"),
        Err(KeyFileError::Exists { .. })
    ));

    // Each wrong file says it wanted a witness key, and how one is made.
    let public = key_file(&dir, "public", cosigner.witness_key().to_text().as_bytes());
    let log = key_file(
        &dir,
        "log",
        Signer::generate("n").unwrap().to_text().as_bytes(),
    );
    for (path, expected) in [
        (public, ["witness cosigner key", "witness keygen"]),
        (log, ["witness cosigner key", "signature type 0x01"]),
        (
            dir.path().join("missing"),
            ["does not exist", "eventgate witness keygen"],
        ),
    ] {
        let error = load_cosigner(&path).unwrap_err();
        let chain = format!("{:#}", anyhow::Error::from(error));
        assert!(expected.iter().all(|e| chain.contains(e)), "{chain}");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let error = load_cosigner(&path).unwrap_err().to_string();
    assert!(
        error.contains("a witness cosigner key must be private"),
        "{error}"
    );
}
