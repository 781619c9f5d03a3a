#!/usr/bin/env bash
# Runs the comparison behind docs/bench.md's results (`compare.sh 2000000
# 1000000 2`): YCSB load, A, B, C, F, E against tern, rocksdb, rocksdb-blob
# and fjall, each on a fresh directory, raw outputs under
# bench/results/compare-<records>[-t<threads>]/.
# Usage: bench/compare.sh [records] [operations] [rounds]
#        (default: 500000 500000 1; rounds rotate the binding order)
# Environment: THREADS (client threads, default 4), STEPS (default
# load,a,b,c,f,e), BINDINGS (default tern,rocksdb,rocksdb-blob,fjall),
# OUT (results folder under bench/results/), MEMORY_LIMIT
# (e.g. 2560M: run in a cgroup v1 memory group capped there, page cache
# included, for stores larger than memory; needs root), PROPS (more
# -p NAME=VALUE for every binding, space-separated, e.g. "direct_io=true").
set -euo pipefail
cd "$(dirname "$0")/.."
records="${1:-500000}"
ops="${2:-500000}"
rounds="${3:-1}"
threads="${THREADS:-4}"
default_out="compare-${records}"
[ -z "${MEMORY_LIMIT:-}" ] || default_out="${default_out}-mem"
[ "$threads" = 4 ] || default_out="${default_out}-t${threads}"
out="bench/results/${OUT:-$default_out}"
export ROCKSDB_LIB_DIR="${ROCKSDB_LIB_DIR:-/usr/lib/x86_64-linux-gnu}"
cargo build --release -p tern-cli --features rocksdb,fjall
# shellcheck source=bench/memory-limit.sh
. bench/memory-limit.sh
[ -z "${MEMORY_LIMIT:-}" ] || enter_memory_limit "$MEMORY_LIMIT"
mkdir -p "$out"
"${CARGO_TARGET_DIR:-target}/release/tern" bench compare \
  --bindings "${BINDINGS:-tern,rocksdb,rocksdb-blob,fjall}" -w "${STEPS:-load,a,b,c,f,e}" \
  -p recordcount="$records" -p operationcount="$ops" -p threadcount="$threads" \
  $(for p in ${PROPS:-}; do printf -- '-p %s ' "$p"; done) \
  --rounds "$rounds" \
  --dir "${BENCH_DIR:-/tmp/tern-bench-compare}" \
  --json "$out/compare.json" --report "$out/compare.html" | tee "$out/table.md"
