#!/usr/bin/env bash
# Prints the path of a Python with the pinned real libraries of tests/live/requirements.txt
# (transformers, CPU-run torch), making the virtualenv once: $KVSCOPE_LIVE_VENV, default
# ~/.cache/kvscope/venv-live, reused while the requirements file is unchanged (a stamp holds
# its hash; pip's own cache keeps the wheels). On failure (no network, no space) it prints
# nothing, says why on stderr, and exits 1: the caller reports the live tests as not checked.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQ="$ROOT/tests/live/requirements.txt"
VENV="${KVSCOPE_LIVE_VENV:-$HOME/.cache/kvscope/venv-live}"
HASH="$(sha256sum "$REQ" | cut -d' ' -f1)"
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
