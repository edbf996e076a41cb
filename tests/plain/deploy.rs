//! What can be checked here of `deploy/`: the systemd unit's command lines work, the
//! Kubernetes manifests are valid YAML whose probes, ports and mounts agree with the
//! config they carry (which passes `check-config`), and the container build runs as a
//! non-root user. `systemd-analyze verify` of the unit: tests/tools/deploy.rs.

use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_yaml_ng::Value;
use support::deploy::{deploy, service_keys, value};
use support::{eventgate, wait_for};

/// The unit's two command lines, with its paths moved into a temp dir: the check
/// passes on the example config, and serve starts, answers and stops on SIGTERM.
#[test]
fn the_units_command_lines_work() {
    let unit = std::fs::read_to_string(deploy("systemd/eventgate.service")).unwrap();
    let keys = service_keys(&unit);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventgate.toml");
    std::fs::copy(deploy("eventgate.example.toml"), &config).unwrap();
    let state = dir.path().join("state");
    let args = |line: &str| -> Vec<String> {
        line.split_whitespace()
            .skip(1)
            .map(|a| {
                a.replace("/etc/eventgate/eventgate.toml", config.to_str().unwrap())
                    .replace("/var/lib/eventgate", state.to_str().unwrap())
            })
            .collect()
    };

    let check = eventgate()
        .args(args(value(&keys, "ExecStartPre")))
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");

    let (env_key, env_value) = value(&keys, "Environment").split_once('=').unwrap();
    assert_eq!(env_key, "EVENTGATE_CONFIG");
    assert_eq!(env_value, "/etc/eventgate/eventgate.toml");
    let mut serve = eventgate()
        .args(args(value(&keys, "ExecStart")))
        .env("EVENTGATE_CONFIG", &config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = state.join("eventgate.sock");
    wait_for(
        "the socket in the state directory",
        Duration::from_secs(20),
        || socket.exists().then_some(()),
    );
    let pid = nix::unistd::Pid::from_raw(serve.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = wait_for("exit after SIGTERM", Duration::from_secs(20), || {
        serve.try_wait().unwrap()
    });
    assert!(status.success(), "{status:?}");
    assert!(state.join("audit.db").exists());
}

fn documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(deploy(file)).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} in the manifest"))
}

fn str_at<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {value:?}"))
}

#[test]
fn the_daemonset_probes_the_admin_endpoint_and_mounts_what_its_config_names() {
    let docs = documents("kubernetes/eventgate.yaml");
    let config_map = kind(&docs, "ConfigMap");
    let daemon_set = kind(&docs, "DaemonSet");
    let pod = &daemon_set["spec"]["template"]["spec"];
    let container = &pod["containers"][0];

    // The config the ConfigMap carries is valid, and the pod matches it.
    let toml_text = str_at(&config_map["data"]["eventgate.toml"], "eventgate.toml");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("eventgate.toml");
    std::fs::write(&file, toml_text).unwrap();
    let check = eventgate().arg("check-config").arg(&file).output().unwrap();
    assert!(check.status.success(), "{check:?}");
    let config: toml::Table = toml_text.parse().unwrap();

    let admin_port = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("admin"))
        .expect("a port named admin")["containerPort"]
        .as_u64()
        .unwrap();
    let listen = config["admin"]["listen"].as_str().unwrap();
    assert!(listen.ends_with(&format!(":{admin_port}")), "{listen}");
    assert_eq!(config["admin"]["allow_remote"].as_bool(), Some(true));
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(str_at(&get["path"], probe), path);
        assert_eq!(str_at(&get["port"], probe), "admin");
    }

    let mounts = container["volumeMounts"].as_sequence().unwrap();
    let volumes = pod["volumes"].as_sequence().unwrap();
    let mount = |path: &str| {
        let mount = mounts
            .iter()
            .find(|m| m["mountPath"].as_str() == Some(path))
            .unwrap_or_else(|| panic!("nothing mounted at {path}"));
        let name = mount["name"].as_str().unwrap();
        let volume = volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"));
        (mount.clone(), volume.clone())
    };
    let upstream = config["upstream"][0]["address"].as_str().unwrap();
    let (socket_mount, socket_volume) = mount(upstream);
    assert_eq!(socket_mount["readOnly"].as_bool(), Some(true));
    assert_eq!(
        str_at(&socket_volume["hostPath"]["path"], "hostPath"),
        upstream
    );
    assert_eq!(str_at(&socket_volume["hostPath"]["type"], "type"), "Socket");

    let data_dir = config["data_dir"].as_str().unwrap();
    let (data_mount, data_volume) = mount(data_dir);
    assert_ne!(data_mount["readOnly"].as_bool(), Some(true));
    assert!(
        data_volume["hostPath"].is_mapping(),
        "the data survives the pod"
    );
    let (config_mount, _) = mount("/etc/eventgate");
    assert_eq!(config_mount["readOnly"].as_bool(), Some(true));
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "serve",
            "--config",
            "/etc/eventgate/eventgate.toml",
            "--node",
            "$(NODE_NAME)"
        ]
    );
    // Each event is recorded with the node's name, which only the downward API knows
    // (the pod's host name is the pod's).
    let env = container["env"].as_sequence().expect("env");
    let node_name = env
        .iter()
        .find(|e| e["name"].as_str() == Some("NODE_NAME"))
        .expect("NODE_NAME in env");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("spec.nodeName")
    );
}

