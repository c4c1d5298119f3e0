"""CRC-32 of artifact bytes (the zlib and gzip CRC), computed fast where it pays.

Every byte a search reads is checked against a crc32 first (formats/artifact.py, the query
model's row groups, the graph's pages). kb's compiled crc32 (formats/_crc32.c) fold with
carry-less multiplies where the CPU has PCLMULQDQ, several times faster than zlib, and sum many
ranges of a buffer in one call (``crc32_many``: a walk of a large graph checks thousands of
pages). Where they are not built, or the CPU lacks the instruction, zlib sums: the reference the
tests hold them against (tests/formats/test_checksum.py).
"""

from __future__ import annotations

import zlib

__all__ = ["crc32", "crc32_many", "summer"]

_compiled = None  # kb's kernels when they fold with PCLMULQDQ, False when not; None: not yet asked


def _kernels():
    """kb's compiled crc32 if it folds on this CPU, else None (asked once)."""
    global _compiled
    if _compiled is None:
        try:
            from . import _crc32 as k
        except ImportError:
            k = None
        _compiled = k if k is not None and k.crc_kernel() == "pclmul" else False
    return _compiled or None


def summer():
    """The crc32 function this process sums with: kb's compiled one where it folds, else zlib's."""
    k = _kernels()
    return zlib.crc32 if k is None else k.crc32


def crc32(data, value: int = 0) -> int:
    """zlib.crc32(data, value), by ``summer``; ``data`` is any contiguous buffer (bytes, a
    memoryview, a numpy array)."""
    return summer()(data, value)


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
    for i, (lo, hi) in enumerate(zip(starts.tolist(), stops.tolist())):
        out[i] = zlib.crc32(view[lo:hi])
    return out
