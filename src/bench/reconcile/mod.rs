//! Reconciling a large node: a private containerd filled with `ctr` (containers,
//! some with running tasks), measured three ways in each round, next to each other:
//!
//! 1. the raw peer: `list_node` alone from this process (the daemon's own List calls,
//!    no eventgate work), and `ctr container ls` + `task ls` + `image ls` for
//!    reference;
//! 2. a whole reconcile through the real gateway ([`gateway`]): a first start on a
//!    fresh data directory (the baseline), then a second start of the same directory
//!    after containers were changed and tasks killed while it was down;
//! 3. eventgate's own work without containerd ([`library`]): diff, merged state and
//!    snapshot save on the state just listed.
//!
//! [`cri`] does the same for a Kubernetes node (containerd with its CRI plugin,
//! filled through the CRI), next to the kubelet's relist.

pub(crate) mod cri;
pub(crate) mod gateway;
pub(crate) mod kubelet;
pub(crate) mod library;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::BenchError;
use super::daemon::{memory, reset_peak};
use super::node::Node;
use crate::reconcile::{NodeState, list_node};
use gateway::GatewayRun;
use library::Pass;

/// The label each round sets on the containers it relabels.
pub(crate) const ROUND_LABEL: &str = "bench.round";

/// The namespace the node's containers live in.
pub(crate) const NAMESPACE: &str = "bench";

/// Each list call's limit, as the gateway's own.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub(crate) struct ReconcileBench {
    pub containerd: PathBuf,
    pub ctr: PathBuf,
    /// Containers on the node, those with tasks included.
    pub containers: usize,
    /// Containers with a running task (`ctr run -d ... sleep`).
    pub tasks: usize,
    /// Containers changed while the gateway is down: a third removed, a third
    /// created, the rest relabelled.
    pub changed: usize,
    /// Running tasks killed (SIGKILL) while the gateway is down.
    pub killed: usize,
    pub rounds: usize,
    /// `ctr` calls run at once while filling and changing the node.
    pub at_once: usize,
}

impl ReconcileBench {
    fn removed_per_round(&self) -> usize {
        self.changed / 3
    }

    fn relabeled(&self) -> usize {
        self.changed - 2 * self.removed_per_round()
    }

    /// Why these sizes cannot be run, if they cannot.
    pub(crate) fn problem(&self) -> Option<String> {
        let Some(idle) = self.containers.checked_sub(self.tasks) else {
            return Some(format!(
                "--tasks {} is more than --containers {}",
                self.tasks, self.containers
            ));
        };
        if self.killed > self.tasks {
            return Some(format!(
                "--killed {} is more than --tasks {}",
                self.killed, self.tasks
            ));
        }
        let needed = self.rounds * self.removed_per_round() + self.relabeled();
        (needed > idle).then(|| {
            format!(
                "{} rounds of --changed {} need {needed} containers without tasks; there are {idle}",
                self.rounds, self.changed
            )
        })
    }
}

/// What a round changes while the gateway is down.
#[derive(Clone, Debug, Default)]
pub(crate) struct Changes {
    pub round: usize,
    pub relabeled: Vec<String>,
    pub removed: Vec<String>,
    pub created: Vec<String>,
    pub killed: Vec<String>,
}

impl Changes {
    /// The events a reconcile must record for them, by topic.
    pub(crate) fn expected(&self) -> BTreeMap<String, u64> {
        [
            ("/containers/create", self.created.len()),
            ("/containers/update", self.relabeled.len()),
            ("/containers/delete", self.removed.len()),
            ("/tasks/exit", self.killed.len()),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(topic, n)| (topic.to_owned(), n as u64))
        .collect()
    }
}

/// The raw peer's figures in one round.
#[derive(Clone, Debug)]
pub(crate) struct Listing {
    /// Connecting and `list_node`, as the gateway's own listing does.
    pub time: Duration,
    /// This process's peak RSS while listing, over its RSS before.
    pub peak_growth: Option<u64>,
    pub containers: usize,
    pub tasks: usize,
}

