"""Cosines of a query with stored vectors: ``cosines_of`` over float32 rows in numpy, and
``stored_cosines`` over rows in their stored kind (the dense leg's scan, runtime/index.py, and kb's
graph walk, runtime/graph_walk.py), by kb's compiled float16 kernel where it runs."""

from __future__ import annotations

import sys

import numpy as np


def cosines_of(vecs: np.ndarray, qv: np.ndarray) -> np.ndarray:
    """The cosine of ``qv`` with each row of ``vecs`` (float32 rows), in float32 numpy."""
    norms = np.linalg.norm(vecs, axis=1) * max(float(np.linalg.norm(qv)), 1e-12)
    return (vecs @ np.asarray(qv, dtype=np.float32) / np.maximum(norms, 1e-12)).astype(np.float32)


def stored_cosines(q: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The cosine of ``q`` with each of ``rows`` (vectors in their stored kind, C-contiguous), the
    query cast to that kind first, as usearch casts it; float32. kb's compiled kernel where the
    rows are float16 and the CPU has AVX2 and F16C (runtime/_kernels.c ``cosines_f16``), else numpy
    over float32 copies (the reference). A zero row may give NaN and a row that is not finite NaN
    or infinity: callers decide."""
    kernels = _f16_kernels() if rows.dtype == np.float16 and rows.ndim == 2 and rows.flags.c_contiguous else None
    if kernels is not None:
        out = np.empty(len(rows), dtype=np.float32)
        kernels.cosines_f16(np.asarray(q, dtype=np.float16).astype(np.float32), rows, out, len(rows), rows.shape[1])
        return out
    return cosines_of(rows.astype(np.float32), np.asarray(q, dtype=rows.dtype).astype(np.float32))


def kernels():
    """kb's compiled runtime kernels (runtime/_kernels.c), or None where the install could not
    build them."""
    try:
        from . import _kernels
    except ImportError:
        return None
    return _kernels


_F16 = None  # kb's kernels once asked for and their float16 cosines run here, False when not


def _f16_kernels():
    """kb's compiled kernels when their float16 cosines run here (little-endian, AVX2 and F16C),
    else None; asked once a process."""
    global _F16
    if _F16 is None:
        k = kernels() if sys.byteorder == "little" else None
        _F16 = k if k is not None and k.f16_kernel() == "f16c" else False
    return _F16 or None
