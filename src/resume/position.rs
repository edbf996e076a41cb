//! Where a resumed subscription starts, judged against what eventgate still keeps.
//! Pure: the caller reads the spool and the store and passes what they hold.

use std::time::SystemTime;

use thiserror::Error;

/// Where the client asked to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Live events only, as containerd's Subscribe.
    Live,
    /// Everything after the last seq the client received.
    After(u64),
    /// Stored events whose envelope timestamp is at or after this.
    Since(SystemTime),
}

/// What the spool and the store hold, as far as the position is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The lowest seq still held by the spool or the store; `next_seq` when neither
    /// holds anything.
    pub(crate) oldest_seq: u64,
    /// That event's envelope timestamp (RFC 3339), when known.
    pub(crate) oldest_time: Option<SystemTime>,
    /// The seq the next accepted event will get.
    pub(crate) next_seq: u64,
    /// The gateway's clock when the position is resolved.
    pub(crate) now: SystemTime,
}

/// A position eventgate cannot serve exactly.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub(crate) enum PositionError {
    #[error(
        "after_seq {after} is older than anything eventgate keeps: the oldest kept event is seq \
         {oldest_seq}{}; events {first_lost}..={last_lost} are gone (spool segments released, \
         audit store retention); resume with after_seq {resume} to continue from the oldest \
         kept event: out of range",
        at(*oldest_time), first_lost = after + 1, last_lost = oldest_seq - 1, resume = oldest_seq - 1
    )]
    AfterTooOld {
        after: u64,
        oldest_seq: u64,
        oldest_time: Option<SystemTime>,
    },
    #[error(
        "since {} is older than anything eventgate keeps: the oldest kept event is seq \
         {oldest_seq}{} and older ones were discarded: out of range",
        humantime::format_rfc3339_nanos(*since), at(*oldest_time)
    )]
    SinceTooOld {
        since: SystemTime,
        oldest_seq: u64,
        oldest_time: Option<SystemTime>,
    },
    #[error(
        "after_seq {after} has not been given out yet (the newest event is seq {newest}); a \
         position from another gateway or data directory cannot be resumed: invalid argument"
    )]
    AfterInFuture { after: u64, newest: u64 },
}

impl PositionError {
    pub(crate) fn status(&self) -> tonic::Status {
        match self {
            PositionError::AfterTooOld { .. } | PositionError::SinceTooOld { .. } => {
                tonic::Status::out_of_range(self.to_string())
            }
            PositionError::AfterInFuture { .. } => {
                tonic::Status::invalid_argument(self.to_string())
            }
        }
    }

    /// A low-cardinality label for the refusal counter.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            PositionError::AfterTooOld { .. } | PositionError::SinceTooOld { .. } => "out_of_range",
            PositionError::AfterInFuture { .. } => "future_position",
        }
    }
}

fn at(time: Option<SystemTime>) -> String {
    time.map(|t| format!(" at {}", humantime::format_rfc3339_nanos(t)))
        .unwrap_or_default()
}

