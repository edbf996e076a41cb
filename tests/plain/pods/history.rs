//! The history the tests store: a gateway built through the library takes events
//! with what their container's record said, as an upstream's enrichment hands them
//! over (`Exchange::append`), and its forwarders store them.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use eventgate::config::Config;
use eventgate::event::{Origin, Source, Workload};
use eventgate::gateway::{Gateway, Incoming};
use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use serde_json::Value;

pub const T0: i64 = 1_714_557_600; // 2024-05-01T10:00:00Z

/// One event to store: topic, payload JSON, what the container's record said.
pub type Step = (&'static str, String, Option<Arc<Workload>>);

pub fn pod(namespace: &str, name: &str, container: Option<&str>) -> Option<Arc<Workload>> {
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
        labels: [("app.kubernetes.io/name".to_owned(), name.to_owned())].into(),
        reason: None,
    }))
}

pub fn start(id: &str, pid: u32) -> String {
    format!(r#"{{"container_id":"{id}","pid":{pid}}}"#)
}

pub fn exit(id: &str, status: u32) -> String {
    format!(r#"{{"container_id":"{id}","id":"{id}","pid":7,"exit_status":{status}}}"#)
}

fn container(id: &str) -> String {
    format!(r#"{{"id":"{id}"}}"#)
}

/// shop/web-7: its sandbox, nginx exiting 1, deleted, recreated, OOM-killed,
/// deleted, the sandbox stopped and deleted. staging/web-7: a pod of the same name
/// exiting cleanly. shop/db-0: killed without an OOM. An event about no container.
pub fn history() -> Vec<Step> {
    let sandbox = || pod("shop", "web-7", None);
    let nginx = || pod("shop", "web-7", Some("nginx"));
    vec![
        (
            "/containers/create",
            r#"{"id":"sb1","image":"registry.k8s.io/pause:3.9"}"#.into(),
            sandbox(),
        ),
        ("/tasks/create", start("sb1", 100), sandbox()),
        ("/tasks/start", start("sb1", 100), sandbox()),
        (
            "/containers/create",
            r#"{"id":"n1","image":"docker.io/library/nginx:1.27"}"#.into(),
            nginx(),
        ),
        ("/tasks/start", start("n1", 200), nginx()),
        ("/tasks/exit", exit("n1", 1), nginx()),
        ("/tasks/delete", exit("n1", 1), nginx()),
        ("/containers/delete", container("n1"), nginx()),
        ("/containers/create", container("n2"), nginx()),
        ("/tasks/start", start("n2", 300), nginx()),
        ("/tasks/oom", r#"{"container_id":"n2"}"#.into(), nginx()),
        ("/tasks/exit", exit("n2", 137), nginx()),
        ("/tasks/delete", exit("n2", 137), nginx()),
        ("/containers/delete", container("n2"), nginx()),
        ("/tasks/exit", exit("sb1", 137), sandbox()),
        ("/containers/delete", container("sb1"), sandbox()),
        (
            "/tasks/start",
            start("a1", 400),
            pod("staging", "web-7", Some("app")),
        ),
        (
            "/tasks/exit",
            exit("a1", 0),
            pod("staging", "web-7", Some("app")),
        ),
        (
            "/tasks/start",
            start("d1", 500),
            pod("shop", "db-0", Some("db")),
        ),
        (
            "/tasks/exit",
            exit("d1", 137),
            pod("shop", "db-0", Some("db")),
        ),
        ("/tasks/exit", exit("plain", 1), None),
    ]
}

fn type_name(topic: &str) -> &'static str {
    match topic {
        "/containers/create" => "containerd.events.ContainerCreate",
        "/containers/delete" => "containerd.events.ContainerDelete",
        "/tasks/create" => "containerd.events.TaskCreate",
        "/tasks/start" => "containerd.events.TaskStart",
        "/tasks/exit" => "containerd.events.TaskExit",
        "/tasks/delete" => "containerd.events.TaskDelete",
        "/tasks/oom" => "containerd.events.TaskOOM",
        other => panic!("no type for {other}"),
    }
}

/// A gateway with a `sqlite` forwarder (`audit.db`) and a `file` one
/// (`events.jsonl`) in `data`.
pub async fn start_gateway(data: &Path) -> Gateway {
    let toml = format!(
        "data_dir = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n\
         [[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n",
        data.display()
    );
    let config = Config::parse(&toml, "test").unwrap();
    Gateway::start(&config).await.unwrap()
}

/// `step` as the `at`th event (T0 + `at` seconds) from an upstream, durable when
/// this returns.
pub async fn append(gateway: &Gateway, at: usize, step: &Step, origin: Origin) {
    let (topic, json, workload) = step;
    let any = Registry::global()
        .encode_json(type_name(topic), json)
        .unwrap();
    let envelope = Envelope {
        timestamp: Some(prost_types::Timestamp {
            seconds: T0 + at as i64,
            nanos: 0,
        }),
        namespace: "k8s.io".into(),
        topic: (*topic).into(),
        event: Some(any),
    };
    let incoming = Incoming::checked(Source::Upstream("node".into()), envelope)
        .origin(origin)
        .workload(workload.clone());
    let appended = gateway.exchange().append(incoming).await.unwrap();
    appended.durable.await.unwrap();
}

/// Stops `gateway` once both forwarders delivered `events` events.
pub async fn stop(gateway: Gateway, events: usize) {
    let reports = gateway.stop().await;
    for name in ["audit", "log"] {
        let delivered = reports
            .iter()
            .find(|r| r.forwarder == name)
            .map(|r| r.delivered);
        assert_eq!(delivered, Some(events as u64), "{name}");
    }
}

/// [`start_gateway`] in `data`, given `steps` (one a second from T0, live), stopped
/// once both forwarders hold them all.
pub async fn store(data: &Path, steps: &[Step]) -> PathBuf {
    let gateway = start_gateway(data).await;
    for (i, step) in steps.iter().enumerate() {
        append(&gateway, i, step, Origin::Live).await;
    }
    stop(gateway, steps.len()).await;
    data.join("audit.db")
}

pub use crate::support::stores::run;

pub fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
