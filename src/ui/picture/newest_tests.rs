//! Beyond the row cap, the newest rows are drawn, from the oldest of them on, and
//! their restarts are counted as a picture of that range would count them.

use std::time::{Duration, SystemTime};

use crate::filter::Filter;
use crate::query::{Reader, RowRange};
use crate::testing::{T0, TempStore};
use crate::ui::picture::tests::{web7, web7_query};
use crate::ui::picture::{Kind, Picture, Truncated, build, millis};

fn at(secs: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs((T0 + secs) as u64)
}

/// Every mark's row, and each start's restart number, in lane order.
fn marks(picture: &Picture) -> Vec<(i64, Option<u64>)> {
    picture
        .groups
        .iter()
        .flat_map(|g| &g.lanes)
        .flat_map(|l| &l.marks)
        .map(|m| (m.row, m.restart.filter(|_| m.kind == Kind::Start)))
        .collect()
}

#[test]
fn a_row_cap_draws_the_newest_rows_from_the_oldest_of_them_and_says_how_many_of_how_many() {
    let store = TempStore::with(&web7());
    let reader = Reader::open(store.path()).unwrap();
    let mut q = web7_query();
    q.max_rows = 5;
    let picture = build(&reader, &q).unwrap();
    // web-7's 17 events are rows 1 to 17, one second apart; the newest five are
    // c4's start and exit (status 137), c5's start and clean exit, and c6's start.
    assert_eq!(
        picture.truncated,
        Some(Truncated {
            drawn: 5,
            total: 17,
            from: millis(at(12)),
        })
    );
    assert_eq!(picture.rows, 5);
    assert_eq!(picture.from, millis(at(12)), "the axis starts at row 13");
    assert!(picture.to > millis(at(16)));
    let ids: Vec<&str> = picture.groups[0]
        .lanes
        .iter()
        .map(|l| l.container_id.as_str())
        .collect();
    assert_eq!(ids, ["c4", "c5", "c6"]);
    assert_eq!(picture.groups[0].lanes[0].life.from, millis(at(12)));
    // nginx started before the oldest row drawn: c4's start is a restart, as in a
    // picture of the range from that row on, which counts the same.
    assert_eq!(
        marks(&picture),
        [
            (13, Some(1)),
            (14, None),
            (15, Some(2)),
            (16, None),
            (17, Some(3))
        ]
    );
    let mut ranged = web7_query();
    ranged.query.since = Some(at(12));
    let ranged = build(&reader, &ranged).unwrap();
    assert_eq!(ranged.truncated, None);
    assert_eq!(marks(&ranged), marks(&picture));
    assert_eq!(ranged.counts, picture.counts);
    assert_eq!(
        (picture.counts.restarts, picture.counts.killed),
        (3, 1),
        "{:?}",
        picture.counts
    );

    q.max_rows = 17;
    let whole = build(&reader, &q).unwrap();
    assert_eq!((whole.truncated, whole.rows), (None, 17));
    assert!(
        whole.from < millis(at(0)),
        "the events' own range, with a margin"
    );
}

/// Cut at a container's very first start, that start is no restart.
#[test]
fn the_first_start_drawn_is_a_restart_only_when_the_container_started_before() {
    let store = TempStore::with(&web7());
    let reader = Reader::open(store.path()).unwrap();
    let mut q = web7_query();
    // Rows 4 to 17: c1's start (row 4) is nginx's first.
    q.max_rows = 14;
    let picture = build(&reader, &q).unwrap();
    assert_eq!(picture.from, millis(at(3)));
    let starts: Vec<(i64, Option<u64>)> = marks(&picture)
        .into_iter()
        .filter(|(row, _)| [4, 7, 10, 13, 15, 17].contains(row))
        .collect();
    assert_eq!(
        starts,
        [
            (4, None),
            (7, Some(1)),
            (10, Some(2)),
            (13, Some(3)),
            (15, Some(4)),
            (17, Some(5))
        ]
    );
    assert_eq!(picture.counts.restarts, 5);
}

/// A filter SQL cannot answer (a regular expression) is matched row by row, and the
/// newest matching rows are still the ones drawn; a time range bounds them too.
#[test]
fn a_filter_matched_row_by_row_also_draws_its_newest_rows() {
    let store = TempStore::with(&web7());
    let reader = Reader::open(store.path()).unwrap();
    let mut q = web7_query();
    q.query.filter = Filter::parse(r#"topic~="^/tasks/(start|exit)$""#).unwrap();
    assert!(q.query.predicate(RowRange::ALL).recheck);
    q.max_rows = 4;
    let picture = build(&reader, &q).unwrap();
    // Of web-7's 12 starts and exits, rows 14 to 17 (the ooms at 8 and 12 left out).
    assert_eq!(
        picture.truncated,
        Some(Truncated {
            drawn: 4,
            total: 12,
            from: millis(at(13)),
        })
    );
    let rows: Vec<i64> = marks(&picture).into_iter().map(|(row, _)| row).collect();
    assert_eq!(rows, [14, 15, 16, 17]);
    assert_eq!(picture.from, millis(at(13)));

    q.query.until = Some(at(12));
    q.max_rows = 3;
    let picture = build(&reader, &q).unwrap();
    let rows: Vec<i64> = marks(&picture).into_iter().map(|(row, _)| row).collect();
    assert_eq!(rows, [9, 10, 11], "the newest before the range's end");
    assert_eq!(
        picture.truncated.map(|t| (t.drawn, t.total, t.from)),
        Some((3, 7, millis(at(8))))
    );
    assert_eq!(picture.to, millis(at(12)));
}
