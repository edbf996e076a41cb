//! What the unit tests build their cases from, so that each builds events, stores,
//! spools and fake forwarders the same way:
//! - [`event`] and [`envelope`]: builders with defaults a test overrides only where
//!   its case differs (namespace `default`, topic `/tasks/exit`, no timestamp, no
//!   payload, [`Source::Publish`](crate::event::Source::Publish), live);
//! - [`TempStore`] and [`TempSpool`]: an audit store or a spool in a temporary
//!   directory that lives as long as they do;
//! - [`Scripted`]: a forwarder that fails as a test tells it and records what it got;
//! - [`MemoryBacklog`]: a forwarder's backlog in memory, without a spool.
//!
//! Integration tests have their own, `tests/support`.

mod backlog;
mod events;
mod forwarder;
mod stores;

pub(crate) use backlog::MemoryBacklog;
pub(crate) use events::{T0, envelope, event, json_any, pod_workload, workload};
pub(crate) use forwarder::Scripted;
pub(crate) use stores::{TempSpool, TempStore, insert, spool_settings};

/// `incoming` appended to `exchange` and acknowledged once durable, as Publish and
/// Forward acknowledge it.
pub(crate) async fn accept(
    exchange: &crate::exchange::Exchange,
    incoming: crate::exchange::Incoming,
) -> Result<std::sync::Arc<crate::event::Event>, crate::exchange::AcceptError> {
    exchange.append(incoming).await?.acknowledged().await
}
