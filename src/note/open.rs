//! Signing a text into a note, and opening a note: parsing it within fixed bounds and
//! checking the signatures of the keys the caller knows.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{NoteError, Signer, Verifier, name_problem};

/// The largest note `open` reads (and `sign` writes). A checkpoint is a few hundred
/// bytes; the cap only bounds what a hostile file can make `open` scan.
pub(crate) const MAX_NOTE_BYTES: usize = 1 << 20;

/// The most signature lines `open` reads, Go's own limit: each known key's line
/// costs a signature verification.
pub(crate) const MAX_SIGNATURES: usize = 100;

/// What begins every signature line: U+2014 EM DASH and a space.
const SIGNATURE_PREFIX: &str = "\u{2014} ";

/// A note whose signature by one of the given verifiers checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The signed text, its final newline included.
    pub text: String,
    /// The names of the known keys whose signatures verified, in the note's order.
    pub signed_by: Vec<String>,
}

impl Signer {
    /// The whole signed note: `text` (non-empty, ending in a newline, no control
    /// character but newlines, so that the note opens anywhere) and one signature line.
    pub fn sign(&self, text: &str) -> Result<String, NoteError> {
        if !text.ends_with('\n') {
            return Err(NoteError::InvalidText(
                "a note's text must end in a newline".into(),
            ));
        }
        if let Some(at) = control_character(text) {
            return Err(NoteError::InvalidText(format!(
                "control character at byte {at}: a note holds none but newlines"
            )));
        }
        let mut signature = Vec::with_capacity(68);
        signature.extend_from_slice(&self.key_id().to_be_bytes());
        signature.extend_from_slice(&self.signature(text.as_bytes()));
        let note = format!(
            "{text}\n{SIGNATURE_PREFIX}{} {}\n",
            self.name(),
            STANDARD.encode(&signature)
        );
        // What is signed must open: `open` refuses larger notes.
        if note.len() > MAX_NOTE_BYTES {
            return Err(NoteError::InvalidText(format!(
                "the note would be {} bytes, more than the {MAX_NOTE_BYTES} a note may have",
                note.len()
            )));
        }
        Ok(note)
    }
}

/// [`open`] for bytes as read from a file: they must be UTF-8.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn open_bytes(note: &[u8], verifiers: &[Verifier]) -> Result<Opened, NoteError> {
    check_size(note.len())?;
    let note = std::str::from_utf8(note).map_err(|e| {
        NoteError::Malformed(format!("not valid UTF-8 (at byte {})", e.valid_up_to()))
    })?;
    open(note, verifiers)
}

/// Opens a signed note: parses it (refusing notes over `MAX_NOTE_BYTES` or with
/// more than `MAX_SIGNATURES` signature lines), checks every signature line of a
/// known key (name and key id both match one of `verifiers`) and ignores the lines of
/// unknown keys, as the spec and Go do. Fails with [`NoteError::UnknownKey`] when no
/// known key signed it, [`NoteError::BadSignature`] when a known key's signature does
/// not verify, [`NoteError::Malformed`] when it is not a signed note.
pub fn open(note: &str, verifiers: &[Verifier]) -> Result<Opened, NoteError> {
    let (text, lines) = split(note)?;
    let mut signed_by: Vec<String> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    for line in lines {
        let SignatureLine {
            name,
            key_id,
            signature,
            ..
        } = line;
        let mut known = verifiers
            .iter()
            .filter(|v| v.name() == name && v.key_id() == key_id);
        let Some(verifier) = known.next() else {
            // Another key's signature (a witness's, a rotated key's): not ours to judge.
            let signer = format!("{name}+{key_id:08x}");
            if !unknown.contains(&signer) {
                unknown.push(signer);
            }
            continue;
        };
        if known.next().is_some() {
            return Err(NoteError::AmbiguousKey {
                name: name.to_owned(),
                key_id,
            });
        }
        // Every line of a known key is checked, repeats too (Go checks only the
        // first): a second, bad signature by the key means the note was tampered with.
        if !verifier.verifies(text.as_bytes(), &signature) {
            return Err(NoteError::BadSignature {
                name: name.to_owned(),
            });
        }
        if !signed_by.iter().any(|n| n == name) {
            signed_by.push(name.to_owned());
        }
    }
    if signed_by.is_empty() {
        return Err(NoteError::UnknownKey { signers: unknown });
    }
    Ok(Opened {
        text: text.to_owned(),
        signed_by,
    })
}

