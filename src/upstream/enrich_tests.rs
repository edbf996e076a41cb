use super::*;
use crate::testing;

/// `json` as `ty` on `topic`, in Kubernetes' namespace.
fn envelope(topic: &str, ty: &str, json: &str) -> Envelope {
    testing::envelope()
        .namespace("k8s.io")
        .topic(topic)
        .json(ty, json)
        .build()
}

#[test]
fn the_container_is_found_in_every_container_task_and_sandbox_event() {
    for (topic, ty, json) in [
        (
            "/containers/create",
            "containerd.events.ContainerCreate",
            r#"{"id":"c1"}"#,
        ),
        (
            "/containers/delete",
            "containerd.events.ContainerDelete",
            r#"{"id":"c1"}"#,
        ),
        (
            "/tasks/exit",
            "containerd.events.TaskExit",
            r#"{"containerId":"c1","id":"exec-9"}"#,
        ),
        (
            "/tasks/exec-added",
            "containerd.events.TaskExecAdded",
            r#"{"containerId":"c1","execId":"e"}"#,
        ),
        (
            "/tasks/oom",
            "containerd.events.TaskOOM",
            r#"{"containerId":"c1"}"#,
        ),
        (
            "/sandboxes/exit",
            "containerd.events.SandboxExit",
            r#"{"sandboxId":"c1"}"#,
        ),
    ] {
        assert_eq!(
            container_of(&envelope(topic, ty, json)).as_deref(),
            Some("c1"),
            "{ty}"
        );
    }
    for (topic, ty, json) in [
        (
            "/images/create",
            "containerd.services.images.v1.ImageCreate",
            r#"{"name":"c1"}"#,
        ),
        (
            "/namespaces/create",
            "containerd.events.NamespaceCreate",
            r#"{"name":"c1"}"#,
        ),
        (
            "/tasks/exit",
            "containerd.events.TaskExit",
            r#"{"id":"c1"}"#,
        ),
    ] {
        assert_eq!(container_of(&envelope(topic, ty, json)), None, "{ty}");
    }
}

fn ready(lookup: Lookup) -> Option<Arc<Workload>> {
    match lookup {
        Lookup::Ready(workload) => workload,
        waiting => panic!("waiting: {waiting:?}"),
    }
}

#[test]
fn updates_carry_their_labels_and_deletes_forget() {
    let mut enricher = Enricher::new("k8s".into(), true, ManagerSetting::Off);
    let update = envelope(
        "/containers/update",
        "containerd.events.ContainerUpdate",
        r#"{"id":"c1","image":"nginx","labels":{"io.kubernetes.pod.name":"web-7"}}"#,
    );
    let workload = ready(enricher.begin(&update)).unwrap();
    assert_eq!(workload.pod_name.as_deref(), Some("web-7"));
    let exit = envelope(
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"containerId":"c1"}"#,
    );
    assert_eq!(ready(enricher.begin(&exit)), Some(workload.clone()));
    let delete = envelope(
        "/containers/delete",
        "containerd.events.ContainerDelete",
        r#"{"id":"c1"}"#,
    );
    assert_eq!(ready(enricher.begin(&delete)), Some(workload));
    // Forgotten, and with no daemon to ask, nothing; a create keeps its image.
    assert_eq!(ready(enricher.begin(&exit)), None);
    let create = envelope(
        "/containers/create",
        "containerd.events.ContainerCreate",
        r#"{"id":"c2","image":"busybox"}"#,
    );
    assert_eq!(ready(enricher.begin(&create)).unwrap().image, "busybox");
    let mut off = Enricher::new("off".into(), false, ManagerSetting::Off);
    assert_eq!(ready(off.begin(&update)), None);
}

/// `json` as `ty` on `topic`, in dockerd's namespace.
fn moby(topic: &str, ty: &str, json: &str) -> Envelope {
    testing::envelope()
        .namespace(DOCKER_NAMESPACE)
        .topic(topic)
        .json(ty, json)
        .build()
}

/// A fake dockerd answering inspects of `known` (by id) and 404 otherwise;
/// counts the inspects.
fn fake_dockerd(
    dir: &Path,
    known: &'static [(&'static str, &'static str)],
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let path = dir.join("docker.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let n = stream.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..n]).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                let found = known
                    .iter()
                    .find(|(id, _)| path == format!("/containers/{id}/json"));
                let (status, body) = match found {
                    Some((id, name)) => (
                        "200 OK",
                        format!(
                            r#"{{"Id":"{id}","Name":"/{name}","State":{{"Status":"running"}},
                            "Config":{{"Image":"shop/web:2","Labels":{{"com.docker.compose.project":"shop"}}}}}}"#
                        ),
                    ),
                    None => ("404 Not Found", r#"{"message":"No such container"}"#.into()),
                };
                let answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (path.to_str().unwrap().to_owned(), asked)
}

