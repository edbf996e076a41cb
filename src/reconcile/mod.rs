//! Reconcile: after any gap in what an upstream delivered, compare what the daemon
//! holds with what eventgate recorded, and record the differences as events.

pub mod list;
pub mod state;

pub use list::{ListError, list_node};
pub use state::{
    ContainerState, ImageState, Labels, NamespaceState, NodeState, TaskState, TaskStatus,
};
