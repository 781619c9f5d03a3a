#!/usr/bin/env bash
# Prints one line saying what the test run actually exercised, from the
# counts the tests wrote to the summary file ("key value" lines), and fails
# if an expected count is missing or zero: a check that silently ran
# nothing must not pass. TERN_PARTIAL=1 declares a partial run: missing or
# zero counts are then listed, not fatal.
#
#   scripts/ci_summary.sh SUMMARY_FILE KEY...
#
# The key @tests stands for what every run of scripts/test.sh exercises.
set -euo pipefail
file="$1"
shift
tests="model_seeds model_crashes model_install_faults model_no_wal_epochs
  model_state_checks model_write_faults model_concurrent_checks
  model_concurrent_mid_write_crashes model_regressions
  sim_seeds_synced sim_seeds_unsynced sim_seeds_separated sim_gc_jobs_separated
  crash_loop_kills_sync_true crash_loop_kills_sync_false hash_crash_loop_kills
  serve_kill9_acked_always serve_kill9_acked_everysec serve_kill9_acked_no
  differential_sequential differential_pipelined differential_hash_engine fuzz_corpus_inputs"
keys=()
for k in "$@"; do
  if [ "$k" = @tests ]; then
    # shellcheck disable=SC2206
    keys+=($tests)
  else
    keys+=("$k")
  fi
done
set -- "${keys[@]}"
touch "$file"
# Sums per key (a key may be written by several tests or runs).
declare -A sum
while read -r k v; do
  [ -n "$k" ] || continue
  sum[$k]=$(( ${sum[$k]:-0} + v ))
done <"$file"
line="" missing=()
for k in "$@"; do
  v="${sum[$k]:-0}"
  line+="$k=$v "
  [ "$v" -gt 0 ] || missing+=("$k")
done
for k in "${!sum[@]}"; do
  case " $* " in *" $k "*) ;; *) line+="$k=${sum[$k]} " ;; esac
done
echo "SUMMARY: ${line% }"
if [ ${#missing[@]} -gt 0 ]; then
  if [ "${TERN_PARTIAL:-0}" = 1 ]; then
    echo "SUMMARY: PARTIAL run (TERN_PARTIAL=1): nothing ran for ${missing[*]}"
  else
    echo "SUMMARY: nothing ran for ${missing[*]}; a check that ran nothing does not pass (TERN_PARTIAL=1 to accept a partial run)" >&2
    exit 1
  fi
fi
