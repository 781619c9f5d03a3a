#!/usr/bin/env bash
# The hash engine against Tern's LSM and RocksDB (docs/bench.md, "Hash
# engine"): YCSB load, A, B, C and F with 4 client threads, in three setups:
#   small  1M records of 100 B, everything in the hash engine's memory
#   1k     1M records of ~1 KB (10 fields of 100 B), everything in memory
#   spill  the same 1M × 1 KB with the hash log's memory at 256 MiB, about
#          a quarter of the data (the rest is read from its segment files)
# Raw outputs under bench/results/hash-<setup>/.
# Usage: bench/hash.sh [records] [operations] [setups...]
#        (default: 1000000 1000000 small 1k spill)
set -euo pipefail
cd "$(dirname "$0")/.."
records="${1:-1000000}"
ops="${2:-1000000}"
shift 2 || true
setups=("$@")
[ ${#setups[@]} -gt 0 ] || setups=(small 1k spill)
export ROCKSDB_LIB_DIR="${ROCKSDB_LIB_DIR:-/usr/lib/x86_64-linux-gnu}"
[ -n "${NO_BUILD:-}" ] || cargo build --release -p tern-cli --features rocksdb,fjall
tern="${CARGO_TARGET_DIR:-target}/release/tern"
for setup in "${setups[@]}"; do
  case "$setup" in
    small) props=(-p fieldcount=1 -p fieldlength=100 -p hash.memory=512M) ;;
    1k) props=(-p hash.memory=2G) ;;
    spill) props=(-p hash.memory=256M) ;;
    *) echo "unknown setup $setup (small, 1k, spill)" >&2; exit 2 ;;
  esac
  out="bench/results/hash-$setup"
  mkdir -p "$out"
  echo "== $setup: ${props[*]}" >&2
  "$tern" bench compare --bindings tern-hash,tern,rocksdb -w load,a,b,c,f \
    -p recordcount="$records" -p operationcount="$ops" -p threadcount=4 "${props[@]}" \
    --dir "${BENCH_DIR:-/tmp/tern-bench-hash}" \
    --json "$out/compare.json" --report "$out/compare.html" | tee "$out/table.md"
done
