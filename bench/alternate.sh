#!/usr/bin/env bash
# Compares two settings of Tern on one store size by alternation: loads a
# store with the defaults (A) and one with SETTING (B), then runs each
# YCSB step on both in turns, A first in odd rounds and B first in even
# ones, with the page cache dropped before every step. Each line reports
# the step's throughput and p99 and what the device did meanwhile (reads,
# MiB read, ms per read, writes, MiB written, cache flushes), so a gap
# between the stores can be told apart from a slow moment of the device.
# Raw outputs under bench/results/<OUT>/.
# Usage: bench/alternate.sh SETTING [records] [operations] [steps] [rounds]
#        e.g. bench/alternate.sh sorted_value_runs=off 10000000 1000000 c,a,b 2
# Environment: THREADS (default 4), MEMORY_LIMIT (e.g. 2560M; needs root
# and the cgroup v1 memory controller), DEVICE (default: the disk under
# the data directory), BENCH_DIR (default /tmp/tern-bench-alternate),
# OUT (default alternate-<records>-<setting>). Needs root to drop caches.
set -euo pipefail
cd "$(dirname "$0")/.."
setting="${1:?usage: bench/alternate.sh SETTING [records] [operations] [steps] [rounds]}"
records="${2:-2000000}"
ops="${3:-1000000}"
steps="${4:-c,a,b}"
rounds="${5:-2}"
threads="${THREADS:-4}"
dir="${BENCH_DIR:-/tmp/tern-bench-alternate}"
out="bench/results/${OUT:-alternate-${records}-${setting//[=.]/-}}"
cargo build --release -p tern-cli
tern="${CARGO_TARGET_DIR:-target}/release/tern"
# shellcheck source=bench/memory-limit.sh
. bench/memory-limit.sh
[ -z "${MEMORY_LIMIT:-}" ] || enter_memory_limit "$MEMORY_LIMIT"
mkdir -p "$out" "$dir"
device="${DEVICE:-$(lsblk -no pkname "$(df --output=source "$dir" | tail -1)" 2>/dev/null || true)}"
[ -n "$device" ] || device="$(basename "$(df --output=source "$dir" | tail -1)")"
log="$out/steps.txt"
{
  echo "# bench/alternate.sh $setting $records $ops $steps $rounds (threads $threads, memory limit ${MEMORY_LIMIT:-none}, device $device)"
  echo "# built at $(git rev-parse --short HEAD)"
} > "$log"
# reads, sectors read, ms reading, writes, sectors written, flushes
disk() { awk -v d="$device" '$3==d {print $4, $6, $7, $8, $10, $18}' /proc/diskstats; }
step() { # name store-dir tern-bench-ycsb-arguments...
  local name=$1 store=$2
  shift 2
  sync
  echo 3 > /proc/sys/vm/drop_caches
  local a b
  read -ra a <<< "$(disk)"
  "$tern" bench ycsb "$@" -p recordcount="$records" -p threadcount="$threads" \
    --dir "$store" --status-interval 0 > "$out/$name.txt" 2>&1
  read -ra b <<< "$(disk)"
  local reads=$((b[0] - a[0]))
  printf '%-12s %-28s %-12s reads=%d MiB=%d ms/read=%s writes=%d wMiB=%d flushes=%d\n' "$name" \
    "$(grep -o 'throughput(ops/sec): [0-9.]*' "$out/$name.txt" | head -1)" \
    "$(grep -o 'p99=[0-9.]*' "$out/$name.txt" | head -1)" \
    "$reads" $(((b[1] - a[1]) / 2048)) "$(awk -v m=$((b[2] - a[2])) -v r="$reads" 'BEGIN {printf "%.3f", r ? m / r : 0}')" \
    $((b[3] - a[3])) $(((b[4] - a[4]) / 2048)) $((b[5] - a[5])) | tee -a "$log"
}
props() { [ "$1" = b ] && echo "-p tern.$setting"; true; }
for s in a b; do
  # shellcheck disable=SC2046
  step "load-$s" "$dir/$s" -P workloads/workloada $(props $s) --load --fresh
done
for r in $(seq 1 "$rounds"); do
  for w in ${steps//,/ }; do
    order="a b"
    [ $((r % 2)) = 1 ] || order="b a"
    for s in $order; do
      # shellcheck disable=SC2046
      step "$w$r-$s" "$dir/$s" -P "workloads/workload$w" -p operationcount="$ops" $(props $s) --run
    done
  done
done
rm -rf "$dir"
