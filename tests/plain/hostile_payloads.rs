//! Payloads built to hurt, through every reader of a payload (the JSON the file,
//! SQLite and Kafka forms store, `ctr` lines, `event.` filter fields): deep chains of
//! `Any` in `Any` (bare, inside envelopes, inside a container's runtime options),
//! deep unknown groups, huge maps and repeated fields, truncated and garbage bytes.
//! Each must be read on a small stack, with memory and output in proportion to its
//! size; and the one payload that used to take the gateway down for good goes
//! through the real binary, before and after a restart.

use crate::support;

use eventgate::event::{Event, EventId, Source};
use eventgate::filter::Filter;
use eventgate::internal::render;
use eventgate::proto::containerd::services::events::v1::PublishRequest;
use eventgate::proto::containerd::types::Envelope;
use proptest::prelude::*;
use prost::Message as _;
use prost_types::Any;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use support::{DEADLINE, Gateway, wait_for};

/// Counts the bytes live on the current thread and their peak, so one reading runs
/// on its own thread and measures only itself.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn account(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call goes straight to the system allocator; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            account(layout.size() as isize);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            account(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        account(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            account(new_size as isize - layout.size() as isize);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The stack every reading gets: a quarter of what a tokio worker thread has, so a
/// walk whose depth followed the payload would overflow it long before the
/// gateway's own threads.
const STACK: usize = 512 * 1024;

/// Memory a reading may hold at its peak per byte of payload, plus a fixed part.
/// Measured: `every_hostile_shape_is_read_in_proportion_to_its_size` prints them.
const MEMORY_PER_BYTE: usize = 32;
const MEMORY_FIXED: usize = 4 << 20;

/// Output a reading may write per byte of payload (every default field is written,
/// and each empty nested message costs 2 bytes in protobuf).
const OUTPUT_PER_BYTE: usize = 24;

/// How one level wraps the (encoded `Any`) level inside it, itself as an `Any`.
#[derive(Clone, Copy, Debug)]
enum Wrap {
    /// `Any { type_url: "google.protobuf.Any", value: <inner Any> }`: the issue's case.
    Any,
    /// The same with a prefixed type_url, which resolves to the same type.
    PrefixedAny,
    /// An `Envelope` in an `Any`, whose `event` is the inner Any.
    Envelope,
    /// A `/containers/create` event in an `Any`, whose `runtime.options` is the inner Any.
    ContainerCreate,
}

