//! The C2SP tlog-witness wire format (<https://c2sp.org/tlog-witness>), apart from
//! any I/O: the `add-checkpoint` request as a witness parses it and a log writes it,
//! the witness's judgement of a request against the tree head it recorded, and the
//! answers as a log reads them.
//!
//! A request body is `old SIZE`, up to 63 consistency proof hashes in base64, one
//! per line, an empty line, and the signed checkpoint note:
//!
//! ```text
//! old 20852014
//! PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=
//! jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=
//!
//! web-1/eventgate/5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60
//! 20852163
//! CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=
//!
//! — web-1/eventgate/5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60 Az3grlgtzPICa5OS8npV...
//! ```

use thiserror::Error;

use crate::tlog::proof::check_tree;
use crate::tlog::tree_head::{TreeHead, encode_hash, parse_hash, parse_size};
use crate::tlog::{Hash, empty_root};

/// The largest request body a witness reads. A request is a size line, at most 63
/// hashes of 45 bytes and a checkpoint of a few hundred bytes with its signatures:
/// 64 KiB leaves room for long extension lines and many signatures, and bounds
/// what each connection can make the witness hold.
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;

/// The most consistency proof lines a request may carry (the spec's limit: a proof
/// between two trees of at most 2^63 leaves has fewer).
pub(crate) const MAX_PROOF_LINES: usize = 63;

/// The content type of a 409 answer, whose body is the witness's recorded size.
pub(crate) const SIZE_CONTENT_TYPE: &str = "text/x.tlog.size";

/// The most cosignature lines a log reads from one answer: a witness has a key or
/// two; more is not an answer to read.
pub(crate) const MAX_COSIGNATURE_LINES: usize = 16;

/// The largest tree size accepted, old or new: sizes are kept as SQLite integers.
const MAX_SIZE: u64 = i64::MAX as u64;

/// What begins every signature line: U+2014 EM DASH and a space.
const SIGNATURE_PREFIX: &str = "\u{2014} ";

/// An `add-checkpoint` request, parsed and well-formed, not yet judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AddCheckpoint {
    /// The size the log believes the witness recorded last (0: none).
    pub old: u64,
    /// The consistency proof from `old` to the checkpoint's size.
    pub proof: Vec<Hash>,
    /// The signed checkpoint note, as sent.
    pub note: String,
    /// The note's text (final newline included): what is cosigned.
    pub text: String,
    pub head: TreeHead,
}

/// Why a request body is not an `add-checkpoint` request (400 Bad Request).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{0}")]
pub(crate) struct Malformed(pub String);

fn malformed(problem: impl Into<String>) -> Malformed {
    Malformed(problem.into())
}

/// Parses a request body. Every way it can be wrong is a [`Malformed`] naming the
/// line; nothing here looks at keys or at what was recorded.
pub(crate) fn parse_request(body: &[u8]) -> Result<AddCheckpoint, Malformed> {
    if body.len() > MAX_BODY_BYTES {
        return Err(malformed(format!(
            "the body is {} bytes, more than the {MAX_BODY_BYTES} a request may have",
            body.len()
        )));
    }
    let body = std::str::from_utf8(body).map_err(|e| {
        malformed(format!(
            "the body is not UTF-8 text (invalid byte at {})",
            e.valid_up_to()
        ))
    })?;
    // The first empty line ends the proof: a hash line is never empty, and the
    // checkpoint may hold blank lines of its own (before its signatures).
    let Some(end) = body.find("\n\n") else {
        return Err(malformed(
            "no empty line after the old size and proof lines: the body is `old SIZE`, the \
             consistency proof hashes one per line, an empty line, then the signed checkpoint",
        ));
    };
    let (head_lines, note) = (&body[..end], &body[end + 2..]);
    let mut lines = head_lines.split('\n');
    let first = lines.next().unwrap_or_default();
    let Some(old) = first.strip_prefix("old ") else {
        return Err(malformed(format!(
            "line 1 must be `old SIZE` (the size the witness recorded last, 0 for none), not {:?}",
            short(first)
        )));
    };
    let old = parse_size(old).map_err(|e| malformed(format!("line 1, the old size: {e}")))?;
    if old > MAX_SIZE {
        return Err(malformed(format!(
            "line 1, the old size: {old} is more than the largest tree size, 2^63-1"
        )));
    }
    // Counted before any is decoded: the work stays bounded by the limit.
    let count = head_lines.split('\n').count() - 1;
    if count > MAX_PROOF_LINES {
        return Err(malformed(format!(
            "{count} consistency proof lines, more than the {MAX_PROOF_LINES} a request may have"
        )));
    }
    let mut proof = Vec::with_capacity(count);
    for (number, line) in (2..).zip(lines) {
        let hash = parse_hash(line)
            .map_err(|e| malformed(format!("line {number}, a consistency proof hash: {e}")))?;
        proof.push(hash);
    }
    if old == 0 && !proof.is_empty() {
        return Err(malformed(format!(
            "old size 0 with {} proof lines: the proof from the empty tree is empty",
            proof.len()
        )));
    }
    let (text, _) = crate::note::split(note)
        .map_err(|e| malformed(format!("the checkpoint is not a signed note: {e}")))?;
    let head = TreeHead::parse(text)
        .map_err(|e| malformed(format!("the checkpoint's text is not a tree head: {e}")))?;
    if head.size > MAX_SIZE {
        return Err(malformed(format!(
            "the checkpoint's size {} is more than the largest tree size, 2^63-1",
            head.size
        )));
    }
    Ok(AddCheckpoint {
        old,
        proof,
        note: note.to_owned(),
        text: text.to_owned(),
        head,
    })
}

