//! `[dead_letter]`: where events forwarders gave up on are kept, and how often workers
//! look for the redeliveries `eventgate dlq retry` asked for.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::duration_text;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeadLetterSettings {
    /// The store's SQLite file; a relative path is under `data_dir`.
    pub path: PathBuf,
    /// How often a forwarder's worker looks for entries `eventgate dlq retry` requested.
    #[serde(with = "duration_text")]
    pub poll_interval: Duration,
}

impl Default for DeadLetterSettings {
    fn default() -> Self {
        Self {
            path: PathBuf::from("deadletters.db"),
            poll_interval: Duration::from_secs(1),
        }
    }
}

impl DeadLetterSettings {
    /// Errors name the key.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.path.as_os_str().is_empty() {
            return Err(("dead_letter.path", "must not be empty".into()));
        }
        if self.poll_interval.is_zero() {
            return Err((
                "dead_letter.poll_interval",
                "must be more than 0s (it is how often workers look for requested redeliveries)"
                    .into(),
            ));
        }
        Ok(())
    }
}