fn varint(mut n: usize, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn varint_len(n: usize) -> usize {
    let mut v = Vec::new();
    varint(n, &mut v);
    v.len()
}

/// `tag` + length + bytes of a length-delimited field, as a prefix for `len` bytes.
fn field_prefix(tag: u8, len: usize, out: &mut Vec<u8>) {
    out.push(tag);
    varint(len, out);
}

impl Wrap {
    /// The bytes that go before an inner `Any` of `inner` bytes to make this level.
    fn prefix(self, inner: usize) -> Vec<u8> {
        let (type_url, value_prefix) = match self {
            Wrap::Any => ("google.protobuf.Any", Vec::new()),
            Wrap::PrefixedAny => ("type.googleapis.com/google.protobuf.Any", Vec::new()),
            Wrap::Envelope => {
                let mut v = Vec::new();
                field_prefix(0x22, inner, &mut v); // Envelope.event = 4
                ("containerd.types.Envelope", v)
            }
            Wrap::ContainerCreate => {
                let runtime = 1 + varint_len(inner) + inner;
                let mut v = Vec::new();
                field_prefix(0x1a, runtime, &mut v); // ContainerCreate.runtime = 3
                field_prefix(0x12, inner, &mut v); // Runtime.options = 2
                ("containerd.events.ContainerCreate", v)
            }
        };
        let mut out = Vec::new();
        field_prefix(0x0a, type_url.len(), &mut out); // Any.type_url = 1
        out.extend_from_slice(type_url.as_bytes());
        field_prefix(0x12, value_prefix.len() + inner, &mut out); // Any.value = 2
        out.extend_from_slice(&value_prefix);
        out
    }
}

/// `levels` wrapped around `leaf` (outermost first), in linear time: each level's
/// prefix is computed from the inside out and the prefixes are joined once.
fn nest(levels: &[Wrap], leaf: &Any) -> Any {
    let leaf = leaf.encode_to_vec();
    let mut prefixes = Vec::with_capacity(levels.len());
    let mut len = leaf.len();
    for wrap in levels.iter().rev() {
        let prefix = wrap.prefix(len);
        len += prefix.len();
        prefixes.push(prefix);
    }
    let mut bytes = Vec::with_capacity(len);
    for prefix in prefixes.iter().rev() {
        bytes.extend_from_slice(prefix);
    }
    bytes.extend_from_slice(&leaf);
    Any::decode(bytes.as_slice()).expect("a well-formed outer Any")
}

fn task_exit() -> Any {
    let json = r#"{"container_id":"c1","id":"c1","pid":42,"exit_status":3}"#;
    eventgate::proto::Registry::global()
        .encode_json("containerd.events.TaskExit", json)
        .expect("a TaskExit")
}

/// The issue's payload: an Any nested `levels` deep, each level `google.protobuf.Any`.
fn any_tower(levels: usize) -> Any {
    nest(&vec![Wrap::Any; levels], &task_exit())
}

/// Unknown fields as groups nested `levels` deep inside a known type.
fn deep_groups(levels: usize) -> Any {
    // Field 15: start group (0x7b) `levels` times, then as many ends (0x7c).
    let mut value = vec![0x7b; levels];
    value.extend(std::iter::repeat_n(0x7c, levels));
    Any {
        type_url: "containerd.events.TaskExit".into(),
        value,
    }
}

/// A `/containers/update` with `n` labels, or a `/tasks/create` with `n` empty mounts
/// (2 bytes each on the wire, a whole object each in JSON).
fn fan_out(n: usize, mounts: bool) -> Any {
    let mut value = Vec::new();
    for i in 0..n {
        if mounts {
            value.extend_from_slice(&[0x1a, 0]); // TaskCreate.rootfs = 3, empty
        } else {
            let key = format!("k{i}");
            let mut entry = Vec::new();
            field_prefix(0x0a, key.len(), &mut entry);
            entry.extend_from_slice(key.as_bytes());
            field_prefix(0x12, 1, &mut entry);
            entry.push(b'v');
            field_prefix(0x1a, entry.len(), &mut value); // ContainerUpdate.labels = 3
            value.extend_from_slice(&entry);
        }
    }
    let type_url = if mounts {
        "containerd.events.TaskCreate"
    } else {
        "containerd.events.ContainerUpdate"
    };
    Any {
        type_url: type_url.into(),
        value,
    }
}

fn envelope(any: Any) -> Envelope {
    Envelope {
        timestamp: Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        namespace: "default".into(),
        topic: "/hostile".into(),
        event: Some(any),
    }
}

/// Filters that walk as deep as a filter's text allows: through runtime options, and
/// through envelopes (which have no adaptor, so they stop at once).
fn deep_filters() -> Filter {
    let through_options = vec!["runtime.options"; 400].join(".");
    Filter::parse_all(&[
        format!("event.{through_options}.id==x"),
        format!("event.{through_options}.id~=\"^a\""),
        "event.event.event.event.id".to_owned(),
        "event.container_id==c1".to_owned(),
        "event.labels.k1".to_owned(),
    ])
    .expect("valid filters")
}

/// What one reading of an envelope cost.
#[derive(Debug)]
struct Cost {
    input: usize,
    peak: usize,
    output: usize,
}

/// Reads `envelope` every way the gateway does, on its own small-stack thread, and
/// measures the peak memory it held and the bytes it wrote.
fn read_everything(envelope: Envelope) -> Cost {
    let input = envelope.encoded_len();
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || {
            let filters = deep_filters();
            let before = LIVE.with(Cell::get);
            PEAK.with(|peak| peak.set(before));
            let event = Event::new(1, EventId::generate(), Source::Publish, envelope);
            let mut output = event.payload_json().map_or(0, str::len);
            output += render::event_json(&event).len();
            output += render::event_ctr_line(&event).map_or(0, |l| l.len());
            output += render::ctr_raw_line(&event.envelope).len();
            output += render::envelope_json(&event.envelope).len();
            let _ = filters.matches(&event);
            let peak = PEAK.with(Cell::get) - before;
            Cost {
                input,
                peak: peak.max(0) as usize,
                output,
            }
        })
        .expect("spawn a reader thread")
        .join()
        .expect("reading a payload must not panic")
}

