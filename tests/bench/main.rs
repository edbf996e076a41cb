//! Benchmarks and load tests: `eventgate bench` and the `bench` module (the `bench`
//! feature), and tests whose cost is time rather than a prerequisite. Those that run
//! containerd, tansu or PostgreSQL are built only with `containerd-tests`,
//! `kafka-tests` or `postgres-tests` too.

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "kafka-tests")]
mod backlog_bench;
mod bench_tables;
#[cfg(all(feature = "kafka-tests", feature = "postgres-tests"))]
mod central_bench;
mod hostile;
mod load;
#[cfg(feature = "containerd-tests")]
mod reconcile_bench;
#[cfg(all(feature = "containerd-tests", feature = "kafka-tests"))]
mod soak;
mod tree_bench;
mod ui_bench;
#[cfg(feature = "containerd-tests")]
mod upstream_burst;
