//! The audit store's hash chain: the exact bytes each row's hash covers.
//!
//! `hash = SHA-256("eventgate.audit.v1" || prev_hash || canonical row bytes)`, where
//! `prev_hash` is the hash of the chained row before it (32 zero bytes for the first
//! one, or the retention checkpoint's hash once earlier rows were pruned). The row
//! bytes are the stored columns `seq, id, timestamp, received_at, namespace, topic,
//! type_url, payload, event, source`, in that order, each as one typed value, then,
//! only when at least one of them is not NULL, `publisher_uid, publisher_gid,
//! publisher_pid, publisher_subject` the same way, then, only when the row is not
//! live (`origin` other than `'live'`, or an `origin_clock` that is not NULL), `origin,
//! origin_clock` the same way:
//!
//! - NULL: the single byte `0x00`;
//! - INTEGER: `0x01`, the length 8 as u64 big-endian, the i64 big-endian;
//! - REAL: `0x02`, the length 8, the f64's IEEE 754 bits big-endian;
//! - TEXT: `0x03`, the byte length as u64 big-endian, the UTF-8 bytes;
//! - BLOB: `0x04`, the byte length as u64 big-endian, the bytes.
//!
//! The tags are SQLite's storage class numbers (`typeof()`), so the hash covers the
//! type as stored: a value rewritten with the same bytes but another type (a payload
//! BLOB turned into TEXT) is a change too. The writer never stores REAL; it is
//! encoded only so that any row read back has exactly one encoding. Every value
//! carries its tag and length, so NULL differs from empty and no two rows share an
//! encoding. `migrations/README.md` (schema versions 3 and 5) spells this out for
//! tools of other authors.
//!
//! The publisher columns (schema version 5) are left out when all four are NULL, so
//! every row chained before they existed (and every row without a publisher since)
//! hashes exactly as it did, and old chains keep verifying. That is unambiguous:
//! every value carries its tag and length, so ten values can never encode like
//! fourteen, and giving a row a publisher, or taking its publisher away, changes its
//! hash.
//!
//! The origin columns (schema version 6) are left out the same way for live rows, so
//! every chain written before them keeps verifying. A row hashes 10, 12 (origin), 14
//! (publisher) or 16 (both) values: each count has one meaning, and marking a live
//! row reconciled (or the reverse) changes its hash.

use rusqlite::types::ValueRef;
use sha2::{Digest, Sha256};

use super::EventRow;

/// The domain tag hashed first: these hashes can never be confused with SHA-256
/// hashes of anything else, and a future encoding gets a new tag.
pub const DOMAIN: &[u8] = b"eventgate.audit.v1";

pub const HASH_LEN: usize = 32;

pub type Hash = [u8; HASH_LEN];

/// What the first chained row links to when nothing was pruned after the chain began.
pub const ZERO: Hash = [0; HASH_LEN];

/// The hashed columns, in hashing order; the publisher's [`PUBLISHER_COLUMNS`] only
/// when one of them is not NULL, the last [`ORIGIN_COLUMNS`] only when the row is not
/// live.
pub const COLUMNS: [&str; 16] = [
    "seq",
    "id",
    "timestamp",
    "received_at",
    "namespace",
    "topic",
    "type_url",
    "payload",
    "event",
    "source",
    "publisher_uid",
    "publisher_gid",
    "publisher_pid",
    "publisher_subject",
    "origin",
    "origin_clock",
];

/// How many of [`COLUMNS`] are the publisher's, hashed only when not all NULL.
pub const PUBLISHER_COLUMNS: usize = 4;

/// How many of [`COLUMNS`] are the origin's (the last ones), hashed only when the row
/// is not live.
pub const ORIGIN_COLUMNS: usize = 2;

/// The columns hashed for every row.
const ALWAYS: usize = COLUMNS.len() - PUBLISHER_COLUMNS - ORIGIN_COLUMNS;

/// One row's hashed columns as stored (or about to be stored).
pub type RowValues<'a> = [ValueRef<'a>; 16];

/// The hash of a row chained to `prev`.
pub fn row_hash(prev: &Hash, values: &RowValues<'_>) -> Hash {
    RowHasher::default().hash(prev, values)
}

/// Hashes rows one after another, reusing one buffer: the bytes of a row are laid
/// out first and hashed in one call, about twice as fast as feeding SHA-256 the
/// thirty small pieces one by one.
#[derive(Default)]
pub struct RowHasher {
    buf: Vec<u8>,
}

impl RowHasher {
    pub fn hash(&mut self, prev: &Hash, values: &RowValues<'_>) -> Hash {
        let buf = &mut self.buf;
        buf.clear();
        buf.extend_from_slice(DOMAIN);
        buf.extend_from_slice(prev);
        let (always, rest) = values.split_at(ALWAYS);
        let (publisher, origin) = rest.split_at(PUBLISHER_COLUMNS);
        let publisher = match publisher.iter().all(|v| *v == ValueRef::Null) {
            true => &[][..],
            false => publisher,
        };
        let origin = match origin {
            [ValueRef::Text(b"live"), ValueRef::Null] => &[][..],
            other => other,
        };
        for value in always.iter().chain(publisher).chain(origin) {
            match *value {
                ValueRef::Null => buf.push(0),
                ValueRef::Integer(i) => tagged(buf, 1, &i.to_be_bytes()),
                ValueRef::Real(f) => tagged(buf, 2, &f.to_bits().to_be_bytes()),
                ValueRef::Text(text) => tagged(buf, 3, text),
                ValueRef::Blob(blob) => tagged(buf, 4, blob),
            }
        }
        Sha256::digest(buf.as_slice()).into()
    }
}

