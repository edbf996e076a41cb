use std::path::Path;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::reconcile::managed::{ManagedExit, ManagedStatus};

/// A fake dockerd: the list shows `web` exited and `db` running; inspects answer
/// `web`'s last run and `db`'s run under way; the event log has `web`'s two runs.
/// Counts the calls.
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
                let path = head.split(' ').nth(1).unwrap_or("");
                let body = match path {
                    _ if path.starts_with("/events?since=1&until=") => {
                        r#"{"Type":"image","Action":"pull","Actor":{"ID":"busybox"},"time":1700000000,"timeNano":1700000000000000000}
{"Type":"container","Action":"start","Actor":{"ID":"web","Attributes":{"name":"shop-web-1"}},"timeNano":1700000000600000000}
{"Type":"container","Action":"die","Actor":{"ID":"web","Attributes":{"exitCode":"3"}},"timeNano":1700000000700000000}
{"Type":"container","Action":"start","Actor":{"ID":"web","Attributes":{}},"timeNano":1700000001000000000}
{"Type":"container","Action":"oom","Actor":{"ID":"web","Attributes":{}},"timeNano":1700000001900000000}
{"Type":"container","Action":"die","Actor":{"ID":"web","Attributes":{"exitCode":"137"}},"timeNano":1700000002000000000}
"#
                    }
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
                    "/containers/db/json" => {
                        r#"{"Id":"db","Name":"/shop-db-1","Created":"2023-11-14T22:13:21Z","RestartCount":3,
                          "State":{"Status":"running","ExitCode":0,"StartedAt":"2023-11-14T22:13:25Z",
                            "FinishedAt":"2023-11-14T22:13:24Z"},"Config":{"Image":"postgres:16"}}"#
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
    let asked = managers.ask(&NodeState::default(), &Known::default()).await;
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
            status_calls: 2
        }
    );
    assert_eq!(
        report.to_string(),
        format!("docker ({socket}): listed 2 containers, 2 status calls")
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
    // A running container with no run recorded: its restart count and start.
    assert_eq!(
        (db.restart_count, db.started_at),
        (Some(3), at(1_700_000_005, 0))
    );
    assert_eq!(view.log, None);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);

    // An exit the record has is not asked about again, nor a container with a run
    // recorded; the event log is read up to the lists.
    let known = Known {
        exits: ["web".to_owned()].into_iter().collect(),
        docker_runs: ["db".to_owned()].into_iter().collect(),
        until: Some(SystemTime::now()),
    };
    let asked = managers.ask(&NodeState::default(), &known).await;
    assert!(matches!(
        asked.reports[0].outcome,
        Outcome::Listed {
            status_calls: 0,
            ..
        }
    ));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 5);
    let log = asked.views[0].log.as_ref().expect("the event log");
    assert_eq!((log.events, log.oldest), (6, at(1_700_000_000, 0)));
    let web: Vec<_> = log.containers["web"].iter().map(|l| l.action).collect();
    use crate::reconcile::run::Action;
    assert_eq!(
        web,
        [
            Action::Start,
            Action::Die(3),
            Action::Start,
            Action::Oom,
            Action::Die(137)
        ]
    );
    assert_eq!(
        asked.reports[0].log,
        Some(Ok(LogRead {
            events: 6,
            oldest: at(1_700_000_000, 0)
        }))
    );
}

#[tokio::test]
async fn a_dockerd_that_cannot_be_asked_keeps_the_record_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("docker.sock");
    let managers = managers(ManagerSetting::Address(missing.to_str().unwrap().into()));
    let asked = managers.ask(&NodeState::default(), &Known::default()).await;
    assert_eq!(
        asked.views,
        vec![ManagerView {
            from: Witness::Docker,
            containers: None,
            log: None
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
        .ask(&NodeState::default(), &Known::default())
        .await;
    assert!(asked.views.is_empty());
    assert_eq!(asked.reports[0].outcome, Outcome::Absent);
    assert_eq!(asked.reports[0].address, crate::docker::DEFAULT_SOCKET);
    // `off`: not asked, not reported.
    let asked = self::managers(ManagerSetting::Off)
        .ask(&NodeState::default(), &Known::default())
        .await;
    assert!(asked.reports.is_empty() && asked.views.is_empty());
}

#[tokio::test]
async fn an_event_log_that_cannot_be_read_leaves_the_listing_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docker.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let n = stream.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..n]).into_owned();
                let body = match head.split(' ').nth(1).unwrap_or("") {
                    "/containers/json?all=1" => "[]",
                    _ => "{\"Type\":\"container\",\"Action\":\"die\"",
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    let socket = path.to_str().unwrap().to_owned();
    let managers = managers(ManagerSetting::Address(socket.clone()));
    let known = Known {
        until: Some(SystemTime::now()),
        ..Known::default()
    };
    let asked = managers.ask(&NodeState::default(), &known).await;
    let report = &asked.reports[0];
    assert_eq!(report.state(), "listed");
    assert_eq!(asked.views[0].log, None);
    let Some(Err(error)) = &report.log else {
        panic!("{report:?}");
    };
    assert!(error.contains("the event log"), "{error}");
    assert!(
        report
            .to_string()
            .ends_with(&format!("; its event log could not be read: {error}")),
        "{report}"
    );
}
