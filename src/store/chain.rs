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
//! origin_clock` the same way, then, only when at least one of them is not NULL,
//! `pod_name, pod_namespace, pod_uid, container_name, container_kind, image, labels`
//! the same way (and always when `node` is not NULL), then, only when it is not
//! NULL, `node` the same way:
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
//!
//! The workload columns (schema version 8) are left out when all seven are NULL
//! (every row stored before them, and every event about no container's record
//! since). With them a row hashes 17, 19, 21 or 23 values, none of which is a count
//! without them, so giving a row a pod, or taking its pod away, changes its hash too.
//!
//! The node column (schema version 10) is left out when NULL (every row stored
//! before it). A row with a node hashes the seven workload values too, NULL or not,
//! then the node: 18, 20, 22 or 24 values, never a count a row without a node has
//! (10, 12, 14, 16, 17, 19, 21, 23), so setting, changing or removing a row's node
//! changes its hash, and chains written before it keep verifying.
//!
//! The node_seq column (schema version 11) is set only on events a central gateway
//! took in from another gateway. A row with one (and neither column of version 12)
//! hashes the first 25 columns, NULL or not, `node_seq` last: 25 values, a count no
//! other row has.
//!
//! The reconciled_from and reason columns (schema version 12) are set only on
//! reconciled rows written since (whose record the event was reconstructed from) and
//! on events whose manager gave a reason. A row where either is not NULL hashes every
//! column, NULL or not, `reconciled_from, reason` last: 27 values, a count no other
//! row has; every other row hashes as before, so chains written before them keep
//! verifying, and setting, changing or clearing either changes the row's hash.

use rusqlite::types::ValueRef;
use sha2::{Digest, Sha256};

use super::EventRow;

/// The domain tag hashed first: these hashes can never be confused with SHA-256
/// hashes of anything else, and a future encoding gets a new tag.
pub(crate) const DOMAIN: &[u8] = b"eventgate.audit.v1";

pub(crate) const HASH_LEN: usize = 32;

pub(crate) type Hash = [u8; HASH_LEN];

/// What the first chained row links to when nothing was pruned after the chain began.
pub(crate) const ZERO: Hash = [0; HASH_LEN];

/// The hashed columns, in hashing order; the publisher's `PUBLISHER_COLUMNS` only
/// when one of them is not NULL, the `ORIGIN_COLUMNS` only when the row is not
/// live, the `WORKLOAD_COLUMNS` only when one of them (or `node`) is not NULL,
/// `node` only when not NULL; `node_seq` makes every one of the first 25 hashed, and
/// `reconciled_from` or `reason` every one of the 27.
pub const COLUMNS: [&str; 27] = [
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
    "pod_name",
    "pod_namespace",
    "pod_uid",
    "container_name",
    "container_kind",
    "image",
    "labels",
    "node",
    "node_seq",
    "reconciled_from",
    "reason",
];

/// How many of [`COLUMNS`] are the publisher's, hashed only when not all NULL.
pub(crate) const PUBLISHER_COLUMNS: usize = 4;

/// How many of [`COLUMNS`] are the origin's (after the publisher's), hashed only when
/// the row is not live.
pub(crate) const ORIGIN_COLUMNS: usize = 2;

/// How many of [`COLUMNS`] are the workload's (after the origin's), hashed only when
/// one of them, or the node, is not NULL.
pub(crate) const WORKLOAD_COLUMNS: usize = super::workload::COLUMNS.len();

/// How many of [`COLUMNS`] are the node's (after the workload's), hashed only when
/// not NULL.
pub(crate) const NODE_COLUMNS: usize = 1;

/// How many of [`COLUMNS`] are the node seq's (after the node's); when not NULL, every
/// column before it is hashed too.
pub(crate) const NODE_SEQ_COLUMNS: usize = 1;

/// How many of [`COLUMNS`] are schema version 12's, `reconciled_from` and `reason`
/// (the last ones); when either is not NULL, every column is hashed.
pub(crate) const RECONCILED_COLUMNS: usize = 2;

/// The columns before [`RECONCILED_COLUMNS`]: every row stored before version 12.
const BEFORE_RECONCILED: usize = COLUMNS.len() - RECONCILED_COLUMNS;

