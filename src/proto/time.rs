//! Timestamp renderings. Dates are computed here rather than through chrono so that
//! every `i64` second count renders (chrono's range is narrower than protobuf's).

use std::fmt::Write as _;

use prost_types::Timestamp;

/// A timestamp split into UTC calendar fields, with out-of-range nanos carried into
/// the seconds the way Go's `time.Unix` does.
pub(super) struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
}

impl Civil {
    pub(super) fn from_timestamp(ts: &Timestamp) -> Self {
        let nanos = i64::from(ts.nanos);
        let secs = ts.seconds.saturating_add(nanos.div_euclid(1_000_000_000));
        let nanos = nanos.rem_euclid(1_000_000_000) as u32;
        let days = secs.div_euclid(86_400);
        let tod = secs.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        Self {
            year,
            month,
            day,
            hour: tod / 3600,
            minute: tod / 60 % 60,
            second: tod % 60,
            nanos,
        }
    }

    /// The year as Go's time package prints it: at least four digits, sign first.
    pub(super) fn year_string(&self) -> String {
        let sign = if self.year < 0 { "-" } else { "" };
        format!("{sign}{:04}", self.year.unsigned_abs())
    }
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian, year 0 exists),
/// exact for the whole `i64` day range that `i64` seconds can produce.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Go's `time.Time.String()` for a UTC time, which is how `ctr events` prints the
/// envelope timestamp: "2017-07-28 22:19:51.78944874 +0000 UTC".
pub(crate) fn go_time_string(ts: &Timestamp) -> String {
    let c = Civil::from_timestamp(ts);
    let mut out = format!(
        "{}-{:02}-{:02} {:02}:{:02}:{:02}",
        c.year_string(),
        c.month,
        c.day,
        c.hour,
        c.minute,
        c.second
    );
    if c.nanos != 0 {
        let frac = format!("{:09}", c.nanos);
        let _ = write!(out, ".{}", frac.trim_end_matches('0'));
    }
    out.push_str(" +0000 UTC");
    out
}

/// RFC 3339 in UTC with a fixed nine-digit fraction, so stored values sort as text.
pub(crate) fn rfc3339_nanos(ts: &Timestamp) -> String {
    let c = Civil::from_timestamp(ts);
    format!(
        "{}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        c.year_string(),
        c.month,
        c.day,
        c.hour,
        c.minute,
        c.second,
        c.nanos
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(seconds: i64, nanos: i32) -> Timestamp {
        Timestamp { seconds, nanos }
    }

    #[test]
    fn go_time_string_trims_the_fraction() {
        assert_eq!(
            go_time_string(&ts(1_501_280_391, 789_448_740)),
            "2017-07-28 22:19:51.78944874 +0000 UTC"
        );
        assert_eq!(
            go_time_string(&ts(1_714_557_600, 123_456_789)),
            "2024-05-01 10:00:00.123456789 +0000 UTC"
        );
        assert_eq!(
            go_time_string(&ts(1_714_557_600, 500_000_000)),
            "2024-05-01 10:00:00.5 +0000 UTC"
        );
    }

    #[test]
    fn go_time_string_without_fraction_has_no_dot() {
        assert_eq!(
            go_time_string(&ts(1_714_557_600, 0)),
            "2024-05-01 10:00:00 +0000 UTC"
        );
        assert_eq!(go_time_string(&ts(0, 0)), "1970-01-01 00:00:00 +0000 UTC");
    }

    #[test]
    fn go_time_string_before_the_epoch() {
        assert_eq!(go_time_string(&ts(-1, 0)), "1969-12-31 23:59:59 +0000 UTC");
        assert_eq!(
            go_time_string(&ts(-1, 500_000_000)),
            "1969-12-31 23:59:59.5 +0000 UTC"
        );
        // Negative nanos borrow from the seconds, as Go's time.Unix does.
        assert_eq!(
            go_time_string(&ts(0, -1)),
            "1969-12-31 23:59:59.999999999 +0000 UTC"
        );
        // containerd 1.6 sends a zero Go time as this value.
        assert_eq!(
            go_time_string(&ts(-62_135_596_800, 0)),
            "0001-01-01 00:00:00 +0000 UTC"
        );
        assert_eq!(
            go_time_string(&ts(-62_135_596_800 - 366 * 86_400, 0)),
            "0000-01-01 00:00:00 +0000 UTC"
        );
        assert_eq!(
            go_time_string(&ts(-62_135_596_800 - 366 * 86_400 - 1, 0)),
            "-0001-12-31 23:59:59 +0000 UTC"
        );
    }

    #[test]
    fn go_time_string_leap_day_and_extremes_do_not_panic() {
        assert_eq!(
            go_time_string(&ts(951_782_400, 0)),
            "2000-02-29 00:00:00 +0000 UTC"
        );
        let _ = go_time_string(&ts(i64::MAX, i32::MAX));
        let _ = go_time_string(&ts(i64::MIN, i32::MIN));
    }

    #[test]
    fn rfc3339_always_has_nine_digits() {
        assert_eq!(
            rfc3339_nanos(&ts(1_714_557_600, 123_456_789)),
            "2024-05-01T10:00:00.123456789Z"
        );
        assert_eq!(rfc3339_nanos(&ts(0, 0)), "1970-01-01T00:00:00.000000000Z");
    }
}
