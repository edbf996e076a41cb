//! `[exchange.limits]`: what one client may ask of the exchange, and how a refusal
//! looks on the wire. Every refusal has a precise message, the gRPC code a containerd
//! client would expect, and one count in `eventgate_limit_rejections_total{limit}`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tonic::{Code, Status};

use crate::units::ByteSize;

/// Room for the request wrapper around an envelope (ForwardRequest's tag and length
/// prefix): a request larger than `max_event_bytes` plus this cannot carry an
/// acceptable event, so it is refused before its body is read.
pub(crate) const REQUEST_OVERHEAD: usize = 64;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    /// Largest event accepted by Publish or Forward: the envelope as stored (topic,
    /// namespace, timestamp and payload), encoded.
    pub max_event_bytes: ByteSize,
    /// Most subscribers connected at once.
    pub max_subscribers: usize,
    /// Most filter strings in one Subscribe request.
    pub max_filters: usize,
    /// Longest filter string, in bytes.
    pub max_filter_bytes: usize,
    /// Most concurrent HTTP/2 streams (calls) on one client connection.
    pub max_streams_per_connection: u32,
    /// How long a Publish or Forward may take, waits for room included.
    #[serde(with = "crate::units::duration_text")]
    pub request_timeout: Duration,
    /// What the compiled regular expressions of one subscription's filters may take
    /// together (each one's compiled size plus its matching cache).
    pub max_regex_memory: ByteSize,
    /// The share of one CPU core, in percent, that matching subscribers' filters may
    /// take, all subscribers together; 100 leaves it unbounded.
    pub filter_cpu_percent: u32,
    /// Most client connections open at once, per listener (the unix socket and the
    /// TCP listener each).
    pub max_connections: usize,
    /// How long a TLS client may take to finish its handshake.
    #[serde(with = "crate::units::duration_text")]
    pub handshake_timeout: Duration,
    /// How long a call's request message may take to arrive.
    #[serde(with = "crate::units::duration_text")]
    pub body_timeout: Duration,
    /// How often an HTTP/2 ping checks that a quiet connection's client is still
    /// there; `0s` turns the pings off.
    #[serde(with = "crate::units::duration_text")]
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection is closed.
    #[serde(with = "crate::units::duration_text")]
    pub keepalive_timeout: Duration,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            max_event_bytes: ByteSize(1 << 20),
            max_subscribers: 1024,
            max_filters: 64,
            max_filter_bytes: 4096,
            max_streams_per_connection: 256,
            request_timeout: Duration::from_secs(30),
            max_regex_memory: ByteSize(8 << 20),
            filter_cpu_percent: 25,
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(20),
        }
    }
}

