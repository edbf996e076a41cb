//! The witness's `add-checkpoint` request as it arrives over HTTP, and the
//! witness's answers as a log reads them.

use crate::tlog::Hash;
use crate::witness::protocol::{self, AddCheckpoint};

/// A request body through the witness's parser; what parses is written back by the
/// log's encoder and parses the same, and is judged against recorded heads of every
/// relation to it (none, its old size with its own root, another root, a bigger
/// size), with a refusal only of the kinds the spec allows. The same bytes as a
/// 409's size and a 200's cosignature lines, as a log reads them.
pub fn witness(data: &[u8]) {
    if let Ok(request) = protocol::parse_request(data) {
        let again = protocol::request_body(request.old, &request.proof, &request.note);
        let reparsed = protocol::parse_request(again.as_bytes())
            .unwrap_or_else(|e| panic!("a parsed request, written again, does not parse: {e}"));
        assert_eq!(reparsed, request);
        judge_all(&request);
    }
    let _ = protocol::parse_size_body(data);
    if let Ok(lines) = protocol::parse_cosignatures(data) {
        assert!(!lines.is_empty() && lines.len() <= protocol::MAX_COSIGNATURE_LINES);
    }
}

fn judge_all(request: &AddCheckpoint) {
    let other: Hash = [0x5a; 32];
    let recorded = [
        None,
        Some((request.old, request.head.root)),
        Some((request.old, other)),
        Some((request.head.size.saturating_add(1), other)),
    ];
    for head in &recorded {
        let verdict = protocol::judge(head.as_ref().map(|(size, root)| (*size, root)), request);
        if let Err(refusal) = verdict {
            // The judgement never answers what only the keys or the parser decide.
            assert!(
                matches!(refusal.status(), 400 | 409 | 422),
                "{refusal:?} for {head:?}"
            );
        }
    }
}
