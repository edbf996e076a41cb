//! The transparency log's untrusted texts: tree heads, eventgate checkpoints, proof
//! files and audit records, as `audit check-proof`, `audit verify` and a witness
//! read them from anyone.

use crate::store::chain::decode_record;
use crate::store::checkpoint::Checkpoint;
use crate::tlog::check::check;
use crate::tlog::proof_file::ProofFile;
use crate::tlog::tree_head::TreeHead;

/// A proof file (or a tree head, or a checkpoint text, or a record) from arbitrary
/// bytes. What parses must print back to the same text; a parsed proof file's notes
/// are signed again with the fuzzing key so that the proof's hashes are checked too.
pub fn proof(data: &[u8]) {
    let _ = decode_record(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(head) = TreeHead::parse(text) {
        assert_eq!(
            head.to_text(),
            text,
            "a tree head prints back as it was read"
        );
    }
    if let Ok(checkpoint) = Checkpoint::parse(text) {
        // Version 2 prints canonically; version 1 texts may differ only in spacing
        // the parser does not accept anyway.
        if checkpoint.tree.is_some() {
            assert_eq!(
                Checkpoint::parse(&checkpoint.to_text()).ok(),
                Some(checkpoint)
            );
        }
    }
    let Ok(file) = ProofFile::parse(text) else {
        return;
    };
    assert_eq!(
        ProofFile::parse(&file.to_text()).ok().as_ref(),
        Some(&file),
        "a proof file reads back as it was written"
    );
    let signer = super::note_signer();
    let sign = |note: &str| {
        let text = note.rfind("\n\n").map_or(note, |i| &note[..=i]);
        signer.sign(text).unwrap_or_default()
    };
    let resigned = match file {
        ProofFile::Inclusion {
            index,
            record,
            proof,
            note,
        } => ProofFile::Inclusion {
            index,
            record,
            proof,
            note: sign(&note),
        },
        ProofFile::Consistency { proof, old, new } => ProofFile::Consistency {
            proof,
            old: sign(&old),
            new: sign(&new),
        },
    };
    let _ = check(&resigned, &[signer.verifier()], &[], 0);
}
