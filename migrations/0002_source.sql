-- Where each event came from: "publish", "forward", "upstream:<name>" (a subscribed
-- containerd, by its configured name) or "eventgate" (the gateway's own events, such
-- as upstream gap markers). With two upstreams whose namespaces overlap, this column
-- is what tells their events apart. NULL for rows stored before this version.
ALTER TABLE events ADD COLUMN source TEXT;
