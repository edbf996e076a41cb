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
use crate::exchange::grpc::unary::{self, FORWARD_PATH, Method, PUBLISH_PATH};
use crate::exchange::{EventsService, Exchange, ExchangeParts, ExchangeSettings, compile_filters};
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
        Exchange::new(ExchangeSettings::default(), ExchangeParts::default())
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
        let Ok(parsed) = &by_bytes else {
            panic!("{filters:?} compiled for Subscribe but did not parse: {by_bytes:?}");
        };
        for event in events() {
            // Subscribe's view (containerd's fields) and the record's (a superset:
            // origin, pod, container...) used by route filters and queries. The
            // compiled filter and the parsed one are one filter.
            assert_eq!(
                filter.matches(event),
                parsed.matches(event),
                "{filters:?} on {event:?}"
            );
            assert_eq!(
                filter.matches(&event.record_fields()),
                parsed.matches(&event.record_fields()),
                "{filters:?} on the record of {event:?}"
            );
        }
        same_rows_as_sql(parsed, &filters);
    }
}

/// The store `query` reads, holding [`events`] and [`stored_events`].
fn query_store() -> &'static std::path::Path {
    static STORE: OnceLock<(tempfile::TempDir, std::path::PathBuf)> = OnceLock::new();
    let (_, path) = STORE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("audit.db");
        let mut conn = crate::store::open_writer(&path, &crate::store::WriterOptions::default())
            .expect("a new store");
        let all: Vec<&Event> = events().iter().chain(stored_events()).collect();
        let rows: Vec<crate::store::EventRow<'_>> = all
            .iter()
            .map(|e| crate::store::EventRow::from_event(e))
            .collect();
        crate::store::insert_rows(&mut conn, &rows).expect("the events stored");
        (dir, path)
    });
    path
}

/// Events with what only the record has: a pod and container, labels, a node, a
/// reconciled origin and a reason, a publisher.
fn stored_events() -> &'static [Event] {
    static EVENTS: OnceLock<Vec<Event>> = OnceLock::new();
    EVENTS.get_or_init(|| {
        let registry = Registry::global();
        let exit = registry
            .encode_json(
                "containerd.events.TaskExit",
                r#"{"container_id":"web-0","id":"web-0","pid":7,"exit_status":1}"#,
            )
            .expect("a TaskExit");
        (0..3u64)
            .map(|i| {
                let envelope = Envelope {
                    timestamp: (i != 2).then_some(Timestamp {
                        seconds: 1_700_000_100 + i as i64,
                        nanos: 0,
                    }),
                    namespace: ["k8s.io", "moby", "default"][i as usize].into(),
                    topic: "/tasks/exit".into(),
                    event: Some(exit.clone()),
                };
                let mut event = Event::new(
                    10 + i,
                    EventId::generate(),
                    Source::Upstream(Arc::from("node")),
                    envelope,
                );
                let identity = &mut event.identity;
                identity.node = Some(Arc::from(["web-1", "db-1", "web-1"][i as usize]));
                if i != 1 {
                    identity.workload = Some(Arc::new(crate::event::Workload {
                        kind: Some("container".into()),
                        pod_name: Some(format!("web-{i}")),
                        pod_namespace: Some("shop".into()),
                        pod_uid: Some(format!("uid-{i}")),
                        container_name: Some("nginx".into()),
                        image: "nginx:1.27".into(),
                        labels: [("team".to_owned(), format!("t{i}"))].into(),
                        reason: (i == 0).then(|| "OOMKilled".to_owned()),
                    }));
                }
                if i == 2 {
                    identity.origin = crate::event::Origin::Reconciled {
                        clock: crate::event::Clock::Daemon,
                        from: Witness::Docker,
                    };
                    identity.publisher = Some(crate::publisher::Publisher::Process {
                        uid: 0,
                        gid: 0,
                        pid: Some(1),
                    });
                }
                event
            })
            .collect()
    })
}

