use std::path::Path;
use std::time::Instant;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixListener;

use super::*;

fn at(seconds: u64, nanos: u32) -> SystemTime {
    UNIX_EPOCH + Duration::new(seconds, nanos)
}

#[test]
fn times_are_rfc3339_and_go_zero_time_is_none() {
    assert_eq!(
        time("2026-11-27T02:42:45.988276241Z"),
        Some(at(1_795_747_365, 988_276_241))
    );
    assert_eq!(
        time("2026-11-27T03:42:45.5+01:00"),
        Some(at(1_795_747_365, 500_000_000))
    );
    assert_eq!(time("0001-01-01T00:00:00Z"), None);
    assert_eq!(time("1969-12-31T23:59:59Z"), None);
    assert_eq!(time("1970-01-01T00:00:00Z"), None);
    assert_eq!(time(""), None);
    assert_eq!(time("yesterday"), None);
    assert_eq!(seconds(1_795_747_372), Some(at(1_795_747_372, 0)));
    assert_eq!(seconds(0), None);
    assert_eq!(seconds(-1), None);
}

#[test]
fn names_are_as_docker_ps_shows_them() {
    let names = |list: &[&str]| name_of(&list.iter().map(|n| n.to_string()).collect::<Vec<_>>());
    assert_eq!(names(&["/shop-web-1"]), "shop-web-1");
    // A link gives the target an alias under the linking container's name.
    assert_eq!(names(&["/web/db", "/db"]), "db");
    assert_eq!(names(&["/web/db"]), "web/db");
    assert_eq!(names(&[]), "");
    assert_eq!(names(&["bare"]), "bare");
}

#[test]
fn states_map_to_a_managers_status() {
    assert_eq!(status_of("created"), ManagedStatus::Created);
    assert_eq!(status_of("running"), ManagedStatus::Running);
    assert_eq!(status_of("paused"), ManagedStatus::Running);
    assert_eq!(status_of("restarting"), ManagedStatus::Exited);
    assert_eq!(status_of("exited"), ManagedStatus::Exited);
    assert_eq!(status_of("dead"), ManagedStatus::Exited);
    assert_eq!(status_of("removing"), ManagedStatus::Unknown);
    assert_eq!(status_of("stopping"), ManagedStatus::Unknown);
    assert_eq!(status_of(""), ManagedStatus::Unknown);
}

/// dockerd 20.10's answers, cut to what matters and with fields it does not have in
/// other versions left in, as it sends them.
const LIST: &str = r#"[
  {"Id":"a93c3e858a1a","Names":["/shop-web-1"],"Image":"eventgate.test/busybox:1",
   "ImageID":"sha256:d2ed","Command":"/bin/busybox sh","Created":1795747359,"Ports":[],
   "Labels":{"com.docker.compose.project":"shop","com.docker.compose.service":"web"},
   "State":"exited","Status":"Exited (3) 1 second ago","HostConfig":{"NetworkMode":"none"},
   "NetworkSettings":{"Networks":{}},"Mounts":[]},
  {"Id":"bac944c7a5b7","Names":["/c1"],"Image":"sha256:d2ed","Created":1795747372,
   "Labels":null,"State":"created","Status":"Created","SomethingNew":{"x":[1,2]}},
  {"Id":"cafe","Names":null,"State":"future-state"}
]"#;

#[test]
fn a_list_reads_names_images_labels_states_and_times() {
    let listed = parse_list(LIST.as_bytes()).unwrap();
    assert_eq!(listed.len(), 3);
    let web = &listed[0];
    assert_eq!(web.id, "a93c3e858a1a");
    assert_eq!(web.name, "shop-web-1");
    assert_eq!(web.image, "eventgate.test/busybox:1");
    assert_eq!(web.labels["com.docker.compose.project"], "shop");
    assert_eq!(web.status, ManagedStatus::Exited);
    assert_eq!(web.state, "exited");
    assert_eq!(web.created_at, Some(at(1_795_747_359, 0)));
    let workload = web.workload();
    assert_eq!(workload.container_name.as_deref(), Some("shop-web-1"));
    assert_eq!(workload.image, "eventgate.test/busybox:1");
    assert_eq!(workload.labels["com.docker.compose.service"], "web");
    assert_eq!(workload.kind, None);
    assert_eq!(listed[1].status, ManagedStatus::Created);
    assert!(listed[1].labels.is_empty());
    assert_eq!(listed[2].name, "");
    assert_eq!(listed[2].status, ManagedStatus::Unknown);
    assert_eq!(listed[2].created_at, None);
}

