//! The managers above an upstream's containerd, asked at every reconcile after
//! containerd's own lists: the CRI (on a Kubernetes node, served on containerd's
//! socket) and dockerd (on a Docker host). What they keep that containerd deleted
//! is folded into the daemon's side (`reconcile::managed`).
//!
//! A manager that is absent, slow, refuses or answers garbage never stops the
//! reconcile: containerd's lists are used alone, what the record already took from
//! the manager is kept, the marker and `/readyz`'s detail name the failure, and the
//! next reconcile comes sooner, backing off.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use futures::StreamExt as _;

use crate::client;
use crate::cri::{CriClient, CriError};
use crate::docker::{self, DockerClient, DockerError};
use crate::errors;
use crate::event::Witness;
use crate::reconcile::NodeState;
use crate::reconcile::managed::{
    self, DOCKER_NAMESPACE, ManagedContainer, ManagedStatus, ManagerView,
};
use crate::reconcile::run::EventLog;

use super::settings::ManagerSetting;

/// How long one call to a manager may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// dockerd inspects in flight at once, as for the CRI's status calls.
const INSPECT_CONCURRENCY: usize = 8;

/// Where the managers are, from an upstream's settings.
#[derive(Clone, Debug)]
pub(crate) struct Managers {
    pub cri: ManagerSetting,
    pub docker: ManagerSetting,
    /// The upstream's own socket, where `cri = "auto"` looks for the CRI.
    pub upstream: String,
    pub connect_timeout: Duration,
}

/// How asking one manager went, for the marker, the log and `/readyz`'s detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ManagerReport {
    /// `cri` or `docker`.
    pub name: &'static str,
    pub address: String,
    pub outcome: Outcome,
    pub at: SystemTime,
    /// dockerd's event log, where it was read: how many events it held and the
    /// oldest's time, or why it could not be read (the reconcile goes on without
    /// it, telling each container's last run only).
    pub log: Option<Result<LogRead, String>>,
}

/// What a read of dockerd's event log found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogRead {
    pub events: u64,
    pub oldest: Option<SystemTime>,
}

/// What the record holds, for deciding what to ask the managers.
#[derive(Clone, Debug, Default)]
pub(crate) struct Known {
    /// The containers whose exit the record has (not asked about again).
    pub exits: BTreeSet<String>,
    /// dockerd's containers with a run recorded: a running one that is not is asked
    /// for its restart count.
    pub docker_runs: BTreeSet<String>,
    /// When the reconcile's lists began: dockerd's event log is read up to there
    /// (what comes later is the live stream's to tell).
    pub until: Option<SystemTime>,
}

impl Known {
    /// What `recorded` holds, for a reconcile whose lists begin at `until`.
    pub(crate) fn of(recorded: &NodeState, until: SystemTime) -> Known {
        Known {
            exits: managed::recorded_exits(recorded),
            docker_runs: recorded
                .namespaces
                .get(DOCKER_NAMESPACE)
                .map(|ns| ns.tasks.keys().cloned().collect())
                .unwrap_or_default(),
            until: Some(until),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Listed {
        sandboxes: u64,
        containers: u64,
        status_calls: u64,
    },
    /// Not there (`auto` found no such manager): not a failure.
    Absent,
    Failed(String),
}

impl ManagerReport {
    pub(crate) fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed(_))
    }

    pub(crate) fn state(&self) -> &'static str {
        match self.outcome {
            Outcome::Listed { .. } => "listed",
            Outcome::Absent => "absent",
            Outcome::Failed(_) => "failed",
        }
    }
}

/// Reads like "cri (/run/containerd/containerd.sock): listed 3 sandboxes, 7
/// containers, 1 status call" or "cri (...): failed: ...".
impl fmt::Display for ManagerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): ", self.name, self.address)?;
        match &self.outcome {
            Outcome::Listed {
                sandboxes,
                containers,
                status_calls,
            } => {
                write!(f, "listed ")?;
                if self.name == "cri" {
                    write!(f, "{sandboxes} sandboxes, ")?;
                }
                write!(f, "{containers} containers, {status_calls} status calls")?;
                if let Some(Err(error)) = &self.log {
                    write!(f, "; its event log could not be read: {error}")?;
                }
                Ok(())
            }
            Outcome::Absent => write!(f, "not served"),
            Outcome::Failed(error) => write!(f, "failed: {error}"),
        }
    }
}

