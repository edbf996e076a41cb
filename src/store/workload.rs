//! The workload columns (schema version 8): what an event's container record said
//! ([`Workload`]), one typed column per field so that `where pod_name = 'web-7'` needs
//! no JSON functions, and the record's other labels as one JSON object.

use std::collections::BTreeMap;

use rusqlite::types::ValueRef;

use crate::event::Workload;

/// The columns, in table, insert and hashing order.
pub(crate) const COLUMNS: [&str; 7] = [
    "pod_name",
    "pod_namespace",
    "pod_uid",
    "container_name",
    "container_kind",
    "image",
    "labels",
];

/// One row's workload columns, borrowing from the event; all `None` for an event
/// without a workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadColumns<'a> {
    pub pod_name: Option<&'a str>,
    pub pod_namespace: Option<&'a str>,
    pub pod_uid: Option<&'a str>,
    pub container_name: Option<&'a str>,
    pub container_kind: Option<&'a str>,
    /// `None` when the record has no image (an empty reference), as the filter field
    /// `container.image` is then absent.
    pub image: Option<&'a str>,
    /// The labels as a JSON object (keys sorted); `None` when there are none.
    pub labels: Option<String>,
}

impl<'a> WorkloadColumns<'a> {
    pub fn of(workload: Option<&'a Workload>) -> Self {
        let Some(w) = workload else {
            return Self::default();
        };
        Self {
            pod_name: w.pod_name.as_deref(),
            pod_namespace: w.pod_namespace.as_deref(),
            pod_uid: w.pod_uid.as_deref(),
            container_name: w.container_name.as_deref(),
            container_kind: w.kind.as_deref(),
            image: (!w.image.is_empty()).then_some(w.image.as_str()),
            // A map of strings always serializes; an empty one is stored as NULL.
            labels: match w.labels.is_empty() {
                true => None,
                false => serde_json::to_string(&w.labels).ok(),
            },
        }
    }

    /// True when every column is NULL: the row has no workload.
    pub fn is_empty(&self) -> bool {
        self.values().iter().all(|v| *v == ValueRef::Null)
    }

    /// The values as bound and hashed, in `COLUMNS` order.
    pub fn values(&self) -> [ValueRef<'_>; 7] {
        fn text(s: Option<&str>) -> ValueRef<'_> {
            s.map_or(ValueRef::Null, |s| ValueRef::Text(s.as_bytes()))
        }
        [
            text(self.pod_name),
            text(self.pod_namespace),
            text(self.pod_uid),
            text(self.container_name),
            text(self.container_kind),
            text(self.image),
            text(self.labels.as_deref()),
        ]
    }
}

/// The workload back from its columns' values (in [`COLUMNS`] order); `None` when
/// all are NULL. Errs, naming the column, on labels that are not a JSON object of
/// strings (the row was edited).
pub(crate) fn from_columns(values: [Option<String>; 7]) -> Result<Option<Workload>, String> {
    if values.iter().all(Option::is_none) {
        return Ok(None);
    }
    let [
        pod_name,
        pod_namespace,
        pod_uid,
        container_name,
        kind,
        image,
        labels,
    ] = values;
    let labels = match labels {
        None => BTreeMap::new(),
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| format!("labels {text:?} is not a JSON object of strings: {e}"))?,
    };
    Ok(Some(Workload {
        kind,
        pod_name,
        pod_namespace,
        pod_uid,
        container_name,
        image: image.unwrap_or_default(),
        labels,
        reason: None,
    }))
}

/// `workload` with the `reason` column (schema version 12) put back in it: the
/// manager's reason travels in the workload but is stored in a column of its own,
/// since later events of the same container do not repeat it. A reason without any
/// other workload column is a workload of its own.
pub(crate) fn with_reason(workload: Option<Workload>, reason: Option<String>) -> Option<Workload> {
    match (workload, reason) {
        (workload, None) => workload,
        (workload, reason) => Some(Workload {
            reason,
            ..workload.unwrap_or_default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(columns: &WorkloadColumns<'_>) -> Option<Workload> {
        let owned = columns
            .values()
            .map(|v| v.as_str_or_null().ok().flatten().map(str::to_owned));
        from_columns(owned).unwrap()
    }

    #[test]
    fn a_workload_round_trips_through_its_columns_and_none_is_all_null() {
        let full = Workload {
            kind: Some("container".into()),
            pod_name: Some("web-7".into()),
            pod_namespace: Some("shop".into()),
            pod_uid: Some("0b1c".into()),
            container_name: Some("nginx".into()),
            image: "docker.io/library/nginx:1.27".into(),
            labels: [("app.kubernetes.io/name", "web"), ("quote\"d", "x' --")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            reason: None,
        };
        let columns = WorkloadColumns::of(Some(&full));
        assert_eq!(
            columns.labels.as_deref(),
            Some(r#"{"app.kubernetes.io/name":"web","quote\"d":"x' --"}"#)
        );
        assert_eq!(read(&columns).as_ref(), Some(&full));

        // Only an image and labels (a container no CRI plugin made).
        let plain = Workload {
            image: "busybox".into(),
            ..Workload::default()
        };
        assert_eq!(read(&WorkloadColumns::of(Some(&plain))), Some(plain));

        let none = WorkloadColumns::of(None);
        assert!(none.values().iter().all(|v| *v == ValueRef::Null));
        assert_eq!(read(&none), None);
    }

    #[test]
    fn labels_that_are_not_an_object_of_strings_are_refused() {
        for bad in ["[1]", r#"{"a":1}"#, "not json"] {
            let mut values: [Option<String>; 7] = Default::default();
            values[6] = Some(bad.to_owned());
            let error = from_columns(values).unwrap_err();
            assert!(error.contains("labels"), "{error}");
        }
    }
}