/// The lookup, once its question is answered.
async fn answered(enricher: &mut Enricher, mut lookup: Lookup) -> Option<Arc<Workload>> {
    while !lookup.is_ready() {
        let fetched = tokio::time::timeout(Duration::from_secs(5), enricher.fetched())
            .await
            .expect("an answer");
        for fetched in &fetched {
            enricher.settle(&mut lookup, fetched);
        }
    }
    lookup.take()
}

#[tokio::test]
async fn dockers_terms_come_from_its_inspect_and_outlive_containerds_delete() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, asked) = fake_dockerd(dir.path(), &[("d1", "shop-web-1")]);
    let mut enricher = Enricher::new("docker".into(), true, ManagerSetting::Address(socket));
    let create = moby(
        "/containers/create",
        "containerd.events.ContainerCreate",
        r#"{"id":"d1"}"#,
    );
    let lookup = enricher.begin(&create);
    assert!(!lookup.is_ready());
    let terms = answered(&mut enricher, lookup).await.unwrap();
    assert_eq!(terms.container_name.as_deref(), Some("shop-web-1"));
    assert_eq!(terms.image, "shop/web:2");
    assert_eq!(terms.labels["com.docker.compose.project"], "shop");
    assert_eq!(terms.kind, None);
    // containerd's update of its own record, its delete at the exit, and the
    // events after: Docker's terms, with no other question.
    let update = moby(
        "/containers/update",
        "containerd.events.ContainerUpdate",
        r#"{"id":"d1","labels":{"com.docker/engine.bundle.path":"/x"}}"#,
    );
    let delete = moby(
        "/containers/delete",
        "containerd.events.ContainerDelete",
        r#"{"id":"d1"}"#,
    );
    let exit = moby(
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"containerId":"d1"}"#,
    );
    for event in [&update, &exit, &delete, &exit] {
        assert_eq!(ready(enricher.begin(event)), Some(terms.clone()));
    }
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);

    // A reconcile's lists that no longer show it (`docker rm`): forgotten, so
    // an event about that id asks dockerd again.
    enricher.listed(&NodeState::default());
    let lookup = enricher.begin(&exit);
    assert!(!lookup.is_ready());
    assert_eq!(answered(&mut enricher, lookup).await, Some(terms.clone()));
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);

    // Other namespaces are containerd's, never dockerd's.
    let elsewhere = envelope(
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"containerId":"d1"}"#,
    );
    assert_eq!(ready(enricher.begin(&elsewhere)), None);
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_dockerd_that_cannot_be_asked_leaves_the_event_without_its_terms() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("docker.sock").to_str().unwrap().to_owned();
    let mut enricher = Enricher::new("docker".into(), true, ManagerSetting::Address(missing));
    let create = moby(
        "/containers/create",
        "containerd.events.ContainerCreate",
        r#"{"id":"d2"}"#,
    );
    let lookup = enricher.begin(&create);
    assert_eq!(answered(&mut enricher, lookup).await, None);
    // Not remembered: the next event asks again.
    assert!(!enricher.begin(&create).is_ready());
}

#[test]
fn reconstructed_events_of_docker_containers_prefer_dockers_terms() {
    use crate::reconcile::state::{ContainerState, NamespaceState};
    let mut enricher = Enricher::new("docker".into(), true, ManagerSetting::Off);
    let docker = Workload {
        container_name: Some("shop-web-1".into()),
        image: "shop/web:2".into(),
        ..Workload::default()
    };
    let containerd_record = ContainerState {
        labels: Some(
            [("com.docker/engine.bundle.path".to_owned(), "/x".to_owned())]
                .into_iter()
                .collect(),
        ),
        ..ContainerState::default()
    };
    let with_terms = ContainerState {
        workload: Some(docker.clone()),
        ..containerd_record.clone()
    };
    let state = |container: &ContainerState| NodeState {
        namespaces: [(
            DOCKER_NAMESPACE.to_owned(),
            NamespaceState {
                containers: [("d1".to_owned(), container.clone())].into_iter().collect(),
                ..NamespaceState::default()
            },
        )]
        .into_iter()
        .collect(),
    };
    let exit = moby(
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"containerId":"d1"}"#,
    );
    // dockerd's list folded into the daemon's side, or what the record captured.
    for (daemon, recorded) in [
        (state(&with_terms), NodeState::default()),
        (state(&containerd_record), state(&with_terms)),
        (NodeState::default(), state(&with_terms)),
    ] {
        let found = enricher.reconciled(&exit, &daemon, &recorded);
        assert_eq!(found.as_deref(), Some(&docker));
    }
    // Without them, containerd's record as for any container.
    let found = enricher
        .reconciled(&exit, &state(&containerd_record), &NodeState::default())
        .unwrap();
    assert_eq!(found.container_name, None);
    assert!(found.labels.contains_key("com.docker/engine.bundle.path"));
}
