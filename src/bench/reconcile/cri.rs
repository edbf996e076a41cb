//! Reconciling a Kubernetes node: a private containerd with its CRI plugin, filled
//! through the CRI as the kubelet fills it (hostNetwork pods; containers created,
//! some started and exited), measured in each round next to the kubelet's own
//! relist:
//!
//! 1. the raw peer: the kubelet's relist (ListPodSandbox + ListContainers on its
//!    open connection, what PLEG does every second) from this process, and
//!    containerd's `list_node` for reference;
//! 2. eventgate's CRI side alone: `CriClient::list` with `needs_status` given the
//!    record a reconcile left (every exit recorded: no status call), and given no
//!    record (every exited container asked);
//! 3. whole reconciles through the real gateway (`eventgate serve --upstream`, its
//!    `cri = "auto"` default asking the CRI on containerd's socket): a fresh data
//!    directory (the baseline), a restart on the same directory with nothing
//!    changed, and a restart after containers started and exited while it was
//!    down.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt, TryStreamExt};

use super::super::BenchError;
use super::super::node::{IMAGE, Node};
use super::gateway::{self, GatewayRun};
use super::kubelet::{Kubelet, Pod};
use super::{Listing, list_peer};
use crate::cri::CriClient;
use crate::reconcile::NodeState;
use crate::reconcile::managed::{needs_status, recorded_exits};
use crate::reconcile::snapshot::Snapshot;

/// The pods' Kubernetes namespace.
pub(crate) const POD_NAMESPACE: &str = "bench";

/// What every container runs once started: it fails at once.
const SCRIPT: &str = "exit 1";

/// Each timed CRI pass is repeated this many times in a round; the round keeps the
/// median.
const REPEATS: usize = 5;

/// How long eventgate's CRI client gives each call, as the gateway's.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long started containers may take to be seen exited by the CRI.
const EXIT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Debug)]
pub(crate) struct CriBench {
    pub containerd: std::path::PathBuf,
    pub ctr: std::path::PathBuf,
    /// CRI containers (CreateContainer), the pods' sandboxes not counted.
    pub containers: usize,
    pub pods: usize,
    /// Containers started (and exited with status 1) before the first round.
    pub exited: usize,
    /// Containers started (and exited) while the gateway is down, each round.
    pub exited_while_down: usize,
    pub rounds: usize,
    /// CRI calls made at once while filling the node.
    pub at_once: usize,
}

impl CriBench {
    /// Why these sizes cannot be run, if they cannot.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.pods == 0 {
            return Some("--pods must be at least 1".into());
        }
        let needed = self.exited + self.rounds * self.exited_while_down;
        (needed > self.containers).then(|| {
            format!(
                "--exited {} and {} rounds of --exited-while-down {} need {needed} containers; \
                 --containers is {}",
                self.exited, self.rounds, self.exited_while_down, self.containers
            )
        })
    }

    /// The events a reconcile must record for `n` containers that started and exited
    /// while the gateway was down: each one's run, as the CRI kept it.
    pub(crate) fn expected_changed(&self) -> BTreeMap<String, u64> {
        let n = self.exited_while_down as u64;
        if n == 0 {
            return BTreeMap::new();
        }
        ["/tasks/start", "/tasks/exit", "/tasks/delete"]
            .into_iter()
            .map(|topic| (topic.to_owned(), n))
            .collect()
    }
}

/// The kubelet's relist in one round (the median of [`REPEATS`]).
#[derive(Clone, Debug)]
pub(crate) struct Relist {
    pub time: Duration,
    pub sandboxes: usize,
    pub containers: usize,
    pub exited: usize,
}

/// eventgate's `CriClient::list` in one round (the median of [`REPEATS`]).
#[derive(Clone, Debug)]
pub(crate) struct CriPass {
    pub time: Duration,
    pub sandboxes: usize,
    pub containers: usize,
    /// The most status calls any repeat made.
    pub status_calls: usize,
}

#[derive(Clone, Debug)]
pub(crate) struct CriRound {
    pub relist: Relist,
    /// containerd's `list_node` on a fresh connection.
    pub list_node: Listing,
    /// `needs_status` given the record the baseline start left.
    pub unchanged: CriPass,
    /// `needs_status` given no record.
    pub fresh: CriPass,
    pub baseline: GatewayRun,
    pub unchanged_restart: GatewayRun,
    pub changed: GatewayRun,
    /// Exited containers the CRI held before the baseline start.
    pub exited_before: usize,
    pub expected_changed: BTreeMap<String, u64>,
    pub exited_while_down: usize,
    pub pods: usize,
    pub containers: usize,
}

