//! The command line as a person uses it: clear errors that name the flag and the fix.

use crate::support;

use std::process::{Command, Stdio};

use prost::Message;
use serde_json::Value;
use support::*;

fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("run eventgate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn publish_input_errors_are_precise() {
    let gw = Gateway::start(&[]);
    let addr = gw.address();
    let base = |extra: &[&str]| {
        let mut cmd = eventgate();
        cmd.args([
            "publish",
            "--address",
            &addr,
            "-n",
            "default",
            "-t",
            "/tasks/exit",
        ])
        .args(extra);
        cmd
    };

    let (ok, _, err) = run(&mut base(&[
        "--event-type",
        "containerd.events.NoSuchThing",
        "--json",
        "{}",
    ]));
    assert!(!ok);
    assert!(err.contains("containerd.events.NoSuchThing"), "{err}");

    let (ok, _, err) = run(&mut base(&[
        "--event-type",
        "containerd.events.TaskExit",
        "--json",
        "{\"exit_status\":",
    ]));
    assert!(!ok);
    assert!(err.to_lowercase().contains("json"), "{err}");

    let (ok, _, err) = run(&mut base(&[
        "--event-type",
        "containerd.events.TaskExit",
        "--json",
        r#"{"exit_status":"three"}"#,
    ]));
    assert!(!ok, "a string is not a uint32");
    assert!(
        err.contains("exit_status") || err.to_lowercase().contains("invalid"),
        "{err}"
    );

    let (ok, _, err) = run(&mut base(&["--json", "{}"]));
    assert!(!ok);
    assert!(
        err.contains("--event-type"),
        "clap names the missing flag: {err}"
    );

    // Stdin that is not a binary Any.
    let (ok, err) = run_with_stdin(&mut base(&[]), b"\xff\xff\xff not protobuf");
    assert!(!ok);
    assert!(
        err.contains("not a binary-encoded google.protobuf.Any"),
        "{err}"
    );

    // The server's verdict comes back with its code.
    let (ok, _, err) = run(eventgate().args([
        "publish",
        "--address",
        &addr,
        "-n",
        "bad ns",
        "-t",
        "/x",
        "--event-type",
        "containerd.events.TaskOOM",
        "--json",
        "{}",
    ]));
    assert!(!ok);
    assert!(
        err.contains("InvalidArgument") && err.contains("namespace validation"),
        "{err}"
    );
}

#[test]
fn clients_say_when_nothing_listens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("none.sock");
    let (ok, _, err) = run(eventgate().args([
        "publish",
        "--address",
        path_str(&sock),
        "-n",
        "default",
        "-t",
        "/x",
        "--event-type",
        "containerd.events.TaskOOM",
        "--json",
        "{}",
    ]));
    assert!(!ok);
    assert!(err.contains("cannot connect to"), "{err}");
    let (ok, _, err) = run(eventgate().args(["events", "--address", path_str(&sock)]));
    assert!(!ok);
    assert!(err.contains("cannot connect to"), "{err}");
}

#[test]
fn events_prints_json_lines_and_keeps_unknown_payloads() {
    let gw = Gateway::start(&[]);
    let mut cmd = eventgate();
    cmd.args(["events", "--address", &gw.address(), "--format", "json"]);
    let watcher = Watcher::spawn(cmd);
    prove_live(&gw.address(), &watcher);

    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"c1","exit_status":3,"exited_at":"2024-05-01T10:00:00.5Z"}"#,
    );
    assert!(ok, "{err}");
    // A custom event type, piped in as `containerd publish` would.
    let custom = prost_types::Any {
        type_url: "example.com.Custom".into(),
        value: vec![1, 2, 3],
    };
    let (ok, err) = run_with_stdin(
        eventgate().args([
            "publish",
            "--address",
            &gw.address(),
            "-n",
            "default",
            "-t",
            "/custom/thing",
        ]),
        &custom.encode_to_vec(),
    );
    assert!(ok, "{err}");

    let lines = without_probes(
        watcher
            .stdout
            .until("/custom/thing", |l| l.contains("/custom/thing")),
    );
    let exit: Value = serde_json::from_str(&lines[0]).expect("json line");
    assert_eq!(exit["namespace"], "default");
    assert_eq!(exit["topic"], "/tasks/exit");
    assert_eq!(exit["type_url"], "containerd.events.TaskExit");
    assert_eq!(exit["event"]["exit_status"], 3);
    assert_eq!(exit["event"]["exited_at"], "2024-05-01T10:00:00.500000000Z");
    let custom: Value = serde_json::from_str(&lines[1]).expect("json line");
    assert_eq!(custom["type_url"], "example.com.Custom");
    assert_eq!(custom["event"], Value::Null);
    assert_eq!(custom["raw"], "AQID");
}

