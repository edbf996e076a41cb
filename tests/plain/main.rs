//! The integration tests that need nothing installed: what
//! `cargo test` runs. Each module was a test binary of its own; one binary links once.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod audit;
mod checkpoints;
mod cli;
mod connections;
mod custom_forwarder;
mod dead_letters;
mod deploy;
mod exchange;
mod file_forwarder;
mod file_modes;
mod fleet;
mod formats;
mod hostile;
mod hostile_payloads;
mod kafka;
mod kafka_formats;
mod layout;
mod limits;
mod node;
mod origin;
mod own_topics;
mod picture;
mod pods;
mod poison_pill;
mod proofs;
mod publisher;
mod query;
mod reconcile_list;
mod reload;
mod removed_upstream;
mod replay;
mod resume;
mod secrets;
mod signing;
mod spool;
mod sqlite;
mod tls;
mod transparency;
mod tree_upgrade;
mod ui;
mod ui_live;
mod witness;
