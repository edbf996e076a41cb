//! The on-disk record: `u32 len | u32 crc32 of body | body`, little-endian, where
//! body = `u64 seq | 16-byte id | i64 received_at (unix nanos) | u8 kind |
//! u16 name len | name | [publisher] | prost-encoded Envelope`.
//!
//! `kind`'s low bits are the source (0 publish, 1 forward, 2 upstream, 3 eventgate);
//! its top bit ([`HAS_PUBLISHER`]) says a publisher block follows the name: `u8 1 |
//! u32 uid | u32 gid | u32 pid (0: unknown)` for a unix peer, `u8 2 | u16 len |
//! subject` for a client certificate. Records written before publishers were kept
//! never have the bit, so they read as they always did (without a publisher); a
//! record with the bit is refused as damaged by a binary that predates it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;

use crate::event::{Event, EventId, Source};
use crate::proto::containerd::types::Envelope;
use crate::publisher::Publisher;

pub const HEADER: usize = 8;
/// seq + id + received_at + kind + name len.
pub const MIN_BODY: usize = 8 + 16 + 8 + 1 + 2;
/// Anything longer is taken for corruption rather than allocated.
pub const MAX_BODY: usize = 16 << 20;
/// The bit of the kind byte that announces a publisher block.
pub const HAS_PUBLISHER: u8 = 0x80;
/// Where the kind byte is in the body.
const KIND_AT: usize = 32;
const PROCESS: u8 = 1;
const CERTIFICATE: u8 = 2;