#[test]
fn an_inspect_reads_the_last_run() {
    let oom = r#"{"Id":"0b24","Created":"2026-11-27T02:42:45.9Z","Name":"/oom1",
      "State":{"Status":"exited","Running":false,"OOMKilled":true,"Dead":false,"Pid":0,
        "ExitCode":137,"Error":"","StartedAt":"2026-11-27T02:42:45.988276241Z",
        "FinishedAt":"2026-11-27T02:42:46.001009072Z"},
      "Image":"sha256:d2ed","HostConfig":{"Ulimits":[{"Name":"nofile","Hard":1,"Soft":1}],"Isolation":"odd"},
      "Config":{"Image":"eventgate.test/busybox:1","Labels":{"a":"b"}}}"#;
    let inspected = parse_inspect(oom.as_bytes()).unwrap();
    assert_eq!(inspected.name, "oom1");
    assert_eq!(inspected.image, "eventgate.test/busybox:1");
    assert_eq!(inspected.labels["a"], "b");
    assert_eq!(inspected.status, ManagedStatus::Exited);
    assert_eq!(inspected.created_at, Some(at(1_795_747_365, 900_000_000)));
    assert_eq!(
        inspected.exit,
        Some(ManagedExit {
            started_at: Some(at(1_795_747_365, 988_276_241)),
            finished_at: Some(at(1_795_747_366, 1_009_072)),
            exit_code: 137,
            reason: Some("OOMKilled".into()),
        })
    );
    // Never started (its start failed): no start time; a running one has no exit.
    let never = r#"{"Id":"x","Name":"/x","State":{"Status":"exited","ExitCode":127,
      "StartedAt":"0001-01-01T00:00:00Z","FinishedAt":"2026-11-27T02:42:46Z","OOMKilled":false},
      "Config":{"Image":"i","Labels":null}}"#;
    let never = parse_inspect(never.as_bytes()).unwrap();
    let exit = never.exit.unwrap();
    assert_eq!(exit.started_at, None);
    assert_eq!(exit.exit_code, 127);
    assert_eq!(exit.reason, None);
    let running = r#"{"Id":"r","Name":"/r","State":{"Status":"running","ExitCode":0,
      "StartedAt":"2026-11-27T02:42:46Z","FinishedAt":"0001-01-01T00:00:00Z"}}"#;
    let running = parse_inspect(running.as_bytes()).unwrap();
    assert_eq!(running.status, ManagedStatus::Running);
    assert_eq!(running.exit, None);
    assert_eq!(running.image, "");
}

#[test]
fn garbage_and_oversized_lists_are_errors() {
    for garbage in ["", "{", "{\"Id\":1}", "[{\"Names\":[\"/a\"]}]", "<html>"] {
        assert!(
            matches!(
                parse_list(garbage.as_bytes()),
                Err(DockerError::Garbage { .. })
            ),
            "{garbage:?}"
        );
    }
    assert!(matches!(
        parse_inspect(b"[]"),
        Err(DockerError::Garbage { .. })
    ));
    let many = format!("[{}]", vec![r#"{"Id":"a"}"#; MAX_CONTAINERS + 1].join(","));
    let error = parse_list(many.as_bytes()).unwrap_err();
    assert!(matches!(error, DockerError::TooMany { count } if count == MAX_CONTAINERS + 1));
    assert!(error.to_string().contains("16384"), "{error}");
}

#[test]
fn labels_and_names_are_bounded() {
    let labels: BTreeMap<String, String> = (0..1000)
        .map(|i| (format!("k{i:04}"), "v".repeat(100)))
        .collect();
    let workload = workload(&"n".repeat(5000), "img", &labels);
    assert!(workload.labels.len() <= crate::event::workload::MAX_LABELS);
    assert!(workload.container_name.unwrap().len() <= MAX_NAME);
}

#[test]
fn addresses_are_unix_sockets() {
    let client = DockerClient::new("unix:///run/docker.sock", Duration::from_secs(1)).unwrap();
    assert_eq!(client.socket(), Path::new("/run/docker.sock"));
    let client = DockerClient::new("/var/run/docker.sock", Duration::from_secs(1)).unwrap();
    assert_eq!(client.socket(), Path::new("/var/run/docker.sock"));
    assert!(matches!(
        DockerClient::new("127.0.0.1:2375", Duration::from_secs(1)),
        Err(DockerError::NotUnix { .. })
    ));
}

/// A fake dockerd on a unix socket: answers every connection with `answer` (raw
/// HTTP); `None` never answers.
fn fake(dir: &Path, answer: Option<Vec<u8>>) -> PathBuf {
    let path = dir.join("docker.sock");
    let listener = UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let _ = stream.read(&mut request).await;
                match answer {
                    Some(answer) => {
                        let _ = stream.write_all(&answer).await;
                        let _ = stream.shutdown().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            });
        }
    });
    path
}

