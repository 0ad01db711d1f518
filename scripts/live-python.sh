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
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQ="$ROOT/tests/live/requirements.txt"
VENV="${KVSCOPE_LIVE_VENV:-$HOME/.cache/kvscope/venv-live}"
HASH="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ "${1:-}" == --transformers4 ]]; then
  PY="$(bash "${BASH_SOURCE[0]}")" || exit 1
  REQ4="$ROOT/tests/live/requirements-transformers4.txt"
  DIR4="$VENV-transformers4"
  HASH4="$HASH $(sha256sum "$REQ4" | cut -d' ' -f1)"
  if [[ "$(cat "$DIR4/.kvscope-requirements" 2>/dev/null)" == "$HASH4" ]]; then
    echo "$DIR4"
    exit 0
  fi
  rm -rf "$DIR4"
  if ! "$(dirname "$PY")/pip" install --disable-pip-version-check -q --no-deps --target "$DIR4" \
      -r "$REQ4" >&2; then
    echo "live-python: pip install --target $DIR4 -r $REQ4 failed (see above)" >&2
    rm -rf "$DIR4"
    exit 1
  fi
  echo "$HASH4" > "$DIR4/.kvscope-requirements"
  echo "$DIR4"
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
