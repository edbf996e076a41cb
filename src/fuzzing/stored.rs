//! Targets for what eventgate reads back or takes in already recorded: spool
//! segments and records, Kafka messages, resume positions, signed checkpoints.

use super::*;

/// A spool segment of `count` intact records followed by the input's bytes (a torn
/// write, a bit flip, garbage), opened as the gateway opens its spool after a
/// crash: opening never fails on content, and the intact records are all read back.
pub fn spool_segment(data: &[u8]) {
    let mut input = Input::new(data);
    let count = u64::from(input.byte() % 5);
    let tail = input.rest();
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let segments = dir.path().join("segments");
    std::fs::create_dir_all(&segments).expect("segments dir");
    let mut bytes = Vec::new();
    for seq in 1..=count {
        let event = spool_event(seq);
        crate::spool::record::encode(&event, &mut bytes).expect("a small record fits");
    }
    bytes.extend_from_slice(tail);
    std::fs::write(segments.join(format!("{:020}.log", 1)), &bytes).expect("segment");
    let settings = crate::spool::SpoolSettings {
        fsync: crate::spool::Fsync::None,
        ..Default::default()
    };
    runtime().block_on(async {
        let (spool, recovery) = crate::spool::Spool::open(dir.path(), &settings, &["a"])
            .unwrap_or_else(|e| panic!("a spool with a damaged segment opens: {e}"));
        assert!(
            recovery.next_seq > count,
            "{count} intact records, appending at {}: {recovery:?}",
            recovery.next_seq
        );
        let mut reader = spool.reader(1);
        let mut seen = Vec::new();
        while reader.position() <= count {
            let batch = tokio::time::timeout(Duration::from_secs(5), reader.next(64, 1 << 20))
                .await
                .expect("a reader behind the durable position returns promptly")
                .unwrap_or_else(|e| panic!("reading the recovered spool: {e}"));
            assert!(
                batch.gap.is_none_or(|g| g.first > count),
                "intact records lost: {:?} ({recovery:?})",
                batch.gap
            );
            for event in &batch.events {
                if event.seq <= count {
                    assert_eq!(event.envelope, spool_event(event.seq).envelope);
                    seen.push(event.seq);
                }
            }
        }
        assert_eq!(seen, (1..=count).collect::<Vec<_>>(), "{recovery:?}");
        let _ = spool.close().await;
    });
}

fn spool_event(seq: u64) -> Event {
    let envelope = Envelope {
        timestamp: Some(Timestamp {
            seconds: 1_700_000_000 + seq as i64,
            nanos: 0,
        }),
        namespace: "default".into(),
        topic: "/tasks/exit".into(),
        event: Some(Any {
            type_url: "containerd.events.TaskExit".into(),
            value: vec![seq as u8; 40],
        }),
    };
    Event::new(
        seq,
        EventId::derived(&seq.to_le_bytes()),
        Source::Publish,
        envelope,
    )
}

