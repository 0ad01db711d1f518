#!/usr/bin/env bash
# The .deb as a user gets it: CPack builds it from the tested build tree (stripped), then it
# is unpacked with dpkg -x into a scratch root; its control fields and files are checked,
# and the unpacked kvscope-cli, kvscope, kvtrace and man pages run from there (a demo
# audit, a minimized reproducer, the MIME magic on real traces). CTest package_deb runs it.
#
#   bash packaging/tests/deb_package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD="$(realpath "${1:?usage: deb_package_test.sh BUILD_DIR SOURCE_DIR}")"
SRC="$(realpath "${2:?usage: deb_package_test.sh BUILD_DIR SOURCE_DIR}")"
OUT="$BUILD/package-test"
fail() { echo "FAIL: $*" >&2; exit 1; }
# `producer | has PATTERN`: reads all of its input before matching. A plain `| grep -q` under
# pipefail fails when grep exits at its first match while the producer is still writing
# (SIGPIPE): the man page passed 32 KiB and its check failed although the text was there.
has() { local text; text="$(cat)"; grep -q -e "$1" <<<"$text"; }

rm -rf "$OUT"
mkdir -p "$OUT"
start=$(date +%s%N)
(cd "$BUILD" && cpack -G DEB -B "$OUT" >"$OUT/cpack.log" 2>&1) || { cat "$OUT/cpack.log" >&2; fail "cpack"; }
echo "cpack -G DEB: $(( ($(date +%s%N) - start) / 1000000 )) ms"
DEB="$(ls "$OUT"/kvscope_*.deb)"

field() { dpkg-deb -f "$DEB" "$1"; }
[[ "$(field Package)" == kvscope ]] || fail "Package: $(field Package)"
[[ "$(field Recommends)" == *python3-numpy* ]] || fail "Recommends: $(field Recommends)"
[[ "$(field Depends)" == *libtorch* ]] || fail "Depends: $(field Depends)"
echo "package: $(basename "$DEB"), $(stat -c %s "$DEB") bytes; Installed-Size: $(field Installed-Size) KiB"

ROOT="$OUT/root"
dpkg -x "$DEB" "$ROOT"
U="$ROOT/usr"
for f in bin/kvscope-cli bin/kvtrace bin/kvscope-record \
         lib/python3/dist-packages/kvscope_trace/__init__.py lib/python3/dist-packages/kvscope_trace/hf_trace.py \
         share/man/man1/kvscope-cli.1.gz share/mime/packages/io.github.kvscope.KVScope.xml \
         share/doc/kvscope/trace-format.md; do
  [[ -e "$U/$f" ]] || fail "missing /usr/$f"
done
GUI=0
if [[ -e "$BUILD/app/gui/kvscope" ]]; then
  GUI=1
  for f in bin/kvscope share/man/man1/kvscope.1.gz share/applications/io.github.kvscope.KVScope.desktop \
           share/metainfo/io.github.kvscope.KVScope.metainfo.xml share/icons/hicolor/scalable/apps/io.github.kvscope.KVScope.svg; do
    [[ -e "$U/$f" ]] || fail "missing /usr/$f"
  done
  grep -q "MimeType=application/x-kvtrace;" "$U/share/applications/io.github.kvscope.KVScope.desktop" || fail "desktop MimeType"
fi
for exe in "$U"/bin/kvscope*; do
  [[ "$(head -c 4 "$exe" | tail -c 3)" == ELF ]] || continue
  readelf -S "$exe" | has '\.debug_info' && fail "$exe is not stripped"
done
! find "$U" -name __pycache__ | has . || fail "__pycache__ in the package"
# Man pages: valid roff with the subcommands.
zcat "$U/share/man/man1/kvscope-cli.1.gz" | has '^\.TH KVSCOPE-CLI' || fail "kvscope-cli.1"
zcat "$U/share/man/man1/kvscope-cli.1.gz" | has '^\.SS audit' || fail "kvscope-cli.1 has no audit section"
zcat "$U/share/man/man1/kvscope-cli.1.gz" | has 'minimize' || fail "kvscope-cli.1 lacks --minimize"
if command -v man >/dev/null; then
  MANWIDTH=80 man -l "$U/share/man/man1/kvscope-cli.1.gz" 2>/dev/null | has "kvscope-cli \[OPTIONS\]" || fail "man -l kvscope-cli.1"
