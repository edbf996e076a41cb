use std::time::{Duration, UNIX_EPOCH};

use super::*;

fn sample() -> Checkpoint {
    Checkpoint {
        node: "web-1".into(),
        store: "5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60".into(),
        row_id: 183_467,
        seq: Some(190_021),
        hash: Some([0xab; 32]),
        pruned_rows: 12,
        time: UNIX_EPOCH + Duration::new(1_800_000_000, 123_456_789),
        prev: Some([0x01; 32]),
    }
}

#[test]
fn the_text_is_exact_and_reads_back() {
    let text = sample().to_text();
    assert_eq!(
        text,
        format!(
            "eventgate audit checkpoint v1\nnode web-1\nstore 5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60\n\
             row 183467\nseq 190021\nhash {}\npruned 12\ntime 2027-01-15T08:00:00.123456789Z\n\
             prev {}\n",
            "ab".repeat(32),
            "01".repeat(32)
        )
    );
    assert_eq!(Checkpoint::parse(&text), Ok(sample()));
    let first = Checkpoint {
        seq: None,
        hash: None,
        prev: None,
        row_id: 0,
        ..sample()
    };
    assert!(first.to_text().contains("\nseq -\nhash -\n"));
    assert_eq!(Checkpoint::parse(&first.to_text()), Ok(first));
}

#[test]
fn anything_else_is_refused_with_the_line() {
    let good = sample().to_text();
    for (text, says) in [
        ("hello\n".to_owned(), "not an eventgate checkpoint"),
        (good.replace("row 183467", "rows 183467"), "line 4"),
        (good.replace("row 183467", "row x"), "row \"x\""),
        (good.replace("hash ab", "hash zz"), "line 6"),
        (good.replace("time 2027", "time 27"), "time"),
        (format!("{good}extra 1\n"), "more than"),
        (good.replace("prev ", "prev"), "line 9"),
        (good[..good.len() / 2].to_owned(), "line"),
    ] {
        let error = Checkpoint::parse(&text).unwrap_err().to_string();
        assert!(error.contains(says), "{says}: {error}");
    }
}

#[test]
fn the_head_and_the_newest_note_come_from_the_store() {
    let store = crate::testing::TempStore::new();
    let conn = store.writer();
    let head = head(&conn).expect("head");
    assert_eq!(head.row_id, 0);
    assert_eq!(head.store.len(), 32);
    assert!(head.store.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(newest_note(&conn, &head.store).expect("query"), None);
}
