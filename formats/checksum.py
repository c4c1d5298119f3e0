"""CRC-32 of artifact bytes (the zlib and gzip CRC), computed fast where it pays.

Every byte a search reads is checked against a crc32 first (formats/artifact.py, the query
model's row groups, the graph's pages). zlib's crc32 sums about 2 GB/s on the 2-core VM kb is
measured on. kb's compiled kernels (common/_kernels.c) fold with carry-less multiplies where the
CPU has PCLMULQDQ, at about 9 GB/s, and sum many ranges of a buffer in one call
(``crc32_many``: a one-shot walk of a 1M graph checks some 13,000 pages). Where they are not
built, or the CPU lacks the instruction, zlib-ng's crc32 (the ``zlib-ng`` package) folds as fast;
importing it costs 1.5-3 ms (it imports gzip), more than a one-shot BM25 search sums, so such a
process sums with zlib, which kb has imported anyway, until it has summed ``FAST_AFTER`` bytes,
and with zlib-ng from then on. An install with neither sums with zlib throughout. All give
zlib's values (tests/formats/test_checksum.py).
"""

from __future__ import annotations

import zlib

__all__ = ["FAST_AFTER", "crc32", "crc32_many", "summer"]

FAST_AFTER = 1 << 20
_summed = 0
_crc = zlib.crc32
_switched = False
_compiled = None  # kb's kernels when they fold with PCLMULQDQ, False when not; None: not yet asked


def _kernels():
    """kb's compiled kernels if their crc32 folds on this CPU, else None (asked once)."""
    global _compiled
    if _compiled is None:
        from ..common.native import kernels

        k = kernels()
        _compiled = k if k is not None and k.crc_kernel() == "pclmul" else False
    return _compiled or None


def _fast():
    try:
        from zlib_ng.zlib_ng import crc32
    except ImportError:
        return zlib.crc32
    return crc32


def summer(nbytes: int):
    """The crc32 function for the next ``nbytes`` bytes this process sums: kb's compiled one, or
    zlib's until ``FAST_AFTER`` bytes have been summed and zlib-ng's from then on."""
    global _summed, _crc, _switched
    k = _kernels()
    if k is not None:
        return k.crc32
    if not _switched:
        _summed += nbytes
        if _summed >= FAST_AFTER:
            _crc, _switched = _fast(), True
    return _crc


def crc32(data, value: int = 0) -> int:
    """zlib.crc32(data, value), by whichever implementation ``summer`` picks; ``data`` is any
    contiguous buffer (bytes, a memoryview, a numpy array)."""
    return summer(data.nbytes if hasattr(data, "nbytes") else len(data))(data, value)


def crc32_many(data, starts, stops):
    """The crc32 of each ``data[starts[i]:stops[i]]`` as a numpy uint32 array; ``starts`` and
    ``stops``: integer arrays of byte offsets into the contiguous buffer ``data``. A range outside
    ``data`` is a ValueError, raised before any byte is read."""
    import numpy as np

    starts = np.ascontiguousarray(starts, dtype=np.int64)
    stops = np.ascontiguousarray(stops, dtype=np.int64)
    if starts.shape != stops.shape or starts.ndim != 1:
        raise ValueError("starts and stops must be 1-d arrays of one length")
    out = np.empty(len(starts), dtype=np.uint32)
    k = _kernels()
    if k is not None:
        k.crc32_many(data, starts, stops, out, len(out))
        return out
    view = memoryview(data).cast("B")
    if len(starts) and (starts.min() < 0 or (stops < starts).any() or stops.max() > len(view)):
        raise ValueError(f"a range is outside the data's {len(view)} bytes")
    f = summer(int((stops - starts).sum()))
    for i, (lo, hi) in enumerate(zip(starts.tolist(), stops.tolist())):
        out[i] = f(view[lo:hi])
    return out
