//! What a new configuration changes: forwarders compared by name, and the other keys
//! that only take effect at the next start.

use crate::config::{Config, ForwarderSpec};

/// Forwarders of the running and the new configuration, compared by name.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan<'a> {
    /// Only in the new configuration.
    pub added: Vec<&'a ForwarderSpec>,
    /// Only in the running configuration.
    pub removed: Vec<&'a ForwarderSpec>,
    /// In both, with any key different: (running, new).
    pub changed: Vec<(&'a ForwarderSpec, &'a ForwarderSpec)>,
    /// In both, identical: left running untouched.
    pub unchanged: Vec<&'a ForwarderSpec>,
}

/// Compares forwarder lists by name; each list keeps its configuration order.
pub(crate) fn forwarders<'a>(running: &'a [ForwarderSpec], new: &'a [ForwarderSpec]) -> Plan<'a> {
    let mut plan = Plan::default();
    for spec in new {
        match running.iter().find(|r| r.name == spec.name) {
            None => plan.added.push(spec),
            Some(old) if old == spec => plan.unchanged.push(spec),
            Some(old) => plan.changed.push((old, spec)),
        }
    }
    plan.removed = running
        .iter()
        .filter(|r| !new.iter().any(|n| n.name == r.name))
        .collect();
    plan
}

/// Dotted keys, other than the forwarders, whose values differ: these need a
/// restart (sockets, listeners, the spool, upstreams...). Compared as the TOML the
/// configuration renders to, so every key is covered, present and future.
pub(crate) fn restart_keys(running: &Config, new: &Config) -> Vec<String> {
    let table = |config: &Config| {
        let mut value = toml::Value::try_from(config).ok();
        if let Some(toml::Value::Table(table)) = value.as_mut() {
            table.remove("forwarder");
        }
        value
    };
    let mut keys = Vec::new();
    differing("", table(running).as_ref(), table(new).as_ref(), &mut keys);
    keys
}

fn differing(
    prefix: &str,
    a: Option<&toml::Value>,
    b: Option<&toml::Value>,
    keys: &mut Vec<String>,
) {
    match (a, b) {
        (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => {
            let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
            names.sort();
            names.dedup();
            for name in names {
                let key = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                differing(&key, a.get(name), b.get(name), keys);
            }
        }
        (a, b) if a != b => keys.push(prefix.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::Options;

    fn nothing_to_do(plan: &Plan<'_>) -> bool {
        plan.added.is_empty() && plan.removed.is_empty() && plan.changed.is_empty()
    }

    fn file(name: &str, path: &str) -> ForwarderSpec {
        let mut options = Options::new();
        options.insert("path".into(), path.into());
        ForwarderSpec::new(name, "file", options)
    }

    fn names(specs: &[&ForwarderSpec]) -> Vec<String> {
        specs.iter().map(|s| s.name.clone()).collect()
    }

    #[test]
    fn forwarders_are_compared_by_name_and_whole_spec() {
        let mut narrowed = file("b", "b.jsonl");
        narrowed.filters = vec!["topic==\"/tasks/exit\"".into()];
        let mut bigger_batches = file("c", "c.jsonl");
        bigger_batches.batch.events = 10;
        let running = [
            file("a", "a.jsonl"),
            file("b", "b.jsonl"),
            file("c", "c.jsonl"),
            file("d", "d.jsonl"),
            file("e", "e.jsonl"),
        ];
        let new = [
            file("e", "elsewhere.jsonl"),
            narrowed,
            bigger_batches,
            file("a", "a.jsonl"),
            file("f", "f.jsonl"),
        ];
        let plan = forwarders(&running, &new);
        assert_eq!(names(&plan.added), ["f"]);
        assert_eq!(names(&plan.removed), ["d"]);
        assert_eq!(names(&plan.unchanged), ["a"]);
        let changed: Vec<(&str, &str)> = plan
            .changed
            .iter()
            .map(|(old, new)| (old.name.as_str(), new.name.as_str()))
            .collect();
        assert_eq!(changed, [("e", "e"), ("b", "b"), ("c", "c")]);
        assert_eq!(plan.changed[0].0.options["path"].as_str(), Some("e.jsonl"));
        assert_eq!(
            plan.changed[0].1.options["path"].as_str(),
            Some("elsewhere.jsonl")
        );
        assert!(!nothing_to_do(&plan));
    }

    #[test]
    fn a_kind_change_is_a_change_and_identical_lists_are_no_change() {
        let running = [file("a", "a.db")];
        let mut sqlite = file("a", "a.db");
        sqlite.kind = "sqlite".into();
        let plan = forwarders(&running, std::slice::from_ref(&sqlite));
        assert_eq!(plan.changed.len(), 1);
        let same = forwarders(&running, &running);
        assert!(nothing_to_do(&same));
        assert_eq!(names(&same.unchanged), ["a"]);
        let emptied = forwarders(&running, &[]);
        assert_eq!(names(&emptied.removed), ["a"]);
    }

    #[test]
    fn keys_that_need_a_restart_are_named_and_forwarders_are_not() {
        let running = Config::default();
        let mut new = Config::default();
        assert!(restart_keys(&running, &new).is_empty());
        new.forwarders.push(file("extra", "extra.jsonl"));
        assert!(restart_keys(&running, &new).is_empty());
        new.exchange.listen = Some("127.0.0.1:7338".parse().unwrap());
        new.data_dir = "/var/lib/eventgate".into();
        new.spool.segment_bytes = crate::units::ByteSize(1 << 20);
        new.upstreams.push(crate::upstream::UpstreamSpec::from_flag(
            "/run/containerd/containerd.sock",
        ));
        assert_eq!(
            restart_keys(&running, &new),
            [
                "data_dir",
                "exchange.listen",
                "spool.segment_bytes",
                "upstream"
            ]
        );
    }
}