/// One record: the input as a record's body under a correct length and checksum (so
/// the decoder, not the checksum, is what the bytes meet), and the input as it is
/// through the checker.
pub fn spool_record(data: &[u8]) {
    use crate::spool::record::{Check, check, decode};
    let _ = check(data);
    let Ok(len) = u32::try_from(data.len()) else {
        return;
    };
    let mut record = Vec::with_capacity(8 + data.len());
    record.extend_from_slice(&len.to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    record.extend_from_slice(data);
    let Check::Valid { seq, len } = check(&record) else {
        return;
    };
    assert_eq!(len, record.len());
    let Some(event) = decode(&record) else {
        return;
    };
    assert_eq!(event.seq, seq);
    // What decodes is an event like any other: it renders, and spools again.
    let _ = crate::render::event_json(&event);
    let mut again = Vec::new();
    if crate::spool::record::encode(&event, &mut again).is_ok() {
        let back = decode(&again).expect("a record written from a decoded one decodes");
        assert_eq!(back.seq, event.seq);
        assert_eq!(back.envelope, event.envelope);
        // Every identity field, not only the id: a field the encoder drops or
        // changes would be lost at the next restart.
        assert_eq!(back.identity, event.identity);
    }
}

/// A Kafka message from another gateway (or anyone who can write to the topic):
/// headers and value from the input, decoded in the format the input picks.
pub fn kafka(data: &[u8]) {
    use crate::source::kafka::decode::{Message, decode};
    use crate::source::kafka::options::Format;
    let mut input = Input::new(data);
    let format = match input.byte() % 5 {
        0 => Format::Auto,
        1 => Format::Protobuf,
        2 => Format::Json,
        3 => Format::CloudeventsBinary,
        _ => Format::CloudeventsStructured,
    };
    // Every header the decoder reads, and one it does not.
    const NAMES: &[&str] = &[
        "ce_specversion",
        "ce_namespace",
        "ce_topic",
        "ce_type",
        "ce_time",
        "content-type",
        "type_url",
        "event_id",
        "node",
        "node_seq",
        "node_source",
        "source",
        "seq",
        "origin",
        "origin_clock",
        "reconciled_from",
        "publisher",
        "received_at",
        "container_kind",
        "container_labels",
        "container_name",
        "pod_name",
        "pod_namespace",
        "pod_uid",
        "image",
        "x-other",
    ];
    let count = input.byte() % 8;
    let mut headers = Vec::new();
    for _ in 0..count {
        let name = NAMES[usize::from(input.byte()) % NAMES.len()];
        headers.push((name, input.chunk()));
    }
    let has_value = input.byte() & 1 == 0;
    let value = input.rest();
    let message = Message {
        topic: "eventgate",
        partition: 0,
        offset: 42,
        headers,
        value: has_value.then_some(value),
    };
    let source: Arc<str> = Arc::from("fuzz");
    if let Ok(event) = decode(&message, format, &source) {
        // What is taken in is an event like any other: it renders and spools.
        let _ = crate::render::event_json(&event);
        let mut record = Vec::new();
        if crate::spool::record::encode(&event, &mut record).is_ok() {
            let len = record.len();
            let back = crate::spool::record::decode(&record[..len])
                .expect("an event from Kafka spools and reads back");
            // Whole: what a restart reads back is what was taken in.
            assert_eq!(back.identity, event.identity);
            assert_eq!(back.envelope, event.envelope);
        }
    }
}

/// The resumable Subscribe's position and the CLI's `--since`/`--until` text: a
/// SubscribeRequest as a client sends it, resolved against what the input says the
/// gateway keeps; a `--since` text parsed against a clock from the input; and a
/// Record as the CLI receives it.
pub fn resume(data: &[u8]) {
    use crate::proto::eventgate::services::events::v1::{Record, SubscribeRequest};
    use crate::resume::position::{Kept, resolve};
    let mut input = Input::new(data);
    let which = input.byte() % 3;
    let now = UNIX_EPOCH + Duration::from_secs(input.u64() % (1 << 40));
    let oldest_seq = input.u64() % 1000;
    let next_seq = oldest_seq + input.u64() % 1000;
    let oldest_time = match input.byte() & 1 {
        0 => None,
        _ => UNIX_EPOCH.checked_add(Duration::from_secs(input.u64() % (1 << 40))),
    };
    let first_since = match input.byte() & 1 {
        0 => None,
        _ => Some(input.u64()),
    };
    let rest = input.rest();
    match which {
        0 => {
            let Ok(request) = SubscribeRequest::decode(rest) else {
                return;
            };
            let Ok((start, _until)) = crate::resume::bounds(&request) else {
                return;
            };
            let kept = Kept {
                oldest_seq,
                oldest_time,
                next_seq,
                now,
            };
            let resolved = resolve(start, &kept, |_| first_since);
            check_position(start, &kept, first_since, &resolved);
        }
        1 => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            if let Ok(time) = crate::query::time::parse_bound(text, now) {
                // As the CLI sends it, and as the gateway reads it back.
                let wire = Timestamp::from(time);
                let back = SystemTime::try_from(wire).expect("a parsed bound is a time");
                assert_eq!(back, time, "{text:?}");
            }
        }
        _ => {
            let Ok(record) = Record::decode(rest) else {
                return;
            };
            if let Ok(event) = crate::resume::record::from_record(record) {
                let _ = crate::render::event_json(&event);
                let _ = crate::render::event_ctr_line(&event);
            }
        }
    }
}

