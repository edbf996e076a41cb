//! Tests against a private PostgreSQL cluster each starts (tests/support/postgres.rs):
//! Debian's server binaries run as the `postgres` user on a free loopback port, read
//! back with psql. Built only with the `postgres-tests` feature; a test that also
//! mounts a file system (a full table space) needs root and `privileged-tests` too,
//! and the fleet's (tansu, a Kafka-protocol broker) `kafka-tests`.

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "kafka-tests")]
mod central_verify;
#[cfg(feature = "kafka-tests")]
mod fleet;
mod forwarder;
mod harness;
mod query;
