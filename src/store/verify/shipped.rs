//! The signed checkpoints given to `audit verify --checkpoints`, as they were shipped
//! off the host: read from signed notes as text or from JSON lines, and each opened
//! with the verifier keys given. Nothing here reads the store.
//!
//! The input's first non-blank line decides its format:
//!
//! - **JSON lines** when it begins with `{`: one JSON object per line. A line is a
//!   checkpoint when its `topic` is `/eventgate/audit/checkpoint`; its note is the
//!   string at `event.note`. That is the file forwarder's line, `eventgate query
//!   --format json`'s, and the Kafka forwarder's `json` value, which a console
//!   consumer prints as it is. Otherwise an object with a `value` (or `payload`) is
//!   a Kafka consumer's record (its own `topic`, if any, is the Kafka topic's): that
//!   field holds the same object, as JSON text (`kcat -J`), as base64 of it
//!   (`tests/support/consume.py`) or as an object. Every other line (other events, a
//!   torn last line) is skipped and counted.
//! - **Signed notes** otherwise: each note is its text, one blank line and its
//!   signature lines (`— NAME SIGNATURE`, the dash being U+2014), as
//!   c2sp.org/signed-note has it. A note ends with its last signature line: the first
//!   line after a signature line that is not one begins the next note, and blank
//!   lines before a note are skipped. Within a note every line is kept (the last
//!   blank line before the signatures separates them); a CR before a line's end is
//!   dropped, as a copy through another system may add one and a signed text never
//!   holds one.
//!
//! Memory is proportional to the checkpoints found (a few hundred bytes each), not
//! to the input; the input is bounded by [`MAX_INPUT_BYTES`] and [`MAX_NOTES`].

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Read};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use thiserror::Error;

use super::checkpoints::CheckpointsError;
use crate::note::{NoteError, Verifier, open};
use crate::store::chain::Hash;
use crate::store::checkpoint::{Checkpoint, CheckpointError, TOPIC, note_hash};

/// The largest input read: years of checkpoints, signed every minute, are a tenth of
/// it; a whole event log may not be, and the message says how to give the
/// checkpoints alone.
pub(crate) const MAX_INPUT_BYTES: u64 = 256 << 20;

/// The most notes read (duplicates included): each costs a signature check.
pub(crate) const MAX_NOTES: u64 = 1_000_000;

/// The most of one line kept: a checkpoint's line is well under it (a note is at most
/// 1 MiB), and longer lines (an event log's large events) are skipped unread.
const MAX_LINE_BYTES: usize = 8 << 20;

/// What begins a signature line: U+2014 EM DASH and a space (c2sp.org/signed-note).
const SIGNATURE_PREFIX: &[u8] = "\u{2014} ".as_bytes();

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Notes,
    JsonLines,
}

pub(crate) use super::signed::Signed;

/// Why a note found in the input cannot be used.
#[derive(Debug, Error)]
pub enum RejectedNote {
    #[error(transparent)]
    Note(#[from] NoteError),
    #[error("it is signed by {signer}, but its text is not an eventgate checkpoint")]
    NotACheckpoint {
        signer: String,
        #[source]
        source: CheckpointError,
    },
    #[error("the line's topic is {TOPIC}, but it has no note at event.note")]
    NoNote,
    #[error("it is not valid UTF-8 (line {line})")]
    NotUtf8 { line: u64 },
    #[error("line {line} is longer than {} MiB, which no note is", MAX_LINE_BYTES >> 20)]
    TooLong { line: u64 },
}

/// A note that did not open, and what its text claims (not to be trusted: for
/// naming it only).
#[derive(Debug)]
pub(crate) struct Rejected {
    pub line: u64,
    pub claim: Option<Checkpoint>,
    pub reason: RejectedNote,
}

/// Everything read from the input.
#[derive(Debug)]
pub(crate) struct Shipped {
    /// The input's name in messages: its path, or `stdin`.
    pub input: String,
    pub format: Format,
    /// `NAME+KEY_ID` of each key given.
    pub keys: Vec<String>,
    /// Notes found, duplicates included.
    pub notes: u64,
    /// Notes found again (the same bytes): checked once.
    pub duplicates: u64,
    /// JSON lines that are not checkpoints.
    pub other_lines: u64,
    /// One per distinct note, in input order.
    pub checkpoints: Vec<Signed>,
    /// Signers (`NAME+KEY_ID`) of notes no given key signed, and their note counts.
    pub unknown: BTreeMap<String, u64>,
    pub unknown_notes: u64,
    /// The first note whose signature by a given key does not verify, and how many.
    pub forged: Option<Rejected>,
    pub forged_notes: u64,
    /// The first note that could not be read otherwise, and how many.
    pub malformed: Option<Rejected>,
    pub malformed_notes: u64,
    /// The first note signed by a key that bears a given key's name but is another
    /// key (`NAME+KEY_ID` and its line), and how many: the signing key was replaced.
    pub impostor: Option<(u64, String)>,
    pub impostor_notes: u64,
    seen: HashSet<Hash>,
}

impl Shipped {
    /// `line N of INPUT`.
    pub(crate) fn at(&self, line: u64) -> String {
        format!("line {line} of {}", self.input)
    }

