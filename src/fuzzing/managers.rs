//! Targets for what the managers above containerd answer a reconcile with: the
//! Kubernetes CRI and dockerd.

use super::*;

/// What a CRI runtime answers ListContainers and ContainerStatus with, read as the
/// reconcile reads them and folded into containerd's lists.
pub fn cri(data: &[u8]) {
    use crate::proto::runtime::v1 as wire;
    let mut input = Input::new(data);
    let list_len = usize::from(u16::from_le_bytes([input.byte(), input.byte()]));
    let rest = input.rest();
    let (list, statuses) = rest.split_at(list_len.min(rest.len()));
    let Ok(list) = wire::ListContainersResponse::decode(list) else {
        return;
    };
    let mut containers = BTreeMap::new();
    let mut statuses = Input::new(statuses);
    for container in &list.containers {
        let mut managed = crate::cri::managed_of(container);
        if managed.status == managed::ManagedStatus::Exited
            && let Ok(response) = wire::ContainerStatusResponse::decode(statuses.chunk())
        {
            managed.exit = crate::cri::exit_of(response);
        }
        containers.insert(container.id.clone(), managed);
    }
    fold(Witness::Cri, containers, None, data.len());
}

/// What dockerd answers its container list, an inspect and its event log with
/// (JSON, the input split at the first two NULs), read with the client's caps and
/// folded.
pub fn docker(data: &[u8]) {
    let mut pieces = data.splitn(3, |&b| b == 0);
    let list = pieces.next().unwrap_or_default();
    let inspect = pieces.next().unwrap_or_default();
    let log = crate::docker::parse_events(pieces.next().unwrap_or_default()).ok();
    let mut containers = BTreeMap::new();
    if let Ok(listed) = crate::docker::parse_list(list) {
        for container in listed {
            let managed = ManagedContainer {
                status: container.status,
                created_at: container.created_at,
                exit: None,
                workload: Some(container.workload()),
                image: container.image.clone(),
                started_at: None,
                restart_count: None,
            };
            containers.insert(container.id, managed);
        }
    }
    if let Ok(inspected) = crate::docker::parse_inspect(inspect) {
        let entry = containers
            .entry(inspected.id.clone())
            .or_insert_with(|| ManagedContainer {
                status: inspected.status,
                created_at: None,
                exit: None,
                workload: None,
                image: String::new(),
                started_at: None,
                restart_count: None,
            });
        entry.workload = Some(inspected.workload());
        entry.image = inspected.image.clone();
        entry.created_at = inspected.created_at.or(entry.created_at);
        entry.status = inspected.status;
        entry.exit = inspected.exit;
        entry.started_at = inspected.started_at;
        entry.restart_count = inspected.restart_count;
    }
    fold(Witness::Docker, containers, log, data.len());
}

/// Folds a manager's containers into a daemon state that has some of them (every
/// other one with a task), against an empty and a populated record.
fn fold(
    from: Witness,
    containers: BTreeMap<String, ManagedContainer>,
    log: Option<crate::reconcile::run::EventLog>,
    salt: usize,
) {
    let namespace = match from {
        Witness::Docker => managed::DOCKER_NAMESPACE,
        _ => "k8s.io",
    };
    let mut daemon = NodeState::default();
    let ns = daemon.namespaces.entry(namespace.to_owned()).or_default();
    for (i, id) in containers.keys().enumerate() {
        if !(i + salt).is_multiple_of(3) {
            ns.containers.insert(id.clone(), ContainerState::default());
        }
        if (i + salt).is_multiple_of(2) {
            ns.tasks.insert(id.clone(), TaskState::default());
        }
    }
    let view = ManagerView {
        from,
        containers: Some(containers),
        log,
    };
    for recorded in [NodeState::default(), daemon.clone()] {
        let exits = managed::recorded_exits(&recorded);
        if let Some(containers) = &view.containers {
            for (id, c) in containers {
                let _ = managed::needs_status(id, c.status, &daemon, &exits);
            }
        }
        let mut folded = daemon.clone();
        managed::fold(&mut folded, &recorded, &view);
        // The changes that tell a manager's runs come in the order they happened.
        let found = crate::reconcile::diff::diff(&recorded, &folded, &Default::default());
        let times: Vec<_> = found
            .changes
            .iter()
            .filter(|c| c.from == from)
            .filter_map(|c| c.daemon_time)
            .collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "a manager's runs told out of order: {found:?}"
        );
    }
}
