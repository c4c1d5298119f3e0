"""Build-time packer: launcher + onedir tree -> the single self-unpacking file (dist/kb).

    python packaging/mkpayload.py --launcher build/launcher/kb-launcher --tree dist/kb-onedir \
        --codec zstd --level 19 --out dist/kb

Writes [launcher][compressed entry stream][64-byte trailer]; the stream format and the trailer
are described at the top of packaging/launcher.c, which reads them. The content hash (the cache
directory's name) is the first 16 hex digits of the SHA-256 of the uncompressed stream, so it
changes exactly when a file's path, mode, bytes or a link target changes. Runs on the build
machine only (the laptop needs no Python).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import stat
import struct
import sys
import zlib

MAGIC = b"KBPAYLD1"
TRAILER = struct.Struct("<8sQQQc16s15x")
assert TRAILER.size == 64


def entries(tree: str):
    """(kind, relpath, mode, abspath/target) in a stable order: a directory before its contents."""
    def walk(rel: str):
        names = sorted(os.listdir(os.path.join(tree, rel) if rel else tree))
        for name in names:
            r = f"{rel}/{name}" if rel else name
            p = os.path.join(tree, r)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                yield "L", r, 0, os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                yield "D", r, stat.S_IMODE(st.st_mode), None
                yield from walk(r)
            elif stat.S_ISREG(st.st_mode):
                yield "F", r, stat.S_IMODE(st.st_mode), p
            else:
                raise SystemExit(f"mkpayload: {p}: not a file, directory or link")
    yield from walk("")


def _s(text: str) -> bytes:
    b = text.encode("utf-8")
    if not b or len(b) >= 4096:
        raise SystemExit(f"mkpayload: path too long or empty: {text!r}")
    return struct.pack("<H", len(b)) + b


def stream(tree: str):
    yield MAGIC
    for kind, rel, mode, extra in entries(tree):
        if kind == "D":
            yield b"D" + struct.pack("<H", mode) + _s(rel)
        elif kind == "L":
            if extra.startswith("/"):
                raise SystemExit(f"mkpayload: {rel}: absolute link target {extra!r}")
            yield b"L" + _s(rel) + _s(extra)
        else:
            size = os.path.getsize(extra)
            yield b"F" + struct.pack("<H", mode) + _s(rel) + struct.pack("<Q", size)
            with open(extra, "rb") as f:
                while chunk := f.read(1 << 20):
                    yield chunk
    yield b"E"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--tree", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--codec", choices=("zstd", "zlib"), default="zstd")
    ap.add_argument("--level", type=int, default=None, help="zstd 1-22 (default 19), zlib 1-9 (default 9)")
    a = ap.parse_args(argv)

    tmp = a.out + ".tmp"
    h = hashlib.sha256()
    raw = 0
    with open(a.launcher, "rb") as f:
        launcher = f.read()
    with open(tmp, "wb") as out:
        out.write(launcher)
        off = out.tell()
        if a.codec == "zstd":
            import zstandard

            cctx = zstandard.ZstdCompressor(level=a.level or 19, write_checksum=True, threads=-1)
            comp = cctx.compressobj()
            flush = comp.flush
            compress = comp.compress
        else:
            comp = zlib.compressobj(a.level or 9)
            flush = comp.flush
            compress = comp.compress
        for piece in stream(a.tree):
            h.update(piece)
            raw += len(piece)
            out.write(compress(piece))
        out.write(flush())
        length = out.tell() - off
        digest = h.hexdigest()[:16]
        out.write(TRAILER.pack(b"KBFROZE1", off, length, raw, b"z" if a.codec == "zstd" else b"g", digest.encode()))
    os.chmod(tmp, 0o755)
    os.replace(tmp, a.out)
    print(f"{a.out}: {os.path.getsize(a.out):,} bytes = launcher {len(launcher):,} + {a.codec} payload {length:,} "
          f"(tree {raw:,} bytes) + trailer 64; content hash {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
