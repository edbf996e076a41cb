//! `eventgate publish`: one event, given as JSON or as `containerd publish` reads it.

use std::io::{IsTerminal, Read};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use prost::Message;
use prost_types::Any;
use tonic::metadata::MetadataValue;

use super::{CliError, DEFAULT_ADDRESS};
use crate::exchange::NAMESPACE_HEADER;
use crate::proto::Registry;
use crate::proto::containerd::services::events::v1::PublishRequest;
use crate::units::parse_duration;

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    eventgate publish -n default -t /tasks/exit --event-type containerd.events.TaskExit \\\n    \
    --json '{\"container_id\":\"c1\",\"exit_status\":3}'\n  \
    eventgate publish -n default -t /custom/thing < any.bin   # binary google.protobuf.Any, as `containerd publish` reads")]
pub struct PublishArgs {
    /// The Events endpoint: a unix socket path, unix://PATH, or HOST:PORT.
    #[arg(long, short = 'a', env = "EVENTGATE_ADDRESS", default_value = DEFAULT_ADDRESS)]
    pub address: String,
    /// Namespace to publish in (sent as the containerd-namespace header).
    #[arg(long, short = 'n', env = "CONTAINERD_NAMESPACE")]
    pub namespace: String,
    /// Topic, e.g. /tasks/exit.
    #[arg(long, short = 't')]
    pub topic: String,
    /// Event type to encode --json as, e.g. containerd.events.TaskExit.
    #[arg(long, value_name = "TYPE", requires = "json")]
    pub event_type: Option<String>,
    /// The event as JSON with proto field names, e.g. '{"container_id":"c1"}'.
    /// Without --event-type/--json the event is read from stdin as a binary
    /// google.protobuf.Any.
    #[arg(long, value_name = "JSON", requires = "event_type")]
    pub json: Option<String>,
    /// Give up connecting after this long.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    #[command(flatten)]
    pub tls: crate::client::TlsArgs,
}

pub(super) async fn run(args: PublishArgs) -> Result<ExitCode, CliError> {
    let event = match (&args.event_type, &args.json) {
        (Some(event_type), Some(json)) => Registry::global().encode_json(event_type, json)?,
        _ => read_stdin_any()?,
    };
    let header = MetadataValue::try_from(args.namespace.as_str()).map_err(|_| {
        CliError::Usage(format!(
            "--namespace {:?} cannot be sent as a header: use letters, digits, '.', '_' and '-'",
            args.namespace
        ))
    })?;
    let mut client =
        crate::client::connect_tls(&args.address, args.connect_timeout, &args.tls.client_tls())
            .await?;
    let mut request = tonic::Request::new(PublishRequest {
        topic: args.topic,
        event: Some(event),
    });
    request.metadata_mut().insert(NAMESPACE_HEADER, header);
    client
        .publish(request)
        .await
        .map_err(|status| CliError::rpc("publish failed", status))?;
    Ok(ExitCode::SUCCESS)
}

fn read_stdin_any() -> Result<Any, CliError> {
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(CliError::Usage(
            "no event given: pass --event-type TYPE --json '{...}', or pipe a binary \
             google.protobuf.Any on stdin"
                .into(),
        ));
    }
    let mut bytes = Vec::new();
    stdin
        .read_to_end(&mut bytes)
        .map_err(|source| CliError::Io {
            context: "cannot read the event from stdin".into(),
            source,
        })?;
    Any::decode(bytes.as_slice()).map_err(|e| {
        CliError::Usage(format!(
            "stdin is not a binary-encoded google.protobuf.Any ({e}); \
             to publish JSON use --event-type and --json"
        ))
    })
}
