#!/usr/bin/env bash
# Smoke run of the benchmark harness: YCSB A at a few thousand records
# against the tern binding (and rocksdb when built with that feature),
# parsing the YCSB-cpp closing lines and checking the counts add up.
# Usage: bench/smoke.sh [binding]   (default: tern)
set -euo pipefail
cd "$(dirname "$0")/.."
db="${1:-tern}"
features=""
case "$db" in rocksdb*) features="--features rocksdb" ;; fjall) features="--features fjall" ;; esac
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# shellcheck disable=SC2086
cargo run --quiet --release -p tern-cli $features -- bench ycsb -P workloads/workloada \
  -p recordcount=3000 -p operationcount=4000 -p threadcount=2 \
  --load --run --db "$db" --dir "$dir/data" --fresh --json "$dir/out.json" > "$dir/out.txt"
ops=$(grep ' sec: 4000 operations;' "$dir/out.txt" | head -1)
[ -n "$ops" ] || { echo "smoke: no run status line with 4000 operations" >&2; cat "$dir/out.txt" >&2; exit 1; }
reads=$(echo "$ops" | sed -n 's/.*\[READ: Count=\([0-9]*\).*/\1/p')
updates=$(echo "$ops" | sed -n 's/.*\[UPDATE: Count=\([0-9]*\).*/\1/p')
[ $((reads + updates)) -eq 4000 ] || { echo "smoke: READ $reads + UPDATE $updates != 4000" >&2; exit 1; }
grep -q '^Run operations success(ops): 4000$' "$dir/out.txt"
grep -q '^Run operations fail(ops): 0$' "$dir/out.txt"
grep -q '^Load operations success(ops): 3000$' "$dir/out.txt"
grep -q '"tool": "tern-bench"' "$dir/out.json"
echo "bench smoke ($db): ok (READ $reads, UPDATE $updates)"