impl LimitSettings {
    /// Checks ranges; the error names the key.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let at_least_one = |key: &'static str, value: u64| {
            if value == 0 {
                Err((key, "must be at least 1".to_owned()))
            } else {
                Ok(())
            }
        };
        at_least_one("exchange.limits.max_event_bytes", self.max_event_bytes.0)?;
        // A spool record holds at most 16 MiB, its own header and the event's
        // source name included: anything larger would pass this check and then fail
        // at the spool with a less precise error.
        if self.max_event_bytes.0 > MAX_EVENT_BYTES {
            return Err((
                "exchange.limits.max_event_bytes",
                format!(
                    "{} is more than 15MiB, the largest event the spool stores",
                    self.max_event_bytes
                ),
            ));
        }
        at_least_one(
            "exchange.limits.max_subscribers",
            self.max_subscribers as u64,
        )?;
        at_least_one("exchange.limits.max_filters", self.max_filters as u64)?;
        at_least_one(
            "exchange.limits.max_filter_bytes",
            self.max_filter_bytes as u64,
        )?;
        at_least_one(
            "exchange.limits.max_streams_per_connection",
            self.max_streams_per_connection.into(),
        )?;
        let more_than_zero = |key: &'static str, value: Duration| {
            if value.is_zero() {
                Err((key, "must be more than 0s".to_owned()))
            } else {
                Ok(())
            }
        };
        more_than_zero("exchange.limits.request_timeout", self.request_timeout)?;
        // Less than one expression's matching cache would refuse every `~=` filter.
        if self.max_regex_memory.0 < MIN_REGEX_MEMORY {
            return Err((
                "exchange.limits.max_regex_memory",
                format!(
                    "{} is less than 128KiB, too little for one regular expression and its \
                     matching cache",
                    self.max_regex_memory
                ),
            ));
        }
        if !(1..=100).contains(&self.filter_cpu_percent) {
            return Err((
                "exchange.limits.filter_cpu_percent",
                format!(
                    "{} is not a share of one core from 1 to 100 (percent)",
                    self.filter_cpu_percent
                ),
            ));
        }
        at_least_one(
            "exchange.limits.max_connections",
            self.max_connections as u64,
        )?;
        more_than_zero("exchange.limits.handshake_timeout", self.handshake_timeout)?;
        more_than_zero("exchange.limits.body_timeout", self.body_timeout)?;
        if !self.keepalive_interval.is_zero() {
            more_than_zero("exchange.limits.keepalive_timeout", self.keepalive_timeout)?;
        }
        Ok(())
    }

    /// The largest Publish or Forward request message read: any request above it
    /// cannot hold an acceptable event, and is refused with `Limit::EventBytes`'s
    /// message from its length prefix alone.
    pub fn max_request_bytes(&self) -> usize {
        self.max_event_bytes.get().saturating_add(REQUEST_OVERHEAD)
    }
}

/// The smallest `max_regex_memory`: one small expression and its matching cache.
const MIN_REGEX_MEMORY: u64 = 128 << 10;

/// Which limit refused a call: the `limit` label of the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    EventBytes,
    Subscribers,
    Filters,
    FilterBytes,
    RegexMemory,
    RequestTimeout,
    BodyTimeout,
    Connections,
    HandshakeTimeout,
}

impl Limit {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Limit::EventBytes => "max_event_bytes",
            Limit::Subscribers => "max_subscribers",
            Limit::Filters => "max_filters",
            Limit::FilterBytes => "max_filter_bytes",
            Limit::RegexMemory => "max_regex_memory",
            Limit::RequestTimeout => "request_timeout",
            Limit::BodyTimeout => "body_timeout",
            Limit::Connections => "max_connections",
            Limit::HandshakeTimeout => "handshake_timeout",
        }
    }

    /// Limits on what a request *is* are INVALID_ARGUMENT: the same request will never
    /// succeed, as with containerd's own validation errors. A full gateway is
    /// RESOURCE_EXHAUSTED (it may have room later); a slow call DEADLINE_EXCEEDED.
    pub(crate) fn code(self) -> Code {
        match self {
            Limit::EventBytes | Limit::Filters | Limit::FilterBytes | Limit::RegexMemory => {
                Code::InvalidArgument
            }
            Limit::Subscribers | Limit::Connections => Code::ResourceExhausted,
            Limit::RequestTimeout | Limit::BodyTimeout | Limit::HandshakeTimeout => {
                Code::DeadlineExceeded
            }
        }
    }

    /// The refusal as a client sees it, counted.
    pub(crate) fn reject(self, message: String) -> Status {
        self.count();
        tracing::debug!(limit = self.label(), %message, "call refused by a limit");
        Status::new(self.code(), message)
    }

    /// Counts one refusal (for refusals that are not a gRPC status, such as a
    /// connection closed at accept).
    pub(crate) fn count(self) {
        metrics::counter!("eventgate_limit_rejections_total", "limit" => self.label()).increment(1);
    }
}

/// The largest `max_event_bytes`: below the spool's record limit with room for the
/// record's header and source name.
pub(crate) const MAX_EVENT_BYTES: u64 = 15 << 20;

/// The message for an event (or a request) over `max_event_bytes`.
pub(crate) fn event_too_large(what: &str, size: usize, limit: usize) -> String {
    format!(
        "{what} is {size} bytes, more than the {limit} bytes exchange.limits.max_event_bytes \
         allows: invalid argument"
    )
}