impl CriRound {
    /// What did not add up, if anything. Above all: a status call on an unchanged
    /// node, by eventgate's CRI client or by the gateway's reconcile.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if (self.relist.sandboxes, self.relist.containers) != (self.pods, self.containers) {
            problems.push(format!(
                "the relist found {} sandboxes and {} containers, expected {} and {}",
                self.relist.sandboxes, self.relist.containers, self.pods, self.containers
            ));
        }
        if self.relist.exited != self.exited_before {
            problems.push(format!(
                "the relist found {} exited containers, expected {}",
                self.relist.exited, self.exited_before
            ));
        }
        if self.unchanged.status_calls != 0 {
            problems.push(format!(
                "eventgate's CRI list made {} status calls on an unchanged node (every exit \
                 recorded); it must make none",
                self.unchanged.status_calls
            ));
        }
        if self.fresh.status_calls != self.exited_before {
            problems.push(format!(
                "eventgate's CRI list with no record made {} status calls, expected one per \
                 exited container ({})",
                self.fresh.status_calls, self.exited_before
            ));
        }
        for (start, run, status_calls, recorded) in [
            ("first", &self.baseline, self.exited_before, BTreeMap::new()),
            ("unchanged", &self.unchanged_restart, 0, BTreeMap::new()),
            (
                "changed",
                &self.changed,
                self.exited_while_down,
                self.expected_changed.clone(),
            ),
        ] {
            problems.extend(
                self.run_problems(run, status_calls, &recorded)
                    .into_iter()
                    .map(|p| format!("the {start} start: {p}")),
            );
        }
        if !self.baseline.baseline {
            problems.push("the first start was not a baseline".into());
        }
        for (start, run) in [
            ("unchanged", &self.unchanged_restart),
            ("changed", &self.changed),
        ] {
            if run.baseline {
                problems.push(format!("the {start} start took a new baseline"));
            }
        }
        problems
    }

    fn run_problems(
        &self,
        run: &GatewayRun,
        status_calls: usize,
        recorded: &BTreeMap<String, u64>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        match run.manager("cri") {
            None => problems.push(format!(
                "the marker names no cri manager: {:?}",
                run.managers
            )),
            Some(cri) => {
                if cri.state != "listed" {
                    problems.push(format!("the CRI was {} ({})", cri.state, cri.error));
                }
                if cri.status_calls != status_calls as u64 {
                    problems.push(format!(
                        "the reconcile made {} CRI status calls, expected {status_calls}",
                        cri.status_calls
                    ));
                }
                if (cri.sandboxes, cri.containers) != (self.pods as u64, self.containers as u64) {
                    problems.push(format!(
                        "the CRI listed {} sandboxes and {} containers, expected {} and {}",
                        cri.sandboxes, cri.containers, self.pods, self.containers
                    ));
                }
            }
        }
        if &run.recorded != recorded {
            problems.push(format!(
                "recorded {:?}, expected {recorded:?}",
                run.recorded
            ));
        }
        if run.stored != run.events() {
            problems.push(format!(
                "the marker counts {} events, the store holds {} reconciled rows",
                run.events(),
                run.stored
            ));
        }
        if !run.saved {
            problems.push("the state snapshot was not saved after the reconcile".into());
        }
        problems
    }
}

#[derive(Clone, Debug)]
pub(crate) struct CriResults {
    pub filled_in: Duration,
    pub rounds: Vec<CriRound>,
}

/// Fills a CRI node, runs the rounds, and stops its pods and containerd again (also
/// when a round fails).
pub(crate) async fn run(
    eventgate: &Path,
    dir: &Path,
    bench: &CriBench,
) -> Result<CriResults, BenchError> {
    if let Some(problem) = bench.problem() {
        return Err(BenchError::Failed { what: problem });
    }
    // Dropped after the node (which removes the tasks, the sandboxes' among them):
    // what the CRI mounted for the pods is unmounted, also when the run is cut short.
    let _mounts = Mounts(dir.to_path_buf());
    let node = Node::start_cri(&bench.containerd, &bench.ctr, &dir.join("containerd")).await?;
    let kubelet = Kubelet::connect(node.socket(), dir.join("pods")).await;
    let (result, stopped) = match kubelet {
        Ok(kubelet) => {
            let mut pods = Vec::new();
            let result = fill_and_measure(eventgate, dir, bench, &node, &kubelet, &mut pods).await;
            // The sandboxes are stopped through the CRI, which unmounts their shm;
            // what is left (a pod whose RunPodSandbox was cut short) the node removes.
            let stopped = stream::iter(pods.iter().map(|pod| kubelet.stop_pod(&pod.id)))
                .buffer_unordered(bench.at_once.max(1))
                .try_collect::<()>()
                .await;
            (result, stopped)
        }
        Err(error) => (Err(error), Ok(())),
    };
    let shut = node.shutdown(bench.at_once).await;
    let results = result?;
    stopped?;
    shut?;
    Ok(results)
}

