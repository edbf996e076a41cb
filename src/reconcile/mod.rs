//! Reconcile: after any gap in what an upstream delivered, compare what the daemon
//! holds with what eventgate recorded, and record the differences as events.

pub mod state;

pub use state::{
    ContainerState, ImageState, Labels, NamespaceState, NodeState, TaskState, TaskStatus,
};
