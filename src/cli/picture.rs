//! `eventgate timeline ... --out FILE.html|FILE.svg`: the history UI's timeline
//! picture, from the audit store into one file that needs nothing to be viewed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;

use super::query::{parse_filters, time_bound};
use super::store::StoreArgs;
use super::{CliError, timeline};
use crate::query::{Query, Reader};
use crate::ui::picture::{self, Group, PictureError, PictureQuery};
use crate::ui::{document, svg};

/// How long the command reads before giving up: far more than a pod's timeline of a
/// large store takes, short enough that a mistaken whole-store picture ends.
const DEADLINE: Duration = Duration::from_secs(300);

#[derive(Debug, Args)]
#[command(
    after_help = "Draws one lane per container (a pod's sandbox included), grouped by \
    pod, namespace or node, on a time axis in UTC: each container's life from create \
    through start to exit and delete, exits marked by status (0, non-zero, 137, OOM \
    kill), restarts numbered and counted per pod, gaps in the record hatched and the \
    stretches reconciled afterwards shaded. A .svg file is the picture alone; a .html \
    file adds a header with the counts and a table of every mark, with no script in \
    it. Examples:\n  \
    eventgate timeline --pod web-7 --out web-7.html\n  \
    eventgate timeline --pod web-7 --pod-namespace shop --since 6h --out web-7.svg\n  \
    eventgate timeline --group node --since 1h 'pod.namespace==shop' --out shop.html"
)]
pub struct TimelineArgs {
    #[command(flatten)]
    pub location: StoreArgs,
    /// Events at or after this time: RFC 3339 (2024-05-01T10:00:00Z) or a duration
    /// back from now (15m, 2h, 7d). The axis starts here.
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub since: Option<SystemTime>,
    /// Events before this time (same forms as --since). The axis ends here.
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub until: Option<SystemTime>,
    /// One pod's timeline, by its Kubernetes name; a name used in several
    /// namespaces needs --pod-namespace.
    #[arg(long, value_name = "NAME")]
    pub pod: Option<String>,
    /// The Kubernetes namespace of the --pod.
    #[arg(long, value_name = "NAMESPACE", requires = "pod")]
    pub pod_namespace: Option<String>,
    /// What the lanes are grouped by: pod, namespace or node.
    #[arg(long, value_name = "BY", default_value = "pod", value_parser = parse_group)]
    pub(crate) group: Group,
    /// Events drawn at most; beyond, the newest are drawn and the picture says so.
    #[arg(long, value_name = "N", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rows: u64,
    /// The file to write: FILE.html (self-contained page) or FILE.svg.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// containerd filters, e.g. 'topic=="/tasks/exit"' or 'pod.namespace==shop'.
    pub filters: Vec<String>,
}

fn parse_group(text: &str) -> Result<Group, String> {
    text.parse()
}

#[derive(Clone, Copy)]
enum Output {
    Svg,
    Html,
}

pub(super) async fn run(args: TimelineArgs) -> Result<ExitCode, CliError> {
    let extension = args.out.extension().and_then(|e| e.to_str());
    let output = match extension.map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => Output::Svg,
        Some("html" | "htm") => Output::Html,
        _ => {
            return Err(CliError::Usage(format!(
                "--out {}: the file must end in .html or .svg",
                args.out.display()
            )));
        }
    };
    let query = Query {
        filter: parse_filters(&args.filters)?,
        since: args.since,
        until: args.until,
        limit: None,
    };
    let store = args.location.resolve()?;
    tokio::task::spawn_blocking(move || {
        let reader = Reader::open_store(&store, None)?;
        let pod = match &args.pod {
            Some(name) => Some(timeline::resolve(
                &reader,
                name,
                args.pod_namespace.as_deref(),
                &query,
            )?),
            None => None,
        };
        let title = match &pod {
            Some(pod) => format!("pod {pod}"),
            None if args.filters.is_empty() => "all events".to_owned(),
            None => args.filters.join(" or "),
        };
        let request = PictureQuery {
            query,
            pod,
            group: args.group,
            max_rows: args.max_rows,
            deadline: Instant::now() + DEADLINE,
        };
        let picture = picture::build(&reader, &request).map_err(|e| match e {
            PictureError::Store(e) => CliError::Query(e),
            other => CliError::Usage(other.to_string()),
        })?;
        if picture.rows == 0 {
            return Err(CliError::Usage(format!(
                "no stored event matches ({title}); nothing to draw"
            )));
        }
        let text = match output {
            Output::Svg => svg::render(&picture),
            Output::Html => document::render(&picture, &format!("eventgate timeline: {title}")),
        };
        write_atomically(&args.out, text.as_bytes())?;
        let lanes: usize = picture.groups.iter().map(|g| g.lanes.len()).sum();
        let note = match picture.truncated {
            Some(cut) => format!(
                " (truncated: the newest {} of {} events, from {})",
                cut.drawn,
                cut.total,
                svg::when(cut.from)
            ),
            None => String::new(),
        };
        // A closed stdout does not undo the file.
        let _ = writeln!(
            std::io::stdout(),
            "wrote {}: {} events in {lanes} lanes{note}",
            args.out.display(),
            picture.rows
        );
        Ok(ExitCode::SUCCESS)
    })
    .await
    .map_err(|e| CliError::Usage(format!("the timeline stopped unexpectedly: {e}")))?
}

/// A temporary file beside `path`, renamed over it once complete: a reader of `path`
/// never sees half a picture.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let io = |what: &str| {
        let context = format!("{what} {}", path.display());
        move |source| CliError::Io { context, source }
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io("creating a file beside"))?;
    file.write_all(bytes).map_err(io("writing"))?;
    file.as_file().sync_all().map_err(io("writing"))?;
    file.persist(path)
        .map_err(|e| e.error)
        .map_err(io("renaming the finished file to"))?;
    Ok(())
}
