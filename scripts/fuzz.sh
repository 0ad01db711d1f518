#!/usr/bin/env bash
# Runs every parser fuzz target (build-fuzz/, `cmake --preset fuzz`) for SECONDS each, two at
# a time, each on a scratch copy of its corpus under tests/fuzz/corpus/ (the committed corpus
# is not changed). Prints each target's executions; exits non-zero when a target reports a
# crash, leak, sanitizer error or a changed input, leaving its log and reproducer in
# artifacts/fuzz/.
#   scripts/fuzz.sh [SECONDS]          (default 60)
#   KVSCOPE_FUZZ_RUNS=1000000 scripts/fuzz.sh   (a number of executions instead of a time)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_EACH="${1:-60}"
BIN="$ROOT/build-fuzz/tests/fuzz"
OUT="$ROOT/artifacts/fuzz"
mkdir -p "$OUT"
TARGETS=(safetensors trace trace_doc tokenizer_json tokenizer_model config gguf llama_state mlx_cache)
limit=(-max_total_time="$SECONDS_EACH")
[[ -n "${KVSCOPE_FUZZ_RUNS:-}" ]] && limit=(-runs="$KVSCOPE_FUZZ_RUNS")

run_one() {
  local t="$1" work
  work="$(mktemp -d)"
  cp -r "$ROOT/tests/fuzz/corpus/$t/." "$work/"
  "$BIN/fuzz_$t" "${limit[@]}" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$OUT/$t-" "$work" >"$OUT/$t.log" 2>&1
  local status=$?
  rm -rf "$work"
  local runs
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$OUT/$t.log" | grep -o '[0-9]*$' | tail -1)"
  if [[ $status -ne 0 ]]; then
    echo "fuzz_$t: FAILED after ${runs:-?} executions (exit $status); log: $OUT/$t.log" >&2
    tail -30 "$OUT/$t.log" >&2
    return 1
  fi
  echo "fuzz_$t: ${runs:-?} executions, no crash, leak or sanitizer report"
}

failed=0
for ((i = 0; i < ${#TARGETS[@]}; i += 2)); do
  pids=()
  for t in "${TARGETS[@]:i:2}"; do
    run_one "$t" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
done
exit $failed
