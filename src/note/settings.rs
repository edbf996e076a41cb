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
}

impl Default for SigningSettings {
    fn default() -> Self {
        Self {
            key: None,
            interval: Duration::from_secs(60),
            every_rows: 100_000,
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
        Ok(())
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
}
