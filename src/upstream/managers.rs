//! The managers above an upstream's containerd, asked at every reconcile after
//! containerd's own lists: the CRI (on a Kubernetes node, served on containerd's
//! socket) and dockerd (on a Docker host). What they keep that containerd deleted
//! is folded into the daemon's side (`reconcile::managed`).
//!
//! A manager that is absent, slow, refuses or answers garbage never stops the
//! reconcile: containerd's lists are used alone, what the record already took from
//! the manager is kept, the marker and `/readyz`'s detail name the failure, and the
//! next reconcile comes sooner, backing off.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, SystemTime};

use crate::client;
use crate::cri::{CriClient, CriError};
use crate::errors;
use crate::event::Witness;
use crate::reconcile::NodeState;
use crate::reconcile::managed::{self, ManagerView};

use super::settings::ManagerSetting;

/// How long one call to a manager may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

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
pub struct ManagerReport {
    /// `cri` or `docker`.
    pub name: &'static str,
    pub address: String,
    pub outcome: Outcome,
    pub at: SystemTime,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
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
    pub fn failed(&self) -> bool {
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
                write!(f, "{containers} containers, {status_calls} status calls")
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
    /// Asks every configured manager, after containerd's lists (`daemon`).
    /// `recorded_exits`: the containers whose exit the record has (not asked about).
    pub(crate) async fn ask(&self, daemon: &NodeState, recorded_exits: &BTreeSet<String>) -> Asked {
        let mut asked = Asked::default();
        if let Some((address, explicit)) = self.cri_address() {
            let (view, report) = self
                .ask_cri(&address, explicit, daemon, recorded_exits)
                .await;
            asked.views.extend(view);
            asked.reports.push(report);
        }
        asked
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

/// A manager that could not be listed: the record's version of what it said stands.
fn kept(from: Witness) -> ManagerView {
    ManagerView {
        from,
        containers: None,
    }
}
