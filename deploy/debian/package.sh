#!/usr/bin/env bash
# Builds the Debian package, target/debian/eventgate_VERSION-1_ARCH.deb, with
# cargo-deb (`cargo install cargo-deb`): the release binary, the systemd unit with
# the package's paths, the example configuration as a conffile, man pages and
# shell completions made by the binary itself, and the maintainer scripts in this
# directory (the system user and the data directory).
#
#   deploy/debian/package.sh                    # cargo build --release first
#   EVENTGATE_BINARY=path deploy/debian/package.sh   # package a binary built already
set -euo pipefail
cd "$(dirname "$0")/../.."

command -v cargo-deb >/dev/null || {
    echo "deploy/debian/package.sh: needs cargo-deb (cargo install cargo-deb --locked)" >&2
    exit 1
}
binary=${EVENTGATE_BINARY:-}
if [ -z "$binary" ]; then
    cargo build --release --locked --bin eventgate
    binary=target/release/eventgate
fi

assets=target/debian-assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions" "$assets/systemd"
install -m 0755 "$binary" "$assets/eventgate"
strip "$assets/eventgate"
"$assets/eventgate" man --out-dir "$assets/man"
gzip -9n "$assets"/man/*.1
"$assets/eventgate" completions bash >"$assets/completions/eventgate"
"$assets/eventgate" completions zsh >"$assets/completions/_eventgate"
"$assets/eventgate" completions fish >"$assets/completions/eventgate.fish"
# The unit as deploy/ has it, with the package's path for the binary and a header
# of its own (deploy/'s says how to install it by hand).
{
    echo "# eventgate, installed by its Debian package: edit /etc/eventgate/eventgate.toml,"
    echo "# then systemctl enable --now eventgate. Data lives in /var/lib/eventgate."
    echo
    sed -n '/^\[Unit\]/,$p' deploy/systemd/eventgate.service | sed 's#/usr/local/bin/eventgate#/usr/bin/eventgate#g'
} >"$assets/systemd/eventgate.service"

cargo deb --no-build --no-strip --offline --output target/debian/
