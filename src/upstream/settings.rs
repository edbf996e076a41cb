//! `[[upstream]]` tables and the `serve --upstream [NAME=]ADDRESS` flag.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::client::Address;
use crate::filter::Filter;

/// One upstream Events endpoint to subscribe to: a containerd socket, or another
/// eventgate.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    /// Labels the upstream in gap markers, logs and metrics. Defaults to the socket's
    /// file name without extension (`containerd` for `/run/containerd/containerd.sock`).
    #[serde(default)]
    pub name: String,
    /// A socket path, `unix://PATH`, or `HOST:PORT` for a TCP endpoint.
    pub address: String,
    /// Sent to the upstream with Subscribe, in containerd's filter language; empty
    /// means every event. The upstream applies them, so unmatched events never cross.
    #[serde(default)]
    pub filters: Vec<String>,
    #[serde(default)]
    pub reconnect: ReconnectSettings,
    /// How long one connection attempt may take before it counts as failed.
    #[serde(
        default = "default_connect_timeout",
        with = "crate::units::duration_text"
    )]
    pub connect_timeout: Duration,
    /// How often, while subscribed, the daemon's state is listed and compared with
    /// the record (it is also done on every (re)connect); `0s` turns the periodic
    /// one off.
    #[serde(
        default = "default_reconcile_interval",
        with = "crate::units::duration_text"
    )]
    pub reconcile_interval: Duration,
    /// Attach what containerd's record of each event's container says (pod, container
    /// name, kind, image, labels) as the event is captured (see `enrich`).
    #[serde(default = "default_enrich")]
    pub enrich: bool,
    /// The Kubernetes CRI, asked at every reconcile for what containerd deletes (a
    /// container's exit, kept until the kubelet removes it): `"auto"` (the default)
    /// asks the upstream's own socket and goes without where the CRI is not served;
    /// `"off"`; or another CRI socket's address.
    #[serde(default)]
    pub cri: ManagerSetting,
    /// dockerd's Engine API, for Docker's names, images and labels on every record of
    /// a Docker container and for what dockerd deletes from containerd: `"auto"` (the
    /// default) uses `/var/run/docker.sock` when it exists and the upstream has
    /// dockerd's namespace (`moby`); `"off"`; or the Engine API socket's path.
    #[serde(default)]
    pub docker: ManagerSetting,
}

/// `cri` and `docker`: `"auto"`, `"off"`, or an address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ManagerSetting {
    #[default]
    Auto,
    Off,
    Address(String),
}

impl ManagerSetting {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(ManagerSetting::Auto),
            "off" => Ok(ManagerSetting::Off),
            "" => Err("must be \"auto\", \"off\" or a socket address, not empty".into()),
            address => match Address::parse(address).map_err(|e| e.to_string())? {
                Address::Unix(path) if path.as_os_str().is_empty() => {
                    Err(format!("{address:?} names no socket path"))
                }
                _ => Ok(ManagerSetting::Address(address.to_owned())),
            },
        }
    }

    pub fn text(&self) -> &str {
        match self {
            ManagerSetting::Auto => "auto",
            ManagerSetting::Off => "off",
            ManagerSetting::Address(address) => address,
        }
    }
}

impl<'de> Deserialize<'de> for ManagerSetting {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ManagerSetting::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for ManagerSetting {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.text())
    }
}

fn default_enrich() -> bool {
    true
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_reconcile_interval() -> Duration {
    Duration::from_secs(300)
}

/// `reconnect = { initial = "100ms", max = "30s", stable = "10s" }`
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconnectSettings {
    /// Delay before the first reconnection attempt; it doubles per failed attempt.
    #[serde(with = "crate::units::duration_text")]
    pub initial: Duration,
    /// The longest delay between attempts.
    #[serde(with = "crate::units::duration_text")]
    pub max: Duration,
    /// A subscription that lived this long resets the delay to `initial`; one that
    /// breaks sooner keeps backing off, so an upstream that accepts and immediately
    /// drops the stream is not hammered (nor the audit trail flooded with markers).
    #[serde(with = "crate::units::duration_text")]
    pub stable: Duration,
}

impl Default for ReconnectSettings {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(30),
            stable: Duration::from_secs(10),
        }
    }
}

impl UpstreamSpec {
    pub fn new(address: &str) -> Self {
        Self {
            name: String::new(),
            address: address.to_owned(),
            filters: Vec::new(),
            reconnect: ReconnectSettings::default(),
            connect_timeout: default_connect_timeout(),
            reconcile_interval: default_reconcile_interval(),
            enrich: default_enrich(),
            cri: ManagerSetting::default(),
            docker: ManagerSetting::default(),
        }
    }

    /// Parses the `--upstream` flag: `ADDRESS` or `NAME=ADDRESS`.
    pub fn from_flag(text: &str) -> Self {
        match text.split_once('=') {
            Some((name, address)) if !name.contains('/') => {
                let mut spec = Self::new(address);
                spec.name = name.to_owned();
                spec
            }
            _ => Self::new(text),
        }
    }