#[test]
fn events_rejects_a_bad_filter_with_a_pointer() {
    let gw = Gateway::start(&[]);
    let (ok, _, err) =
        run(eventgate().args(["events", "--address", &gw.address(), "topic~=\"[\""]));
    assert!(!ok);
    assert!(err.contains("InvalidArgument"), "{err}");
    assert!(err.contains("invalid regular expression"), "{err}");
}

#[test]
fn check_config_accepts_the_example_and_names_bad_keys() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/eventgate.example.toml");
    let (ok, out, err) = run(eventgate().args(["check-config", example]));
    assert!(ok, "{err}");
    assert!(out.contains(": ok"), "{out}");

    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[exchange]\nsubscriber_queue = 0\n").expect("write");
    let (ok, _, err) = run(eventgate().args(["check-config", path_str(&bad)]));
    assert!(!ok);
    assert!(err.contains("exchange.subscriber_queue"), "{err}");

    std::fs::write(&bad, "[exchange]\nsokcet = \"/x\"\n").expect("write");
    let (ok, _, err) = run(eventgate().args(["check-config", path_str(&bad)]));
    assert!(!ok);
    assert!(err.contains("sokcet"), "{err}");

    let (ok, _, err) = run(eventgate().args(["serve", "--config", path_str(&bad)]));
    assert!(!ok, "serve refuses a bad config");
    assert!(err.contains("sokcet"), "{err}");

    // A duration no clock can add is refused naming its key, by both.
    std::fs::write(
        &bad,
        "[exchange.limits]
request_timeout = \"1000000000y\"\n",
    )
    .expect("write");
    for command in ["check-config", "serve --config"] {
        let mut cmd = eventgate();
        cmd.args(command.split(' ')).arg(&bad);
        let (ok, _, err) = run(&mut cmd);
        assert!(!ok, "{command} accepted it");
        assert!(
            err.contains("`exchange.limits.request_timeout`")
                && err.contains("more than 100 years")
                && !err.contains("panicked"),
            "{command}: {err}"
        );
    }

    // Matching filters needs some CPU, and there is only one core's worth to pace.
    for value in ["0", "101"] {
        std::fs::write(
            &bad,
            format!("[exchange.limits]\nfilter_cpu_percent = {value}\n"),
        )
        .expect("write");
        for command in ["check-config", "serve --config"] {
            let mut cmd = eventgate();
            cmd.args(command.split(' ')).arg(&bad);
            let (ok, _, err) = run(&mut cmd);
            assert!(!ok, "{command} accepted filter_cpu_percent = {value}");
            assert!(
                err.contains("`exchange.limits.filter_cpu_percent`")
                    && err.contains(&format!("{value} is not a share of one core from 1 to 100")),
                "{command}: {err}"
            );
        }
    }

    // A checkpoint that never comes would leave the sink's copy unbounded in age.
    for (checkpoint, key) in [
        (r#"{ interval = "0s" }"#, "`checkpoint.interval`"),
        (r#"{ interval = "2h" }"#, "`checkpoint.interval`"),
        (r#"{ bytes = 0 }"#, "`checkpoint.bytes`"),
        (r#"{ every = "1s" }"#, "every"),
    ] {
        std::fs::write(
            &bad,
            format!("[[forwarder]]\nname = \"log\"\nkind = \"file\"\ncheckpoint = {checkpoint}\n"),
        )
        .expect("write");
        for command in ["check-config", "serve --config"] {
            let mut cmd = eventgate();
            cmd.args(command.split(' ')).arg(&bad);
            let (ok, _, err) = run(&mut cmd);
            assert!(!ok, "{command} accepted checkpoint = {checkpoint}");
            assert!(
                err.contains(key) && err.contains("log") && !err.contains("panicked"),
                "{command}: {err}"
            );
        }
    }
}

#[test]
fn serve_refuses_bad_upstream_flags_before_starting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = path_str(dir.path());
    let cases: [(&[&str], &str); 3] = [
        (&["--upstream", ""], "`address`"),
        (
            &["--upstream", "a=/run/x.sock", "--upstream", "a=/run/y.sock"],
            "unique",
        ),
        (&["--upstream", "bad name=/run/x.sock"], "`name`"),
    ];
    for (flags, expected) in cases {
        let (ok, _, err) = run(eventgate().args(["serve", "--data-dir", data]).args(flags));
        assert!(!ok, "{flags:?} was accepted");
        assert!(
            err.contains("upstream") && err.contains(expected),
            "{flags:?}: {err}"
        );
    }
    // Nothing was started: no socket left behind.
    assert!(!dir.path().join("eventgate.sock").exists());
}

/// The kafka forwarder's security keys and librdkafka's own refusals: both
/// check-config and serve refuse them before anything connects, naming the key or
/// the librdkafka property, and never showing a secret read from a file.
#[test]
fn check_config_and_serve_refuse_bad_kafka_security_by_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(dir.path(), "kafka");
    let password = dir.path().join("password");
    std::fs::write(&password, "s3cr3t-pw\n").expect("write");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").expect("write");
    let (ca, password, empty) = (path_str(&pki.ca), path_str(&password), path_str(&empty));
    let cases = [
        (
            format!(r#"tls = {{ ca = "{}/missing.pem" }}"#, dir.path().display()),
            "cannot read `tls.ca` file",
        ),
        (format!(r#"tls = {{ ca = "{password}" }}"#), "`tls.ca` file"),
        (
            format!(r#"tls = {{ ca = "{ca}", cert = "{ca}" }}"#),
            "`tls.cert` needs `tls.key`",
        ),
        (
            format!(r#"tls = {{ ca = "{ca}", verify = false }}"#),
            "unknown field `verify`",
        ),
        (
            r#"sasl = { mechanism = "SCRAM-SHA-1" }"#.to_owned(),
            "\"SCRAM-SHA-256\", \"SCRAM-SHA-512\"",
        ),
        (
            r#"sasl = { mechanism = "PLAIN", username = "u" }"#.to_owned(),
            "needs `sasl.password_file`",
        ),
        (
            format!(
                r#"sasl = {{ mechanism = "SCRAM-SHA-512", username = "u", password_file = "{empty}" }}"#
            ),
            "`sasl.password_file` file",
        ),
        (
            format!(
                r#"sasl = {{ mechanism = "OAUTHBEARER", username = "u", password_file = "{password}" }}"#
            ),
            "are for PLAIN and SCRAM",
        ),
        (
            r#"sasl = { mechanism = "SCRAM-SHA-256", username = "u", password_file = "/dev/zero" }"#
                .to_owned(),
            "holds more than 65536 bytes",
        ),
        (
            r#"sasl = { mechanism = "GSSAPI" }"#.to_owned(),
            "needs `sasl.kerberos",
        ),
        (
            r#"properties = { "compression.type" = "brotli" }"#.to_owned(),
            "\"compression.type\"",
        ),
        (
            r#"properties = { "no.such.property" = 1 }"#.to_owned(),
            "\"no.such.property\"",
        ),
        (
            format!(
                r#"sasl = {{ mechanism = "PLAIN", username = "u", password_file = "{password}" }}
properties = {{ "sasl.oauthbearer.method" = "oidc-ish" }}"#
            ),
            "",
        ),
    ];
    let config = dir.path().join("kafka.toml");
    for (keys, wanted) in &cases {
        std::fs::write(
            &config,
            format!(
                "[[forwarder]]\nname = \"k\"\nkind = \"kafka\"\nbrokers = \"127.0.0.1:1\"\ntopic = \"events\"\n{keys}\n"
            ),
        )
        .expect("write");
        // A config that is fine would leave serve running: only check-config for it.
        let commands: &[&str] = if wanted.is_empty() {
            &["check-config"]
        } else {
            &["check-config", "serve --config"]
        };
        for command in commands {
            let mut cmd = eventgate();
            cmd.args(command.split(' ')).arg(&config);
            if command.starts_with("serve") {
                cmd.args(["--data-dir", path_str(&dir.path().join("data"))]);
            }
            let (ok, out, err) = run(&mut cmd);
            if wanted.is_empty() {
                // The typed `sasl` key owns every `sasl.*` property: the passthrough
                // one is dropped, not handed to librdkafka to refuse.
                assert!(ok, "{command} refused {keys}: {err}");
                assert!(
                    err.contains("`sasl` PLAIN without `tls` sends the credentials in clear text"),
                    "{command} did not warn of a password in clear text: {err}"
                );
                continue;
            }
            assert!(!ok, "{command} accepted {keys}: {out}");
            assert!(
                err.contains(wanted) && err.contains("\"k\"") && !err.contains("panicked"),
                "{command} with {keys}: {err}"
            );
            assert!(
                !err.contains("s3cr3t-pw"),
                "{command} showed a secret: {err}"
            );
        }
    }
    // What the build supports is accepted: TLS with a CA, SCRAM, OIDC, zstd.
    std::fs::write(
        &config,
        format!(
            r#"[[forwarder]]
name = "k"
kind = "kafka"
brokers = "127.0.0.1:1"
topic = "events"
tls = {{ ca = "{ca}" }}
sasl = {{ mechanism = "OAUTHBEARER", oidc = {{ token_endpoint = "https://idp.invalid/token", client_id = "eventgate", client_secret_file = "{password}" }} }}
properties = {{ "compression.type" = "zstd" }}

[[forwarder]]
name = "k2"
kind = "kafka"
brokers = "127.0.0.1:1"
topic = "events"
sasl = {{ mechanism = "SCRAM-SHA-512", username = "u", password_file = "{password}" }}
properties = {{ "compression.type" = "lz4" }}
"#
        ),
    )
    .expect("write");
    let (ok, out, err) = run(eventgate().args(["check-config", path_str(&config)]));
    assert!(ok && out.contains(": ok"), "{out}{err}");
    assert!(!out.contains("s3cr3t-pw") && !err.contains("s3cr3t-pw"));
    // SCRAM never sends the password itself, and OIDC's token goes over TLS here.
    assert!(!err.contains("clear text"), "{err}");
}

/// `eventgate man` writes a page for the command and for every subcommand `--help`
/// lists, each a roff page naming its flags; `completions bash` is a script bash
/// reads, and an unknown shell is refused with the ones there are.
#[test]
fn man_pages_and_completions_cover_every_subcommand() {
    let (ok, help, _) = run(eventgate().arg("--help"));
    assert!(ok);
    let subcommands: Vec<String> = help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        // A description's wrapped lines are indented further.
        .filter(|line| !line[2..].starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect();
    assert!(subcommands.len() > 10, "{help}");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let (ok, _, stderr) = run(eventgate().arg("man").arg("--out-dir").arg(&out));
    assert!(ok, "{stderr}");
    for name in std::iter::once("eventgate".to_owned())
        .chain(subcommands.iter().map(|s| format!("eventgate-{s}")))
    {
        let page = std::fs::read_to_string(out.join(format!("{name}.1")))
            .unwrap_or_else(|e| panic!("{name}.1: {e}"));
        assert!(page.contains(".TH"), "{name}.1: {page}");
    }
    let serve = std::fs::read_to_string(out.join("eventgate-serve.1")).unwrap();
    assert!(serve.contains("\\-\\-data\\-dir"), "{serve}");
    assert!(out.join("eventgate-audit-verify.1").is_file());

    let (ok, bash, stderr) = run(eventgate().args(["completions", "bash"]));
    assert!(ok, "{stderr}");
    for name in &subcommands {
        assert!(bash.contains(name.as_str()), "{name} in the bash script");
    }
    let script = dir.path().join("eventgate.bash");
    std::fs::write(&script, &bash).unwrap();
    let checked = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    for shell in ["zsh", "fish"] {
        let (ok, script, stderr) = run(eventgate().args(["completions", shell]));
        assert!(ok && script.contains("check-config"), "{shell}: {stderr}");
    }
    let (ok, _, stderr) = run(eventgate().args(["completions", "tcsh"]));
    assert!(!ok);
    assert!(
        stderr.contains("invalid value 'tcsh'") && stderr.contains("bash, zsh, fish"),
        "{stderr}"
    );
}
