#!/usr/bin/env bash
# Runs the built-in demo audit with an existing build folder ($1): writes the bundled demo
# checkpoint (deterministic, `kvscope-cli make-demo`), then audits a cached run with two
# injected faults — layer 2 storing layer 1's K/V, and a second request overwriting the
# first one's cache row. Opens the desktop inspector when a display exists, else prints
# the CLI report.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${1:-$ROOT/build}"
CLI="$BUILD_DIR/app/cli/kvscope-cli"
GUI="$BUILD_DIR/app/gui/kvscope"
DEMO="$BUILD_DIR/demo-model"
if [[ ! -f "$DEMO/config.json" ]]; then
  "$CLI" make-demo "$DEMO" >/dev/null || exit 2
fi
source "$ROOT/scripts/demo-args.sh"
ARGS=(--model "$DEMO" "${DEMO_ARGS[@]}")
"$CLI" --version
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x "$GUI" && -z "${KVSCOPE_DEMO_CLI:-}" ]]; then
  exec "$GUI" "${ARGS[@]}" --run
fi
"$CLI" audit "${ARGS[@]}"
status=$?
# Exit 1 means "divergent": the expected outcome of the demo's injected faults.
[[ $status -eq 1 ]] && exit 0
exit $status