/// The columns hashed for every row.
const ALWAYS: usize = BEFORE_RECONCILED
    - PUBLISHER_COLUMNS
    - ORIGIN_COLUMNS
    - WORKLOAD_COLUMNS
    - NODE_COLUMNS
    - NODE_SEQ_COLUMNS;

/// One row's hashed columns as stored (or about to be stored).
pub(crate) type RowValues<'a> = [ValueRef<'a>; 27];

/// The hash of a row chained to `prev`.
pub fn row_hash(prev: &Hash, values: &RowValues<'_>) -> Hash {
    RowHasher::default().hash(prev, values)
}

/// Hashes rows one after another, reusing one buffer: the bytes of a row are laid
/// out first and hashed in one call, about twice as fast as feeding SHA-256 the
/// thirty small pieces one by one.
#[derive(Default)]
pub(crate) struct RowHasher {
    buf: Vec<u8>,
}

impl RowHasher {
    pub(crate) fn hash<'v>(&mut self, prev: &Hash, values: &'v RowValues<'v>) -> Hash {
        self.lay_out(prev, values);
        Sha256::digest(self.buf.as_slice()).into()
    }

    /// Puts the bytes a row's hash covers into `buf`, apart from hashing them: a
    /// leaf needs the same bytes but not the chain's hash of them.
    fn lay_out<'v>(&mut self, prev: &Hash, values: &'v RowValues<'v>) {
        let buf = &mut self.buf;
        buf.clear();
        buf.extend_from_slice(DOMAIN);
        buf.extend_from_slice(prev);
        let (before, reconciled) = values.split_at(BEFORE_RECONCILED);
        if reconciled.iter().any(|v| *v != ValueRef::Null) {
            values.iter().for_each(|value| push_value(buf, value));
            return;
        }
        if before[BEFORE_RECONCILED - 1] != ValueRef::Null {
            before.iter().for_each(|value| push_value(buf, value));
            return;
        }
        let (always, rest) = before.split_at(ALWAYS);
        let (publisher, rest) = rest.split_at(PUBLISHER_COLUMNS);
        let (origin, rest) = rest.split_at(ORIGIN_COLUMNS);
        let (workload, rest) = rest.split_at(WORKLOAD_COLUMNS);
        let node = &rest[..NODE_COLUMNS];
        let unless_null =
            |values: &'v [ValueRef<'v>]| match values.iter().all(|v| *v == ValueRef::Null) {
                true => &[][..],
                false => values,
            };
        let origin = match origin {
            [ValueRef::Text(b"live"), ValueRef::Null] => &[][..],
            other => other,
        };
        let node = unless_null(node);
        let workload = match node.is_empty() {
            true => unless_null(workload),
            false => workload,
        };
        let parts = always.iter().chain(unless_null(publisher));
        for value in parts.chain(origin).chain(workload).chain(node) {
            push_value(buf, value);
        }
    }
}

impl RowHasher {
    /// The row's chain hash and its leaf hash in the tree ([`crate::store::tree`]):
    /// `SHA-256(0x00 || record)`, the record being the bytes the chain hashes after
    /// its domain tag and `prev`.
    pub(crate) fn hash_and_leaf<'v>(
        &mut self,
        prev: &Hash,
        values: &'v RowValues<'v>,
    ) -> (Hash, Hash) {
        let hash = self.hash(prev, values);
        let leaf = crate::tlog::leaf_hash(&self.buf[DOMAIN.len() + HASH_LEN..]);
        (hash, leaf)
    }

    /// The row's record: the bytes its leaf hashes.
    pub(crate) fn record<'v>(&mut self, values: &'v RowValues<'v>) -> Vec<u8> {
        self.lay_out(&ZERO, values);
        self.buf[DOMAIN.len() + HASH_LEN..].to_vec()
    }

    /// The row's leaf hash alone, for passes over stored rows that need no chain
    /// hash (the tree's check in `audit verify`, building the tree of an older
    /// store): one SHA-256 per row instead of two, and no copy of the record.
    pub(crate) fn leaf<'v>(&mut self, values: &'v RowValues<'v>) -> Hash {
        self.lay_out(&ZERO, values);
        crate::tlog::leaf_hash(&self.buf[DOMAIN.len() + HASH_LEN..])
    }
}

