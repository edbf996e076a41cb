//! `eventgate query`: events from the audit store (a SQLite file, or a PostgreSQL
//! database with `--store`), filtered like Subscribe.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Local, Utc};
use clap::{Args, ValueEnum};

use super::store::StoreArgs;
use super::{CliError, timeline};
use crate::config::Config;
use crate::filter::{Filter, quote};
use crate::query::time::parse_bound;
use crate::query::{Query, Reader, RowRange, StoredEvent};
use crate::render;

/// Where the audit store is. Without either: ./data/audit.db, where `serve` keeps it
/// with no configuration.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub struct StoreLocation {
    /// The audit store's database file.
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// The gateway's data directory (the store is <DIR>/audit.db).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl StoreLocation {
    pub fn path(&self) -> PathBuf {
        match (&self.db, &self.data_dir) {
            (Some(db), _) => db.clone(),
            (None, Some(dir)) => dir.join("audit.db"),
            (None, None) => Config::default().data_dir.join("audit.db"),
        }
    }
}

/// `--since`/`--until`, parsed against the clock when the command starts.
pub(super) fn time_bound(text: &str) -> Result<SystemTime, String> {
    parse_bound(text, SystemTime::now())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns: time, namespace, topic, source, event.
    Table,
    /// One JSON object per line, as the file forwarder writes them.
    Json,
    /// `<time> <namespace> <topic> <json>`, as `ctr events` prints them.
    Ctr,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Filters use containerd's language (as `eventgate events`); several \
    are OR'd, the selectors inside one are AND'd. Examples:\n  \
    eventgate query --since 1h 'topic==\"/tasks/exit\"'\n  \
    eventgate query --since 2024-05-01T10:00:00Z --until 2024-05-01T11:00:00Z \
    'namespace==k8s.io,event.container_id==web'\n  \
    eventgate query --follow --format json 'topic==\"/tasks/*\"'\n\n\
    Beyond containerd's fields: origin, origin_clock, reconciled_from (whose record a \
    reconciled event came from: containerd, cri or docker), reason (the manager's, \
    such as OOMKilled), and what an event's container \
    record said when it was captured: pod.name, pod.namespace, pod.uid, \
    container.name, container.kind (sandbox or container), container.image, \
    container.labels.<key> (quote a key with dots):\n  \
    eventgate query 'pod.namespace==shop,container.labels.\"app.kubernetes.io/name\"==web'\n\n\
    One pod's life, oldest first: its sandbox and containers by name, created, \
    started (restarts numbered), exited (non-zero exits, 137 kills and OOM kills \
    marked `!`), out of memory, deleted; then its restarts, OOM events and non-zero \
    exits as `stats --by pod` counts them. Filters, --since/--until, --limit and \
    --follow apply; --format json or ctr prints the pod's events in that format:\n  \
    eventgate query --pod web-7\n  \
    eventgate query --pod web-7 --pod-namespace shop --since 1h\n  \
    eventgate query --pod web-7 --pod-namespace shop --format json\n\n\
    The node an event was captured on (the capturing gateway's `node`) is the field \
    node; --node NAME is short for a filter node==NAME AND'd with the others:\n  \
    eventgate query --node web-1 'topic==\"/tasks/exit\"'\n\n\
    A PostgreSQL store (what a `postgres` forwarder writes), by URL or by the \
    forwarder's name in the gateway's configuration (query, --pod, stats and \
    timeline alike):\n  \
    PGPASSWORD=... eventgate query --store postgres://reader@db:5432/history \
    --store-ca ca.pem --since 1h\n  \
    eventgate query --store central --config /etc/eventgate/eventgate.toml --pod web-7"
)]
pub struct QueryArgs {
    #[command(flatten)]
    pub location: StoreArgs,
    /// Events at or after this time: RFC 3339 (2024-05-01T10:00:00Z) or a duration
    /// back from now (15m, 2h, 7d). Compared with the event's own timestamp.
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub since: Option<SystemTime>,
    /// Events before this time (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = time_bound, conflicts_with = "follow")]
    pub until: Option<SystemTime>,
    /// At most this many events (the oldest first).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Times in UTC instead of local time (table format).
    #[arg(long)]
    pub utc: bool,
    /// After the stored events, keep printing new ones as they are stored, until
    /// interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// One pod's events as a timeline: the pod's Kubernetes name (what the CRI
    /// plugin recorded as io.kubernetes.pod.name). A name used in several namespaces
    /// needs --pod-namespace.
    #[arg(long, value_name = "NAME")]
    pub pod: Option<String>,
    /// The Kubernetes namespace of the --pod.
    #[arg(long, value_name = "NAMESPACE", requires = "pod")]
    pub pod_namespace: Option<String>,
    /// Only events captured on this node: the filter `node==NAME`, AND'd with the
    /// filters given.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// containerd filters, e.g. 'topic=="/tasks/exit"' or 'namespace==default'.
    pub filters: Vec<String>,
}

