#!/usr/bin/env bash
# Sets up (packages, build) and runs the whole test suite with CTest, then renders the
# demo audit in the desktop inspector under Xvfb and keeps the screenshot in artifacts/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KVSCOPE_BUILD_DIR:-$ROOT/build}"
# With the sanitizer suite (below), which builds and runs the core and CLI suites instrumented,
# the main tree leaves kvscope_core_tests out: CI ran none of its suites there, and its build
# was the largest part of the main tree's (docs/limits.md).
CORE_TESTS=ON
[[ "${KVSCOPE_SANITIZER_SUITE:-1}" == 1 ]] && CORE_TESTS=OFF
KVSCOPE_CMAKE_ARGS="${KVSCOPE_CMAKE_ARGS:--DKVSCOPE_WERROR=ON} -DKVSCOPE_BUILD_CORE_TESTS=$CORE_TESTS" \
  bash "$ROOT/scripts/setup.sh"
source "$ROOT/scripts/jobs.sh"  # before OMP_NUM_THREADS=1, which plain nproc would honour
export KVSCOPE_JOBS
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# The real transformers (pinned, tests/live/requirements.txt) in a cached virtualenv, for the
# live recorder tests (python_live_transformers), and the folders over it (transformers 4, MLX,
# llama.cpp). Without them the live tests are reported not checked; KVSCOPE_REQUIRE_LIVE=1 makes
# that an error. KVSCOPE_LIVE=0 skips them. They are made (or found, once cached) in the
# background while the sanitizer tree builds: on a machine without the caches the downloads and
# llama.cpp's build overlap that build instead of adding to it (docs/limits.md).
LIVE_DIR="$(mktemp -d)"
trap 'rm -rf "$LIVE_DIR"' EXIT
LIVE_PID=""
if [[ "${KVSCOPE_LIVE:-1}" == 1 ]]; then
  (
    # Each result: LIVE_DIR/NAME holds the printed path; NAME.failed marks one that did not install.
    bash "$ROOT/scripts/live-python.sh" > "$LIVE_DIR/python" 2> "$LIVE_DIR/python.log" || touch "$LIVE_DIR/python.failed"
    if [[ ! -f "$LIVE_DIR/python.failed" ]]; then
      for option in transformers4 mlx llama-cpp; do
        bash "$ROOT/scripts/live-python.sh" --$option > "$LIVE_DIR/$option" 2> "$LIVE_DIR/$option.log" ||
          touch "$LIVE_DIR/$option.failed"
      done
    fi
  ) &
  LIVE_PID=$!
fi

# The core, the CLI and their tests again, built with ASan + UBSan (preset `asan`: -O1, line
# tables, a unity build, no GUI, in build-asan/; a sanitizer report aborts the test that caused
# it); its suite runs after the main one. KVSCOPE_SANITIZER_SUITE=0 skips both (docs/limits.md,
# "What CI runs").
if [[ "${KVSCOPE_SANITIZER_SUITE:-1}" == 1 ]]; then
  (
    cd "$ROOT"
    cmake --preset asan >/dev/null
    cmake --build --preset asan -j "$KVSCOPE_JOBS"
  )
fi

