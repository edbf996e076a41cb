//! Keys, signing and opening notes: known vectors, round trips, and every way a note
//! can be wrong giving its own error without a panic.

mod keyfile;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;
use sha2::{Digest, Sha256};

use super::open::Opened;
use super::*;

// The example of Go's sumdb/note documentation: a signer key, its verifier key, and
// the note it signs (Ed25519 is deterministic, so signing gives exactly these bytes).
const GO_SIGNER: &str =
    "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
const GO_VERIFIER: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
const GO_TEXT: &str = "If you think cryptography is the answer to your problem,\n\
                       then you don't know what your problem is.\n";
const GO_NOTE_SIGNATURES: &str = "\n\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";

fn go_note() -> String {
    format!("{GO_TEXT}{GO_NOTE_SIGNATURES}")
}

fn new_key(name: &str) -> Signer {
    Signer::generate(name).unwrap()
}

/// A signature line of `name` with `key_id` over `signature`, as a note carries it.
fn line(name: &str, key_id: u32, signature: &[u8]) -> String {
    let mut bytes = key_id.to_be_bytes().to_vec();
    bytes.extend_from_slice(signature);
    format!("\u{2014} {name} {}\n", STANDARD.encode(bytes))
}

fn malformed(result: Result<Opened, NoteError>) -> String {
    match result {
        Err(NoteError::Malformed(problem)) => problem,
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn gos_documented_example_is_reproduced_exactly() {
    let signer = Signer::from_text(GO_SIGNER).unwrap();
    assert_eq!(signer.name(), "PeterNeumann");
    assert_eq!(signer.key_id(), 0xc74f20a3);
    assert_eq!(signer.to_text(), GO_SIGNER);
    assert_eq!(signer.verifier().to_text(), GO_VERIFIER);
    assert_eq!(signer.sign(GO_TEXT).unwrap(), go_note());

    let verifier = Verifier::from_text(GO_VERIFIER).unwrap();
    assert_eq!(
        (verifier.name(), verifier.key_id()),
        ("PeterNeumann", 0xc74f20a3)
    );
    assert_eq!(verifier, signer.verifier());
    let opened = open(&go_note(), &[verifier]).unwrap();
    assert_eq!(opened.text, GO_TEXT);
    assert_eq!(opened.signed_by, ["PeterNeumann"]);
}

#[test]
fn a_key_from_a_fixed_seed_has_the_key_id_and_texts_of_the_formula() {
    let seed = [7u8; 32];
    let name = "example.com/eventgate";
    let signer = Signer::from_seed(name, &seed);
    // Computed here from the spec's formula, with the Ed25519 library directly.
    let public = ed25519_dalek::SigningKey::from_bytes(&seed)
        .verifying_key()
        .to_bytes();
    let mut hashed = format!("{name}\n").into_bytes();
    hashed.push(0x01);
    hashed.extend_from_slice(&public);
    let digest = Sha256::digest(&hashed);
    let id = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    assert_eq!(signer.key_id(), id);

    let mut public_key = vec![0x01];
    public_key.extend_from_slice(&public);
    let verifier_text = format!("{name}+{id:08x}+{}", STANDARD.encode(&public_key));
    assert_eq!(signer.verifier().to_text(), verifier_text);
    let mut private_key = vec![0x01];
    private_key.extend_from_slice(&seed);
    assert_eq!(
        signer.to_text(),
        format!(
            "PRIVATE+KEY+{name}+{id:08x}+{}",
            STANDARD.encode(&private_key)
        )
    );
    assert_eq!(signer.verifier().key_id(), id);
    assert_eq!(
        Verifier::from_text(&verifier_text).unwrap(),
        signer.verifier()
    );

    // The signature line: the key id big-endian, then the 64-byte signature of the text.
    let note = signer.sign("head 42\n").unwrap();
    let (text, signature_line) = note.split_once("\n\n").unwrap();
    assert_eq!(text, "head 42");
    let encoded = signature_line
        .strip_prefix(&format!("\u{2014} {name} "))
        .and_then(|s| s.strip_suffix('\n'))
        .unwrap();
    let bytes = STANDARD.decode(encoded).unwrap();
    assert_eq!(bytes.len(), 68);
    assert_eq!(bytes[..4], id.to_be_bytes());
    let signature = ed25519_dalek::Signature::from_slice(&bytes[4..]).unwrap();
    ed25519_dalek::VerifyingKey::from_bytes(&public)
        .unwrap()
        .verify_strict(b"head 42\n", &signature)
        .unwrap();
}

#[test]
fn keys_round_trip_through_their_texts() {
    let signer = new_key("node-1.example/audit");
    let again = Signer::from_text(&format!("  {}\n", signer.to_text())).unwrap();
    assert_eq!(again.to_text(), signer.to_text());
    assert_eq!(again.verifier(), signer.verifier());
    let verifier = Verifier::from_text(&format!("{}\n", signer.verifier().to_text())).unwrap();
    assert_eq!(verifier, signer.verifier());
    assert_eq!(verifier.name(), "node-1.example/audit");
    // Two generated keys differ.
    assert_ne!(new_key("n").to_text(), new_key("n").to_text());
    // The Debug form never shows the secret.
    let debug = format!("{signer:?}");
    assert!(!debug.contains(&signer.to_text()[30..]), "{debug}");
}

#[test]
fn a_signed_note_opens_and_names_its_signer() {
    let signer = new_key("audit.example/node-1");
    let text = "eventgate audit checkpoint\n\nrow_id 1234\n";
    let note = signer.sign(text).unwrap();
    let opened = open(&note, &[signer.verifier()]).unwrap();
    assert_eq!(opened.text, text, "a text with a blank line of its own");
    assert_eq!(opened.signed_by, ["audit.example/node-1"]);
    assert_eq!(
        open_bytes(note.as_bytes(), &[signer.verifier()]).unwrap(),
        opened
    );

    // Co-signed: both known keys are named; an unknown third is ignored.
    let other = new_key("witness.example");
    let stranger = new_key("stranger.example");
    let cosigned = format!(
        "{note}{}{}",
        other
            .sign(text)
            .unwrap()
            .split_once("\n\n\u{2014}")
            .map(|(_, l)| format!("\u{2014}{l}"))
            .unwrap(),
        stranger.sign(text).unwrap().rsplit_once("\n\n").unwrap().1,
    );
    let opened = open(&cosigned, &[other.verifier(), signer.verifier()]).unwrap();
    assert_eq!(
        opened.signed_by,
        ["audit.example/node-1", "witness.example"]
    );
}

#[test]
fn a_note_changed_by_one_byte_does_not_verify() {
    let signer = new_key("n");
    let text = "row_id 1234\nhash 28d73416\n";
    let note = signer.sign(text).unwrap();
    for at in 0..text.len() {
        let mut changed = note.clone().into_bytes();
        changed[at] = if changed[at] == b'x' { b'y' } else { b'x' };
        let result = open_bytes(&changed, &[signer.verifier()]);
        if at == text.len() - 1 {
            // The text's final newline gone: no blank line before the signatures.
            assert!(
                matches!(result, Err(NoteError::Malformed(_))),
                "byte {at}: {result:?}"
            );
        } else {
            assert!(
                matches!(&result, Err(NoteError::BadSignature { name }) if name == "n"),
                "byte {at}: {result:?}"
            );
        }
    }
    // A signature changed (its last base64 digit before the padding).
    let mut changed = note.clone();
    let at = changed.len() - 3;
    let digit = if &changed[at..at + 1] == "A" {
        "B"
    } else {
        "A"
    };
    changed.replace_range(at..at + 1, digit);
    let result = open(&changed, &[signer.verifier()]);
    assert!(
        matches!(
            &result,
            Err(NoteError::BadSignature { .. } | NoteError::Malformed(_))
        ),
        "{result:?}"
    );
}

#[test]
fn another_key_of_the_same_name_is_not_a_signer() {
    let ours = new_key("audit.example");
    let theirs = new_key("audit.example");
    let text = "row_id 7\n";
    // Another key id: a signature of a key we do not know, ignored; nothing we know signed.
    let note = theirs.sign(text).unwrap();
    match open(&note, &[ours.verifier()]) {
        Err(NoteError::UnknownKey { signers }) => {
            assert_eq!(signers, [format!("audit.example+{:08x}", theirs.key_id())]);
        }
        other => panic!("{other:?}"),
    }
    // Their signature under our key id: a known key whose signature fails.
    let (_, encoded) = note.trim_end().rsplit_once(' ').unwrap();
    let signature = STANDARD.decode(encoded).unwrap();
    let forged = format!(
        "{text}\n{}",
        line("audit.example", ours.key_id(), &signature[4..])
    );
    let error = open(&forged, &[ours.verifier()]).unwrap_err();
    assert!(
        matches!(&error, NoteError::BadSignature { name } if name == "audit.example"),
        "{error:?}"
    );
    assert!(error.to_string().contains("does not verify"), "{error}");
    // A good signature followed by a bad repeat of the same key: refused too.
    let repeated = format!(
        "{}{}",
        ours.sign(text).unwrap(),
        forged.rsplit_once("\n\n").unwrap().1
    );
    assert!(matches!(
        open(&repeated, &[ours.verifier()]),
        Err(NoteError::BadSignature { .. })
    ));
    // A known key's signature of the wrong length fails as a bad signature.
    let short = format!("{text}\n{}", line("audit.example", ours.key_id(), &[1; 10]));
    assert!(matches!(
        open(&short, &[ours.verifier()]),
        Err(NoteError::BadSignature { .. })
    ));
}

#[test]
fn unknown_keys_are_named_and_no_verifiers_opens_nothing() {
    let signer = new_key("somebody.example");
    let note = signer.sign("x\n").unwrap();
    let error = open(&note, &[]).unwrap_err();
    let expected = format!("somebody.example+{:08x}", signer.key_id());
    assert!(
        matches!(&error, NoteError::UnknownKey { signers } if signers == std::slice::from_ref(&expected)),
        "{error:?}"
    );
    assert!(error.to_string().contains(&expected), "{error}");
    let error = open(&note, &[new_key("else.example").verifier()]).unwrap_err();
    assert!(matches!(error, NoteError::UnknownKey { .. }));
}

#[test]
fn two_verifiers_with_one_name_and_key_id_are_refused() {
    let signer = new_key("n");
    let note = signer.sign("x\n").unwrap();
    let error = open(&note, &[signer.verifier(), signer.verifier()]).unwrap_err();
    assert!(matches!(error, NoteError::AmbiguousKey { .. }), "{error:?}");
}

#[test]
fn truncated_notes_are_refused_without_a_panic() {
    let signer = new_key("n");
    let note = signer.sign("row_id 1\nhash ab\n").unwrap();
    for (cut, _) in note.char_indices() {
        let result = open(&note[..cut], &[signer.verifier()]);
        assert!(result.is_err(), "cut at {cut}: {result:?}");
    }
    let problem = malformed(open(note.trim_end(), &[signer.verifier()]));
    assert!(problem.contains("truncated"), "{problem}");
    let problem = malformed(open("row_id 1\n", &[signer.verifier()]));
    assert!(problem.contains("no blank line"), "{problem}");
    let problem = malformed(open("row_id 1\n\n", &[signer.verifier()]));
    assert!(problem.contains("no signature line"), "{problem}");
    // Every byte prefix, as bytes: cut inside the em dash too.
    for cut in 0..note.len() {
        assert!(open_bytes(&note.as_bytes()[..cut], &[signer.verifier()]).is_err());
    }
}

#[test]
fn at_most_100_signature_lines() {
    let ours = new_key("ours");
    let text = "x\n";
    let note = ours.sign(text).unwrap();
    let unknown = line("someone", 1, &[0; 64]);
    let with = |others: usize| format!("{note}{}", unknown.repeat(others));
    assert!(open(&with(99), &[ours.verifier()]).is_ok(), "100 lines");
    let problem = malformed(open(&with(100), &[ours.verifier()]));
    assert!(problem.contains("101 signature lines"), "{problem}");
    // A million tiny lines are refused on the count, cheaply.
    let many = format!("{text}\n{}", "\u{2014} a b\n".repeat(100_000));
    assert!(malformed(open(&many, &[ours.verifier()])).contains("more than the 100"));
}

#[test]
fn hostile_notes_are_malformed() {
    let signer = new_key("n");
    let good = signer.sign("x\n").unwrap();
    let known = [signer.verifier()];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"x\n\n\xff\xfe\n".to_vec(), "UTF-8"),
        (good.replace('x', "x\ty").into_bytes(), "control character"),
        (good.replace('x', "x\r").into_bytes(), "control character"),
        (good.replace("\u{2014} ", "- ").into_bytes(), "em dash"),
        (
            good.replace("\u{2014} ", "\u{2014}").into_bytes(),
            "em dash",
        ),
        (
            good.replace("\u{2014} n ", "\u{2014} n").into_bytes(),
            "no space",
        ),
        (
            good.replace("\u{2014} n ", "\u{2014} n+m ").into_bytes(),
            "key name",
        ),
        (
            good.replace("\u{2014} n ", "\u{2014}  ").into_bytes(),
            "key name",
        ),
        (
            format!("x\n\n{}", line("n", signer.key_id(), &[])).into_bytes(),
            "shorter",
        ),
        (b"x\n\n\xe2\x80\x94 n !!!!\n".to_vec(), "not base64"),
        (b"x\n\n\xe2\x80\x94 n \n".to_vec(), "no signature after"),
        (
            format!("x\n\n{}\n", line("n", 1, &[0; 64])).into_bytes(),
            "no signature line",
        ),
    ];
    for (note, expected) in cases {
        let problem = malformed(open_bytes(&note, &known));
        assert!(
            problem.contains(expected),
            "{:?}: {problem}",
            String::from_utf8_lossy(&note)
        );
    }
    let huge = format!("{}{good}", "a".repeat(MAX_NOTE_BYTES));
    assert!(malformed(open(&huge, &known)).contains("more than the"));
    assert!(malformed(open_bytes(huge.as_bytes(), &known)).contains("more than the"));
}

