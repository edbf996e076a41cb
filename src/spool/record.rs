//! The on-disk record: `u32 len | u32 crc32 of body | body`, little-endian, where
//! body = `u64 seq | 16-byte id | i64 received_at (unix nanos) | u8 source kind |
//! u16 name len | name | prost-encoded Envelope`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;

use crate::event::{Event, EventId, Source};
use crate::proto::containerd::types::Envelope;

pub const HEADER: usize = 8;
/// seq + id + received_at + kind + name len.
pub const MIN_BODY: usize = 8 + 16 + 8 + 1 + 2;
/// Anything longer is taken for corruption rather than allocated.
pub const MAX_BODY: usize = 16 << 20;

/// Appends `event` as one record to `buf`; returns the record's length, or the body
/// length it would have had when that is over [`MAX_BODY`].
pub fn encode(event: &Event, buf: &mut Vec<u8>) -> Result<usize, usize> {
    let name: &[u8] = match &event.source {
        Source::Upstream(name) => name.as_bytes(),
        _ => &[],
    };
    // Source names come from validated config, so they are short; clip defensively.
    let name = &name[..name.len().min(u16::MAX as usize)];
    let body_len = MIN_BODY + name.len() + event.envelope.encoded_len();
    if body_len > MAX_BODY {
        return Err(body_len);
    }
    let start = buf.len();
    buf.reserve(HEADER + body_len);
    buf.extend_from_slice(&(body_len as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&event.seq.to_le_bytes());
    buf.extend_from_slice(event.id.as_bytes());
    buf.extend_from_slice(&unix_nanos(event.received_at).to_le_bytes());
    buf.push(match event.source {
        Source::Publish => 0,
        Source::Forward => 1,
        Source::Upstream(_) => 2,
        Source::Internal => 3,
    });
    buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
    buf.extend_from_slice(name);
    // Encoding into a Vec cannot run out of room.
    let _ = event.envelope.encode(buf);
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(buf.len() - start)
}

/// What [`check`] found at an offset.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// A whole, intact record of `len` bytes (header included) with this seq.
    Valid { seq: u64, len: usize },
    /// The bytes end before the record does (a torn write, or a bad length field).
    Incomplete,
    /// A complete record whose length or checksum is wrong.
    Bad,
}

/// Validates the record starting at `bytes[0]` without decoding the envelope.
pub fn check(bytes: &[u8]) -> Check {
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
    if crc32fast::hash(body) != u32_at(header, 4) || body[32] > 3 {
        return Check::Bad;
    }
    Check::Valid {
        seq: u64_at(body, 0),
        len: HEADER + body_len,
    }
}

/// The seq a record at `bytes[0]` claims, without validating it.
pub fn claimed_seq(bytes: &[u8]) -> Option<u64> {
    bytes.get(HEADER..HEADER + 8).map(|b| u64_at(b, 0))
}

/// Decodes a record that [`check`] found valid.
pub fn decode(record: &[u8]) -> Option<Event> {
    let body = record.get(HEADER..)?;
    let seq = u64_at(body, 0);
    let id: [u8; 16] = body.get(8..24)?.try_into().ok()?;
    let nanos = i64::from_le_bytes(body.get(24..32)?.try_into().ok()?);
    let kind = *body.get(32)?;
    let name_len = u16::from_le_bytes(body.get(33..35)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(body.get(35..35 + name_len)?).ok()?;
    let source = match kind {
        0 => Source::Publish,
        1 => Source::Forward,
        2 => Source::Upstream(Arc::from(name)),
        3 => Source::Internal,
        _ => return None,
    };
    let envelope = Envelope::decode(body.get(35 + name_len..)?).ok()?;
    Some(Event::with_received_at(
        seq,
        EventId::from_bytes(id),
        from_unix_nanos(nanos),
        source,
        envelope,
    ))
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
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_every_field() {
        let envelope = Envelope {
            timestamp: None,
            namespace: "k8s.io".into(),
            topic: "/tasks/exit".into(),
            event: Some(prost_types::Any {
                type_url: "containerd.events.TaskExit".into(),
                value: vec![1, 2, 3],
            }),
        };
        let at = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        for source in [
            Source::Publish,
            Source::Forward,
            Source::Upstream(Arc::from("k3s")),
            Source::Internal,
        ] {
            let event = Event::with_received_at(
                42,
                EventId::generate(),
                at,
                source.clone(),
                envelope.clone(),
            );
            let mut buf = vec![9; 3];
            let len = encode(&event, &mut buf).unwrap();
            assert_eq!(buf.len(), 3 + len);
            assert_eq!(check(&buf[3..]), Check::Valid { seq: 42, len });
            assert_eq!(check(&buf[3..buf.len() - 1]), Check::Incomplete);
            let back = decode(&buf[3..]).unwrap();
            assert_eq!(
                (back.seq, back.id, back.received_at, back.source),
                (42, event.id, at, source)
            );
            assert_eq!(back.envelope, envelope);
            let mut flipped = buf[3..].to_vec();
            flipped[HEADER + 40] ^= 0x10;
            assert_eq!(check(&flipped), Check::Bad);
        }
    }
}
