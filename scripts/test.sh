#!/usr/bin/env bash
# Sets up (packages, build) and runs the whole test suite with CTest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KVSCOPE_BUILD_DIR:-$ROOT/build}"
KVSCOPE_CMAKE_ARGS="${KVSCOPE_CMAKE_ARGS:--DKVSCOPE_WERROR=ON}" bash "$ROOT/scripts/setup.sh"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}"
cd "$BUILD_DIR"
ctest --output-on-failure -j "${KVSCOPE_TEST_JOBS:-2}" --timeout 600
