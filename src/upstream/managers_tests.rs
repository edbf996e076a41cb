use std::path::Path;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::reconcile::managed::{ManagedExit, ManagedStatus};

/// A fake dockerd: the list shows `web` exited and `db` running; inspects of `web`
/// answer its last run. Counts the calls.
fn fake_dockerd(dir: &Path) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let path = dir.join("docker.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&calls);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let n = stream.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..n]).into_owned();
                let body = match head.split(' ').nth(1).unwrap_or("") {
                    "/containers/json?all=1" => {
                        r#"[{"Id":"web","Names":["/shop-web-1"],"Image":"shop/web:2",
                          "Labels":{"com.docker.compose.service":"web"},"State":"exited","Created":1700000000},
                         {"Id":"db","Names":["/shop-db-1"],"Image":"postgres:16","State":"running","Created":1700000001}]"#
                    }
                    "/containers/web/json" => {
                        r#"{"Id":"web","Name":"/shop-web-1","Created":"2023-11-14T22:13:20.5Z",
                          "State":{"Status":"exited","ExitCode":137,"OOMKilled":true,
                            "StartedAt":"2023-11-14T22:13:21Z","FinishedAt":"2023-11-14T22:13:22Z"},
                          "Config":{"Image":"shop/web:2","Labels":{"com.docker.compose.service":"web"}}}"#
                    }
                    _ => r#"{"message":"page not found"}"#,
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (path.to_str().unwrap().to_owned(), calls)
}

fn managers(docker: ManagerSetting) -> Managers {
    Managers {
        cri: ManagerSetting::Off,
        docker,
        upstream: "/nonexistent/containerd.sock".into(),
        connect_timeout: Duration::from_secs(1),
    }
}

#[tokio::test]
async fn dockerd_is_listed_and_only_exits_the_record_lacks_are_inspected() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, calls) = fake_dockerd(dir.path());
    let managers = managers(ManagerSetting::Address(socket.clone()));
    let asked = managers.ask(&NodeState::default(), &BTreeSet::new()).await;
    let [report] = asked.reports.as_slice() else {
        panic!("{:?}", asked.reports);
    };
    assert_eq!(report.name, "docker");
    assert_eq!(report.address, socket);
    assert_eq!(
        report.outcome,
        Outcome::Listed {
            sandboxes: 0,
            containers: 2,
            status_calls: 1
        }
    );
    assert_eq!(
        report.to_string(),
        format!("docker ({socket}): listed 2 containers, 1 status calls")
    );
    let [view] = asked.views.as_slice() else {
        panic!("{:?}", asked.views);
    };
    assert_eq!(view.from, Witness::Docker);
    let containers = view.containers.as_ref().unwrap();
    let web = &containers["web"];
    assert_eq!(web.status, ManagedStatus::Exited);
    assert_eq!(web.image, "shop/web:2");
    let at = |s: u64, n: u32| Some(std::time::UNIX_EPOCH + Duration::new(s, n));
    assert_eq!(web.created_at, at(1_700_000_000, 500_000_000));
    assert_eq!(
        web.exit,
        Some(ManagedExit {
            started_at: at(1_700_000_001, 0),
            finished_at: at(1_700_000_002, 0),
            exit_code: 137,
            reason: Some("OOMKilled".into()),
        })
    );
    let terms = web.workload.as_ref().unwrap();
    assert_eq!(terms.container_name.as_deref(), Some("shop-web-1"));
    assert_eq!(terms.labels["com.docker.compose.service"], "web");
    let db = &containers["db"];
    assert_eq!(db.status, ManagedStatus::Running);
    assert_eq!(db.exit, None);
    assert_eq!(db.created_at, at(1_700_000_001, 0));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);

    // An exit the record has is not asked about again.
    let recorded: BTreeSet<String> = ["web".to_owned()].into_iter().collect();
    let asked = managers.ask(&NodeState::default(), &recorded).await;
    assert!(matches!(
        asked.reports[0].outcome,
        Outcome::Listed {
            status_calls: 0,
            ..
        }
    ));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_dockerd_that_cannot_be_asked_keeps_the_record_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("docker.sock");
    let managers = managers(ManagerSetting::Address(missing.to_str().unwrap().into()));
    let asked = managers.ask(&NodeState::default(), &BTreeSet::new()).await;
    assert_eq!(
        asked.views,
        vec![ManagerView {
            from: Witness::Docker,
            containers: None
        }]
    );
    let report = &asked.reports[0];
    assert!(report.failed());
    let Outcome::Failed(error) = &report.outcome else {
        panic!("{report:?}");
    };
    assert!(error.contains("does not exist"), "{error}");

    // `auto` on a node whose containerd has no `moby` namespace: not there, not a
    // failure, and no view.
    let asked = self::managers(ManagerSetting::Auto)
        .ask(&NodeState::default(), &BTreeSet::new())
        .await;
    assert!(asked.views.is_empty());
    assert_eq!(asked.reports[0].outcome, Outcome::Absent);
    assert_eq!(asked.reports[0].address, crate::docker::DEFAULT_SOCKET);
    // `off`: not asked, not reported.
    let asked = self::managers(ManagerSetting::Off)
        .ask(&NodeState::default(), &BTreeSet::new())
        .await;
    assert!(asked.reports.is_empty() && asked.views.is_empty());
}
