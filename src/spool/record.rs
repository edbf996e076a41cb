//! The on-disk record: `u32 len | u32 crc32 of body | body`, little-endian, where
//! body = `u64 seq | 16-byte id | i64 received_at (unix nanos) | u8 kind |
//! u16 name len | name | [publisher] | [origin] | [workload] | prost-encoded Envelope`.
//!
//! `kind`'s low bits are the source (0 publish, 1 forward, 2 upstream, 3 eventgate);
//! its top bit ([`HAS_PUBLISHER`]) says a publisher block follows the name: `u8 1 |
//! u32 uid | u32 gid | u32 pid (0: unknown)` for a unix peer, `u8 2 | u16 len |
//! subject` for a client certificate. Records written before publishers were kept
//! never have the bit, so they read as they always did (without a publisher); a
//! record with the bit is refused as damaged by a binary that predates it.
//!
//! The next bit ([`HAS_ORIGIN`]) says the event was reconstructed by a reconcile and
//! one origin byte follows: 1 for a timestamp from the daemon's record, 2 for one from
//! the reconcile's clock, plus 16 times the witness (0 containerd, 1 the CRI, 2
//! dockerd: whose record it was reconstructed from); or 3 alone for a live event that
//! repeats a change a reconcile recorded ([`Origin::Repeat`]). Live events (every record written before origins were kept,
//! and every received event since) have no bit and no byte, so they are byte for byte
//! what they were, and read as [`Origin::Live`].
//!
//! The third bit ([`HAS_WORKLOAD`]) says a workload block follows: `u32 len |
//! prost-encoded Workload` (what the container's record said at capture). Records
//! without it read as events without one, as before.
//!
//! The fourth bit ([`HAS_NODE`]) says a node block follows the workload's place:
//! `u8 len | UTF-8 node name` (at most 255 bytes, as `node` validation allows).
//! Source 4 (a Kafka source, named like an upstream) adds `u64 node seq` after it:
//! the event's seq on its node's gateway, 0 when the message did not say.
//! Every record written since nodes were kept has it. A record without it (written
//! by an earlier version) reads as an event whose node is unknown (`None`), not as
//! this gateway's node: the host may have been renamed since, and a wrong name in an
//! audit trail is worse than none.
//!
//! The fifth bit ([`HAS_NODE_SOURCE`]) says a node source block follows the node
//! seq: `u8 len | UTF-8 text`, how the event entered its node's gateway
//! (`upstream:containerd`), for an event a Kafka source took in from a gateway that
//! said so. Records without it read as before, without one.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;

use crate::event::{Clock, Event, EventId, Identity, Origin, Source, Witness, Workload};
use crate::proto::containerd::types::Envelope;
use crate::publisher::Publisher;

pub(crate) const HEADER: usize = 8;
/// seq + id + received_at + kind + name len.
pub(crate) const MIN_BODY: usize = 8 + 16 + 8 + 1 + 2;
/// Anything longer is taken for corruption rather than allocated.
pub(crate) const MAX_BODY: usize = 16 << 20;
/// The bit of the kind byte that announces a publisher block.
pub(crate) const HAS_PUBLISHER: u8 = 0x80;
/// The bit of the kind byte that announces an origin byte (a reconciled event).
pub(crate) const HAS_ORIGIN: u8 = 0x40;
/// The bit of the kind byte that announces a workload block.
pub(crate) const HAS_WORKLOAD: u8 = 0x20;
/// The bit of the kind byte that announces a node block.
pub(crate) const HAS_NODE: u8 = 0x10;
/// The bit of the kind byte that announces a node source block.
pub(crate) const HAS_NODE_SOURCE: u8 = 0x08;
/// The source's bits of the kind byte.
const SOURCE_BITS: u8 = !(HAS_PUBLISHER | HAS_ORIGIN | HAS_WORKLOAD | HAS_NODE | HAS_NODE_SOURCE);
/// The source kind of an event from a Kafka source, the last one.
const KAFKA: u8 = 4;
/// Where the kind byte is in the body.
const KIND_AT: usize = 32;
const PROCESS: u8 = 1;
const CERTIFICATE: u8 = 2;
const CLOCK_DAEMON: u8 = 1;
const CLOCK_RECONCILE: u8 = 2;
/// Not a clock: a live event repeating a change a reconcile already recorded.
const REPEAT: u8 = 3;
/// The origin byte's low bits are the clock; the bits from here up the witness.
const CLOCK_BITS: u8 = 0x0f;
const WITNESS_SHIFT: u8 = 4;

