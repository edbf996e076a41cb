//! `/readyz`: is this gateway able to take events in and get them out?
//!
//! Ready when all of these hold; each part that does not is named, with why:
//! - every upstream is subscribed;
//! - every forwarder can deliver: its current batch has not been failing for longer
//!   than `admin.max_failing` (a streak runs from the first failed attempt until a
//!   batch is delivered or given up on), it has not been delivering from the spool
//!   for longer than `admin.max_spill`, and its worker has not stopped;
//! - the spool holds less than `spool.high_water` of `spool.max_bytes`;
//! - free space on the spool's file system is not below `spool.min_free` (events are
//!   refused meanwhile), and the spool has not failed to write (the gateway is then
//!   stopping, to be restarted);
//! - with `[signing]`, every audit store's signed checkpoints are being published;
//! - every `[[source]]`'s consumer runs: it has not been failing (consumer errors,
//!   restarts) for longer than `admin.max_failing`, and it has not stopped; and it
//!   is not starved: it has not held no partition for longer than its group's
//!   session timeout while its group's messages wait unread, committed offsets
//!   standing still (src/source/starvation.rs).
//!
//! The decisions are plain functions of snapshots, so they are tested without a
//! running gateway.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::Observed;
use crate::pipeline::HealthSnapshot;
use crate::source::SourceStats;
use crate::spool::DiskSnapshot;
use crate::units::{human_bytes, human_duration};
use crate::upstream::UpstreamStatus;

/// One part's verdict: `problem` is `Some` when it is not ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    pub name: String,
    pub problem: Option<String>,
    /// What is fine about it, for `?verbose`.
    pub detail: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Readiness {
    pub parts: Vec<Part>,
}

impl Readiness {
    pub(crate) fn ready(&self) -> bool {
        self.parts.iter().all(|p| p.problem.is_none())
    }

    pub(crate) fn problems(&self) -> Vec<String> {
        self.parts
            .iter()
            .filter_map(|p| p.problem.clone())
            .collect()
    }

    /// The /readyz body: "ready", or "not ready" and one line per failing part;
    /// `verbose` lists every part.
    pub(crate) fn render(&self, verbose: bool) -> String {
        let mut out = String::from(if self.ready() {
            "ready\n"
        } else {
            "not ready\n"
        });
        for part in &self.parts {
            match (&part.problem, verbose) {
                (Some(problem), _) => {
                    let _ = writeln!(out, "{problem}");
                }
                (None, true) => {
                    let _ = writeln!(out, "ok: {}", part.detail);
                }
                (None, false) => {}
            }
        }
        out
    }
}

/// The spool's fill level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpoolUse {
    pub bytes: u64,
    pub max_bytes: u64,
    pub high_water_bytes: u64,
}

/// The settings (`[admin]`) that say how long a forwarder may be behind or failing
/// before it counts as not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rules {
    pub max_spill: Duration,
    pub max_failing: Duration,
}

impl From<&super::settings::AdminSettings> for Rules {
    fn from(settings: &super::settings::AdminSettings) -> Self {
        Self {
            max_spill: settings.max_spill,
            max_failing: settings.max_failing,
        }
    }
}

/// Everything readiness looks at, taken at one moment.
pub(crate) struct Inputs<'a> {
    pub upstreams: &'a [UpstreamStatus],
    pub forwarders: &'a [(String, HealthSnapshot)],
    pub spool: Option<SpoolUse>,
    /// The free-space reserve, when `spool.min_free` is on.
    pub disk: Option<DiskSnapshot>,
    /// The write or sync error that stopped the spool.
    pub spool_fault: Option<String>,
    pub rules: Rules,
    pub now: SystemTime,
}

pub(crate) fn evaluate(inputs: &Inputs<'_>) -> Readiness {
    let mut parts = Vec::new();
    for status in inputs.upstreams {
        let text = status.to_string();
        parts.push(Part {
            name: format!("upstream {}", status.name),
            problem: (!status.is_connected()).then(|| text.clone()),
            detail: text,
        });
    }
    for (name, health) in inputs.forwarders {
        parts.push(forwarder(name, health, inputs.rules, inputs.now));
    }
    if let Some(spool) = inputs.spool {
        parts.push(spool_part(spool));
    }
    if let Some(disk) = &inputs.disk {
        parts.push(disk_part(disk));
    }
    if let Some(fault) = &inputs.spool_fault {
        parts.push(Part {
            name: "spool writer".into(),
            problem: Some(format!(
                "spool: {fault}; no event is accepted; eventgate is stopping (forwarders get pipeline.drain_timeout) and exits with status 1 for its supervisor to restart it"
            )),
            detail: String::new(),
        });
    }
    Readiness { parts }
}

