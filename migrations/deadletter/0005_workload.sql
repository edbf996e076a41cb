-- What the event's container record said when the event was captured (pod, container
-- name, kind, image, labels), as in the audit store's columns (migrations/
-- 0008_workload.sql): a redelivered dead letter reaches its forwarder with it, so
-- Kafka headers and JSON lines still name the pod. One column, the Workload message's
-- protobuf encoding (the encoding the spool keeps, so fields added to it later need
-- no migration here); NULL for events without one and for entries recorded before
-- this version.
ALTER TABLE dead_letters ADD COLUMN workload BLOB;
