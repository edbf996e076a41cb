//! Proofs as files a user can hand over: everything needed to check them but the
//! verifier keys, in text.
//!
//! ```text
//! eventgate inclusion proof v1
//! index 183466
//! record AAAAAAAAAAAAAAAALA...
//! n9qbO7NRgk0G2b1n6U9dVVn6Hk0n0p4nVSoc8ih5w4M=      (the audit path, leaf first)
//! ...
//!                                                  (a blank line)
//! <the signed tree head note>
//! ```
//!
//! ```text
//! eventgate consistency proof v1
//! <the consistency proof's hashes, one per line>
//!
//! <the older signed tree head note>
//! <the newer signed tree head note>
//! ```
//!
//! The record is the leaf's data (for an audit store, the row's hashed column bytes),
//! so the checker recomputes the leaf hash itself; the sizes and roots come from the
//! signed notes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::Hash;
use super::proof::MAX_PROOF_HASHES;
use super::tree_head::{encode_hash, parse_hash, parse_size};

pub(crate) const INCLUSION_HEADER: &str = "eventgate inclusion proof v1";
pub(crate) const CONSISTENCY_HEADER: &str = "eventgate consistency proof v1";

/// The largest proof file read: two notes and a proof are a few KiB; a record is an
/// event row, bounded by what the gateway accepts (4 MiB messages).
pub(crate) const MAX_FILE: usize = 16 << 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ProofFile {
    Inclusion {
        index: u64,
        record: Vec<u8>,
        proof: Vec<Hash>,
        note: String,
    },
    Consistency {
        proof: Vec<Hash>,
        old: String,
        new: String,
    },
}

impl ProofFile {
    pub(crate) fn to_text(&self) -> String {
        let hashes =
            |proof: &[Hash]| -> String { proof.iter().map(|h| encode_hash(h) + "\n").collect() };
        match self {
            ProofFile::Inclusion {
                index,
                record,
                proof,
                note,
            } => format!(
                "{INCLUSION_HEADER}\nindex {index}\nrecord {}\n{}\n{note}",
                STANDARD.encode(record),
                hashes(proof)
            ),
            ProofFile::Consistency { proof, old, new } => {
                format!("{CONSISTENCY_HEADER}\n{}\n{old}{new}", hashes(proof))
            }
        }
    }

    pub(crate) fn parse(text: &str) -> Result<ProofFile, String> {
        if text.len() > MAX_FILE {
            return Err(format!(
                "{} bytes, more than the {MAX_FILE} a proof file may have",
                text.len()
            ));
        }
        let (head, notes) = text
            .split_once("\n\n")
            .ok_or("no blank line between the proof and the signed tree head")?;
        let mut lines = head.split('\n');
        let header = lines.next().unwrap_or_default();
        let mut field = |key: &str| -> Result<&str, String> {
            let line = lines.next().unwrap_or_default();
            line.strip_prefix(key)
                .and_then(|v| v.strip_prefix(' '))
                .ok_or_else(|| format!("expected `{key} ...`, found {:?}", short(line)))
        };
        match header {
            INCLUSION_HEADER => {
                let index = parse_size(field("index")?).map_err(|e| format!("index: {e}"))?;
                let record = STANDARD
                    .decode(field("record")?)
                    .map_err(|e| format!("record: not base64: {e}"))?;
                let proof = hashes(lines)?;
                let mut notes = split_notes(notes)?;
                if notes.len() != 1 {
                    return Err(format!(
                        "an inclusion proof holds one signed tree head, this one {}",
                        notes.len()
                    ));
                }
                Ok(ProofFile::Inclusion {
                    index,
                    record,
                    proof,
                    note: notes.remove(0),
                })
            }
            CONSISTENCY_HEADER => {
                let proof = hashes(lines)?;
                let notes = split_notes(notes)?;
                let [old, new]: [String; 2] = notes.try_into().map_err(|notes: Vec<String>| {
                    format!(
                        "a consistency proof holds two signed tree heads, the older first; this one {}",
                        notes.len()
                    )
                })?;
                Ok(ProofFile::Consistency { proof, old, new })
            }
            other => Err(format!(
                "not a proof file: the first line is {:?}, not {INCLUSION_HEADER:?} or {CONSISTENCY_HEADER:?}",
                short(other)
            )),
        }
    }
}

fn hashes<'a>(lines: impl Iterator<Item = &'a str>) -> Result<Vec<Hash>, String> {
    let mut proof = Vec::new();
    for (i, line) in lines.enumerate() {
        if proof.len() == MAX_PROOF_HASHES {
            return Err(format!("more than {MAX_PROOF_HASHES} proof hashes"));
        }
        proof.push(parse_hash(line).map_err(|e| format!("proof hash {}: {e}", i + 1))?);
    }
    Ok(proof)
}

/// Signed notes one after another: each is its text, a blank line and its
/// signature lines (`— ...`); the first line after a signature line that is not
/// one begins the next note.
pub(crate) fn split_notes(text: &str) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    let mut current = String::new();
    let mut in_signatures = false;
    let mut after_blank = false;
    for line in text.split_inclusive('\n') {
        let is_signature = line.starts_with("\u{2014} ");
        if in_signatures && !is_signature {
            notes.push(std::mem::take(&mut current));
            in_signatures = false;
            after_blank = false;
        }
        if after_blank && is_signature {
            in_signatures = true;
        }
        after_blank = line == "\n";
        current.push_str(line);
        if notes.len() > 2 {
            return Err("more than two signed notes".to_owned());
        }
    }
    if in_signatures {
        notes.push(current);
    } else if !current.trim().is_empty() {
        return Err("the last signed note has no signature line".to_owned());
    }
    Ok(notes)
}

fn short(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTE: &str =
        "o\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n\u{2014} k AAAAAAAA\n";

    #[test]
    fn both_kinds_round_trip() {
        let inclusion = ProofFile::Inclusion {
            index: 3,
            record: b"row".to_vec(),
            proof: vec![[1; 32], [2; 32]],
            note: NOTE.into(),
        };
        assert_eq!(ProofFile::parse(&inclusion.to_text()), Ok(inclusion));
        let consistency = ProofFile::Consistency {
            proof: vec![[3; 32]],
            old: NOTE.into(),
            new: NOTE.replace("\n1\n", "\n2\n"),
        };
        assert_eq!(ProofFile::parse(&consistency.to_text()), Ok(consistency));
        let empty = ProofFile::Consistency {
            proof: vec![],
            old: NOTE.into(),
            new: NOTE.into(),
        };
        assert_eq!(ProofFile::parse(&empty.to_text()), Ok(empty));
    }

    #[test]
    fn damaged_files_say_what_is_wrong() {
        let good = ProofFile::Inclusion {
            index: 3,
            record: b"row".to_vec(),
            proof: vec![[1; 32]],
            note: NOTE.into(),
        }
        .to_text();
        for (text, says) in [
            ("hello".to_owned(), "no blank line"),
            (good.replace("index 3", "index x"), "index"),
            (good.replace("record ", "record !"), "record"),
            (good.replace("AQEB", "AQE"), "proof hash 1"),
            (good.replace(INCLUSION_HEADER, "x"), "not a proof file"),
            (format!("{good}{NOTE}"), "one signed tree head"),
            (
                good.replace("\u{2014} k AAAAAAAA\n", ""),
                "no signature line",
            ),
        ] {
            let error = ProofFile::parse(&text).unwrap_err();
            assert!(error.contains(says), "{says}: {error}");
        }
    }
}