/// Takes the snapshots from a running gateway.
pub(crate) fn check(observed: &Observed) -> Readiness {
    let upstreams = observed.upstreams.statuses();
    let forwarders: Vec<(String, HealthSnapshot)> = observed
        .forwarders
        .list()
        .iter()
        .map(|f| (f.name.to_string(), f.health()))
        .collect();
    let spool = observed.spool.as_ref().map(|spool| SpoolUse {
        bytes: spool.stats().bytes,
        max_bytes: spool.settings().max_bytes.0,
        high_water_bytes: spool.settings().high_water_bytes(),
    });
    let (disk, spool_fault) = match &observed.spool {
        Some(spool) => (
            spool.disk(),
            spool.fault().map(|error| crate::errors::chain(&*error)),
        ),
        None => (None, None),
    };
    let now = SystemTime::now();
    let mut readiness = evaluate(&Inputs {
        upstreams: &upstreams,
        forwarders: &forwarders,
        spool,
        disk,
        spool_fault,
        rules: observed.readiness,
        now,
    });
    readiness.parts.extend(
        observed
            .signers
            .iter()
            .map(|status| signer(&status.borrow(), now)),
    );
    readiness.parts.extend(
        observed
            .sources
            .iter()
            .map(|stats| source(stats, observed.readiness, now)),
    );
    readiness
}

/// A source's streak of errors whose latest error is older than this is over, even
/// with no message read since: a quiet topic has nothing to read, and librdkafka
/// reports a broker that stays unreachable again (at least every 30 s).
pub(crate) const SOURCE_QUIET: Duration = Duration::from_secs(60);

/// What a source's consumer is doing: `reading`, `failing`, `starved`,
/// `restarting` or `stopped`, and since when it has been failing.
pub(crate) fn source_state(
    health: &crate::source::SourceHealth,
    starved: bool,
    now: SystemTime,
) -> (&'static str, Option<&crate::source::SourceFailing>) {
    let failing = health.failing.as_ref().filter(|failing| {
        health.restarting
            || now.duration_since(failing.last).unwrap_or(Duration::ZERO) < SOURCE_QUIET
    });
    let state = if health.stopped {
        "stopped"
    } else if health.restarting {
        "restarting"
    } else if failing.is_some() {
        "failing"
    } else if starved {
        "starved"
    } else {
        "reading"
    };
    (state, failing)
}

/// What a source holds: `holds fleet/0, fleet/1 (generation 4)`, or `holds no
/// partition (for 3s)`.
fn holding(assignment: &crate::source::Assignment, now: SystemTime) -> String {
    let generation = assignment
        .generation
        .map(|g| format!(" (generation {g})"))
        .unwrap_or_default();
    if assignment.partitions.is_empty() {
        let since = assignment
            .empty_since
            .map(|(_, at)| {
                format!(
                    " for {}",
                    human_duration(now.duration_since(at).unwrap_or(Duration::ZERO))
                )
            })
            .unwrap_or_default();
        return format!("holds no partition{since}{generation}");
    }
    let listed: Vec<(String, i32)> = assignment.partitions.iter().cloned().collect();
    format!(
        "holds {}{generation}",
        few_partitions(&listed, MAX_LISTED_PARTITIONS)
    )
}

/// Partitions named in a readiness line before "and N more".
const MAX_LISTED_PARTITIONS: usize = 8;

