"""CRC-32 of artifact bytes (the zlib and gzip CRC), computed fast where it pays.

Every byte a search reads is checked against a crc32 first (formats/artifact.py, the query
model's row groups, the graph's pages). zlib's crc32 sums 2-3 GB/s on the 2-core VM kb is
measured on; zlib-ng's (the ``zlib-ng`` package, a runtime dependency) folds with carry-less
multiplies at about 9 GB/s on large buffers and three times zlib's speed on 4 KiB pages, and
gives the same values (tests/formats/test_checksum.py). Importing ``zlib_ng`` costs 1.5-2 ms (it
imports gzip), more than a one-shot BM25 search sums, so a process sums with zlib, which kb has
imported anyway, until it has summed ``FAST_AFTER`` bytes, and with zlib-ng from then on. An
install without zlib-ng sums with zlib throughout.
"""

from __future__ import annotations

import zlib

__all__ = ["FAST_AFTER", "crc32", "summer"]

FAST_AFTER = 1 << 20
_summed = 0
_crc = zlib.crc32
_switched = False


def _fast():
    try:
        from zlib_ng.zlib_ng import crc32
    except ImportError:
        return zlib.crc32
    return crc32


def summer(nbytes: int):
    """The crc32 function for the next ``nbytes`` bytes this process sums (they are counted
    towards the switch to zlib-ng)."""
    global _summed, _crc, _switched
    if not _switched:
        _summed += nbytes
        if _summed >= FAST_AFTER:
            _crc, _switched = _fast(), True
    return _crc


def crc32(data, value: int = 0) -> int:
    """zlib.crc32(data, value), by whichever implementation ``summer`` picks; ``data`` is any
    contiguous buffer (bytes, a memoryview, a numpy array)."""
    return summer(data.nbytes if hasattr(data, "nbytes") else len(data))(data, value)
