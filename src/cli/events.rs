//! `eventgate events`: a live view of the exchange, in `ctr events` shape or JSON lines.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::{CliError, DEFAULT_ADDRESS};
use crate::proto::containerd::services::events::v1::SubscribeRequest;
use crate::render;
use crate::units::parse_duration;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// `<time> <namespace> <topic> <json>`, exactly as `ctr events` prints it.
    Ctr,
    /// One JSON object per line (timestamp, namespace, topic, type_url, event).
    Json,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Filters use containerd's language; several are OR'd, the selectors \
    inside one are AND'd:\n  \
    eventgate events 'topic==\"/tasks/exit\"' 'namespace==k8s.io,topic~=|^/containers/|'\n  \
    eventgate events 'topic==\"/tasks/*\"'          # eventgate extension: * is one path component"
)]
pub struct EventsArgs {
    /// The Events endpoint: a unix socket path, unix://PATH, or HOST:PORT.
    #[arg(long, short = 'a', env = "EVENTGATE_ADDRESS", default_value = DEFAULT_ADDRESS)]
    pub address: String,
    /// Output shape.
    #[arg(long, value_enum, default_value_t = Format::Ctr)]
    pub format: Format,
    /// Give up connecting after this long.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    #[command(flatten)]
    pub tls: crate::client::TlsArgs,
    /// containerd filters, e.g. 'topic=="/tasks/exit"' or 'namespace==default'.
    pub filters: Vec<String>,
}

pub(super) async fn run(args: EventsArgs) -> Result<ExitCode, CliError> {
    let mut client =
        crate::client::connect_tls(&args.address, args.connect_timeout, &args.tls.client_tls())
            .await?;
    let mut stream = client
        .subscribe(SubscribeRequest {
            filters: args.filters,
        })
        .await
        .map_err(|status| CliError::rpc("subscribe failed", status))?
        .into_inner();
    let stdout = std::io::stdout();
    loop {
        let envelope = match stream.message().await {
            Ok(Some(envelope)) => envelope,
            Ok(None) => return Ok(ExitCode::SUCCESS),
            Err(status) => return Err(CliError::rpc("subscription ended", status)),
        };
        let line = match args.format {
            Format::Ctr => match render::ctr_line(&envelope) {
                Some(line) => line,
                None => {
                    tracing::warn!(
                        topic = envelope.topic,
                        type_url = envelope.event.as_ref().map(|a| a.type_url.as_str()),
                        "cannot decode the event; skipped (as ctr does); use --format json to see it"
                    );
                    continue;
                }
            },
            Format::Json => render::envelope_json(&envelope),
        };
        let mut out = stdout.lock();
        // A closed pipe (`| head`) is the reader saying it has enough.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(ExitCode::SUCCESS);
        }
    }
}
