#!/usr/bin/env bash
# The memory tier against tier-off Tern and RocksDB, in one run, in the
# shape of MioDB's micro-benchmarks: fillrandom then readrandom with
# 16-byte keys and values of 1, 4, 16 and 64 KiB (the same bytes for every
# size), then YCSB A. Each configuration gets a fresh directory.
#
#   bench/memtier.sh [BYTES_PER_SIZE] [OUT_DIR]
#
# BYTES_PER_SIZE defaults to 1 GiB of values per value size. Configurations:
#   off      Tern without a tier
#   tier     Tern with a 512 MiB tier in anonymous memory
#   durable  the same tier kept in a file on /dev/shm (tmpfs: what a DAX
#            mount gives), synced at every copy-in
#   rocksdb  RocksDB (needs a build with --features rocksdb)
# Every phase ends settled (Db::flush and background work done), so the
# tier's copy-outs are charged to the phase that caused them. Write
# amplification is bytes written through system calls over user bytes:
# a durable tier's msyncs to tmpfs are memory, not counted, as MioDB
# counts its NVM tier apart from the disk. Prints one line per phase and
# writes the raw output to OUT_DIR (default: bench-memtier-<date>).
set -euo pipefail
bytes="${1:-$((1 << 30))}"
out="${2:-bench-memtier-$(date +%Y%m%d-%H%M%S)}"
tern="${TERN_BIN:-target/release/tern}"
data="${BENCH_DIR:-/tmp/tern-bench-memtier}"
tierfile="/dev/shm/tern-bench-memtier-$$"
mkdir -p "$out"
trap 'rm -rf "$data" "$tierfile" "$tierfile.lock"' EXIT

config_args() {
  case "$1" in
    off) echo "--db tern" ;;
    tier) echo "--db tern -p tern.memtier_size=512M" ;;
    durable) echo "--db tern -p tern.memtier_size=512M -p tern.memtier_path=$tierfile" ;;
    rocksdb) echo "--db rocksdb" ;;
  esac
}

summarize() { # file config size
  awk -v cfg="$2" -v size="$3" '
    /^\[metrics\] phase=/ { split($2, a, "="); phase = a[2] }
    /^\[metrics\] throughput/ { ops[phase] = $3 }
    /^\[metrics\] latency\(us\)/ { for (i = 4; i <= NF; i++) { split($i, kv, "="); lat[phase, kv[1]] = kv[2] } }
    /^\[metrics\] io:/ { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "write_amp") wa[phase] = kv[2] } }
    /^stall.micros COUNT/ { stall[phase] = $4 }
    END { for (p in ops) printf "%-8s %-6s %-10s ops/s=%-10s p99=%-8s p99.9=%-8s p99.99=%-9s write_amp=%-6s stall_us=%s\n", cfg, size, p, ops[p], lat[p, "p99"], lat[p, "p99.9"], lat[p, "p99.99"], wa[p], stall[p] }
  ' "$1"
}

for kib in 1 4 16 64; do
  value=$((kib * 1024))
  num=$((bytes / value))
  for cfg in off tier durable rocksdb; do
    rm -rf "$data" "$tierfile"
    log="$out/db-${kib}k-$cfg.txt"
    # shellcheck disable=SC2046
    "$tern" bench db --benchmarks=fillrandom,readrandom --num "$num" --key_size 16 \
      --value_size "$value" --dir "$data" --fresh $(config_args "$cfg") >"$log" 2>&1
    summarize "$log" "$cfg" "${kib}KiB"
  done
done

records="${YCSB_RECORDS:-1000000}"
ops="${YCSB_OPS:-1000000}"
for cfg in off tier durable rocksdb; do
  rm -rf "$data" "$tierfile"
  log="$out/ycsb-a-$cfg.txt"
  # shellcheck disable=SC2046
  "$tern" bench ycsb -P workloads/workloada -p recordcount="$records" -p operationcount="$ops" \
    -p threadcount=4 --load --run --dir "$data" $(config_args "$cfg") >"$log" 2>&1
  summarize "$log" "$cfg" "ycsb-a"
done
