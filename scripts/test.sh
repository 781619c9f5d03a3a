#!/usr/bin/env bash
# Runs Tern's test suite on a fresh Debian machine with rustup.
# Installs what it needs first (the toolchain components), then builds and
# tests every crate. TERN_MODEL_SEEDS sets how many seeds the model-based
# test runs (default here: 100).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs) and re-run" >&2
  exit 2
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

# protoc, etcd, moto, redis-server (see scripts/deps.sh).
source "$(dirname "$0")/deps.sh"

# Tests write what they exercised ("key count" lines) here; the summary at
# the end fails on a check that ran nothing. A caller (.ci/run) that sets it
# adds its own counts and prints the summary itself.
own_summary=0
if [ -z "${TERN_SUMMARY_FILE:-}" ]; then
  own_summary=1
  export TERN_SUMMARY_FILE="${CARGO_TARGET_DIR:-$PWD/target}/test-summary.txt"
  mkdir -p "$(dirname "$TERN_SUMMARY_FILE")"
  : >"$TERN_SUMMARY_FILE"
fi

export TERN_MODEL_SEEDS="${TERN_MODEL_SEEDS:-100}"
# Kills per sync mode in the kill -9 crash loop of `tern stress`.
export TERN_CRASH_KILLS="${TERN_CRASH_KILLS:-10}"
echo "== cargo test (model test with $TERN_MODEL_SEEDS seeds, crash loop with $TERN_CRASH_KILLS kills per sync mode, fuzz corpus replay) [$(date +%T)]"
# --all-targets includes the criterion benches: each runs once as a test,
# so a bench that no longer builds or panics fails here without a second,
# release-profile build of the whole workspace.
cargo test --workspace --all-targets --locked
echo "== doc tests [$(date +%T)]"
cargo test --workspace --doc --locked
if [ "${TERN_BENCH_ROCKSDB:-0}" = 1 ]; then
  # Benchmark bindings against the system RocksDB (Debian's librocksdb-dev 7.8).
  apt_install librocksdb-dev libclang-dev
  export ROCKSDB_LIB_DIR="${ROCKSDB_LIB_DIR:-/usr/lib/x86_64-linux-gnu}"
  echo "== bench bindings (rocksdb, fjall) [$(date +%T)]"
  cargo test -p tern-bench --features rocksdb,fjall --locked --test smoke
  echo "bench_rocksdb_fjall_smoke 1" >>"$TERN_SUMMARY_FILE"
fi
if [ "$own_summary" = 1 ]; then
  ./scripts/ci_summary.sh "$TERN_SUMMARY_FILE" @tests
fi
echo "all tests passed"