fi

# The unpacked programs, from the scratch root.
export LD_LIBRARY_PATH="$U/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$U/lib/python3/dist-packages"
CLI="$U/bin/kvscope-cli"
"$CLI" --version | tee "$OUT/version.txt"
grep -q "^kvscope " "$OUT/version.txt" || fail "kvscope-cli --version"
W="$OUT/work"
mkdir -p "$W"
"$CLI" make-demo "$W/demo" >/dev/null
source "$SRC/scripts/demo-args.sh"
set +e
"$CLI" audit --model "$W/demo" "${DEMO_ARGS[@]}" --save-trace "$W/demo.kvtrace" --minimize "$W/min.kvtrace" \
  --markdown "$W/report.md" >"$W/audit.txt"
rc=$?
set -e
[[ $rc -eq 1 ]] || { cat "$W/audit.txt" >&2; fail "demo audit exit $rc (expected 1 = divergent)"; }
grep -q "wrong_layer" "$W/audit.txt" || fail "demo audit did not find wrong_layer"
grep -q "^kvscope-cli audit --model" "$W/report.md" || fail "report.md has no reproduce command"
set +e
"$CLI" audit --model "$W/demo" --trace "$W/min.kvtrace" >/dev/null
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "the minimized trace audits with exit $rc"
sed -n 1,2p "$W/audit.txt"

# kvtrace (Debian's python3 + the packaged module) on the engine's and its own traces.
/usr/bin/python3 "$U/bin/kvtrace" info "$W/min.kvtrace" >"$W/info.txt"
grep -q "requests: 1, steps: 1" "$W/info.txt" || { cat "$W/info.txt" >&2; fail "kvtrace info of the minimized trace"; }
/usr/bin/python3 "$U/bin/kvtrace" roundtrip "$W/demo.kvtrace" "$W/py.kvtrace" >/dev/null
/usr/bin/python3 "$U/bin/kvscope-record" --help >/dev/null
/usr/bin/python3 -c "import kvscope_trace, sys; assert kvscope_trace.__file__.startswith('$U'), kvscope_trace.__file__"

# The MIME definition: valid for update-mime-database, and its magic matches real traces.
mkdir -p "$OUT/mime/packages"
cp "$U/share/mime/packages/io.github.kvscope.KVScope.xml" "$OUT/mime/packages/"
update-mime-database "$OUT/mime" 2>/dev/null
grep -q "application/x-kvtrace:\*\.kvtrace" "$OUT/mime/globs2" || fail "mime glob"
/usr/bin/python3 - "$OUT/mime/packages/io.github.kvscope.KVScope.xml" "$W/demo.kvtrace" "$W/py.kvtrace" "$W/demo/model.safetensors" <<'PY'
import sys, xml.etree.ElementTree as ET
ns = {"m": "http://www.freedesktop.org/standards/shared-mime-info"}
matches = ET.parse(sys.argv[1]).getroot().findall(".//m:match", ns)
def shows(path):
    data = open(path, "rb").read(4096 + 64)
    for m in matches:
        lo, hi = (int(x) for x in m.get("offset").split(":"))
        if data.find(m.get("value").encode(), lo, hi + len(m.get("value"))) >= 0:
            return True
    return False
for trace in sys.argv[2:4]:
    assert shows(trace), f"the magic does not match {trace}"
assert not shows(sys.argv[4]), "the magic matches a plain safetensors checkpoint"
print("mime magic: matches both writers' traces, not a checkpoint")
PY

if [[ $GUI -eq 1 ]]; then
  QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR="$W" "$U/bin/kvscope" --version 2>/dev/null | has "^kvscope " || fail "kvscope --version"
fi
echo "installed size: $(du -sk "$ROOT" | cut -f1) KiB unpacked (Installed-Size $(field Installed-Size) KiB)"
echo "deb package test: ok"
