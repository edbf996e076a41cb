//! `eventgate replay`: stored events sent again, to a configured forwarder or to
//! another exchange; interruptible and resumable.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args};

use super::CliError;
use super::query::{StoreLocation, time_bound};
use crate::forward::Kinds;
use crate::replay::{self, Bound, Options, ProgressMode, Selection, Stop, TargetSpec};
use crate::units::parse_duration;

#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("target").required(true).args(["to_forwarder", "to_address"])),
    after_help = "Selects exactly what `eventgate query` prints with the same --since, --until \
    and filters, up to the last event stored when the replay first started. Progress is kept \
    in <store's directory>/replay/: an interrupted or failed replay resumes when the same \
    command runs again, a finished one refuses to run again without --restart.\n\nExamples:\n  \
    eventgate replay --data-dir /var/lib/eventgate --since 2024-05-01T10:00:00Z \\\n    \
    --until 2024-05-01T12:00:00Z --to-forwarder kafka --config /etc/eventgate.toml\n  \
    eventgate replay --since 1h 'namespace==k8s.io' --to-address /run/eventgate/other.sock --rate 500"
)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub location: StoreLocation,
    /// Events at or after this time: RFC 3339 or a duration back from now (15m, 2h,
    /// 7d). A resumed replay keeps the time the first run resolved.
    #[arg(long, value_name = "TIME", value_parser = bound)]
    pub since: Option<Bound>,
    /// Events before this time (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = bound)]
    pub until: Option<Bound>,
    /// Send to this forwarder of --config (built as `serve` builds it; its batch
    /// size, retry policy and route filters apply).
    #[arg(long, value_name = "NAME", requires = "config")]
    pub to_forwarder: Option<String>,
    /// The configuration file that defines --to-forwarder.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        requires = "to_forwarder",
        conflicts_with = "to_address"
    )]
    pub config: Option<PathBuf>,
    /// Send with Forward to the Events endpoint at this address (another eventgate
    /// or containerd): a socket path, unix://PATH or HOST:PORT. eventgate's own
    /// events (namespace eventgate, topics under /eventgate/) are skipped: Forward
    /// refuses them.
    #[arg(long, value_name = "SOCK")]
    pub to_address: Option<String>,
    /// With --to-address: Forward calls in flight at once. Above 1, only events about
    /// different objects (containers, images, snapshots, ...) are in flight together:
    /// each object's events arrive in their order, events of different objects may
    /// not. Events of no known object go alone. Default: 1, the store's order
    /// exactly.
    #[arg(long, value_name = "N", conflicts_with = "to_forwarder",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub in_flight: Option<u16>,
    /// At most this many events per second.
    #[arg(long, value_name = "EVENTS_PER_SEC", value_parser = clap::value_parser!(u32).range(1..))]
    pub rate: Option<u32>,
    /// Events per batch (and per progress save); default: the forwarder's
    /// configured batch size, 100 with --to-address (1000 with --in-flight above 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: Option<u32>,
    /// Start from the first event even if this replay ran (or completed) before.
    #[arg(long)]
    pub restart: bool,
    /// A progress bar (auto: when stderr is a terminal; a log line every 5 s
    /// otherwise), or none.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
    /// With --to-address: give up connecting after this long.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// With --to-address HOST:PORT: TLS to the exchange's TCP listener.
    #[command(flatten)]
    pub tls: crate::client::TlsArgs,
    /// containerd filters, e.g. 'topic=="/tasks/exit"' or 'namespace==default'.
    pub filters: Vec<String>,
}

fn bound(text: &str) -> Result<Bound, String> {
    Ok(Bound {
        text: text.trim().to_owned(),
        time: time_bound(text)?,
    })
}

pub(super) async fn run(args: ReplayArgs) -> Result<ExitCode, CliError> {
    // Checked here too, for the filter's position in the message.
    super::query::parse_filters(&args.filters)?;
    let target = match (args.to_forwarder, args.config, args.to_address) {
        (Some(name), Some(config), None) => TargetSpec::Forwarder { name, config },
        (None, None, Some(address)) => TargetSpec::Address {
            address,
            timeout: args.connect_timeout,
            tls: args.tls.client_tls(),
            in_flight: usize::from(args.in_flight.unwrap_or(1)),
        },
        // clap's groups make anything else a usage error before this runs.
        _ => {
            return Err(CliError::Usage(
                "give either --to-forwarder NAME --config FILE or --to-address SOCK".into(),
            ));
        }
    };
    let selection = Selection {
        store: args.location.path(),
        filters: args.filters,
        since: args.since,
        until: args.until,
    };
    let options = Options {
        batch: args.batch.map(|n| n as usize),
        rate: args.rate,
        restart: args.restart,
        progress: args.progress,
    };
    let stop = Stop::default();
    // Installed before any work, so an early interrupt is handled like a late one.
    let signals = match Signals::install() {
        Ok(signals) => Some(tokio::spawn(signals.watch(stop.clone()))),
        Err(error) => {
            tracing::warn!(%error, "cannot install the SIGINT/SIGTERM handlers; an interrupt kills the replay, which then resumes from its last saved batch");
            None
        }
    };
    let outcome = replay::run(&Kinds::default(), selection, target, options, stop).await;
    if let Some(signals) = signals {
        signals.abort();
    }
    let summary = outcome?;
    println!("{summary}");
    Ok(ExitCode::SUCCESS)
}

struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The first SIGINT or SIGTERM stops the replay after the batch in flight; the
    /// second abandons that batch.
    async fn watch(mut self, stop: Stop) {
        for token in [&stop.interrupt, &stop.abandon] {
            tokio::select! {
                _ = self.int.recv() => {}
                _ = self.term.recv() => {}
            }
            token.cancel();
        }
    }
}