/// Checks a Subscribe request's filters against the count and length limits.
pub(crate) fn check_filters(limits: &LimitSettings, filters: &[String]) -> Result<(), Status> {
    if filters.len() > limits.max_filters {
        return Err(Limit::Filters.reject(format!(
            "subscription has {} filters, more than the {} exchange.limits.max_filters allows: \
             invalid argument",
            filters.len(),
            limits.max_filters
        )));
    }
    if let Some((i, long)) = filters
        .iter()
        .enumerate()
        .find(|(_, f)| f.len() > limits.max_filter_bytes)
    {
        return Err(Limit::FilterBytes.reject(format!(
            "filter {} is {} bytes, more than the {} exchange.limits.max_filter_bytes allows: \
             invalid argument",
            i + 1,
            long.len(),
            limits.max_filter_bytes
        )));
    }
    Ok(())
}

/// The message for filters whose regular expressions need more than
/// `max_regex_memory`.
pub(crate) fn regex_memory(index: usize, limit: usize) -> String {
    format!(
        "the regular expressions of filter {} (with those of the filters before it) need more \
         than the {limit} bytes exchange.limits.max_regex_memory allows (compiled size plus \
         {} KiB of matching cache each): use fewer or simpler `~=` expressions: invalid argument",
        index + 1,
        crate::filter::RegexBudget::CACHE >> 10
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    #[test]
    fn defaults_validate_and_zero_is_refused_by_name() {
        LimitSettings::default().validate().unwrap();
        let zero = LimitSettings {
            max_subscribers: 0,
            ..LimitSettings::default()
        };
        assert_eq!(
            zero.validate().unwrap_err().0,
            "exchange.limits.max_subscribers"
        );
        let no_time = LimitSettings {
            request_timeout: Duration::ZERO,
            ..LimitSettings::default()
        };
        assert_eq!(
            no_time.validate().unwrap_err().0,
            "exchange.limits.request_timeout"
        );
    }

    /// An event the limit lets in must also fit a spool record, or it would be
    /// accepted here and then fail at the spool.
    #[test]
    fn the_largest_allowed_event_fits_a_spool_record() {
        let largest = LimitSettings {
            max_event_bytes: ByteSize(MAX_EVENT_BYTES),
            ..LimitSettings::default()
        };
        largest.validate().unwrap();
        let over = LimitSettings {
            max_event_bytes: ByteSize(MAX_EVENT_BYTES + 1),
            ..LimitSettings::default()
        };
        let (key, why) = over.validate().unwrap_err();
        assert_eq!(key, "exchange.limits.max_event_bytes");
        assert!(why.contains("largest event the spool stores"), "{why}");

        let envelope = testing::envelope()
            .at(0)
            .namespace(&"n".repeat(76))
            .topic(&format!("/{}", "t".repeat(254)))
            .raw(
                "containerd.events.TaskExit",
                vec![7; MAX_EVENT_BYTES as usize - 400],
            )
            .build();
        assert!(prost::Message::encoded_len(&envelope) as u64 <= MAX_EVENT_BYTES);
        let name: String = "u".repeat(256);
        let event = testing::event(u64::MAX / 2)
            .upstream(&name)
            .envelope(envelope)
            .build();
        let mut buf = Vec::new();
        assert!(crate::spool::record::encode(&event, &mut buf).is_ok());
    }

    #[test]
    fn filters_over_the_limits_are_invalid_arguments_naming_the_key() {
        let limits = LimitSettings {
            max_filters: 2,
            max_filter_bytes: 10,
            ..LimitSettings::default()
        };
        let three = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let status = check_filters(&limits, &three).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status
                .message()
                .contains("3 filters, more than the 2 exchange.limits.max_filters")
        );
        let long = vec!["a".to_owned(), "x".repeat(11)];
        let status = check_filters(&limits, &long).unwrap_err();
        assert!(
            status.message().contains("filter 2 is 11 bytes"),
            "{}",
            status.message()
        );
        check_filters(&limits, &["topic==\"/a\"".to_owned()]).unwrap_err();
        check_filters(&limits, &["namespace".to_owned()]).unwrap();
    }
}
