//! The one way into the exchange: an [`Incoming`] event says what it carries, what
//! its sender knows of its identity and how it came, which decides what is checked
//! before it takes its place ([`super::Exchange::append`]).

use std::time::SystemTime;

use prost::Message;
use prost_types::{Any, Timestamp};

use super::{AcceptError, Exchange, GO_ZERO_TIME_SECONDS, refuse_own, rejected, validate_topic};
use crate::event::{EventId, Identity, Origin, Source, Workload};
use crate::identifiers;
use crate::proto::containerd::types::Envelope;
use crate::publisher::Publisher;

/// An event on its way in, not numbered yet.
#[derive(Debug)]
#[must_use = "an incoming event goes nowhere until it is appended"]
pub struct Incoming {
    way: Way,
    /// Its id is unassigned (the exchange gives one) unless another gateway accepted
    /// the event first.
    identity: Identity,
    /// Where a Kafka source read it (taken-in events whose store keeps offsets).
    kafka: Option<std::sync::Arc<crate::event::KafkaPosition>>,
}

/// An incoming event that passed its checks, about to take its place.
pub(super) struct Admitted {
    pub(super) identity: Identity,
    pub(super) envelope: Envelope,
    pub(super) kafka: Option<std::sync::Arc<crate::event::KafkaPosition>>,
}

/// How an event came, and so what is checked before it takes its place.
#[derive(Debug)]
enum Way {
    /// containerd's Publish: namespace, topic and size are checked, and the
    /// gateway's own namespace and topics refused; the envelope is made here,
    /// timestamped by our clock.
    Publish {
        namespace: Option<String>,
        topic: String,
        event: Option<Any>,
    },
    /// containerd's Forward: the envelope (required) as `Exchange::check_envelope`
    /// checks it, not in the gateway's own namespace or topics, and its size.
    Forward(Option<Envelope>),
    /// Captured or made by the gateway itself (an upstream's stream, a reconcile, a
    /// marker, a signed checkpoint): the sender checked what it had to, and its own
    /// namespace and topics are its to use. Not limited in size: refusing it would
    /// lose it for good.
    Checked(Envelope),
    /// Taken in from another gateway, which received it first: checked by the
    /// sender, as [`Way::Checked`], and its identity kept whole. That gateway's
    /// markers and checkpoints come this way, under its node.
    TakenIn(Envelope),
}

impl Incoming {
    /// containerd's Publish: the namespace from the request (required), the
    /// timestamp from our clock in UTC; the payload passes through untouched.
    pub fn publish(namespace: Option<&str>, topic: String, event: Option<Any>) -> Self {
        let way = Way::Publish {
            namespace: namespace.map(str::to_owned),
            topic,
            event,
        };
        Self::new(way, Source::Publish)
    }

    /// containerd's Forward: namespace, then topic, then timestamp are validated, and
    /// the envelope is distributed exactly as received.
    pub fn forward(envelope: Option<Envelope>) -> Self {
        Self::new(Way::Forward(envelope), Source::Forward)
    }

    /// An envelope from `source` that its sender validated (with
    /// `Exchange::check_envelope` where it must be valid), or made itself.
    pub fn checked(source: Source, envelope: Envelope) -> Self {
        Self::new(Way::Checked(envelope), source)
    }

    /// An event another gateway accepted first, with the identity it gave it there
    /// (id, node, node seq, received time, origin, publisher, workload) and its
    /// envelope checked with `Exchange::check_envelope`.
    pub fn taken_in(identity: Identity, envelope: Envelope) -> Self {
        Self {
            way: Way::TakenIn(envelope),
            identity,
            kafka: None,
        }
    }

    /// The same, read at `position` in Kafka by a source whose store keeps its
    /// offsets.
    pub fn kafka_position(
        mut self,
        position: Option<std::sync::Arc<crate::event::KafkaPosition>>,
    ) -> Self {
        self.kafka = position;
        self
    }

    /// Its received time is read once, when it is admitted (see [`Incoming::admit`]).
    fn new(way: Way, source: Source) -> Self {
        Self {
            way,
            identity: Identity::new(EventId::unassigned(), SystemTime::UNIX_EPOCH, source),
            kafka: None,
        }
    }