/// Appends `event` as one record to `buf`; returns the record's length, or the body
/// length it would have had when that is over [`MAX_BODY`].
pub(crate) fn encode(event: &Event, buf: &mut Vec<u8>) -> Result<usize, usize> {
    let Identity {
        id,
        received_at,
        source,
        publisher,
        origin,
        workload,
        node,
        node_seq,
        node_source,
    } = &event.identity;
    let name: &[u8] = match source {
        Source::Upstream(name) | Source::Kafka(name) => name.as_bytes(),
        _ => &[],
    };
    let node_seq = matches!(source, Source::Kafka(_)).then(|| node_seq.unwrap_or(0));
    // Only a taken-in event has one; the Kafka source refuses a longer one, so the
    // cut never happens to a record it wrote.
    let node_source = node_source
        .as_deref()
        .filter(|_| node_seq.is_some())
        .map(|s| crate::node::cut(s).as_bytes());
    // Source names come from validated config, so they are short; clip defensively.
    let name = &name[..name.len().min(u16::MAX as usize)];
    let subject = match publisher {
        Some(Publisher::Certificate { subject }) => Some(clip(subject)),
        _ => None,
    };
    let publisher_len = match (publisher, subject) {
        (None, _) => 0,
        (Some(_), Some(subject)) => 1 + 2 + subject.len(),
        (Some(_), None) => 1 + 12,
    };
    let origin = match *origin {
        Origin::Live => None,
        Origin::Repeat => Some(REPEAT),
        Origin::Reconciled { clock, from } => {
            let clock = match clock {
                Clock::Daemon => CLOCK_DAEMON,
                Clock::Reconcile => CLOCK_RECONCILE,
            };
            // Witness index 0 (containerd) leaves the byte as records before
            // witnesses were kept wrote it.
            Some(clock | ((from.index() as u8) << WITNESS_SHIFT))
        }
    };
    let workload_len = workload.as_ref().map_or(0, |w| 4 + w.encoded_len());
    let node = node.as_deref().map(crate::node::cut);
    let body_len = MIN_BODY
        + name.len()
        + publisher_len
        + usize::from(origin.is_some())
        + workload_len
        + node.map_or(0, |n| 1 + n.len())
        + node_seq.map_or(0, |_| 8)
        + node_source.map_or(0, |s| 1 + s.len())
        + event.envelope.encoded_len();
    if body_len > MAX_BODY {
        return Err(body_len);
    }
    let start = buf.len();
    buf.reserve(HEADER + body_len);
    buf.extend_from_slice(&(body_len as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&event.seq.to_le_bytes());
    buf.extend_from_slice(id.as_bytes());
    buf.extend_from_slice(&unix_nanos(*received_at).to_le_bytes());
    let kind = match source {
        Source::Publish => 0,
        Source::Forward => 1,
        Source::Upstream(_) => 2,
        Source::Internal => 3,
        Source::Kafka(_) => 4,
    };
    let publisher_bit = match publisher {
        Some(_) => HAS_PUBLISHER,
        None => 0,
    };
    let origin_bit = match origin {
        Some(_) => HAS_ORIGIN,
        None => 0,
    };
    let workload_bit = match workload {
        Some(_) => HAS_WORKLOAD,
        None => 0,
    };
    let node_bit = match node {
        Some(_) => HAS_NODE,
        None => 0,
    };
    let node_source_bit = match node_source {
        Some(_) => HAS_NODE_SOURCE,
        None => 0,
    };
    buf.push(kind | publisher_bit | origin_bit | workload_bit | node_bit | node_source_bit);
    buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
    buf.extend_from_slice(name);
    match publisher {
        None => {}
        Some(Publisher::Process { uid, gid, pid }) => {
            buf.push(PROCESS);
            buf.extend_from_slice(&uid.to_le_bytes());
            buf.extend_from_slice(&gid.to_le_bytes());
            // pid 0 is never a peer process, so it can stand for "unknown".
            buf.extend_from_slice(&pid.unwrap_or(0).to_le_bytes());
        }
        Some(Publisher::Certificate { .. }) => {
            let subject = subject.unwrap_or_default();
            buf.push(CERTIFICATE);
            buf.extend_from_slice(&(subject.len() as u16).to_le_bytes());
            buf.extend_from_slice(subject.as_bytes());
        }
    }
    buf.extend(origin);
    if let Some(workload) = workload {
        buf.extend_from_slice(&(workload.encoded_len() as u32).to_le_bytes());
        // Encoding into a Vec cannot run out of room.
        let _ = workload.encode(buf);
    }
    if let Some(node) = node {
        buf.push(node.len() as u8);
        buf.extend_from_slice(node.as_bytes());
    }
    if let Some(node_seq) = node_seq {
        buf.extend_from_slice(&node_seq.to_le_bytes());
    }
    if let Some(node_source) = node_source {
        buf.push(node_source.len() as u8);
        buf.extend_from_slice(node_source);
    }
    // Encoding into a Vec cannot run out of room.
    let _ = event.envelope.encode(buf);
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(buf.len() - start)
}

/// What [`check`] found at an offset.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// A whole, intact record of `len` bytes (header included) with this seq.
    Valid { seq: u64, len: usize },
    /// The bytes end before the record does (a torn write, or a bad length field).
    Incomplete,
    /// A complete record whose length or checksum is wrong.
    Bad,
}

