#!/usr/bin/env bash
# Installs the Debian packages eventgate's build needs, only those missing: librdkafka
# is compiled with TLS (OpenSSL), SASL (Cyrus SASL, for GSSAPI/Kerberos) and the OIDC
# token fetch of OAUTHBEARER (libcurl), and links them from the system. Everything
# else (librdkafka itself, SQLite, zstd) is compiled from the crates' own sources.
# Packages named as arguments are installed with them, when missing too (tests/run.sh
# passes what the tests drive).
set -euo pipefail

packages=(gcc make pkg-config zlib1g-dev libssl-dev libsasl2-dev libcurl4-openssl-dev "$@")
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