/// `eventgate query` with the same filter selects exactly the events the matcher
/// accepts: SQL never drops one the matcher keeps, and where SQL alone decides (no
/// recheck), never keeps one the matcher drops.
fn same_rows_as_sql(filter: &Filter, text: &[String]) {
    use crate::query::{Query, Reader, RowRange};
    thread_local! {
        static READER: Reader = Reader::open(query_store()).expect("the query store opens");
    }
    let expected: Vec<EventId> = events()
        .iter()
        .chain(stored_events())
        .filter(|e| filter.matches(&e.record_fields()))
        .map(|e| e.identity.id)
        .collect();
    let query = Query {
        filter: filter.clone(),
        since: None,
        until: None,
        limit: None,
    };
    let mut selected = Vec::new();
    READER.with(|reader| {
        reader
            .each(&query, RowRange::ALL, |stored| {
                selected.push(stored.event.identity.id);
                true
            })
            .unwrap_or_else(|e| panic!("{text:?}: the query fails: {e}"));
    });
    assert_eq!(selected, expected, "{text:?}: query and matcher disagree");
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
    let (spool, exchange) = spooled();
    let before = spool.next_seq();
    let service = EventsService::new(exchange.clone());
    let (code, appended) = runtime().block_on(async {
        let response = unary::serve(method, service, request).await;
        let code = grpc_status(response).await;
        let appended = match code {
            0 => Some(read_back(spool, before).await),
            _ => None,
        };
        (code, appended)
    });
    match appended {
        // Answered OK: the event is durable in the spool, where every forwarder reads
        // what its queue could not hold, and a restart reads everything.
        Some(event) => {
            assert_eq!(spool.next_seq(), before + 1, "one call, one event");
            assert_eq!(event.seq, before);
            let mut record = Vec::new();
            crate::spool::record::encode(&event, &mut record).expect("a spooled event fits");
        }
        None => assert_eq!(
            spool.next_seq(),
            before,
            "grpc-status {code}: refused, yet something was spooled"
        ),
    }
}

/// An exchange in front of a spool of its own (small, dropping its oldest segments,
/// so a long run stays bounded), as `serve` builds it.
struct Spooled {
    _dir: tempfile::TempDir,
    spool: crate::spool::Spool,
    exchange: Exchange,
}

fn spooled() -> (&'static crate::spool::Spool, &'static Exchange) {
    static SPOOLED: OnceLock<Spooled> = OnceLock::new();
    let spooled = SPOOLED.get_or_init(|| {
        let _entered = runtime().enter();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let settings = crate::spool::SpoolSettings {
            fsync: crate::spool::Fsync::None,
            segment_bytes: crate::units::ByteSize(1 << 20),
            max_bytes: crate::units::ByteSize(8 << 20),
            full: crate::spool::FullPolicy::DropOldest,
            ..Default::default()
        };
        let (spool, _) =
            crate::spool::Spool::open(dir.path(), &settings, &["a"]).expect("a new spool");
        let exchange = Exchange::new(
            ExchangeSettings::default(),
            ExchangeParts {
                spool: Some(spool.clone()),
                ..ExchangeParts::default()
            },
        );
        Spooled {
            _dir: dir,
            spool,
            exchange,
        }
    });
    (&spooled.spool, &spooled.exchange)
}

/// The answer's `grpc-status`: in the headers of a trailers-only answer (a refusal)
/// or in the trailers after the empty message (OK). Exactly one, a code gRPC has,
/// on an HTTP 200 `application/grpc` answer: what a containerd client reads.
async fn grpc_status(response: http::Response<tonic::body::Body>) -> u32 {
    use http_body_util::BodyExt as _;
    assert_eq!(response.status(), 200, "gRPC answers HTTP 200");
    assert_eq!(
        response.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/grpc"[..]),
        "{:?}",
        response.headers()
    );
    let in_headers = response.headers().get("grpc-status").cloned();
    let collected = response
        .into_body()
        .collect()
        .await
        .expect("the answer's body is whole");
    let in_trailers = collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .cloned();
    let status = match (in_headers, in_trailers) {
        (Some(status), None) | (None, Some(status)) => status,
        other => panic!("one grpc-status, in the headers or the trailers: {other:?}"),
    };
    let code: u32 = std::str::from_utf8(status.as_bytes())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("grpc-status {status:?} is not a number"));
    assert!(code <= 16, "grpc-status {code} is no gRPC code");
    code
}

