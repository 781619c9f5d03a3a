#!/usr/bin/env bash
# Runs the GC-heavy comparison (`workloads/workload_update`: zipfian
# whole-row updates) against tern, rocksdb, rocksdb-blob and fjall through
# compare.sh, raw outputs under bench/results/update-<records>-t<threads>/.
# Usage: bench/update.sh [records] [operations] [threads] [rounds]
#        (default: 1000000 3000000 4 1)
set -euo pipefail
records="${1:-1000000}"
threads="${3:-4}"
STEPS=load,workloads/workload_update THREADS="$threads" \
  OUT="update-${records}-t${threads}" \
  exec "$(dirname "$0")/compare.sh" "$records" "${2:-3000000}" "${4:-1}"
