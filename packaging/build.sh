#!/bin/sh
# Build the frozen kb: dist/kb-onedir/ (PyInstaller onedir, debug info stripped) and dist/kb
# (the single self-unpacking file a user copies to a laptop). One command, from anywhere:
#
#   packaging/build.sh          (or: make -C packaging)
#
# Needs: the project venv (.venv, project installed), gcc, and libzstd-dev (static libzstd.a +
# zstd.h; without it the payload falls back to zlib: 55 MB instead of 38 MB, slower first run).
# Installs PyInstaller into the venv if it is missing.
#
# Environment: PYTHON (default .venv/bin/python), PYINSTALLER_REQ (default pyinstaller==6.22.3,
# the version this was measured with), KB_CODEC (zstd|zlib, default: zstd when libzstd.a is
# found), KB_LEVEL (compression level; zstd default 19, ~30 s on 2 cores; 3 for quick builds).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PKG="$ROOT/packaging"
PYTHON=${PYTHON:-"$ROOT/.venv/bin/python"}
PYINSTALLER_REQ=${PYINSTALLER_REQ:-pyinstaller==6.22.3}
DIST="$ROOT/dist"
BUILD="$ROOT/build"
ONEDIR="$DIST/kb-onedir"
cd "$ROOT"

say() { printf '== %s\n' "$*"; }

[ -x "$PYTHON" ] || { echo "build.sh: no Python at $PYTHON (create the venv: python -m venv .venv && .venv/bin/pip install -e .)" >&2; exit 1; }
"$PYTHON" -c "import kb.runtime.cli" 2>/dev/null || { echo "build.sh: kb is not installed in $PYTHON's environment (pip install -e .)" >&2; exit 1; }
if ! "$PYTHON" -m PyInstaller --version >/dev/null 2>&1; then
    say "installing $PYINSTALLER_REQ into $(dirname "$(dirname "$PYTHON")")"
    "$PYTHON" -m pip install --quiet "$PYINSTALLER_REQ"
fi

# --- 1. onedir ----------------------------------------------------------------------------------
say "PyInstaller $("$PYTHON" -m PyInstaller --version) -> $ONEDIR"
mkdir -p "$BUILD"
"$PYTHON" -m PyInstaller --noconfirm --log-level WARN \
    --distpath "$DIST" --workpath "$BUILD/pyinstaller" "$PKG/kb.spec"

# --- 2. strip debug info (never PyInstaller's --strip: it breaks numpy's OpenBLAS) ------------
# strip --strip-debug removes only DWARF sections (.debug_*), which nothing reads at run time;
# symbol tables stay. numpy.libs/ (OpenBLAS, gfortran) is left alone on principle: it ships
# without debug info, and full stripping there is what breaks.
REPORT="$BUILD/strip-report.txt"
before=$(du -sb "$ONEDIR" | cut -f1)
: > "$REPORT"
find "$ONEDIR" -type f \( -name '*.so' -o -name '*.so.*' \) ! -path '*/numpy.libs/*' | sort | while read -r f; do
    if readelf -S --wide "$f" 2>/dev/null | grep -q ' \.debug_'; then
        s0=$(stat -c %s "$f")
        strip --strip-debug "$f"
        s1=$(stat -c %s "$f")
        echo "$s0 $s1 ${f#"$ONEDIR"/}" >> "$REPORT"
    fi
done
after=$(du -sb "$ONEDIR" | cut -f1)
printf 'onedir %s bytes before strip --strip-debug, %s after (%s files stripped; per file: %s)\n' \
    "$before" "$after" "$(wc -l < "$REPORT")" "$REPORT" | tee "$BUILD/strip-summary.txt"

# --- 3. launcher ----------------------------------------------------------------------------------
CODEC=${KB_CODEC:-}
if [ -z "$CODEC" ]; then
    if [ -f /usr/include/zstd.h ] && { [ -f /usr/lib/x86_64-linux-gnu/libzstd.a ] || [ -f /usr/lib/libzstd.a ] || [ -f /usr/lib64/libzstd.a ]; }; then
        CODEC=zstd
    else
        CODEC=zlib
        echo "build.sh: libzstd-dev not found (apt-get install libzstd-dev); using zlib" >&2
    fi
fi
case "$CODEC" in
    zstd) CFLAGS_CODEC=-DKB_CODEC_ZSTD; LIBS=-lzstd ;;
    zlib) CFLAGS_CODEC=-DKB_CODEC_ZLIB; LIBS=-lz ;;
    *) echo "build.sh: KB_CODEC must be zstd or zlib" >&2; exit 1 ;;
esac
mkdir -p "$BUILD/launcher"
# Fully static: no loader and no shared-library lookups before the exec (and it starts on any
# Linux; the unpacked program itself needs glibc >= the build machine's).
${CC:-gcc} -O2 -Wall -Wextra -static -s $CFLAGS_CODEC -o "$BUILD/launcher/kb-launcher" "$PKG/launcher.c" $LIBS
say "launcher: $(stat -c %s "$BUILD/launcher/kb-launcher") bytes, codec $CODEC"

# --- 4. single file -------------------------------------------------------------------------------
"$PYTHON" "$PKG/mkpayload.py" --launcher "$BUILD/launcher/kb-launcher" --tree "$ONEDIR" \
    --codec "$CODEC" ${KB_LEVEL:+--level "$KB_LEVEL"} --out "$DIST/kb"

# Unpack once into a throw-away cache (not the builder's ~/.cache) to prove the file is whole.
rm -rf "$BUILD/frozen-check"
KB_FROZEN_CACHE="$BUILD/frozen-check" "$DIST/kb" --version >/dev/null || { echo "build.sh: dist/kb --version failed" >&2; exit 1; }
rm -rf "$BUILD/frozen-check"
say "done: $DIST/kb ($(stat -c %s "$DIST/kb") bytes), onedir $ONEDIR ($(du -sb "$ONEDIR" | cut -f1) bytes)"
say "check it: make -C packaging smoke"
