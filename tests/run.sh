#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need, then runs
# every test, including the ones that drive containerd's own binaries.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the rest assumes, checked first so a missing piece is named, not met halfway.
fail() { echo "tests/run.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root: it installs packages with apt-get and runs a private containerd that starts containers (try: sudo -E ./tests/run.sh)"
command -v apt-get >/dev/null || fail "needs apt-get (Debian or a derivative) to install the packages the tests drive"
command -v cargo >/dev/null || fail "needs Rust (cargo) 1.95 or later: install it with rustup (https://rustup.rs)"
rust=$(rustc --version | awk '{print $2}')
[ "$(printf '%s\n1.95.0\n' "$rust" | sort -V | head -n1)" = "1.95.0" ] || fail "needs Rust 1.95 or later, found $rust: rustup update stable"
command -v python3 >/dev/null || fail "needs python3 (the Kafka tests read with kafka-python)"
# tests/privileged/power_cut.rs mounts its own FUSE file system (no libfuse or
# fusermount needed).
[ -c /dev/fuse ] || modprobe fuse 2>/dev/null || [ -c /dev/fuse ] \
  || fail "needs /dev/fuse for tests/privileged/power_cut.rs (modprobe fuse; in a container: --device /dev/fuse --cap-add SYS_ADMIN)"

# What the tests drive, next to what the build links against (OpenSSL, Cyrus SASL,
# libcurl for librdkafka): one apt-get run for whatever is missing. docker.io brings
# dockerd 20.10 and /usr/bin/docker for tests/containerd/docker.rs, which runs its own
# dockerd; golang-go and golang-golang-x-mod-dev build Go's sumdb/note and
# sumdb/tlog for tests/tools/note_interop.rs and tlog_interop.rs; python3-venv lets Debian's python3 make the tests'
# virtual environment (below); chromium and chromium-driver are the browser
# tests/browser drives through WebDriver; postgresql brings the server binaries
# (/usr/lib/postgresql/<major>/bin) and the postgres user tests/postgres starts its
# private clusters with (the system's own cluster it may start is not used);
# stress-ng loads every core while tests/kafka/fleet.rs restarts a central gateway;
# debootstrap makes the minimal Debian roots tests/privileged/debian_package.rs
# installs the package into and tests/containerd/image.rs makes the image's base of
# (once per machine each, under /var/cache/eventgate-tests), dpkg-dev the
# shared-library dependencies cargo-deb writes into the package, and
# systemd-container the systemd-nspawn that boots that root to run the installed unit.
./deploy/build-deps.sh containerd runc busybox-static sqlite3 systemd stunnel4 docker.io \
  golang-go golang-golang-x-mod-dev python3-venv chromium chromium-driver postgresql stress-ng \
  debootstrap dpkg-dev systemd-container

# tansu: a Kafka-protocol broker for the kafka forwarder's tests. Built from source
# once per machine (about 16 minutes); cargo puts it in ~/.cargo/bin.
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v tansu >/dev/null; then
  echo "installing: tansu (cargo install, takes a while)"
  cargo install tansu --version 0.6.0 --features dynostore --locked
fi
# cargo-deb: deploy/debian/package.sh builds the Debian package with it.
if ! command -v cargo-deb >/dev/null; then
  echo "installing: cargo-deb (cargo install)"
  cargo install cargo-deb --version 3.8.0 --locked
fi

# kafka-python: the kafka forwarder's tests read what it produced with a client that
# shares no code with it (tests/support/consume.py); zstandard for compressed topics.
# Debian 12's python3 is externally managed (PEP 668) and refuses `pip install`, so
# the tests get a virtual environment of their own under target/, made once per
# checkout and reused; its python3 comes first on PATH for the tests.
venv="$PWD/target/test-python"
if ! "$venv/bin/python3" -c 'import kafka, zstandard' 2>/dev/null; then
  echo "installing: kafka-python (into $venv)"
  mkdir -p "$PWD/target"
  python3 -m venv --clear "$venv" \
    || fail "python3 cannot make a virtual environment (apt-get install python3-venv)"
  "$venv/bin/python3" -m pip install --quiet 'kafka-python==2.*' zstandard
fi
export PATH="$venv/bin:$PATH"

# The style and lint gates CI holds the code to, before any test.
cargo fmt --check
cargo clippy --locked --all-targets --all-features -- -D warnings

# The release binary the image and package tests ship (deploy/image/build.sh and
# deploy/debian/package.sh build it when it is stale; built here, before the tests run
# side by side, it is fresh for them).
cargo build --release --locked --bin eventgate

# Every test group (tests/<group>/main.rs), each behind the feature naming what it
# needs (Cargo.toml): all of it is installed above. --include-ignored for the unit
# tests the library itself marks (a broker and PostgreSQL servers src/bench starts).
features=bench,fuzzing,tools-tests,containerd-tests,kafka-tests,postgres-tests,privileged-tests,browser-tests
cargo build --all-targets --locked --features "$features"
cargo test --lib --bins --examples --test plain --test tools --test kafka --test postgres \
    --test privileged --test containerd --test browser --test bench --locked --features "$features" \
    --no-fail-fast -- --include-ignored

# A short fuzzing pass over every untrusted input (tests/fuzz; nightly only here).
./tests/fuzz.sh 20
