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
    /// Print stored events from this time on (`10m`, `2h` back from now, or RFC 3339),
    /// then follow live ones. Uses eventgate's resumable Subscribe.
    #[arg(long, conflicts_with = "after")]
    pub since: Option<String>,
    /// Print every event after this seq (the last one seen; `--format json` prints
    /// `seq`), then follow live ones: nothing missed, nothing twice.
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,
    /// Stop at this time (`10m` back from now, or RFC 3339, possibly in the future):
    /// stored events after it are not printed, and the command exits once it passes.
    #[arg(long)]
    pub until: Option<String>,
    /// containerd filters, e.g. 'topic=="/tasks/exit"' or 'namespace==default'.
    pub filters: Vec<String>,
}

pub(super) async fn run(args: EventsArgs) -> Result<ExitCode, CliError> {
    if args.since.is_some() || args.after.is_some() || args.until.is_some() {
        return resume(args).await;
    }
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

/// `--since`, `--after`, `--until`: eventgate's resumable Subscribe, whose records
/// carry the seq and what eventgate keeps with each event.
async fn resume(args: EventsArgs) -> Result<ExitCode, CliError> {
    use crate::proto::eventgate::services::events::v1::events_client::EventsClient;
    use crate::proto::eventgate::services::events::v1::{self as wire, subscribe_request};

    let now = std::time::SystemTime::now();
    let time = |flag: &str, text: &str| {
        crate::query::time::parse_bound(text, now)
            .map(prost_types::Timestamp::from)
            .map_err(|problem| CliError::Usage(format!("--{flag}: {problem}")))
    };
    let start = match (&args.since, args.after) {
        (Some(since), _) => Some(subscribe_request::Start::Since(time("since", since)?)),
        (None, Some(after)) => Some(subscribe_request::Start::AfterSeq(after)),
        (None, None) => None,
    };
    let until = args
        .until
        .as_deref()
        .map(|t| time("until", t))
        .transpose()?;
    let channel = crate::client::connect_channel_tls(
        &args.address,
        args.connect_timeout,
        &args.tls.client_tls(),
    )
    .await?;
    let mut stream = EventsClient::new(channel)
        .subscribe(wire::SubscribeRequest {
            filters: args.filters,
            start,
            until,
        })
        .await
        .map_err(|status| CliError::rpc("subscribe failed", status))?
        .into_inner();
    let stdout = std::io::stdout();
    loop {
        let record = match stream.message().await {
            Ok(Some(record)) => record,
            Ok(None) => return Ok(ExitCode::SUCCESS),
            Err(status) => return Err(CliError::rpc("subscription ended", status)),
        };
        let event = crate::resume::record::from_record(record).map_err(|problem| {
            CliError::Usage(format!("the gateway sent a bad record: {problem}"))
        })?;
        let line = match args.format {
            Format::Ctr => match render::event_ctr_line(&event) {
                Some(line) => line,
                None => {
                    tracing::warn!(
                        seq = event.seq,
                        topic = event.topic(),
                        "cannot decode the event; skipped (as ctr does); use --format json to see it"
                    );
                    continue;
                }
            },
            Format::Json => render::event_json(&event),
        };
        let mut out = stdout.lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(ExitCode::SUCCESS);
        }
    }
}
