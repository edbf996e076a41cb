//! Dead letters end to end: an in-process gateway whose forwarder refuses some events
//! permanently, and the real `eventgate dlq` binary against its data directory while
//! it runs.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventgate::config::Config;
use eventgate::forward::{
    Batch, BuildError, Context, ForwardError, Forwarder, Kind, Kinds, Options, parse_options,
};
use eventgate::gateway::Gateway;
use eventgate::proto::Registry;
use eventgate::proto::containerd::services::events::v1::PublishRequest;
use futures::future::BoxFuture;
use serde::Deserialize;
use support::{DEADLINE, eventgate_bin};
use tonic::Request;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PickyOptions {
    /// Events whose payload contains this container id are refused.
    refuse: String,
}

/// Refuses, permanently, batches holding an event of the configured container while
/// `strict` is on; keeps "seq container" of what it delivered.
#[derive(Clone, Default)]
struct PickyKind {
    strict: Arc<AtomicBool>,
    delivered: Arc<Mutex<Vec<String>>>,
}

struct Picky {
    refuse: String,
    kind: PickyKind,
}

impl Kind for PickyKind {
    fn check(&self, options: &Options) -> Result<(), BuildError> {
        parse_options::<PickyOptions>(options).map(|_| ())
    }

    fn build<'a>(
        &'a self,
        _context: &'a Context,
        options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        Box::pin(async move {
            let options: PickyOptions = parse_options(options)?;
            Ok(Arc::new(Picky {
                refuse: options.refuse,
                kind: self.clone(),
            }) as Arc<dyn Forwarder>)
        })
    }
}

fn container(event: &eventgate::event::Event) -> String {
    event
        .decoded()
        .and_then(|m| m.get_field_by_name("container_id"))
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

impl Forwarder for Picky {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            let strict = self.kind.strict.load(Ordering::SeqCst);
            if strict && batch.events().iter().any(|e| container(e) == self.refuse) {
                return Err(ForwardError::permanent(format!(
                    "container {} is refused",
                    self.refuse
                )));
            }
            let mut delivered = self
                .kind
                .delivered
                .lock()
                .map_err(|_| ForwardError::permanent("poisoned"))?;
            for event in batch.events() {
                delivered.push(format!("{} {}", event.seq, container(event)));
            }
            Ok(())
        })
    }
}

fn exit(container: &str) -> Request<PublishRequest> {
    let any = Registry::global()
        .encode_json(
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"{container}","exit_status":3}}"#),
        )
        .unwrap();
    let mut request = Request::new(PublishRequest {
        topic: "/tasks/exit".into(),
        event: Some(any),
    });
    request
        .metadata_mut()
        .insert("containerd-namespace", "default".parse().unwrap());
    request
}

