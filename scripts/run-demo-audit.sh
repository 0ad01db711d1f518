#!/usr/bin/env bash
# Runs the demo with an existing build folder ($1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${1:-$ROOT/build}"
"$BUILD_DIR/app/cli/kvscope-cli" --version