    /// The configured name, or one derived from the address.
    pub fn effective_name(&self) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        let derived = match Address::parse(&self.address) {
            Ok(Address::Unix(path)) => path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Ok(Address::Tcp(uri)) => uri.trim_start_matches("http://").to_owned(),
            Err(_) => String::new(),
        };
        let name: String = derived
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if name.is_empty() {
            "upstream".into()
        } else {
            name
        }
    }

    pub fn filter(&self) -> Result<Filter, crate::filter::ParseError> {
        Filter::parse_all(&self.filters)
    }

    /// Everything that can be checked without connecting.
    pub fn validate(&self) -> Result<(), String> {
        let name = self.effective_name();
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "`name` {name:?} must be letters, digits, '-' or '_' (it labels markers, metrics and logs)"
            ));
        }
        Address::parse(&self.address).map_err(|e| format!("`address`: {e}"))?;
        // The upstream parses them too, but a typo should fail here, at start, with
        // our message pointing at the bad character, not as a reconnect loop.
        self.filter().map_err(|e| format!("`filters`: {e}"))?;
        let r = &self.reconnect;
        if r.initial.is_zero() {
            return Err("`reconnect.initial` must be more than 0s".into());
        }
        if r.max < r.initial {
            return Err(format!(
                "`reconnect.max` ({}) must not be less than `reconnect.initial` ({})",
                humantime::format_duration(r.max),
                humantime::format_duration(r.initial)
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err("`connect_timeout` must be more than 0s".into());
        }
        if let ManagerSetting::Address(address) = &self.docker
            && !matches!(Address::parse(address), Ok(Address::Unix(_)))
        {
            return Err(format!(
                "`docker` {address:?}: dockerd's Engine API is read on a unix socket (a path or unix://PATH)"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_derived_from_addresses() {
        let name = |address: &str| UpstreamSpec::new(address).effective_name();
        assert_eq!(name("/run/containerd/containerd.sock"), "containerd");
        assert_eq!(
            name("unix:///run/k3s/containerd/containerd.sock"),
            "containerd"
        );
        assert_eq!(name("127.0.0.1:7338"), "127-0-0-1-7338");
        let flag = UpstreamSpec::from_flag("node=/run/containerd/containerd.sock");
        assert_eq!(flag.effective_name(), "node");
        assert_eq!(flag.address, "/run/containerd/containerd.sock");
        // An '=' inside a path is part of the path.
        let odd = UpstreamSpec::from_flag("/tmp/a=b/c.sock");
        assert_eq!(odd.address, "/tmp/a=b/c.sock");
    }

    #[test]
    fn bad_specs_are_explained() {
        let mut spec = UpstreamSpec::new("/run/containerd/containerd.sock");
        assert_eq!(spec.validate(), Ok(()));
        spec.filters = vec!["topic==\"/tasks/exit".into()];
        assert!(spec.validate().unwrap_err().contains("filters"));
        spec.filters.clear();
        spec.reconnect.max = Duration::from_millis(10);
        assert!(spec.validate().unwrap_err().contains("reconnect.max"));
        spec.reconnect = ReconnectSettings::default();
        spec.name = "a b".into();
        assert!(spec.validate().unwrap_err().contains("name"));
        spec.name.clear();
        spec.address.clear();
        assert!(spec.validate().unwrap_err().contains("address"));
        let mut spec = UpstreamSpec::new("/run/containerd/containerd.sock");
        spec.docker = ManagerSetting::parse("127.0.0.1:2375").unwrap();
        assert!(spec.validate().unwrap_err().contains("unix socket"));
        spec.docker = ManagerSetting::parse("unix:///run/docker.sock").unwrap();
        assert_eq!(spec.validate(), Ok(()));
    }

    #[test]
    fn managers_are_auto_off_or_an_address_and_anything_else_is_named() {
        let spec: UpstreamSpec = toml::from_str("address = \"/run/c.sock\"").unwrap();
        assert_eq!(
            (spec.cri.clone(), spec.docker.clone()),
            (ManagerSetting::Auto, ManagerSetting::Auto)
        );
        let spec: UpstreamSpec = toml::from_str(
            "address = \"/run/c.sock\"\ncri = \"off\"\ndocker = \"unix:///run/docker.sock\"",
        )
        .unwrap();
        assert_eq!(spec.cri, ManagerSetting::Off);
        assert_eq!(
            spec.docker,
            ManagerSetting::Address("unix:///run/docker.sock".into())
        );
        for (bad, says) in [
            ("cri = \"\"", "not empty"),
            ("cri = 5", "invalid type"),
            ("docker = \"unix://\"", "names no socket path"),
        ] {
            let error =
                toml::from_str::<UpstreamSpec>(&format!("address = \"/run/c.sock\"\n{bad}"))
                    .unwrap_err()
                    .to_string();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
