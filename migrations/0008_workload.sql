-- What containerd's record of the event's container said when the event was captured
-- (an upstream's events about a container): on Kubernetes, the pod and container
-- names the CRI plugin keeps as labels; elsewhere, the image and labels. By the time
-- someone asks about an event, the container may be long gone and its id meaningless.
--
-- pod_name, pod_namespace, pod_uid, container_name: the CRI labels
-- io.kubernetes.pod.name, .pod.namespace, .pod.uid, io.kubernetes.container.name;
-- container_kind: io.cri-containerd.kind, 'sandbox' (the pod's pause container) or
-- 'container'; image: the record's image reference (NULL when it has none); labels:
-- the record's other labels as one JSON object of strings (NULL when none). All NULL
-- for events about no container, for containers whose record said nothing, and for
-- rows stored before this version. Nullable columns without a default only change
-- the schema, not the rows: instant on any store.
--
-- The hash chain covers the seven for rows where one is not NULL; other rows hash
-- exactly as before (migrations/README.md, schema version 8).
ALTER TABLE events ADD COLUMN pod_name TEXT;
ALTER TABLE events ADD COLUMN pod_namespace TEXT;
ALTER TABLE events ADD COLUMN pod_uid TEXT;
ALTER TABLE events ADD COLUMN container_name TEXT;
ALTER TABLE events ADD COLUMN container_kind TEXT;
ALTER TABLE events ADD COLUMN image TEXT;
ALTER TABLE events ADD COLUMN labels TEXT;

-- One pod's rows: (pod_name, pod_namespace, row_id), so `eventgate query --pod web-7`
-- finds the namespaces a name is used in from the index alone, and `--pod web-7
-- --pod-namespace shop` (or `pod.name==web-7,pod.namespace==shop`) reads the pod's
-- rows in gateway order without sorting. Partial: rows without a pod (every row of a
-- node without Kubernetes, and every row stored before this version) are not in it,
-- so inserting them does not touch it, and building it on an existing store reads
-- the table once and writes nothing (no row has a pod yet). A query term `pod_name = ?` implies the index's WHERE clause, so SQLite
-- uses it with a bound value.
CREATE INDEX events_pod ON events (pod_name, pod_namespace) WHERE pod_name IS NOT NULL;