/// Validates the record starting at `bytes[0]` without decoding the envelope.
pub(crate) fn check(bytes: &[u8]) -> Check {
    let Some(header) = bytes.get(..HEADER) else {
        return Check::Incomplete;
    };
    let body_len = u32_at(header, 0) as usize;
    if !(MIN_BODY..=MAX_BODY).contains(&body_len) {
        return Check::Bad;
    }
    let Some(body) = bytes.get(HEADER..HEADER + body_len) else {
        return Check::Incomplete;
    };
    if crc32fast::hash(body) != u32_at(header, 4) || body[KIND_AT] & SOURCE_BITS > KAFKA {
        return Check::Bad;
    }
    Check::Valid {
        seq: u64_at(body, 0),
        len: HEADER + body_len,
    }
}

/// The seq a record at `bytes[0]` claims, without validating it.
pub(crate) fn claimed_seq(bytes: &[u8]) -> Option<u64> {
    bytes.get(HEADER..HEADER + 8).map(|b| u64_at(b, 0))
}

/// Decodes a record that [`check`] found valid.
pub(crate) fn decode(record: &[u8]) -> Option<Event> {
    let body = record.get(HEADER..)?;
    let seq = u64_at(body, 0);
    let id: [u8; 16] = body.get(8..24)?.try_into().ok()?;
    let nanos = i64::from_le_bytes(body.get(24..32)?.try_into().ok()?);
    let kind = *body.get(KIND_AT)?;
    let name_len = u16::from_le_bytes(body.get(33..35)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(body.get(35..35 + name_len)?).ok()?;
    let source = match kind & SOURCE_BITS {
        0 => Source::Publish,
        1 => Source::Forward,
        2 => Source::Upstream(Arc::from(name)),
        3 => Source::Internal,
        KAFKA => Source::Kafka(Arc::from(name)),
        _ => return None,
    };
    let mut rest = body.get(35 + name_len..)?;
    let publisher = if kind & HAS_PUBLISHER != 0 {
        let (publisher, after) = decode_publisher(rest)?;
        rest = after;
        Some(publisher)
    } else {
        None
    };
    let origin = if kind & HAS_ORIGIN != 0 {
        let (&byte, after) = rest.split_first()?;
        rest = after;
        let clock = match byte & CLOCK_BITS {
            CLOCK_DAEMON => Some(Clock::Daemon),
            CLOCK_RECONCILE => Some(Clock::Reconcile),
            REPEAT if byte == REPEAT => None,
            _ => return None,
        };
        match clock {
            Some(clock) => {
                let from = Witness::from_index(usize::from(byte >> WITNESS_SHIFT))?;
                Origin::Reconciled { clock, from }
            }
            None => Origin::Repeat,
        }
    } else {
        Origin::Live
    };
    let workload = if kind & HAS_WORKLOAD != 0 {
        let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let block = rest.get(4..4usize.checked_add(len)?)?;
        rest = &rest[4 + len..];
        Some(Arc::new(Workload::decode(block).ok()?))
    } else {
        None
    };
    let node = if kind & HAS_NODE != 0 {
        let (&len, after) = rest.split_first()?;
        let (node, after) = after.split_at_checked(usize::from(len))?;
        rest = after;
        Some(Arc::from(std::str::from_utf8(node).ok()?))
    } else {
        None
    };
    let node_seq = match kind & SOURCE_BITS {
        KAFKA => {
            let (bytes, after) = rest.split_at_checked(8)?;
            rest = after;
            Some(u64_at(bytes, 0)).filter(|seq| *seq != 0)
        }
        _ => None,
    };
    // Only a Kafka source's event has one; the bit on another is damage.
    let node_source = if kind & HAS_NODE_SOURCE != 0 {
        if kind & SOURCE_BITS != KAFKA {
            return None;
        }
        let (&len, after) = rest.split_first()?;
        let (text, after) = after.split_at_checked(usize::from(len))?;
        rest = after;
        Some(Arc::from(std::str::from_utf8(text).ok()?))
    } else {
        None
    };
    let envelope = Envelope::decode(rest).ok()?;
    let identity = Identity {
        id: EventId::from_bytes(id),
        received_at: from_unix_nanos(nanos),
        source,
        publisher,
        origin,
        workload,
        node,
        node_seq,
        node_source,
    };
    Some(Event::from_identity(seq, identity, envelope))
}

/// A publisher block and what follows it.
fn decode_publisher(bytes: &[u8]) -> Option<(Publisher, &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    match tag {
        PROCESS => {
            let (fields, rest) = rest.split_at_checked(12)?;
            let pid = u32_at(fields, 8);
            let publisher = Publisher::Process {
                uid: u32_at(fields, 0),
                gid: u32_at(fields, 4),
                pid: (pid != 0).then_some(pid),
            };
            Some((publisher, rest))
        }
        CERTIFICATE => {
            let (len, rest) = rest.split_at_checked(2)?;
            let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
            let (subject, rest) = rest.split_at_checked(len)?;
            let subject = std::str::from_utf8(subject).ok()?;
            Some((
                Publisher::Certificate {
                    subject: subject.into(),
                },
                rest,
            ))
        }
        _ => None,
    }
}

/// A subject cut to what the u16 length can say, on a character boundary. Real
/// subjects are far shorter; a certificate is no place for 64 KiB of name.
fn clip(subject: &str) -> &str {
    clip_to(subject, u16::MAX as usize)
}

/// `text` cut to at most `max` bytes, on a character boundary. A node name from this
/// gateway's config is never cut (validation allows 255 bytes); one that came with
/// an event from elsewhere may be.
fn clip_to(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Whether a record keeps `time` exactly: as nanoseconds since the epoch in an i64
/// (the years 1678 to 2261); [`unix_nanos`] clamps anything else.
pub(crate) fn holds_time(time: SystemTime) -> bool {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).is_ok(),
        Err(before) => i64::try_from(before.duration().as_nanos()).is_ok(),
    }
}

fn unix_nanos(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

fn from_unix_nanos(nanos: i64) -> SystemTime {
    if nanos >= 0 {
        UNIX_EPOCH + Duration::from_nanos(nanos as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(nanos.unsigned_abs())
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
