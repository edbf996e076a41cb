//! What containerd's record of an event's container said when the event was
//! captured: on Kubernetes, the pod and container names the CRI plugin keeps as
//! labels; elsewhere, the image and labels the container has. By the time someone
//! asks about an event the container may be long gone and its id mean nothing, so
//! this travels with the event into every record.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The CRI plugin's labels on every container and sandbox it creates.
pub(crate) const POD_NAME: &str = "io.kubernetes.pod.name";
pub(crate) const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub(crate) const POD_UID: &str = "io.kubernetes.pod.uid";
pub(crate) const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// `sandbox` (the pod's pause container) or `container`.
pub(crate) const KIND: &str = "io.cri-containerd.kind";

/// Labels kept per event at most, and their bytes (keys and values) at most: a
/// container's labels are the daemon's, not a client's, but every event repeats them.
pub(crate) const MAX_LABELS: usize = 64;
pub(crate) const MAX_LABEL_BYTES: usize = 16 * 1024;
/// Longer texts (an image reference, a CRI field) are cut at a character boundary.
pub(crate) const MAX_TEXT: usize = 1024;

/// An event's container as its record described it. Also its encoding in the spool
/// and in dead letters (protobuf, so fields can be added).
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct Workload {
    /// `io.cri-containerd.kind`: `sandbox` or `container`.
    #[prost(string, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_namespace: Option<String>,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The container's name in its pod spec (`io.kubernetes.container.name`).
    #[prost(string, optional, tag = "5")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// The container record's image reference; empty when it has none.
    #[prost(string, tag = "6")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// The record's other labels (the CRI ones above are not repeated here).
    #[prost(btree_map = "string, string", tag = "7")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Why the container is in the state this event leaves it in, as the manager
    /// above containerd recorded it: the CRI's `reason` (`OOMKilled`, `Error`,
    /// `Completed`), or `OOMKilled` from dockerd's `State.OOMKilled`. Set only on the
    /// events a reconcile reconstructs from that record (containerd's own events
    /// carry no reason); not part of the container's description that later events
    /// repeat.
    #[prost(string, optional, tag = "8")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Workload {
    /// From a container record's image and labels; `None` when it says nothing.
    pub fn from_record(
        image: &str,
        labels: impl IntoIterator<Item = (String, String)>,
    ) -> Option<Workload> {
        let mut workload = Workload {
            image: clip(image).to_owned(),
            ..Workload::default()
        };
        let mut bytes = 0;
        for (key, value) in labels {
            let slot = match key.as_str() {
                KIND => &mut workload.kind,
                POD_NAME => &mut workload.pod_name,
                POD_NAMESPACE => &mut workload.pod_namespace,
                POD_UID => &mut workload.pod_uid,
                CONTAINER_NAME => &mut workload.container_name,
                _ => {
                    bytes += key.len() + value.len();
                    if workload.labels.len() < MAX_LABELS && bytes <= MAX_LABEL_BYTES {
                        workload.labels.insert(key, value);
                    }
                    continue;
                }
            };
            *slot = Some(clip(&value).to_owned());
        }
        (workload != Workload::default()).then_some(workload)
    }

    /// Every field that is set, as `(name, text)`: the Kafka header names; labels as
    /// one JSON object; the manager's `reason` last. CloudEvents extensions use the
    /// same names without `_`.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::with_capacity(8);
        let optional = [
            ("pod_name", &self.pod_name),
            ("pod_namespace", &self.pod_namespace),
            ("pod_uid", &self.pod_uid),
            ("container_name", &self.container_name),
            ("container_kind", &self.kind),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                out.push((name, value.clone()));
            }
        }
        if !self.image.is_empty() {
            out.push(("image", self.image.clone()));
        }
        if !self.labels.is_empty() {
            let labels = serde_json::to_string(&self.labels).unwrap_or_default();
            out.push(("container_labels", labels));
        }
        if let Some(reason) = &self.reason {
            out.push(("reason", reason.clone()));
        }
        out
    }

    /// Whether the CRI plugin made this container (it has a pod).
    pub fn is_kubernetes(&self) -> bool {
        self.pod_name.is_some() || self.pod_uid.is_some()
    }

    /// The object's Kubernetes name, `pod/container` (or `pod` for a sandbox).
    pub fn display_name(&self) -> Option<String> {
        let pod = self.pod_name.as_deref()?;
        Some(match &self.container_name {
            Some(container) => format!("{pod}/{container}"),
            None => pod.to_owned(),
        })
    }
}

fn clip(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn cri_labels_become_fields_and_the_rest_stay_labels() {
        let w = Workload::from_record(
            "docker.io/library/nginx:1.27",
            labels(&[
                (POD_NAME, "web-7"),
                (POD_NAMESPACE, "shop"),
                (POD_UID, "0b1c"),
                (CONTAINER_NAME, "nginx"),
                (KIND, "container"),
                ("io.cri-containerd.image", "managed"),
            ]),
        )
        .unwrap();
        assert_eq!(w.pod_name.as_deref(), Some("web-7"));
        assert_eq!(w.pod_namespace.as_deref(), Some("shop"));
        assert_eq!(w.pod_uid.as_deref(), Some("0b1c"));
        assert_eq!(w.container_name.as_deref(), Some("nginx"));
        assert_eq!(w.kind.as_deref(), Some("container"));
        assert_eq!(w.image, "docker.io/library/nginx:1.27");
        assert_eq!(w.labels.len(), 1);
        assert!(w.is_kubernetes());
        assert_eq!(w.display_name().as_deref(), Some("web-7/nginx"));
        assert_eq!(Workload::decode(w.encode_to_vec().as_slice()).unwrap(), w);
    }

    #[test]
    fn plain_containers_keep_image_and_labels_and_empty_records_say_nothing() {
        let w = Workload::from_record("busybox", labels(&[("app", "db")])).unwrap();
        assert!(!w.is_kubernetes());
        assert_eq!(w.display_name(), None);
        assert_eq!(w.labels["app"], "db");
        assert_eq!(Workload::from_record("", Vec::new()), None);
    }

    #[test]
    fn labels_and_texts_are_bounded() {
        let many: Vec<(String, String)> = (0..1000)
            .map(|i| (format!("k{i:04}"), "v".repeat(100)))
            .collect();
        let w = Workload::from_record(&"é".repeat(5000), many).unwrap();
        assert!(w.labels.len() <= MAX_LABELS);
        let bytes: usize = w.labels.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(bytes <= MAX_LABEL_BYTES);
        assert!(w.image.len() <= MAX_TEXT && w.image.starts_with('é'));
    }
}
