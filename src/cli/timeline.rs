//! `eventgate query --pod NAME`: one pod's life, oldest first, one line per event:
//! its sandbox and each container by name, created, started (restarts numbered),
//! exited (non-zero exits and kills marked `!`), out of memory, deleted. Counted by
//! the rules `stats --by pod` uses ([`crate::query::pods`]).

use std::io::Write;
use std::process::ExitCode;

use super::CliError;
use super::query::{FOLLOW_INTERVAL, format_time};
use crate::event::{Event, Witness};
use crate::query::pods::{
    Change, PodLookup, PodName, SIGKILL_STATUS, Tally, pod_filter, revised, text, uint,
};
use crate::query::{Query, Reader, RowRange, StoredEvent};

/// The pod `--pod NAME` (and `--pod-namespace`) names among the rows `query` selects.
/// A name used in several namespaces is refused with the list, rather than mixing
/// two pods into one timeline.
pub(super) fn resolve(
    reader: &Reader,
    name: &str,
    namespace: Option<&str>,
    query: &Query,
) -> Result<PodName, CliError> {
    if let Some(namespace) = namespace {
        return Ok(PodName {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    match reader.lookup_pod(name, query)? {
        PodLookup::Found(pod) => Ok(pod),
        PodLookup::Missing => Err(CliError::Usage(format!(
            "no stored event of a pod named {name:?} matches; \
             to wait for one with --follow, give its --pod-namespace"
        ))),
        PodLookup::Ambiguous { namespaces, list } => Err(CliError::Usage(format!(
            "pods named {name:?} are in {namespaces} namespaces: {list}; name one with --pod-namespace"
        ))),
    }
}

/// `query` narrowed to `pod`'s rows.
pub(super) fn narrow(query: Query, pod: &PodName) -> Query {
    let namespace = (!pod.namespace.is_empty()).then_some(pod.namespace.as_str());
    Query {
        filter: query.filter.and(&pod_filter(&pod.name, namespace)),
        ..query
    }
}

/// Prints the timeline of `pod` (`query` already narrowed to it), then, unless
/// following, what it counted.
pub(super) fn print(
    reader: &Reader,
    pod: &PodName,
    query: &Query,
    utc: bool,
    follow: bool,
) -> Result<ExitCode, CliError> {
    let mut tally = Tally::default();
    if let Some(since) = query.since {
        for key in reader.started_before(Some(pod), since)? {
            tally.started_before(key);
        }
    }
    let up_to = reader.last_row_id()?;
    let mut rows = Vec::new();
    reader.each(query, RowRange { after: 0, up_to }, |stored| {
        rows.push(stored);
        true
    })?;
    if rows.is_empty() && !follow {
        return Err(CliError::Usage(format!(
            "no stored event of pod {pod} matches"
        )));
    }
    let changes = revised(&mut tally, rows.iter().map(|s| &s.event));
    let mut timeline = Timeline::new(pod, utc, &rows);
    let stdout = std::io::stdout();
    let mut open = true;
    for (stored, change) in rows.iter().zip(changes) {
        open = timeline.line(&mut stdout.lock(), &stored.event, change);
        if !open {
            break;
        }
    }
    if follow {
        if open {
            reader.follow(query, up_to, FOLLOW_INTERVAL, &|| false, |stored| {
                let change = tally.add(&stored.event);
                timeline.line(&mut stdout.lock(), &stored.event, change)
            })?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let counts = tally.pods.get(pod).copied().unwrap_or_default();
    let summary = format!(
        "restarts {}, OOM events {}, non-zero exits {} (status 137: {}, OOM-killed: {})",
        counts.restarts, counts.ooms, counts.nonzero_exits, counts.killed, counts.oom_killed
    );
    // A closed pipe (`| head`) is the reader saying it has enough.
    let _ = writeln!(stdout.lock(), "{summary}");
    Ok(ExitCode::SUCCESS)
}

struct Timeline {
    pod: PodName,
    utc: bool,
    width: usize,
    uid: Option<String>,
    header: bool,
}

impl Timeline {
    fn new(pod: &PodName, utc: bool, rows: &[StoredEvent]) -> Self {
        let width = rows
            .iter()
            .map(|s| who(&s.event).chars().count())
            .max()
            .unwrap_or(0)
            .max("CONTAINER".len());
        Self {
            pod: pod.clone(),
            utc,
            width,
            uid: None,
            header: false,
        }
    }

    /// False once the output is closed.
    fn line(&mut self, out: &mut dyn Write, event: &Event, change: Change) -> bool {
        let mut text = String::new();
        let uid = event
            .identity
            .workload
            .as_deref()
            .and_then(|w| w.pod_uid.clone());
        if !self.header || uid != self.uid {
            let uid_text = uid.as_deref().unwrap_or("unknown");
            match self.header {
                false => text.push_str(&format!("pod {} (uid {uid_text})\n", self.pod)),
                true => text.push_str(&format!(
                    "pod {} again, a new pod of the same name (uid {uid_text})\n",
                    self.pod
                )),
            }
            if !self.header {
                let time = time_width(self.utc);
                text.push_str(&format!(
                    "{:time$}  {:width$}  EVENT\n",
                    "TIME",
                    "CONTAINER",
                    width = self.width
                ));
            }
            self.header = true;
            self.uid = uid;
        }
        let when = match &event.envelope.timestamp {
            Some(ts) => format_time(ts, self.utc),
            None => "-".to_owned(),
        };
        text.push_str(&format!(
            "{when:time$}  {:width$}  {}",
            who(event),
            what(event, change),
            time = time_width(self.utc),
            width = self.width
        ));
        writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
    }
}

fn time_width(utc: bool) -> usize {
    match utc {
        true => "2024-05-01T10:00:00.000000000Z".len(),
        false => "2024-05-01 10:00:00.000 +00:00".len(),
    }
}

/// `sandbox`, the container's name, or `-` when the record named neither.
fn who(event: &Event) -> String {
    let Some(workload) = event.identity.workload.as_deref() else {
        return "-".to_owned();
    };
    match (&workload.kind, &workload.container_name) {
        (Some(kind), _) if kind == "sandbox" => "sandbox".to_owned(),
        (_, Some(name)) => name.clone(),
        _ => "-".to_owned(),
    }
}

/// What happened, in words; `!` first for what `stats --by pod` counts as trouble.
fn what(event: &Event, change: Change) -> String {
    let payload = event.decoded();
    let field = |name: &str| payload.and_then(|m| text(m, name));
    let number = |name: &str| payload.and_then(|m| uint(m, name));
    let pid = || number("pid").map_or(String::new(), |p| format!(" (pid {p})"));
    let status = number("exit_status").unwrap_or(0);
    let id = field("container_id")
        .or_else(|| field("id"))
        .unwrap_or_default();
    let short: String = id.chars().take(12).collect();
    let mut text = match (event.topic(), change) {
        ("/containers/create", _) => {
            let image = field("image")
                .or_else(|| event.identity.workload.as_deref().map(|w| w.image.clone()))
                .filter(|i| !i.is_empty());
            match image {
                Some(image) => format!("created {short} (image {image})"),
                None => format!("created {short}"),
            }
        }
        ("/containers/update", _) => "updated".to_owned(),
        ("/containers/delete", _) => "deleted".to_owned(),
        ("/tasks/create", _) => format!("task created{}", pid()),
        ("/tasks/start", Change::Start { restart }) if restart > 0 => {
            format!("restarted{}: restart {restart}", pid())
        }
        ("/tasks/start", _) => format!("started{}", pid()),
        (
            "/tasks/exit",
            Change::Failed {
                oom_killed: true, ..
            },
        ) => {
            format!("! exited with status {status}: OOM-killed")
        }
        ("/tasks/exit", Change::Failed { status, .. }) if status == SIGKILL_STATUS => {
            format!("! exited with status {status}: killed (SIGKILL)")
        }
        ("/tasks/exit", Change::Failed { status, .. }) => {
            format!("! exited with status {status} (non-zero)")
        }
        ("/tasks/exit", _) => match field("id").filter(|exec| *exec != id) {
            Some(exec) => format!("exec {exec} exited with status {status}"),
            None => format!("exited with status {status}"),
        },
        ("/tasks/oom", Change::Oom { explains: Some(_) }) => {
            "! out of memory (/tasks/oom): the status 137 exit before it was an OOM kill".to_owned()
        }
        ("/tasks/oom", _) => "! out of memory (/tasks/oom)".to_owned(),
        ("/tasks/delete", _) => format!("task deleted (exit status {status})"),
        ("/tasks/paused", _) => "paused".to_owned(),
        ("/tasks/resumed", _) => "resumed".to_owned(),
        ("/tasks/exec-added", _) => format!("exec {} added", field("exec_id").unwrap_or_default()),
        ("/tasks/exec-started", _) => format!(
            "exec {} started{}",
            field("exec_id").unwrap_or_default(),
            pid()
        ),
        (topic, _) => match event.payload_json() {
            Some(json) => format!("{topic} {json}"),
            None => topic.to_owned(),
        },
    };
    text.push_str(&notes(event));
    text
}

/// ` [reconciled]` for an event reconstructed from containerd's lists, ` [reconciled
/// by cri]` (or `docker`) from the manager's record, with `, reason OOMKilled` when the
/// manager gave one; ` [repeats a reconciled event, not counted]` for a late live one;
/// nothing for a live event without a reason.
fn notes(event: &Event) -> String {
    let mut notes = Vec::new();
    if event.identity.origin == crate::event::Origin::Repeat {
        notes.push("repeats a reconciled event, not counted".to_owned());
    }
    match event.identity.origin.witness() {
        None => {}
        Some(Witness::Containerd) => notes.push("reconciled".to_owned()),
        Some(from) => notes.push(format!("reconciled by {}", from.label())),
    }
    let reason = event
        .identity
        .workload
        .as_deref()
        .and_then(|w| w.reason.as_deref());
    if let Some(reason) = reason.filter(|r| !r.is_empty()) {
        notes.push(format!("reason {reason}"));
    }
    match notes.is_empty() {
        true => String::new(),
        false => format!(" [{}]", notes.join(", ")),
    }
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
