//! The correlator's state: per object and topic, the window of similar events and
//! what is held back; per object, a token bucket. A pure state machine over events
//! (their own times, not the clock), so replaying the same events from the same
//! state decides the same way, and it serializes whole for the stage's checkpoints.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::settings::CorrelateSettings;
use crate::event::Event;

/// Why an event was held back: the `reason` label of the suppression counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    Duplicate,
    Similar,
    RateLimited,
}

impl Reason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Reason::Duplicate => "duplicate",
            Reason::Similar => "similar",
            Reason::RateLimited => "rate_limited",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Send,
    Hold(Reason),
}

/// Events of one object and topic held back, not yet sent as an aggregate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Held {
    pub(crate) namespace: String,
    pub(crate) object: String,
    pub(crate) topic: String,
    pub(crate) duplicates: u64,
    pub(crate) similar: u64,
    pub(crate) rate_limited: u64,
    /// Unix nanoseconds of the first and last event held back.
    pub(crate) first_at: i64,
    pub(crate) last_at: i64,
    pub(crate) first_seq: u64,
    pub(crate) last_seq: u64,
    pub(crate) node: Option<String>,
    /// The last held event's payload type and bytes (base64 in the state file).
    pub(crate) type_url: Option<String>,
    #[serde(with = "bytes_text")]
    pub(crate) payload: Vec<u8>,
}

