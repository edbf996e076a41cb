//! `query`, `query --pod`, `stats` and `timeline` read a PostgreSQL store as they read
//! a SQLite one: one gateway writes the same events to both (a `sqlite` and a
//! `postgres` forwarder), and every command is run against each, the output compared
//! byte for byte.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use eventgate::config::Config;
use eventgate::event::{Clock, EventId, Identity, Origin, Source, Witness, Workload};
use eventgate::gateway::{Gateway, Incoming};
use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use eventgate::publisher::Publisher;

use crate::support::postgres::Postgres;
use crate::support::{Gateway as Running, eventgate, http, path_str};

const T0: i64 = 1_714_557_600; // 2024-05-01T10:00:00Z

const ROLE: &str = "reader";
const PASSWORD: &str = "correct horse";
const DB: &str = "history";

/// One event to store, with everything the stores keep about it.
struct Stored {
    /// Envelope timestamp: seconds and nanos (`None`: the envelope has none).
    at: Option<(i64, i32)>,
    namespace: &'static str,
    topic: &'static str,
    payload: Option<prost_types::Any>,
    workload: Option<Arc<Workload>>,
    origin: Origin,
    /// `None`: taken in from Kafka with no node (rows of unknown node).
    node: Option<&'static str>,
    publisher: Option<Publisher>,
}

fn any(type_name: &str, json: &str) -> Option<prost_types::Any> {
    Some(Registry::global().encode_json(type_name, json).unwrap())
}

