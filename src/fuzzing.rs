//! Entry points for the fuzz targets in `tests/fuzz` (the `fuzzing` feature): each
//! takes raw bytes and drives the same code the gateway runs on what arrives from
//! outside, with the same limits. They panic only where the code under them does,
//! or where a property every input must keep does not hold.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::Frame;
use prost::Message as _;
use prost_types::{Any, Timestamp};

use crate::event::{Event, EventId, Source, Witness};
use crate::exchange::unary::{self, FORWARD_PATH, Method, PUBLISH_PATH};
use crate::exchange::{EventsService, Exchange, ExchangeSettings, compile_filters};
use crate::filter::Filter;
use crate::proto::Registry;
use crate::proto::containerd::types::Envelope;
use crate::reconcile::managed::{self, ManagedContainer, ManagerView};
use crate::reconcile::{ContainerState, NodeState, TaskState};

/// Reads a fuzz input as a sequence of small decisions and byte strings.
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn u64(&mut self) -> u64 {
        let mut bytes = [0u8; 8];
        for b in &mut bytes {
            *b = self.byte();
        }
        u64::from_le_bytes(bytes)
    }

    /// Up to `max` bytes, as many as the next byte says.
    fn chunk(&mut self) -> &'a [u8] {
        let len = usize::from(self.byte()).min(self.data.len());
        let (chunk, rest) = self.data.split_at(len);
        self.data = rest;
        chunk
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// Splits on NUL: the fuzzers' way to give several strings in one input.
fn parts(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split(|&b| b == 0)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
    })
}

/// One exchange for every input, with the default limits, as `serve` builds it.
fn exchange() -> &'static Exchange {
    static EXCHANGE: OnceLock<Exchange> = OnceLock::new();
    EXCHANGE.get_or_init(|| {
        let _entered = runtime().enter();
        Exchange::new(ExchangeSettings::default())
    })
}

/// Events of every shape a filter is matched against.
fn events() -> &'static [Event] {
    static EVENTS: OnceLock<Vec<Event>> = OnceLock::new();
    EVENTS.get_or_init(|| {
        let registry = Registry::global();
        let exit = registry
            .encode_json(
                "containerd.events.TaskExit",
                r#"{"container_id":"c1","id":"c1","pid":42,"exit_status":137}"#,
            )
            .expect("a TaskExit");
        let create = registry
            .encode_json(
                "containerd.events.ContainerCreate",
                r#"{"id":"web","image":"docker.io/library/busybox:latest",
                    "runtime":{"name":"io.containerd.runc.v2"}}"#,
            )
            .expect("a ContainerCreate");
        let unknown = Any {
            type_url: "example.com/Unknown".into(),
            value: vec![1, 2, 3],
        };
        [
            ("default", "/tasks/exit", Some(exit)),
            ("k8s.io", "/containers/create", Some(create)),
            ("moby", "/other", Some(unknown)),
            ("", "", None),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, (namespace, topic, event))| {
            let envelope = Envelope {
                timestamp: Some(Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 5,
                }),
                namespace: namespace.into(),
                topic: topic.into(),
                event,
            };
            Event::new(i as u64 + 1, EventId::generate(), Source::Publish, envelope)
        })
        .collect()
    })
}

/// A Subscribe's filters (NUL-separated): the gateway's limits and compilation, then
/// matched against events of every shape, as Subscribe and as a route filter; and
/// the same bytes through containerd's byte-string parser, which must agree on what
/// parses.
pub fn filter(data: &[u8]) {
    let raw: Vec<&[u8]> = parts(data).collect();
    let by_bytes = Filter::parse_all_bytes(raw.iter().copied());
    // gRPC strings are UTF-8: a request with anything else never reaches the filter.
    let Ok(filters) = raw
        .iter()
        .map(|f| std::str::from_utf8(f).map(str::to_owned))
        .collect::<Result<Vec<_>, _>>()
    else {
        return;
    };
    let compiled = runtime().block_on(compile_filters(exchange(), filters.clone()));
    if let Ok(filter) = &compiled {
        assert!(
            by_bytes.is_ok(),
            "{filters:?} compiled for Subscribe but did not parse: {by_bytes:?}"
        );
        for event in events() {
            // Subscribe's view (containerd's fields) and the record's (a superset:
            // origin, pod, container...) used by route filters and queries.
            let _ = filter.matches(event);
            let _ = filter.matches(&event.record_fields());
        }
    }
}

