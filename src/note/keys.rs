//! Ed25519 signer and verifier keys, their text forms (those of Go's
//! `note.GenerateKey`) and the key id that ties a signature line to a key.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{SigningKey, VerifyingKey};
use rand::TryRngCore;
use sha2::{Digest, Sha256};

use super::{NoteError, name_problem};

/// Ed25519's signature type byte: first in both key encodings and hashed into the
/// key id, so the same name and key bytes could never stand for another algorithm.
const ALG_ED25519: u8 = 0x01;

/// What every signer key's text begins with: it cannot be mistaken for (and pasted
/// where one expects) a verifier key.
const SIGNER_PREFIX: &str = "PRIVATE+KEY+";

/// The longest name `generate` takes. The format sets no limit, but the name is on
/// every signature line and in the key file (capped at 1 KiB).
const MAX_NEW_NAME_BYTES: usize = 256;

/// A key that signs notes: the secret. Its `Debug` shows the name and key id only.
pub struct Signer {
    name: String,
    key_id: u32,
    key: SigningKey,
}

/// A key that checks notes' signatures: the public half, safe to share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    name: String,
    key_id: u32,
    key: VerifyingKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .finish_non_exhaustive()
    }
}

/// The key id: the first 4 bytes, big-endian, of SHA-256(name || "\n" || 0x01 ||
/// public key), as the spec recommends and Go computes it.
pub(crate) fn key_id(name: &str, public: &[u8; 32]) -> u32 {
    key_id_of(name, ALG_ED25519, public)
}