#[test]
fn sign_refuses_texts_that_would_not_open() {
    let signer = new_key("n");
    for (text, expected) in [
        ("", "end in a newline"),
        ("no newline", "end in a newline"),
        ("tab\there\n", "control character"),
        ("nul\0\n", "control character"),
    ] {
        match signer.sign(text) {
            Err(NoteError::InvalidText(problem)) => {
                assert!(problem.contains(expected), "{text:?}: {problem}")
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    let big = format!("{}\n", "a".repeat(MAX_NOTE_BYTES));
    assert!(matches!(signer.sign(&big), Err(NoteError::InvalidText(_))));
    // The smallest text, a lone newline, signs and opens.
    let note = signer.sign("\n").unwrap();
    assert_eq!(open(&note, &[signer.verifier()]).unwrap().text, "\n");
}

#[test]
fn key_texts_are_checked_and_secrets_never_quoted() {
    let signer = new_key("n");
    let secret = signer.to_text();
    let error = Verifier::from_text(&secret).unwrap_err();
    assert!(matches!(error, NoteError::SignerKeyGiven), "{error:?}");
    assert!(!error.to_string().contains(&secret[16..]), "{error}");
    let error = Signer::from_text(&signer.verifier().to_text()).unwrap_err();
    assert!(matches!(error, NoteError::VerifierKeyGiven), "{error:?}");

    // Another key id than the key gives.
    // The key is the last 44 characters (33 bytes in base64), which may hold '+'.
    let (head, key) = (
        secret.split_at(secret.len() - 45).0,
        &secret[secret.len() - 44..],
    );
    let id = format!("{:08x}", signer.key_id() ^ 1);
    let wrong_id = format!("{}+{id}+{key}", &head[..head.len() - 9]);
    let error = Signer::from_text(&wrong_id).unwrap_err();
    assert!(
        matches!(error, NoteError::KeyIdMismatch { .. }),
        "{error:?}"
    );
    assert!(!error.to_string().contains(key), "{error}");
    let public = signer.verifier().to_text();
    // The key is the last 44 characters (33 bytes in base64), which may hold '+'.
    let (head, key) = (
        public.split_at(public.len() - 45).0,
        &public[public.len() - 44..],
    );
    let error =
        Verifier::from_text(&format!("{}+{id}+{key}", &head[..head.len() - 9])).unwrap_err();
    assert!(
        matches!(error, NoteError::KeyIdMismatch { .. }),
        "{error:?}"
    );

    // Another algorithm.
    let mut bytes = STANDARD.decode(key).unwrap();
    bytes[0] = 0x02;
    let other = format!("{head}+{}", STANDARD.encode(&bytes));
    assert!(matches!(
        Verifier::from_text(&other),
        Err(NoteError::UnknownAlgorithm { algorithm: 2, .. })
    ));
    for (text, expected) in [
        ("", "NAME+KEY_ID+KEY"),
        ("n", "NAME+KEY_ID+KEY"),
        ("n+0000", "NAME+KEY_ID+KEY"),
        ("n+0000+AQ==", "8 hex digits"),
        ("n+0000000g+AQ==", "8 hex digits"),
        ("n+00000000+!!", "base64"),
        ("n+00000000+", "empty"),
        ("n+00000000+AQ==", "32 bytes"),
    ] {
        let error = Verifier::from_text(text).unwrap_err();
        assert!(error.to_string().contains(expected), "{text:?}: {error}");
    }
    for name in ["", "a b", "a+b", "tab\tname", "nl\n"] {
        let error = Signer::generate(name).unwrap_err();
        assert!(
            matches!(error, NoteError::InvalidName { .. }),
            "{name:?}: {error:?}"
        );
    }
    assert!(Signer::generate(&"a".repeat(257)).is_err());
    let error = Signer::from_text("PRIVATE+KEY+a b+00000000+AQ==").unwrap_err();
    assert!(matches!(error, NoteError::InvalidName { .. }), "{error:?}");
    let error = Signer::from_text("-----BEGIN PRIVATE KEY-----").unwrap_err();
    assert!(error.to_string().contains("PRIVATE+KEY+"), "{error}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the bytes, opening gives an error or a note a known key signed; never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let verifier = Verifier::from_text(GO_VERIFIER).unwrap();
        let _ = open_bytes(&bytes, std::slice::from_ref(&verifier));
        let mut note = go_note().into_bytes();
        note.extend_from_slice(&bytes);
        let _ = open_bytes(&note, &[verifier]);
        let _ = Verifier::from_text(&String::from_utf8_lossy(&bytes));
        let _ = Signer::from_text(&String::from_utf8_lossy(&bytes));
    }

    /// Any valid text signs into a note that opens back to that text.
    #[test]
    fn texts_round_trip(text in "[^\u{0}-\u{9}\u{b}-\u{1f}]{0,200}") {
        let text = format!("{text}\n");
        let signer = Signer::from_text(GO_SIGNER).unwrap();
        let note = signer.sign(&text).unwrap();
        let opened = open(&note, &[signer.verifier()]).unwrap();
        prop_assert_eq!(opened.text, text);
    }
}
