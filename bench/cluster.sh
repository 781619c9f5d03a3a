#!/usr/bin/env bash
# Cluster benchmarks on one machine (every node, etcd and the client share
# its cores, so this measures the cluster's overhead and behaviour, not
# scale-out capacity):
#   1. YCSB A and C through `resp-cluster://` (tern-client) against clusters
#      of 1, 2 and 3 nodes;
#   2. scale-out under load: a 3-node cluster of RECORDS records, YCSB A in
#      back-to-back windows of about WINDOW seconds, `tern cluster
#      scale-out` of 10% of the slots to a fourth node started after a few
#      windows; throughput and p99 per window before, during and after.
# Raw outputs, a summary and an HTML chart go to bench/results/cluster-<records>/.
# Windows are separate `tern bench ycsb --run` invocations (a fresh client
# each), so each has its own throughput and p99.
# Usage: bench/cluster.sh [records] [operations]   (default: 1000000 500000)
# Environment: THREADS (client threads, default 8), WINDOW_OPS (operations
# per window, default 30000), ONLY=scale (skip part 1), NO_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
records="${1:-1000000}"
ops="${2:-500000}"
threads="${THREADS:-8}"
out="bench/results/cluster-${records}"
dir="${BENCH_DIR:-/tmp/tern-bench-cluster}"
[ -n "${NO_BUILD:-}" ] || cargo build --release -p tern-cli
tern="$PWD/${CARGO_TARGET_DIR:-target}/release/tern"
mkdir -p "$out"
rm -rf "$dir"
mkdir -p "$dir"

etcd_port=23790
etcd_url="http://127.0.0.1:$etcd_port"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

etcd --data-dir "$dir/etcd" --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls http://127.0.0.1:23800 >"$dir/etcd.log" 2>&1 &
pids+=($!)
sleep 2

# start_node NAME PORT CLUSTER
start_node() {
  "$tern" serve --cluster --etcd "$etcd_url" --cluster-name "$3" --port "$2" \
    --dir "$dir/$3-$1" --metrics-bind off >"$dir/$3-$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    grep -q ready "$dir/$3-$1.log" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "node $1 did not start" >&2
  exit 1
}

seeds() { local s=""; for p in "$@"; do s="$s${s:+,}127.0.0.1:$p"; done; echo "$s"; }

# 1. YCSB A and C on 1, 2, 3 nodes.
for n in $([ "${ONLY:-}" = scale ] || echo 1 2 3); do
  name="n$n"
  ports=()
  for i in $(seq 1 "$n"); do
    port=$((7100 + 10 * n + i))
    start_node "$i" "$port" "$name"
    ports+=("$port")
  done
  "$tern" cluster create --etcd "$etcd_url" --name "$name" --nodes "$n" >/dev/null
  db="resp-cluster://$(seeds "${ports[@]}")"
  echo "== $n node(s): load + A, then C" >&2
  "$tern" bench ycsb -P workloads/workloada --load --run --db "$db" \
    -p recordcount="$records" -p operationcount="$ops" -p threadcount="$threads" \
    --json "$out/a-$n.json" | tee "$out/a-$n.txt"
  "$tern" bench ycsb -P workloads/workloadc --run --db "$db" \
    -p recordcount="$records" -p operationcount="$ops" -p threadcount="$threads" \
    --json "$out/c-$n.json" | tee "$out/c-$n.txt"
  # Stop this cluster's nodes before the next.
  for p in "${ports[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  sleep 1
  rm -rf "$dir/$name"-*
done

# 2. Scale-out under load.
name="scale"
ports=(7201 7202 7203)
for i in 1 2 3; do start_node "$i" "${ports[$((i - 1))]}" "$name"; done
"$tern" cluster create --etcd "$etcd_url" --name "$name" --nodes 3 >/dev/null
start_node 4 7204 "$name"
db="resp-cluster://$(seeds "${ports[@]}")"
echo "== scale-out: load $records records" >&2
"$tern" bench ycsb -P workloads/workloada --load --db "$db" \
  -p recordcount="$records" -p threadcount="$threads" --json "$out/scale-load.json" >/dev/null
window_ops="${WINDOW_OPS:-30000}"
: >"$out/scale-windows.tsv"
admin_pid=""
t0=$(date +%s.%N)
w=0
after=0
while :; do
  w=$((w + 1))
  start=$(date +%s.%N)
  phase="before"
  if [ -n "$admin_pid" ]; then
    if kill -0 "$admin_pid" 2>/dev/null; then phase="during"; else phase="after"; fi
  fi
  "$tern" bench ycsb -P workloads/workloada --run --db "$db" \
    -p recordcount="$records" -p operationcount="$window_ops" -p threadcount="$threads" \
    --json "$out/scale-w$w.json" >/dev/null
  end=$(date +%s.%N)
  # A window that saw the migration end still counts as during.
  if [ "$phase" = "after" ]; then after=$((after + 1)); fi
  echo -e "$w\t$phase\t$start\t$end" >>"$out/scale-windows.tsv"
  if [ "$w" -eq 5 ]; then
    echo "== scale-out: moving 1638 slots to the fourth node" >&2
    ( "$tern" cluster scale-out --etcd "$etcd_url" --name "$name" --slots 1638 \
        --to 127.0.0.1:7204 >"$out/scale-admin.txt" 2>&1; date +%s.%N >"$out/scale-admin.end" ) &
    admin_pid=$!
    date +%s.%N >"$out/scale-admin.start"
  fi
  [ "$after" -ge 5 ] && break
  [ "$w" -ge 100 ] && break
done
"$tern" cluster status --etcd "$etcd_url" --name "$name" >"$out/scale-status.txt"
# How the bulk copy arrived at the new node (files ingested, keys copied).
{ redis-cli -p 7204 cluster info | grep -E "tern_migration_"
  redis-cli -p 7204 info tern | grep -E "^engine_(wal_bytes_written|flush_bytes_written|compaction_bytes_written|blob_bytes_written|gc_bytes_written|user_bytes_written|sst_bytes|blob_bytes):"
} >"$out/scale-target.txt" || true
python3 bench/cluster_report.py "$out" "$t0" | tee "$out/summary.md"