#[test]
fn the_container_build_copies_what_exists_and_runs_as_a_non_root_user() {
    let text = std::fs::read_to_string(deploy("Containerfile")).unwrap();
    let ignore = std::fs::read_to_string(deploy("Containerfile.dockerignore")).unwrap();
    // Each stage by the name after `AS`.
    let stages: Vec<(&str, &str)> = text
        .split("\nFROM ")
        .skip(1)
        .map(|stage| {
            let first = stage.lines().next().unwrap();
            let name = first.rsplit_once(" AS ").expect("a named stage").1;
            (name.trim(), stage)
        })
        .collect();
    let stage = |name: &str| {
        stages
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no stage {name}"))
            .1
    };
    let names: Vec<&str> = stages.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["build", "prebuilt", "binary", "runtime"]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The prebuilt stage copies from the context deploy/image/build.sh assembles; the
    // others from the checkout, through the ignore file.
    for (name, body) in stages.iter().filter(|(n, _)| *n != "prebuilt") {
        for line in body
            .lines()
            .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
        {
            let words: Vec<&str> = line.split_whitespace().collect();
            for source in &words[1..words.len() - 1] {
                assert!(
                    root.join(source).exists(),
                    "{name}: {line}: {source} does not exist"
                );
                assert!(
                    ignore.lines().any(|l| l == format!("!{source}")),
                    "{source} is left out of the build context"
                );
            }
        }
    }
    // Both ways to the binary leave it where the runtime stage takes it.
    let built = stage("build")
        .lines()
        .find(|l| l.contains("cargo build --release"))
        .expect("the release build");
    assert!(built.contains("--bin eventgate"), "{built}");
    let prebuilt = stage("prebuilt")
        .lines()
        .find(|l| l.starts_with("COPY "))
        .unwrap();
    let binary_path = prebuilt.split_whitespace().last().unwrap();
    assert_eq!(binary_path, "/src/target/release/eventgate");
    assert!(stage("build").contains("WORKDIR /src\n"));

    let runtime = stage("runtime");
    let user = runtime
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the runtime stage sets USER");
    assert!(
        !["0", "root", "0:0"].contains(&user.trim()),
        "runs as {user}"
    );
    let copied = runtime
        .lines()
        .find(|l| l.starts_with("COPY --from=binary"))
        .unwrap();
    let words: Vec<&str> = copied.split_whitespace().collect();
    assert_eq!(words[2], binary_path, "{copied}");
    let binary = words[3];
    assert!(
        runtime.contains(&format!("ENTRYPOINT [\"{binary}\"]")),
        "the entrypoint is the copied binary {binary}"
    );
}