#[derive(Clone, Debug)]
pub(crate) struct Round {
    pub list: Listing,
    /// `ctr container ls` + `task ls` + `image ls`, per namespace, one after the other.
    pub ctr: Duration,
    pub baseline: GatewayRun,
    pub changed: GatewayRun,
    pub expected: BTreeMap<String, u64>,
    pub library_unchanged: Pass,
    pub library_changed: Pass,
}

impl Round {
    /// What did not add up, if anything: a reconcile that did not record what
    /// changed is not one to time.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.baseline.baseline || self.baseline.events() != 0 {
            problems.push(format!(
                "the first start recorded {:?} (baseline: {})",
                self.baseline.recorded, self.baseline.baseline
            ));
        }
        for (start, run) in [("first", &self.baseline), ("second", &self.changed)] {
            if !run.saved {
                problems.push(format!(
                    "the {start} start did not save its state snapshot after the reconcile"
                ));
            }
        }
        if self.changed.recorded != self.expected {
            problems.push(format!(
                "the second start recorded {:?}, expected {:?}",
                self.changed.recorded, self.expected
            ));
        }
        if self.changed.stored != self.changed.events() {
            problems.push(format!(
                "the marker counts {} events, the store holds {} reconciled rows",
                self.changed.events(),
                self.changed.stored
            ));
        }
        let wanted = self.expected.values().sum::<u64>() as usize;
        if self.library_changed.events != wanted {
            problems.push(format!(
                "the library diff found {} events, expected {wanted}",
                self.library_changed.events
            ));
        }
        problems
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Results {
    pub filled_in: Duration,
    pub rounds: Vec<Round>,
}

/// Fills a node, runs the rounds, and empties the node again (also when a round
/// fails).
pub(crate) async fn run(
    eventgate: &Path,
    dir: &Path,
    bench: &ReconcileBench,
) -> Result<Results, BenchError> {
    if let Some(problem) = bench.problem() {
        return Err(BenchError::Failed { what: problem });
    }
    let node = Node::start(
        &bench.containerd,
        &bench.ctr,
        &dir.join("containerd"),
        NAMESPACE,
    )
    .await?;
    let result = fill_and_measure(eventgate, dir, bench, &node).await;
    let stopped = node.shutdown(bench.at_once).await;
    let results = result?;
    stopped?;
    Ok(results)
}

async fn fill_and_measure(
    eventgate: &Path,
    dir: &Path,
    bench: &ReconcileBench,
    node: &Node,
) -> Result<Results, BenchError> {
    // Unique on the machine: runc's state and cgroup paths are shared by every
    // containerd on it.
    let prefix = format!("egb{}", std::process::id());
    let tasks: Vec<String> = (0..bench.tasks)
        .map(|i| format!("{prefix}-t{i:04}"))
        .collect();
    let idle: Vec<String> = (0..bench.containers - bench.tasks)
        .map(|i| format!("{prefix}-c{i:04}"))
        .collect();
    let started = Instant::now();
    node.create_containers(&idle, bench.at_once).await?;
    eprintln!(
        "created {} containers in {:.1?}",
        idle.len(),
        started.elapsed()
    );
    let tasks_started = Instant::now();
    node.run_tasks(&tasks, bench.at_once).await?;
    eprintln!(
        "started {} tasks in {:.1?}",
        tasks.len(),
        tasks_started.elapsed()
    );
    let filled_in = started.elapsed();

    let link_dir = dir.join("upstream");
    std::fs::create_dir_all(&link_dir).map_err(|source| BenchError::Io {
        context: format!("cannot create {}", link_dir.display()),
        source,
    })?;
    let link = link_dir.join("containerd.sock");
    let mut rounds = Vec::new();
    for n in 0..bench.rounds {
        let removed = bench.removed_per_round();
        let changes = Changes {
            round: n + 1,
            relabeled: idle[idle.len() - bench.relabeled()..].to_vec(),
            removed: idle[n * removed..(n + 1) * removed].to_vec(),
            created: (0..removed)
                .map(|i| format!("{prefix}-r{}-n{i:04}", n + 1))
                .collect(),
            killed: tasks[..bench.killed].to_vec(),
        };
        let round = round(
            eventgate,
            &dir.join(format!("gateway-{}", n + 1)),
            &link,
            node,
            bench,
            &changes,
        )
        .await?;
        eprintln!(
            "round {}: list_node {:.1?}; ctr ls {:.1?}; gateway baseline {:.1?} (list {:.1?}), \
             after changes {:.1?} (list {:.1?}, {} events); library {:.1?}",
            n + 1,
            round.list.time,
            round.ctr,
            round.baseline.to_marker,
            round.baseline.list_duration,
            round.changed.to_marker,
            round.changed.list_duration,
            round.changed.events(),
            round.library_changed.total(),
        );
        rounds.push(round);
        if n + 1 < bench.rounds {
            node.restart_tasks(&changes.killed, bench.at_once).await?;
        }
    }
    Ok(Results { filled_in, rounds })
}

