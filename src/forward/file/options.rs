//! The `file` kind's keys, parsed one by one so that every error names its key.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::forward::{BuildError, Options};
use crate::units::ByteSize;

/// The line shape written to the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per event (see `crate::render::write_event_json`).
    Jsonl,
    /// The `ctr events` line; undecodable payloads are kept as base64 (see
    /// [`crate::render::ctr_raw_line`]).
    Ctr,
}

/// When written lines are forced to stable storage. Whatever the mode, the
/// forwarder's spool cursor moves only at the pipeline's checkpoints (`checkpoint`
/// in the forwarder's table), after what they cover is synced (except with `never`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fsync {
    /// At the pipeline's checkpoints only: one fdatasync for many batches.
    Checkpoint,
    /// After every line.
    Always,
    /// Once per batch, before the batch is acknowledged.
    Batch,
    /// At most once per `fsync_interval`, and at checkpoints.
    Interval,
    /// Never; the kernel writes back when it likes. A power loss can lose lines the
    /// cursor has passed.
    Never,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FileOptions {
    /// As configured; relative paths are resolved under the data directory.
    pub path: PathBuf,
    pub format: Format,
    /// Rotate before a line would make the active file larger than this; 0 = never.
    pub max_size: u64,
    /// Rotate once the first line of the active file is this old; zero = never.
    pub max_age: Duration,
    /// Rotated files kept; 0 = keep all.
    pub keep: usize,
    pub compress: bool,
    pub fsync: Fsync,
    pub fsync_interval: Duration,
}

impl Default for FileOptions {
    fn default() -> Self {
        Self {
            path: PathBuf::from("events.jsonl"),
            format: Format::Jsonl,
            max_size: 100 << 20,
            max_age: Duration::ZERO,
            keep: 10,
            compress: false,
            fsync: Fsync::Checkpoint,
            fsync_interval: Duration::from_secs(1),
        }
    }
}

const KEYS: &str = "path, format, max_size, max_age, keep, compress, fsync, fsync_interval";

impl FileOptions {
    pub(crate) fn parse(options: &Options) -> Result<Self, BuildError> {
        let mut parsed = Self::default();
        for (key, value) in options {
            let bad = |problem: String| BuildError::Options(format!("`{key}`: {problem}"));
            match key.as_str() {
                "path" => {
                    let path: String = typed(value).map_err(bad)?;
                    if path.is_empty() {
                        return Err(bad("must not be empty".into()));
                    }
                    parsed.path = PathBuf::from(path);
                }
                "format" => {
                    parsed.format = match typed::<String>(value).map_err(bad)?.as_str() {
                        "jsonl" => Format::Jsonl,
                        "ctr" => Format::Ctr,
                        other => {
                            return Err(bad(format!("{other:?} is not \"jsonl\" or \"ctr\"")));
                        }
                    }
                }
                "max_size" => parsed.max_size = typed::<ByteSize>(value).map_err(bad)?.0,
                "max_age" => parsed.max_age = duration(value).map_err(bad)?,
                "keep" => {
                    let keep: i64 = typed(value).map_err(bad)?;
                    parsed.keep = usize::try_from(keep)
                        .map_err(|_| bad(format!("{keep} is negative (0 keeps all)")))?;
                }
                "compress" => parsed.compress = typed(value).map_err(bad)?,
                "fsync" => {
                    parsed.fsync = match typed::<String>(value).map_err(bad)?.as_str() {
                        "checkpoint" => Fsync::Checkpoint,
                        "always" => Fsync::Always,
                        "batch" => Fsync::Batch,
                        "interval" => Fsync::Interval,
                        "never" => Fsync::Never,
                        other => {
                            return Err(bad(format!(
                                "{other:?} is not \"checkpoint\", \"always\", \"batch\", \"interval\" or \"never\""
                            )));
                        }
                    }
                }
                "fsync_interval" => {
                    parsed.fsync_interval = duration(value).map_err(bad)?;
                    if parsed.fsync_interval.is_zero() {
                        return Err(bad("must be more than 0s".into()));
                    }
                }
                _ => {
                    return Err(BuildError::Options(format!(
                        "unknown key `{key}` for a file forwarder (known: {KEYS})"
                    )));
                }
            }
        }
        Ok(parsed)
    }
}

fn typed<T: DeserializeOwned>(value: &toml::Value) -> Result<T, String> {
    value
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| e.message().to_owned())
}

fn duration(value: &toml::Value) -> Result<Duration, String> {
    crate::units::parse_duration(&typed::<String>(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FileOptions, String> {
        let table: Options = toml::from_str(text).unwrap();
        FileOptions::parse(&table).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults() {
        let options = parse("").unwrap();
        assert_eq!(options, FileOptions::default());
        assert_eq!(options.max_size, 100 * 1024 * 1024);
        assert_eq!(options.keep, 10);
        assert_eq!(options.fsync, Fsync::Checkpoint);
    }

    #[test]
    fn every_key() {
        let options = parse(
            r#"
            path = "/var/log/eventgate/events.log"
            format = "ctr"
            max_size = "1MiB"
            max_age = "24h"
            keep = 3
            compress = true
            fsync = "interval"
            fsync_interval = "250ms"
            "#,
        )
        .unwrap();
        assert_eq!(
            options,
            FileOptions {
                path: "/var/log/eventgate/events.log".into(),
                format: Format::Ctr,
                max_size: 1 << 20,
                max_age: Duration::from_secs(86_400),
                keep: 3,
                compress: true,
                fsync: Fsync::Interval,
                fsync_interval: Duration::from_millis(250),
            }
        );
        assert_eq!(parse("max_size = 4096").unwrap().max_size, 4096);
    }

    #[test]
    fn errors_name_the_key() {
        for (text, key) in [
            (r#"max_size = "12 parsecs""#, "`max_size`"),
            (r#"max_age = "soon""#, "`max_age`"),
            (r#"keep = -1"#, "`keep`"),
            (r#"keep = "ten""#, "`keep`"),
            (r#"compress = "yes""#, "`compress`"),
            (r#"fsync = "sometimes""#, "`fsync`"),
            (r#"fsync_interval = "0s""#, "`fsync_interval`"),
            (r#"format = "xml""#, "`format`"),
            (r#"path = """#, "`path`"),
            (r#"paht = "x""#, "`paht`"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(key), "{text}: {error}");
        }
    }
}