    /// Takes one note found at `line`: opens it unless the same bytes came before.
    fn add(
        &mut self,
        line: u64,
        note: Result<String, RejectedNote>,
        keys: &[Verifier],
    ) -> Result<(), CheckpointsError> {
        self.notes += 1;
        if self.notes > MAX_NOTES {
            return Err(CheckpointsError::TooManyNotes {
                input: self.input.clone(),
            });
        }
        let note = match note {
            Ok(note) => note,
            Err(reason) => {
                self.reject(line, None, reason);
                return Ok(());
            }
        };
        let hash = note_hash(&note);
        if !self.seen.insert(hash) {
            self.duplicates += 1;
            return Ok(());
        }
        match open(&note, keys) {
            Ok(opened) => match Checkpoint::parse(&opened.text) {
                Ok(checkpoint) => self.checkpoints.push(Signed {
                    line,
                    checkpoint,
                    note_hash: hash,
                    signed_by: opened.signed_by,
                    note,
                }),
                Err(source) => self.reject(
                    line,
                    None,
                    RejectedNote::NotACheckpoint {
                        signer: opened.signed_by.join(", "),
                        source,
                    },
                ),
            },
            Err(NoteError::UnknownKey { signers }) => {
                self.unknown_notes += 1;
                let given = |signer: &str| {
                    signer
                        .rsplit_once('+')
                        .is_some_and(|(name, _)| keys.iter().any(|k| k.name() == name))
                };
                if let Some(signer) = signers.iter().find(|s| given(s)) {
                    self.impostor_notes += 1;
                    if self.impostor.is_none() {
                        self.impostor = Some((line, signer.clone()));
                    }
                }
                for signer in signers {
                    *self.unknown.entry(signer).or_default() += 1;
                }
            }
            Err(error) => self.reject(line, claim(&note), error.into()),
        }
        Ok(())
    }

    fn reject(&mut self, line: u64, claim: Option<Checkpoint>, reason: RejectedNote) {
        let forged = matches!(reason, RejectedNote::Note(NoteError::BadSignature { .. }));
        let (first, count) = match forged {
            true => (&mut self.forged, &mut self.forged_notes),
            false => (&mut self.malformed, &mut self.malformed_notes),
        };
        *count += 1;
        if first.is_none() {
            *first = Some(Rejected {
                line,
                claim,
                reason,
            });
        }
    }
}

/// What a note's text says it is, read without its signature: to name a note that
/// did not verify.
fn claim(note: &str) -> Option<Checkpoint> {
    let split = note.rfind("\n\n")?;
    Checkpoint::parse(&note[..=split]).ok()
}

/// Reads every note of `input` (named `name` in messages) and opens each with `keys`.
/// Blocking.
pub(crate) fn read(
    input: impl Read,
    name: &str,
    keys: &[Verifier],
) -> Result<Shipped, CheckpointsError> {
    read_at_most(input, name, keys, MAX_INPUT_BYTES)
}

/// [`read`], refusing an input over `max_bytes`.
pub(super) fn read_at_most(
    input: impl Read,
    name: &str,
    keys: &[Verifier],
    max_bytes: u64,
) -> Result<Shipped, CheckpointsError> {
    let mut shipped = Shipped {
        input: name.to_owned(),
        format: Format::Notes,
        keys: keys
            .iter()
            .map(|k| format!("{}+{:08x}", k.name(), k.key_id()))
            .collect(),
        notes: 0,
        duplicates: 0,
        other_lines: 0,
        checkpoints: Vec::new(),
        unknown: BTreeMap::new(),
        unknown_notes: 0,
        forged: None,
        forged_notes: 0,
        malformed: None,
        malformed_notes: 0,
        impostor: None,
        impostor_notes: 0,
        seen: HashSet::new(),
    };
    // One byte past the limit tells a larger input from one exactly at it.
    let mut reader = BufReader::new(input.take(max_bytes.saturating_add(1)));
    let mut format = None;
    let mut pending = Pending::default();
    let mut buffer = Vec::new();
    let mut total = 0u64;
    let mut number = 0u64;
    loop {
        let (read, long) =
            next_line(&mut reader, &mut buffer).map_err(|source| CheckpointsError::Read {
                input: name.to_owned(),
                source,
            })?;
        if read == 0 {
            break;
        }
        total += read;
        if total > max_bytes {
            return Err(CheckpointsError::TooLarge {
                input: name.to_owned(),
                max_bytes,
            });
        }
        number += 1;
        let line = buffer.strip_suffix(b"\r").unwrap_or(&buffer);
        // A byte order mark, as some editors write, is not content: not part of the
        // first note's text nor of the first JSON line.
        let line = match number {
            1 => line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line),
            _ => line,
        };
        let format = match format {
            Some(format) => format,
            None => {
                let start = line.trim_ascii_start();
                if start.is_empty() && !long {
                    continue;
                }
                *format.insert(match start.first() {
                    Some(b'{') => Format::JsonLines,
                    _ => Format::Notes,
                })
            }
        };
        shipped.format = format;
        match format {
            Format::JsonLines => match (!long).then(|| json_note(line)).flatten() {
                Some(note) => shipped.add(number, note, keys)?,
                None if line.trim_ascii().is_empty() => {}
                None => shipped.other_lines += 1,
            },
            Format::Notes => {
                if let Some((start, note)) = pending.line(number, line, long) {
                    shipped.add(start, note, keys)?;
                }
            }
        }
    }
    if let Some((start, note)) = pending.finish() {
        shipped.add(start, note, keys)?;
    }
    Ok(shipped)
}

