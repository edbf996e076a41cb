//! `[signing]`: the key that signs checkpoints of the audit store's chain head, and
//! how often a checkpoint is signed.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{KeyFileError, Signer, load_key};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SigningSettings {
    /// The signer key file (`eventgate audit keygen` writes one), mode 0600. Unset:
    /// no checkpoint is signed. A relative path is taken from the working directory,
    /// as `exchange.tls.key` is, not from `data_dir`: the key is the operator's file,
    /// not one eventgate keeps; an absolute path is recommended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// A checkpoint of the chain head is signed this often when rows were added since
    /// the last one ...
    #[serde(with = "crate::units::duration_text")]
    pub interval: Duration,
    /// ... and sooner, as soon as this many rows were added since the last one.
    pub every_rows: u64,
    /// Witnesses each checkpoint is sent to (C2SP tlog-witness); the cosignatures
    /// they answer with are attached to the note that is shipped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub witness: Vec<WitnessTarget>,
    /// How long one witness may take to answer one checkpoint.
    #[serde(with = "crate::units::duration_text")]
    pub witness_timeout: Duration,
    /// How many witnesses must be cosigning for `/readyz` to say ready (k of the n
    /// `[[signing.witness]]`); unset: all of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_witnesses: Option<usize>,
}

/// One `[[signing.witness]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessTarget {
    /// `http://HOST[:PORT][/PREFIX]`: where its `add-checkpoint` is.
    pub url: String,
    /// Its key, as `eventgate witness keygen` printed it: only a cosignature by this
    /// key is accepted.
    pub key: String,
}

impl Default for SigningSettings {
    fn default() -> Self {
        Self {
            key: None,
            interval: Duration::from_secs(60),
            every_rows: 100_000,
            witness: Vec::new(),
            witness_timeout: Duration::from_secs(5),
            min_witnesses: None,
        }
    }
}

impl SigningSettings {
    /// The signer `key` holds, read and checked now; `None` when signing is off.
    pub fn signer(&self) -> Result<Option<Signer>, KeyFileError> {
        self.key.as_deref().map(load_key).transpose()
    }

    /// The values alone (the key file is checked by [`Self::signer`]). Errors name the key.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.interval.is_zero() {
            return Err((
                "signing.interval",
                "must be more than 0s (how often a checkpoint of the chain head is signed)".into(),
            ));
        }
        if self.every_rows == 0 {
            return Err((
                "signing.every_rows",
                "must be more than 0 (the rows after which a checkpoint is signed)".into(),
            ));
        }
        if self.witness_timeout.is_zero()
            || (!self.witness.is_empty() && self.witness_timeout > self.interval)
        {
            return Err((
                "signing.witness_timeout",
                format!(
                    "must be more than 0s and at most signing.interval ({}): a witness is asked once per checkpoint",
                    humantime::format_duration(self.interval)
                ),
            ));
        }
        if let Some(k) = self.min_witnesses
            && (k == 0 || k > self.witness.len())
        {
            return Err((
                "signing.min_witnesses",
                format!(
                    "must be 1 to the number of [[signing.witness]] tables ({}), not {k}",
                    self.witness.len()
                ),
            ));
        }
        let mut keys = Vec::new();
        for (i, witness) in self.witness.iter().enumerate() {
            crate::witness::client::endpoint(&witness.url).map_err(|e| {
                (
                    "signing.witness.url",
                    format!("[[signing.witness]] number {}: {e}", i + 1),
                )
            })?;
            let key = crate::tlog::cosignature::WitnessKey::from_text(&witness.key).map_err(|e| {
                (
                    "signing.witness.key",
                    format!(
                        "[[signing.witness]] number {} ({}): {e} (give the witness key `eventgate witness keygen` printed)",
                        i + 1,
                        witness.url
                    ),
                )
            })?;
            if keys.contains(&key) {
                return Err((
                    "signing.witness.key",
                    format!(
                        "[[signing.witness]] number {} repeats the key of another: each witness counts once",
                        i + 1
                    ),
                ));
            }
            keys.push(key);
        }
        Ok(())
    }

    /// The witnesses, their keys parsed (after [`Self::validate`]).
    pub(crate) fn witnesses(&self) -> Vec<(String, crate::tlog::cosignature::WitnessKey)> {
        self.witness
            .iter()
            .filter_map(|w| {
                crate::tlog::cosignature::WitnessKey::from_text(&w.key)
                    .ok()
                    .map(|key| (w.url.clone(), key))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_sign_nothing_and_zeros_are_refused() {
        let settings = SigningSettings::default();
        assert!(settings.validate().is_ok());
        assert!(settings.signer().unwrap().is_none());
        let zero = SigningSettings {
            interval: Duration::ZERO,
            ..SigningSettings::default()
        };
        assert_eq!(zero.validate().unwrap_err().0, "signing.interval");
        let zero = SigningSettings {
            every_rows: 0,
            ..SigningSettings::default()
        };
        assert_eq!(zero.validate().unwrap_err().0, "signing.every_rows");
    }

    #[test]
    fn witnesses_are_checked_and_k_is_at_most_n() {
        let key = crate::tlog::cosignature::Cosigner::generate("w.example/1")
            .unwrap()
            .witness_key()
            .to_text();
        let one = SigningSettings {
            witness: vec![WitnessTarget {
                url: "http://127.0.0.1:7380".into(),
                key: key.clone(),
            }],
            ..SigningSettings::default()
        };
        assert!(one.validate().is_ok());
        assert_eq!(one.witnesses().len(), 1);
        for k in [0, 2] {
            let bad = SigningSettings {
                min_witnesses: Some(k),
                ..one.clone()
            };
            assert_eq!(
                bad.validate().unwrap_err().0,
                "signing.min_witnesses",
                "{k}"
            );
        }
        let https = SigningSettings {
            witness: vec![WitnessTarget {
                url: "https://w.example".into(),
                key: key.clone(),
            }],
            ..SigningSettings::default()
        };
        assert_eq!(https.validate().unwrap_err().0, "signing.witness.url");
        let log_key = SigningSettings {
            witness: vec![WitnessTarget {
                url: "http://127.0.0.1:7380".into(),
                key: crate::note::Signer::generate("l")
                    .unwrap()
                    .verifier()
                    .to_text(),
            }],
            ..SigningSettings::default()
        };
        assert_eq!(log_key.validate().unwrap_err().0, "signing.witness.key");
        let twice = SigningSettings {
            witness: vec![one.witness[0].clone(), one.witness[0].clone()],
            ..SigningSettings::default()
        };
        assert_eq!(twice.validate().unwrap_err().0, "signing.witness.key");
        let slow = SigningSettings {
            witness_timeout: Duration::from_secs(120),
            ..one
        };
        assert_eq!(slow.validate().unwrap_err().0, "signing.witness_timeout");
    }
}
