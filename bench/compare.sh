#!/usr/bin/env bash
# Runs the comparison behind docs/bench.md's results (`compare.sh 2000000
# 1000000`): YCSB load, A, B, C, F, E against tern, rocksdb, rocksdb-blob
# and fjall, each on a fresh directory, raw outputs under
# bench/results/compare-<records>/.
# Usage: bench/compare.sh [records] [operations] [rounds]
#        (default: 500000 500000 1; rounds rotate the binding order)
set -euo pipefail
cd "$(dirname "$0")/.."
records="${1:-500000}"
ops="${2:-500000}"
rounds="${3:-1}"
export ROCKSDB_LIB_DIR="${ROCKSDB_LIB_DIR:-/usr/lib/x86_64-linux-gnu}"
cargo build --release -p tern-cli --features rocksdb,fjall
out="bench/results/compare-${records}"
mkdir -p "$out"
"${CARGO_TARGET_DIR:-target}/release/tern" bench compare \
  --bindings tern,rocksdb,rocksdb-blob,fjall -w load,a,b,c,f,e \
  -p recordcount="$records" -p operationcount="$ops" -p threadcount=4 \
  --rounds "$rounds" \
  --dir "${BENCH_DIR:-/tmp/tern-bench-compare}" \
  --json "$out/compare.json" --report "$out/compare.html" | tee "$out/table.md"