/// One Publish or Forward call: the method, the namespace and encoding headers and
/// the request body (split into DATA frames where the input says), answered by the
/// gateway's unary path in front of an in-memory exchange with the default limits.
pub fn unary(data: &[u8]) {
    let mut input = Input::new(data);
    let flags = input.byte();
    let (method, path) = match flags & 1 {
        0 => (Method::Publish, PUBLISH_PATH),
        _ => (Method::Forward, FORWARD_PATH),
    };
    let namespace = input.chunk();
    let split = usize::from(input.byte());
    let body = input.rest();
    let mut request = http::Request::builder().method("POST").uri(path);
    if flags & 2 != 0 {
        // A header that is not a valid header value never gets past HTTP/2.
        if let Ok(value) = http::HeaderValue::from_bytes(namespace) {
            request = request.header(crate::exchange::NAMESPACE_HEADER, value);
        }
    }
    if flags & 4 != 0 {
        request = request.header("grpc-encoding", "identity");
    }
    let chunks: Vec<Bytes> = match split {
        0 => vec![Bytes::copy_from_slice(body)],
        at => body
            .chunks(at)
            .map(Bytes::copy_from_slice)
            .collect::<Vec<_>>(),
    };
    let frames = futures::stream::iter(
        chunks
            .into_iter()
            .map(|chunk| Ok::<_, Infallible>(Frame::data(chunk))),
    );
    let Ok(request) = request.body(http_body_util::StreamBody::new(frames)) else {
        return;
    };
    let service = EventsService::new(exchange().clone());
    let response = runtime().block_on(unary::serve(method, service, request));
    assert!(
        response.headers().contains_key("content-type") || response.status() != 200,
        "every answer is gRPC"
    );
}

/// Every type the registry knows, by its index in the pool.
fn registered() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        Registry::global()
            .pool()
            .all_messages()
            .map(|m| m.full_name().to_owned())
            .collect()
    })
}

/// An `Any` of a registered type (picked by the first two bytes) with an arbitrary
/// payload, through every text shape: `ctr events` lines, Go-style and protobuf
/// JSON, JSON lines. Every JSON written must parse.
pub fn render(data: &[u8]) {
    let mut input = Input::new(data);
    let names = registered();
    let pick = usize::from(u16::from_le_bytes([input.byte(), input.byte()]));
    let flags = input.byte();
    let name = &names[pick % names.len()];
    let type_url = match flags & 1 {
        0 => name.clone(),
        _ => format!("types.googleapis.com/{name}"),
    };
    let seconds = i64::from_le_bytes(input.u64().to_le_bytes());
    let nanos = i32::from(input.byte()) * 3_999_999;
    let envelope = Envelope {
        timestamp: (flags & 2 != 0).then_some(Timestamp { seconds, nanos }),
        namespace: "default".into(),
        topic: "/tasks/exit".into(),
        event: Some(Any {
            type_url,
            value: input.rest().to_vec(),
        }),
    };
    if let Ok(message) = Registry::global().decode(envelope.event.as_ref().expect("set")) {
        let go = crate::proto::to_go_json(&message);
        assert_json(&go);
        assert_json(&crate::proto::to_json_string(&message));
    }
    let _ = crate::render::ctr_line(&envelope);
    let raw = crate::render::ctr_raw_line(&envelope);
    assert!(!raw.contains('\n'), "one line: {raw}");
    assert_json(&crate::render::envelope_json(&envelope));
    let event = Event::new(7, EventId::generate(), Source::Publish, envelope);
    let _ = crate::render::event_ctr_line(&event);
    let line = crate::render::event_json(&event);
    assert!(!line.contains('\n'), "one line: {line}");
    assert_json(&line);
}

fn assert_json(text: &str) {
    if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
        panic!("not JSON ({e}): {text}");
    }
}

