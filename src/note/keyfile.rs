//! The signer key's file: one line, the `PRIVATE+KEY+...` text, mode 0600; and a
//! witness's cosigner key's, by the same rules.
//!
//! Whoever reads the file can sign checkpoints that verify as this gateway's (or
//! cosign as the witness), so it is created readable by its owner only and never
//! overwritten (an overwritten key would silently invalidate the verifier key handed
//! out), and a file that others can read or write is refused rather than used.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{NoteError, Signer, Verifier};
use crate::tlog::cosignature::{Cosigner, WitnessKey};

/// The largest key file read: a key is under 100 bytes plus its name.
pub(crate) const MAX_KEY_FILE_BYTES: u64 = 1024;

/// Which secret a key file holds. The messages name it and the command that makes
/// one: an operator handed the wrong kind learns which file was meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretKind {
    /// A log's signer key (signature type 0x01), `eventgate audit keygen`.
    Signer,
    /// A witness's cosigner key (signature type 0x04), `eventgate witness keygen`.
    Cosigner,
}

impl SecretKind {
    fn noun(self) -> &'static str {
        match self {
            SecretKind::Signer => "signer key",
            SecretKind::Cosigner => "witness cosigner key",
        }
    }

    fn keygen(self) -> &'static str {
        match self {
            SecretKind::Signer => "eventgate audit keygen",
            SecretKind::Cosigner => "eventgate witness keygen",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot create a key named {name:?}")]
    Generate {
        name: String,
        #[source]
        source: NoteError,
    },
    #[error(
        "{} already exists; eventgate never overwrites a key (move it away or choose another file)",
        path.display()
    )]
    Exists { path: PathBuf },
    #[error("cannot create the key file {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the key file {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the key file {} does not exist (create one with `{} NAME --out {}`)",
        path.display(), kind.keygen(), path.display()
    )]
    Missing { path: PathBuf, kind: SecretKind },
    #[error("cannot read the key file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the key file {} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error(
        "the key file {} is larger than {MAX_KEY_FILE_BYTES} bytes: not a {}",
        path.display(), kind.noun()
    )]
    TooLarge { path: PathBuf, kind: SecretKind },
    #[error(
        "the key file {} is readable or writable by group or others (mode {mode:04o}); a {} \
         must be private to its owner: chmod 600 {}",
        path.display(), kind.noun(), path.display()
    )]
    Permissions {
        path: PathBuf,
        mode: u32,
        kind: SecretKind,
    },
    #[error(
        "the key file {} holds a verifier key (the public half, NAME+KEY_ID+KEY), not the {}: \
         give the PRIVATE+KEY+... file `{}` wrote",
        path.display(), kind.noun(), kind.keygen()
    )]
    VerifierKey { path: PathBuf, kind: SecretKind },
    #[error(
        "the key file {} is not an eventgate/sumdb note {} ({what}); create one with `{} NAME`",
        path.display(), kind.noun(), kind.keygen()
    )]
    NotASignerKey {
        path: PathBuf,
        what: &'static str,
        kind: SecretKind,
    },
    #[error("the key file {} holds a malformed {}", path.display(), kind.noun())]
    Malformed {
        path: PathBuf,
        kind: SecretKind,
        #[source]
        source: NoteError,
    },
}

/// Generates a key named `name` and writes its signer text and a newline to `path`,
/// a new file of mode 0600 (never an existing one), synced with its directory entry.
pub(crate) fn write_new_key(path: &Path, name: &str) -> Result<Signer, KeyFileError> {
    let signer = Signer::generate(name).map_err(|source| KeyFileError::Generate {
        name: name.to_owned(),
        source,
    })?;
    write_new_secret(path, &signer.to_text())?;
    Ok(signer)
}

/// [`write_new_key`] for a witness's cosigner key.
pub(crate) fn write_new_cosigner(path: &Path, name: &str) -> Result<Cosigner, KeyFileError> {
    let cosigner = Cosigner::generate(name).map_err(|source| KeyFileError::Generate {
        name: name.to_owned(),
        source,
    })?;
    write_new_secret(path, &cosigner.to_text())?;
    Ok(cosigner)
}

