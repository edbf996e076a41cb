//! A scripted daemon: an old one without Containers/ListStream, one with a
//! namespace too large for tonic's default message limit, one that hangs or fails.

mod fake_daemon;

use std::time::{Duration, Instant};

use eventgate::internal::reconcile::list::ListError;
use eventgate::internal::reconcile::{NodeState, TaskStatus, list_node};
use eventgate::proto::containerd::services::containers::v1::container::Runtime;
use eventgate::proto::containerd::services::containers::v1::{Container, ListContainersResponse};
use eventgate::proto::containerd::services::images::v1::{Image, ListImagesResponse};
use eventgate::proto::containerd::services::namespaces::v1::{ListNamespacesResponse, Namespace};
use eventgate::proto::containerd::services::tasks::v1::ListTasksResponse;
use eventgate::proto::containerd::types::Descriptor;
use eventgate::proto::containerd::v1::types::{Process, Status};
use prost::Message;
use tonic::Code;

use crate::support::DEADLINE;
use fake_daemon::{Answer, FakeDaemon};

const NAMESPACES: &str = "/containerd.services.namespaces.v1.Namespaces/List";
const LIST_STREAM: &str = "/containerd.services.containers.v1.Containers/ListStream";
const LIST: &str = "/containerd.services.containers.v1.Containers/List";
const TASKS: &str = "/containerd.services.tasks.v1.Tasks/List";
const IMAGES: &str = "/containerd.services.images.v1.Images/List";

/// Containers in namespace `big`, each carrying a spec the size of a real one.
const BIG: usize = 500;
const SPEC_BYTES: usize = 10 * 1024;

fn namespaces(names: &[&str]) -> Answer {
    let namespaces = names
        .iter()
        .map(|name| Namespace {
            name: (*name).to_owned(),
            labels: [("owner".to_owned(), (*name).to_owned())].into(),
        })
        .collect();
    Answer::Message(ListNamespacesResponse { namespaces }.encode_to_vec())
}

fn container(id: String) -> Container {
    Container {
        id,
        image: "img".into(),
        runtime: Some(Runtime {
            name: "io.containerd.runc.v2".into(),
            options: None,
        }),
        spec: Some(prost_types::Any {
            type_url: "types.containerd.io/opencontainers/runtime-spec/1/Spec".into(),
            value: vec![b'x'; SPEC_BYTES],
        }),
        ..Default::default()
    }
}

fn big_list() -> Vec<u8> {
    let containers = (0..BIG).map(|i| container(format!("big-{i}"))).collect();
    ListContainersResponse { containers }.encode_to_vec()
}