fn few_partitions(partitions: &[(String, i32)], at_most: usize) -> String {
    let shown =
        crate::source::starvation::partition_list(&partitions[..partitions.len().min(at_most)]);
    match partitions.len().saturating_sub(at_most) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// Why a starved source is not ready.
fn starved_problem(label: &str, starved: &crate::source::Starved, now: SystemTime) -> String {
    let held_nothing = now.duration_since(starved.since).unwrap_or(Duration::ZERO);
    format!(
        "{label}: starved: holds no partition for {}, longer than the group's session timeout ({}), while {} message(s) wait unread in {} with the group's committed offsets standing still as long: no member reads them and the group gives this one none (see docs/fleet.md, \"A member without partitions\")",
        human_duration(held_nothing),
        human_duration(starved.session_timeout),
        starved.unread,
        few_partitions(&starved.stuck, MAX_LISTED_PARTITIONS),
    )
}

/// One `[[source]]`: not ready once its consumer has been failing or restarting for
/// `admin.max_failing` (a streak runs from the first error until a message is read,
/// or until no error has come for [`SOURCE_QUIET`]), once it has stopped, and while
/// it is starved.
pub(crate) fn source(stats: &SourceStats, rules: Rules, now: SystemTime) -> Part {
    let ago = |t: SystemTime| human_duration(now.duration_since(t).unwrap_or(Duration::ZERO));
    let label = format!(
        "source {} (topics {}; group {})",
        stats.name,
        stats.topics.join(", "),
        stats.group
    );
    let (taken_in, skipped, restarts, _) = stats.counts();
    let counts = format!("taken in {taken_in}, skipped {skipped}, restarts {restarts}");
    let health = stats.health();
    let starved = stats.starved();
    let (state, failing) = source_state(&health, starved.is_some(), now);
    let holding = holding(&stats.assignment(), now);
    let failing = failing.map(|failing| {
        let streak = now.duration_since(failing.since).unwrap_or(Duration::ZERO);
        let what = if health.restarting {
            "restarting its consumer; failing"
        } else {
            "consumer failing"
        };
        let text = format!(
            "{label}: {what} for {} ({} error(s); last error: {})",
            ago(failing.since),
            failing.errors,
            failing.last_error
        );
        (streak, text)
    });
    let problem = if state == "stopped" {
        Some(format!("{label}: stopped"))
    } else {
        failing
            .as_ref()
            .filter(|(streak, _)| *streak >= rules.max_failing)
            .map(|(_, text)| text.clone())
            .or_else(|| {
                starved
                    .as_ref()
                    .map(|starved| starved_problem(&label, starved, now))
            })
    };
    let detail = match failing {
        // A blip shorter than admin.max_failing: fine, but shown.
        Some((_, text)) => format!(
            "{text} (admin.max_failing is {}); {holding}; {counts}",
            human_duration(rules.max_failing)
        ),
        None => format!("{label}: {state}; {holding} ({counts})"),
    };
    Part {
        name: format!("source {}", stats.name),
        problem,
        detail,
    }
}

/// One audit store's checkpoint signer: not ready while its checkpoints fail (the
/// store is written, but no evidence of it leaves the host).
pub(crate) fn signer(status: &crate::signer::SignerStatus, now: SystemTime) -> Part {
    let ago = |t: SystemTime| human_duration(now.duration_since(t).unwrap_or(Duration::ZERO));
    let name = format!("signer {}", status.forwarder);
    let last = match status.last {
        Some((at, row_id)) => format!("last checkpoint {} ago at row_id {row_id}", ago(at)),
        None => "no checkpoint signed yet".to_owned(),
    };
    // Fewer witnesses cosigning than `min_witnesses`: checkpoints are still
    // shipped, but without the evidence that only witnesses can give. A failing
    // witness beyond that is named in the detail.
    let failing: Vec<String> = status
        .witnesses
        .iter()
        .filter_map(|w| {
            w.failing.as_ref().map(|(since, error)| {
                format!(
                    "witness {} at {} has given no cosignature for {}; last error: {error}",
                    w.name,
                    w.url,
                    ago(*since)
                )
            })
        })
        .collect();
    let cosigning = status.witnesses.len() - failing.len();
    let witness = (cosigning < status.min_witnesses)
        .then(|| failing.first().map(|f| format!("{name}: {f}")))
        .flatten();
    let mut detail = format!("{name}: {last}");
    if witness.is_none() {
        for f in &failing {
            detail.push_str(&format!(
                "; {f} ({cosigning} of {} cosigning, {} required)",
                status.witnesses.len(),
                status.min_witnesses
            ));
        }
    }
    for w in &status.witnesses {
        match w.cosigned {
            Some((at, size)) => detail.push_str(&format!(
                "; witness {} cosigned {} ago (tree of {size})",
                w.name,
                ago(at)
            )),
            None => detail.push_str(&format!("; witness {} has not cosigned yet", w.name)),
        }
    }
    Part {
        problem: status
            .failing
            .as_ref()
            .map(|(since, error)| {
                format!(
                    "{name}: cannot publish a signed checkpoint for {} ({last}); last error: {error}",
                    ago(*since)
                )
            })
            .or(witness),
        detail,
        name,
    }
}

/// One forwarder's verdict.
pub(crate) fn forwarder(
    name: &str,
    health: &HealthSnapshot,
    rules: Rules,
    now: SystemTime,
) -> Part {
    let Rules {
        max_spill,
        max_failing,
    } = rules;
    let ago = |t: SystemTime| human_duration(now.duration_since(t).unwrap_or(Duration::ZERO));
    let spilling = health
        .spilling_since
        .map(|since| (since, now.duration_since(since).unwrap_or(Duration::ZERO)));
    let retrying = health.failing.as_ref().map(|failing| {
        let streak = now.duration_since(failing.since).unwrap_or(Duration::ZERO);
        let text = format!(
            "forwarder {name}: retrying (attempt {} failed; failing for {}; last error: {})",
            failing.attempts,
            ago(failing.since),
            failing.last_error
        );
        (streak, text)
    });
    let problem = if health.closed {
        Some(format!("forwarder {name}: stopped"))
    } else if let Some((_, text)) = retrying
        .as_ref()
        .filter(|(streak, _)| *streak >= max_failing)
    {
        Some(text.clone())
    } else if let Some((_, spilled)) = spilling.filter(|(_, spilled)| *spilled > max_spill) {
        Some(format!(
            "forwarder {name}: not keeping up: delivering from the spool for {} (admin.max_spill is {})",
            human_duration(spilled),
            human_duration(max_spill)
        ))
    } else {
        None
    };
    let detail = match (retrying, spilling) {
        // A blip shorter than admin.max_failing: fine, but shown.
        (Some((_, text)), _) => format!(
            "{text} (admin.max_failing is {})",
            human_duration(max_failing)
        ),
        (None, Some((since, _))) => format!(
            "forwarder {name}: delivering from the spool for {}",
            ago(since)
        ),
        (None, None) => format!("forwarder {name}: delivering"),
    };
    Part {
        name: format!("forwarder {name}"),
        problem,
        detail,
    }
}

fn spool_part(spool: SpoolUse) -> Part {
    let percent = |n: u64| n as f64 * 100.0 / spool.max_bytes.max(1) as f64;
    let detail = format!(
        "spool: {} of {} used ({:.0}%)",
        human_bytes(spool.bytes),
        human_bytes(spool.max_bytes),
        percent(spool.bytes)
    );
    let problem = (spool.bytes >= spool.high_water_bytes).then(|| {
        format!(
            "{detail}, at or above spool.high_water ({:.0}%): forwarders are not keeping up",
            percent(spool.high_water_bytes)
        )
    });
    Part {
        name: "spool".into(),
        problem,
        detail,
    }
}

fn disk_part(disk: &DiskSnapshot) -> Part {
    let stale = disk
        .error
        .as_ref()
        .map(|error| format!(" (last figures: it cannot be read now: {error})"))
        .unwrap_or_default();
    let detail = format!(
        "spool disk: {} free on the file system of {} (spool.min_free {}){stale}",
        human_bytes(disk.free),
        disk.dir.display(),
        disk.min_free.describe(disk.total),
    );
    let problem = disk.low.then(|| {
        format!(
            "{detail}: below the reserve, Publish and Forward are refused (RESOURCE_EXHAUSTED) and upstreams held until {} are free; forwarders go on delivering what was accepted",
            human_bytes(disk.resume_at)
        )
    });
    Part {
        name: "spool disk".into(),
        problem,
        detail,
    }
}

#[cfg(test)]
#[path = "readiness_tests.rs"]
mod tests;
