//! Reconcile: after any gap in what an upstream delivered, compare what the daemon
//! holds with what eventgate recorded, and record the differences as events.
//!
//! - `state`: the shape both sides share.
//! - `apply`: a snapshot advanced by recorded events.
//! - `diff`: the events that explain a difference, in the order they must have
//!   happened, and what could not be known.
//! - `merge`: the snapshot a reconcile leaves.
//! - [`managed`]: what the CRI and dockerd keep that containerd deletes, folded into
//!   the daemon's side.
//! - [`list`]: the daemon's own state, through containerd's List calls.
//! - `snapshot`: one upstream's recorded state, on disk and held in the spool.
//! - `pending`: a reconcile's snapshot until its marker is durable.
//! - `run`: a run's end, and the runs a gap hid (data).
//! - `runs`: every run of a Docker container inside a gap, from dockerd's event log
//!   or its restart count.

pub(crate) mod apply;
pub(crate) mod diff;
pub(crate) mod list;
pub(crate) mod managed;
pub(crate) mod merge;
pub(crate) mod pending;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod snapshot;
pub(crate) mod state;

pub use list::list_node;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use state::ContainerState;
pub(crate) use state::NamespaceState;
#[cfg(any(test, feature = "bench", feature = "fuzzing"))]
pub(crate) use state::TaskState;
pub use state::{NodeState, TaskStatus};

#[cfg(test)]
mod tests;
