#!/usr/bin/env bash
# The Python package's tests, run from the installed package: a fresh virtualenv (with the
# system's numpy and torch), `pip install` of python/ (offline: the build backend is the
# system's setuptools), then python/tests from a scratch folder so that nothing imports the
# source. CTest python_trace_package runs this with the optional xxhash module (checksums,
# KVSCOPE_TRACE_XXHASH=1), python_trace_package_no_xxhash without it (=0, even where it is
# installed). Asked to run with it where it is missing, the script says `not checked` and
# exits 77 (CTest: skipped), or fails under CI (scripts/setup.sh installs python3-xxhash).
#
#   [KVSCOPE_TRACE_XXHASH=0|1] bash python/tests/run_installed.sh VENV_DIR [KVSCOPE_CLI]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PKG="$(dirname "$HERE")"
REPO="$(dirname "$PKG")"
VENV="${1:?usage: run_installed.sh VENV_DIR [KVSCOPE_CLI]}"
CLI="${2:-${KVSCOPE_CLI:-}}"
[[ -z "$CLI" ]] || CLI="$(realpath "$CLI")"
PY="${KVSCOPE_PYTHON:-/usr/bin/python3}"

if [[ "${KVSCOPE_TRACE_XXHASH:-}" == 1 ]] && ! "$PY" -c "import xxhash" 2>/dev/null; then
  if [[ -n "${CI:-}" ]]; then
    echo "run_installed.sh: the xxhash module is missing (scripts/setup.sh installs python3-xxhash)" >&2
    exit 1
  fi
  echo "not checked: the package with checksums needs the xxhash module (Debian: python3-xxhash)"
  exit 77
fi
echo "KVSCOPE_TRACE_XXHASH=${KVSCOPE_TRACE_XXHASH:-} (1: with xxhash, 0: without, empty: as installed)"
rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
# pip builds in the folder it is given: build a copy so the source tree stays clean.
cp -r "$PKG/pyproject.toml" "$PKG/README.md" "$PKG/kvscope_trace" "$SCRATCH/"
"$VENV/bin/python" -m pip install --quiet --no-index --no-build-isolation --no-deps \
  --disable-pip-version-check "$SCRATCH"
rm -rf "${SCRATCH:?}"/*
"$VENV/bin/python" -m pip show --files kvscope-trace | grep -E "^(Name|Version):|bin/(kvtrace|kvscope-record)$"

cd "$SCRATCH"
KVSCOPE_TRACE_INSTALLED=1 KVSCOPE_REPO="$REPO" KVSCOPE_CLI="$CLI" \
  "$VENV/bin/python" -m unittest discover -s "$HERE" -t "$HERE" -p "test_*.py" -v
