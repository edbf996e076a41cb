//! The files under `deploy/` as the deployment tests read them: the systemd unit's
//! `[Service]` keys.

use std::path::{Path, PathBuf};

/// A file under `deploy/`.
pub fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file)
}

/// `Key=Value` lines of the unit's `[Service]` section, in order.
pub fn service_keys(unit: &str) -> Vec<(String, String)> {
    let mut section = "";
    let mut keys = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]"
            && !line.starts_with('#')
            && let Some((key, value)) = line.split_once('=')
        {
            keys.push((key.to_owned(), value.to_owned()));
        }
    }
    keys
}

/// The value of `key` in `keys`; a unit without it fails the test.
pub fn value<'a>(keys: &'a [(String, String)], key: &str) -> &'a str {
    keys.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("the unit has no {key}="))
}