/// What the managers said at one reconcile.
#[derive(Debug, Default)]
pub(crate) struct Asked {
    pub views: Vec<ManagerView>,
    pub reports: Vec<ManagerReport>,
}

impl Managers {
    /// Asks every configured manager, after containerd's lists (`daemon`), about
    /// what the record does not hold (`known`).
    pub(crate) async fn ask(&self, daemon: &NodeState, known: &Known) -> Asked {
        let mut asked = Asked::default();
        if let Some((address, explicit)) = self.cri_address() {
            let (view, report) = self.ask_cri(&address, explicit, daemon, &known.exits).await;
            asked.views.extend(view);
            asked.reports.push(report);
        }
        if let Some(docker) = self.docker_address(daemon) {
            let (view, report) = match docker {
                Ok(address) => Self::ask_docker(&address, daemon, known).await,
                Err(address) => (None, docker_report(&address, Outcome::Absent)),
            };
            asked.views.extend(view);
            asked.reports.push(report);
        }
        asked
    }

    /// Where to ask dockerd: `Err` for `auto` on a node without it (no socket at
    /// the default place, or no `moby` namespace in containerd's lists).
    fn docker_address(&self, daemon: &NodeState) -> Option<Result<String, String>> {
        match &self.docker {
            ManagerSetting::Off => None,
            ManagerSetting::Address(address) => Some(Ok(address.clone())),
            ManagerSetting::Auto => {
                let there = Path::new(docker::DEFAULT_SOCKET).exists()
                    && daemon.namespaces.contains_key(DOCKER_NAMESPACE);
                let address = docker::DEFAULT_SOCKET.to_owned();
                Some(if there { Ok(address) } else { Err(address) })
            }
        }
    }

    /// dockerd's containers: every one with Docker's terms, and the last run of
    /// those whose exit neither containerd nor the record has (one inspect each);
    /// then its event log, for the runs before the last.
    async fn ask_docker(
        address: &str,
        daemon: &NodeState,
        known: &Known,
    ) -> (Option<ManagerView>, ManagerReport) {
        match list_docker(address, daemon, known).await {
            Ok((containers, status_calls, log)) => {
                let outcome = Outcome::Listed {
                    sandboxes: 0,
                    containers: containers.len() as u64,
                    status_calls,
                };
                let mut report = docker_report(address, outcome);
                let log = match log {
                    Some(Ok(log)) => {
                        report.log = Some(Ok(LogRead {
                            events: log.events as u64,
                            oldest: log.oldest,
                        }));
                        Some(log)
                    }
                    Some(Err(error)) => {
                        report.log = Some(Err(errors::chain(&error)));
                        None
                    }
                    None => None,
                };
                let view = ManagerView {
                    from: Witness::Docker,
                    containers: Some(containers),
                    log,
                };
                (Some(view), report)
            }
            Err(error) => (
                Some(kept(Witness::Docker)),
                docker_report(address, Outcome::Failed(errors::chain(&error))),
            ),
        }
    }

    fn cri_address(&self) -> Option<(String, bool)> {
        match &self.cri {
            ManagerSetting::Off => None,
            ManagerSetting::Auto => Some((self.upstream.clone(), false)),
            ManagerSetting::Address(address) => Some((address.clone(), true)),
        }
    }