/// Appends `event` as one record to `buf`; returns the record's length, or the body
/// length it would have had when that is over [`MAX_BODY`].
pub fn encode(event: &Event, buf: &mut Vec<u8>) -> Result<usize, usize> {
    let name: &[u8] = match &event.source {
        Source::Upstream(name) => name.as_bytes(),
        _ => &[],
    };
    // Source names come from validated config, so they are short; clip defensively.
    let name = &name[..name.len().min(u16::MAX as usize)];
    let subject = match &event.publisher {
        Some(Publisher::Certificate { subject }) => Some(clip(subject)),
        _ => None,
    };
    let publisher_len = match (&event.publisher, subject) {
        (None, _) => 0,
        (Some(_), Some(subject)) => 1 + 2 + subject.len(),
        (Some(_), None) => 1 + 12,
    };
    let body_len = MIN_BODY + name.len() + publisher_len + event.envelope.encoded_len();
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
    let kind = match event.source {
        Source::Publish => 0,
        Source::Forward => 1,
        Source::Upstream(_) => 2,
        Source::Internal => 3,
    };
    buf.push(if event.publisher.is_some() {
        kind | HAS_PUBLISHER
    } else {
        kind
    });
    buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
    buf.extend_from_slice(name);
    match &event.publisher {
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
    if crc32fast::hash(body) != u32_at(header, 4) || body[KIND_AT] & !HAS_PUBLISHER > 3 {
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
    let kind = *body.get(KIND_AT)?;
    let name_len = u16::from_le_bytes(body.get(33..35)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(body.get(35..35 + name_len)?).ok()?;
    let source = match kind & !HAS_PUBLISHER {
        0 => Source::Publish,
        1 => Source::Forward,
        2 => Source::Upstream(Arc::from(name)),
        3 => Source::Internal,
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
    let envelope = Envelope::decode(rest).ok()?;
    Some(
        Event::with_received_at(
            seq,
            EventId::from_bytes(id),
            from_unix_nanos(nanos),
            source,
            envelope,
        )
        .with_publisher(publisher),
    )
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
    let mut end = subject.len().min(u16::MAX as usize);
    while !subject.is_char_boundary(end) {
        end -= 1;
    }
    &subject[..end]
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

    fn envelope() -> Envelope {
        Envelope {
            timestamp: Some(prost_types::Timestamp {
                seconds: 1_714_557_600,
                nanos: 5,
            }),
            namespace: "default".into(),
            topic: "/tasks/exit".into(),
            event: Some(prost_types::Any {
                type_url: "containerd.events.TaskExit".into(),
                value: vec![0x0a, 0x02, b'c', b'1'],
            }),
        }
    }

    #[test]
    fn publishers_survive_the_round_trip() {
        let long = "CN=".to_owned() + &"é".repeat(40_000);
        for publisher in [
            Publisher::Process {
                uid: 1000,
                gid: 100,
                pid: Some(4242),
            },
            Publisher::Process {
                uid: 0,
                gid: 0,
                pid: None,
            },
            Publisher::Certificate {
                subject: r"CN=node-7,O=Acme\, Inc.".into(),
            },
            Publisher::Certificate {
                subject: long.as_str().into(),
            },
        ] {
            for source in [Source::Publish, Source::Forward] {
                let event = Event::new(9, EventId::generate(), source.clone(), envelope())
                    .with_publisher(Some(publisher.clone()));
                let mut buf = Vec::new();
                let len = encode(&event, &mut buf).unwrap();
                assert_eq!(check(&buf), Check::Valid { seq: 9, len });
                assert_eq!(buf[HEADER + KIND_AT] & HAS_PUBLISHER, HAS_PUBLISHER);
                let back = decode(&buf).unwrap();
                assert_eq!((back.source, back.envelope), (source, envelope()));
                match (&publisher, back.publisher) {
                    (
                        Publisher::Certificate { subject },
                        Some(Publisher::Certificate { subject: read }),
                    ) if subject.len() > u16::MAX as usize => {
                        assert!(
                            subject.starts_with(&*read) && read.len() > 65_000,
                            "clipped on a character boundary"
                        );
                    }
                    (publisher, read) => assert_eq!(read.as_ref(), Some(publisher)),
                }
            }
        }
    }

    /// The exact bytes the format wrote before publishers were kept, laid out by
    /// hand: spools written by earlier versions must still be read after an upgrade.
    #[test]
    fn records_of_the_format_before_publishers_are_read() {
        let id = [7u8; 16];
        let nanos: i64 = 1_714_557_600_000_000_005;
        let name = b"node-a";
        let mut body = Vec::new();
        body.extend_from_slice(&42u64.to_le_bytes());
        body.extend_from_slice(&id);
        body.extend_from_slice(&nanos.to_le_bytes());
        body.push(2);
        body.extend_from_slice(&(name.len() as u16).to_le_bytes());
        body.extend_from_slice(name);
        body.extend_from_slice(&envelope().encode_to_vec());
        let mut record = Vec::new();
        record.extend_from_slice(&(body.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        record.extend_from_slice(&body);

        let len = record.len();
        assert_eq!(check(&record), Check::Valid { seq: 42, len });
        let event = decode(&record).unwrap();
        assert_eq!(event.id, EventId::from_bytes(id));
        assert_eq!(event.source, Source::Upstream(Arc::from("node-a")));
        assert_eq!(event.received_at, from_unix_nanos(nanos));
        assert_eq!(event.envelope, envelope());
        assert_eq!(event.publisher, None);

        // The same event written today is byte for byte what it was.
        let mut today = Vec::new();
        let again = Event::with_received_at(
            42,
            event.id,
            event.received_at,
            event.source.clone(),
            envelope(),
        );
        encode(&again, &mut today).unwrap();
        assert_eq!(today, record);
    }

    #[test]
    fn damaged_publisher_blocks_are_refused() {
        let event = Event::new(3, EventId::generate(), Source::Publish, envelope()).with_publisher(
            Some(Publisher::Certificate {
                subject: "CN=x".into(),
            }),
        );
        let mut buf = Vec::new();
        encode(&event, &mut buf).unwrap();
        let block = HEADER + MIN_BODY;
        for (at, value) in [(block, 9u8), (block + 1, 0xff), (block + 3, 0xff)] {
            let mut bad = buf.clone();
            bad[at] = value;
            assert!(
                decode(&bad).is_none_or(|e| e.publisher != event.publisher),
                "byte {at} = {value}"
            );
        }
        let mut unknown_kind = buf.clone();
        unknown_kind[HEADER + KIND_AT] = HAS_PUBLISHER | 4;
        let crc = crc32fast::hash(&unknown_kind[HEADER..]);
        unknown_kind[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(check(&unknown_kind), Check::Bad);
    }
}
