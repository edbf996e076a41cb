//! Tests against a tansu broker each starts (tests/support/tansu.rs), read back with
//! kafka-python (tests/support/consume.py; its protocol classes drive tansu's group
//! coordinator in tests/support/group_protocol.py) and, for TLS, fronted by stunnel4. Built
//! only with the `kafka-tests` feature.

#[path = "../support/mod.rs"]
mod support;

mod durability;
mod fleet;
mod kafka;
mod kafka_formats;
mod kafka_security;
mod replay;
mod signed_checkpoints;
mod spool;
mod tansu_groups;
