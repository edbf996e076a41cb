-- Who published each event: the process on the unix socket (its uid, gid and pid as
-- the kernel reported them when it connected) or, over mutual TLS, the subject of the
-- client's certificate (RFC 4514, "CN=node-7,O=Example"). One typed column each, so
-- `WHERE publisher_uid = 1000` needs no JSON functions (and can be indexed by whoever
-- needs it often). All four NULL: no client of ours sent it (an upstream's event,
-- eventgate's own, a TCP client without a certificate) or it was stored before this
-- version. Adding columns only rewrites the schema, not the rows: instant on any store.
--
-- The hash chain covers them for rows that have a publisher; rows without one hash
-- exactly as before (migrations/README.md, schema version 5).
ALTER TABLE events ADD COLUMN publisher_uid INTEGER;
ALTER TABLE events ADD COLUMN publisher_gid INTEGER;
ALTER TABLE events ADD COLUMN publisher_pid INTEGER;
ALTER TABLE events ADD COLUMN publisher_subject TEXT;
