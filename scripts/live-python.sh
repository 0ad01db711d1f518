#!/usr/bin/env bash
# Prints the path of a Python with the pinned real libraries of tests/live/requirements.txt
# (transformers, CPU-run torch), making the virtualenv once: $KVSCOPE_LIVE_VENV, default
# ~/.cache/kvscope/venv-live, reused while the requirements file is unchanged (a stamp holds
# its hash; pip's own cache keeps the wheels). On failure (no network, no space) it prints
# nothing, says why on stderr, and exits 1: the caller reports the live tests as not checked.
#
# With --transformers4 it prints instead a folder holding the last transformers 4.x
# (tests/live/requirements-transformers4.txt, installed without dependencies) that goes first
# on PYTHONPATH over that virtualenv: the same torch, transformers 4. Made once the same way
# ($KVSCOPE_LIVE_VENV-transformers4, a stamp of both requirement files' hashes).
#
# With --mlx it prints a folder holding MLX and mlx-lm (tests/live/requirements-mlx.txt, installed
# without dependencies) for PYTHONPATH over that virtualenv ($KVSCOPE_LIVE_VENV-mlx).
#
# With --llama-cpp it prints a folder holding llama.cpp as tests/live/requirements-llama-cpp.txt
# pins it: llama.cpp/ (convert_hf_to_gguf.py and its gguf-py, from the llama-cpp-python source
# package) and site/ (llama_cpp built from that package, sentencepiece; gguf and accelerate,
# which transformers' own GGUF loader needs) for PYTHONPATH over the virtualenv. Made once
# ($KVSCOPE_LIVE_VENV-llama-cpp, stamped alike).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/jobs.sh"
REQ="$ROOT/tests/live/requirements.txt"
VENV="${KVSCOPE_LIVE_VENV:-$HOME/.cache/kvscope/venv-live}"
HASH="$(sha256sum "$REQ" | cut -d' ' -f1)"
# A folder of packages installed without dependencies over the virtualenv (--transformers4,
# --mlx): REQUIREMENTS into $VENV-SUFFIX, stamped with both requirement files' hashes.
overlay() {
  local requirements="$ROOT/tests/live/$1" dir="$VENV-$2" py stamp
  py="$(bash "${BASH_SOURCE[0]}")" || exit 1
  stamp="$HASH $(sha256sum "$requirements" | cut -d' ' -f1)"
  if [[ "$(cat "$dir/.kvscope-requirements" 2>/dev/null)" == "$stamp" ]]; then
    echo "$dir"
    exit 0
  fi
  rm -rf "$dir"
  if ! "$(dirname "$py")/pip" install --disable-pip-version-check -q --no-deps --target "$dir" \
      -r "$requirements" >&2; then
    echo "live-python: pip install --target $dir -r $requirements failed (see above)" >&2
    rm -rf "$dir"
    exit 1
  fi
  echo "$stamp" > "$dir/.kvscope-requirements"
  echo "$dir"
  exit 0
}
[[ "${1:-}" == --transformers4 ]] && overlay requirements-transformers4.txt transformers4
[[ "${1:-}" == --mlx ]] && overlay requirements-mlx.txt mlx
if [[ "${1:-}" == --llama-cpp ]]; then
  PY="$(bash "${BASH_SOURCE[0]}")" || exit 1
  REQL="$ROOT/tests/live/requirements-llama-cpp.txt"
  DIRL="$VENV-llama-cpp"
  HASHL="$HASH $(sha256sum "$REQL" | cut -d' ' -f1)"
  if [[ "$(cat "$DIRL/.kvscope-requirements" 2>/dev/null)" == "$HASHL" ]]; then
    echo "$DIRL"
    exit 0
  fi
  rm -rf "$DIRL"
  mkdir -p "$DIRL/download"
  PIP="$(dirname "$PY")/pip"
  SDIST="$(grep -E '^llama-cpp-python==' "$REQL")"
  grep -vE '^(#|llama-cpp-python==|$)' "$REQL" > "$DIRL/download/site.txt"
  # pip download prepares the source package's metadata first (a few minutes, once).
  if ! "$PIP" download --disable-pip-version-check -q --no-deps --no-binary :all: -d "$DIRL/download" "$SDIST" >&2 ||
     ! "$PIP" install --disable-pip-version-check -q --no-deps --target "$DIRL/site" -r "$DIRL/download/site.txt" >&2; then
    echo "live-python: fetching $SDIST or the packages of $REQL failed (see above)" >&2
    rm -rf "$DIRL"
    exit 1
  fi
  # llama.cpp itself, built from that source package into site/ (llama_cpp: the low-level API
  # kvscope-record --engine llama.cpp drives; a few minutes on 2 cores, once). Portable code
  # (no -march=native): the folder may be restored on another machine.
  if ! CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
       CMAKE_BUILD_PARALLEL_LEVEL="$KVSCOPE_JOBS" "$PIP" install --disable-pip-version-check -q --no-deps \
       --target "$DIRL/site" "$DIRL"/download/llama_cpp_python-*.tar.gz >&2; then
    echo "live-python: building $SDIST failed (see above)" >&2
    rm -rf "$DIRL"
    exit 1
  fi
  tar -xzf "$DIRL"/download/llama_cpp_python-*.tar.gz -C "$DIRL/download"
  mv "$DIRL"/download/llama_cpp_python-*/vendor/llama.cpp "$DIRL/llama.cpp"
  rm -rf "$DIRL/download"
  if [[ ! -f "$DIRL/llama.cpp/convert_hf_to_gguf.py" ]]; then
    echo "live-python: $SDIST holds no vendor/llama.cpp/convert_hf_to_gguf.py" >&2
    rm -rf "$DIRL"
    exit 1
  fi
  echo "$HASHL" > "$DIRL/.kvscope-requirements"
  echo "$DIRL"
  exit 0
fi
if [[ -x "$VENV/bin/python" && "$(cat "$VENV/.kvscope-requirements" 2>/dev/null)" == "$HASH" ]]; then
  echo "$VENV/bin/python"
  exit 0
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
if ! /usr/bin/python3 -m venv "$VENV" >&2; then
  echo "live-python: cannot create a virtualenv at $VENV (python3-venv missing?)" >&2
  exit 1
fi
if ! "$VENV/bin/pip" install --disable-pip-version-check -q -r "$REQ" >&2; then
  echo "live-python: pip install -r $REQ failed (see above)" >&2
  rm -rf "$VENV"
  exit 1
fi
echo "$HASH" > "$VENV/.kvscope-requirements"
echo "$VENV/bin/python"
