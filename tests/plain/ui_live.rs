//! The live page across a broken stream: a browser reconnects by itself with the
//! last event's id (`Last-Event-ID`), and is sent what it missed, through its filter
//! and once each, before the live events; what the spool no longer holds is named.

use crate::support;
use crate::ui::{LiveStream, enc};

use std::net::SocketAddr;

use support::config::Config;
use support::*;

fn open(admin: SocketAddr, query: String, headers: String) -> LiveStream {
    LiveStream::open_with(admin, &query, &headers)
}

fn text(live: &LiveStream) -> String {
    live.text.lock().unwrap().clone()
}

/// The SSE id sent with the event of container `id`.
fn id_of(text: &str, id: &str) -> Option<u64> {
    let needle = format!("\"container_id\":\"{id}\"");
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("data: ") && l.contains(&needle))?;
    lines
        .get(at.checked_sub(1)?)?
        .strip_prefix("id: ")?
        .trim()
        .parse()
        .ok()
}

fn count(text: &str, id: &str) -> usize {
    text.matches(&format!("\"container_id\":\"{id}\"")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnected_live_page_is_sent_what_it_missed_once_then_live_events() {
    let mut gw = Gateway::start(&[]);
    let admin = gw.admin_addr();
    let filter = format!("filter={}", enc(r#"event.container_id~="^keep-""#));
    let mut client = gw.client().await;

    let q = filter.clone();
    let first = tokio::task::spawn_blocking(move || open(admin, q, String::new()))
        .await
        .unwrap();
    client.publish(exit_request("keep-1")).await.unwrap();
    let last = wait_for("keep-1 with its id", DEADLINE, || {
        id_of(&text(&first), "keep-1")
    });
    drop(first);

    // While the page is away.
    for id in ["keep-2", "drop-3", "keep-4"] {
        client.publish(exit_request(id)).await.unwrap();
    }
    let q = filter.clone();
    let again =
        tokio::task::spawn_blocking(move || open(admin, q, format!("Last-Event-ID: {last}\r\n")))
            .await
            .unwrap();
    wait_for("what the page missed", DEADLINE, || {
        (count(&text(&again), "keep-4") == 1).then_some(())
    });
    client.publish(exit_request("keep-5")).await.unwrap();
    wait_for("the next live event", DEADLINE, || {
        (count(&text(&again), "keep-5") == 1).then_some(())
    });
    let seen = text(&again);
    assert_eq!(count(&seen, "keep-1"), 0, "sent before the break: {seen}");
    assert_eq!(count(&seen, "keep-2"), 1, "{seen}");
    assert_eq!(count(&seen, "drop-3"), 0, "the page's filter holds: {seen}");
    assert!(!seen.contains("event: missed"), "{seen}");
    let ids: Vec<u64> = ["keep-2", "keep-4", "keep-5"]
        .iter()
        .map(|id| id_of(&seen, id).expect("an id"))
        .collect();
    assert!(
        ids[0] > last && ids.windows(2).all(|w| w[0] < w[1]),
        "{ids:?}"
    );

    // An id that is not one of ours is a fresh start, not an error.
    let fresh = tokio::task::spawn_blocking(move || {
        open(admin, filter, "Last-Event-ID: not-a-seq\r\n".into())
    })
    .await
    .unwrap();
    client.publish(exit_request("keep-6")).await.unwrap();
    wait_for("a live event on a fresh page", DEADLINE, || {
        (count(&text(&fresh), "keep-6") == 1).then_some(())
    });
    assert_eq!(count(&text(&fresh), "keep-2"), 0);
    assert!(gw.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_the_spool_no_longer_holds_are_named_as_missed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new()
        .toml("[spool]\nsegment_bytes = \"4KiB\"\n")
        .write(dir.path());
    let mut gw = Gateway::start_in(dir, &["--config", &config]);
    let admin = gw.admin_addr();
    let mut client = gw.client().await;
    for n in 0..200 {
        client
            .publish(exit_request(&format!("old-{n}")))
            .await
            .unwrap();
    }
    // Delivered by every forwarder, the first segments are deleted.
    let first_segment = gw
        .dir
        .path()
        .join("data/spool/segments/00000000000000000001.log");
    wait_for("the first spool segment to be deleted", DEADLINE, || {
        (!first_segment.exists()).then_some(())
    });
    let page = tokio::task::spawn_blocking(move || {
        open(admin, String::new(), "Last-Event-ID: 0\r\n".into())
    })
    .await
    .unwrap();
    wait_for("the last event from the spool", DEADLINE, || {
        (count(&text(&page), "old-199") == 1).then_some(())
    });
    // In order: missed ranges (the first from seq 1) and events, covering every seq
    // once with no hole. (More than one range if segments went while reading.)
    let seen = text(&page);
    let mut next = 1;
    let mut ranges = 0;
    let mut lines = seen.lines();
    while let Some(line) = lines.next() {
        if line == "event: missed" {
            let data = lines.next().and_then(|l| l.strip_prefix("data: "));
            let missed: serde_json::Value =
                serde_json::from_str(data.expect("a missed event's data")).expect("JSON");
            assert_eq!(missed["from_seq"], next, "{seen}");
            assert!(
                missed["why"]
                    .as_str()
                    .unwrap()
                    .contains("no longer in the spool"),
                "{missed}"
            );
            next = missed["to_seq"].as_u64().expect("to_seq") + 1;
            ranges += 1;
        } else if let Some(id) = line.strip_prefix("id: ") {
            assert_eq!(id.trim().parse::<u64>().unwrap(), next, "{seen}");
            next += 1;
        }
    }
    assert!(ranges >= 1, "no missed event: {seen}");
    assert!(gw.terminate().success());
}