async fn fill_and_measure(
    eventgate: &Path,
    dir: &Path,
    bench: &CriBench,
    node: &Node,
    kubelet: &Kubelet,
    pods: &mut Vec<Pod>,
) -> Result<CriResults, BenchError> {
    kubelet.wait_image(IMAGE).await?;
    let at_once = bench.at_once.max(1);
    let started = Instant::now();
    let uid = format!("egb{}", std::process::id());
    let mut running = stream::iter((0..bench.pods).map(|i| {
        let uid = format!("{uid}-{i:04}");
        async move {
            kubelet
                .run_pod(&format!("pod-{i:04}"), POD_NAMESPACE, &uid)
                .await
        }
    }))
    .buffered(at_once);
    while let Some(pod) = running.next().await {
        pods.push(pod?);
    }
    eprintln!(
        "ran {} pod sandboxes in {:.1?}",
        pods.len(),
        started.elapsed()
    );
    let created_at = Instant::now();
    let pods_ref: &[Pod] = pods;
    let ids: Vec<String> = stream::iter((0..bench.containers).map(|i| async move {
        let pod = &pods_ref[i % pods_ref.len()];
        kubelet.create(pod, &format!("c{i:04}"), SCRIPT).await
    }))
    .buffered(at_once)
    .try_collect()
    .await?;
    eprintln!(
        "created {} containers in {:.1?}",
        ids.len(),
        created_at.elapsed()
    );
    let exited_at = Instant::now();
    start_and_wait(kubelet, &ids[..bench.exited], at_once).await?;
    eprintln!(
        "started {} containers, all exited, in {:.1?}",
        bench.exited,
        exited_at.elapsed()
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
        let from = bench.exited + n * bench.exited_while_down;
        let round = round(
            eventgate,
            &dir.join(format!("gateway-{}", n + 1)),
            &link,
            node,
            kubelet,
            bench,
            from,
            &ids[from..from + bench.exited_while_down],
        )
        .await?;
        eprintln!(
            "round {}: relist {:.1?}; list_node {:.1?}; CRI list unchanged {:.1?} ({} status \
             calls), no record {:.1?} ({}); gateway baseline {:.1?}, unchanged {:.1?} (list \
             {:.1?}, {} status calls), after {} exits {:.1?} ({} events)",
            n + 1,
            round.relist.time,
            round.list_node.time,
            round.unchanged.time,
            round.unchanged.status_calls,
            round.fresh.time,
            round.fresh.status_calls,
            round.baseline.to_marker,
            round.unchanged_restart.to_marker,
            round.unchanged_restart.list_duration,
            round
                .unchanged_restart
                .manager("cri")
                .map_or(0, |m| m.status_calls),
            bench.exited_while_down,
            round.changed.to_marker,
            round.changed.events(),
        );
        rounds.push(round);
    }
    Ok(CriResults { filled_in, rounds })
}

/// StartContainer for each of `ids` (each exits at once), returning once the CRI
/// shows them all exited.
async fn start_and_wait(
    kubelet: &Kubelet,
    ids: &[String],
    at_once: usize,
) -> Result<(), BenchError> {
    stream::iter(ids.iter().map(|id| kubelet.start(id)))
        .buffer_unordered(at_once)
        .try_collect::<()>()
        .await?;
    kubelet.wait_exited(ids, EXIT_TIMEOUT).await
}

