//! Power cuts under load (issue 33).

#[allow(dead_code)]
mod support;
// Only this test mounts it: kept out of `support/mod.rs` so the other test binaries
// do not build and link FUSE.
#[path = "support/lazyfs/mod.rs"]
mod lazyfs;