/// What docs/history.md ("Resuming") promises of a resolved position, stated apart
/// from the code that resolves it: where each kind of start begins, and that a
/// refusal happens exactly when the promise allows one.
fn check_position(
    start: crate::resume::position::Start,
    kept: &crate::resume::position::Kept,
    first_since: Option<u64>,
    resolved: &Result<u64, crate::resume::position::PositionError>,
) {
    use crate::resume::position::Start;
    let (oldest, next) = (kept.oldest_seq, kept.next_seq);
    let said = format!("{start:?} against {kept:?}, first_since {first_since:?}: {resolved:?}");
    if let Ok(from) = resolved {
        // Never past the next event, never before what is kept.
        assert!(*from <= next && *from >= oldest.min(next), "{said}");
    }
    match (start, resolved) {
        (Start::Live, resolved) => assert_eq!(resolved.as_ref().ok(), Some(&next), "{said}"),
        // Exactly the event after the client's last one, when it is still kept and
        // was given out; refused otherwise, never served from another point.
        (Start::After(after), Ok(from)) => {
            assert!(after < next && after + 1 >= oldest, "{said}");
            assert_eq!(*from, after + 1, "{said}");
        }
        (Start::After(after), Err(_)) => {
            assert!(after >= next || after.saturating_add(1) < oldest, "{said}");
        }
        (Start::Since(since), Ok(from)) => {
            if since >= kept.now {
                assert_eq!(
                    *from, next,
                    "a time to come starts at the next event: {said}"
                );
            } else if let Some(first) = first_since {
                assert_eq!(*from, first.clamp(oldest.min(next), next), "{said}");
            } else {
                assert_eq!(*from, oldest.min(next), "{said}");
            }
        }
        // Refused only when something older than what is kept was discarded and the
        // time may fall in it.
        (Start::Since(since), Err(_)) => {
            assert!(oldest > 1 && since < kept.now, "{said}");
            assert!(kept.oldest_time.is_none_or(|t| since < t), "{said}");
        }
    }
}

/// The spool's `cursors` file, as a crash or a bad disk may leave it: the raw bytes,
/// and the same text under a correct checksum (so the parser, not the checksum, is
/// what the bytes meet). What parses renders back to the same cursors: a cursor
/// moved by a save and load would skip or repeat events.
pub fn cursors(data: &[u8]) {
    use crate::spool::cursors::{parse, render};
    let _ = parse(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cursors) = parse(crate::spool::seal(text.to_owned()).as_bytes()) {
        let again = render(&cursors);
        assert_eq!(parse(again.as_bytes()), Ok(cursors), "{again:?}");
    }
}

/// The file forwarder's checkpoint record, raw and sealed as for [`cursors`], then
/// judged against an active file and spool end from the input: what parses renders
/// back the same, and a cut never goes past the active file's length or the spool's
/// end.
pub fn file_checkpoint(data: &[u8]) {
    use crate::forward::file::checkpoint::{FileId, Resume, parse, render};
    let mut input = Input::new(data);
    let active = FileId {
        dev: input.u64() % 4,
        ino: input.u64() % 4,
    };
    let active_len = input.u64();
    let end = input.u64();
    let rest = input.rest();
    let _ = parse(rest);
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(record) = parse(crate::spool::seal(text.to_owned()).as_bytes()) else {
        return;
    };
    assert_eq!(parse(render(&record).as_bytes()), Ok(record));
    match record.resume(active, active_len, end) {
        Resume::CutTo { len, next } => {
            assert!(
                len <= active_len,
                "{record:?}: cut to {len} of {active_len}"
            );
            assert!(next <= end, "{record:?}: resume at {next} past {end}");
        }
        Resume::Keep(why) => assert!(!why.is_empty()),
    }
}

