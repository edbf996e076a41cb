//! The correlator's decisions, event by event, on event time.

use super::*;
use crate::testing;

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_714_557_600;

/// Exit `n` of container `id` at `at` seconds after T0 (distinct payloads).
fn exit(seq: u64, id: &str, n: u32, at: i64) -> Event {
    testing::event(seq)
        .topic("/tasks/exit")
        .at(T0 + at)
        .json(
            "containerd.events.TaskExit",
            &format!(r#"{{"containerId":"{id}","id":"{id}","pid":{n},"exitStatus":1}}"#),
        )
        .build()
}

fn start(seq: u64, id: &str, at: i64) -> Event {
    testing::event(seq)
        .topic("/tasks/start")
        .at(T0 + at)
        .json(
            "containerd.events.TaskStart",
            &format!(r#"{{"containerId":"{id}","pid":{seq}}}"#),
        )
        .build()
}

fn verdicts(c: &mut Correlator, s: &CorrelateSettings, events: &[Event]) -> Vec<Verdict> {
    events.iter().map(|e| c.offer(e, s).0).collect()
}

/// Kubernetes' numbers: the first 10 similar events of a window go through, the
/// rest are held back as similar, and one aggregate says how many, from when to
/// when, with the last payload.
#[test]
fn past_ten_similar_events_are_aggregated() {
    let s = CorrelateSettings::default();
    let mut c = Correlator::default();
    let events: Vec<Event> = (0..30)
        .map(|n| exit(n as u64 + 1, "web", n, i64::from(n)))
        .collect();
    let got = verdicts(&mut c, &s, &events);
    assert!(got[..10].iter().all(|v| *v == Verdict::Send), "{got:?}");
    assert!(
        got[10..]
            .iter()
            .all(|v| *v == Verdict::Hold(Reason::Similar)),
        "{got:?}"
    );
    assert_eq!(c.held_events(), 20);
    assert!(
        c.due((T0 + 10) * SEC + 59 * SEC, &s).is_empty(),
        "a minute after the first held"
    );
    let due = c.due((T0 + 10) * SEC + 60 * SEC, &s);
    assert_eq!(due.len(), 1);
    let held = &due[0];
    assert_eq!(
        (held.similar, held.duplicates, held.rate_limited),
        (20, 0, 0)
    );
    assert_eq!((held.first_seq, held.last_seq), (11, 30));
    assert_eq!(
        (held.first_at, held.last_at),
        ((T0 + 10) * SEC, (T0 + 29) * SEC)
    );
    assert_eq!(held.object, "web");
    assert_eq!(
        held.payload,
        events[29].envelope.event.as_ref().unwrap().value
    );
    assert_eq!(c.held_events(), 0, "taken out");
    // The window goes on while events keep coming: the next one is held too.
    assert_eq!(
        c.offer(&exit(31, "web", 31, 31), &s).0,
        Verdict::Hold(Reason::Similar)
    );
    // After a quiet window, ten go through again.
    assert_eq!(c.offer(&exit(32, "web", 32, 31 + 601), &s).0, Verdict::Send);
}

/// The same payload again within `duplicate_window` is a duplicate; later, or with
/// the window off, it goes through.
#[test]
fn identical_repeats_are_duplicates_within_their_window() {
    let mut s = CorrelateSettings::default();
    let mut c = Correlator::default();
    let same = |seq, at| {
        testing::event(seq)
            .topic("/images/update")
            .at(T0 + at)
            .json(
                "containerd.services.images.v1.ImageUpdate",
                r#"{"name":"nginx"}"#,
            )
            .build()
    };
    assert_eq!(c.offer(&same(1, 0), &s).0, Verdict::Send);
    assert_eq!(c.offer(&same(2, 5), &s).0, Verdict::Hold(Reason::Duplicate));
    assert_eq!(
        c.offer(&same(3, 700), &s).0,
        Verdict::Send,
        "past the window"
    );
    s.duplicate_window = std::time::Duration::ZERO;
    assert_eq!(c.offer(&same(4, 701), &s).0, Verdict::Send, "turned off");
}

/// One object's token bucket spans its topics: 25 go through, then one per 5
/// minutes.
#[test]
fn an_object_beyond_its_burst_is_rate_limited_then_refilled() {
    let s = CorrelateSettings::default();
    let mut c = Correlator::default();
    let mut events = Vec::new();
    for n in 0..9u32 {
        events.push(start(u64::from(n) * 3 + 1, "loop", i64::from(n)));
        events.push(exit(u64::from(n) * 3 + 2, "loop", n, i64::from(n)));
        events.push(
            testing::event(u64::from(n) * 3 + 3)
                .topic("/tasks/delete")
                .at(T0 + i64::from(n))
                .json(
                    "containerd.events.TaskDelete",
                    &format!(r#"{{"containerId":"loop","pid":{n}}}"#),
                )
                .build(),
        );
    }
    let got = verdicts(&mut c, &s, &events);
    assert!(got[..25].iter().all(|v| *v == Verdict::Send), "{got:?}");
    assert!(
        got[25..]
            .iter()
            .all(|v| *v == Verdict::Hold(Reason::RateLimited)),
        "{got:?}"
    );
    // Another object has its own bucket.
    assert_eq!(c.offer(&exit(100, "other", 0, 9), &s).0, Verdict::Send);
    // Five minutes later, one token: one event goes through, the next does not.
    assert_eq!(c.offer(&start(101, "loop", 8 + 300), &s).0, Verdict::Send);
    assert_eq!(
        c.offer(&exit(102, "loop", 99, 8 + 300), &s).0,
        Verdict::Hold(Reason::RateLimited)
    );
}

/// Beyond `max_objects` the least recently seen key is forgotten, and what it held
/// back is handed out to be sent rather than lost.
#[test]
fn forgotten_keys_hand_their_aggregate_over() {
    let s = CorrelateSettings {
        max_objects: 2,
        aggregate_after: 1,
        ..CorrelateSettings::default()
    };
    let mut c = Correlator::default();
    assert_eq!(c.offer(&exit(1, "a", 1, 0), &s).0, Verdict::Send);
    assert_eq!(
        c.offer(&exit(2, "a", 2, 1), &s).0,
        Verdict::Hold(Reason::Similar)
    );
    assert_eq!(c.offer(&exit(3, "b", 1, 2), &s).0, Verdict::Send);
    // Read back from its file, the state still knows which key is the oldest.
    let mut c: Correlator = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    let (verdict, forgotten) = c.offer(&exit(4, "c", 1, 3), &s);
    assert_eq!(verdict, Verdict::Send);
    assert_eq!(forgotten.len(), 1);
    assert_eq!(
        (forgotten[0].object.as_str(), forgotten[0].count()),
        ("a", 1)
    );
    assert_eq!(c.objects(), 2);
}

/// The state survives its file: the same decisions after a round trip.
#[test]
fn the_state_round_trips_through_its_file_form() {
    let s = CorrelateSettings::default();
    let mut c = Correlator::default();
    for n in 0..15u32 {
        c.offer(&exit(u64::from(n) + 1, "web", n, i64::from(n)), &s);
    }
    let text = serde_json::to_string(&c).unwrap();
    let mut back: Correlator = serde_json::from_str(&text).unwrap();
    assert_eq!(back, c);
    assert_eq!(back.held_events(), 5);
    let next = exit(16, "web", 16, 16);
    assert_eq!(back.offer(&next, &s), c.offer(&next, &s));
}