/// The key id of a key of signature type `alg` (0x04 for a witness's cosignatures).
pub(crate) fn key_id_of(name: &str, alg: u8, public: &[u8; 32]) -> u32 {
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    hash.update(b"\n");
    hash.update([alg]);
    hash.update(public);
    let digest = hash.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

impl Signer {
    /// A new key named `name` from the system's random source.
    pub fn generate(name: &str) -> Result<Signer, NoteError> {
        check_new_name(name)?;
        let mut seed = [0u8; 32];
        rand::rngs::OsRng
            .try_fill_bytes(&mut seed)
            .map_err(NoteError::Random)?;
        Ok(Self::from_seed(name, &seed))
    }

    /// The key `seed` determines (RFC 8032's 32-byte private key). `name` must be valid.
    pub(crate) fn from_seed(name: &str, seed: &[u8; 32]) -> Signer {
        let key = SigningKey::from_bytes(seed);
        Signer {
            name: name.to_owned(),
            key_id: key_id(name, key.verifying_key().as_bytes()),
            key,
        }
    }

    /// Parses `PRIVATE+KEY+NAME+KEY_ID+BASE64(0x01 || seed)`, surrounding whitespace
    /// ignored. The key id must be the one the derived public key gives.
    pub fn from_text(text: &str) -> Result<Signer, NoteError> {
        let text = text.trim();
        let Some(rest) = text.strip_prefix(SIGNER_PREFIX) else {
            if Verifier::from_text(text).is_ok() {
                return Err(NoteError::VerifierKeyGiven);
            }
            return Err(malformed(
                "signer",
                "it does not begin with PRIVATE+KEY+".into(),
            ));
        };
        let (name, stated, key) = split_key("signer", rest)?;
        let seed: [u8; 32] = key.try_into().map_err(|key: Vec<u8>| {
            malformed(
                "signer",
                format!(
                    "an Ed25519 private key is 32 bytes, this one is {}",
                    key.len()
                ),
            )
        })?;
        let signer = Self::from_seed(name, &seed);
        if signer.key_id != stated {
            return Err(NoteError::KeyIdMismatch {
                kind: "signer",
                name: name.to_owned(),
                stated,
                computed: signer.key_id,
            });
        }
        Ok(signer)
    }

    /// The secret text form, as Go's `note.GenerateKey` writes it.
    pub fn to_text(&self) -> String {
        let mut key = Vec::with_capacity(33);
        key.push(ALG_ED25519);
        key.extend_from_slice(self.key.as_bytes());
        format!(
            "{SIGNER_PREFIX}{}+{:08x}+{}",
            self.name,
            self.key_id,
            STANDARD.encode(&key)
        )
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    pub fn verifier(&self) -> Verifier {
        Verifier {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// The Ed25519 signature of `message` (the note text, final newline included).
    pub(super) fn signature(&self, message: &[u8]) -> [u8; 64] {
        use ed25519_dalek::Signer as _;
        self.key.sign(message).to_bytes()
    }
}

impl Verifier {
    /// Parses `NAME+KEY_ID+BASE64(0x01 || public key)`, surrounding whitespace
    /// ignored. The key id must be the one the name and key give.
    pub fn from_text(text: &str) -> Result<Verifier, NoteError> {
        let text = text.trim();
        if text.starts_with(SIGNER_PREFIX) {
            // Said before anything else, and without quoting it: it is a secret.
            return Err(NoteError::SignerKeyGiven);
        }
        let (name, stated, key) = split_key("verifier", text)?;
        let public: [u8; 32] = key.try_into().map_err(|key: Vec<u8>| {
            malformed(
                "verifier",
                format!(
                    "an Ed25519 public key is 32 bytes, this one is {}",
                    key.len()
                ),
            )
        })?;
        let computed = key_id(name, &public);
        if computed != stated {
            return Err(NoteError::KeyIdMismatch {
                kind: "verifier",
                name: name.to_owned(),
                stated,
                computed,
            });
        }
        let key = VerifyingKey::from_bytes(&public).map_err(NoteError::InvalidPublicKey)?;
        Ok(Verifier {
            name: name.to_owned(),
            key_id: stated,
            key,
        })
    }

    /// The text form, as Go's `note.GenerateKey` writes it.
    pub fn to_text(&self) -> String {
        let mut key = Vec::with_capacity(33);
        key.push(ALG_ED25519);
        key.extend_from_slice(self.key.as_bytes());
        format!(
            "{}+{:08x}+{}",
            self.name,
            self.key_id,
            STANDARD.encode(&key)
        )
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// Whether `signature` is this key's signature of `message`. Strict verification:
    /// a small-order key or signature point, with which one signature can pass for
    /// many messages, is refused; an honest signer never makes one.
    pub(super) fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        let Ok(signature) = ed25519_dalek::Signature::from_slice(signature) else {
            return false;
        };
        self.key.verify_strict(message, &signature).is_ok()
    }
}

/// The rules for a new key's name (a log's or a witness's): those of any key name,
/// and a length that keeps signature lines short.
pub(crate) fn check_new_name(name: &str) -> Result<(), NoteError> {
    check_name(name)?;
    if name.len() > MAX_NEW_NAME_BYTES {
        return Err(NoteError::InvalidName {
            name: name.to_owned(),
            problem: "it is longer than 256 bytes (it goes on every signature line)",
        });
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), NoteError> {
    match name_problem(name) {
        Some(problem) => Err(NoteError::InvalidName {
            name: name.to_owned(),
            problem,
        }),
        None => Ok(()),
    }
}

pub(crate) fn malformed(kind: &'static str, problem: String) -> NoteError {
    NoteError::MalformedKey { kind, problem }
}

/// `NAME+KEY_ID+BASE64(0x01 || key)` split and decoded: the name, the stated key id
/// and the key bytes after the Ed25519 type byte. Split at the first two '+' as Go
/// does: base64 has '+' of its own, a name never does.
fn split_key<'a>(kind: &'static str, text: &'a str) -> Result<(&'a str, u32, Vec<u8>), NoteError> {
    split_key_of(kind, text, ALG_ED25519)
}

/// [`split_key`] for keys of signature type `alg`.
pub(crate) fn split_key_of<'a>(
    kind: &'static str,
    text: &'a str,
    alg: u8,
) -> Result<(&'a str, u32, Vec<u8>), NoteError> {
    let shape = || {
        malformed(
            kind,
            "expected NAME+KEY_ID+KEY: a name, 8 hex digits and base64, joined by '+'".into(),
        )
    };
    let (name, rest) = text.split_once('+').ok_or_else(shape)?;
    let (id, encoded) = rest.split_once('+').ok_or_else(shape)?;
    check_name(name)?;
    if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(malformed(
            kind,
            "the key id (after the name) must be 8 hex digits".into(),
        ));
    }
    let stated = u32::from_str_radix(id, 16).map_err(|_| shape())?;
    // The decoder's message names a position and a byte of the key: not quoted, as
    // for a signer key that byte is part of the secret.
    let decoded = STANDARD.decode(encoded).map_err(|_| {
        malformed(
            kind,
            "the key (after the key id) is not valid base64".into(),
        )
    })?;
    match decoded.split_first() {
        None => Err(malformed(kind, "the key is empty".into())),
        Some((&found, key)) if found == alg => Ok((name, stated, key.to_vec())),
        Some((&algorithm, _)) => Err(NoteError::UnknownAlgorithm {
            kind,
            algorithm,
            expected: alg,
        }),
    }
}