/// The request body a log sends: the inverse of [`parse_request`].
pub(crate) fn request_body(old: u64, proof: &[Hash], note: &str) -> String {
    let mut body = format!("old {old}\n");
    for hash in proof {
        body.push_str(&encode_hash(hash));
        body.push('\n');
    }
    body.push('\n');
    body.push_str(note);
    body
}

/// Why a witness does not cosign, each with the status code the spec gives it.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 400: not a request, or an old size past the checkpoint's.
    #[error("{0}")]
    BadRequest(String),
    /// 404: no `[[log]]` has this origin.
    #[error("unknown origin {0:?}: this witness has no [[log]] with that origin")]
    UnknownOrigin(String),
    /// 403: none of the origin's keys signed the checkpoint, or one's signature
    /// does not verify.
    #[error("{0}")]
    Unauthorized(String),
    /// 409: `old` is not the size recorded, or the sizes are equal and the roots
    /// are not (`fork`). The answer's body is the recorded size.
    #[error("{reason}")]
    Conflict {
        recorded: u64,
        reason: String,
        fork: bool,
    },
    /// 422: the consistency proof from the recorded tree head does not verify.
    #[error("{0}")]
    Inconsistent(String),
}

impl Refusal {
    pub(crate) fn status(&self) -> u16 {
        match self {
            Refusal::BadRequest(_) => 400,
            Refusal::Unauthorized(_) => 403,
            Refusal::UnknownOrigin(_) => 404,
            Refusal::Conflict { .. } => 409,
            Refusal::Inconsistent(_) => 422,
        }
    }

    /// Whether the refused checkpoint, signed by the log, contradicts the head the
    /// witness recorded: evidence that the log showed two histories.
    pub(crate) fn is_fork(&self) -> bool {
        match self {
            Refusal::Inconsistent(_) => true,
            Refusal::Conflict { fork, .. } => *fork,
            _ => false,
        }
    }
}

/// Judges a request whose signature verified against the tree head recorded for
/// its origin (`None`: none yet, as if size 0). `Ok`: cosign it and record it.
/// Follows the spec's order: the old size against the new, then against the
/// recorded, then the roots or the proof.
pub(crate) fn judge(
    recorded: Option<(u64, &Hash)>,
    request: &AddCheckpoint,
) -> Result<(), Refusal> {
    let (old, size, root) = (request.old, request.head.size, &request.head.root);
    if old > size {
        return Err(Refusal::BadRequest(format!(
            "the old size {old} is larger than the checkpoint's size {size}"
        )));
    }
    if size == 0 && *root != empty_root() {
        return Err(Refusal::Inconsistent(
            "a tree of 0 leaves has the root SHA-256(\"\"), and this checkpoint's is another"
                .to_owned(),
        ));
    }
    let known = recorded.map_or(0, |(size, _)| size);
    if old != known {
        return Err(Refusal::Conflict {
            recorded: known,
            reason: format!(
                "the old size is {old}, but the latest checkpoint cosigned for this origin has \
                 size {known}"
            ),
            fork: false,
        });
    }
    let Some((_, known_root)) = recorded else {
        // Nothing recorded: every tree extends the empty one.
        return Ok(());
    };
    if old == size {
        if root != known_root {
            return Err(Refusal::Conflict {
                recorded: known,
                reason: format!(
                    "a different root for the recorded size {size}: {} was cosigned, this \
                     checkpoint has {}",
                    encode_hash(known_root),
                    encode_hash(root)
                ),
                fork: true,
            });
        }
        if !request.proof.is_empty() {
            return Err(Refusal::Inconsistent(format!(
                "the old and new sizes are both {size}, and the proof between them is empty, not \
                 {} hashes",
                request.proof.len()
            )));
        }
        return Ok(());
    }
    if old == 0 {
        return Ok(());
    }
    check_tree(&request.proof, size, root, old, known_root).map_err(|e| {
        Refusal::Inconsistent(format!(
            "the consistency proof from the cosigned tree of {old} leaves to this one of {size} \
             does not verify ({e}): the checkpoint does not extend the tree this witness recorded"
        ))
    })
}

/// A 409 answer's body, `SIZE\n`, as a log reads it.
pub(crate) fn parse_size_body(body: &[u8]) -> Result<u64, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the body is not text".to_owned())?;
    let Some(size) = text.strip_suffix('\n') else {
        return Err(format!(
            "the body {:?} is not a size and a newline",
            short(text)
        ));
    };
    parse_size(size)
}

/// A 200 answer's body as a log reads it: one or more signature lines, each
/// ending in a newline; returned without their newlines.
pub(crate) fn parse_cosignatures(body: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the body is not text".to_owned())?;
    let Some(lines) = text.strip_suffix('\n') else {
        return Err(match text.is_empty() {
            true => "the body is empty: no cosignature".to_owned(),
            false => "the last line does not end in a newline".to_owned(),
        });
    };
    let count = lines.split('\n').count();
    if count > MAX_COSIGNATURE_LINES {
        return Err(format!(
            "{count} lines, more than the {MAX_COSIGNATURE_LINES} cosignatures read from a witness"
        ));
    }
    lines
        .split('\n')
        .enumerate()
        .map(|(i, line)| {
            let valid = line
                .strip_prefix(SIGNATURE_PREFIX)
                .and_then(|rest| rest.split_once(' '))
                .is_some_and(|(name, signature)| !name.is_empty() && !signature.is_empty())
                && !line.bytes().any(|b| b < 0x20);
            match valid {
                true => Ok(line.to_owned()),
                false => Err(format!(
                    "line {} is not a signature line (`\u{2014} NAME SIGNATURE`): {:?}",
                    i + 1,
                    short(line)
                )),
            }
        })
        .collect()
}

/// At most 80 characters of what is quoted back in an error.
fn short(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
