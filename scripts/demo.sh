#!/usr/bin/env bash
# Sets up (packages, build) and runs the built-in demo audit: the GUI when a display
# exists, the CLI report otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KVSCOPE_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/setup.sh"
exec bash "$ROOT/scripts/run-demo-audit.sh" "$BUILD_DIR"