fn http(status: &str, body: &str) -> Option<Vec<u8>> {
    Some(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

fn client(path: &Path) -> DockerClient {
    DockerClient::new(path.to_str().unwrap(), Duration::from_millis(300)).unwrap()
}

#[tokio::test]
async fn a_fake_dockerd_is_listed_and_inspected() {
    let dir = tempfile::tempdir().unwrap();
    let path = fake(dir.path(), http("200 OK", LIST));
    let listed = client(&path).list().await.unwrap();
    assert_eq!(listed.len(), 3);
    let dir = tempfile::tempdir().unwrap();
    let path = fake(
        dir.path(),
        http("404 Not Found", r#"{"message":"No such container: x"}"#),
    );
    assert_eq!(client(&path).inspect("x").await.unwrap(), None);
    // An id that could not be dockerd's is not asked about.
    assert_eq!(client(&path).inspect("../x").await.unwrap(), None);
}

#[tokio::test]
async fn absent_slow_refusing_and_garbage_dockerds_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing.sock");
    let error = client(&missing).list().await.unwrap_err();
    assert!(matches!(error, DockerError::NoSocket { .. }), "{error:?}");
    assert!(
        crate::errors::chain(&error).contains("does not exist"),
        "{error}"
    );

    // A socket file nobody listens on: refused.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let error = client(&stale).list().await.unwrap_err();
    assert!(matches!(error, DockerError::Connect { .. }), "{error:?}");

    let slow_dir = tempfile::tempdir().unwrap();
    let slow = fake(slow_dir.path(), None);
    let started = Instant::now();
    let error = client(&slow).list().await.unwrap_err();
    assert!(matches!(error, DockerError::Timeout { .. }), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(5));

    let refusing_dir = tempfile::tempdir().unwrap();
    let refusing = fake(
        refusing_dir.path(),
        http("500 Internal Server Error", r#"{"message":"boom"}"#),
    );
    let error = client(&refusing).list().await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "dockerd refused the container list: HTTP 500: boom"
    );

    let garbage_dir = tempfile::tempdir().unwrap();
    let garbage = fake(garbage_dir.path(), http("200 OK", "[{\"Id\":"));
    let error = client(&garbage).list().await.unwrap_err();
    assert!(matches!(error, DockerError::Garbage { .. }), "{error:?}");
    let error = client(&garbage).inspect("abc").await.unwrap_err();
    assert!(matches!(error, DockerError::Garbage { .. }), "{error:?}");

    let not_http_dir = tempfile::tempdir().unwrap();
    let not_http = fake(not_http_dir.path(), Some(b"SSH-2.0-OpenSSH\r\n".to_vec()));
    let error = client(&not_http).list().await.unwrap_err();
    assert!(matches!(error, DockerError::Http { .. }), "{error:?}");
}

#[tokio::test]
async fn an_answer_over_the_limit_is_refused_without_reading_it_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docker.sock");
    let listener = UnixListener::bind(&path).unwrap();
    // Chunked, as dockerd sends a large list, and endless.
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = stream.read(&mut request).await;
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        stream.write_all(head.as_bytes()).await.unwrap();
        let chunk = format!("{:x}\r\n{}\r\n", 1 << 20, "[".repeat(1 << 20));
        while stream.write_all(chunk.as_bytes()).await.is_ok() {}
    });
    let client = DockerClient::new(path.to_str().unwrap(), Duration::from_secs(20)).unwrap();
    let error = client.list().await.unwrap_err();
    assert!(matches!(error, DockerError::TooLarge { .. }), "{error:?}");
    assert!(error.to_string().contains("16777216 bytes"), "{error}");
}

