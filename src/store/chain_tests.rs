//! The chain's byte layout, checked against hand-written bytes.

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
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
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

/// A row with a workload: its seven values follow everything else, NULLs included; a
/// row whose seven are NULL hashes as it did before they existed.
#[test]
fn the_workload_is_hashed_only_for_rows_that_have_one() {
    let prev = [0x11; 32];
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
    let plain: Hash = Sha256::digest(&ten).into();
    assert_eq!(row_hash(&prev, &sample()), plain);

    // A pod's container: the seven after the ten, in column order.
    let mut pod = sample();
    pod[16] = ValueRef::Text(b"web-7");
    pod[17] = ValueRef::Text(b"shop");
    pod[19] = ValueRef::Text(b"nginx");
    pod[20] = ValueRef::Text(b"container");
    pod[22] = ValueRef::Text(br#"{"a":"b"}"#);
    let mut seventeen = ten.clone();
    tagged_text(&mut seventeen, b"web-7");
    tagged_text(&mut seventeen, b"shop");
    seventeen.push(0);
    tagged_text(&mut seventeen, b"nginx");
    tagged_text(&mut seventeen, b"container");
    seventeen.push(0);
    tagged_text(&mut seventeen, br#"{"a":"b"}"#);
    let direct: Hash = Sha256::digest(&seventeen).into();
    assert_eq!(row_hash(&prev, &pod), direct);

    // Everything: publisher, origin, then the workload.
    pod[13] = ValueRef::Text(b"CN=c");
    pod[14] = ValueRef::Text(b"reconciled");
    pod[15] = ValueRef::Text(b"daemon");
    let mut all = ten.clone();
    all.extend_from_slice(&[0, 0, 0]);
    tagged_text(&mut all, b"CN=c");
    tagged_text(&mut all, b"reconciled");
    tagged_text(&mut all, b"daemon");
    all.extend_from_slice(&seventeen[ten.len()..]);
    let direct: Hash = Sha256::digest(&all).into();
    assert_eq!(row_hash(&prev, &pod), direct);

    // An image alone (a container no CRI plugin made) is a workload too.
    let mut image = sample();
    image[21] = ValueRef::Text(b"busybox");
    let mut with_image = ten.clone();
    with_image.extend_from_slice(&[0, 0, 0, 0, 0]);
    tagged_text(&mut with_image, b"busybox");
    with_image.push(0);
    let direct: Hash = Sha256::digest(&with_image).into();
    assert_eq!(row_hash(&prev, &image), direct);
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
    with(16, ValueRef::Text(b""));
    with(16, ValueRef::Text(b"web-7"));
    with(18, ValueRef::Text(b"web-7"));
    with(22, ValueRef::Text(b"{}"));
    with(22, ValueRef::Blob(b"{}"));
    with(23, ValueRef::Text(b"web-1"));
    with(23, ValueRef::Text(b""));
    with(24, ValueRef::Integer(0));
    with(24, ValueRef::Integer(7));
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

/// A row with a node hashes the ten, the workload's seven (NULL or not) and the
/// node, byte for byte; a row without one hashes as before the column existed.
#[test]
fn the_node_is_hashed_after_the_workload_only_when_set() {
    let prev = [0x11; 32];
    let base = sample();
    let mut expected = Vec::new();
    expected.extend_from_slice(DOMAIN);
    expected.extend_from_slice(&prev);
    fn bytes_of(out: &mut Vec<u8>, values: &[ValueRef<'_>]) {
        for value in values {
            match *value {
                ValueRef::Null => out.push(0),
                ValueRef::Integer(i) => tagged(out, 1, &i.to_be_bytes()),
                ValueRef::Text(t) => tagged(out, 3, t),
                ValueRef::Blob(b) => tagged(out, 4, b),
                ValueRef::Real(_) => unreachable!(),
            }
        }
    }
    bytes_of(&mut expected, &base[..10]);
    let without_node: Hash = Sha256::digest(&expected).into();
    assert_eq!(row_hash(&prev, &base), without_node, "as before");

    let mut with_node = base;
    with_node[23] = ValueRef::Text(b"web-1");
    // The seven NULL workload values, then the node.
    bytes_of(&mut expected, &base[16..23]);
    tagged(&mut expected, 3, b"web-1");
    let direct: Hash = Sha256::digest(&expected).into();
    assert_eq!(row_hash(&prev, &with_node), direct);
}

/// A row taken in from another gateway (a node seq set) hashes all 25 values in
/// column order, NULL or not, whatever else it has: a count no other row has.
#[test]
fn a_row_with_a_node_seq_hashes_every_column() {
    let prev = [0x22; 32];
    let mut row = sample();
    row[23] = ValueRef::Text(b"web-1");
    row[24] = ValueRef::Integer(41);
    let mut expected = Vec::new();
    expected.extend_from_slice(DOMAIN);
    expected.extend_from_slice(&prev);
    for value in &row[..25] {
        match *value {
            ValueRef::Null => expected.push(0),
            ValueRef::Integer(i) => tagged(&mut expected, 1, &i.to_be_bytes()),
            ValueRef::Text(t) => tagged(&mut expected, 3, t),
            ValueRef::Blob(b) => tagged(&mut expected, 4, b),
            ValueRef::Real(_) => unreachable!(),
        }
    }
    let direct: Hash = Sha256::digest(&expected).into();
    assert_eq!(row_hash(&prev, &row), direct);
    let mut without = row;
    without[24] = ValueRef::Null;
    assert_ne!(row_hash(&prev, &without), direct);
}

fn encoded(prev: &Hash, values: &[ValueRef<'_>]) -> Vec<u8> {
    let mut out = DOMAIN.to_vec();
    out.extend_from_slice(prev);
    for value in values {
        match *value {
            ValueRef::Null => out.push(0),
            ValueRef::Integer(i) => tagged(&mut out, 1, &i.to_be_bytes()),
            ValueRef::Text(t) => tagged(&mut out, 3, t),
            ValueRef::Blob(b) => tagged(&mut out, 4, b),
            ValueRef::Real(_) => unreachable!(),
        }
    }
    out
}

/// A reconciled row written since schema version 12 (its witness set) or a row with a
/// reason hashes all 27 values in column order, NULL or not, `reconciled_from` and
/// `reason` last, byte for byte.
#[test]
fn a_row_with_a_witness_or_a_reason_hashes_every_column() {
    let prev = [0x33; 32];
    let mut row = sample();
    row[14] = ValueRef::Text(b"reconciled");
    row[15] = ValueRef::Text(b"daemon");
    row[16] = ValueRef::Text(b"web-7");
    row[23] = ValueRef::Text(b"node-1");
    row[25] = ValueRef::Text(b"cri");
    row[26] = ValueRef::Text(b"OOMKilled");
    let mut expected = encoded(&prev, &row[..10]);
    // The publisher's four NULLs, the origin, the workload (one value, six NULLs),
    // the node, a NULL node seq, then the two.
    expected.extend_from_slice(&[0, 0, 0, 0]);
    tagged_text(&mut expected, b"reconciled");
    tagged_text(&mut expected, b"daemon");
    tagged_text(&mut expected, b"web-7");
    expected.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    tagged_text(&mut expected, b"node-1");
    expected.push(0);
    tagged_text(&mut expected, b"cri");
    tagged_text(&mut expected, b"OOMKilled");
    assert_eq!(expected, encoded(&prev, &row), "the hand-written bytes");
    let direct: Hash = Sha256::digest(&expected).into();
    assert_eq!(row_hash(&prev, &row), direct);

    // A witness without a reason (a containerd-reconciled row): the reason's NULL too.
    let mut witness_only = sample();
    witness_only[14] = ValueRef::Text(b"reconciled");
    witness_only[15] = ValueRef::Text(b"reconcile");
    witness_only[25] = ValueRef::Text(b"containerd");
    let direct: Hash = Sha256::digest(encoded(&prev, &witness_only)).into();
    assert_eq!(row_hash(&prev, &witness_only), direct);

    // A reason alone: every column, the NULL witness included.
    let mut reason_only = sample();
    reason_only[26] = ValueRef::Text(b"Error");
    let direct: Hash = Sha256::digest(encoded(&prev, &reason_only)).into();
    assert_eq!(row_hash(&prev, &reason_only), direct);

    // With a node seq as well: still the 27.
    let mut taken_in = row;
    taken_in[24] = ValueRef::Integer(9);
    let direct: Hash = Sha256::digest(encoded(&prev, &taken_in)).into();
    assert_eq!(row_hash(&prev, &taken_in), direct);
}

/// Rows whose two version-12 columns are NULL hash exactly as they did before the
/// columns existed, whatever else they hold: old chains keep verifying.
#[test]
fn rows_without_a_witness_or_a_reason_hash_as_before() {
    let prev = [0x44; 32];
    let ten = |row: &RowValues<'_>| -> Hash { Sha256::digest(encoded(&prev, &row[..10])).into() };
    let base = sample();
    assert_eq!(row_hash(&prev, &base), ten(&base), "a live row: the ten");

    // A reconciled row stored before version 12: the ten and the origin's two.
    let mut old_reconciled = sample();
    old_reconciled[14] = ValueRef::Text(b"reconciled");
    old_reconciled[15] = ValueRef::Text(b"daemon");
    let mut twelve = encoded(&prev, &old_reconciled[..10]);
    tagged_text(&mut twelve, b"reconciled");
    tagged_text(&mut twelve, b"daemon");
    let direct: Hash = Sha256::digest(&twelve).into();
    assert_eq!(row_hash(&prev, &old_reconciled), direct);

    // A row with a node: the ten, the seven workload values, the node.
    let mut on_node = sample();
    on_node[23] = ValueRef::Text(b"web-1");
    let mut values = on_node[..10].to_vec();
    values.extend_from_slice(&on_node[16..24]);
    let direct: Hash = Sha256::digest(encoded(&prev, &values)).into();
    assert_eq!(row_hash(&prev, &on_node), direct);

    // A row with a node seq: the first 25.
    on_node[24] = ValueRef::Integer(3);
    let direct: Hash = Sha256::digest(encoded(&prev, &on_node[..25])).into();
    assert_eq!(row_hash(&prev, &on_node), direct);
}

/// Setting, changing or clearing either column changes the row's hash, and the two
/// never trade places.
#[test]
fn setting_changing_or_clearing_a_witness_or_a_reason_changes_the_hash() {
    let mut reconciled = sample();
    reconciled[14] = ValueRef::Text(b"reconciled");
    reconciled[15] = ValueRef::Text(b"daemon");
    let mut variants: Vec<RowValues<'static>> = vec![sample(), reconciled];
    for base in [sample(), reconciled] {
        for (from, reason) in [
            (Some(&b"containerd"[..]), None),
            (Some(b"cri"), None),
            (Some(b"docker"), None),
            (Some(b"cri"), Some(&b"OOMKilled"[..])),
            (Some(b"cri"), Some(b"Completed")),
            (Some(b"docker"), Some(b"OOMKilled")),
            (None, Some(b"OOMKilled")),
            (None, Some(b"")),
            (Some(b""), None),
            // The same text in the other column.
            (Some(b"OOMKilled"), None),
        ] {
            let mut row = base;
            row[25] = from.map_or(ValueRef::Null, ValueRef::Text);
            row[26] = reason.map_or(ValueRef::Null, ValueRef::Text);
            variants.push(row);
        }
    }
    let mut hashes: Vec<Hash> = variants.iter().map(|v| row_hash(&ZERO, v)).collect();
    let count = hashes.len();
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), count, "every variant hashes differently");
}