/// A spool segment of `count` intact records followed by the input's bytes (a torn
/// write, a bit flip, garbage), opened as the gateway opens its spool after a
/// crash: opening never fails on content, and the intact records are all read back.
pub fn spool_segment(data: &[u8]) {
    let mut input = Input::new(data);
    let count = u64::from(input.byte() % 5);
    let tail = input.rest();
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let segments = dir.path().join("segments");
    std::fs::create_dir_all(&segments).expect("segments dir");
    let mut bytes = Vec::new();
    for seq in 1..=count {
        let event = spool_event(seq);
        crate::spool::record::encode(&event, &mut bytes).expect("a small record fits");
    }
    bytes.extend_from_slice(tail);
    std::fs::write(segments.join(format!("{:020}.log", 1)), &bytes).expect("segment");
    let settings = crate::spool::SpoolSettings {
        fsync: crate::spool::Fsync::None,
        ..Default::default()
    };
    runtime().block_on(async {
        let (spool, recovery) = crate::spool::Spool::open(dir.path(), &settings, &["a"])
            .unwrap_or_else(|e| panic!("a spool with a damaged segment opens: {e}"));
        assert!(
            recovery.next_seq > count,
            "{count} intact records, appending at {}: {recovery:?}",
            recovery.next_seq
        );
        let mut reader = spool.reader(1);
        let mut seen = Vec::new();
        while reader.position() <= count {
            let batch = tokio::time::timeout(Duration::from_secs(5), reader.next(64, 1 << 20))
                .await
                .expect("a reader behind the durable position returns promptly")
                .unwrap_or_else(|e| panic!("reading the recovered spool: {e}"));
            assert!(
                batch.gap.is_none_or(|g| g.first > count),
                "intact records lost: {:?} ({recovery:?})",
                batch.gap
            );
            for event in &batch.events {
                if event.seq <= count {
                    assert_eq!(event.envelope, spool_event(event.seq).envelope);
                    seen.push(event.seq);
                }
            }
        }
        assert_eq!(seen, (1..=count).collect::<Vec<_>>(), "{recovery:?}");
        let _ = spool.close().await;
    });
}

fn spool_event(seq: u64) -> Event {
    let envelope = Envelope {
        timestamp: Some(Timestamp {
            seconds: 1_700_000_000 + seq as i64,
            nanos: 0,
        }),
        namespace: "default".into(),
        topic: "/tasks/exit".into(),
        event: Some(Any {
            type_url: "containerd.events.TaskExit".into(),
            value: vec![seq as u8; 40],
        }),
    };
    Event::new(
        seq,
        EventId::derived(&seq.to_le_bytes()),
        Source::Publish,
        envelope,
    )
}

