//! The recorded heads: compare-and-set under concurrency, survival across a reopen,
//! refusals that write nothing, the cap on kept forks, and files that are not a
//! witness's state refused.

use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex as StdMutex, OnceLock};
use std::time::Duration;

use super::*;

fn head(size: u64, byte: u8) -> Head {
    Head {
        size,
        root: [byte; 32],
        note: format!("note {size} {byte}\n"),
        cosigned_at: 1_700_000_000 + size,
    }
}

/// The judgement the witness makes about sizes: advance only from `old`.
fn from(old: u64) -> impl FnOnce(Option<&Head>) -> Result<(), u64> {
    move |recorded| {
        let known = recorded.map_or(0, |h| h.size);
        match known == old {
            true => Ok(()),
            false => Err(known),
        }
    }
}

#[test]
fn a_head_is_recorded_replaced_and_kept_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/witness.db");
    let state = State::open(&path).unwrap();
    assert_eq!(state.head("a").unwrap(), None);
    assert_eq!(
        state.advance("a", &head(5, 1), from(0)).unwrap(),
        Advanced::Recorded
    );
    assert_eq!(state.head("a").unwrap(), Some(head(5, 1)));
    // A refusal writes nothing, and says what it was judged against.
    assert_eq!(
        state.advance("a", &head(9, 2), from(3)).unwrap(),
        Advanced::Refused {
            refusal: 5,
            recorded: Some(head(5, 1))
        }
    );
    assert_eq!(state.head("a").unwrap(), Some(head(5, 1)));
    assert_eq!(
        state.advance("a", &head(9, 2), from(5)).unwrap(),
        Advanced::Recorded
    );
    state.advance("b", &head(2, 3), from(0)).unwrap();
    drop(state);

    let state = State::open(&path).unwrap();
    assert_eq!(state.head("a").unwrap(), Some(head(9, 2)));
    assert_eq!(
        state.sizes().unwrap(),
        vec![("a".to_owned(), 9), ("b".to_owned(), 2)]
    );
}

/// What the two racing handles of the test below tell the test.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// The second handle is judging: it read the head while the first had not yet
    /// committed.
    SecondJudging,
    /// The second handle waits for the lock the first holds.
    SecondBlocked,
}

fn seen() -> &'static StdMutex<Option<mpsc::Sender<Seen>>> {
    static SEEN: OnceLock<StdMutex<Option<mpsc::Sender<Seen>>>> = OnceLock::new();
    SEEN.get_or_init(|| StdMutex::new(None))
}

/// SQLite's busy handler for the second handle: says it is blocked, then retries.
fn report_busy(_attempt: i32) -> bool {
    if let Some(tx) = &*seen().lock().unwrap() {
        let _ = tx.send(Seen::SecondBlocked);
    }
    std::thread::sleep(Duration::from_millis(1));
    true
}

/// Two requests that both start from the recorded size 5, on two connections to the
/// same file: the first is held inside its transaction until the second is either
/// judging (it read the head outside the first's transaction: both would advance
/// from 5) or waiting for the lock. Exactly one may advance; the other is judged
/// against the first's head and refused.
#[test]
fn two_advances_from_the_same_head_cannot_both_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("witness.db");
    let first = Arc::new(State::open(&path).unwrap());
    first.advance("a", &head(5, 1), from(0)).unwrap();
    let second = Arc::new(State::open(&path).unwrap());
    second.conn().busy_handler(Some(report_busy)).unwrap();
    let (tx, rx) = mpsc::channel();
    *seen().lock().unwrap() = Some(tx.clone());

    let inside = Arc::new(Barrier::new(2));
    let held_until = Arc::new(StdMutex::new(None));
    let first_thread = {
        let (first, inside, held_until) = (
            Arc::clone(&first),
            Arc::clone(&inside),
            Arc::clone(&held_until),
        );
        std::thread::spawn(move || {
            first.advance("a", &head(8, 2), |recorded| {
                inside.wait();
                // Held until the second request has either read the head or blocked.
                let what = rx
                    .recv_timeout(Duration::from_secs(20))
                    .expect("the second request neither judged nor blocked");
                *held_until.lock().unwrap() = Some(what);
                from(5)(recorded)
            })
        })
    };
    inside.wait();
    let second_thread = {
        let second = Arc::clone(&second);
        std::thread::spawn(move || {
            second.advance("a", &head(7, 3), |recorded| {
                let _ = tx.send(Seen::SecondJudging);
                from(5)(recorded)
            })
        })
    };
    let first = first_thread.join().unwrap().unwrap();
    let second = second_thread.join().unwrap().unwrap();
    *seen().lock().unwrap() = None;
    assert_eq!(first, Advanced::Recorded);
    match second {
        Advanced::Refused { refusal, recorded } => {
            assert_eq!(refusal, 8, "judged against the first's head");
            assert_eq!(recorded, Some(head(8, 2)));
        }
        Advanced::Recorded => panic!(
            "both requests advanced from size 5 (the first was held until {:?})",
            held_until.lock().unwrap()
        ),
    }
    assert_eq!(
        State::open(&path).unwrap().head("a").unwrap(),
        Some(head(8, 2))
    );
}

#[test]
fn forks_are_kept_up_to_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&dir.path().join("witness.db")).unwrap();
    let recorded = head(5, 1);
    let fork = |n: u64| Fork {
        origin: "a",
        size: 5 + n,
        root: &[2; 32],
        note: "fork\n",
        old: 5,
        recorded: &recorded,
        reason: "does not verify",
        received_at: 1_700_000_000,
    };
    for n in 0..MAX_FORKS_PER_ORIGIN as u64 {
        assert!(state.keep_fork(&fork(n)).unwrap(), "{n}");
    }
    assert!(!state.keep_fork(&fork(1000)).unwrap());
    assert_eq!(state.forks("a").unwrap(), MAX_FORKS_PER_ORIGIN as u64);
    // Another origin has its own allowance.
    let other = Fork {
        origin: "b",
        ..fork(0)
    };
    assert!(state.keep_fork(&other).unwrap());
}

#[test]
fn files_that_are_not_a_witness_state_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.db");
    std::fs::write(&text, vec![b'x'; 4096]).unwrap();
    let error = State::open(&text).unwrap_err();
    assert!(
        matches!(error, StateError::NotADatabase { .. }),
        "{error:?}"
    );
    assert_eq!(std::fs::read(&text).unwrap(), vec![b'x'; 4096]);

    let foreign = dir.path().join("foreign.db");
    let conn = rusqlite::Connection::open(&foreign).unwrap();
    conn.execute_batch("CREATE TABLE t (x); PRAGMA application_id = 7;")
        .unwrap();
    drop(conn);
    let error = State::open(&foreign).unwrap_err();
    assert!(matches!(error, StateError::Foreign { .. }), "{error:?}");
    assert!(
        error.to_string().contains("not an eventgate witness"),
        "{error}"
    );
    assert!(State::check(&foreign).is_err());

    let newer = dir.path().join("newer.db");
    State::open(&newer).unwrap();
    let conn = rusqlite::Connection::open(&newer).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let error = State::open(&newer).unwrap_err();
    assert!(
        matches!(error, StateError::TooNew { found: 99, .. }),
        "{error:?}"
    );
    assert!(State::check(&newer).is_err());
    // A missing file is fine to check: serve creates it.
    assert!(State::check(&dir.path().join("missing.db")).is_ok());
}

#[test]
fn every_migration_file_is_listed_in_order() {
    migrate::assert_files_listed(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/witness"),
        MIGRATIONS,
    );
}