/// The first seq to send from the store or spool. `first_since` answers the lowest
/// kept seq whose timestamp is at or after a time (`None`: unknown, start at the
/// oldest kept event and let the time filter skip what is older).
///
/// - `After(a)`: starts at `a + 1`. Older than the oldest kept event: refused, never
///   served from a later point. A seq not given out yet: refused (the client holds a
///   position of another gateway, or of a data directory since replaced).
/// - `Since(t)`: refused when events older than the oldest kept one were discarded
///   (the oldest kept seq is above 1) and `t` is before it, since what was
///   discarded may have been at or after `t`. A `t` in the future starts at the
///   next event (nothing stored can be at or after it), as `docker events --since`
///   with a future time prints only what comes.
/// - `Live`: the next event.
pub(crate) fn resolve(
    start: Start,
    kept: &Kept,
    first_since: impl FnOnce(SystemTime) -> Option<u64>,
) -> Result<u64, PositionError> {
    match start {
        Start::Live => Ok(kept.next_seq),
        Start::After(after) => {
            if after >= kept.next_seq {
                return Err(PositionError::AfterInFuture {
                    after,
                    newest: kept.next_seq.saturating_sub(1),
                });
            }
            if after.saturating_add(1) < kept.oldest_seq {
                return Err(PositionError::AfterTooOld {
                    after,
                    oldest_seq: kept.oldest_seq,
                    oldest_time: kept.oldest_time,
                });
            }
            Ok(after + 1)
        }
        Start::Since(since) => {
            let discarded = kept.oldest_seq > 1;
            let before_oldest = kept.oldest_time.is_none_or(|oldest| since < oldest);
            if discarded && before_oldest && since < kept.now {
                return Err(PositionError::SinceTooOld {
                    since,
                    oldest_seq: kept.oldest_seq,
                    oldest_time: kept.oldest_time,
                });
            }
            if since >= kept.now {
                return Ok(kept.next_seq);
            }
            // Without an answer from the store, every kept event is looked at.
            Ok(first_since(since)
                .unwrap_or(kept.oldest_seq)
                .clamp(kept.oldest_seq.min(kept.next_seq), kept.next_seq))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn kept(oldest_seq: u64, oldest_secs: Option<u64>, next_seq: u64) -> Kept {
        Kept {
            oldest_seq,
            oldest_time: oldest_secs.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
            next_seq,
            now: secs(5000),
        }
    }

    fn secs(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn after_starts_at_the_next_seq_and_the_oldest_kept_is_the_limit() {
        let k = kept(100, Some(1000), 500);
        assert_eq!(resolve(Start::After(99), &k, |_| None), Ok(100));
        assert_eq!(resolve(Start::After(499), &k, |_| None), Ok(500));
        let err = resolve(Start::After(98), &k, |_| None).unwrap_err();
        assert_eq!(err.status().code(), tonic::Code::OutOfRange);
        let text = err.to_string();
        assert!(
            text.contains("oldest kept event is seq 100 at 1970-01-01T00:16:40"),
            "{text}"
        );
        assert!(text.contains("resume with after_seq 99"), "{text}");
    }

    #[test]
    fn after_a_seq_not_given_out_is_refused_as_invalid() {
        let err = resolve(Start::After(500), &kept(1, None, 500), |_| None).unwrap_err();
        assert_eq!(err.status().code(), tonic::Code::InvalidArgument);
        assert!(err.to_string().contains("newest event is seq 499"));
    }

    #[test]
    fn after_zero_is_the_beginning_when_nothing_was_discarded() {
        assert_eq!(
            resolve(Start::After(0), &kept(1, Some(5), 10), |_| None),
            Ok(1)
        );
        // Nothing kept and nothing ever published: the beginning is the next event.
        assert_eq!(resolve(Start::After(0), &kept(1, None, 1), |_| None), Ok(1));
    }

    #[test]
    fn since_before_what_was_discarded_is_refused_but_not_when_nothing_was() {
        let err = resolve(Start::Since(secs(10)), &kept(100, Some(1000), 500), |_| {
            Some(100)
        })
        .unwrap_err();
        assert_eq!(err.status().code(), tonic::Code::OutOfRange);
        assert!(err.to_string().contains("seq 100"));
        // Nothing discarded: the oldest kept is the first event ever.
        assert_eq!(
            resolve(Start::Since(secs(10)), &kept(1, Some(1000), 500), |_| Some(
                1
            )),
            Ok(1)
        );
        // The store cannot say: from the oldest kept on.
        assert_eq!(
            resolve(
                Start::Since(secs(2000)),
                &kept(100, Some(1000), 500),
                |_| None
            ),
            Ok(100)
        );
        // After the oldest kept event: served from the first event since.
        assert_eq!(
            resolve(
                Start::Since(secs(2000)),
                &kept(100, Some(1000), 500),
                |_| Some(320)
            ),
            Ok(320)
        );
    }

    #[test]
    fn since_in_the_future_starts_at_the_next_event() {
        assert_eq!(
            resolve(
                Start::Since(secs(9999)),
                &kept(100, Some(1000), 500),
                |_| None
            ),
            Ok(500)
        );
        // Even when nothing is kept at all.
        assert_eq!(
            resolve(Start::Since(secs(9999)), &kept(500, None, 500), |_| None),
            Ok(500)
        );
    }

    #[test]
    fn since_is_refused_when_everything_was_discarded() {
        let err = resolve(Start::Since(secs(10)), &kept(500, None, 500), |_| None).unwrap_err();
        assert_eq!(err.status().code(), tonic::Code::OutOfRange);
    }

    #[test]
    fn live_is_the_next_event() {
        assert_eq!(
            resolve(Start::Live, &kept(100, None, 500), |_| None),
            Ok(500)
        );
    }
}
