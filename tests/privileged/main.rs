//! Tests that need root: a small tmpfs for a full disk, and /dev/fuse for power cuts
//! (tests/support/lazyfs). Built only with the `privileged-tests` feature; the power
//! cuts run containerd and tansu too, so they are built only with `containerd-tests`
//! and `kafka-tests` as well.

#[path = "../support/mod.rs"]
mod support;

mod debian_package;
mod disk_full;
#[cfg(all(feature = "containerd-tests", feature = "kafka-tests"))]
mod power_cut;
