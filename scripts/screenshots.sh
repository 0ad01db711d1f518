#!/usr/bin/env bash
# Regenerates every PNG of docs/screenshots/ with the app itself (`kvscope --audit ...
# --export-png`, offscreen): the demo audit (scripts/demo-args.sh) on the demo checkpoint,
# and the transformers-recorded worked question (tests/fixtures/hf/scenarios/
# gpt2.q1_wrong_layer_and_cross_request, converted with tests/scenarios/scenario_to_trace.py)
# on the GPT-2 fixture, each at 1680x1050 (the default) and at a laptop's 1366x768.
#   scripts/screenshots.sh [BUILD_DIR] [OUT_DIR]     (defaults: build/, docs/screenshots/)
# Exit 1 from kvscope means "divergent", the expected verdict of both audits.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$(cd "${1:-$ROOT/build}" && pwd)"
OUT="${2:-$ROOT/docs/screenshots}"
GUI="$BUILD_DIR/app/gui/kvscope"
CLI="$BUILD_DIR/app/cli/kvscope-cli"
export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}"
WORK="$(mktemp -d /tmp/kvscope-screenshots.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

DEMO="$BUILD_DIR/demo-model"  # the path the banners show
[[ -f "$DEMO/config.json" ]] || "$CLI" make-demo "$DEMO" >/dev/null
source "$ROOT/scripts/demo-args.sh"
MODEL="$ROOT/tests/fixtures/hf/models/gpt2"
TRACE="$BUILD_DIR/q1.kvtrace"  # a stable path for the setup's trace field
"${PYTHON:-/usr/bin/python3}" "$ROOT/tests/scenarios/scenario_to_trace.py" \
  "$ROOT/tests/fixtures/hf/scenarios/gpt2.q1_wrong_layer_and_cross_request.json" "$MODEL" "$TRACE"

shot() {  # shot NAME ARGS...: one PNG; kvscope refuses to overwrite, so the old one goes first
  local png="$OUT/$1.png"
  shift
  rm -f "$png"
  local status=0
  "$GUI" --audit "$@" --export-png "$png" >"$WORK/log" 2>&1 || status=$?
  if [[ $status -ne 1 || ! -s "$png" ]]; then
    cat "$WORK/log" >&2
    echo "screenshot $png failed (exit $status; expected 1 = divergent)" >&2
    exit 1
  fi
  echo "wrote $png"
}

mkdir -p "$OUT"
shot demo-wrong-layer --model "$DEMO" "${DEMO_ARGS[@]}" --select-divergence
shot demo-cross-request --model "$DEMO" "${DEMO_ARGS[@]}" --select-finding cross_request
shot demo-1680x1050 --model "$DEMO" "${DEMO_ARGS[@]}" --select-divergence --size 1680x1050
shot demo-1366x768 --model "$DEMO" "${DEMO_ARGS[@]}" --select-divergence --size 1366x768
shot transformers-1680x1050 --model "$MODEL" --trace "$TRACE" --select-divergence --size 1680x1050
shot transformers-1366x768 --model "$MODEL" --trace "$TRACE" --select-divergence --size 1366x768
shot transformers-wrong-layer-cross-request --model "$MODEL" --trace "$TRACE" \
  --select-finding cross_request