/// A daemon from before Containers/ListStream, answering per namespace header as
/// containerd does, and refusing calls without one.
fn old_daemon(path: &str, namespace: Option<&str>) -> Answer {
    let Some(namespace) = namespace else {
        return if path == NAMESPACES {
            namespaces(&["big", "small"])
        } else {
            Answer::Status(Code::FailedPrecondition)
        };
    };
    match path {
        LIST_STREAM => Answer::Status(Code::Unimplemented),
        LIST if namespace == "big" => Answer::Message(big_list()),
        LIST => Answer::Message(
            ListContainersResponse {
                containers: vec![container(format!("{namespace}-only"))],
            }
            .encode_to_vec(),
        ),
        TASKS => Answer::Message(
            ListTasksResponse {
                tasks: vec![Process {
                    id: format!("{namespace}-only"),
                    pid: 7,
                    status: Status::Running as i32,
                    ..Default::default()
                }],
            }
            .encode_to_vec(),
        ),
        IMAGES => Answer::Message(
            ListImagesResponse {
                images: vec![Image {
                    name: format!("{namespace}/img"),
                    target: Some(Descriptor {
                        digest: format!("sha256:{namespace}"),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
            }
            .encode_to_vec(),
        ),
        _ => Answer::Status(Code::Unimplemented),
    }
}

async fn list(daemon: &FakeDaemon, timeout: Duration) -> Result<NodeState, ListError> {
    let channel = eventgate::client::connect_channel(&daemon.address(), DEADLINE)
        .await
        .expect("connect to the fake daemon");
    list_node(channel, timeout).await
}

#[tokio::test]
async fn an_old_daemon_is_listed_with_list_and_answers_past_4_mib_are_read() {
    let size = big_list().len();
    assert!(
        (4 << 20..16 << 20).contains(&size),
        "the big namespace's List answer ({size} bytes) must pass tonic's 4 MiB default"
    );
    let daemon = FakeDaemon::start(old_daemon);
    let node = list(&daemon, DEADLINE).await.expect("list_node");

    let big = &node.namespaces["big"];
    assert_eq!(big.containers.len(), BIG);
    assert_eq!(big.containers["big-7"].runtime, "io.containerd.runc.v2");
    // Each namespace's answers, by the header sent with each call.
    let small = &node.namespaces["small"];
    assert_eq!(small.containers.keys().collect::<Vec<_>>(), ["small-only"]);
    assert_eq!(small.tasks["small-only"].status, TaskStatus::Running);
    assert_eq!(small.tasks["small-only"].pid, 7);
    assert_eq!(
        small.images["small/img"].target_digest.as_deref(),
        Some("sha256:small")
    );
    assert_eq!(
        small.labels.as_ref().and_then(|l| l.get("owner")),
        Some(&"small".to_owned())
    );

    let calls = daemon.calls();
    for namespace in ["big", "small"] {
        let made: Vec<&str> = calls
            .iter()
            .filter(|(path, ns)| path.contains("Containers") && ns.as_deref() == Some(namespace))
            .map(|(path, _)| path.as_str())
            .collect();
        assert_eq!(
            made,
            [LIST_STREAM, LIST],
            "stream first, then List, in {namespace}"
        );
    }
}

#[tokio::test]
async fn a_call_that_never_answers_fails_the_list_within_the_timeout() {
    let daemon = FakeDaemon::start(|path, namespace| match path {
        TASKS => Answer::Never,
        _ => old_daemon(path, namespace),
    });
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let error = list(&daemon, timeout).await.expect_err("a hung Tasks/List");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= timeout && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    match &error {
        ListError::Tasks { namespace, source } => {
            assert_eq!(namespace, "big");
            assert_eq!(source.code(), Code::DeadlineExceeded);
        }
        other => panic!("expected a Tasks error, got {other:?}"),
    }
    assert_eq!(
        error.to_string(),
        "containerd's Tasks/List failed in namespace \"big\""
    );
}

#[tokio::test]
async fn failures_name_the_call_and_the_namespace() {
    let daemon = FakeDaemon::start(|path, namespace| match (path, namespace) {
        (IMAGES, Some("small")) => Answer::Status(Code::Unavailable),
        _ => old_daemon(path, namespace),
    });
    match list(&daemon, DEADLINE).await {
        Err(ListError::Images { namespace, source }) => {
            assert_eq!(namespace, "small");
            assert_eq!(source.code(), Code::Unavailable);
        }
        other => panic!("expected an Images error, got {other:?}"),
    }

    let daemon = FakeDaemon::start(|path, _| match path {
        NAMESPACES => namespaces(&["bad\nname"]),
        _ => Answer::Status(Code::Internal),
    });
    match list(&daemon, DEADLINE).await {
        Err(ListError::BadNamespace { namespace, .. }) => assert_eq!(namespace, "bad\nname"),
        other => panic!("expected a BadNamespace error, got {other:?}"),
    }

    let daemon = FakeDaemon::start(|_, _| Answer::Status(Code::PermissionDenied));
    match list(&daemon, DEADLINE).await {
        Err(ListError::Namespaces { source }) => {
            assert_eq!(source.code(), Code::PermissionDenied)
        }
        other => panic!("expected a Namespaces error, got {other:?}"),
    }
}
