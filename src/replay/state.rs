//! The progress of one replay, kept in a small JSON file so that an interrupted or
//! failed replay resumes where it stopped, and a finished one is not sent twice.
//!
//! One file per replay, named after a hash of what makes a replay "the same
//! command": the store's canonical path, the target and the selection as the command
//! line gave it (`--since 1h` as the text `1h`, not the time it meant). Relative
//! bounds are resolved once, at the first run, and kept here with the upper row
//! bound, so a resumed run sends exactly the rest of what the first run selected.
//!
//! The file is rewritten atomically (a temporary file, synced, renamed over it) after
//! every acknowledged batch: a crash leaves the old or the new version, never a torn
//! one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ReplayError;
use crate::query::time::stored_form;

/// Bumped when the file's meaning changes; other versions are refused.
const VERSION: u32 = 1;

/// What is saved between runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct State {
    pub version: u32,
    /// The audit store, canonical.
    pub store: PathBuf,
    /// The target, as people read it.
    pub target: String,
    /// The selection as given on the command line.
    pub filters: Vec<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    /// `since`/`until` as resolved at the first run (RFC 3339, UTC).
    pub since_at: Option<String>,
    pub until_at: Option<String>,
    /// The last row_id in the store when the replay started: rows stored later are
    /// not part of it.
    pub up_to: i64,
    /// Events selected in `(0, up_to]`.
    pub total: u64,
    /// The last row_id whose batch was acknowledged (0: none yet).
    pub after: i64,
    /// Events acknowledged by the target.
    pub sent: u64,
    /// Selected events the forwarder's own filters leave out (never sent).
    pub skipped: u64,
    /// Selected events of eventgate's own that the target would refuse (never
    /// sent). Absent from files written before it was counted: none were skipped.
    #[serde(default)]
    pub own_skipped: u64,
    pub started_at: String,
    pub updated_at: String,
    pub completed_at: Option<String>,
}

impl State {
    pub(crate) fn new(identity: &Identity, up_to: i64, total: u64) -> Self {
        let now = stored_form(SystemTime::now());
        Self {
            version: VERSION,
            store: identity.store.clone(),
            target: identity.target.clone(),
            filters: identity.filters.clone(),
            since: identity.since.clone(),
            until: identity.until.clone(),
            since_at: identity.since_at.map(stored_form),
            until_at: identity.until_at.map(stored_form),
            up_to,
            total,
            after: 0,
            sent: 0,
            skipped: 0,
            own_skipped: 0,
            started_at: now.clone(),
            updated_at: now,
            completed_at: None,
        }
    }

    /// Events done: sent or skipped.
    pub(crate) fn done(&self) -> u64 {
        self.sent + self.skipped + self.own_skipped
    }
}

/// What names a replay: everything that, changed, makes it a different one.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub store: PathBuf,
    pub target: String,
    /// Part of the file name, so a listing of the directory says what is what.
    pub slug: String,
    pub filters: Vec<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub since_at: Option<SystemTime>,
    pub until_at: Option<SystemTime>,
}

impl Identity {
    /// `<slug>-<first 16 hex digits of SHA-256 over the identity>.json`
    pub(crate) fn file_name(&self) -> String {
        let mut hash = Sha256::new();
        let store = self.store.to_string_lossy();
        let mut fields = vec![store.as_ref(), self.target.as_str()];
        fields.push(self.since.as_deref().unwrap_or("\u{1}"));
        fields.push(self.until.as_deref().unwrap_or("\u{1}"));
        fields.extend(self.filters.iter().map(String::as_str));
        for field in fields {
            // Length-prefixed, so no two different lists hash the same bytes.
            hash.update((field.len() as u64).to_le_bytes());
            hash.update(field.as_bytes());
        }
        let digest = hash.finalize();
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}-{hex}.json", self.slug)
    }
}

