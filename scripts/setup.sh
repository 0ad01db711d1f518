#!/usr/bin/env bash
# Installs what KV Scope needs on Debian 12 (only the packages that are missing), then
# configures and builds. Used by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KVSCOPE_BUILD_DIR:-$ROOT/build}"

PACKAGES=(
  build-essential cmake pkg-config git
  libtorch-dev libopenblas0-pthread
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libgl-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libpcre2-dev libcli11-dev libutf8proc-dev
  libxxhash-dev libssl-dev
  python3 python3-numpy python3-torch python3-venv python3-setuptools python3-wheel python3-pip python3-xxhash
  xvfb xauth fonts-dejavu-core
  help2man shared-mime-info
  clang libclang-rt-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "kvscope setup: installing ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "kvscope setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# LibTorch's Debian build links the generic libblas.so.3: make sure it resolves to OpenBLAS.
blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)"
if [[ -n "$blas" && "$blas" != *openblas* ]]; then
  echo "kvscope setup: warning: libblas.so.3 -> $blas (not OpenBLAS); matrix products will be slow" >&2
fi

source "$ROOT/scripts/jobs.sh"
# A unity build (CMake batches of 8 sources per translation unit) compiles the shared LibTorch,
# JSON and GoogleTest templates once per batch instead of once per file: a fresh build takes
# about half the time (docs/limits.md). KVSCOPE_UNITY_BUILD=OFF builds file by file, which
# suits edit-compile loops better.
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_UNITY_BUILD="${KVSCOPE_UNITY_BUILD:-ON}" -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
  ${KVSCOPE_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$KVSCOPE_JOBS"