/// A reconcile's saved state snapshot and pending snapshot (NUL between them) as
/// a crash, a lying disk or another version may leave them, opened as `serve` opens
/// them: never a panic; the snapshot is either taken or set aside, never left in
/// place unread (the next save would keep a file nobody reads).
pub fn snapshot(data: &[u8]) {
    let mut parts = data.splitn(2, |b| *b == 0);
    let saved = parts.next().unwrap_or_default();
    let pending = parts.next();
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let path = crate::reconcile::snapshot::path(dir.path(), "node");
    let pending_path = crate::reconcile::pending::path(dir.path(), "node");
    for (file, bytes) in [(&path, Some(saved)), (&pending_path, pending)] {
        let Some(bytes) = bytes else { continue };
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).expect("the snapshot directory");
        }
        std::fs::write(file, bytes).expect("the snapshot file");
    }
    let opened = runtime().block_on(crate::reconcile::snapshot::Snapshot::open(
        dir.path(),
        "node",
        None,
    ));
    match opened {
        Ok(snapshot) => assert!(
            snapshot.known || !path.exists(),
            "an unreadable snapshot stays in place"
        ),
        // Only a snapshot of a newer eventgate is refused, and it is left alone.
        Err(_) => assert!(path.exists()),
    }
}

/// The signer behind [`note`]'s verifier key; seeds sign with it.
pub fn note_signer() -> crate::note::Signer {
    crate::note::Signer::from_seed("fuzz.example/log", &[7; 32])
}

/// A checkpoints file for `audit verify --checkpoints` (signed notes, or the file
/// forwarder's JSON lines carrying them), read and opened with a verifier key; and
/// the same bytes as one note and as a verifier key. Then an archive made from the
/// input: genuine checkpoints signed with the key, in either format, with what an
/// archive picks up on its way (CRs, a byte order mark, blank lines, notes shipped
/// twice, other lines between JSON lines, a torn tail after the notes): every
/// genuine checkpoint is read back, once, in order, with its values.
pub fn note(data: &[u8]) {
    let verifiers = [note_signer().verifier()];
    let _ = crate::note::open_bytes(data, &verifiers);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::note::Verifier::from_text(text.trim_end());
        let _ = crate::note::Signer::from_text(text.trim_end());
    }
    let _ = crate::store::verify::shipped::read(data, "checkpoints", &verifiers);
    archive_keeps_every_genuine_note(data);
}

