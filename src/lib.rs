//! eventgate: a containerd-compatible event exchange that forwards and keeps every event.
//!
//! The map of the crate, in the order an event travels:
//! - `upstream`: subscriptions to containerd sockets, feeding the exchange, each event
//!   enriched with its pod and container (`upstream/enrich.rs`).
//! - `reconcile`: after a gap, the daemon's state compared with what was recorded,
//!   the differences recorded as events.
//! - `node`: the node name kept with every event (default: the host name).
//! - `source`: `[[source]]`, events other gateways produced, taken in from Kafka
//!   with the id, node, seq and times they had there.
//! - `markers`: the events eventgate writes about itself (where an upstream's record
//!   breaks, resumes or was reconciled; what a full spool discarded).
//! - `exchange`: containerd's Events gRPC service (Publish, Forward, Subscribe), the
//!   hub that orders events and fans them out, its `[exchange]` settings and limits.
//! - `identifiers`: containerd's namespace and topic rules.
//! - [`filter`]: containerd's filter language (parse, match).
//! - [`event`]: the one event type that flows everywhere (envelope, sequence, id,
//!   origin, publisher, workload).
//! - [`publisher`]: who published an event (unix peer credentials or the client
//!   certificate's subject), kept with it everywhere.
//! - `spool`: the durable on-disk log every accepted event is appended to before it
//!   is acknowledged, with per-forwarder cursors.
//! - `pipeline`: the `[[forwarder]]` table, route filters, bounded queues, batching,
//!   retries, checkpoints.
//! - [`forward`]: the [`forward::Forwarder`] and [`forward::Kind`] traits and the file,
//!   SQLite and Kafka kinds.
//! - `correlate`: a forwarder's optional stage that holds back an event storm's
//!   repeats and sends one aggregate in their place.
//! - `deadletter`: events forwarders gave up on, kept for `eventgate dlq`.
//! - `store`: the SQLite audit store (schema, migrations, writer and reader
//!   connections), written by the `sqlite` forwarder and read by queries.
//! - `note`: signed notes (C2SP signed-note, Go's sumdb note format): the keys that
//!   sign checkpoints of the audit store's chain head, and opening what they signed.
//! - `tlog`: the RFC 6962 Merkle tree over the audit store's rows, its tree heads
//!   (C2SP tlog-checkpoint) and witness cosignatures (C2SP tlog-cosignature).
//! - `witness`: `eventgate witness`, a C2SP tlog-witness server that cosigns
//!   checkpoints consistent with the ones it cosigned before, and the client a log
//!   submits its checkpoints with.
//! - `query`: `eventgate query` and `stats`: filters as SQL over the audit store.
//! - `replay`: `eventgate replay`: stored events sent again, resumable.
//! - `resume`: the resumable Subscribe (`eventgate events --since/--after`): stored
//!   events from a position, then live ones, handed over at an exact seq.
//! - [`proto`]: generated wire types, the registry of known event types, JSON shapes.
//! - `render`: `ctr events` lines and JSON lines.
//! - [`gateway`]: wiring and graceful shutdown (`listen`: sockets; `lock`: one gateway
//!   per data directory; `connections`: the cap on client connections per listener).
//! - `admin`: the HTTP endpoint for Prometheus metrics, health, readiness and status.
//!   Each module names and describes the metrics it records in a table (`metric`).
//! - [`client`] and [`tls`]: connecting to an Events endpoint (eventgate or containerd).
//! - [`errors`]: an error and its causes on one line, for logs and markers.
//! - [`config`]: assembles the tables each module owns, from defaults, the TOML file
//!   and flags, and validates them; [`units`]: sizes and durations; `reload`: applying
//!   a new configuration to a running gateway; `redact`: secrets out of logs and errors.
//! - `cli`: the `eventgate` command; `bench` (with the `bench` feature): rerunnable
//!   benchmarks; `fuzzing` (with the `fuzzing` feature): the entry points of the
//!   fuzz targets in `tests/fuzz`.
//!
//! Linked modules are the library's surface, what an embedder needs (see
//! `examples/custom_forwarder.rs` and docs/architecture.md, "Embedding"); the rest is
//! crate-private: what an embedder needs of `pipeline` is re-exported where it is
//! used (`config::ForwarderSpec` and the settings, `gateway::Report`). `internal`
//! (hidden) re-exports what the `eventgate` binary, its integration tests and its
//! benchmarks reach inside the crate: not a supported API.

// Crate-private items say so: `pub` is the library's surface (see above).
#![cfg_attr(not(test), warn(unreachable_pub))]

mod admin;
#[cfg(feature = "bench")]
mod bench;
mod cli;
pub mod client;
pub mod config;
mod connections;
mod correlate;
mod cri;
mod deadletter;
mod docker;
pub mod errors;
pub mod event;
mod exchange;
pub mod filter;
pub mod forward;
mod fsmode;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
mod identifiers;
#[doc(hidden)]
pub mod internal;
mod listen;
mod lock;
mod markers;
mod metric;
mod node;
mod note;
mod pipeline;
mod postgres;
pub mod proto;
pub mod publisher;
mod query;
mod reconcile;
mod redact;
mod reload;
mod render;
mod replay;
mod resume;
mod signer;
mod source;
mod spool;
mod store;
/// Builders and fixtures shared by the unit tests (events, temporary stores and
/// spools, a scripted forwarder).
#[cfg(test)]
pub(crate) mod testing;
mod tlog;
pub mod tls;
mod ui;
pub mod units;
mod upstream;
mod witness;
