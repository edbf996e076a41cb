//! Tests only: a gate in front of the writer's fdatasyncs. Held, a sync waits;
//! failing, it fails as a disk would. Lets a test keep appended events from becoming
//! durable, and see what waits for them.

use std::io;
use std::sync::{Condvar, Mutex, PoisonError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Open,
    Held,
    Failing,
}

pub struct SyncGate {
    gate: Mutex<Gate>,
    changed: Condvar,
}

impl SyncGate {
    pub fn new() -> Self {
        Self {
            gate: Mutex::new(Gate::Open),
            changed: Condvar::new(),
        }
    }

    pub fn set(&self, gate: Gate) {
        *self.gate.lock().unwrap_or_else(PoisonError::into_inner) = gate;
        self.changed.notify_all();
    }

    /// Before a sync, on the writer thread: waits while held.
    pub fn pass(&self) -> io::Result<()> {
        let mut gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        while *gate == Gate::Held {
            gate = self
                .changed
                .wait(gate)
                .unwrap_or_else(PoisonError::into_inner);
        }
        match *gate {
            Gate::Failing => Err(io::Error::other("fdatasync failed (injected by a test)")),
            _ => Ok(()),
        }
    }
}
