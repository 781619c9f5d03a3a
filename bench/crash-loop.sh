#!/usr/bin/env bash
# Long kill -9 crash loops of `tern stress`, in one or both sync modes.
#
#   bench/crash-loop.sh [--kills N] [--sync true|false|both] [--keys N]
#                       [--threads N] [--dir DIR] [-- EXTRA STRESS FLAGS]
#
# Builds the release binary, then for each sync mode runs
# `tern stress --crash-loop N` on a fresh directory: start the stress run,
# SIGKILL it at a random moment, `tern check` the dead store, restart (the
# new run verifies every key against the expected state first), repeat;
# finally one --verify-only run. Exits non-zero on the first failure, which
# prints a command that repeats the failing run. EXTRA STRESS FLAGS (for
# example `-- --blob-threshold 0 --gc on --gc-ratio 0.2`) go to every child
# run through TERN_CRASH_LOOP_FLAGS; what they leave open each child draws
# from its own seed (separation is on in most seeds).
set -euo pipefail
cd "$(dirname "$0")/.."
kills=200
sync=both
keys=100000
threads=4
base="${TMPDIR:-/tmp}/tern-crash-loop"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) kills="$2"; shift 2 ;;
    --sync) sync="$2"; shift 2 ;;
    --keys) keys="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --dir) base="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
case "$sync" in
  both) modes=(true false) ;;
  true|false) modes=("$sync") ;;
  *) echo "--sync must be true, false or both" >&2; exit 2 ;;
esac
cargo build --release --locked -p tern-cli
tern="${CARGO_TARGET_DIR:-target}/release/tern"
for mode in "${modes[@]}"; do
  dir="$base/sync-$mode"
  rm -rf "$dir" "$dir.expected"
  mkdir -p "$base"
  echo "== crash loop: $kills kills, sync=$mode, $dir"
  TERN_CRASH_LOOP_FLAGS="${extra[*]:-}" "$tern" stress --dir "$dir" \
    --crash-loop "$kills" --sync "$mode" --keys "$keys" --threads "$threads" \
    ${extra[@]+"${extra[@]}"}
done