/// dockerd 20.10's event log for a container its restart policy ran twice (one run
/// killed by the OOM killer), after an image load, as `/events?since=&until=` sends
/// it: one JSON message per line, legacy fields included.
const EVENT_LOG: &str = r#"{"status":"load","id":"busybox","Type":"image","Action":"load","Actor":{"ID":"busybox","Attributes":{"name":"busybox"}},"scope":"local","time":1795747300,"timeNano":1795747300111111111}
{"status":"create","id":"a93c","from":"busybox","Type":"container","Action":"create","Actor":{"ID":"a93c","Attributes":{"image":"busybox","name":"flaky"}},"scope":"local","time":1795747301,"timeNano":1795747301000000000}
{"status":"start","id":"a93c","from":"busybox","Type":"container","Action":"start","Actor":{"ID":"a93c","Attributes":{"image":"busybox","name":"flaky"}},"scope":"local","time":1795747301,"timeNano":1795747301200000000}
{"status":"oom","id":"a93c","from":"busybox","Type":"container","Action":"oom","Actor":{"ID":"a93c","Attributes":{"image":"busybox","name":"flaky"}},"scope":"local","time":1795747302,"timeNano":1795747302000000000}
{"status":"die","id":"a93c","from":"busybox","Type":"container","Action":"die","Actor":{"ID":"a93c","Attributes":{"execDuration":"0","exitCode":"137","image":"busybox","name":"flaky"}},"scope":"local","time":1795747302,"timeNano":1795747302100000000}
{"Type":"network","Action":"disconnect","Actor":{"ID":"b1","Attributes":{"container":"a93c","name":"none","type":"null"}},"scope":"local","time":1795747302,"timeNano":1795747302200000000}
{"status":"start","id":"a93c","from":"busybox","Type":"container","Action":"start","Actor":{"ID":"a93c","Attributes":{"image":"busybox","name":"flaky"}},"scope":"local","time":1795747302,"timeNano":1795747302400000000}
{"status":"exec_die","id":"a93c","Type":"container","Action":"exec_die","Actor":{"ID":"a93c","Attributes":{"execID":"e1","exitCode":"0"}},"scope":"local","time":1795747302,"timeNano":1795747302500000000}
{"status":"die","id":"a93c","from":"busybox","Type":"container","Action":"die","Actor":{"ID":"a93c","Attributes":{"execDuration":"1","exitCode":"3","image":"busybox","name":"flaky"}},"scope":"local","time":1795747303,"timeNano":1795747303000000000}
"#;

#[test]
fn the_event_log_reads_each_containers_starts_kills_and_exits() {
    use crate::reconcile::run::Action;
    let log = parse_events(EVENT_LOG.as_bytes()).unwrap();
    assert_eq!(log.events, 9);
    assert_eq!(log.oldest, Some(at(1_795_747_300, 111_111_111)));
    let runs: Vec<(SystemTime, Action)> = log.containers["a93c"]
        .iter()
        .map(|l| (l.at, l.action))
        .collect();
    assert_eq!(
        runs,
        [
            (at(1_795_747_301, 200_000_000), Action::Start),
            (at(1_795_747_302, 0), Action::Oom),
            (at(1_795_747_302, 100_000_000), Action::Die(137)),
            (at(1_795_747_302, 400_000_000), Action::Start),
            (at(1_795_747_303, 0), Action::Die(3)),
        ]
    );
    assert_eq!(log.containers.len(), 1);
    // An empty log: nothing, and no oldest event.
    assert_eq!(parse_events(b"").unwrap(), Default::default());
}

#[test]
fn a_garbled_event_log_is_an_error_saying_so() {
    let die =
        r#"{"Type":"container","Action":"die","Actor":{"ID":"a","Attributes":{}},"timeNano":5}"#;
    let untimed = r#"{"Type":"image","Action":"pull","Actor":{"ID":"a"}}"#;
    let anonymous =
        r#"{"Type":"container","Action":"start","Actor":{"Attributes":{}},"timeNano":5}"#;
    for (body, says) in [
        (die, "without an exitCode"),
        (untimed, "without timeNano"),
        (anonymous, "without an ID"),
        ("{\"Type\":", "EOF"),
        ("[1,2]", "invalid type"),
    ] {
        let error = parse_events(body.as_bytes()).unwrap_err();
        let text = crate::errors::chain(&error);
        assert!(
            text.contains("the event log") && text.contains(says),
            "{body}: {text}"
        );
    }
    let flood = format!("{}\n", r#"{"Type":"image","Action":"tag","timeNano":7}"#).repeat(1025);
    assert!(matches!(
        parse_events(flood.as_bytes()),
        Err(DockerError::TooManyEvents)
    ));
}