/// A state and where it lives.
#[derive(Debug)]
pub(crate) struct StateFile {
    pub path: PathBuf,
    pub state: State,
}

impl StateFile {
    /// The saved state at `path`, if any. A file that cannot be read or parsed is an
    /// error that names it: guessing would risk sending everything twice.
    pub(crate) fn load(path: &Path) -> Result<Option<State>, ReplayError> {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ReplayError::StateIo {
                    path: path.to_path_buf(),
                    what: "cannot read",
                    source,
                });
            }
        };
        let state: State =
            serde_json::from_slice(&text).map_err(|source| ReplayError::StateCorrupt {
                path: path.to_path_buf(),
                source,
            })?;
        if state.version != VERSION {
            return Err(ReplayError::StateVersion {
                path: path.to_path_buf(),
                found: state.version,
            });
        }
        Ok(Some(state))
    }

    /// Writes the state atomically: a synced temporary file renamed over the old one,
    /// then the directory synced so the rename itself survives a power loss. Blocking.
    pub(crate) fn save(&mut self) -> Result<(), ReplayError> {
        self.state.updated_at = stored_form(SystemTime::now());
        let io = |what: &'static str| {
            let path = self.path.clone();
            move |source| ReplayError::StateIo { path, what, source }
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        crate::fsmode::create_dir_all(dir).map_err(io("cannot create the directory of"))?;
        let tmp = self.path.with_extension("json.tmp");
        let mut text =
            serde_json::to_vec_pretty(&self.state).map_err(|e| ReplayError::StateIo {
                path: self.path.clone(),
                what: "cannot encode",
                source: std::io::Error::other(e),
            })?;
        text.push(b'\n');
        let mut file = crate::fsmode::create_file(&tmp).map_err(io("cannot write"))?;
        file.write_all(&text).map_err(io("cannot write"))?;
        file.sync_all().map_err(io("cannot sync"))?;
        drop(file);
        std::fs::rename(&tmp, &self.path).map_err(io("cannot replace"))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("cannot sync the directory of"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            store: "/var/lib/eventgate/audit.db".into(),
            target: "forwarder \"kafka\" of /etc/eventgate.toml".into(),
            slug: "forwarder-kafka".into(),
            filters: vec!["topic==\"/tasks/exit\"".into()],
            since: Some("1h".into()),
            until: None,
            since_at: Some(SystemTime::UNIX_EPOCH),
            until_at: None,
        }
    }

    #[test]
    fn the_name_depends_on_the_selection_as_written_not_on_when_it_ran() {
        let a = identity();
        let mut b = identity();
        b.since_at = Some(SystemTime::now());
        assert_eq!(a.file_name(), b.file_name());
        assert!(a.file_name().starts_with("forwarder-kafka-"));
        let mut c = identity();
        c.since = Some("2h".into());
        assert_ne!(a.file_name(), c.file_name());
        // Splitting one filter into two is a different selection (AND vs OR).
        let mut d = identity();
        d.filters = vec!["topic==\"/tasks/exit\"".into(), String::new()];
        assert_ne!(a.file_name(), d.file_name());
        let mut e = identity();
        e.until = Some("1h".into());
        e.since = None;
        assert_ne!(a.file_name(), e.file_name());
    }

    #[test]
    fn saved_state_loads_back_and_damage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replay").join("x.json");
        assert_eq!(StateFile::load(&path).unwrap(), None);
        let mut file = StateFile {
            path: path.clone(),
            state: State::new(&identity(), 42, 7),
        };
        file.state.after = 40;
        file.state.sent = 5;
        file.save().unwrap();
        let loaded = StateFile::load(&path).unwrap().unwrap();
        assert_eq!(loaded, file.state);
        assert!(!path.with_extension("json.tmp").exists());

        std::fs::write(&path, b"{\"version\":1,").unwrap();
        let error = StateFile::load(&path).unwrap_err().to_string();
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert!(error.contains("--restart"), "{error}");
    }
}
