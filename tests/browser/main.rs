//! The history UI (`/ui` on the admin listener, and `eventgate timeline --out`) in
//! Debian's Chromium, driven through chromedriver (WebDriver), over a store recorded
//! from a private containerd: a pod whose container restarts and exits non-zero,
//! killed and OOM-killed, a gap with its reconcile, and a pod whose names are markup.
//! Needs root, containerd, ctr, runc, busybox-static, chromium and chromium-driver.
//! Built only with the `browser-tests` feature.

#[path = "../support/mod.rs"]
mod support;

mod client;
mod export;
mod fleet;
mod hostile;
mod live;
mod recorded;
mod scenario;
mod search;
mod timeline;
mod ui;
