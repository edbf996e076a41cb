//! One writer of the gateway's TOML config for every test: tables added in the order a
//! test names them, then written where the test's gateway reads it. Each piece is TOML
//! as the docs show it, so a test reads like the config it runs.

use std::path::{Path, PathBuf};

/// A config under construction; `write*` puts it on disk.
#[derive(Clone, Default)]
pub struct Config {
    text: String,
}

impl Config {
    pub fn new() -> Config {
        Config::default()
    }

    /// TOML exactly as given: a table (`[spool]`, `[admin]`...), top-level keys, or
    /// text that must not parse. Byte for byte, so errors name the lines a test expects.
    pub fn toml(mut self, text: &str) -> Config {
        self.text.push_str(text);
        self
    }

    /// A blank line before a new table, unless it is the first thing in the file.
    fn table(mut self, header: &str) -> Config {
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        self.text.push_str(header);
        self.text.push('\n');
        self
    }

    /// A `[[forwarder]]` of `kind`; `extra` holds its other keys, one a line. Ends
    /// with a newline, so whatever a test appends starts a line of its own.
    pub fn forwarder(self, name: &str, kind: &str, extra: &str) -> Config {
        let end = if extra.is_empty() || extra.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        self.table("[[forwarder]]").toml(&format!(
            "name = \"{name}\"\nkind = \"{kind}\"\n{extra}{end}"
        ))
    }

    /// A `file` forwarder writing `path` (relative to the data directory).
    pub fn file(self, name: &str, path: &str, extra: &str) -> Config {
        self.forwarder(name, "file", &format!("path = \"{path}\"\n{extra}"))
    }

    /// A `sqlite` forwarder storing in `path` (relative to the data directory).
    pub fn sqlite(self, name: &str, path: &str, extra: &str) -> Config {
        self.forwarder(name, "sqlite", &format!("path = \"{path}\"\n{extra}"))
    }

    /// A `kafka` forwarder producing to `topic`, created with `partitions` partitions
    /// on a single broker if it is missing (tansu starts with none).
    pub fn kafka(
        self,
        name: &str,
        brokers: &str,
        topic: &str,
        partitions: u32,
        extra: &str,
    ) -> Config {
        self.forwarder(
            name,
            "kafka",
            &format!(
                "brokers = \"{brokers}\"\ntopic = \"{topic}\"\ncreate_topic = true\n\
                 partitions = {partitions}\nreplication_factor = 1\n{extra}"
            ),
        )
    }

    /// An `[[upstream]]` subscribed to the containerd at `address`, reconnecting fast.
    /// `extra` holds its other keys, one a line.
    pub fn upstream(self, name: &str, address: &str, extra: &str) -> Config {
        let extra = match extra {
            "" => String::new(),
            keys => format!("{}\n", keys.trim_end_matches('\n')),
        };
        self.table("[[upstream]]").toml(&format!(
            "name = \"{name}\"\naddress = \"{address}\"\n{extra}\
             reconnect = {{ initial = \"50ms\", max = \"1s\" }}\n"
        ))
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Writes the config to `path`, returned for `--config`.
    pub fn write_to(&self, path: &Path) -> PathBuf {
        std::fs::write(path, &self.text)
            .unwrap_or_else(|e| panic!("write the config {}: {e}", path.display()));
        path.to_path_buf()
    }

    /// Writes `eventgate.toml` in `dir`, returned for `--config`.
    pub fn write(&self, dir: &Path) -> String {
        super::path_str(&self.write_to(&dir.join("eventgate.toml"))).to_owned()
    }
}