async fn round(
    eventgate: &Path,
    gateway_dir: &Path,
    link: &Path,
    node: &Node,
    bench: &ReconcileBench,
    changes: &Changes,
) -> Result<Round, BenchError> {
    let (list, listed) = list_peer(node.socket()).await?;
    let ctr = ctr_peer(node).await?;

    let library_dir = gateway_dir.join("library");
    let daemon_after = library::after(&listed, NAMESPACE, changes);
    let library_unchanged = library::pass(&listed, &listed, &library_dir).await?;
    let library_changed = library::pass(&listed, &daemon_after, &library_dir).await?;
    drop((listed, daemon_after));

    let baseline = gateway::reconcile_once(eventgate, gateway_dir, link, node.socket()).await?;
    apply(node, bench, changes).await?;
    let changed = gateway::reconcile_once(eventgate, gateway_dir, link, node.socket()).await?;
    let _ = std::fs::remove_dir_all(gateway_dir);
    Ok(Round {
        list,
        ctr,
        baseline,
        changed,
        expected: changes.expected(),
        library_unchanged,
        library_changed,
    })
}

/// Makes the round's changes on the node.
async fn apply(node: &Node, bench: &ReconcileBench, changes: &Changes) -> Result<(), BenchError> {
    let label = format!("{ROUND_LABEL}={}", changes.round);
    node.each(&changes.relabeled, bench.at_once, |id| {
        vec![
            "container".into(),
            "label".into(),
            id.clone(),
            label.clone(),
        ]
    })
    .await?;
    node.each(&changes.removed, bench.at_once, |id| {
        vec!["container".into(), "rm".into(), id.clone()]
    })
    .await?;
    node.create_containers(&changes.created, bench.at_once)
        .await?;
    node.kill_tasks(&changes.killed, bench.at_once).await
}

/// Connecting and listing, as the gateway does for each reconcile; the state listed
/// is returned for the library passes.
async fn list_peer(socket: &Path) -> Result<(Listing, NodeState), BenchError> {
    let address = socket.display().to_string();
    let before = memory("self", "VmRSS");
    let reset = reset_peak("self");
    let started = Instant::now();
    let channel = crate::client::connect_channel(&address, LIST_TIMEOUT).await?;
    let listed = list_node(channel, LIST_TIMEOUT)
        .await
        .map_err(|e| BenchError::Failed {
            what: format!("list_node failed: {}", crate::errors::chain(&e)),
        })?;
    let time = started.elapsed();
    let peak = memory("self", "VmHWM");
    let count = |f: fn(&crate::reconcile::NamespaceState) -> usize| {
        listed.namespaces.values().map(f).sum::<usize>()
    };
    let listing = Listing {
        time,
        peak_growth: reset
            .then(|| peak.zip(before).map(|(p, b)| p.saturating_sub(b)))
            .flatten(),
        containers: count(|ns| ns.containers.len()),
        tasks: count(|ns| ns.tasks.len()),
    };
    Ok((listing, listed))
}

/// What an operator would type to see the same: the three lists of each namespace.
async fn ctr_peer(node: &Node) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let namespaces = node.ctr(&["namespaces", "ls", "-q"]).await?;
    for namespace in namespaces.lines() {
        for list in ["container", "task", "image"] {
            node.ctr_in(namespace, &[list, "ls"]).await?;
        }
    }
    Ok(started.elapsed())
}