/// One record: the input as a record's body under a correct length and checksum (so
/// the decoder, not the checksum, is what the bytes meet), and the input as it is
/// through the checker.
pub fn spool_record(data: &[u8]) {
    use crate::spool::record::{Check, check, decode};
    let _ = check(data);
    let Ok(len) = u32::try_from(data.len()) else {
        return;
    };
    let mut record = Vec::with_capacity(8 + data.len());
    record.extend_from_slice(&len.to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    record.extend_from_slice(data);
    let Check::Valid { seq, len } = check(&record) else {
        return;
    };
    assert_eq!(len, record.len());
    let Some(event) = decode(&record) else {
        return;
    };
    assert_eq!(event.seq, seq);
    // What decodes is an event like any other: it renders, and spools again.
    let _ = crate::render::event_json(&event);
    let mut again = Vec::new();
    if crate::spool::record::encode(&event, &mut again).is_ok() {
        let back = decode(&again).expect("a record written from a decoded one decodes");
        assert_eq!(back.envelope, event.envelope);
        assert_eq!(back.id, event.id);
    }
}

/// A configuration file and `serve` flags (NUL-separated after the file), loaded as
/// `eventgate serve --config` loads them, through validation.
pub fn config(data: &[u8]) {
    use clap::Parser as _;
    let mut pieces = parts(data);
    let Some(text) = pieces.next() else {
        return;
    };
    let mut args = vec!["eventgate".to_owned(), "serve".to_owned()];
    for flag in pieces {
        let Ok(flag) = std::str::from_utf8(flag) else {
            return;
        };
        args.push(flag.to_owned());
    }
    if let Ok(text) = std::str::from_utf8(text)
        && let Ok(config) = crate::config::Config::parse(text, "in the fuzz input")
    {
        // What validated renders as TOML that loads again.
        let kinds = crate::forward::Kinds::default();
        let _ = config.check_kinds(&kinds);
        let again = config.to_toml(&kinds);
        if let Err(e) = crate::config::Config::parse(&again, "re-rendered") {
            panic!("a valid config renders as one that does not load: {e}\n{again}");
        }
    }
    let Ok(cli) = crate::cli::Cli::try_parse_from(&args) else {
        return;
    };
    let crate::cli::Command::Serve(mut serve) = cli.command else {
        return;
    };
    let Ok(mut file) = tempfile::NamedTempFile::new() else {
        return;
    };
    if file.write_all(text).is_err() {
        return;
    }
    serve.config = Some(file.path().to_owned());
    let _ = serve.config();
}

/// A Kafka message from another gateway (or anyone who can write to the topic):
/// headers and value from the input, decoded in the format the input picks.
pub fn kafka(data: &[u8]) {
    use crate::source::kafka::decode::{Message, decode};
    use crate::source::kafka::options::Format;
    let mut input = Input::new(data);
    let format = match input.byte() % 5 {
        0 => Format::Auto,
        1 => Format::Protobuf,
        2 => Format::Json,
        3 => Format::CloudeventsBinary,
        _ => Format::CloudeventsStructured,
    };
    // Every header the decoder reads, and one it does not.
    const NAMES: &[&str] = &[
        "ce_specversion",
        "ce_namespace",
        "ce_topic",
        "ce_type",
        "ce_time",
        "content-type",
        "type_url",
        "event_id",
        "node",
        "node_seq",
        "seq",
        "origin",
        "origin_clock",
        "reconciled_from",
        "publisher",
        "received_at",
        "container_kind",
        "container_labels",
        "container_name",
        "pod_name",
        "pod_namespace",
        "pod_uid",
        "image",
        "x-other",
    ];
    let count = input.byte() % 8;
    let mut headers = Vec::new();
    for _ in 0..count {
        let name = NAMES[usize::from(input.byte()) % NAMES.len()];
        headers.push((name, input.chunk()));
    }
    let has_value = input.byte() & 1 == 0;
    let value = input.rest();
    let message = Message {
        topic: "eventgate",
        partition: 0,
        offset: 42,
        headers,
        value: has_value.then_some(value),
    };
    let source: Arc<str> = Arc::from("fuzz");
    if let Ok(event) = decode(&message, format, &source) {
        // What is taken in is an event like any other: it renders and spools.
        let _ = crate::render::event_json(&event);
        let mut record = Vec::new();
        if crate::spool::record::encode(&event, &mut record).is_ok() {
            let len = record.len();
            let back = crate::spool::record::decode(&record[..len]);
            assert!(back.is_some(), "an event from Kafka spools and reads back");
        }
    }
}

/// The resumable Subscribe's position and the CLI's `--since`/`--until` text: a
/// SubscribeRequest as a client sends it, resolved against what the input says the
/// gateway keeps; a `--since` text parsed against a clock from the input; and a
/// Record as the CLI receives it.
pub fn resume(data: &[u8]) {
    use crate::proto::eventgate::services::events::v1::{Record, SubscribeRequest};
    use crate::resume::position::{Kept, resolve};
    let mut input = Input::new(data);
    let which = input.byte() % 3;
    let now = UNIX_EPOCH + Duration::from_secs(input.u64() % (1 << 40));
    let oldest_seq = input.u64() % 1000;
    let next_seq = oldest_seq + input.u64() % 1000;
    let oldest_time = match input.byte() & 1 {
        0 => None,
        _ => UNIX_EPOCH.checked_add(Duration::from_secs(input.u64() % (1 << 40))),
    };
    let first_since = match input.byte() & 1 {
        0 => None,
        _ => Some(input.u64()),
    };
    let rest = input.rest();
    match which {
        0 => {
            let Ok(request) = SubscribeRequest::decode(rest) else {
                return;
            };
            let Ok((start, _until)) = crate::resume::bounds(&request) else {
                return;
            };
            let kept = Kept {
                oldest_seq,
                oldest_time,
                next_seq,
                now,
            };
            if let Ok(from) = resolve(start, &kept, |_| first_since) {
                assert!(from <= next_seq.max(from), "{from}");
            }
        }
        1 => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            if let Ok(time) = crate::query::time::parse_bound(text, now) {
                // As the CLI sends it, and as the gateway reads it back.
                let wire = Timestamp::from(time);
                let back = SystemTime::try_from(wire).expect("a parsed bound is a time");
                assert_eq!(back, time, "{text:?}");
            }
        }
        _ => {
            let Ok(record) = Record::decode(rest) else {
                return;
            };
            if let Ok(event) = crate::resume::record::from_record(record) {
                let _ = crate::render::event_json(&event);
                let _ = crate::render::event_ctr_line(&event);
            }
        }
    }
}

