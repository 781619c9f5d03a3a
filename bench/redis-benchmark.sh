#!/usr/bin/env bash
# tern serve against redis-server with redis-benchmark, in one run on one
# machine: both at the same appendfsync (everysec, always), -c 50 and
# -c 200, with and without -P 16, values of 3 (redis-benchmark's default),
# 1024 and 16384 bytes, -t set,get,incr,mset. The servers alternate per
# cell, each going first in every other cell, so drift hits both. Before
# each run the server is emptied (FLUSHALL) and tern is left to settle:
# until its flushes, compactions and GC have stopped changing its files
# (INFO's engine fields still for a second, at most SETTLE_MAX seconds),
# so no run shares the machine with tern's background work from an
# earlier one: neither tern's next cell nor redis-server's run after it.
#
#   bench/redis-benchmark.sh [requests]        (default 100000)
#   env: OUT (results dir), FSYNCS, CLIENTS, PIPES, SIZES, TESTS to narrow,
#        ENGINE (tern serve --engine: lsm, the default, or hash),
#        TERN (a built tern binary to run instead of building one here),
#        N_LARGE (requests for 16384-byte cells; default: requests),
#        BENCH_THREADS (redis-benchmark --threads, for machines with cores
#        to spare, where one client thread would be the bottleneck),
#        CELL_TIMEOUT (seconds a cell may take before it counts as failed),
#        SETTLE_MAX (longest wait for tern's background work before a cell;
#        default 120)
#
# Writes $OUT/results.csv (one row per server and cell) and $OUT/table.md
# (tern / redis-server per cell).
# Not -e: a cell whose run fails is reported and left out of the table.
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
OUT=${OUT:-bench/results/redis-benchmark}
FSYNCS=${FSYNCS:-"everysec always"}
CLIENTS=${CLIENTS:-"50 200"}
PIPES=${PIPES:-"1 16"}
SIZES=${SIZES:-"3 1024 16384"}
TESTS=${TESTS:-set,get,incr,mset}
ENGINE=${ENGINE:-lsm}
N_LARGE=${N_LARGE:-$N}
CELL_TIMEOUT=${CELL_TIMEOUT:-600}
SETTLE_MAX=${SETTLE_MAX:-120}
THREADS_ARG=()
[ -n "${BENCH_THREADS:-}" ] && THREADS_ARG=(--threads "$BENCH_THREADS")
TPORT=16379
RPORT=16380
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || {
    echo "needs redis-server and redis-benchmark: apt-get install redis-server redis-tools" >&2
    exit 1
}
if [ -n "${TERN:-}" ]; then
    TERN_BIN=$TERN
else
    cargo build --release -q -p tern-cli || exit 1
    TERN_BIN=./target/release/tern
fi
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
echo "server,appendfsync,clients,pipeline,size,test,rps,p50_ms,p99_ms" >"$OUT/results.csv"

wait_port() {
    for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "server on port $1 did not start" >&2
    exit 1
}

# Waits until tern's background work has stopped changing its files: the
# engine fields that flushes, compactions and GC move, the same for a
# second. A server without them (the hash engine) settles at once.
settle() {
    local before now
    before=$(engine_state "$1")
    for _ in $(seq "$SETTLE_MAX"); do
        sleep 1
        now=$(engine_state "$1")
        [ "$now" = "$before" ] && return 0
        before=$now
    done
    echo "tern on port $1 still busy after ${SETTLE_MAX}s; running the cell anyway" >&2
}
engine_state() {
    redis-cli -p "$1" info all 2>/dev/null | tr -d '\r' |
        grep -E '^engine_(flush_bytes_written|compaction_bytes_written|immutable_memtables|sst_bytes|blob_bytes|wal_bytes):'
}

cell=0
for fsync in $FSYNCS; do
    rm -rf "$WORK/tern" "$WORK/redis"
    mkdir -p "$WORK/redis"
    "$TERN_BIN" serve --engine "$ENGINE" --port $TPORT --dir "$WORK/tern" --appendfsync "$fsync" \
        --metrics-bind off --maxclients 20000 >"$WORK/tern.log" 2>&1 &
    TPID=$!
    redis-server --port $RPORT --dir "$WORK/redis" --appendonly yes --appendfsync "$fsync" \
        --save "" --maxclients 20000 >"$WORK/redis.log" 2>&1 &
    RPID=$!
    wait_port $TPORT
    wait_port $RPORT
    # A server that could not bind (another one holds the port) exits, and
    # the ping above would have been answered by the other one.
    sleep 0.5
    for pid in $TPID $RPID; do
        kill -0 "$pid" 2>/dev/null || {
            echo "a server exited at start (is port $TPORT or $RPORT taken?); see $WORK/*.log" >&2
            cat "$WORK/tern.log" "$WORK/redis.log" >&2
            exit 1
        }
    done
    for c in $CLIENTS; do
        for p in $PIPES; do
            for d in $SIZES; do
                cell=$((cell + 1))
                order="$TPORT $RPORT"
                [ $((cell % 2)) = 0 ] && order="$RPORT $TPORT"
                for port in $order; do
                    name=$([ $port = $TPORT ] && echo tern || echo redis)
                    redis-cli -p $port flushall >/dev/null
                    settle $TPORT
                    n=$([ "$d" -ge 16384 ] && echo "$N_LARGE" || echo "$N")
                    timeout "$CELL_TIMEOUT" redis-benchmark -p $port -q --csv -n "$n" -c "$c" -P "$p" -d "$d" \
                        -r 100000 -t "$TESTS" "${THREADS_ARG[@]}" 2>/dev/null |
                        awk -F'","' -v s="$name" -v f="$fsync" -v c="$c" -v p="$p" -v d="$d" '
                            NR > 1 { gsub(/"/, ""); split($0, a, ",");
                                     t = a[1]; sub(/ .*/, "", t);
                                     printf "%s,%s,%s,%s,%s,%s,%s,%s,%s\n", s, f, c, p, d, t, a[2], a[5], a[7] }' \
                        >>"$OUT/results.csv" ||
                        echo "FAILED: $name $fsync -c $c -P $p -d $d" >&2
                done
                echo "done: $fsync -c $c -P $p -d $d" >&2
            done
        done
    done
    kill $TPID $RPID
    wait $TPID $RPID 2>/dev/null || true
done

python3 - "$OUT" <<'PY'
import csv, sys, collections
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
cell = collections.defaultdict(dict)
for r in rows:
    cell[(r["appendfsync"], int(r["clients"]), int(r["pipeline"]), int(r["size"]), r["test"])][r["server"]] = r
lines = ["| appendfsync | -c | -P | -d | test | tern req/s | redis req/s | tern/redis | tern p99 ms | redis p99 ms |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for k in sorted(cell):
    t, r = cell[k].get("tern"), cell[k].get("redis")
    if not t or not r:
        continue
    ratio = float(t["rps"]) / float(r["rps"])
    lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {float(t['rps']):,.0f} | {float(r['rps']):,.0f} | **{ratio:.2f}×** | {t['p99_ms']} | {r['p99_ms']} |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
