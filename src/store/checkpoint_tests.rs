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
        tree: None,
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

fn sample_v2() -> Checkpoint {
    Checkpoint {
        tree: Some(TreeFacts {
            forwarder: "audit".into(),
            size: 183_467,
            root: [0x5a; 32],
            first_row_id: 1,
            pruned_row_id: 1200,
            pruned_hash: Some([0x0c; 32]),
            retention: Some(Policy {
                max_age: Some(Duration::from_secs(2_592_000)),
                max_rows: None,
            }),
        }),
        ..sample()
    }
}

#[test]
fn version_2_is_a_tlog_checkpoint_that_reads_back() {
    let text = sample_v2().to_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "web-1/eventgate/5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60");
    assert_eq!(lines[1], "183467");
    assert_eq!(lines[2], crate::tlog::tree_head::encode_hash(&[0x5a; 32]));
    assert_eq!(lines[3], HEADER_V2);
    assert!(text.contains(&format!("\npruned 12 1200 {}\n", "0c".repeat(32))));
    assert!(text.contains("\nretention max_age=2592000s\n"));
    assert_eq!(Checkpoint::parse(&text), Ok(sample_v2()));
    for policy in [
        None,
        Some(Policy {
            max_age: None,
            max_rows: Some(10),
        }),
        Some(Policy {
            max_age: Some(Duration::from_secs(60)),
            max_rows: Some(10),
        }),
    ] {
        let mut checkpoint = sample_v2();
        checkpoint.tree.as_mut().unwrap().retention = policy;
        assert_eq!(Checkpoint::parse(&checkpoint.to_text()), Ok(checkpoint));
    }
}

#[test]
fn version_2_refuses_heads_that_disagree_with_their_facts() {
    let good = sample_v2().to_text();
    for (text, says) in [
        (good.replacen("web-1/", "web-2/", 1), "origin"),
        (good.replacen("\n183467\n", "\n183466\n", 1), "size"),
        (good.replace("first-row 1\n", "first-row 2\n"), "size"),
        (
            good.replace("retention max_age=2592000s", "retention forever"),
            "retention",
        ),
        (
            good.replace("retention max_age=2592000s", "retention "),
            "line 13",
        ),
        (good.replace("pruned 12 1200 ", "pruned 12 "), "pruned"),
        (
            good.replace(HEADER_V2, "eventgate audit checkpoint v3"),
            "not an eventgate checkpoint",
        ),
        (format!("{good}extra 1\n"), "more than"),
    ] {
        let error = Checkpoint::parse(&text).unwrap_err().to_string();
        assert!(error.contains(says), "{says}: {error}");
    }
}
