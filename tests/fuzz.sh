#!/usr/bin/env bash
# Fuzzes every place untrusted bytes enter eventgate (tests/fuzz, libFuzzer through
# cargo-fuzz on the nightly toolchain; the product itself builds on stable).
#
#   tests/fuzz.sh [SECONDS] [TARGET...]
#
# Builds every target once, then runs each given TARGET (default: all) for SECONDS
# (default 60), starting from the committed seeds (tests/fuzz/seeds/<target>) and a
# working corpus kept between runs (tests/fuzz/corpus/<target>, not committed).
# Prints the executions and the outcome of each target; exits non-zero if any
# target crashed, timed out or ran out of memory, naming the input that did it
# (tests/fuzz/artifacts/<target>/). Reproduce one with
#   cargo +nightly fuzz run --fuzz-dir tests/fuzz --sanitizer none TARGET \
#       tests/fuzz/artifacts/TARGET/crash-...
#
# No AddressSanitizer (`--sanitizer none`): the code the targets reach is safe Rust,
# and the sanitizer's instrumentation of the C dependencies (cc builds zstd with it)
# breaks librdkafka's configure step. Coverage guidance, panics, overflow checks
# (debug assertions), timeouts and the memory limit all stay.
#
# Environment: FUZZ_TIMEOUT (seconds per input, default 10), FUZZ_RSS_MB (default
# 2048), FUZZ_JOBS (parallel targets, default 1), FUZZ_MAX_LEN (default 65536),
# FUZZ_LOGS (a directory to keep each target's libFuzzer output in).
set -euo pipefail

cd "$(dirname "$0")/.."
# The targets are built by another toolchain with other flags; they stay in
# tests/fuzz/target, where the runs below look for them, whatever the product's
# build uses (CARGO_TARGET_DIR would move them).
unset CARGO_TARGET_DIR
fuzz_dir=tests/fuzz
seconds=${1:-60}
shift || true
timeout_s=${FUZZ_TIMEOUT:-10}
rss_mb=${FUZZ_RSS_MB:-2048}
max_len=${FUZZ_MAX_LEN:-65536}

if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
    echo "usage: $0 [SECONDS] [TARGET...]" >&2
    exit 2
fi

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: installing the nightly toolchain (cargo-fuzz needs it for libFuzzer's coverage)" >&2
    if ! rustup toolchain install nightly --profile minimal; then
        echo "fuzz: the nightly toolchain is missing and could not be installed;" >&2
        echo "      install it with: rustup toolchain install nightly --profile minimal" >&2
        exit 1
    fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

all_targets=$(cargo +nightly fuzz list --fuzz-dir "$fuzz_dir")
if [ $# -gt 0 ]; then
    targets=("$@")
    for t in "${targets[@]}"; do
        if ! grep -qx "$t" <<<"$all_targets"; then
            echo "fuzz: no target $t; the targets are:" $all_targets >&2
            exit 2
        fi
    done
else
    mapfile -t targets <<<"$all_targets"
fi

start=$(date +%s)
cargo +nightly fuzz build --fuzz-dir "$fuzz_dir" --sanitizer none >&2
echo "fuzz: built in $(($(date +%s) - start))s" >&2
bin_dir=$fuzz_dir/target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release

# libFuzzer's output per target: kept in FUZZ_LOGS when set, else thrown away.
if [ -n "${FUZZ_LOGS:-}" ]; then
    logs=$FUZZ_LOGS
    mkdir -p "$logs"
else
    logs=$(mktemp -d)
    trap 'rm -rf "$logs"' EXIT
fi

run_one() {
    local t=$1
    local corpus=$fuzz_dir/corpus/$t seeds=$fuzz_dir/seeds/$t artifacts=$fuzz_dir/artifacts/$t
    mkdir -p "$corpus" "$artifacts"
    local dirs=("$corpus")
    [ -d "$seeds" ] && dirs+=("$seeds")
    # -print_final_stats: the executions; the new inputs go to the first directory
    # (the working corpus), never into the committed seeds.
    # The binary as built above: `cargo fuzz run` would build again whenever a source
    # changed in between.
    "$bin_dir/$t" "${dirs[@]}" \
        -max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb="$rss_mb" \
        -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$artifacts/" \
        >"$logs/$t.log" 2>&1
}

failed=0
pids=()
jobs=${FUZZ_JOBS:-1}
for t in "${targets[@]}"; do
    run_one "$t" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$jobs" ]; then
        wait "${pids[0]}" || true
        pids=("${pids[@]:1}")
    fi
done
wait || true

printf '%-16s %14s  %s\n' target executions result
for t in "${targets[@]}"; do
    log=$logs/$t.log
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1 || true)
    artifact=$(grep -o 'Test unit written to .*' "$log" | sed 's/Test unit written to //' | tail -n 1 || true)
    if grep -q 'ERROR: libFuzzer: timeout' "$log"; then
        result="TIMEOUT: $artifact"
    elif grep -q 'ERROR: libFuzzer: out-of-memory' "$log"; then
        result="OUT OF MEMORY: $artifact"
    elif grep -qE '^==[0-9]+==ERROR|panicked at|ERROR: libFuzzer' "$log"; then
        result="CRASH: $artifact"
    elif grep -q 'Done [0-9]* runs' "$log"; then
        result=ok
    else
        result="did not run (see below)"
    fi
    printf '%-16s %14s  %s\n' "$t" "${execs:-?}" "$result"
    if [ "$result" != ok ]; then
        failed=1
        echo "--- $t ---"
        grep -E 'panicked at|ERROR|SUMMARY|Test unit written|^thread' "$log" | head -n 20 || tail -n 30 "$log"
        echo "---"
    fi
done
exit $failed
