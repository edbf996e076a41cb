//! Witness cosignatures, C2SP tlog-cosignature `cosignature/v1`: a witness's Ed25519
//! signature over `cosignature/v1\ntime T\n` followed by the whole tree head text,
//! carried as one more signature line of the note, `— NAME base64(key id || T as
//! u64 big-endian || signature)`. The key id hashes the signature type 0x04, so a
//! witness key can never pass for a log's signing key (0x01) or the reverse.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{SigningKey, VerifyingKey};
use rand::TryRngCore;

use crate::note::{NoteError, SignatureLine, check_new_name, key_id_of, malformed, split_key_of};

/// The signature type of a cosignature/v1 key.
pub(crate) const ALG_COSIGNATURE: u8 = 0x04;

const SIGNER_PREFIX: &str = "PRIVATE+KEY+";

/// What a witness signs for a tree head `text` at `time` (seconds since the epoch).
pub(crate) fn message(time: u64, text: &str) -> Vec<u8> {
    format!("cosignature/v1\ntime {time}\n{text}").into_bytes()
}

/// A witness's secret key. Its `Debug` shows the name and key id only.
pub struct Cosigner {
    name: String,
    key_id: u32,
    key: SigningKey,
}

impl std::fmt::Debug for Cosigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cosigner")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .finish_non_exhaustive()
    }
}

/// A witness's public key, as a log's users configure it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessKey {
    name: String,
    key_id: u32,
    key: VerifyingKey,
}

impl Cosigner {
    pub fn generate(name: &str) -> Result<Cosigner, NoteError> {
        // Checked before the text is made: a '+' in the name would split it elsewhere
        // and be reported as a bad key id.
        check_new_name(name)?;
        let mut seed = [0u8; 32];
        rand::rngs::OsRng
            .try_fill_bytes(&mut seed)
            .map_err(NoteError::Random)?;
        let key = SigningKey::from_bytes(&seed);
        let candidate = format!(
            "{SIGNER_PREFIX}{name}+{:08x}+{}",
            key_id_of(name, ALG_COSIGNATURE, key.verifying_key().as_bytes()),
            encode(key.as_bytes())
        );
        Cosigner::from_text(&candidate)
    }

    /// Parses `PRIVATE+KEY+NAME+KEY_ID+BASE64(0x04 || seed)`.
    pub fn from_text(text: &str) -> Result<Cosigner, NoteError> {
        let text = text.trim();
        let Some(rest) = text.strip_prefix(SIGNER_PREFIX) else {
            return Err(malformed(
                "witness signer",
                "it does not begin with PRIVATE+KEY+".into(),
            ));
        };
        let (name, stated, seed) = split_key_of("witness signer", rest, ALG_COSIGNATURE)?;
        let seed: [u8; 32] = seed.try_into().map_err(|seed: Vec<u8>| {
            malformed(
                "witness signer",
                format!(
                    "an Ed25519 private key is 32 bytes, this one is {}",
                    seed.len()
                ),
            )
        })?;
        let key = SigningKey::from_bytes(&seed);
        let computed = key_id_of(name, ALG_COSIGNATURE, key.verifying_key().as_bytes());
        if computed != stated {
            return Err(NoteError::KeyIdMismatch {
                kind: "witness signer",
                name: name.to_owned(),
                stated,
                computed,
            });
        }
        Ok(Cosigner {
            name: name.to_owned(),
            key_id: stated,
            key,
        })
    }

