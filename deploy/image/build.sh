#!/usr/bin/env bash
# Builds eventgate's image without a registry: the base is Debian 12 made from Debian's
# own packages (debootstrap --variant=minbase, slimmed as debian:bookworm-slim is, then
# `docker import`), the binary is a release build, and the image is deploy/Containerfile's
# runtime stage: its packages, user, paths, configuration and entrypoint.
#
#   cargo build --release --locked --bin eventgate
#   sudo EVENTGATE_BINARY=target/release/eventgate deploy/image/build.sh   # eventgate:latest
#   sudo deploy/image/build.sh --tag eventgate:0.1.0   # when root's PATH has cargo
#   deploy/image/build.sh --packages                   # the runtime packages, comma-separated
#
# Environment:
#   EVENTGATE_BINARY     a binary built already (default: cargo build --release here)
#   EVENTGATE_BASE_ROOT  a root made already by debootstrap --variant=minbase
#                        --include=$(deploy/image/build.sh --packages) bookworm; only read
#                        (default: made here from DEBIAN_MIRROR, about a minute)
#   DEBIAN_MIRROR        default http://deb.debian.org/debian
#   DOCKER               the docker CLI (default: docker; DOCKER_HOST names the daemon)
#
# Needs root (debootstrap, a root's files), debootstrap, strip (binutils), and a docker
# with BuildKit (docker.io 20.10 has it: DOCKER_BUILDKIT=1). The build itself uses no
# network. The base is tagged eventgate-base:bookworm.
set -euo pipefail
# Paths given are the caller's, before the script moves to the checkout.
binary=${EVENTGATE_BINARY:+$(realpath -e "$EVENTGATE_BINARY")}
root=${EVENTGATE_BASE_ROOT:+$(realpath -e "$EVENTGATE_BASE_ROOT")}
cd "$(dirname "$0")/../.."

# The runtime stage's package list is the one source: debootstrap includes them all,
# so the stage's apt-get has nothing to fetch.
packages=$(sed -n 's/^ARG RUNTIME_PACKAGES="\(.*\)"$/\1/p' deploy/Containerfile)
[ -n "$packages" ] || { echo "deploy/image/build.sh: no ARG RUNTIME_PACKAGES in deploy/Containerfile" >&2; exit 1; }
include=${packages// /,}

tag=eventgate:latest
while [ $# -gt 0 ]; do
    case $1 in
        --packages) echo "$include"; exit 0 ;;
        --tag) [ $# -ge 2 ] || { echo "deploy/image/build.sh: --tag needs a value" >&2; exit 2; }
               tag=$2; shift 2 ;;
        *) echo "deploy/image/build.sh: unknown argument $1 (--tag NAME, --packages)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "deploy/image/build.sh: needs root (debootstrap, and the base's files are root's)" >&2; exit 1; }
docker=${DOCKER:-docker}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -z "$binary" ]; then
    # Under sudo, root's PATH usually has no rustup cargo: build as yourself first.
    command -v cargo >/dev/null || { echo "deploy/image/build.sh: no cargo here; build the binary first (cargo build --release --locked --bin eventgate) and pass it: EVENTGATE_BINARY=target/release/eventgate" >&2; exit 1; }
    cargo build --release --locked --bin eventgate
    binary=${CARGO_TARGET_DIR:-target}/release/eventgate
fi

if [ -z "$root" ]; then
    command -v debootstrap >/dev/null || { echo "deploy/image/build.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
    root=$work/debootstrap
    debootstrap --variant=minbase --include="$include" bookworm "$root" \
        "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$work/debootstrap.log" \
        || { cat "$work/debootstrap.log" >&2; exit 1; }
fi
[ -x "$root/usr/bin/dpkg" ] || { echo "deploy/image/build.sh: $root is not a Debian root" >&2; exit 1; }

# Slimmed as debian:bookworm-slim is: no documentation but the copyright notices, no
# manuals or translations, no package lists or downloaded packages; dpkg keeps them out
# of packages installed later too.
base=$work/base
cp -a "$root" "$base"
find "$base/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$base/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$base"/usr/share/{man,info,groff,lintian,linda}/* "$base"/usr/share/locale/*
rm -rf "$base"/var/lib/apt/lists/* "$base"/var/cache/apt/archives/*.deb "$base"/var/cache/apt/*.bin \
    "$base"/var/log/* "$base"/var/cache/debconf/*-old
mkdir -p "$base/etc/dpkg/dpkg.cfg.d"
cat >"$base/etc/dpkg/dpkg.cfg.d/slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
SLIM
base_tag=eventgate-base:bookworm
tar -C "$base" --numeric-owner -c . | "$docker" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$base_tag" >/dev/null

# The context holds only what the runtime stage copies.
context=$work/context
mkdir -p "$context/deploy"
install -m 0755 "$binary" "$context/eventgate"
strip "$context/eventgate"
cp deploy/Containerfile deploy/eventgate.example.toml "$context/deploy/"
DOCKER_BUILDKIT=1 "$docker" build --network none --target runtime \
    --build-arg BASE="$base_tag" --build-arg BINARY=prebuilt \
    -f "$context/deploy/Containerfile" -t "$tag" "$context"
echo "$tag"