/// The event the spool holds at `seq`.
async fn read_back(spool: &crate::spool::Spool, seq: u64) -> Arc<Event> {
    let mut reader = spool.reader(seq);
    let batch = tokio::time::timeout(Duration::from_secs(5), reader.next(1, 1 << 24))
        .await
        .expect("an acknowledged event is readable at once")
        .unwrap_or_else(|e| panic!("reading the spool: {e}"));
    batch
        .events
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no event at seq {seq} though it was answered OK"))
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

mod admin;
mod managers;
mod proofs;
mod stored;
mod witness;

pub use admin::admin;
pub use managers::{cri, docker};
pub use proofs::proof;
pub use stored::{
    cursors, file_checkpoint, kafka, note, note_signer, resume, snapshot, spool_record,
    spool_segment,
};
pub use witness::witness;

#[cfg(test)]
mod tests {
    /// Runs `target` on each committed seed of `name` (tests/fuzz/seeds/NAME);
    /// returns how many there were.
    fn each_seed(name: &str, target: fn(&[u8])) -> usize {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fuzz/seeds")
            .join(name);
        let mut seeds = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            target(&std::fs::read(entry.unwrap().path()).unwrap());
            seeds += 1;
        }
        seeds
    }

    /// The admin target's seeds (each endpoint, /ui's parameters, Last-Event-ID,
    /// /reload without the token) hold its properties against a whole gateway.
    #[test]
    fn the_admin_seeds_hold() {
        assert!(each_seed("admin", super::admin) >= 10);
    }

    /// The note target's archive oracle holds on inputs of every shape it reads
    /// (both formats, CRLF, duplicates, lines between, torn tails), and the
    /// committed seeds.
    #[test]
    fn genuine_checkpoints_in_an_archive_are_all_read_back() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..300 {
            let len = usize::try_from(next() % 400).unwrap();
            let input: Vec<u8> = (0..len).map(|_| next().to_le_bytes()[0]).collect();
            super::note(&input);
        }
        each_seed("note", super::note);
    }

    /// Every committed seed of the filter target keeps its properties (the query
    /// agreeing with the matcher included), and the seeds reach both kinds of plan.
    #[test]
    fn the_filter_seeds_hold() {
        assert!(each_seed("filter", super::filter) > 10);
        for text in [
            "topic==\"/tasks/exit\"",
            "namespace~=\"^k8s\"",
            "pod.name==web-0",
            "container.labels.team==t2",
            "origin==reconciled,reconciled_from==docker",
            "node==web-1",
            "node!=web-1",
            "reason==OOMKilled",
            "event.exit_status==1",
            "publisher.uid==0",
            "container.image!=nginx:1.27",
        ] {
            super::filter(text.as_bytes());
        }
    }

    /// The unary seeds keep their properties, and a well-formed Publish is
    /// answered OK and found in the spool (the input: flags, namespace chunk, split,
    /// then the gRPC frame).
    #[test]
    fn the_unary_seeds_hold_and_a_publish_is_spooled() {
        use prost::Message as _;
        each_seed("unary", super::unary);
        let request = crate::proto::containerd::services::events::v1::PublishRequest {
            topic: "/tasks/exit".into(),
            event: None,
        };
        let message = request.encode_to_vec();
        let mut input = vec![2u8, 7];
        input.extend_from_slice(b"default");
        input.push(0);
        input.push(0);
        input.extend_from_slice(&(message.len() as u32).to_be_bytes());
        input.extend_from_slice(&message);
        let (spool, _) = super::spooled();
        let before = spool.next_seq();
        super::unary(&input);
        assert_eq!(spool.next_seq(), before + 1, "the publish was accepted");
    }

    /// The state files' targets on what the gateway writes and on damage.
    #[test]
    fn the_state_file_targets_hold_on_real_and_damaged_files() {
        super::cursors(b"eventgate spool cursors 1\naudit 1042\nlog 1040\n");
        super::cursors(b"eventgate spool cursors 1\naudit x\n");
        let mut record = vec![0u8; 24];
        record.extend_from_slice(
            b"eventgate file checkpoint 1\nnext 5\nfile 1 2\nlen 10\nsealed 0\n",
        );
        super::file_checkpoint(&record);
        super::snapshot(b"{\"version\":1");
        super::snapshot(b"\0{}");
        super::snapshot(b"{\"version\":999}");
        each_seed("cursors", super::cursors);
        each_seed("file_checkpoint", super::file_checkpoint);
        each_seed("snapshot", super::snapshot);
    }
}
