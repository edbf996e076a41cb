//! Tests that drive commands tests/run.sh installs: the sqlite3 shell, systemd-analyze
//! (Debian package systemd), and Go with golang.org/x/mod (golang-go,
//! golang-golang-x-mod-dev). Built only with the `tools-tests` feature.

#[path = "../support/mod.rs"]
mod support;

mod audit;
mod deploy;
mod note_interop;
mod sqlite;
mod tlog_interop;
