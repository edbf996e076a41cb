//! librdkafka's own logs and global errors, into `tracing` with the forwarder's name,
//! at most once per interval for each kind. A broker that is down makes librdkafka
//! report the same failure every few tens of milliseconds, for as long as it is down;
//! the events wait in the spool meanwhile, so one line per interval (with the number
//! of repeats it stands for) says everything.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::FutureProducer;
use tokio::sync::Notify;

/// The forwarder's producer type.
pub(super) type Producer = FutureProducer<LogContext>;

const INTERVAL: Duration = Duration::from_secs(10);
/// Kinds remembered at most; librdkafka's facilities and error codes are few.
const MAX_KINDS: usize = 256;

pub(super) struct LogContext {
    forwarder: Arc<str>,
    seen: Mutex<HashMap<String, (Instant, u64)>>,
    down: Arc<BrokersDown>,
    /// Values of secret properties: librdkafka's own texts never show them.
    secrets: Vec<String>,
    trouble: Arc<Trouble>,
}

/// The last error librdkafka reported about the brokers (a refused connection, a
/// failed TLS handshake or SASL authentication), until a delivery succeeds. The
/// forwarder's own failure is then often only a timeout; this says why. Shared with
/// the forwarder because librdkafka's producer does not hand its context back.
#[derive(Default)]
pub(super) struct Trouble(Mutex<Option<String>>);

impl Trouble {
    /// What the brokers last failed with since the last successful delivery.
    pub(super) fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn clear(&self) {
        self.set(None);
    }

    fn set(&self, trouble: Option<String>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = trouble;
    }
}

/// Raised when librdkafka reports that every broker connection is down (for example
/// every bootstrap address refused the connection), so the start-up check need not
/// wait out its whole metadata timeout before serving without Kafka.
#[derive(Default)]
pub(super) struct BrokersDown {
    seen: AtomicBool,
    notify: Notify,
}

impl BrokersDown {
    pub(super) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.seen.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    fn raise(&self) {
        self.seen.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

impl LogContext {
    pub(super) fn new(forwarder: Arc<str>, down: Arc<BrokersDown>) -> Self {
        Self {
            forwarder,
            seen: Mutex::new(HashMap::new()),
            down,
            secrets: Vec::new(),
            trouble: Arc::default(),
        }
    }

    /// Records the brokers' errors in `trouble` (see [`Trouble`]).
    pub(super) fn reporting(mut self, trouble: Arc<Trouble>) -> Self {
        self.trouble = trouble;
        self
    }

    /// Masks these values (the configured secrets) in everything logged.
    pub(super) fn hiding(mut self, secrets: Vec<String>) -> Self {
        self.secrets = secrets;
        self
    }

    /// Masks secret values by their key (librdkafka's `  sasl.password = ...` dump
    /// lines, `Invalid value "..." for configuration property "..."`), and the
    /// configured ones where they stand alone; never inside other words.
    fn scrub(&self, text: &str) -> String {
        crate::redact::text(text, &self.secrets)
    }

    /// `Some(repeats suppressed since the last line)` when `kind` may be logged now.
    fn admit(&self, kind: &str, now: Instant) -> Option<u64> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((last, suppressed)) = seen.get_mut(kind) {
            if now.duration_since(*last) < INTERVAL {
                *suppressed += 1;
                return None;
            }
            let repeats = *suppressed;
            *last = now;
            *suppressed = 0;
            return Some(repeats);
        }
        if seen.len() >= MAX_KINDS {
            seen.clear();
        }
        seen.insert(kind.to_owned(), (now, 0));
        Some(0)
    }
}

impl ClientContext for LogContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        let Some(suppressed) = self.admit(facility, Instant::now()) else {
            return;
        };
        let forwarder = &*self.forwarder;
        let message = self.scrub(message);
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(forwarder, facility, suppressed, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(forwarder, facility, suppressed, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(forwarder, facility, suppressed, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(forwarder, facility, suppressed, "librdkafka: {message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let all_down = error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown);
        if all_down {
            self.down.raise();
        }
        // "1/1 brokers are down" follows the error that brought them down (a TLS
        // handshake, an authentication): keep the one that says why.
        if !all_down || self.trouble.get().is_none() {
            let detail = if reason.is_empty() {
                self.scrub(&error.to_string())
            } else {
                self.scrub(reason)
            };
            self.trouble.set(Some(detail));
        }
        let kind = format!("error {:?}", error.rdkafka_error_code());
        if let Some(suppressed) = self.admit(&kind, Instant::now()) {
            // Connection trouble is retried by librdkafka and the pipeline; the
            // events wait in the spool. Failures that lose nothing are warnings.
            tracing::warn!(
                forwarder = &*self.forwarder,
                error = self.scrub(&error.to_string()),
                reason = self.scrub(reason),
                suppressed,
                "kafka client error (repeats within 10s are counted, not logged)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_masked_by_key_without_mangling_words() {
        let context = LogContext::new("kafka".into(), Arc::default()).hiding(vec!["p".into()]);
        assert_eq!(
            context.scrub("  sasl.password = p"),
            "  sasl.password = ***"
        );
        assert_eq!(
            context.scrub("Configuration property sasl.mechanism is deprecated"),
            "Configuration property sasl.mechanism is deprecated"
        );
    }

    #[test]
    fn repeats_within_the_interval_are_counted_not_logged() {
        let context = LogContext::new("kafka".into(), Arc::default());
        let t0 = Instant::now();
        assert_eq!(context.admit("FAIL", t0), Some(0));
        for i in 1..=50 {
            assert_eq!(
                context.admit("FAIL", t0 + Duration::from_millis(50 * i)),
                None
            );
        }
        // Another kind is not held back by the first.
        assert_eq!(
            context.admit("REQTMOUT", t0 + Duration::from_secs(1)),
            Some(0)
        );
        // After the interval, one line that says how many it stands for.
        assert_eq!(context.admit("FAIL", t0 + INTERVAL), Some(50));
        assert_eq!(
            context.admit("FAIL", t0 + INTERVAL + Duration::from_millis(1)),
            None
        );
    }
}
