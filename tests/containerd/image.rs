//! The image as a Kubernetes node runs it: built offline by deploy/image/build.sh (a
//! base made from Debian's packages, the release binary, deploy/Containerfile's runtime
//! stage), then run under a real dockerd on the test's own containerd the way
//! deploy/kubernetes/eventgate.yaml's DaemonSet runs it: the pod spec is read from the
//! manifest and each of its settings becomes the `docker run` option that does the
//! same (a setting with no translation here fails the test, so the manifest cannot
//! drift from what is tried).
//!
//! The figures it prints (`--nocapture`) are docs/operations.md's: the image's size,
//! the time from `docker start` to a ready `/readyz`, and memory at rest.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_yaml_ng::Value;
use support::audit::{Row, markers, stored, wait_stored};
use support::containerd::{Containerd, Tasks};
use support::docker::Dockerd;
use support::*;

const RECONCILED: &str = "/eventgate/upstream/reconciled";

/// The node the pod is scheduled on, as the downward API's `spec.nodeName` gives it.
const NODE_NAME: &str = "node-image-test";

/// The issue's goal for the image, in bytes as docker counts them (10^6 to a MB).
const SIZE_GOAL: u64 = 120_000_000;

/// How the manifest's pod is run here.
struct PodRun {
    /// `docker run` options before the image.
    options: Vec<String>,
    /// The container's `args`.
    args: Vec<String>,
    /// `terminationGracePeriodSeconds`: what `docker stop -t` is given.
    grace: u64,
    /// The probes' port (the named container port) and paths.
    port: u16,
    liveness: String,
    readiness: String,
}

fn str_of<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {value:?}"))
}

/// Fails on a key this translation does not know: a new setting in the manifest must
/// be tried here too.
fn only_keys(value: &Value, known: &[&str], what: &str) {
    let Some(map) = value.as_mapping() else {
        return;
    };
    for key in map.keys() {
        let key = str_of(key, what);
        assert!(
            known.contains(&key),
            "{what}.{key} has no translation in tests/containerd/image.rs"
        );
    }
}

/// "512Mi" as bytes.
fn quantity(text: &str) -> u64 {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let number: u64 = number.parse().unwrap_or_else(|_| panic!("quantity {text}"));
    number
        * match unit {
            "" => 1,
            "Ki" => 1 << 10,
            "Mi" => 1 << 20,
            "Gi" => 1 << 30,
            other => panic!("quantity unit {other} in {text}"),
        }
}

