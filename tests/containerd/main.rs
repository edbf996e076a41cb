//! Tests against a private containerd each starts: containerd, ctr, runc and
//! busybox-static (the CRI tests use containerd's CRI plugin; tests/containerd/docker.rs
//! also runs dockerd from docker.io), as root. Built only with the `containerd-tests`
//! feature; what also needs a Kafka broker is built only with `kafka-tests` too.

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "kafka-tests")]
mod correlate;
mod cri_harness;
mod ctr;
mod docker;
mod image;
mod kubernetes;
mod reconcile;
mod reconcile_list;
mod reconcile_window;
mod replay;
mod upstream;
mod workloads;