fn exit(id: &str, status: u32) -> Option<prost_types::Any> {
    any(
        "containerd.events.TaskExit",
        &format!(r#"{{"container_id":"{id}","id":"{id}","pid":7,"exit_status":{status}}}"#),
    )
}

fn start(id: &str, pid: u32) -> Option<prost_types::Any> {
    any(
        "containerd.events.TaskStart",
        &format!(r#"{{"container_id":"{id}","pid":{pid}}}"#),
    )
}

fn pod(namespace: &str, name: &str, container: Option<&str>) -> Option<Arc<Workload>> {
    Some(Arc::new(Workload {
        kind: Some(
            if container.is_some() {
                "container"
            } else {
                "sandbox"
            }
            .into(),
        ),
        pod_name: Some(name.into()),
        pod_namespace: Some(namespace.into()),
        pod_uid: Some(format!("uid-{namespace}-{name}")),
        container_name: container.map(str::to_owned),
        image: match container {
            Some(_) => "docker.io/library/nginx:1.27".into(),
            None => "registry.k8s.io/pause:3.9".into(),
        },
        labels: [
            ("app.kubernetes.io/name".to_owned(), name.to_owned()),
            ("quote\"d".to_owned(), "x' OR 1=1 --".to_owned()),
            ("tier".to_owned(), String::new()),
        ]
        .into(),
        reason: None,
    }))
}

fn live(
    secs: i64,
    namespace: &'static str,
    topic: &'static str,
    payload: Option<prost_types::Any>,
) -> Stored {
    Stored {
        at: Some((secs, 0)),
        namespace,
        topic,
        payload,
        workload: None,
        origin: Origin::Live,
        node: Some("web-1"),
        publisher: None,
    }
}

/// A pod's life (restarts, an OOM kill, a kill, a same-named pod in another
/// namespace) and events of every shape the stores and the filters treat differently:
/// booleans, labels with dots and quotes, nested and unset messages, prefixed, unknown
/// and undecodable types, no payload, no timestamp, a NUL in the event's JSON (which
/// jsonb cannot hold), a timestamp whose nanos overflow a second, one a nanosecond
/// before a second before 2000, text that looks like SQL, every origin and witness,
/// reasons, publishers, nodes known and unknown.
fn events() -> Vec<Stored> {
    let sandbox = || pod("shop", "web-7", None);
    let nginx = || pod("shop", "web-7", Some("nginx"));
    let in_pod = |mut s: Stored, workload| {
        s.workload = workload;
        s.namespace = "k8s.io";
        s
    };
    let mut out = vec![
        in_pod(live(T0, "", "/tasks/start", start("sb1", 100)), sandbox()),
        in_pod(live(T0 + 1, "", "/tasks/start", start("n1", 200)), nginx()),
        in_pod(live(T0 + 2, "", "/tasks/exit", exit("n1", 1)), nginx()),
        in_pod(live(T0 + 10, "", "/tasks/start", start("n2", 300)), nginx()),
        in_pod(
            live(
                T0 + 11,
                "",
                "/tasks/oom",
                any("containerd.events.TaskOOM", r#"{"container_id":"n2"}"#),
            ),
            nginx(),
        ),
        in_pod(live(T0 + 12, "", "/tasks/exit", exit("n2", 137)), nginx()),
        in_pod(live(T0 + 20, "", "/tasks/start", start("n3", 400)), nginx()),
        in_pod(
            live(T0 + 21, "", "/tasks/exit", exit("sb1", 137)),
            sandbox(),
        ),
        in_pod(
            live(T0 + 22, "", "/tasks/start", start("a1", 500)),
            pod("staging", "web-7", Some("app")),
        ),
        in_pod(
            live(T0 + 23, "", "/tasks/exit", exit("a1", 0)),
            pod("staging", "web-7", Some("app")),
        ),
        in_pod(
            live(T0 + 24, "", "/tasks/start", start("d1", 600)),
            pod("shop", "db-0", Some("db")),
        ),
        in_pod(
            live(T0 + 25, "", "/tasks/exit", exit("d1", 137)),
            pod("shop", "db-0", Some("db")),
        ),
    ];
    for (i, ns) in ["default", "moby", "k8s.io"].into_iter().enumerate() {
        let at = T0 + 1800 * i as i64;
        out.push(live(at + 30, ns, "/tasks/exit", exit("web", 0)));
        out.push(live(
            at + 31,
            ns,
            "/tasks/create",
            any(
                "containerd.events.TaskCreate",
                r#"{"container_id":"web","bundle":"/run/b","io":{"stdin":"/dev/null","terminal":true}}"#,
            ),
        ));
        out.push(live(
            at + 32,
            ns,
            "/tasks/create",
            any("containerd.events.TaskCreate", r#"{"io":{"stdout":"x"}}"#),
        ));
        out.push(live(
            at + 33,
            ns,
            "/tasks/create",
            any("containerd.events.TaskCreate", r#"{"container_id":"db"}"#),
        ));
    }
    out.push(live(
        T0 + 40,
        "default",
        "/containers/create",
        any(
            "containerd.events.ContainerCreate",
            r#"{"id":"web","image":"docker.io/library/nginx:latest","runtime":{"name":"io.containerd.runc.v2","options":{"@type":"types.googleapis.com/containerd.runc.v1.Options","binary_name":"runc","no_pivot_root":true}}}"#,
        ),
    ));
    out.push(live(
        T0 + 41,
        "default",
        "/containers/update",
        any(
            "containerd.events.ContainerUpdate",
            r#"{"id":"web","labels":{"io.k8s.pod":"web-0","empty":"","quote\"d":"x' OR 1=1 --"}}"#,
        ),
    ));
    out.push(live(
        T0 + 42,
        "",
        "/namespaces/create",
        any(
            "containerd.events.NamespaceCreate",
            r#"{"name":"k8s.io","labels":{}}"#,
        ),
    ));
    let mut prefixed = exit("api", 2);
    if let Some(a) = prefixed.as_mut() {
        a.type_url = format!("types.googleapis.com/{}", a.type_url);
    }
    out.push(live(T0 + 43, "default", "/tasks/exit", prefixed));
    let mut deep = exit("deep", 3);
    if let Some(a) = deep.as_mut() {
        a.type_url = format!("a/b/{}", a.type_url);
    }
    out.push(live(T0 + 44, "default", "/tasks/exit", deep));
    out.push(live(
        T0 + 45,
        "default",
        "/Custom/thing",
        Some(prost_types::Any {
            type_url: "example.com/custom.Event".into(),
            value: vec![1, 2, 3],
        }),
    ));
    out.push(live(
        T0 + 46,
        "default",
        "/tasks/exit",
        Some(prost_types::Any {
            type_url: "containerd.events.TaskExit".into(),
            value: vec![0xff, 0xff, 0xff],
        }),
    ));
    out.push(live(T0 + 47, "default", "/tasks/nothing", None));
    // jsonb holds no \u0000: the PostgreSQL store keeps this event's payload only.
    out.push(live(
        T0 + 48,
        "default",
        "/tasks/exit",
        exit("nul\\u0000web", 9),
    ));
    out.push(live(
        T0 + 49,
        "x' OR '1'='1",
        "/tasks/exit'; DROP TABLE events; --",
        exit("'; DROP TABLE events; --", 4),
    ));
    let mut untimed = live(0, "default", "/tasks/exit", exit("untimed", 5));
    untimed.at = None;
    out.push(untimed);
    // The nanos overflow into the next second (the text says :51.5, the writer's
    // `time` column holds :50.999999).
    let mut overflow = live(T0 + 50, "default", "/tasks/exit", exit("overflow", 6));
    overflow.at = Some((T0 + 50, 1_500_000_000));
    out.push(overflow);
    // A nanosecond before a second, before 2000: its microseconds round to the next
    // second on their way into `time`.
    let mut y1999 = live(946_684_799, "default", "/tasks/exit", exit("y1999", 7));
    y1999.at = Some((946_684_798, 999_999_999));
    out.push(y1999);
    out.push(live(T0 + 7200, "default", "/tasks/a/b", None));
    // Year 0000: SQLite's dates have it, PostgreSQL calls it 1 BC.
    out.push(live(
        -62_167_219_200 + 86_400 + 7,
        "moby",
        "/tasks/exit",
        exit("y0", 8),
    ));

    // Origins, witnesses, reasons, publishers and nodes, spread over the shapes above.
    let witnesses = [Witness::Containerd, Witness::Cri, Witness::Docker];
    for (i, s) in out.iter_mut().enumerate() {
        s.origin = match i % 4 {
            1 => Origin::Reconciled {
                clock: Clock::Daemon,
                from: witnesses[(i / 4) % 3],
            },
            2 => Origin::Reconciled {
                clock: Clock::Reconcile,
                from: witnesses[(i / 4 + 1) % 3],
            },
            _ => Origin::Live,
        };
        s.node = match i % 5 {
            0 => Some("web-1"),
            1 => Some("web-2"),
            2 => Some("db-1"),
            3 => None,
            _ => Some("x' OR '1'='1"),
        };
        s.publisher = match i % 3 {
            0 => None,
            1 => Some(Publisher::Process {
                uid: 1000,
                gid: 100,
                pid: Some(4242),
            }),
            _ => Some(Publisher::Certificate {
                subject: "CN=node-7,O=Example".into(),
            }),
        };
        let reason = match i % 6 {
            1 => Some("OOMKilled"),
            4 => Some(""),
            _ => None,
        };
        if let Some(reason) = reason {
            let mut workload = s.workload.as_deref().cloned().unwrap_or_default();
            workload.reason = Some(reason.to_owned());
            s.workload = Some(Arc::new(workload));
        }
    }
    // The gateway's own markers: a gap in node db-1's record of its containerd.
    let marker = |secs: i64, topic: &'static str, type_name: &str, json: &str| Stored {
        node: Some("db-1"),
        ..live(secs, "eventgate", topic, any(type_name, json))
    };
    out.push(marker(
        T0 + 3,
        "/eventgate/upstream/disconnected",
        "eventgate.events.v1.UpstreamDisconnected",
        r#"{"upstream":"containerd","disconnected_at":"2024-05-01T10:00:03Z","reason":"closed"}"#,
    ));
    out.push(marker(
        T0 + 9,
        "/eventgate/upstream/connected",
        "eventgate.events.v1.UpstreamConnected",
        r#"{"upstream":"containerd","connected_at":"2024-05-01T10:00:09Z","gap_started_at":"2024-05-01T10:00:03Z"}"#,
    ));
    out
}

/// Both stores, written by one gateway, and what reading each takes.
struct Stores {
    _dir: tempfile::TempDir,
    db: PathBuf,
    config: PathBuf,
    url: String,
    ca: PathBuf,
    password_file: PathBuf,
    out: PathBuf,
}

async fn write_both(pg: &Postgres, events: &[Stored]) -> Stores {
    pg.create_role(ROLE, PASSWORD);
    // A collation that does not order text by its bytes (as most databases' do not):
    // the output must still be SQLite's.
    pg.sql(&format!(
        "CREATE DATABASE {DB} OWNER {ROLE} LOCALE_PROVIDER icu ICU_LOCALE 'en-US' \
         TEMPLATE template0"
    ));
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("pg-password");
    std::fs::write(&password, format!("{PASSWORD}\n")).unwrap();
    let url = format!("postgres://{ROLE}@127.0.0.1:{}/{DB}", pg.port());
    let data = dir.path().join("data");
    let toml = format!(
        "data_dir = \"{data}\"\nnode = \"gw-1\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n\
         [[forwarder]]\nname = \"central\"\nkind = \"postgres\"\nurl = \"{url}\"\n\
         password_file = \"{password}\"\nca_file = \"{ca}\"\n",
        data = data.display(),
        password = password.display(),
        ca = pg.ca().display(),
    );
    let config = dir.path().join("eventgate.toml");
    std::fs::write(&config, &toml).unwrap();
    let gateway = Gateway::start(&Config::parse(&toml, "test").unwrap())
        .await
        .unwrap();
    for (i, s) in events.iter().enumerate() {
        let envelope = Envelope {
            timestamp: s
                .at
                .map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
            namespace: s.namespace.into(),
            topic: s.topic.into(),
            event: s.payload.clone(),
        };
        let source = match s.node {
            Some(_) => Source::Upstream("containerd".into()),
            None => Source::Kafka("fleet".into()),
        };
        let mut identity = Identity::new(
            EventId::generate(),
            UNIX_EPOCH + Duration::from_secs((T0 + 3 * i as i64) as u64),
            source,
        );
        identity.origin = s.origin;
        identity.workload = s.workload.clone();
        identity.publisher = s.publisher.clone();
        identity.node = s.node.map(Arc::from);
        identity.node_seq = s.node.is_none().then_some(i as u64 + 1000);
        let appended = gateway
            .exchange()
            .append(Incoming::taken_in(identity, envelope))
            .await
            .unwrap();
        appended.durable.await.unwrap();
    }
    let reports = gateway.stop().await;
    for name in ["audit", "central"] {
        let delivered = reports
            .iter()
            .find(|r| r.forwarder == name)
            .map(|r| r.delivered);
        assert_eq!(delivered, Some(events.len() as u64), "{name}");
    }
    assert_eq!(
        pg.sql_in(DB, "SELECT count(*) FROM events"),
        events.len().to_string()
    );
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    Stores {
        db: data.join("audit.db"),
        config,
        url,
        ca: pg.ca().to_path_buf(),
        password_file: password,
        out,
        _dir: dir,
    }
}

/// How a command names the store it reads.
#[derive(Clone, Copy, Debug)]
enum Read {
    Sqlite,
    /// `--store central --config FILE`: the forwarder's own settings.
    Forwarder,
    /// `--store postgres://... --store-ca FILE`, the password from PGPASSWORD.
    Url,
}

impl Stores {
    fn run(&self, read: Read, args: &[&str]) -> Output {
        let (command, rest) = args.split_first().unwrap();
        let mut cmd = eventgate();
        cmd.arg(command);
        match read {
            Read::Sqlite => cmd.args(["--db", path_str(&self.db)]),
            Read::Forwarder => cmd.args(["--store", "central", "--config", path_str(&self.config)]),
            Read::Url => cmd
                .args(["--store", &self.url, "--store-ca", path_str(&self.ca)])
                .env("PGPASSWORD", PASSWORD),
        };
        // Local times in the tables are the same for both, whatever the machine's zone.
        cmd.args(rest).env("TZ", "UTC").output().unwrap()
    }

    /// Runs `args` against SQLite and against PostgreSQL (read as `read` says) and
    /// asserts the same exit, the same output and, for a failure, the same message;
    /// returns the output.
    fn same(&self, read: Read, args: &[&str]) -> String {
        let (a, b) = (self.run(Read::Sqlite, args), self.run(read, args));
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        assert_eq!(
            a.status.code(),
            b.status.code(),
            "{args:?} ({read:?}): exit codes; sqlite said {}, postgres said {}",
            text(&a.stderr),
            text(&b.stderr)
        );
        assert_eq!(text(&a.stdout), text(&b.stdout), "{args:?} ({read:?})");
        if !a.status.success() {
            assert_eq!(text(&a.stderr), text(&b.stderr), "{args:?} ({read:?})");
        }
        text(&a.stdout)
    }

    /// `timeline ... --out FILE` from each store; the files must be the same.
    fn same_picture(&self, name: &str, args: &[&str]) -> String {
        let sqlite = self.out.join(format!("sqlite-{name}"));
        let postgres = self.out.join(format!("postgres-{name}"));
        for (read, file) in [(Read::Sqlite, &sqlite), (Read::Forwarder, &postgres)] {
            let out = self.run(read, &[args, &["--out", path_str(file)]].concat());
            assert!(
                out.status.success(),
                "{args:?} ({read:?}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let (a, b) = (read(&sqlite), read(&postgres));
        assert_eq!(a, b, "{args:?}");
        a
    }
}

impl Stores {
    /// A gateway whose `/ui` reads the store of `forwarder` (`audit`: the SQLite file,
    /// `central`: the PostgreSQL database), the only forwarder it has.
    fn ui_gateway(&self, forwarder: &str) -> Running {
        let table = match forwarder {
            "audit" => format!("kind = \"sqlite\"\npath = \"{}\"", self.db.display()),
            _ => format!(
                "kind = \"postgres\"\nurl = \"{}\"\npassword_file = \"{}\"\nca_file = \"{}\"",
                self.url,
                self.password_file.display(),
                self.ca.display()
            ),
        };
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("ui.toml");
        std::fs::write(
            &config,
            format!(
                "[admin]\nui_store = \"{forwarder}\"\n[[forwarder]]\nname = \"{forwarder}\"\n{table}\n"
            ),
        )
        .unwrap();
        Running::start_in(dir, &["--config", path_str(&config)])
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// RFC 3339 in UTC with nine fraction digits, for --since and --until.
fn rfc3339(secs: i64, nanos: u32) -> String {
    chrono::DateTime::from_timestamp(secs, nanos)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.9fZ")
        .to_string()
}

/// Selectors of every field and operator, exact in SQL or left to the matcher.
const FILTERS: &[&str] = &[
    "",
    "topic",
    r#"topic=="/tasks/exit""#,
    r#"topic=="/tasks/exit'; DROP TABLE events; --""#,
    r#"topic!="/tasks/exit""#,
    r#"topic=="""#,
    r#"topic=="/tasks/*""#,
    "topic~=^/tasks/",
    "namespace==default",
    r#"namespace=="x' OR '1'='1""#,
    "namespace!=default",
    r#"namespace!="""#,
    "namespace~=^k8s",
    "event.container_id",
    "event.container_id==web",
    r#"event.container_id=="""#,
    "event.container_id!=web",
    r#"event.container_id=="nul\x00web""#,
    "event.container_id~=^nul",
    r#"event.container_id=="'; DROP TABLE events; --""#,
    "event.id==web",
    "event.pid==7",
    "event.io",
    "event.io.terminal",
    "event.io.terminal==true",
    "event.io.terminal==false",
    "event.io.terminal!=true",
    "event.io.stdout==x",
    "event.io.stdin",
    "event.labels.io.k8s.pod==web-0",
    r#"event.labels."io.k8s.pod""#,
    "event.labels.empty",
    r#"event.labels.empty=="""#,
    "event.labels.empty!=x",
    r#"event.labels."quote\"d"=="x' OR 1=1 --""#,
    "event.labels.missing",
    "event.image==docker.io/library/nginx:latest",
    "event.runtime.name==io.containerd.runc.v2",
    "event.runtime.options.binary_name==runc",
    "event.name==k8s.io",
    "other==y",
    "other!=y",
    "origin==live",
    "origin==reconciled",
    "origin!=reconciled",
    "origin_clock",
    "origin_clock==daemon",
    "origin_clock!=daemon",
    "reconciled_from",
    "reconciled_from==cri",
    "reconciled_from!=cri",
    "reason",
    "reason==OOMKilled",
    r#"reason=="""#,
    "reason!=OOMKilled",
    "node",
    "node==web-1",
    "node!=web-1",
    r#"node=="x' OR '1'='1""#,
    "node~=^web-",
    "pod.name==web-7",
    "pod.name!=web-7",
    "pod.namespace==staging",
    "pod.uid==uid-shop-web-7",
    "container.name==nginx",
    "container.kind==sandbox",
    "container.image!=busybox",
    r#"container.labels."app.kubernetes.io/name"==web-7"#,
    r#"container.labels."quote\"d"=="x' OR 1=1 --""#,
    r#"container.labels.tier=="""#,
    "container.labels.tier",
    "container.labels.missing",
    "container.labels.app~=^d",
    r#"pod.name==web-7,topic=="/tasks/exit""#,
    "namespace==default,event.container_id!=web,origin==live",
];

#[tokio::test(flavor = "multi_thread")]
async fn query_stats_and_timeline_print_the_same_from_sqlite_and_postgres() {
    let mut pg = Postgres::start_tls();
    let events = events();
    let stores = write_both(&pg, &events).await;
    let read = Read::Forwarder;
    assert_eq!(
        pg.sql_in(
            DB,
            "SELECT '/Custom/thing' < '/containers/create', \
             '/Custom/thing' < '/containers/create' COLLATE \"C\""
        ),
        "f|t",
        "the database orders text otherwise than SQLite"
    );

    // Every event, in each format: the whole rows come back the same.
    let all = stores.same(read, &["query", "--format", "json"]);
    assert_eq!(all.lines().count(), events.len());
    let table = stores.same(Read::Url, &["query", "--utc"]);
    assert!(table.contains("nul\\u0000web"), "{table}");
    stores.same(read, &["query"]);
    stores.same(read, &["query", "--format", "ctr"]);

    // Each filter, alone and with a time range, answered by SQL or by the matcher.
    let mut kept = 0;
    for filter in FILTERS {
        let json = stores.same(read, &["query", "--format", "json", filter]);
        kept += json.lines().count();
        stores.same(
            read,
            &[
                "query",
                "--format",
                "json",
                "--since",
                "2024-05-01T10:00:11Z",
                "--until",
                "2024-05-01T10:30:31Z",
                filter,
            ],
        );
    }
    assert!(
        kept > FILTERS.len() * 3,
        "the filters keep too little: {kept}"
    );
    let nul = stores.same(
        read,
        &["query", "--format", "json", r#"event.container_id~=^nul"#],
    );
    assert_eq!(nul.lines().count(), 1, "{nul}");

    // Bounds are compared with the stored text: a bound equal to an event's time
    // keeps it in --since and leaves it out of --until, nanoseconds included.
    for (since, until) in [
        (rfc3339(T0 + 12, 0), rfc3339(T0 + 25, 0)),
        (rfc3339(T0 + 51, 500_000_000), rfc3339(T0 + 51, 500_000_001)),
        (rfc3339(T0 + 51, 0), rfc3339(T0 + 52, 0)),
        (rfc3339(946_684_798, 999_999_999), rfc3339(946_684_799, 0)),
        (rfc3339(946_684_799, 0), rfc3339(T0 + 1, 0)),
    ] {
        let out = stores.same(
            read,
            &["query", "--utc", "--since", &since, "--until", &until],
        );
        assert!(
            out.lines().count() > 1,
            "{since}..{until}: nothing kept\n{out}"
        );
        stores.same(
            read,
            &[
                "query",
                "--format",
                "json",
                "--since",
                &since,
                "--until",
                &until,
                "event.container_id",
            ],
        );
    }
    // Limits, with SQL's answer and with the matcher's.
    for filter in [
        "namespace==default",
        "topic~=exit",
        "event.container_id!=web",
    ] {
        let out = stores.same(read, &["query", "--format", "json", "--limit", "3", filter]);
        assert_eq!(out.lines().count(), 3, "{filter}");
        stores.same(
            read,
            &[
                "query",
                "--limit",
                "2",
                "--since",
                "2024-05-01T10:00:20Z",
                filter,
            ],
        );
    }
    stores.same(read, &["query", "--node", "web-2", "--utc"]);

    // One pod's timeline: the restarts, an OOM kill, a kill; a name in two
    // namespaces refused the same way; restarts counted from before --since.
    let refused = stores.run(Read::Forwarder, &["query", "--pod", "web-7"]);
    assert!(!refused.status.success());
    stores.same(read, &["query", "--pod", "web-7"]);
    let timeline = stores.same(
        read,
        &[
            "query",
            "--pod",
            "web-7",
            "--pod-namespace",
            "shop",
            "--utc",
        ],
    );
    assert!(timeline.contains("OOM-killed"), "{timeline}");
    stores.same(Read::Url, &["query", "--pod", "db-0", "--utc"]);
    let later = stores.same(
        read,
        &[
            "query",
            "--pod",
            "web-7",
            "--pod-namespace",
            "shop",
            "--since",
            "2024-05-01T10:00:15Z",
            "--utc",
        ],
    );
    assert!(later.contains("restarted (pid 400): restart 1"), "{later}");
    stores.same(
        read,
        &[
            "query",
            "--pod",
            "web-7",
            "--pod-namespace",
            "shop",
            "--format",
            "json",
        ],
    );
    stores.same(read, &["query", "--pod", "nobody"]);

    // Statistics: by each group, bucket widths, exact and rechecked filters, ranges.
    for args in [
        &["stats", "--utc"][..],
        &["stats", "--utc", "--by", "namespace"],
        &["stats", "--utc", "--by", "node"],
        &["stats", "--utc", "--bucket", "1m"],
        &["stats", "--utc", "--bucket", "1s", "--by", "namespace"],
        &["stats", "--utc", "--bucket", "1d", "topic~=exit"],
        &[
            "stats",
            "--utc",
            "--since",
            "2024-05-01T10:00:11Z",
            "--until",
            "2024-05-01T11:00:00Z",
        ],
        &["stats", "--utc", "--bucket", "1s", "event.container_id"],
        &["stats", "--by", "pod"],
        &["stats", "--by", "pod", "--since", "2024-05-01T10:00:15Z"],
        &["stats", "--by", "pod", "pod.namespace==shop"],
    ] {
        stores.same(read, args);
    }
    let by_second = stores.same(read, &["stats", "--utc", "--bucket", "1s"]);
    assert!(
        by_second.contains("1999-12-31T23:59:58.000000000Z"),
        "{by_second}"
    );
    assert!(
        by_second.contains("0000-01-02T00:00:07.000000000Z"),
        "{by_second}"
    );
    assert!(
        by_second.contains("2024-05-01T10:00:51.000000000Z"),
        "{by_second}"
    );

    // The timeline picture, as SVG and as a page.
    let svg = stores.same_picture(
        "web-7.svg",
        &["timeline", "--pod", "web-7", "--pod-namespace", "shop"],
    );
    assert!(svg.contains("<svg"), "{svg}");
    stores.same_picture("all.html", &["timeline", "--group", "node"]);
    stores.same_picture(
        "recent.svg",
        &[
            "timeline",
            "--since",
            "2024-05-01T10:00:20Z",
            "--max-rows",
            "5",
        ],
    );

    // /ui, reading the store admin.ui_store names: the same answers from both.
    let mut sqlite_ui = stores.ui_gateway("audit");
    let mut postgres_ui = stores.ui_gateway("central");
    let (a, b) = (sqlite_ui.admin_addr(), postgres_ui.admin_addr());
    for path in [
        "/ui/api/events",
        "/ui/api/events?limit=5&after=3",
        "/ui/api/events?filter=topic%3D%3D%22%2Ftasks%2Fexit%22&limit=7",
        "/ui/api/events?filter=event.container_id&since=2024-05-01T10:00:11Z&until=2024-05-01T10:30:31Z",
        "/ui/api/events?filter=topic~%3Dexit&limit=3",
        "/ui/api/event/5",
        "/ui/api/event/999",
        "/ui/api/export?format=csv",
        "/ui/api/export?format=jsonl&filter=pod.name%3D%3Dweb-7",
        "/ui/api/timeline.svg?pod=web-7&ns=shop",
        "/ui/api/timeline.svg?pod=web-7",
        "/ui/api/timeline.html?group=node&since=2024-05-01T10:00:00Z&until=2024-05-01T12:00:00Z",
    ] {
        let (sqlite, postgres) = (http(a, "GET", path), http(b, "GET", path));
        assert_eq!(sqlite, postgres, "{path}");
        if !path.ends_with("999") && !path.ends_with("timeline.svg?pod=web-7") {
            assert_eq!(sqlite.0, 200, "{path}: {}", sqlite.1);
        }
    }
    // The rates are per hour up to the moment of each request.
    let fleet = |addr| {
        let (code, body) = http(addr, "GET", "/ui/api/fleet?since=2024-05-01T09:00:00Z");
        assert_eq!(code, 200, "{body}");
        let mut body: serde_json::Value = serde_json::from_str(&body).unwrap();
        for node in body["nodes"].as_array_mut().unwrap() {
            node.as_object_mut().unwrap().remove("events_per_hour");
        }
        body
    };
    let nodes = fleet(a);
    assert_eq!(nodes, fleet(b));
    assert_eq!(nodes["nodes"].as_array().unwrap().len(), 5, "{nodes}");
    let db = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "db-1")
        .unwrap();
    assert_eq!(
        (db["gaps"].as_u64(), db["gap_seconds"].as_f64()),
        (Some(1), Some(6.0)),
        "{db}"
    );

    // The server gone: the command says where it could not connect, /ui that the
    // store is unavailable for now (503), not that it failed.
    pg.stop();
    let down = stores.run(Read::Forwarder, &["query"]);
    let message = String::from_utf8_lossy(&down.stderr);
    assert!(!down.status.success());
    assert!(
        message.contains(&format!("cannot connect to {}", stores.url)),
        "{message}"
    );
    let (code, body) = http(b, "GET", "/ui/api/events");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("cannot connect to"), "{body}");
}