fn push_value(buf: &mut Vec<u8>, value: &ValueRef<'_>) {
    match *value {
        ValueRef::Null => buf.push(0),
        ValueRef::Integer(i) => tagged(buf, 1, &i.to_be_bytes()),
        ValueRef::Real(f) => tagged(buf, 2, &f.to_bits().to_be_bytes()),
        ValueRef::Text(text) => tagged(buf, 3, text),
        ValueRef::Blob(blob) => tagged(buf, 4, blob),
    }
}

fn tagged(buf: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    buf.push(tag);
    buf.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    buf.extend_from_slice(bytes);
}

/// The values the writer binds for `row`, typed as SQLite stores them. Every column
/// of the row is named (the row's own `seq` gives way to the checked `seq` the writer
/// binds), so a column added to [`EventRow`] is a compile error here until the chain
/// says how it is hashed.
pub fn values<'a>(seq: i64, row: &'a EventRow<'_>) -> RowValues<'a> {
    let EventRow {
        seq: _,
        id,
        timestamp,
        received_at,
        namespace,
        topic,
        type_url,
        payload,
        event,
        source,
        publisher,
        origin,
        origin_clock,
        workload,
        node,
        node_seq,
        reconciled_from,
        reason,
    } = row;
    let text = |s: Option<&'a str>| s.map_or(ValueRef::Null, |s| ValueRef::Text(s.as_bytes()));
    let int = |i: Option<i64>| i.map_or(ValueRef::Null, ValueRef::Integer);
    let workload = workload.values();
    [
        ValueRef::Integer(seq),
        ValueRef::Text(id.as_bytes()),
        text(timestamp.as_deref()),
        ValueRef::Text(received_at.as_bytes()),
        ValueRef::Text(namespace.as_bytes()),
        ValueRef::Text(topic.as_bytes()),
        text(*type_url),
        payload.map_or(ValueRef::Null, ValueRef::Blob),
        text(*event),
        ValueRef::Text(source.as_bytes()),
        int(publisher.0),
        int(publisher.1),
        int(publisher.2),
        text(publisher.3),
        ValueRef::Text(origin.as_bytes()),
        text(*origin_clock),
        workload[0],
        workload[1],
        workload[2],
        workload[3],
        workload[4],
        workload[5],
        workload[6],
        text(*node),
        int(*node_seq),
        text(*reconciled_from),
        text(*reason),
    ]
}

/// Reads a record (the bytes a row's leaf hashes) back into its typed values, in
/// [`COLUMNS`] order (10 to 27 of them, as the row was hashed); `None` when the
/// bytes are not such a record. Bounded by the input: each value needs its tag and
/// length.
pub(crate) fn decode_record(mut bytes: &[u8]) -> Option<Vec<rusqlite::types::Value>> {
    use rusqlite::types::Value;
    let mut values = Vec::new();
    while let Some((&tag, rest)) = bytes.split_first() {
        if values.len() == COLUMNS.len() {
            return None;
        }
        if tag == 0 {
            values.push(Value::Null);
            bytes = rest;
            continue;
        }
        let (len, rest) = rest.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_be_bytes(*len)).ok()?;
        if rest.len() < len {
            return None;
        }
        let (data, rest) = rest.split_at(len);
        values.push(match tag {
            1 => Value::Integer(i64::from_be_bytes(data.try_into().ok()?)),
            2 => Value::Real(f64::from_bits(u64::from_be_bytes(data.try_into().ok()?))),
            3 => Value::Text(std::str::from_utf8(data).ok()?.to_owned()),
            4 => Value::Blob(data.to_vec()),
            _ => return None,
        });
        bytes = rest;
    }
    (values.len() >= ALWAYS).then_some(values)
}

/// Lower-case hex, as `eventgate audit` prints hashes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Parses 64 hex digits (either case) into a hash.
pub(crate) fn parse_hex(text: &str) -> Result<Hash, String> {
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
#[path = "chain_tests.rs"]
mod tests;