    async fn ask_cri(
        &self,
        address: &str,
        explicit: bool,
        daemon: &NodeState,
        recorded_exits: &BTreeSet<String>,
    ) -> (Option<ManagerView>, ManagerReport) {
        let report = |outcome| ManagerReport {
            name: "cri",
            address: address.to_owned(),
            outcome,
            at: SystemTime::now(),
            log: None,
        };
        let channel = match client::connect_channel(address, self.connect_timeout).await {
            Ok(channel) => channel,
            Err(error) => {
                let view = kept(Witness::Cri);
                return (Some(view), report(Outcome::Failed(errors::chain(&error))));
            }
        };
        let cri = CriClient::new(channel, CALL_TIMEOUT);
        let listed = cri
            .list(|id, status| managed::needs_status(id, status, daemon, recorded_exits))
            .await;
        match listed {
            Ok(listing) => {
                let outcome = Outcome::Listed {
                    sandboxes: listing.sandboxes as u64,
                    containers: listing.containers.len() as u64,
                    status_calls: listing.status_calls as u64,
                };
                let view = ManagerView {
                    from: Witness::Cri,
                    containers: Some(listing.containers),
                    log: None,
                };
                (Some(view), report(outcome))
            }
            // A containerd without its CRI plugin: nothing to ask, nothing wrong,
            // unless the configuration named a CRI socket.
            Err(CriError::Absent) if !explicit => (None, report(Outcome::Absent)),
            Err(error) => (
                Some(kept(Witness::Cri)),
                report(Outcome::Failed(errors::chain(&error))),
            ),
        }
    }
}

fn docker_report(address: &str, outcome: Outcome) -> ManagerReport {
    ManagerReport {
        name: "docker",
        address: address.to_owned(),
        outcome,
        at: SystemTime::now(),
        log: None,
    }
}

/// dockerd's containers, their log and how many inspects were made.
type DockerListing = (
    BTreeMap<String, ManagedContainer>,
    u64,
    Option<Result<EventLog, DockerError>>,
);

/// dockerd's list, with an inspect of each exited container whose exit is not
/// known yet (`managed::needs_status`) and of each running one with no run recorded
/// (for its restart count); then its event log up to `known.until`.
async fn list_docker(
    address: &str,
    daemon: &NodeState,
    known: &Known,
) -> Result<DockerListing, DockerError> {
    let client = DockerClient::new(address, CALL_TIMEOUT)?;
    let listed = client.list().await?;
    let mut wanted = Vec::new();
    let mut containers = BTreeMap::new();
    for container in listed {
        let exit = managed::needs_status(&container.id, container.status, daemon, &known.exits);
        let runs = container.status == ManagedStatus::Running
            && !known.docker_runs.contains(&container.id);
        if exit || runs {
            wanted.push(container.id.clone());
        }
        let managed = ManagedContainer {
            status: container.status,
            created_at: container.created_at,
            exit: None,
            workload: Some(container.workload()),
            image: container.image,
            started_at: None,
            restart_count: None,
        };
        containers.insert(container.id, managed);
    }
    let status_calls = wanted.len() as u64;
    let client = &client;
    let mut inspected = futures::stream::iter(wanted)
        .map(|id| async move { client.inspect(&id).await })
        .buffer_unordered(INSPECT_CONCURRENCY);
    while let Some(answer) = inspected.next().await {
        // `None`: removed between the list and the inspect; the next list says so.
        let Some(inspected) = answer? else {
            continue;
        };
        if let Some(container) = containers.get_mut(&inspected.id) {
            // The inspect's image is the reference the user ran even where the list
            // shows an image id (the reference names another image since).
            container.workload = Some(inspected.workload());
            container.image = inspected.image.clone();
            container.created_at = inspected.created_at.or(container.created_at);
            container.status = inspected.status;
            container.exit = inspected.exit;
            container.started_at = inspected.started_at;
            container.restart_count = inspected.restart_count;
        }
    }
    // The log only matters for a container some run of which the record may lack;
    // it is one call of at most 256 events, read on every reconcile all the same, so
    // that the marker says how far back it reached.
    let log = match known.until {
        Some(until) => Some(client.events(until).await),
        None => None,
    };
    Ok((containers, status_calls, log))
}

/// A manager that could not be listed: the record's version of what it said stands.
fn kept(from: Witness) -> ManagerView {
    ManagerView {
        from,
        containers: None,
        log: None,
    }
}

#[cfg(test)]
#[path = "managers_tests.rs"]
mod tests;