async fn dlq(data_dir: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(eventgate_bin())
        .arg("dlq")
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("EVENTGATE_CONFIG")
        .output()
        .await
        .unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn json_lines(output: &Output) -> Vec<serde_json::Value> {
    stdout(output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_events_are_listed_retried_and_purged_while_the_gateway_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = Config::parse(
        &format!(
            r#"
            data_dir = "{}"
            [admin]
            listen = "127.0.0.1:0"
            [dead_letter]
            poll_interval = "50ms"
            [[forwarder]]
            name = "picky"
            kind = "picky"
            refuse = "bad"
            batch = {{ events = 1, linger = "0s" }}
            "#,
            data.display()
        ),
        "test",
    )
    .unwrap();
    let kind = PickyKind::default();
    kind.strict.store(true, Ordering::SeqCst);
    let kinds = Kinds::default().register("picky", kind.clone());
    let gateway = Gateway::start_with(&config, &kinds).await.unwrap();
    let mut client = eventgate::client::connect(
        &gateway.socket_path().display().to_string(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    for container in ["ok1", "bad", "ok2", "bad"] {
        client.publish(exit(container)).await.unwrap();
    }
    gateway
        .pipeline()
        .forwarder("picky")
        .unwrap()
        .wait_acked(4)
        .await;
    assert_eq!(*kind.delivered.lock().unwrap(), ["1 ok1", "3 ok2"]);

    // list: both refusals, with the decoded event and why they died.
    let listed = json_lines(&dlq(&data, &["list", "--format", "json"]).await);
    assert_eq!(listed.len(), 2);
    for (entry, seq) in listed.iter().zip([2, 4]) {
        assert_eq!(entry["seq"], seq);
        assert_eq!(entry["topic"], "/tasks/exit");
        assert_eq!(entry["namespace"], "default");
        assert_eq!(entry["event"]["container_id"], "bad");
        assert_eq!(entry["dead_letter"]["forwarder"], "picky");
        assert_eq!(entry["dead_letter"]["reason"], "permanent");
        assert_eq!(entry["dead_letter"]["attempts"], 1);
        assert_eq!(entry["dead_letter"]["error"], "container bad is refused");
        assert_eq!(entry["dead_letter"]["state"], "dead");
    }
    let table = stdout(&dlq(&data, &["list"]).await);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ID  FORWARDER  SEQ"), "{table}");
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[1].contains("picky")
            && lines[1].contains("/tasks/exit")
            && lines[1].contains("permanent"),
        "{table}"
    );

    // A forwarder name with no entries is refused, naming the ones present.
    let typo = dlq(&data, &["retry", "--forwarder", "pciky"]).await;
    assert!(!typo.status.success());
    let message = String::from_utf8_lossy(&typo.stderr);
    assert!(
        message.contains("\"pciky\"") && message.contains("picky (2)"),
        "{message}"
    );

    // retry while still refused: they die again, with the attempts added.
    let out = stdout(&dlq(&data, &["retry", "--forwarder", "picky"]).await);
    assert_eq!(out.trim(), "requested redelivery of 2 dead letter(s)");
    let again = wait_list(&data, "the entries to die again", |entries| {
        entries.len() == 2
            && entries
                .iter()
                .all(|e| e["dead_letter"]["state"] == "dead" && e["dead_letter"]["attempts"] == 2)
    })
    .await;
    let first_id = again[0]["dead_letter"]["id"].as_i64().unwrap();

    // Switch off the refusal and retry only the first by id: it is delivered and gone.
    kind.strict.store(false, Ordering::SeqCst);
    let id = first_id.to_string();
    let out = stdout(&dlq(&data, &["retry", "--id", &id]).await);
    assert_eq!(out.trim(), "requested redelivery of 1 dead letter(s)");
    let left = wait_list(&data, "the first entry to be redelivered", |e| e.len() == 1).await;
    assert_eq!(left[0]["seq"], 4);
    assert_eq!(*kind.delivered.lock().unwrap(), ["1 ok1", "3 ok2", "2 bad"]);
    let out = stdout(&dlq(&data, &["retry"]).await);
    assert_eq!(out.trim(), "requested redelivery of 1 dead letter(s)");
    wait_list(&data, "the store to be empty", |e| e.is_empty()).await;
    assert_eq!(
        *kind.delivered.lock().unwrap(),
        ["1 ok1", "3 ok2", "2 bad", "4 bad"]
    );

    // Another refusal; purge refuses to remove everything without --all, and removes
    // a forwarder's entries when named.
    kind.strict.store(true, Ordering::SeqCst);
    client.publish(exit("bad")).await.unwrap();
    gateway
        .pipeline()
        .forwarder("picky")
        .unwrap()
        .wait_acked(5)
        .await;
    assert_eq!(
        json_lines(&dlq(&data, &["list", "--format", "json"]).await).len(),
        1
    );
    let refused = dlq(&data, &["purge"]).await;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--all"));
    let out = stdout(&dlq(&data, &["purge", "--forwarder", "picky"]).await);
    assert_eq!(out.trim(), "removed 1 dead letter(s)");
    let empty = stdout(&dlq(&data, &["list"]).await);
    assert!(empty.starts_with("no dead letters in"), "{empty}");

    let reports = gateway.stop().await;
    assert_eq!(reports[0].failed, 3);
    // The purged event was never delivered: purge means giving up for good.
    assert_eq!(kind.delivered.lock().unwrap().len(), 4);
}

async fn wait_list(
    data: &Path,
    what: &str,
    check: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let end = Instant::now() + DEADLINE;
    loop {
        let entries = json_lines(&dlq(data, &["list", "--format", "json"]).await);
        if check(&entries) {
            return entries;
        }
        assert!(
            Instant::now() < end,
            "timed out waiting for {what}: {entries:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_missing_store_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let output = dlq(dir.path(), &["list"]).await;
    assert!(!output.status.success());
    let message = String::from_utf8_lossy(&output.stderr);
    let expected = format!(
        "no dead letters: {} does not exist",
        dir.path().join("deadletters.db").display()
    );
    assert!(message.contains(&expected), "{message}");
    assert!(!dir.path().join("deadletters.db").exists());
}