fn assert_proportional(what: &str, cost: &Cost) {
    assert!(
        cost.peak <= MEMORY_PER_BYTE * cost.input + MEMORY_FIXED,
        "{what}: {cost:?}: more than {MEMORY_PER_BYTE} bytes of memory per payload byte"
    );
    assert!(
        cost.output <= OUTPUT_PER_BYTE * cost.input + 4096,
        "{what}: {cost:?}: more than {OUTPUT_PER_BYTE} bytes of output per payload byte"
    );
}

/// Every named case, each with its cost; sizes up to the default 1 MiB event limit.
fn named_cases() -> Vec<(&'static str, Envelope)> {
    let mixed: Vec<Wrap> = [
        Wrap::Any,
        Wrap::Envelope,
        Wrap::ContainerCreate,
        Wrap::PrefixedAny,
    ]
    .into_iter()
    .cycle()
    .take(20_000)
    .collect();
    vec![
        ("any tower, 36,000 deep", envelope(any_tower(36_000))),
        (
            "runtime options tower, 20,000 deep",
            envelope(nest(&vec![Wrap::ContainerCreate; 20_000], &task_exit())),
        ),
        (
            "envelope tower, 20,000 deep",
            envelope(nest(&vec![Wrap::Envelope; 20_000], &task_exit())),
        ),
        (
            "mixed tower, 20,000 deep",
            envelope(nest(&mixed, &task_exit())),
        ),
        ("unknown groups, 99 deep", envelope(deep_groups(99))),
        (
            "unknown groups, 100,000 deep",
            envelope(deep_groups(100_000)),
        ),
        ("200,000 empty mounts", envelope(fan_out(200_000, true))),
        ("50,000 labels", envelope(fan_out(50_000, false))),
        (
            "truncated tower",
            envelope({
                let mut any = any_tower(1000);
                any.value.truncate(any.value.len() / 2);
                any
            }),
        ),
    ]
}

/// Also prints what each case cost, the numbers behind the bounds above
/// (`cargo test --test hostile_payloads every_hostile -- --nocapture`).
#[test]
fn every_hostile_shape_is_read_in_proportion_to_its_size() {
    for (what, envelope) in named_cases() {
        let cost = read_everything(envelope);
        println!(
            "{what}: {} bytes in, peak {} bytes ({:.1}/byte), {} bytes out ({:.1}/byte)",
            cost.input,
            cost.peak,
            cost.peak as f64 / cost.input as f64,
            cost.output,
            cost.output as f64 / cost.input as f64
        );
        assert_proportional(what, &cost);
    }
}

#[test]
fn deep_anys_render_to_the_limit_then_keep_their_bytes() {
    let event = Event::new(
        1,
        EventId::generate(),
        Source::Publish,
        envelope(any_tower(36_000)),
    );
    let json: serde_json::Value =
        serde_json::from_str(event.payload_json().expect("an Any decodes")).expect("JSON");
    // Each expanded level of google.protobuf.Any hands its "@type" to the next, so
    // the rendering is one object: the Any at the nesting limit, kept as bytes.
    assert_eq!(json["@type"], "google.protobuf.Any", "{json}");
    let raw = json["value"].as_str().expect("base64 bytes");
    assert!(raw.len() > 100_000, "the inner bytes are kept whole");

    // Within the limit, the inner event is expanded as before.
    let shallow = Event::new(
        1,
        EventId::generate(),
        Source::Publish,
        envelope(nest(&[Wrap::ContainerCreate; 3], &task_exit())),
    );
    let json: serde_json::Value =
        serde_json::from_str(shallow.payload_json().expect("decodes")).expect("JSON");
    let leaf = &json["runtime"]["options"]["runtime"]["options"]["runtime"]["options"];
    assert_eq!(leaf["@type"], "containerd.events.TaskExit", "{json}");
    assert_eq!(leaf["exit_status"], 3, "{json}");
    let filter =
        Filter::parse("event.runtime.options.runtime.options.runtime.options.container_id==c1")
            .expect("valid");
    assert!(
        filter.matches(&shallow),
        "paths within the limit still match"
    );
}

/// A level of a generated tower.
fn wrap() -> impl Strategy<Value = Wrap> {
    prop_oneof![
        Just(Wrap::Any),
        Just(Wrap::PrefixedAny),
        Just(Wrap::Envelope),
        Just(Wrap::ContainerCreate),
    ]
}