/// Writes `secret` and a newline to `path`, a new file of mode 0600 (never an
/// existing one), synced with its directory entry.
fn write_new_secret(path: &Path, secret: &str) -> Result<(), KeyFileError> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => KeyFileError::Exists { path: path.into() },
            _ => KeyFileError::Create {
                path: path.into(),
                source,
            },
        })?;
    let written = (|| {
        // The umask only removes bits; this makes it 0600 even under an odd one that
        // took the owner's.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(format!("{secret}\n").as_bytes())?;
        file.sync_all()?;
        sync_directory(path)
    })();
    if let Err(source) = written {
        // Ours, half written: left behind, it would make every retry fail on "exists".
        let _ = std::fs::remove_file(path);
        return Err(KeyFileError::Write {
            path: path.into(),
            source,
        });
    }
    Ok(())
}

/// The directory entry of a new file survives a crash only once its directory is synced.
fn sync_directory(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// Reads the signer key in `path`: a regular file of at most 1 KiB, private to its
/// owner (no permission bits for group or others), holding one `PRIVATE+KEY+` line.
pub fn load_key(path: &Path) -> Result<Signer, KeyFileError> {
    let kind = SecretKind::Signer;
    let text = read_secret(path, kind)?;
    if text.starts_with("PRIVATE+KEY+") {
        return Signer::from_text(&text).map_err(|source| KeyFileError::Malformed {
            path: path.into(),
            kind,
            source,
        });
    }
    if Verifier::from_text(&text).is_ok() {
        return Err(KeyFileError::VerifierKey {
            path: path.into(),
            kind,
        });
    }
    Err(not_a_key(path, kind, kind_of(&text)))
}

/// [`load_key`] for a witness's cosigner key (`PRIVATE+KEY+NAME+ID+BASE64(0x04 ||
/// seed)`), with the same rules for the file.
pub fn load_cosigner(path: &Path) -> Result<Cosigner, KeyFileError> {
    let kind = SecretKind::Cosigner;
    let text = read_secret(path, kind)?;
    if text.starts_with("PRIVATE+KEY+") {
        return Cosigner::from_text(&text).map_err(|source| KeyFileError::Malformed {
            path: path.into(),
            kind,
            source,
        });
    }
    if WitnessKey::from_text(&text).is_ok() || Verifier::from_text(&text).is_ok() {
        return Err(KeyFileError::VerifierKey {
            path: path.into(),
            kind,
        });
    }
    Err(not_a_key(path, kind, kind_of(&text)))
}

fn not_a_key(path: &Path, kind: SecretKind, what: &'static str) -> KeyFileError {
    KeyFileError::NotASignerKey {
        path: path.into(),
        what,
        kind,
    }
}

/// The text of a secret key file, trimmed, once the file passed the checks every
/// secret's file must: a regular file of at most 1 KiB, private to its owner, UTF-8.
fn read_secret(path: &Path, kind: SecretKind) -> Result<String, KeyFileError> {
    let read = |source| KeyFileError::Read {
        path: path.into(),
        source,
    };
    // Non-blocking, so that a FIFO in the key's place fails below instead of waiting
    // for a writer; reads of a regular file are unaffected.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => KeyFileError::Missing {
                path: path.into(),
                kind,
            },
            _ => read(source),
        })?;
    // The opened file's own metadata: what is checked is what is read.
    let metadata = file.metadata().map_err(read)?;
    if !metadata.is_file() {
        return Err(KeyFileError::NotAFile { path: path.into() });
    }
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Permissions {
            path: path.into(),
            mode,
            kind,
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(KeyFileError::TooLarge {
            path: path.into(),
            kind,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| not_a_key(path, kind, "it is not text"))?;
    Ok(text.trim().to_owned())
}

/// What a file that is not a signer key seems to hold, to say so.
fn kind_of(text: &str) -> &'static str {
    if text.is_empty() {
        "it is empty"
    } else if text.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----") {
        "it is an OpenSSH private key"
    } else if text.starts_with("-----BEGIN") {
        "it is a PEM key or certificate"
    } else if text.starts_with("ssh-") {
        "it is an OpenSSH public key"
    } else {
        "it does not begin with PRIVATE+KEY+"
    }
}