    /// Sent by `publisher` (a client of ours), kept with the event.
    pub fn publisher(mut self, publisher: Option<Publisher>) -> Self {
        self.identity.publisher = publisher;
        self
    }

    /// Of a known origin: a reconcile's reconstructed events pass
    /// [`Origin::Reconciled`], and every record eventgate keeps of the event carries
    /// it. Subscribers receive the envelope as it is, like any other.
    pub fn origin(mut self, origin: Origin) -> Self {
        self.identity.origin = origin;
        self
    }

    /// With what its container's record said.
    pub fn workload(mut self, workload: Option<std::sync::Arc<Workload>>) -> Self {
        self.identity.workload = workload;
        self
    }

    /// The envelope as it will be appended, checked as its way in requires (each
    /// refusal counted), and the identity it is appended with.
    pub(super) fn admit(self, exchange: &Exchange) -> Result<Admitted, AcceptError> {
        let Self {
            way,
            mut identity,
            kafka,
        } = self;
        let envelope = match way {
            Way::Publish {
                namespace,
                topic,
                event,
            } => exchange.publish_envelope(namespace, topic, event),
            Way::Forward(envelope) => exchange.forward_envelope(envelope),
            Way::Checked(envelope) => Ok(envelope),
            Way::TakenIn(envelope) => {
                return Ok(Admitted {
                    identity,
                    envelope,
                    kafka,
                });
            }
        }
        .map_err(rejected)?;
        // Received as it takes its place: never before the timestamp Publish gives.
        identity.received_at = SystemTime::now();
        Ok(Admitted {
            identity,
            envelope,
            kafka,
        })
    }
}

impl Exchange {
    fn publish_envelope(
        &self,
        namespace: Option<String>,
        topic: String,
        event: Option<Any>,
    ) -> Result<Envelope, AcceptError> {
        let namespace = namespace
            .filter(|ns| !ns.is_empty())
            .ok_or(AcceptError::NamespaceRequired)?;
        identifiers::validate(&namespace).map_err(AcceptError::InvalidNamespace)?;
        validate_topic(&topic)?;
        refuse_own(&namespace, &topic)?;
        let envelope = Envelope {
            timestamp: Some(Timestamp::from(SystemTime::now())),
            namespace,
            topic,
            event,
        };
        self.check_size(&envelope)?;
        Ok(envelope)
    }

    fn forward_envelope(&self, envelope: Option<Envelope>) -> Result<Envelope, AcceptError> {
        let envelope = envelope.ok_or(AcceptError::MissingEnvelope)?;
        self.check_envelope(&envelope)?;
        refuse_own(&envelope.namespace, &envelope.topic)?;
        self.check_size(&envelope)?;
        Ok(envelope)
    }

    /// `exchange.limits.max_event_bytes`, applied to Publish and Forward. Upstream
    /// events are not limited: refusing them would lose them for good.
    fn check_size(&self, envelope: &Envelope) -> Result<(), AcceptError> {
        let size = envelope.encoded_len();
        let limit = self.inner.config.limits.max_event_bytes.get();
        if size > limit {
            return Err(AcceptError::TooLarge { size, limit });
        }
        Ok(())
    }

    /// Validates an envelope as Forward does, except that the gateway's own
    /// namespace and topics pass: for sources that did not go through Publish or
    /// Forward (upstreams, Kafka sources), whose events other gateways may have
    /// made.
    pub fn check_envelope(&self, envelope: &Envelope) -> Result<(), AcceptError> {
        identifiers::validate(&envelope.namespace)
            .map_err(AcceptError::InvalidEnvelopeNamespace)?;
        validate_topic(&envelope.topic)?;
        match envelope.timestamp {
            None => Err(AcceptError::MissingTimestamp),
            Some(Timestamp { seconds, nanos: 0 }) if seconds == GO_ZERO_TIME_SECONDS => {
                Err(AcceptError::MissingTimestamp)
            }
            Some(Timestamp { seconds, nanos }) if !(0..1_000_000_000).contains(&nanos) => {
                Err(AcceptError::InvalidTimestamp { seconds, nanos })
            }
            Some(_) => Ok(()),
        }
    }
}