/// A generated hostile payload: a tower of any shape and depth (up to 30,000 levels)
/// over an event, a fan-out, or deep groups, optionally cut short or with a byte
/// flipped somewhere.
fn hostile() -> impl Strategy<Value = Any> {
    let tower =
        (proptest::collection::vec(wrap(), 0..64), 0usize..30_000).prop_map(|(pattern, depth)| {
            let levels: Vec<Wrap> = if pattern.is_empty() {
                Vec::new()
            } else {
                pattern.iter().copied().cycle().take(depth).collect()
            };
            nest(&levels, &task_exit())
        });
    let wide = (1usize..50_000, any::<bool>()).prop_map(|(n, mounts)| fan_out(n, mounts));
    let groups = (0usize..5_000).prop_map(deep_groups);
    (
        prop_oneof![4 => tower, 2 => wide, 1 => groups],
        proptest::option::of((any::<prop::sample::Index>(), any::<u8>(), any::<bool>())),
    )
        .prop_map(|(mut any, damage)| {
            if let Some((at, byte, cut)) = damage
                && !any.value.is_empty()
            {
                let i = at.index(any.value.len());
                if cut {
                    any.value.truncate(i);
                } else {
                    any.value[i] ^= byte;
                }
            }
            any
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn generated_hostile_payloads_are_read_in_proportion(any in hostile()) {
        let cost = read_everything(envelope(any));
        assert_proportional("generated", &cost);
    }
}

fn publish_request(any: Any) -> tonic::Request<PublishRequest> {
    let mut request = tonic::Request::new(PublishRequest {
        topic: "/hostile".into(),
        event: Some(any),
    });
    request
        .metadata_mut()
        .insert("containerd-namespace", "default".parse().expect("ascii"));
    request
}

fn stored_rows(gw: &Gateway) -> i64 {
    let db = gw.dir.path().join("data").join("audit.db");
    rusqlite::Connection::open(&db)
        .and_then(|c| c.query_row("SELECT count(*) FROM events", [], |r| r.get(0)))
        .unwrap_or(0)
}

/// Distinct events in the log file (its delivery is at least once: a SIGKILL before
/// the cursor was saved writes the last lines again).
fn log_lines(gw: &Gateway) -> usize {
    let text = std::fs::read_to_string(gw.dir.path().join("data").join("events.jsonl"))
        .unwrap_or_default();
    let ids: std::collections::HashSet<String> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|json| json["id"].as_str().map(str::to_owned))
        .collect();
    ids.len()
}

/// The issue's report, through the real binary with its defaults (durable spool, the
/// `log` file and `audit` SQLite forwarders): publish the tower, stay up, publish
/// again, restart, stay up, and every event is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_any_tower_neither_crashes_the_gateway_nor_poisons_its_restart() {
    let mut gw = Gateway::start(&[]);
    let tower = any_tower(36_000);
    assert!(
        tower.encoded_len() > 800_000 && tower.encoded_len() < 1 << 20,
        "the reported size, under the default event limit: {}",
        tower.encoded_len()
    );
    let mut client = gw.client().await;
    client
        .publish(publish_request(tower.clone()))
        .await
        .expect("the tower is accepted");
    client
        .publish(publish_request(task_exit()))
        .await
        .expect("the gateway still answers");
    wait_for("both events in the store and the log", DEADLINE, || {
        (stored_rows(&gw) == 2 && log_lines(&gw) == 2).then_some(())
    });
    assert!(
        gw.child.try_wait().expect("status").is_none(),
        "still running"
    );

    // The tower is in the spool; a restart reads it back (and a crash would make
    // the forwarders see it again): the gateway must come up and stay up.
    gw.crash_restart();
    let mut client = gw.client().await;
    client
        .publish(publish_request(tower))
        .await
        .expect("accepted after the restart");
    client
        .publish(publish_request(task_exit()))
        .await
        .expect("and the next one too");
    let end = std::time::Instant::now() + DEADLINE;
    let mut seen = (stored_rows(&gw), log_lines(&gw));
    while seen != (4, 4) && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(20));
        seen = (stored_rows(&gw), log_lines(&gw));
    }
    assert_eq!(
        seen,
        (4, 4),
        "four events stored: (rows, distinct ids in the log)"
    );
    assert!(
        gw.child.try_wait().expect("status").is_none(),
        "still running"
    );
    let status = gw.terminate();
    assert!(status.success(), "a clean stop: {status}");
}