    pub fn to_text(&self) -> String {
        format!(
            "{SIGNER_PREFIX}{}+{:08x}+{}",
            self.name,
            self.key_id,
            encode(self.key.as_bytes())
        )
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn witness_key(&self) -> WitnessKey {
        WitnessKey {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// The cosignature line (with its newline) for tree head `text` at `time`.
    pub(crate) fn cosign(&self, text: &str, time: u64) -> String {
        use ed25519_dalek::Signer as _;
        let signature = self.key.sign(&message(time, text)).to_bytes();
        let mut bytes = Vec::with_capacity(76);
        bytes.extend_from_slice(&self.key_id.to_be_bytes());
        bytes.extend_from_slice(&time.to_be_bytes());
        bytes.extend_from_slice(&signature);
        format!("\u{2014} {} {}\n", self.name, STANDARD.encode(bytes))
    }
}

/// What one cosignature line said, once checked against a witness key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Not this witness's line.
    Other,
    /// This witness cosigned the text at this time (seconds since the epoch).
    Cosigned(u64),
    /// A line with this witness's name and key id that does not verify.
    Bad,
}

impl WitnessKey {
    /// Parses `NAME+KEY_ID+BASE64(0x04 || public key)`.
    pub fn from_text(text: &str) -> Result<WitnessKey, NoteError> {
        let text = text.trim();
        if text.starts_with(SIGNER_PREFIX) {
            return Err(NoteError::SignerKeyGiven);
        }
        let (name, stated, public) = split_key_of("witness verifier", text, ALG_COSIGNATURE)?;
        let public: [u8; 32] = public.try_into().map_err(|public: Vec<u8>| {
            malformed(
                "witness verifier",
                format!(
                    "an Ed25519 public key is 32 bytes, this one is {}",
                    public.len()
                ),
            )
        })?;
        let computed = key_id_of(name, ALG_COSIGNATURE, &public);
        if computed != stated {
            return Err(NoteError::KeyIdMismatch {
                kind: "witness verifier",
                name: name.to_owned(),
                stated,
                computed,
            });
        }
        let key = VerifyingKey::from_bytes(&public).map_err(NoteError::InvalidPublicKey)?;
        Ok(WitnessKey {
            name: name.to_owned(),
            key_id: stated,
            key,
        })
    }

    pub fn to_text(&self) -> String {
        format!(
            "{}+{:08x}+{}",
            self.name,
            self.key_id,
            encode(self.key.as_bytes())
        )
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// Checks one signature line of a note whose text is `text`.
    pub(crate) fn check(&self, text: &str, line: &SignatureLine<'_>) -> Checked {
        if line.name != self.name || line.key_id != self.key_id {
            return Checked::Other;
        }
        let Some((time, signature)) = line.signature.split_first_chunk::<8>() else {
            return Checked::Bad;
        };
        let time = u64::from_be_bytes(*time);
        let Ok(signature) = ed25519_dalek::Signature::from_slice(signature) else {
            return Checked::Bad;
        };
        if time > i64::MAX as u64 {
            return Checked::Bad;
        }
        match self.key.verify_strict(&message(time, text), &signature) {
            Ok(()) => Checked::Cosigned(time),
            Err(_) => Checked::Bad,
        }
    }
}

/// The key bytes with their type byte, in base64.
fn encode(key: &[u8; 32]) -> String {
    let mut bytes = Vec::with_capacity(33);
    bytes.push(ALG_COSIGNATURE);
    bytes.extend_from_slice(key);
    STANDARD.encode(bytes)
}

/// What the given witnesses' lines on a note said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cosignatures {
    /// (witness name, time) of each cosignature that verifies.
    pub good: Vec<(String, u64)>,
    /// The witnesses whose line does not verify.
    pub bad: Vec<String>,
}

/// The cosignatures of `witnesses` on a signed note.
pub(crate) fn cosignatures(
    note: &str,
    witnesses: &[WitnessKey],
) -> Result<Cosignatures, NoteError> {
    let (text, lines) = crate::note::split(note)?;
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for line in &lines {
        for witness in witnesses {
            match witness.check(text, line) {
                Checked::Other => {}
                Checked::Cosigned(time) => {
                    if !good.iter().any(|(n, _)| n == witness.name()) {
                        good.push((witness.name().to_owned(), time));
                    }
                }
                Checked::Bad => bad.push(witness.name().to_owned()),
            }
        }
    }
    Ok(Cosignatures { good, bad })
}