fn tagged(buf: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    buf.push(tag);
    buf.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    buf.extend_from_slice(bytes);
}

/// The values the writer binds for `row`, typed as SQLite stores them.
pub fn values<'a>(seq: i64, row: &'a EventRow<'_>) -> RowValues<'a> {
    let text = |s: Option<&'a str>| s.map_or(ValueRef::Null, |s| ValueRef::Text(s.as_bytes()));
    let int = |i: Option<i64>| i.map_or(ValueRef::Null, ValueRef::Integer);
    [
        ValueRef::Integer(seq),
        ValueRef::Text(row.id.as_bytes()),
        text(row.timestamp.as_deref()),
        ValueRef::Text(row.received_at.as_bytes()),
        ValueRef::Text(row.namespace.as_bytes()),
        ValueRef::Text(row.topic.as_bytes()),
        text(row.type_url),
        row.payload.map_or(ValueRef::Null, ValueRef::Blob),
        text(row.event),
        ValueRef::Text(row.source.as_bytes()),
        int(row.publisher.0),
        int(row.publisher.1),
        int(row.publisher.2),
        text(row.publisher.3),
        ValueRef::Text(row.origin.as_bytes()),
        text(row.origin_clock),
    ]
}

/// Lower-case hex, as `eventgate audit` prints hashes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Parses 64 hex digits (either case) into a hash.
pub fn parse_hex(text: &str) -> Result<Hash, String> {
    let text = text.trim();
    if text.len() != HASH_LEN * 2 || !text.is_ascii() {
        return Err(format!(
            "a hash is {} hex digits, got {:?} ({} characters)",
            HASH_LEN * 2,
            text,
            text.chars().count()
        ));
    }
    let mut hash = ZERO;
    for (i, pair) in text.as_bytes().chunks_exact(2).enumerate() {
        let digit = |c: u8| {
            char::from(c)
                .to_digit(16)
                .ok_or_else(|| format!("{:?} is not a hex digit (in {text:?})", char::from(c)))
        };
        hash[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?)
            .map_err(|_| format!("bad hex in {text:?}"))?;
    }
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RowValues<'static> {
        [
            ValueRef::Integer(7),
            ValueRef::Text(b"0190c4d2-0000-7000-8000-000000000001"),
            ValueRef::Text(b"2024-05-01T10:00:00.000000005Z"),
            ValueRef::Text(b"2024-05-01T10:00:00.100000000Z"),
            ValueRef::Text(b"default"),
            ValueRef::Text(b"/tasks/exit"),
            ValueRef::Text(b"containerd.events.TaskExit"),
            ValueRef::Blob(&[10, 2, 99, 49]),
            ValueRef::Text(br#"{"container_id":"c1"}"#),
            ValueRef::Text(b"publish"),
            ValueRef::Null,
            ValueRef::Null,
            ValueRef::Null,
            ValueRef::Null,
            ValueRef::Text(b"live"),
            ValueRef::Null,
        ]
    }

    /// The layout written out by hand, byte by byte, as migrations/README.md
    /// documents it: a third party's implementation must get this same hash.
    #[test]
    fn the_hash_covers_exactly_the_documented_bytes() {
        let prev = [0xab; 32];
        let mut expected = Vec::new();
        expected.extend_from_slice(b"eventgate.audit.v1");
        expected.extend_from_slice(&prev);
        expected.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 7]);
        for (tag, bytes) in [
            (3u8, &b"0190c4d2-0000-7000-8000-000000000001"[..]),
            (3, b"2024-05-01T10:00:00.000000005Z"),
            (3, b"2024-05-01T10:00:00.100000000Z"),
            (3, b"default"),
            (3, b"/tasks/exit"),
            (3, b"containerd.events.TaskExit"),
            (4, &[10, 2, 99, 49]),
            (3, br#"{"container_id":"c1"}"#),
            (3, b"publish"),
        ] {
            expected.push(tag);
            expected.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            expected.extend_from_slice(bytes);
        }
        let direct: Hash = Sha256::digest(&expected).into();
        assert_eq!(row_hash(&prev, &sample()), direct);

        // With a publisher, its four columns follow, NULLs included.
        let mut with_publisher = sample();
        with_publisher[10] = ValueRef::Integer(1000);
        with_publisher[11] = ValueRef::Integer(100);
        with_publisher[13] = ValueRef::Null;
        expected.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x03, 0xe8]);
        expected.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 100]);
        expected.extend_from_slice(&[0, 0]);
        let direct: Hash = Sha256::digest(&expected).into();
        assert_eq!(row_hash(&prev, &with_publisher), direct);

        let mut certificate = sample();
        certificate[13] = ValueRef::Text(b"CN=c");
        let mut expected = expected[..expected.len() - 17 * 2 - 2].to_vec();
        expected.extend_from_slice(&[0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4]);
        expected.extend_from_slice(b"CN=c");
        let direct: Hash = Sha256::digest(&expected).into();
        assert_eq!(row_hash(&prev, &certificate), direct);
    }

    fn tagged_text(out: &mut Vec<u8>, text: &[u8]) {
        out.push(3);
        out.extend_from_slice(&(text.len() as u64).to_be_bytes());
        out.extend_from_slice(text);
    }

    /// A reconciled row: its two origin values follow the ten (and the publisher's
    /// four when it has one); a live row hashes as the ten alone.
    #[test]
    fn the_origin_is_hashed_only_for_rows_that_are_not_live() {
        let prev = [0x5a; 32];
        let mut ten = b"eventgate.audit.v1".to_vec();
        ten.extend_from_slice(&prev);
        ten.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 7]);
        for text in [
            &b"0190c4d2-0000-7000-8000-000000000001"[..],
            b"2024-05-01T10:00:00.000000005Z",
            b"2024-05-01T10:00:00.100000000Z",
            b"default",
            b"/tasks/exit",
            b"containerd.events.TaskExit",
        ] {
            tagged_text(&mut ten, text);
        }
        ten.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0, 4, 10, 2, 99, 49]);
        tagged_text(&mut ten, br#"{"container_id":"c1"}"#);
        tagged_text(&mut ten, b"publish");
        let live: Hash = Sha256::digest(&ten).into();
        assert_eq!(
            row_hash(&prev, &sample()),
            live,
            "live: the ten values only"
        );

        let mut reconciled = sample();
        reconciled[14] = ValueRef::Text(b"reconciled");
        reconciled[15] = ValueRef::Text(b"daemon");
        let mut twelve = ten.clone();
        tagged_text(&mut twelve, b"reconciled");
        tagged_text(&mut twelve, b"daemon");
        let direct: Hash = Sha256::digest(&twelve).into();
        assert_eq!(row_hash(&prev, &reconciled), direct);

        // With a publisher too: its four values, then the origin's two.
        reconciled[13] = ValueRef::Text(b"CN=c");
        let mut sixteen = ten.clone();
        sixteen.extend_from_slice(&[0, 0, 0]);
        tagged_text(&mut sixteen, b"CN=c");
        tagged_text(&mut sixteen, b"reconciled");
        tagged_text(&mut sixteen, b"daemon");
        let direct: Hash = Sha256::digest(&sixteen).into();
        assert_eq!(row_hash(&prev, &reconciled), direct);

        // A live row with a clock (an edit) is not live: the clock is hashed.
        let mut clocked = sample();
        clocked[15] = ValueRef::Text(b"daemon");
        assert_ne!(row_hash(&prev, &clocked), live);
    }

    #[test]
    fn null_empty_type_and_boundaries_all_change_the_hash() {
        let base = sample();
        let hash = row_hash(&ZERO, &base);
        let mut variants: Vec<RowValues<'static>> = Vec::new();
        let mut with = |i: usize, v: ValueRef<'static>| {
            let mut row = base;
            row[i] = v;
            variants.push(row);
        };
        with(2, ValueRef::Null);
        with(10, ValueRef::Integer(0));
        with(12, ValueRef::Integer(0));
        with(13, ValueRef::Text(b""));
        with(13, ValueRef::Text(b"CN=x"));
        with(14, ValueRef::Text(b"reconciled"));
        with(15, ValueRef::Text(b"daemon"));
        with(14, ValueRef::Text(b""));
        with(7, ValueRef::Null);
        with(7, ValueRef::Blob(&[]));
        with(7, ValueRef::Text(&[10, 2, 99, 49]));
        with(0, ValueRef::Real(7.0));
        with(0, ValueRef::Text(b"7"));
        // The same bytes split differently between two neighbouring columns.
        with(4, ValueRef::Text(b"default/tasks"));
        variants.last_mut().unwrap()[5] = ValueRef::Text(b"/exit");
        let mut hashes: Vec<Hash> = variants.iter().map(|v| row_hash(&ZERO, v)).collect();
        hashes.push(hash);
        hashes.push(row_hash(&[1; 32], &base));
        let count = hashes.len();
        hashes.sort();
        hashes.dedup();
        assert_eq!(hashes.len(), count, "every variant hashes differently");
        assert_eq!(row_hash(&ZERO, &base), hash, "deterministic");
    }

    #[test]
    fn hex_round_trips_and_bad_hex_is_named() {
        let hash = row_hash(&ZERO, &sample());
        let text = hex(&hash);
        assert_eq!(text.len(), 64);
        assert_eq!(parse_hex(&text).unwrap(), hash);
        assert_eq!(parse_hex(&text.to_uppercase()).unwrap(), hash);
        assert!(parse_hex("abc").unwrap_err().contains("64 hex digits"));
        let bad = format!("{}zz", &text[..62]);
        assert!(parse_hex(&bad).unwrap_err().contains("'z'"));
    }
}
