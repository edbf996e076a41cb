//! How the messages of one batch fared, and what that means for the batch.

use std::collections::BTreeSet;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::forward::ForwardError;

/// What kind of failure a librdkafka error is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    /// May succeed later (broker down, timeouts, leadership moves...).
    Retryable,
    /// Will fail the same way every time (too large, invalid topic, not authorized).
    Permanent,
    /// The topic disappeared, or may have: look it up again before the next attempt.
    /// A message that timed out counts: a broker that lost the topic (an empty
    /// broker at the same address) makes librdkafka hold its messages for the topic
    /// to appear until they time out, with no error naming the topic.
    UnknownTopic,
    /// The producer is unusable (idempotence state lost) and must be recreated.
    Fatal,
}

pub(super) fn classify(error: &KafkaError) -> Class {
    use RDKafkaErrorCode::*;
    match error.rdkafka_error_code() {
        // Besides librdkafka's own fatal errors: a broker that fences or forgets the
        // idempotent producer's id/epoch (seen after request timeouts, when the
        // producer bumps its epoch) rejects every later batch of this producer; a
        // new producer gets a new id and proceeds.
        Some(
            Fatal
            | ProducerFenced
            | InvalidProducerEpoch
            | UnknownProducerId
            | InvalidProducerIdMapping
            | OutOfOrderSequenceNumber,
        ) => Class::Fatal,
        Some(UnknownTopic | UnknownTopicOrPartition | MessageTimedOut) => Class::UnknownTopic,
        Some(
            MessageSizeTooLarge
            | InvalidMessageSize
            | MessageBatchTooLarge
            | InvalidTopic
            | TopicAuthorizationFailed
            | ClusterAuthorizationFailed
            | InvalidRecord
            | InvalidRequiredAcks
            | InvalidTimestamp
            | UnsupportedForMessageFormat
            | UnsupportedCompressionType
            | PolicyViolation
            | InvalidArgument,
        ) => Class::Permanent,
        _ => Class::Retryable,
    }
}

/// Failures seen while delivering one batch.
#[derive(Default)]
pub(super) struct Outcome {
    pub delivered: usize,
    pub failed: usize,
    pub fatal: bool,
    pub retryable: bool,
    pub unknown_topics: BTreeSet<String>,
    /// Failures that were `MessageTimedOut`.
    timed_out: usize,
    /// The first error, kept as the cause.
    first: Option<KafkaError>,
}

impl Outcome {
    pub(super) fn fail(&mut self, topic: &str, error: KafkaError) {
        self.failed += 1;
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageTimedOut) {
            self.timed_out += 1;
        }
        match classify(&error) {
            Class::Fatal => self.fatal = true,
            Class::Retryable => self.retryable = true,
            Class::UnknownTopic => {
                self.retryable = true;
                self.unknown_topics.insert(topic.to_owned());
            }
            Class::Permanent => {}
        }
        if self.first.is_none() {
            self.first = Some(error);
        }
    }

    /// Nothing was delivered and every failure was a timeout.
    pub(super) fn all_timed_out(&self) -> bool {
        self.delivered == 0 && self.failed > 0 && self.timed_out == self.failed
    }

    /// Whether the batch is already bound to be retried.
    pub(super) fn must_retry(&self) -> bool {
        self.fatal || self.retryable
    }

    /// The batch's verdict. `missing` are topics that do not exist and may not be
    /// created; their events were not sent. `total` is the batch size.
    pub(super) fn verdict(
        self,
        missing: &BTreeSet<String>,
        total: usize,
    ) -> Result<(), ForwardError> {
        let unsent = total.saturating_sub(self.delivered + self.failed);
        if self.failed > 0 {
            let message = format!(
                "kafka did not accept {} of {total} messages{}",
                self.failed,
                if self.fatal {
                    " (the producer hit a fatal error and was recreated)"
                } else {
                    ""
                }
            );
            let error = if self.must_retry() {
                ForwardError::retryable(message)
            } else {
                ForwardError::permanent(message)
            };
            return Err(match self.first {
                Some(first) => error.with_source(first),
                None => error,
            });
        }
        if !missing.is_empty() {
            let names = missing
                .iter()
                .map(|t| format!("{t:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ForwardError::permanent(format!(
                "kafka topic {names} does not exist and `create_topic` is false: {unsent} of {total} events were not sent; create the topic or set `create_topic = true`"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let produce = |code| KafkaError::MessageProduction(code);
        assert_eq!(
            classify(&produce(RDKafkaErrorCode::MessageSizeTooLarge)),
            Class::Permanent
        );
        assert_eq!(
            classify(&produce(RDKafkaErrorCode::TopicAuthorizationFailed)),
            Class::Permanent
        );
        // Retried, after looking the topic up again: it may be gone from the broker.
        assert_eq!(
            classify(&produce(RDKafkaErrorCode::MessageTimedOut)),
            Class::UnknownTopic
        );
        assert_eq!(
            classify(&produce(RDKafkaErrorCode::NotLeaderForPartition)),
            Class::Retryable
        );
        assert_eq!(classify(&produce(RDKafkaErrorCode::Fatal)), Class::Fatal);
        // A fenced or forgotten idempotent producer never recovers by itself.
        assert_eq!(
            classify(&produce(RDKafkaErrorCode::ProducerFenced)),
            Class::Fatal
        );
        assert_eq!(
            classify(&produce(RDKafkaErrorCode::UnknownTopicOrPartition)),
            Class::UnknownTopic
        );
    }

    #[test]
    fn a_batch_counts_as_timed_out_only_when_every_failure_was_a_timeout() {
        let timed_out = || KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        let mut all = Outcome::default();
        all.fail("t", timed_out());
        all.fail("t", timed_out());
        assert!(all.all_timed_out());
        let mut partly = Outcome {
            delivered: 1,
            ..Outcome::default()
        };
        partly.fail("t", timed_out());
        assert!(!partly.all_timed_out(), "the producer got messages through");
        let mut other = Outcome::default();
        other.fail("t", timed_out());
        other.fail(
            "t",
            KafkaError::MessageProduction(RDKafkaErrorCode::NotLeaderForPartition),
        );
        assert!(!other.all_timed_out());
        assert!(!Outcome::default().all_timed_out());
    }

    #[test]
    fn verdicts() {
        let none = BTreeSet::new();
        let ok = Outcome {
            delivered: 3,
            ..Outcome::default()
        };
        assert!(ok.verdict(&none, 3).is_ok());

        let mut mixed = Outcome {
            delivered: 1,
            ..Outcome::default()
        };
        mixed.fail(
            "t",
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        );
        mixed.fail(
            "t",
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut),
        );
        let error = mixed.verdict(&none, 3).unwrap_err();
        assert!(
            error.is_retryable(),
            "one retryable failure makes the batch retryable"
        );
        assert!(error.to_string().contains("2 of 3"), "{error}");

        let mut too_large = Outcome::default();
        too_large.fail(
            "t",
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        );
        assert!(!too_large.verdict(&none, 1).unwrap_err().is_retryable());

        let missing = BTreeSet::from(["gone".to_owned()]);
        let partly = Outcome {
            delivered: 2,
            ..Outcome::default()
        };
        let error = partly.verdict(&missing, 5).unwrap_err();
        assert!(!error.is_retryable());
        assert!(error.to_string().contains("\"gone\""), "{error}");
        assert!(error.to_string().contains("3 of 5"), "{error}");
    }
}
