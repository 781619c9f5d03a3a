#!/usr/bin/env bash
# What offload buys a store that has one core: the store pinned to CPU 0
# (`taskset`), its compactions and GC either on that core (`tern`) or on a
# `tern worker` pinned to CPU 1 (`tern@offload`). Two workloads, one run:
#   1. `tern bench db --benchmarks=fillrandom` (CaaS-LSM's workload,
#      scaled), with key-value separation off so compaction does the work,
#      each variant on a fresh store;
#   2. `tern bench compare` on YCSB load + workloads/workload_update
#      (zipfian whole-row updates: GC-heavy), rounds rotating the order.
# Raw outputs go to bench/results/offload-<records>/.
# Usage: bench/offload.sh [records] [operations] [rounds]
#        (default: 1000000 3000000 2)
# Environment: FILL (fillrandom keys, default 2000000), THREADS (client
# threads, default 4), STORE_CPU (default 0), WORKER_CPU (default 1),
# NO_BUILD=1 (use the release binary already built).
set -euo pipefail
cd "$(dirname "$0")/.."
records="${1:-1000000}"
ops="${2:-3000000}"
rounds="${3:-2}"
fill="${FILL:-2000000}"
threads="${THREADS:-4}"
store_cpu="${STORE_CPU:-0}"
worker_cpu="${WORKER_CPU:-1}"
out="bench/results/offload-${records}"
dir="${BENCH_DIR:-/tmp/tern-bench-offload}"
[ -n "${NO_BUILD:-}" ] || cargo build --release -p tern-cli
tern="${CARGO_TARGET_DIR:-target}/release/tern"
mkdir -p "$out"
offload="tern@offload+offload_worker_cpus=${worker_cpu}"

for round in $(seq 1 "$rounds"); do
  for variant in tern "$offload"; do
    name="${variant%%+*}"
    name="${name/@/-}"
    rm -rf "$dir/fill"*
    echo "== fillrandom round $round: $variant (store on CPU $store_cpu)" >&2
    taskset -c "$store_cpu" "$tern" bench db --benchmarks=fillrandom \
      --num="$fill" --value_size=1000 --threads="$threads" \
      --db "$variant" -p tern.blob_threshold=off --dir "$dir/fill" --fresh \
      --json "$out/fillrandom-$name-r$round.json" 2>&1 | tee "$out/fillrandom-$name-r$round.txt"
  done
done
rm -rf "$dir/fill"*

echo "== workload_update: tern vs $offload (store on CPU $store_cpu)" >&2
taskset -c "$store_cpu" "$tern" bench compare \
  --bindings "tern,$offload" -w load,workloads/workload_update \
  -p recordcount="$records" -p operationcount="$ops" -p threadcount="$threads" \
  --rounds "$rounds" --dir "$dir" \
  --json "$out/update.json" --report "$out/update.html" | tee "$out/update.md"