/// Reads one line into `line` without its newline, keeping at most
/// [`MAX_LINE_BYTES`] of it. Returns the bytes it took from `reader` (0 at the end)
/// and whether the line was longer than what was kept.
fn next_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<(u64, bool)> {
    line.clear();
    let (mut taken, mut long) = (0u64, false);
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok((taken, long));
        }
        let end = available.iter().position(|b| *b == b'\n');
        let chunk = &available[..end.unwrap_or(available.len())];
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        long |= chunk.len() > room;
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = end.map_or(available.len(), |end| end + 1);
        reader.consume(used);
        taken += used as u64;
        if end.is_some() {
            return Ok((taken, long));
        }
    }
}

/// The note of one JSON line, `None` when the line is not a checkpoint.
fn json_note(line: &[u8]) -> Option<Result<String, RejectedNote>> {
    if !line.trim_ascii_start().starts_with(b"{") {
        return None;
    }
    let object = record(serde_json::from_slice(line).ok()?)?;
    if object.get("topic").and_then(Value::as_str) != Some(TOPIC) {
        return None;
    }
    let note = object
        .get("event")
        .and_then(|e| e.get("note"))
        .and_then(Value::as_str);
    Some(note.map(str::to_owned).ok_or(RejectedNote::NoNote))
}

/// The event object of a line: the line itself, or a consumer record's value (whose
/// own `topic`, if it has one, is the Kafka topic's name).
fn record(value: Value) -> Option<serde_json::Map<String, Value>> {
    let Value::Object(mut object) = value else {
        return None;
    };
    if object.get("topic").and_then(Value::as_str) == Some(TOPIC) {
        return Some(object);
    }
    let inner = object
        .remove("value")
        .or_else(|| object.remove("payload"))?;
    let inner = match inner {
        Value::Object(inner) => Value::Object(inner),
        Value::String(text) => serde_json::from_str(&text).ok().or_else(|| {
            let bytes = STANDARD.decode(text.trim()).ok()?;
            serde_json::from_slice(&bytes).ok()
        })?,
        _ => return None,
    };
    match inner {
        Value::Object(inner) => Some(inner),
        _ => None,
    }
}

/// The note being read from text input.
#[derive(Default)]
struct Pending {
    started: bool,
    start: u64,
    text: String,
    /// A signature line was read: the next other line begins another note.
    signatures: bool,
    /// Why the note cannot be a note, found while reading its lines.
    unreadable: Option<RejectedNote>,
}

impl Pending {
    /// Takes line `number` (`long`: cut at [`MAX_LINE_BYTES`]); returns a note it
    /// completed (where it began, and it).
    fn line(
        &mut self,
        number: u64,
        line: &[u8],
        long: bool,
    ) -> Option<(u64, Result<String, RejectedNote>)> {
        let signature = line.starts_with(SIGNATURE_PREFIX);
        let done = match self.signatures && !signature {
            true => self.finish(),
            false => None,
        };
        if !self.started && line.is_empty() && !long {
            return done;
        }
        if !self.started {
            self.started = true;
            self.start = number;
        }
        if long && self.unreadable.is_none() {
            self.unreadable = Some(RejectedNote::TooLong { line: number });
        }
        match std::str::from_utf8(line) {
            Ok(line) if self.unreadable.is_none() => self.text.push_str(line),
            Ok(_) => {}
            Err(_) => {
                if self.unreadable.is_none() {
                    self.unreadable = Some(RejectedNote::NotUtf8 { line: number });
                }
            }
        }
        if self.unreadable.is_none() {
            self.text.push('\n');
            // Bounded like the note itself: what is longer cannot open.
            if self.text.len() > crate::note::MAX_NOTE_BYTES {
                self.unreadable = Some(RejectedNote::Note(NoteError::Malformed(format!(
                    "more than the {} bytes a note may have",
                    crate::note::MAX_NOTE_BYTES
                ))));
                self.text = String::new();
            }
        }
        self.signatures |= signature;
        done
    }

    fn finish(&mut self) -> Option<(u64, Result<String, RejectedNote>)> {
        let pending = std::mem::take(self);
        if !pending.started {
            return None;
        }
        let note = match pending.unreadable {
            Some(reason) => Err(reason),
            None => Ok(pending.text),
        };
        Some((pending.start, note))
    }
}