impl Held {
    pub(crate) fn count(&self) -> u64 {
        self.duplicates + self.similar + self.rate_limited
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Key {
    /// Time of the key's last event: its window lasts while events come closer.
    last_at: i64,
    /// Events in the current window.
    seen: u32,
    /// Hash of the last event sent, and when, for duplicates.
    sent_hash: Option<[u8; 8]>,
    sent_at: i64,
    held: Option<Held>,
    /// Recency, for forgetting the least recently seen beyond `max_objects`.
    used: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Bucket {
    tokens: f64,
    at: i64,
    used: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Correlator {
    /// `namespace \0 object \0 topic`.
    keys: HashMap<String, Key>,
    /// `namespace \0 object`.
    buckets: HashMap<String, Bucket>,
    tick: u64,
    /// Keys and buckets by recency (`used`), so the least recently seen is found
    /// without a scan; rebuilt from `used` when the state is read back.
    #[serde(skip)]
    key_order: BTreeMap<u64, String>,
    #[serde(skip)]
    bucket_order: BTreeMap<u64, String>,
}

// The recency indexes are derived from `used`: equal states are equal without them.
impl PartialEq for Correlator {
    fn eq(&self, other: &Self) -> bool {
        self.keys == other.keys && self.buckets == other.buckets && self.tick == other.tick
    }
}

/// An event's time: its envelope timestamp, else when the gateway received it.
pub(crate) fn unix_nanos(time: std::time::SystemTime) -> i64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

pub(crate) fn event_time(event: &Event) -> i64 {
    match &event.envelope.timestamp {
        Some(ts) => ts
            .seconds
            .saturating_mul(1_000_000_000)
            .saturating_add(i64::from(ts.nanos)),
        None => unix_nanos(event.identity.received_at),
    }
}

fn nanos(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn payload_hash(event: &Event) -> [u8; 8] {
    let mut hasher = Sha256::new();
    match &event.envelope.event {
        Some(any) => {
            hasher.update(any.type_url.as_bytes());
            hasher.update([0]);
            hasher.update(&any.value);
        }
        None => hasher.update([1]),
    }
    let digest = hasher.finalize();
    let mut out = [0; 8];
    out.copy_from_slice(&digest[..8]);
    out
}

impl Correlator {
    /// Decides on `event` and records it; returns aggregates of keys forgotten to
    /// stay within `max_objects`, to be sent now.
    pub(crate) fn offer(&mut self, event: &Event, s: &CorrelateSettings) -> (Verdict, Vec<Held>) {
        self.tick += 1;
        let tick = self.tick;
        let t = event_time(event);
        let namespace = event.namespace();
        let object = event.object_id().unwrap_or_default();
        let topic = event.topic();
        let key_text = format!("{namespace}\0{object}\0{topic}");
        let bucket_text = format!("{namespace}\0{object}");
        self.index();
        let mut forgotten = Vec::new();
        if !self.keys.contains_key(&key_text) && self.keys.len() >= s.max_objects {
            forgotten.extend(self.forget_key());
        }
        if !self.buckets.contains_key(&bucket_text) && self.buckets.len() >= s.max_objects {
            self.forget_bucket();
        }
        let key = self.keys.entry(key_text.clone()).or_insert_with(|| Key {
            last_at: t,
            ..Key::default()
        });
        self.key_order.remove(&key.used);
        self.key_order.insert(tick, key_text);
        if t.saturating_sub(key.last_at) > nanos(s.window) {
            key.seen = 0;
        }
        key.last_at = key.last_at.max(t);
        key.seen = key.seen.saturating_add(1);
        key.used = tick;
        let hash = payload_hash(event);
        let duplicate = !s.duplicate_window.is_zero()
            && key.sent_hash == Some(hash)
            && t.saturating_sub(key.sent_at) <= nanos(s.duplicate_window);
        let verdict = if duplicate {
            Verdict::Hold(Reason::Duplicate)
        } else if key.seen > s.aggregate_after {
            Verdict::Hold(Reason::Similar)
        } else {
            let burst = f64::from(s.burst);
            let bucket = self.buckets.entry(bucket_text.clone()).or_insert(Bucket {
                tokens: burst,
                at: t,
                used: 0,
            });
            self.bucket_order.remove(&bucket.used);
            self.bucket_order.insert(tick, bucket_text);
            let elapsed = t.saturating_sub(bucket.at).max(0) as f64;
            bucket.tokens = (bucket.tokens + elapsed / nanos(s.refill) as f64).min(burst);
            bucket.at = bucket.at.max(t);
            bucket.used = tick;
            if bucket.tokens >= 1.0 {
                bucket.tokens -= 1.0;
                Verdict::Send
            } else {
                Verdict::Hold(Reason::RateLimited)
            }
        };
        match verdict {
            Verdict::Send => {
                key.sent_hash = Some(hash);
                key.sent_at = t;
            }
            Verdict::Hold(reason) => {
                let held = key.held.get_or_insert_with(|| Held {
                    namespace: namespace.to_owned(),
                    object: object.clone(),
                    topic: topic.to_owned(),
                    first_at: t,
                    first_seq: event.seq,
                    ..Held::default()
                });
                match reason {
                    Reason::Duplicate => held.duplicates += 1,
                    Reason::Similar => held.similar += 1,
                    Reason::RateLimited => held.rate_limited += 1,
                }
                held.last_at = held.last_at.max(t);
                held.last_seq = event.seq;
                held.node = event.node().map(str::to_owned);
                held.type_url = event.envelope.event.as_ref().map(|a| a.type_url.clone());
                held.payload = event
                    .envelope
                    .event
                    .as_ref()
                    .map(|a| a.value.clone())
                    .unwrap_or_default();
            }
        }
        (verdict, forgotten)
    }

    /// Aggregates whose first held event is at least `flush` before `now` (unix
    /// nanoseconds), taken out to be sent.
    pub(crate) fn due(&mut self, now: i64, s: &CorrelateSettings) -> Vec<Held> {
        let flush = nanos(s.flush);
        let mut out: Vec<Held> = self
            .keys
            .values_mut()
            .filter(|key| {
                key.held
                    .as_ref()
                    .is_some_and(|h| now.saturating_sub(h.first_at) >= flush)
            })
            .filter_map(|key| key.held.take())
            .collect();
        out.sort_by_key(|held| held.last_seq);
        out
    }

    /// Whether [`Correlator::due`] would take anything out.
    pub(crate) fn any_due(&self, now: i64, s: &CorrelateSettings) -> bool {
        let flush = nanos(s.flush);
        self.keys.values().any(|key| {
            key.held
                .as_ref()
                .is_some_and(|h| now.saturating_sub(h.first_at) >= flush)
        })
    }

    /// Every aggregate, taken out (the stage is closing).
    pub(crate) fn drain(&mut self) -> Vec<Held> {
        let mut out: Vec<Held> = self
            .keys
            .values_mut()
            .filter_map(|k| k.held.take())
            .collect();
        out.sort_by_key(|held| held.last_seq);
        out
    }

    /// Events held back and not yet in a sent aggregate.
    pub(crate) fn held_events(&self) -> u64 {
        self.keys
            .values()
            .filter_map(|k| k.held.as_ref())
            .map(Held::count)
            .sum()
    }

    pub(crate) fn objects(&self) -> usize {
        self.keys.len()
    }

    /// Builds the recency indexes of a state read back from its file.
    fn index(&mut self) {
        if self.key_order.len() != self.keys.len() {
            self.key_order = self.keys.iter().map(|(k, v)| (v.used, k.clone())).collect();
        }
        if self.bucket_order.len() != self.buckets.len() {
            self.bucket_order = self
                .buckets
                .iter()
                .map(|(k, v)| (v.used, k.clone()))
                .collect();
        }
    }

    fn forget_key(&mut self) -> Option<Held> {
        let (_, oldest) = self.key_order.pop_first()?;
        self.keys.remove(&oldest).and_then(|key| key.held)
    }

    fn forget_bucket(&mut self) {
        if let Some((_, oldest)) = self.bucket_order.pop_first() {
            self.buckets.remove(&oldest);
        }
    }
}

/// Payload bytes as base64 text in the state file.
mod bytes_text {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
