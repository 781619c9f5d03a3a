#!/usr/bin/env bash
# Runs the GC-heavy comparison (`workloads/workload_update`: zipfian
# whole-row updates) against tern, rocksdb, rocksdb-blob and fjall, each on
# a fresh directory, raw outputs under bench/results/update-<records>/.
# Usage: bench/update.sh [records] [operations] [threads] [rounds]
#        (default: 1000000 3000000 4 1)
set -euo pipefail
cd "$(dirname "$0")/.."
records="${1:-1000000}"
ops="${2:-3000000}"
threads="${3:-4}"
rounds="${4:-1}"
export ROCKSDB_LIB_DIR="${ROCKSDB_LIB_DIR:-/usr/lib/x86_64-linux-gnu}"
cargo build --release -p tern-cli --features rocksdb,fjall
out="bench/results/update-${records}-t${threads}"
mkdir -p "$out"
"${CARGO_TARGET_DIR:-target}/release/tern" bench compare \
  --bindings tern,rocksdb,rocksdb-blob,fjall -w load,workloads/workload_update \
  -p recordcount="$records" -p operationcount="$ops" -p threadcount="$threads" \
  --rounds "$rounds" \
  --dir "${BENCH_DIR:-/tmp/tern-bench-update}" \
  --json "$out/compare.json" --report "$out/compare.html" | tee "$out/table.md"
