//! Units every settings module speaks: sizes ("64MiB") and durations ("5m") as the
//! configuration file writes them, and the same quantities as people read them in
//! readiness reasons and `eventgate status`. A leaf: it depends on nothing in the crate,
//! so that every module's settings can use it without reaching up to `config`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest duration any setting or flag takes. Longer ones are surely a mistake,
/// and would overflow the clocks they are added to.
/// (humantime's year: 365.25 days.)
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// Parses "250ms", "10s", "5m", "1h 30m" (humantime syntax), at most 100 years.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| {
        format!("{text:?} is not a duration like \"500ms\", \"10s\" or \"5m\": {e}")
    })?;
    if duration > MAX_DURATION {
        return Err(format!(
            "{text:?} is more than 100 years, the longest duration eventgate takes"
        ));
    }
    Ok(duration)
}

/// Durations as humantime text ("250ms", "30s", "5m") in both directions.
pub(crate) mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(serde::de::Error::custom)
    }

    pub(crate) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*value).to_string())
    }
}

/// A size in bytes, written as an integer or as text like "64MiB", "512KiB", "1GB".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: u64 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a size like 1048576, \"512KiB\" or \"64MiB\""))?;
        let factor: u64 = match unit.trim() {
            "" | "B" => 1,
            "KB" | "kB" => 1000,
            "KiB" => 1 << 10,
            "MB" => 1000 * 1000,
            "MiB" => 1 << 20,
            "GB" => 1000 * 1000 * 1000,
            "GiB" => 1 << 30,
            other => {
                return Err(format!(
                    "{text:?}: unknown unit {other:?} (use B, KB, KiB, MB, MiB, GB or GiB)"
                ));
            }
        };
        number
            .checked_mul(factor)
            .map(ByteSize)
            .ok_or_else(|| format!("{text:?} is too large"))
    }

    pub fn get(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if n >= size && n.is_multiple_of(size) {
                return write!(f, "{}{unit}", n / size);
            }
        }
        write!(f, "{n}B")
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(text) => ByteSize::parse(&text).map_err(serde::de::Error::custom),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// Whole seconds (milliseconds below one second), as humantime writes them.
pub(crate) fn human_duration(d: Duration) -> String {
    let d = if d >= Duration::from_secs(1) {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(d.as_millis() as u64)
    };
    humantime::format_duration(d).to_string()
}

/// Bytes with a binary unit, one decimal.
pub(crate) fn human_bytes(n: u64) -> String {
    let units = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in units {
        if n >= size {
            return format!("{:.1}{unit}", n as f64 / size as f64);
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(ByteSize::parse("64MiB"), Ok(ByteSize(64 << 20)));
        assert_eq!(ByteSize::parse("1000"), Ok(ByteSize(1000)));
        assert_eq!(ByteSize::parse("2 KB"), Ok(ByteSize(2000)));
        assert!(
            ByteSize::parse("12 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(ByteSize::parse("MiB").is_err());
        assert!(
            ByteSize::parse("99999999999999GiB")
                .unwrap_err()
                .contains("too large")
        );
        assert_eq!(ByteSize(64 << 20).to_string(), "64MiB");
        assert_eq!(ByteSize(1500).to_string(), "1500B");
    }

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(3 << 30), "3.0GiB");
        assert_eq!(human_duration(Duration::from_millis(61_500)), "1m 1s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
    }
}
