//! The kubelet-like CRI harness (`support::kubelet`) against containerd's real CRI
//! plugin: a hostNetwork pod whose container exits with an error, completes, and is
//! OOM-killed, each a new attempt as the kubelet restarts it; what the CRI and
//! containerd's own lists say about each.

use crate::support;

use std::time::Instant;

use eventgate::proto::runtime::v1::{ContainerState, ContainerStatus, PodSandboxState};
use support::DEADLINE;
use support::containerd::{CRI_NAMESPACE, Containerd, IMAGE};
use support::kubelet::{ContainerSpec, Kubelet, Pod};

/// A pod uid in the API server's form, different in each run.
fn pod_uid() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos();
    let hex = format!("{:032x}", nanos ^ (u128::from(std::process::id()) << 64));
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Runs one attempt of container `app` and waits for it to exit; its id and final
/// status.
fn run_attempt(
    kubelet: &mut Kubelet,
    pod: &Pod,
    spec: &ContainerSpec<'_>,
) -> (String, ContainerStatus) {
    let started = Instant::now();
    let id = kubelet.run_container(pod, spec);
    let ran = started.elapsed();
    let status = kubelet.wait_exited(&id, DEADLINE);
    eprintln!(
        "attempt {} ({:?}): create+start {ran:?}, EXITED seen after {:?}: exit_code {} \
         reason {:?} message {:?}, finished_at - started_at {:.3} ms",
        spec.attempt,
        spec.script,
        started.elapsed(),
        status.exit_code,
        status.reason,
        status.message,
        (status.finished_at - status.started_at) as f64 / 1e6,
    );
    assert_eq!(status.id, id);
    let meta = status.metadata.clone().expect("metadata");
    assert_eq!(
        (meta.name.as_str(), meta.attempt),
        (spec.name, spec.attempt)
    );
    assert_eq!(
        status.labels["io.kubernetes.container.name"], spec.name,
        "{status:#?}"
    );
    assert_eq!(
        status.annotations["io.kubernetes.container.restartCount"],
        spec.attempt.to_string()
    );
    assert_eq!(status.image.as_ref().map(|i| i.image.as_str()), Some(IMAGE));
    assert!(status.created_at > 0, "{status:#?}");
    assert!(status.started_at >= status.created_at, "{status:#?}");
    // Not `finished_at >= started_at`: the CRI plugin takes started_at from its own
    // clock once the shim's Start returned, finished_at is the exit time the shim
    // reported, so a process that exits at once can finish "before" it started (by
    // a fraction of a millisecond). Both come after the create.
    assert!(status.finished_at > status.created_at, "{status:#?}");
    assert!(
        (status.finished_at - status.started_at).abs() < 10_000_000_000,
        "{status:#?}"
    );
    assert_eq!(
        status.log_path,
        pod.log_directory()
            .join(format!("{}/{}.log", spec.name, spec.attempt))
            .display()
            .to_string()
    );
    (id, status)
}

/// containerd's own task and container lists in the CRI's namespace: `ctr task ls`
/// and `ctr container ls -q`, as (id, status) rows and ids.
fn containerd_lists(containerd: &Containerd) -> (Vec<(String, String)>, Vec<String>) {
    let tasks = containerd
        .ctr_in(CRI_NAMESPACE, &["task", "ls"])
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            Some((cols.first()?.to_string(), cols.get(2)?.to_string()))
        })
        .collect();
    let containers = containerd
        .ctr_in(CRI_NAMESPACE, &["container", "ls", "-q"])
        .lines()
        .map(str::to_owned)
        .collect();
    (tasks, containers)
}

