//! Tests against a private PostgreSQL cluster each starts (tests/support/postgres.rs):
//! Debian's server binaries run as the `postgres` user on a free loopback port, read
//! back with psql. Built only with the `postgres-tests` feature; a test that also
//! mounts a file system (a full table space) needs root and `privileged-tests` too.

#[path = "../support/mod.rs"]
mod support;

mod forwarder;
mod harness;
mod query;