/// How often `--follow` looks for new rows.
pub(super) const FOLLOW_INTERVAL: Duration = Duration::from_millis(250);

pub(super) fn parse_filters(filters: &[String]) -> Result<Filter, CliError> {
    Filter::parse_all(filters).map_err(|e| {
        let which = match filters.len() {
            1 => String::new(),
            _ => format!(" (filter {})", e.index() + 1),
        };
        CliError::Usage(format!("{e}{which}"))
    })
}

/// The filters, AND'd with `node==NAME` for `--node NAME` (with every alternative:
/// `--node a 'x' 'y'` is `node==a,x` or `node==a,y`).
pub(super) fn parse_filters_on(filters: &[String], node: Option<&str>) -> Result<Filter, CliError> {
    let filter = parse_filters(filters)?;
    let Some(node) = node else {
        return Ok(filter);
    };
    let on_node = Filter::parse(&format!("node=={}", quote(node)))
        .map_err(|e| CliError::Usage(format!("--node {node:?}: {e}")))?;
    Ok(filter.and(&on_node))
}

pub(super) async fn run(args: QueryArgs) -> Result<ExitCode, CliError> {
    let mut query = Query {
        filter: parse_filters_on(&args.filters, args.node.as_deref())?,
        since: args.since,
        until: args.until,
        limit: args.limit,
    };
    let store = args.location.resolve()?;
    tokio::task::spawn_blocking(move || {
        let reader = Reader::open_store(&store, None)?;
        if let Some(name) = &args.pod {
            let pod = timeline::resolve(&reader, name, args.pod_namespace.as_deref(), &query)?;
            query = timeline::narrow(query, &pod);
            if args.format == Format::Table {
                return timeline::print(&reader, &pod, &query, args.utc, args.follow);
            }
        }
        let mut printer = Printer::new(args.format, args.utc);
        let stdout = std::io::stdout();
        // Following starts where this listing ends, so no row is missed or repeated.
        let up_to = reader.last_row_id()?;
        let mut open = true;
        let mut batch = Vec::new();
        reader.each(&query, RowRange { after: 0, up_to }, |event| {
            batch.push(event);
            true
        })?;
        open &= printer.print(&mut stdout.lock(), &batch);
        if args.follow && open {
            reader.follow(&query, up_to, FOLLOW_INTERVAL, &|| false, |event| {
                printer.print(&mut stdout.lock(), std::slice::from_ref(&event))
            })?;
        }
        Ok(ExitCode::SUCCESS)
    })
    .await
    .map_err(|e| CliError::Usage(format!("the query stopped unexpectedly: {e}")))?
}

/// Writes events in one format; a table keeps its column widths across batches so
/// followed rows stay aligned with the ones before.
pub(super) struct Printer {
    format: Format,
    utc: bool,
    widths: [usize; 3],
    header: bool,
}

const HEADERS: [&str; 5] = ["TIME", "NAMESPACE", "TOPIC", "SOURCE", "EVENT"];

impl Printer {
    pub(super) fn new(format: Format, utc: bool) -> Self {
        Self {
            format,
            utc,
            widths: [HEADERS[1].len(), HEADERS[2].len(), HEADERS[3].len()],
            header: false,
        }
    }

    /// False once the output is closed (`| head`): the reader has enough.
    pub(super) fn print(&mut self, out: &mut dyn Write, events: &[StoredEvent]) -> bool {
        let mut lines = Vec::with_capacity(events.len() + 1);
        match self.format {
            Format::Json => lines.extend(
                events
                    .iter()
                    .map(|s| render::stored_event_json(&s.event, s.source.as_deref())),
            ),
            Format::Ctr => lines.extend(events.iter().filter_map(ctr_line)),
            Format::Table => self.table(events, &mut lines),
        }
        lines
            .iter()
            .try_for_each(|line| writeln!(out, "{line}"))
            .and_then(|()| out.flush())
            .is_ok()
    }