if [[ -n "$LIVE_PID" ]]; then
  wait "$LIVE_PID"
  cat "$LIVE_DIR"/*.log >&2 2>/dev/null || true
  if [[ ! -f "$LIVE_DIR/python.failed" ]]; then
    cmake -DKVSCOPE_HF_PYTHON="$(cat "$LIVE_DIR/python")" "$BUILD_DIR" >/dev/null
    # Each folder is handed to CMake as VARIABLE; one that did not install is reported not checked.
    live_folder() {
      local option="$1" variable="$2" what="$3" requirements="$4"
      if [[ ! -f "$LIVE_DIR/$option.failed" ]]; then
        cmake -D"$variable"="$(cat "$LIVE_DIR/$option")" "$BUILD_DIR" >/dev/null
      else
        echo "not checked: the live $what tests ($requirements did not install, see above)" >&2
        [[ "${KVSCOPE_REQUIRE_LIVE:-0}" == 1 ]] && exit 1
        cmake -D"$variable"= "$BUILD_DIR" >/dev/null
      fi
    }
    live_folder transformers4 KVSCOPE_HF4_PATH "transformers 4" tests/live/requirements-transformers4.txt
    live_folder mlx KVSCOPE_MLX_PATH MLX tests/live/requirements-mlx.txt
    live_folder llama-cpp KVSCOPE_LLAMA_CPP "GGUF and llama.cpp" tests/live/requirements-llama-cpp.txt
  else
    echo "not checked: the live transformers tests (no virtualenv with tests/live/requirements.txt, see above)" >&2
    [[ "${KVSCOPE_REQUIRE_LIVE:-0}" == 1 ]] && exit 1
    cmake -DKVSCOPE_HF_PYTHON= -DKVSCOPE_HF4_PATH= -DKVSCOPE_MLX_PATH= -DKVSCOPE_LLAMA_CPP= "$BUILD_DIR" >/dev/null
  fi
fi
# With the sanitizer suite (below), which runs every core and CLI test instrumented, the main
# tree runs only what that suite does not: the GUI tests, the MemoryLimit tests (skipped under
# ASan), the Python-only engine test, the audits of the independent engine's runs (label
# uninstrumented_only), the live engines' tests and the .deb packaging test.
MAIN_TESTS=()
if [[ "${KVSCOPE_SANITIZER_SUITE:-1}" == 1 ]]; then
  MAIN_TESTS=(-R '^(ui[.]|MemoryLimit$|python_independent_engine$|python_engine_audit$|python_live_transformers(_4)?$|python_live_gguf$|python_live_llama_cpp$|python_live_mlx$|engine_table(_reset)?$|package_deb$)')
fi
(
  cd "$BUILD_DIR"
  QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}" ctest --output-on-failure -j "${KVSCOPE_TEST_JOBS:-2}" --timeout 600 \
    "${MAIN_TESTS[@]}"
  # The live engines' runs, one table (engine x family x run: expected and got finding).
  [[ -f engine-table.tsv ]] && python3 "$ROOT/tests/scenarios/engine_table.py" engine-table.tsv
  true
)

# The sanitizer tree's suite (built above).
if [[ "${KVSCOPE_SANITIZER_SUITE:-1}" == 1 ]]; then
  (
    cd "$ROOT"
    ctest --preset asan -j "${KVSCOPE_TEST_JOBS:-2}" --timeout 900
  )
fi

# The parsers of untrusted input under sanitizers (issue 12, docs/limits.md): the torch-free
# parser sources alone. With clang (scripts/setup.sh installs it), each libFuzzer target runs
# for KVSCOPE_FUZZ_SECONDS (60) with ASan + UBSan, two at a time, starting from a scratch
# copy of its committed corpus (which is never changed); a crash, leak, UB report or an input
# changed by its parser fails the run and leaves the reproducer in artifacts/fuzz/. Without
# clang, GCC's ASan + UBSan replay every corpus and regression input instead.
# KVSCOPE_SKIP_SANITIZERS=1 skips this step.
if [[ "${KVSCOPE_SKIP_SANITIZERS:-0}" != 1 ]]; then
  (
    cd "$ROOT"
    if command -v clang++ >/dev/null && [[ "${KVSCOPE_FUZZ_SECONDS:-60}" != 0 ]]; then
      cmake --preset fuzz >/dev/null
      cmake --build --preset fuzz
      bash "$ROOT/scripts/fuzz.sh" "${KVSCOPE_FUZZ_SECONDS:-60}"
    else
      cmake --preset parsers-asan >/dev/null
      cmake --build --preset parsers-asan
      ctest --preset parsers-asan
    fi
  )
fi

# The demo audit, rendered by the app itself in a real X server (Xvfb).
GUI="$BUILD_DIR/app/gui/kvscope"
if [[ -x "$GUI" ]]; then
  mkdir -p "$ROOT/artifacts"
  DEMO="$BUILD_DIR/demo-model"
  [[ -f "$DEMO/config.json" ]] || "$BUILD_DIR/app/cli/kvscope-cli" make-demo "$DEMO" >/dev/null
  source "$ROOT/scripts/demo-args.sh"
  rm -f "$ROOT/artifacts/demo-audit.png"
  set +e
  QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1920x1200x24" "$GUI" --audit --model "$DEMO" "${DEMO_ARGS[@]}" \
    --select-divergence --export-png "$ROOT/artifacts/demo-audit.png"
  status=$?
  set -e
  if [[ $status -ne 1 || ! -s "$ROOT/artifacts/demo-audit.png" ]]; then
    echo "demo screenshot under Xvfb failed (exit $status; expected 1 = divergent)" >&2
    exit 1
  fi
  echo "artifact: $ROOT/artifacts/demo-audit.png"
fi