/// One signature line of a note, decoded but not checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignatureLine<'a> {
    pub name: &'a str,
    pub key_id: u32,
    /// What follows the key id: the signature (and for a cosignature its timestamp).
    pub signature: Vec<u8>,
    /// The whole line, without its newline.
    pub line: &'a str,
}

/// Parses a signed note within the same bounds as [`open`] (size, signature line
/// count, no control character) into its text (final newline included) and its
/// signature lines, checking none of them.
pub(crate) fn split(note: &str) -> Result<(&str, Vec<SignatureLine<'_>>), NoteError> {
    check_size(note.len())?;
    if let Some(at) = control_character(note) {
        return Err(NoteError::Malformed(format!(
            "control character at byte {at}: a note holds none but newlines"
        )));
    }
    // The text may hold blank lines itself: the last one is the separator.
    let Some(split) = note.rfind("\n\n") else {
        return Err(NoteError::Malformed(
            "no blank line between the text and the signatures".into(),
        ));
    };
    let (text, lines) = (&note[..=split], &note[split + 2..]);
    let Some(lines) = lines.strip_suffix('\n') else {
        return Err(match lines.is_empty() {
            true => NoteError::Malformed("no signature line after the blank line".into()),
            false => NoteError::Malformed(
                "the last signature line does not end in a newline (a truncated note?)".into(),
            ),
        });
    };
    // Counted before any is decoded or verified, so the work stays bounded.
    let count = lines.split('\n').count();
    if count > MAX_SIGNATURES {
        return Err(NoteError::Malformed(format!(
            "{count} signature lines, more than the {MAX_SIGNATURES} accepted"
        )));
    }
    let mut parsed = Vec::with_capacity(count);
    for (number, whole) in (1..).zip(lines.split('\n')) {
        let bad =
            |problem: &str| NoteError::Malformed(format!("signature line {number} {problem}"));
        let line = whole
            .strip_prefix(SIGNATURE_PREFIX)
            .ok_or_else(|| bad("does not begin with an em dash (U+2014) and a space"))?;
        let (name, encoded) = line
            .split_once(' ')
            .ok_or_else(|| bad("has no space between the key name and the signature"))?;
        if let Some(problem) = name_problem(name) {
            return Err(bad(&format!("has an invalid key name: {problem}")));
        }
        if encoded.is_empty() {
            return Err(bad("has no signature after the key name"));
        }
        let signature = STANDARD
            .decode(encoded)
            .map_err(|e| bad(&format!("has a signature that is not base64: {e}")))?;
        // The key id and at least one byte of signature, as Go requires.
        if signature.len() < 5 {
            return Err(bad("has a signature shorter than a key id and a signature"));
        }
        let (id, signature) = signature.split_at(4);
        parsed.push(SignatureLine {
            name,
            key_id: u32::from_be_bytes([id[0], id[1], id[2], id[3]]),
            signature: signature.to_vec(),
            line: whole,
        });
    }
    Ok((text, parsed))
}

fn check_size(len: usize) -> Result<(), NoteError> {
    match len > MAX_NOTE_BYTES {
        true => Err(NoteError::Malformed(format!(
            "{len} bytes, more than the {MAX_NOTE_BYTES} a note may have"
        ))),
        false => Ok(()),
    }
}

/// The byte offset of the first ASCII control character other than newline: the
/// spec allows none in a note.
fn control_character(text: &str) -> Option<usize> {
    text.bytes().position(|b| b < 0x20 && b != b'\n')
}