    fn table(&mut self, events: &[StoredEvent], lines: &mut Vec<String>) {
        for s in events {
            let cells = [
                s.event.namespace(),
                s.event.topic(),
                s.source.as_deref().unwrap_or("-"),
            ];
            for (width, cell) in self.widths.iter_mut().zip(cells) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let [ns, topic, source] = self.widths;
        let time = time_width(self.utc);
        if !self.header {
            self.header = true;
            let [t, n, p, s, e] = HEADERS;
            lines.push(format!("{t:time$}  {n:ns$}  {p:topic$}  {s:source$}  {e}"));
        }
        for s in events {
            let event = &s.event;
            let when = match &event.envelope.timestamp {
                Some(ts) => format_time(ts, self.utc),
                None => "-".to_owned(),
            };
            let payload = match (event.payload_json(), &event.envelope.event) {
                (Some(json), _) => json.to_owned(),
                (None, Some(any)) => format!("(undecoded {})", any.type_url),
                (None, None) => String::new(),
            };
            lines.push(format!(
                "{when:time$}  {:ns$}  {:topic$}  {:source$}  {payload}",
                event.namespace(),
                event.topic(),
                s.source.as_deref().unwrap_or("-"),
            ));
        }
    }
}

fn ctr_line(stored: &StoredEvent) -> Option<String> {
    let line = render::event_ctr_line(&stored.event);
    if line.is_none() {
        tracing::warn!(
            row_id = stored.row_id,
            topic = stored.event.topic(),
            type_url = stored.event.type_url(),
            "cannot decode the event; skipped (as ctr does); use --format json to see it"
        );
    }
    line
}

const LOCAL_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.3f %:z";
const UTC_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.9fZ";

fn time_width(utc: bool) -> usize {
    match utc {
        true => "2024-05-01T10:00:00.000000000Z".len(),
        false => "2024-05-01 10:00:00.000 +00:00".len(),
    }
}

/// UTC with every stored digit, or local time to the millisecond with its offset.
pub(super) fn format_time(ts: &prost_types::Timestamp, utc: bool) -> String {
    let nanos = u32::try_from(ts.nanos).unwrap_or(0);
    let Some(time) = DateTime::<Utc>::from_timestamp(ts.seconds, nanos) else {
        return format!("{}s", ts.seconds);
    };
    match utc {
        true => time.format(UTC_FORMAT).to_string(),
        false => time.with_timezone(&Local).format(LOCAL_FORMAT).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    /// `--node` narrows every alternative, so `--node a X Y` is `(X or Y) and node==a`,
    /// and takes any name literally, quotes and backslashes included.
    #[test]
    fn the_node_shorthand_is_anded_with_every_filter() {
        let filters = [
            r#"topic=="/tasks/exit""#.to_owned(),
            "namespace==k8s.io".to_owned(),
        ];
        let event = |node: &str, namespace: &str, topic: &str| {
            testing::event(1)
                .namespace(namespace)
                .topic(topic)
                .json("containerd.events.TaskExit", "{}")
                .node(node)
                .build()
        };
        let filter = parse_filters_on(&filters, Some("web-1")).unwrap();
        let matches = |e: crate::event::Event| filter.matches(&e.record_fields());
        assert!(matches(event("web-1", "default", "/tasks/exit")));
        assert!(matches(event("web-1", "k8s.io", "/tasks/start")));
        assert!(!matches(event("web-2", "default", "/tasks/exit")));
        assert!(!matches(event("web-1", "default", "/tasks/start")));

        let odd = r#"a"b\c"#;
        let only = parse_filters_on(&[], Some(odd)).unwrap();
        assert!(only.matches(&event(odd, "default", "/x").record_fields()));
        assert!(!only.matches(&event("a", "default", "/x").record_fields()));
        let unknown = testing::event(1).json("containerd.events.TaskExit", "{}");
        assert!(!only.matches(&unknown.build().record_fields()));
        assert!(parse_filters_on(&[], None).unwrap().is_always());
    }
}
