//! Signed notes: checkpoints of the audit store's chain head signed with Ed25519 in
//! the C2SP signed-note format (<https://c2sp.org/signed-note>), the format of Go's
//! `golang.org/x/mod/sumdb/note`, so that anyone holding the verifier key can check
//! them with eventgate or with tools of other authors.
//!
//! A signed note is a text ending in a newline, a blank line, and signature lines
//! `— NAME BASE64(key id, 4 bytes big-endian || 64-byte Ed25519 signature)`, the dash
//! being U+2014 EM DASH followed by a space. The signature covers the text with its
//! final newline, not the blank line. The key id is the first 4 bytes of
//! `SHA-256(NAME || "\n" || 0x01 || public key)`, 0x01 being Ed25519's signature type.
//!
//! Keys are text too: the verifier key `NAME+KEY_ID+BASE64(0x01 || public key)`, which
//! may be shared, and the signer key `PRIVATE+KEY+NAME+KEY_ID+BASE64(0x01 || seed)`,
//! which must stay secret (its file is mode 0600, see [`keyfile`](write_new_key)).
//! Both are exactly what Go's `note.GenerateKey` writes, so keys move either way.
//!
//! - `keys`: [`Signer`] and [`Verifier`], their text forms and the key id;
//! - `open`: signing a text and opening (parsing and verifying) a signed note, with
//!   the bounds that keep hostile input cheap;
//! - `keyfile`: the signer key's file, and a witness's cosigner key's (created 0600,
//!   never overwritten; refused when others can read it);
//! - `settings`: the `[signing]` table.

mod keyfile;
mod keys;
mod open;
mod settings;

pub(crate) use keyfile::{KeyFileError, write_new_cosigner, write_new_key};
pub use keyfile::{load_cosigner, load_key};
pub use keys::{Signer, Verifier};
pub(crate) use keys::{check_new_name, key_id_of, malformed, split_key_of};
pub use open::open;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use open::open_bytes;
pub(crate) use open::{MAX_NOTE_BYTES, SignatureLine, split};
pub use settings::SigningSettings;

/// Everything keys, signing and opening notes can fail with. Messages never quote a
/// signer key's text: it is the secret.
#[derive(Debug, thiserror::Error)]
pub enum NoteError {
    #[error("invalid key name {name:?}: {problem}")]
    InvalidName { name: String, problem: &'static str },
    /// `kind` is "signer" or "verifier".
    #[error("malformed {kind} key: {problem}")]
    MalformedKey { kind: &'static str, problem: String },
    #[error(
        "the {kind} key is of signature type {algorithm:#04x}, and {expected:#04x} is needed here \
         (0x01: Ed25519 signed notes, `eventgate audit keygen`; 0x04: Ed25519 witness \
         cosignatures, `eventgate witness keygen`)"
    )]
    UnknownAlgorithm {
        kind: &'static str,
        algorithm: u8,
        expected: u8,
    },
    #[error(
        "the {kind} key for {name:?} gives key id {stated:08x}, but its name and key hash to {computed:08x}"
    )]
    KeyIdMismatch {
        kind: &'static str,
        name: String,
        stated: u32,
        computed: u32,
    },
    #[error("the verifier key's public key is not a valid Ed25519 public key")]
    InvalidPublicKey(#[source] ed25519_dalek::SignatureError),
    #[error(
        "this is a signer key (PRIVATE+KEY+..., the secret), not a verifier key: give the verifier \
         key (NAME+KEY_ID+KEY) that `eventgate audit keygen` printed"
    )]
    SignerKeyGiven,
    #[error(
        "this is a verifier key (NAME+KEY_ID+KEY, the public half), not a signer key: a signer \
         key begins with PRIVATE+KEY+"
    )]
    VerifierKeyGiven,
    #[error("cannot generate a key: the system's random source failed")]
    Random(#[source] rand::rand_core::OsError),
    #[error("cannot sign this text: {0}")]
    InvalidText(String),
    #[error("malformed note: {0}")]
    Malformed(String),
    #[error("{}", unknown_key(signers))]
    UnknownKey {
        /// `NAME+KEY_ID` of each signature line, none of them a known key.
        signers: Vec<String>,
    },
    #[error(
        "the signature by {name} does not verify: the note was changed after it was signed, or \
         it was signed by another key of that name"
    )]
    BadSignature { name: String },
    #[error(
        "two verifier keys have the name {name:?} and key id {key_id:08x}: cannot tell which one \
         signed the note"
    )]
    AmbiguousKey { name: String, key_id: u32 },
}

fn unknown_key(signers: &[String]) -> String {
    match signers {
        [] => "no known key signed the note".to_owned(),
        _ => format!(
            "no known key signed the note (it is signed by {}; compare with the verifier keys given)",
            signers.join(", ")
        ),
    }
}

/// Why `name` cannot name a key, `None` when it can. The spec's rule (non-empty, no
/// Unicode space, no '+') plus no control character: a note may hold none, so a key
/// with one could sign nothing that opens.
fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.contains('+') {
        Some("it contains '+', which separates the parts of a key")
    } else if name.chars().any(char::is_whitespace) {
        Some("it contains whitespace")
    } else if name.chars().any(char::is_control) {
        Some("it contains a control character")
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
