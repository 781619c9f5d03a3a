#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer coverage instrumentation on the
# stable toolchain (no cargo-fuzz or nightly needed) and runs each one.
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Default: 60 seconds for every target. Each target starts from
# fuzz/corpus/<target>/ plus a working corpus kept between runs in
# $FUZZ_WORK (default: ~/.cache/tern/fuzz, outside the checkout, so a fresh
# clone in CI still builds on what earlier runs found), and adds what it
# finds there. A crashing input goes to fuzz/artifacts/<target>/ and to
# $FUZZ_WORK/found/, and is printed as base64 so the log keeps it too; add
# it to fuzz/corpus/<target>/ once fixed. Needs a C++ compiler (g++ or
# clang++) for libFuzzer itself.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(wal manifest write_batch version_edit block footer table bloom
    blob_record blob_footer blob_index blob_lineage blob_ref blob_file memtier resp cluster
    hash_record hash_log hash_checkpoint)
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export RUSTFLAGS="-Cpasses=sancov-module \
  -Cllvm-args=-sanitizer-coverage-level=4 \
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
  -Cllvm-args=-sanitizer-coverage-pc-table \
  -Cllvm-args=-sanitizer-coverage-trace-compares \
  --cfg fuzzing"
# An explicit --target keeps the instrumentation out of build scripts.
host="$(rustc -vV | sed -n 's/^host: //p')"
cargo build --release --locked --bins --target "$host"
bin="$CARGO_TARGET_DIR/$host/release"
work="${FUZZ_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/tern/fuzz}"
total=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "artifacts/$t" "corpus/$t"
  log="$work/$t.log"
  echo "== fuzz $t for ${secs}s"
  "$bin/$t" "$work/$t" "corpus/$t" \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1 || {
      echo "fuzz target $t failed; see $log and artifacts/$t/"
      tail -40 "$log"
      mkdir -p "$work/found/$t"
      for f in "artifacts/$t"/*; do
        [ -f "$f" ] || continue
        cp "$f" "$work/found/$t/"
        echo "crashing input $(basename "$f") (kept in $work/found/$t/), base64:"
        head -c 16384 "$f" | base64 -w 0; echo
      done
      exit 1; }
  runs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  echo "   $t: ${runs:-?} executions, $(ls "$work/$t" | wc -l) corpus entries"
  total=$((total + ${runs:-0}))
done
echo "fuzzing passed: $total executions in total"