/// The DaemonSet's pod as `docker run` options. hostPath volumes are at `host(path)`
/// (a `DirectoryOrCreate` one is made as the kubelet makes it); the ConfigMap's files
/// are written to `config_dir`.
fn daemonset(host: &dyn Fn(&str) -> PathBuf, config_dir: &Path) -> PodRun {
    let text = std::fs::read_to_string(support::deploy::deploy("kubernetes/eventgate.yaml"))
        .expect("the manifest");
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("YAML"))
        .collect();
    let kind = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(kind))
            .unwrap_or_else(|| panic!("no {kind} in the manifest"))
    };
    let config_map = kind("ConfigMap");
    let pod = &kind("DaemonSet")["spec"]["template"]["spec"];
    only_keys(
        pod,
        &[
            "securityContext",
            "terminationGracePeriodSeconds",
            "containers",
            "volumes",
        ],
        "pod",
    );
    let containers = pod["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    let container = &containers[0];
    only_keys(
        container,
        &[
            "name",
            "image",
            "imagePullPolicy",
            "env",
            "args",
            "ports",
            "livenessProbe",
            "readinessProbe",
            "resources",
            "securityContext",
            "volumeMounts",
        ],
        "container",
    );

    // docker's network "none" leaves the container its own loopback only: the probes
    // reach it from inside the namespace, as the kubelet reaches the pod's address.
    let mut options: Vec<String> = vec!["--network".into(), "none".into()];
    let pod_security = &pod["securityContext"];
    only_keys(
        pod_security,
        &["runAsUser", "runAsGroup", "seccompProfile"],
        "pod.securityContext",
    );
    // RuntimeDefault is the runtime's own profile: docker's default seccomp profile.
    assert_eq!(
        pod_security["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    let user = pod_security["runAsUser"].as_u64().expect("runAsUser");
    let group = pod_security["runAsGroup"].as_u64().expect("runAsGroup");
    options.extend(["--user".into(), format!("{user}:{group}")]);

    let security = &container["securityContext"];
    only_keys(
        security,
        &[
            "allowPrivilegeEscalation",
            "readOnlyRootFilesystem",
            "capabilities",
        ],
        "container.securityContext",
    );
    if security["allowPrivilegeEscalation"].as_bool() == Some(false) {
        options.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    if security["readOnlyRootFilesystem"].as_bool() == Some(true) {
        options.push("--read-only".into());
    }
    only_keys(&security["capabilities"], &["drop", "add"], "capabilities");
    for (key, flag) in [("drop", "--cap-drop"), ("add", "--cap-add")] {
        for capability in security["capabilities"][key]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            options.extend([flag.into(), str_of(capability, key).into()]);
        }
    }
    only_keys(
        &container["resources"],
        &["requests", "limits"],
        "resources",
    );
    only_keys(&container["resources"]["limits"], &["memory"], "limits");
    if let Some(memory) = container["resources"]["limits"]["memory"].as_str() {
        options.extend(["--memory".into(), quantity(memory).to_string()]);
    }

    let volumes = pod["volumes"].as_sequence().expect("volumes");
    for mount in container["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
    {
        only_keys(mount, &["name", "mountPath", "readOnly"], "volumeMounts");
        let name = str_of(&mount["name"], "name");
        let target = str_of(&mount["mountPath"], "mountPath");
        let volume = volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"));
        let source = if let Some(config) = volume["configMap"].as_mapping() {
            only_keys(&volume["configMap"], &["name"], "configMap");
            assert_eq!(
                config.get("name").and_then(Value::as_str),
                config_map["metadata"]["name"].as_str()
            );
            for (file, content) in config_map["data"].as_mapping().expect("data") {
                std::fs::write(
                    config_dir.join(str_of(file, "key")),
                    str_of(content, "data"),
                )
                .expect("the ConfigMap's file");
            }
            config_dir.to_owned()
        } else {
            let host_path = &volume["hostPath"];
            only_keys(host_path, &["path", "type"], "hostPath");
            let source = host(str_of(&host_path["path"], "path"));
            match str_of(&host_path["type"], "type") {
                "DirectoryOrCreate" => std::fs::create_dir_all(&source).expect("hostPath"),
                "Socket" => assert!(
                    source.exists(),
                    "{} for the Socket volume",
                    source.display()
                ),
                other => panic!("hostPath type {other} has no translation here"),
            }
            source
        };
        // A ConfigMap volume is read-only whatever the mount says.
        let read_only =
            mount["readOnly"].as_bool() == Some(true) || volume["configMap"].is_mapping();
        options.extend([
            "--volume".into(),
            format!(
                "{}:{target}{}",
                source.display(),
                if read_only { ":ro" } else { "" }
            ),
        ]);
    }

    let port_name = str_of(&container["readinessProbe"]["httpGet"]["port"], "port");
    let port = container["ports"]
        .as_sequence()
        .expect("ports")
        .iter()
        .find(|p| p["name"].as_str() == Some(port_name))
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .expect("the probes' named port");
    let probe_path = |probe: &str| {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["port"].as_str(), Some(port_name), "{probe} port");
        str_of(&get["path"], probe).to_owned()
    };
    // Environment variables, from values or the downward API, and `$(NAME)` in args
    // expanded from them as the kubelet does.
    let mut env: Vec<(String, String)> = Vec::new();
    for variable in container["env"].as_sequence().into_iter().flatten() {
        only_keys(variable, &["name", "value", "valueFrom"], "env");
        let name = str_of(&variable["name"], "env name").to_owned();
        let value = if let Some(value) = variable["value"].as_str() {
            value.to_owned()
        } else {
            only_keys(&variable["valueFrom"], &["fieldRef"], "valueFrom");
            match str_of(&variable["valueFrom"]["fieldRef"]["fieldPath"], "fieldPath") {
                "spec.nodeName" => NODE_NAME.to_owned(),
                other => panic!("fieldPath {other} has no translation here"),
            }
        };
        options.extend(["--env".into(), format!("{name}={value}")]);
        env.push((name, value));
    }
    let args = container["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(|a| {
            env.iter()
                .fold(str_of(a, "args").to_owned(), |arg, (name, value)| {
                    arg.replace(&format!("$({name})"), value)
                })
        })
        .collect();
    PodRun {
        options,
        args,
        grace: pod["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("terminationGracePeriodSeconds"),
        port,
        liveness: probe_path("livenessProbe"),
        readiness: probe_path("readinessProbe"),
    }
}

/// deploy/image/build.sh against `dockerd`, on the cached base root (made once per
/// machine); the image's tag.
fn build_image(dockerd: &Dockerd) -> String {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = checkout.join("deploy/image/build.sh");
    let packages = Command::new(&script)
        .arg("--packages")
        .output()
        .expect("deploy/image/build.sh --packages");
    assert!(packages.status.success(), "{packages:?}");
    let include = String::from_utf8(packages.stdout).expect("UTF-8");
    let root = support::debian_root::cached_with(include.trim());
    let tag = "eventgate:image-test";
    // No EVENTGATE_BINARY: the script builds (or finds fresh) the release binary, the
    // one the image ships.
    let built = Command::new(&script)
        .args(["--tag", tag])
        .env("EVENTGATE_BASE_ROOT", &root)
        .env("DOCKER", support::docker::DOCKER_CLI)
        .env("DOCKER_HOST", format!("unix://{}", dockerd.address()))
        .env("DOCKER_CONFIG", dockerd.dir.path().join("cli"))
        .output()
        .expect("deploy/image/build.sh");
    assert!(
        built.status.success(),
        "deploy/image/build.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    tag.to_owned()
}

/// The container's main process as the host sees it.
fn pid_of(dockerd: &Dockerd, name: &str) -> u32 {
    let pid = dockerd.cli(&["inspect", "-f", "{{.State.Pid}}", name]);
    pid.parse().unwrap_or_else(|_| panic!("pid {pid}"))
}

/// Waits for the readiness probe's 200, probing every 10 ms; the wait. A container
/// that exits or stays unready fails the test with its logs.
fn wait_ready(dockerd: &Dockerd, name: &str, pod: &PodRun) -> Duration {
    let started = Instant::now();
    let pid = pid_of(dockerd, name);
    loop {
        if let Ok((200, _)) = http_in_netns(pid, pod.port, &pod.readiness) {
            return started.elapsed();
        }
        let state = dockerd.inspect(name)["State"].clone();
        assert!(
            state["Running"] == true && started.elapsed() < DEADLINE,
            "{name} not ready after {:?} ({state}); it logged:\n{}",
            started.elapsed(),
            logs(dockerd, name)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the container wrote to stdout and stderr.
fn logs(dockerd: &Dockerd, name: &str) -> String {
    let out = dockerd
        .docker()
        .args(["logs", name])
        .output()
        .expect("docker logs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn about<'a>(rows: &'a [Row], container: &str) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| r.namespace == "default" && r.container() == Some(container))
        .collect()
}

#[test]
fn the_image_built_offline_runs_as_the_daemonset_runs_it() {
    let containerd = Containerd::start();
    containerd.import_busybox();
    let mut dockerd = Dockerd::start(&containerd);
    dockerd.load_busybox();
    let image = build_image(&dockerd);
    let size: u64 = dockerd
        .cli(&["image", "inspect", "-f", "{{.Size}}", &image])
        .parse()
        .expect("the image's size");
    eprintln!("image size: {:.1} MB", size as f64 / 1e6);
    assert!(size < SIZE_GOAL, "the image is {size} bytes");
    // Its packages, user and entrypoint are the Containerfile's runtime stage's.
    let config = dockerd.inspect(&image)["Config"].clone();
    assert_eq!(config["User"], "10001:10001", "{config}");
    assert_eq!(
        config["Entrypoint"][0], "/usr/local/bin/eventgate",
        "{config}"
    );

    // A node without dockerd takes the image from `docker save` into the CRI's
    // namespace of its containerd (the DaemonSet's imagePullPolicy: IfNotPresent).
    let archive = dockerd.dir.path().join("eventgate-image.tar");
    let saved = dockerd
        .docker()
        .args(["save", "--output", path_str(&archive), &image])
        .status()
        .expect("docker save");
    assert!(saved.success());
    containerd.ctr_in("k8s.io", &["images", "import", path_str(&archive)]);
    let listed = containerd.ctr_in("k8s.io", &["images", "ls", "--quiet"]);
    assert!(
        listed
            .lines()
            .any(|l| l == format!("docker.io/library/{image}")),
        "{listed}"
    );

    let node = tempfile::tempdir().expect("tempdir");
    let config_dir = node.path().join("configmap");
    std::fs::create_dir(&config_dir).expect("configmap dir");
    let host = |path: &str| -> PathBuf {
        if path == "/run/containerd/containerd.sock" {
            containerd.socket.clone()
        } else {
            node.path().join(path.trim_start_matches('/'))
        }
    };
    let pod = daemonset(&host, &config_dir);
    let audit = host("/var/lib/eventgate").join("audit.db");
    let socket = host("/run/eventgate").join("eventgate.sock");
    let name = "eventgate-node";
    dockerd.run_image(name, &pod.options, &image, &pod.args);
    let first_ready = wait_ready(&dockerd, name, &pod);
    let pid = pid_of(&dockerd, name);
    let (code, body) = http_in_netns(pid, pod.port, &pod.liveness).expect("liveness probe");
    assert_eq!(code, 200, "{body}");

    // The first reconcile takes the node's state as its baseline (a pod stopped
    // before it has nothing to compare a restart with); the snapshot follows the
    // marker to disk.
    wait_stored(&audit, "the baseline reconcile", |r| r.topic == RECONCILED);
    let snapshot = host("/var/lib/eventgate").join("state/containerd.json");
    wait_for("the baseline snapshot", DEADLINE, || {
        snapshot.exists().then_some(())
    });

    // Containers started on the node's containerd, by ctr and by dockerd, are stored.
    let mut tasks = Tasks::new(&containerd);
    let victim = format!("eg-image-victim-{}", std::process::id());
    tasks.run("default", &victim, &[], &["/bin/busybox", "sleep", "1000"]);
    let docker_id = dockerd.run("eg-image-once", &[], "exit 4");
    wait_stored(&audit, "the ctr container's start", |r| {
        r.topic == "/tasks/start" && r.container() == Some(victim.as_str())
    });
    let rows = wait_stored(&audit, "the docker container's exit", |r| {
        r.namespace == "moby"
            && r.topic == "/tasks/exit"
            && r.container() == Some(docker_id.as_str())
    });
    let exit = rows
        .iter()
        .find(|r| r.topic == "/tasks/exit" && r.container() == Some(docker_id.as_str()))
        .expect("the exit");
    assert_eq!(exit.event["exit_status"], 4, "{exit:?}");
    // Recorded as captured on the node, not on the pod's host name.
    let nodes: std::collections::BTreeSet<&str> =
        rows.iter().filter_map(|r| r.node.as_deref()).collect();
    assert_eq!(
        nodes,
        [NODE_NAME].into(),
        "the pod's host name is {}",
        dockerd.cli(&["inspect", "-f", "{{.Config.Hostname}}", name])
    );
    // The node socket on the hostPath serves the node's clients.
    let (ok, err) = publish_json(
        path_str(&socket),
        "default",
        "/node/hello",
        "containerd.events.TaskOOM",
        r#"{"container_id":"node-client"}"#,
    );
    assert!(ok, "publish through the node socket: {err}");
    wait_stored(&audit, "the node client's event", |r| {
        r.topic == "/node/hello"
    });
    let rss_at_rest = rss_kib(pid);

    // SIGTERM (docker stop, as the kubelet stops a pod) while a client publishes:
    // every Publish that returned OK is stored, and the process is done well within
    // the grace period (else docker would SIGKILL it: exit 137).
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let publisher = {
        let (stop, acked, address) = (stop.clone(), acked.clone(), path_str(&socket).to_owned());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(publish_until(
                &address,
                &stop,
                |n| format!("drain-{n}"),
                |id| acked.lock().expect("acked").push(id),
            ));
        })
    };
    wait_for("a stream of publishes", DEADLINE, || {
        (acked.lock().expect("acked").len() >= 200).then_some(())
    });
    let stopping = Instant::now();
    dockerd.cli(&["stop", "-t", &pod.grace.to_string(), name]);
    let stopped_in = stopping.elapsed();
    stop.store(true, Ordering::SeqCst);
    publisher.join().expect("the publisher");
    let state = dockerd.inspect(name)["State"].clone();
    assert_eq!(state["ExitCode"], 0, "{state}");
    assert_eq!(state["OOMKilled"], false, "{state}");
    let acked = acked.lock().expect("acked").clone();
    let rows = stored(&audit);
    let missing: Vec<&String> = acked
        .iter()
        .filter(|id| !rows.iter().any(|r| r.container() == Some(id.as_str())))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged publishes not stored: {missing:?}",
        missing.len(),
        acked.len()
    );

    // The node changes while eventgate is down; its restart records what happened.
    containerd.ctr_in("default", &["task", "kill", "-s", "SIGKILL", &victim]);
    containerd.wait_stopped("default", &victim);
    let newcomer = format!("eg-image-newcomer-{}", std::process::id());
    tasks.run(
        "default",
        &newcomer,
        &[],
        &["/bin/busybox", "sleep", "1000"],
    );
    let restarting = Instant::now();
    dockerd.cli(&["start", name]);
    let ready_again = wait_ready(&dockerd, name, &pod);
    let ready_again_total = restarting.elapsed();
    let deadline = Instant::now() + DEADLINE;
    let rows = loop {
        let rows = stored(&audit);
        if markers(&rows, RECONCILED).len() >= 2 {
            break rows;
        }
        assert!(
            Instant::now() < deadline,
            "no reconcile after the restart within {DEADLINE:?}; markers {:?}; the container logged:\n{}",
            markers(&rows, RECONCILED),
            logs(&dockerd, name)
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let marker = markers(&rows, RECONCILED)[1];
    assert_eq!(marker.event["baseline"], false, "{marker:?}");
    let victim_rows = about(&rows, &victim);
    let gap: Vec<(&str, &str)> = victim_rows
        .iter()
        .filter(|r| r.origin == "reconciled")
        .map(|r| (r.topic.as_str(), r.origin.as_str()))
        .collect();
    assert_eq!(gap, [("/tasks/exit", "reconciled")], "{victim_rows:?}");
    let newcomer_rows: Vec<(&str, &str)> = about(&rows, &newcomer)
        .iter()
        .map(|r| (r.topic.as_str(), r.origin.as_str()))
        .collect();
    assert_eq!(
        newcomer_rows,
        [
            ("/containers/create", "reconciled"),
            ("/tasks/start", "reconciled")
        ]
    );
    let pid = pid_of(&dockerd, name);
    let rss_restarted = rss_kib(pid);
    dockerd.cli(&["stop", "-t", &pod.grace.to_string(), name]);
    assert_eq!(dockerd.inspect(name)["State"]["ExitCode"], 0);

    eprintln!(
        "image: {:.1} MB; ready {} ms after docker run returned (empty data dir), {} ms \
         after docker start returned on the existing data dir ({} ms from invoking it); \
         stopped in {} ms (grace {} s) with {} publishes acknowledged; VmRSS at rest {} \
         KiB, {} KiB after the restart",
        size as f64 / 1e6,
        first_ready.as_millis(),
        ready_again.as_millis(),
        ready_again_total.as_millis(),
        stopped_in.as_millis(),
        pod.grace,
        acked.len(),
        rss_at_rest,
        rss_restarted
    );
}
