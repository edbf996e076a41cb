//! A forwarder kind of your own, plugged in without touching the pipeline: this one
//! prints one line per event to stdout. Run it, then publish to the socket:
//!
//! ```text
//! cargo run --example custom_forwarder -- /tmp/eg
//! eventgate publish --address /tmp/eg/eventgate.sock --namespace default \
//!     --topic /tasks/exit --event-type containerd.events.TaskExit --json '{"container_id":"c1"}'
//! ```

use std::sync::Arc;

use eventgate::config::{Config, ForwarderSpec};
use eventgate::forward::{
    Batch, BuildError, Context, ForwardError, Forwarder, Kind, Kinds, Options, parse_options,
};
use eventgate::gateway::Gateway;
use futures::future::BoxFuture;
use serde::Deserialize;

/// The kind's own keys, next to the pipeline's in its `[[forwarder]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StdoutOptions {
    #[serde(default)]
    prefix: String,
}

struct StdoutKind;

impl Kind for StdoutKind {
    fn check(&self, options: &Options) -> Result<(), BuildError> {
        parse_options::<StdoutOptions>(options).map(|_| ())
    }

    fn build<'a>(
        &'a self,
        _context: &'a Context,
        options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        Box::pin(async move {
            let options: StdoutOptions = parse_options(options)?;
            Ok(Arc::new(Stdout {
                prefix: options.prefix,
            }) as Arc<dyn Forwarder>)
        })
    }
}

struct Stdout {
    prefix: String,
}

impl Forwarder for Stdout {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            for event in batch.events() {
                println!(
                    "{}{} {} {} {}",
                    self.prefix,
                    event.seq,
                    event.namespace(),
                    event.topic(),
                    event.type_url()
                );
            }
            Ok(())
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let data_dir = std::env::args().nth(1).unwrap_or_else(|| "./data".into());
    let mut options = Options::new();
    options.insert("prefix".into(), "event ".into());
    let config = Config {
        data_dir: data_dir.into(),
        forwarders: vec![ForwarderSpec::new("stdout", "stdout", options)],
        ..Config::default()
    };
    let kinds = Kinds::default().register("stdout", StdoutKind);
    let gateway = Gateway::start_with(&config, &kinds).await?;
    eprintln!("serving on {}", gateway.socket_path().display());
    gateway
        .run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