fn archive_keeps_every_genuine_note(data: &[u8]) {
    use crate::store::checkpoint::Checkpoint;
    let mut input = Input::new(data);
    let signer = note_signer();
    let json = input.byte() & 1 == 1;
    let crlf = input.byte() & 1 == 1;
    let mut archive = Vec::new();
    if input.byte() & 1 == 1 {
        archive.extend_from_slice("\u{feff}".as_bytes());
    }
    let newline: &[u8] = if crlf { b"\r\n" } else { b"\n" };
    let mut expected: Vec<Checkpoint> = Vec::new();
    let mut junk = false;
    for n in 0..usize::from(input.byte() % 6) {
        let row_id = i64::try_from(input.u64() >> 2).unwrap_or(0);
        let with_hash = input.byte() & 1 == 1;
        let checkpoint = Checkpoint {
            node: format!("node-{}", input.byte() % 3),
            store: "audit".to_owned(),
            row_id,
            seq: with_hash.then_some(row_id),
            hash: with_hash.then(|| {
                let mut hash = crate::store::chain::ZERO;
                hash[..8].copy_from_slice(&row_id.to_be_bytes());
                hash
            }),
            pruned_rows: 0,
            time: UNIX_EPOCH + Duration::from_secs(1_700_000_000 + input.u64() % 1_000_000_000),
            prev: None,
            tree: None,
        };
        let Ok(note) = signer.sign(&checkpoint.to_text()) else {
            return;
        };
        let copies = 1 + usize::from(input.byte() % 2);
        for _ in 0..copies {
            for _ in 0..input.byte() % 3 {
                archive.extend_from_slice(newline);
            }
            if json {
                let line = serde_json::json!({
                    "topic": crate::store::checkpoint::TOPIC,
                    "seq": n,
                    "event": { "note": note },
                });
                archive.extend_from_slice(line.to_string().as_bytes());
                archive.extend_from_slice(newline);
                // Another line between checkpoint lines: any bytes but a newline.
                let other = input.chunk();
                if !other.is_empty() {
                    junk = true;
                    archive.extend(other.iter().filter(|&&b| b != b'\n'));
                    archive.extend_from_slice(newline);
                }
            } else {
                for line in note.split_inclusive('\n') {
                    archive.extend_from_slice(line.trim_end_matches('\n').as_bytes());
                    archive.extend_from_slice(newline);
                }
            }
        }
        if !expected.contains(&checkpoint) {
            expected.push(checkpoint);
        }
    }
    // A torn tail: whatever the rest of the input is, after a blank line.
    let tail = input.rest();
    if !tail.is_empty() {
        junk = true;
        archive.extend_from_slice(newline);
        archive.extend_from_slice(tail);
    }
    let Ok(shipped) =
        crate::store::verify::shipped::read(archive.as_slice(), "archive", &[signer.verifier()])
    else {
        // Refused whole (too large): impossible at these sizes.
        panic!("an archive of {} bytes was refused", archive.len());
    };
    let found: Vec<&Checkpoint> = shipped.checkpoints.iter().map(|s| &s.checkpoint).collect();
    // The input's own bytes may hold notes too (never one signed by the key, which
    // the fuzzer cannot make): the genuine ones are all there, in order, once.
    let mut rest = found.iter().filter(|c| expected.contains(c));
    for checkpoint in &expected {
        assert_eq!(
            rest.next(),
            Some(&checkpoint),
            "a genuine checkpoint was not read back in order (json: {json}, crlf: {crlf}) from\n{}",
            String::from_utf8_lossy(&archive)
        );
    }
    if !junk {
        assert_eq!(
            found.len(),
            expected.len(),
            "only the genuine notes are read"
        );
        assert!(
            shipped.forged.is_none() && shipped.malformed.is_none(),
            "a genuine note was refused: {:?} {:?}",
            shipped.forged,
            shipped.malformed
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::check_position;
    use crate::resume::position::{Kept, PositionError, Start, resolve};

    fn kept() -> Kept {
        Kept {
            oldest_seq: 10,
            oldest_time: Some(UNIX_EPOCH + Duration::from_secs(100)),
            next_seq: 20,
            now: UNIX_EPOCH + Duration::from_secs(1000),
        }
    }

    #[test]
    fn the_real_resolver_keeps_the_promises() {
        let at = |s| UNIX_EPOCH + Duration::from_secs(s);
        for start in [
            Start::Live,
            Start::After(0),
            Start::After(8),
            Start::After(9),
            Start::After(19),
            Start::After(20),
            Start::Since(at(50)),
            Start::Since(at(150)),
            Start::Since(at(5000)),
        ] {
            for first in [None, Some(0), Some(15), Some(99)] {
                check_position(start, &kept(), first, &resolve(start, &kept(), |_| first));
            }
        }
    }

    /// The checks fail on a resolver that is one off, serves a position it must
    /// refuse, or refuses one it must serve.
    #[test]
    fn a_wrong_resolution_is_caught() {
        let caught = |start, resolved: Result<u64, PositionError>| {
            std::panic::catch_unwind(|| check_position(start, &kept(), None, &resolved)).is_err()
        };
        assert!(caught(Start::After(12), Ok(12)));
        assert!(caught(Start::After(5), Ok(10)));
        assert!(caught(Start::Live, Ok(19)));
        assert!(caught(
            Start::Since(UNIX_EPOCH + Duration::from_secs(150)),
            Err(PositionError::SinceTooOld {
                since: UNIX_EPOCH + Duration::from_secs(150),
                oldest_seq: 10,
                oldest_time: None,
            })
        ));
        assert!(caught(
            Start::Since(UNIX_EPOCH + Duration::from_secs(5000)),
            Ok(10)
        ));
    }
}