#[test]
fn a_kubelet_runs_a_pod_whose_container_errs_completes_and_is_oom_killed() {
    let t0 = Instant::now();
    let containerd = Containerd::start_cri();
    let mut kubelet = Kubelet::connect(&containerd);
    let version = kubelet.version();
    eprintln!(
        "CRI serving after {:?}: {} {} (CRI {})",
        t0.elapsed(),
        version.runtime_name,
        version.runtime_version,
        version.runtime_api_version
    );
    assert_eq!(version.runtime_name, "containerd");

    let t = Instant::now();
    containerd.import_busybox_cri();
    kubelet.wait_image(IMAGE);
    eprintln!("image imported and known to the CRI in {:?}", t.elapsed());

    let t = Instant::now();
    let uid = pod_uid();
    let pod = kubelet.run_pod("web-0", "shop", &uid, 0);
    eprintln!("RunPodSandbox {:?}: {}", t.elapsed(), pod.id);
    let sandbox = kubelet.pod_status(&pod.id);
    assert_eq!(
        sandbox.state,
        PodSandboxState::SandboxReady as i32,
        "{sandbox:#?}"
    );
    assert_eq!(sandbox.labels["io.kubernetes.pod.uid"], uid);
    assert_eq!(sandbox.annotations["kubernetes.io/config.source"], "api");

    let app = |attempt, script, memory_limit| ContainerSpec {
        name: "app",
        attempt,
        script,
        memory_limit,
    };

    let (failed, status) = run_attempt(&mut kubelet, &pod, &app(0, "exit 5", None));
    assert_eq!((status.exit_code, status.reason.as_str()), (5, "Error"));
    let (tasks, containers) = containerd_lists(&containerd);
    eprintln!("after the exit, containerd's tasks {tasks:?}, containers {containers:?}");
    assert!(
        tasks.iter().all(|(id, _)| *id != failed),
        "the CRI plugin deletes an exited container's task: {tasks:?}"
    );
    assert!(containers.contains(&failed), "{containers:?}");
    assert!(
        tasks
            .iter()
            .any(|(id, status)| *id == pod.id && status == "RUNNING"),
        "the sandbox's task runs: {tasks:?}"
    );

    // Long enough for the start and exit times to be in order whatever the clocks.
    let (completed, status) = run_attempt(&mut kubelet, &pod, &app(1, "sleep 0.2; exit 0", None));
    assert_eq!((status.exit_code, status.reason.as_str()), (0, "Completed"));
    assert!(
        status.finished_at - status.started_at >= 100_000_000,
        "{status:#?}"
    );

    // busybox `tail` keeps a whole "line" of /dev/zero (no newline ever) in memory.
    let (oom, status) = run_attempt(
        &mut kubelet,
        &pod,
        &app(2, "tail /dev/zero", Some(16 << 20)),
    );
    assert_eq!(status.exit_code, 137, "{status:#?}");
    let t = Instant::now();
    let status = kubelet.wait_status(&oom, DEADLINE, "to be OOMKilled", |s| {
        s.reason == "OOMKilled"
    });
    eprintln!("OOMKilled {:?} after EXITED was first seen", t.elapsed());
    assert_eq!(status.exit_code, 137);

    let listed = kubelet.list_containers();
    assert_eq!(listed.len(), 3, "{listed:#?}");
    assert!(
        listed.iter().all(
            |c| c.state == ContainerState::ContainerExited as i32 && c.pod_sandbox_id == pod.id
        ),
        "{listed:#?}"
    );

    let t = Instant::now();
    for id in [&failed, &completed, &oom] {
        kubelet.stop_container(id, 0);
        kubelet.remove_container(id);
    }
    eprintln!("3 × StopContainer+RemoveContainer {:?}", t.elapsed());
    let t = Instant::now();
    kubelet.stop_pod(&pod.id);
    eprintln!("StopPodSandbox {:?}", t.elapsed());
    let t = Instant::now();
    kubelet.remove_pod(&pod.id);
    eprintln!("RemovePodSandbox {:?}", t.elapsed());

    assert_eq!(kubelet.list_containers(), vec![]);
    assert_eq!(kubelet.list_pods(), vec![]);
    assert_eq!(containerd_lists(&containerd), (vec![], vec![]));
    eprintln!("whole test {:?}", t0.elapsed());
}