/// What a CRI runtime answers ListContainers and ContainerStatus with, read as the
/// reconcile reads them and folded into containerd's lists.
pub fn cri(data: &[u8]) {
    use crate::proto::runtime::v1 as wire;
    let mut input = Input::new(data);
    let list_len = usize::from(u16::from_le_bytes([input.byte(), input.byte()]));
    let rest = input.rest();
    let (list, statuses) = rest.split_at(list_len.min(rest.len()));
    let Ok(list) = wire::ListContainersResponse::decode(list) else {
        return;
    };
    let mut containers = BTreeMap::new();
    let mut statuses = Input::new(statuses);
    for container in &list.containers {
        let mut managed = crate::cri::managed_of(container);
        if managed.status == managed::ManagedStatus::Exited
            && let Ok(response) = wire::ContainerStatusResponse::decode(statuses.chunk())
        {
            managed.exit = crate::cri::exit_of(response);
        }
        containers.insert(container.id.clone(), managed);
    }
    fold(Witness::Cri, containers, data.len());
}

/// What dockerd answers its container list and an inspect with (JSON, the input
/// split at the first NUL), read with the client's caps and folded.
pub fn docker(data: &[u8]) {
    let mut pieces = data.splitn(2, |&b| b == 0);
    let list = pieces.next().unwrap_or_default();
    let inspect = pieces.next().unwrap_or_default();
    let mut containers = BTreeMap::new();
    if let Ok(listed) = crate::docker::parse_list(list) {
        for container in listed {
            let managed = ManagedContainer {
                status: container.status,
                created_at: container.created_at,
                exit: None,
                workload: Some(container.workload()),
                image: container.image.clone(),
            };
            containers.insert(container.id, managed);
        }
    }
    if let Ok(inspected) = crate::docker::parse_inspect(inspect) {
        let entry = containers
            .entry(inspected.id.clone())
            .or_insert_with(|| ManagedContainer {
                status: inspected.status,
                created_at: None,
                exit: None,
                workload: None,
                image: String::new(),
            });
        entry.workload = Some(inspected.workload());
        entry.image = inspected.image.clone();
        entry.created_at = inspected.created_at.or(entry.created_at);
        entry.status = inspected.status;
        entry.exit = inspected.exit;
    }
    fold(Witness::Docker, containers, data.len());
}

/// Folds a manager's containers into a daemon state that has some of them (every
/// other one with a task), against an empty and a populated record.
fn fold(from: Witness, containers: BTreeMap<String, ManagedContainer>, salt: usize) {
    let namespace = match from {
        Witness::Docker => managed::DOCKER_NAMESPACE,
        _ => "k8s.io",
    };
    let mut daemon = NodeState::default();
    let ns = daemon.namespaces.entry(namespace.to_owned()).or_default();
    for (i, id) in containers.keys().enumerate() {
        if (i + salt) % 3 != 0 {
            ns.containers.insert(id.clone(), ContainerState::default());
        }
        if (i + salt) % 2 == 0 {
            ns.tasks.insert(id.clone(), TaskState::default());
        }
    }
    let view = ManagerView {
        from,
        containers: Some(containers),
    };
    for recorded in [NodeState::default(), daemon.clone()] {
        let exits = managed::recorded_exits(&recorded);
        if let Some(containers) = &view.containers {
            for (id, c) in containers {
                let _ = managed::needs_status(id, c.status, &daemon, &exits);
            }
        }
        let mut folded = daemon.clone();
        managed::fold(&mut folded, &recorded, &view);
    }
}

/// The signer behind [`note`]'s verifier key; seeds sign with it.
pub fn note_signer() -> crate::note::Signer {
    crate::note::Signer::from_seed("fuzz.example/log", &[7; 32])
}

/// A checkpoints file for `audit verify --checkpoints` (signed notes, or the file
/// forwarder's JSON lines carrying them), read and opened with a verifier key; and
/// the same bytes as one note and as a verifier key.
pub fn note(data: &[u8]) {
    let verifiers = [note_signer().verifier()];
    let _ = crate::note::open_bytes(data, &verifiers);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::note::Verifier::from_text(text.trim_end());
        let _ = crate::note::Signer::from_text(text.trim_end());
    }
    let _ = crate::store::verify::shipped::read(data, "checkpoints", &verifiers);
}
