//! A library user's own forwarder kind runs in the real gateway, next to a built-in
//! one, configured from TOML like any other: no change to the pipeline needed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventgate::config::Config;
use eventgate::forward::{
    Batch, BuildError, Context, ForwardError, Forwarder, Kind, Kinds, Options, parse_options,
};
use eventgate::gateway::Gateway;
use eventgate::proto::containerd::services::events::v1::PublishRequest;
use futures::future::BoxFuture;
use serde::Deserialize;
use tonic::Request;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryOptions {
    label: String,
}

/// Keeps "label seq topic" for every delivered event.
#[derive(Clone, Default)]
struct MemoryKind {
    seen: Arc<Mutex<Vec<String>>>,
}

struct Memory {
    label: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Kind for MemoryKind {
    fn check(&self, options: &Options) -> Result<(), BuildError> {
        parse_options::<MemoryOptions>(options).map(|_| ())
    }

    fn build<'a>(
        &'a self,
        _context: &'a Context,
        options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        Box::pin(async move {
            let options: MemoryOptions = parse_options(options)?;
            Ok(Arc::new(Memory {
                label: options.label,
                seen: Arc::clone(&self.seen),
            }) as Arc<dyn Forwarder>)
        })
    }
}

impl Forwarder for Memory {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            let mut seen = self
                .seen
                .lock()
                .map_err(|_| ForwardError::permanent("poisoned"))?;
            for event in batch.events() {
                seen.push(format!("{} {} {}", self.label, event.seq, event.topic()));
            }
            Ok(())
        })
    }
}

fn request(topic: &str) -> Request<PublishRequest> {
    let mut request = Request::new(PublishRequest {
        topic: topic.into(),
        event: None,
    });
    request
        .metadata_mut()
        .insert("containerd-namespace", "default".parse().unwrap());
    request
}

#[tokio::test]
async fn a_custom_kind_is_configured_and_fed_like_the_built_in_ones() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
        data_dir = "{}"
        [admin]
        listen = "127.0.0.1:0"
        [[forwarder]]
        name = "mine"
        kind = "memory"
        label = "m"
        filters = ['topic~="^/tasks/"']
        batch = {{ events = 2, linger = "0s" }}
        "#,
        dir.path().display()
    );
    let config = Config::parse(&toml, "test").unwrap();
    let kind = MemoryKind::default();
    let kinds = Kinds::default().register("memory", kind.clone());

    // An option the kind does not know is named at start.
    let bad = Config::parse(&toml.replace("label = ", "lable = "), "test").unwrap();
    let error = Gateway::start_with(&bad, &kinds)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("lable"), "{error}");

    let gateway = Gateway::start_with(&config, &kinds).await.unwrap();
    let address = gateway.socket_path().display().to_string();
    let mut client = eventgate::client::connect(&address, Duration::from_secs(5))
        .await
        .unwrap();
    for topic in [
        "/tasks/start",
        "/images/create",
        "/tasks/exit",
        "/tasks/delete",
    ] {
        client.publish(request(topic)).await.unwrap();
    }
    let reports = gateway.stop().await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].delivered, 3);
    assert_eq!(
        *kind.seen.lock().unwrap(),
        ["m 1 /tasks/start", "m 3 /tasks/exit", "m 4 /tasks/delete"]
    );
}