#[allow(clippy::too_many_arguments)]
async fn round(
    eventgate: &Path,
    gateway_dir: &Path,
    link: &Path,
    node: &Node,
    kubelet: &Kubelet,
    bench: &CriBench,
    exited_before: usize,
    to_exit: &[String],
) -> Result<CriRound, BenchError> {
    std::fs::create_dir_all(gateway_dir).map_err(|source| BenchError::Io {
        context: format!("cannot create {}", gateway_dir.display()),
        source,
    })?;
    let relist = relist_peer(kubelet).await?;
    let (list_node, daemon) = list_peer(node.socket()).await?;

    let baseline = gateway::reconcile_once(eventgate, gateway_dir, link, node.socket()).await?;
    // The record as the baseline left it: every exit the CRI holds is in it.
    let data = gateway_dir.join("eventgate");
    let snapshot = Snapshot::open(&data, gateway::UPSTREAM, None)
        .await
        .map_err(|e| BenchError::Failed {
            what: format!(
                "cannot read the gateway's state snapshot: {}",
                crate::errors::chain(&e)
            ),
        })?;
    if !snapshot.known {
        return Err(BenchError::Failed {
            what: "the baseline start left no state snapshot".into(),
        });
    }
    let recorded = recorded_exits(&snapshot.state);
    drop(snapshot);
    let unchanged = cri_pass(node.socket(), &daemon, &recorded).await?;
    let fresh = cri_pass(node.socket(), &daemon, &BTreeSet::new()).await?;
    drop(daemon);

    let unchanged_restart =
        gateway::reconcile_once(eventgate, gateway_dir, link, node.socket()).await?;
    start_and_wait(kubelet, to_exit, bench.at_once.max(1)).await?;
    let changed = gateway::reconcile_once(eventgate, gateway_dir, link, node.socket()).await?;
    let _ = std::fs::remove_dir_all(gateway_dir);
    Ok(CriRound {
        relist,
        list_node,
        unchanged,
        fresh,
        baseline,
        unchanged_restart,
        changed,
        exited_before,
        expected_changed: bench.expected_changed(),
        exited_while_down: to_exit.len(),
        pods: bench.pods,
        containers: bench.containers,
    })
}

/// The kubelet's relist on its open connection, [`REPEATS`] times.
async fn relist_peer(kubelet: &Kubelet) -> Result<Relist, BenchError> {
    let mut times = Vec::with_capacity(REPEATS);
    let mut last = None;
    for _ in 0..REPEATS {
        let started = Instant::now();
        let listed = kubelet.relist().await?;
        times.push(started.elapsed());
        last = Some(listed);
    }
    let listed = last.expect("REPEATS > 0");
    Ok(Relist {
        time: median(times),
        sandboxes: listed.sandboxes.len(),
        containers: listed.containers.len(),
        exited: listed.exited(),
    })
}

/// eventgate's CRI client on its own connection (made and used once before the
/// timed passes, as the kubelet's is), [`REPEATS`] times: the two lists and the
/// status calls `needs_status` asks for, given containerd's lists (`daemon`) and the
/// exits the record has.
async fn cri_pass(
    socket: &Path,
    daemon: &NodeState,
    recorded: &BTreeSet<String>,
) -> Result<CriPass, BenchError> {
    let channel =
        crate::client::connect_channel(&socket.display().to_string(), CALL_TIMEOUT).await?;
    let client = CriClient::new(channel, CALL_TIMEOUT);
    let list = || async {
        client
            .list(|id, status| needs_status(id, status, daemon, recorded))
            .await
            .map_err(|e| BenchError::Failed {
                what: format!("eventgate's CRI list failed: {}", crate::errors::chain(&e)),
            })
    };
    list().await?;
    let mut times = Vec::with_capacity(REPEATS);
    let mut pass = CriPass {
        time: Duration::ZERO,
        sandboxes: 0,
        containers: 0,
        status_calls: 0,
    };
    for _ in 0..REPEATS {
        let started = Instant::now();
        let listing = list().await?;
        times.push(started.elapsed());
        pass.sandboxes = listing.sandboxes;
        pass.containers = listing.containers.len();
        pass.status_calls = pass.status_calls.max(listing.status_calls);
    }
    pass.time = median(times);
    Ok(pass)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// The mounts under a directory, lazily unmounted when dropped: the pods' shm, which
/// the CRI unmounts only when a sandbox is stopped through it. A run cut short (a
/// signal, an error before the pods were stopped) would otherwise leave them, and
/// its temporary directory, behind.
struct Mounts(PathBuf);

impl Drop for Mounts {
    fn drop(&mut self) {
        let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let mut points: Vec<&str> = table
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| Path::new(point).starts_with(&self.0))
            .collect();
        // The deepest first.
        points.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in points {
            let _ = std::process::Command::new("umount")
                .args(["-l", point])
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}
