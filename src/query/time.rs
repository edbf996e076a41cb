//! `--since`/`--until` values: an RFC 3339 time, or a duration back from now.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};

/// `15m`, `2h`, `7d` (before `now`), or an RFC 3339 time with any offset.
pub(crate) fn parse_bound(text: &str, now: SystemTime) -> Result<SystemTime, String> {
    let text = text.trim();
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(SystemTime::from(time.with_timezone(&Utc)));
    }
    let looks_like_time = text.len() >= 10 && text.as_bytes()[4] == b'-';
    if !looks_like_time && humantime::parse_duration(text).is_ok() {
        // At most 100 years back: the time must stay one the store's dates (and
        // chrono, which turns it into one) can hold.
        let ago = crate::units::parse_duration(text)?;
        return now
            .checked_sub(ago)
            .filter(|time| representable(*time))
            .ok_or_else(|| format!("{text:?} reaches back before the start of the calendar"));
    }
    Err(format!(
        "{text:?} is neither an RFC 3339 time like 2024-05-01T10:00:00Z or \
         2024-05-01T12:00:00+02:00 nor a duration back from now like 15m, 2h or 7d"
    ))
}

/// Whether chrono can hold `time` (it panics converting one it cannot).
fn representable(time: SystemTime) -> bool {
    let since_epoch = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).ok(),
        Err(before) => i64::try_from(before.duration().as_secs())
            .ok()
            .map(|secs| -secs - 1),
    };
    since_epoch.is_some_and(|secs| DateTime::from_timestamp(secs, 0).is_some())
}

/// The stored form (RFC 3339 UTC, nine fraction digits), so bounds compare as text.
pub(crate) fn stored_form(time: SystemTime) -> String {
    DateTime::<Utc>::from(time)
        .format("%Y-%m-%dT%H:%M:%S%.9fZ")
        .to_string()
}

/// `time` as PostgreSQL reads a timestamptz (to the microsecond), when it is one
/// PostgreSQL holds and RFC 3339 writes (years 1 to 9999).
pub(crate) fn postgres_form(time: SystemTime) -> Option<String> {
    const YEAR_1: i64 = -62_135_596_800;
    const YEAR_10000: i64 = 253_402_300_800;
    let seconds = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).ok()?,
        Err(before) => -i64::try_from(before.duration().as_secs()).ok()? - 1,
    };
    if !(YEAR_1..YEAR_10000 - 1).contains(&seconds) {
        return None;
    }
    Some(
        DateTime::<Utc>::from(time)
            .format("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string(),
    )
}

/// Reads a stored time back; `None` if the text is not RFC 3339.
pub(crate) fn from_stored(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A bucket width in whole seconds (at least one).
pub(crate) fn bucket_seconds(width: Duration) -> Result<i64, String> {
    match i64::try_from(width.as_secs()) {
        Ok(secs) if secs >= 1 && width.subsec_nanos() == 0 => Ok(secs),
        _ => Err(format!(
            "the bucket width must be a whole number of seconds, at least 1s (got {})",
            humantime::format_duration(width)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_converted_to_utc_in_the_stored_form() {
        let t = parse_bound("2024-05-01T12:00:00.5+02:00", SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(stored_form(t), "2024-05-01T10:00:00.500000000Z");
    }

    #[test]
    fn durations_count_back_from_now() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10 * 86_400);
        let t = parse_bound("7d", now).unwrap();
        assert_eq!(stored_form(t), "1970-01-04T00:00:00.000000000Z");
        assert_eq!(
            stored_form(parse_bound("15m", now).unwrap()),
            "1970-01-10T23:45:00.000000000Z"
        );
    }

    #[test]
    fn nonsense_is_refused_with_both_accepted_forms_named() {
        for bad in [
            "yesterday",
            "2024-05-01",
            "2024-13-01T00:00:00Z",
            "15",
            "'; DROP TABLE events; --",
        ] {
            let error = parse_bound(bad, SystemTime::now()).unwrap_err();
            assert!(
                error.contains("RFC 3339") && error.contains("15m"),
                "{bad}: {error}"
            );
        }
    }

    /// Durations humantime takes can reach far beyond what a date holds.
    #[test]
    fn huge_durations_are_refused_with_a_message() {
        let now = SystemTime::now();
        for huge in ["1000000y", "1000000000y", "101y"] {
            let error = parse_bound(huge, now).unwrap_err();
            assert!(error.contains("more than 100 years"), "{huge}: {error}");
        }
        assert!(parse_bound("100y", now).is_ok());
    }

    #[test]
    fn buckets_are_whole_seconds() {
        assert_eq!(bucket_seconds(Duration::from_secs(3600)), Ok(3600));
        assert!(bucket_seconds(Duration::from_millis(1500)).is_err());
        assert!(bucket_seconds(Duration::ZERO).is_err());
    }
}
