"""Vectors brought with the corpus: ``kb-build --jsonl FILE --vectors FILE.npy --embedder NAME``.

Row i of the array is the vector of the i-th record of the one JSON Lines file (its i-th
non-blank line, counted whether or not the record is then skipped), and each record is one
chunk as given: no re-chunking, no embedding at build time. ``NAME`` is the model that made the
vectors; it is packed into the artifact, so queries are embedded by the same model.

The array (a ``.npy`` file of float32 or float16, ``rows x dim``) is memory-mapped and read in
blocks of ``BLOCK_ROWS``, never loaded whole: a million 384-dimensional float32 rows are 1.5 GB.
Every check that can fail is a usage error (exit 2) that names the file, before the heavy stages:
the file is not a 2-D float32/float16 ``.npy``, its width is not the model's, its row count is
not the number of records, or a row holds NaN, an infinity or only zeros (a cosine needs a
finite direction). Any other row is normalized in float64 (``take``), so a row of tiny or huge
values gets its direction.
"""

from __future__ import annotations

import mmap
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kb.formats.artifact import NotRegularFile, open_regular
from kb.models.convert import sha256_file
from kb.common.errors import UsageError
from kb.common.usage import printable

from .chunk import Chunk
from .ingest import Document, SourceFile

BLOCK_ROWS = 1 << 16  # rows read at once when the array is scanned (25 MB of 384-d float16 as float32)
DTYPES = ("float32", "float16")
NPY_MAGIC = b"\x93NUMPY"


@dataclass(frozen=True)
class GivenVectors:
    """A memory-mapped ``rows x dim`` array of float32 or float16 (``open_vectors``)."""

    path: Path
    array: np.ndarray

    @property
    def rows(self) -> int:
        return self.array.shape[0]

    @property
    def dim(self) -> int:
        return self.array.shape[1]

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (record numbers) as unit-length float32 vectors, in that order. (Stored
        unit length, a float16 index cannot overflow; the cosine is the same.) Normalized in
        float64, whose range holds the norm of any finite float32 row: a row of 3e38s (a float32
        norm overflows to inf) or of subnormals like 1e-45 (its float32 norm underflows to 0)
        gets its direction, not zeros or NaN."""
        v = np.asarray(self.array[np.asarray(rows, dtype=np.int64)], dtype=np.float64)
        self.release()
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    def release(self) -> None:
        """Drop the pages read so far from this process's resident set (they stay in the page
        cache): a mapped array's pages would otherwise count in the build's RSS until it ends."""
        m = getattr(self.array, "_mmap", None)
        if m is not None and hasattr(m, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            m.madvise(mmap.MADV_DONTNEED)


def open_vectors(path: Path) -> GivenVectors:
    """Map ``path`` and check it is a 2-D float32 or float16 array; a UsageError otherwise."""
    path = Path(path)
    try:
        with open_regular(path) as f:  # a FIFO is refused, not waited on
            magic = f.read(len(NPY_MAGIC))
        if magic != NPY_MAGIC:
            raise UsageError(f"{path}: not a .npy file; --vectors takes one array saved by numpy.save")
        with np.errstate(all="ignore"), warnings.catch_warnings():  # a forged shape's size overflows, a Python 2 header: numpy's
            warnings.simplefilter("ignore")  # warnings would be more lines on stderr; its errors say what is wrong
            array = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file (--vectors)") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder; --vectors names a .npy file") from None
    except NotRegularFile:
        raise UsageError(f"{path}: not a regular file (a FIFO, socket or device); --vectors names a .npy file") from None
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - numpy's header parser, fed a hostile header, raises assorted errors (ValueError, OverflowError, tokenize's TokenError...)
        raise UsageError(f"{path}: not a readable .npy array ({_first_line(e)})") from None
    if array.dtype.name not in DTYPES:
        raise UsageError(f"{path}: {array.dtype.name} vectors; give {' or '.join(DTYPES)}")
    if array.ndim != 2:
        raise UsageError(f"{path}: a {array.ndim}-dimensional array; give one row per JSON Lines record (records x dimensions)")
    return GivenVectors(path, array)


def _first_line(e: Exception, most: int = 200) -> str:
    """numpy's reason, as one short line (its message may quote a whole hostile header)."""
    msg = str(e).strip()
    line = printable(msg.splitlines()[0]) if msg else type(e).__name__
    return line if len(line) <= most else line[: most - 1] + "…"


def check_dim(given: GivenVectors, model: str, dim: int) -> None:
    if given.dim != dim:
        raise UsageError(f"{given.path}: rows of {given.dim} dimensions, but {model} makes {dim}; --embedder must name the model that made the vectors")


def check_rows(given: GivenVectors, records: int, jsonl: Path) -> None:
    if given.rows != records:
        raise UsageError(f"{given.path}: {given.rows} rows, but {jsonl} holds {records} records (one row per non-blank line)")


def check_values(given: GivenVectors) -> None:
    """Every value finite and no row all zeros, scanned in blocks; names the first bad row."""
    a = given.array
    for lo in range(0, given.rows, BLOCK_ROWS):
        block = np.asarray(a[lo : lo + BLOCK_ROWS], dtype=np.float32)
        given.release()
        bad = ~np.isfinite(block)
        if bad.any():
            r = int(np.flatnonzero(bad.any(axis=1))[0])
            what = "NaN" if np.isnan(block[r]).any() else "an infinity"
            raise UsageError(f"{given.path}: row {lo + r} holds {what}; every value must be finite")
        zero = ~block.any(axis=1)
        if zero.any():
            raise UsageError(f"{given.path}: row {lo + int(np.flatnonzero(zero)[0])} is all zeros; a cosine needs a direction")


def source_of(given: GivenVectors, root: str) -> SourceFile:
    """The array as a source of the manifest (so ``kb status`` sees it change), relative to the
    corpus root."""
    st = os.stat(given.path)
    rel = Path(os.path.relpath(os.path.realpath(given.path), root)).as_posix()
    return SourceFile(rel, st.st_size, st.st_mtime_ns, sha256_file(given.path))


def whole_chunk(doc: Document) -> list[Chunk]:
    """A record with given vectors is one chunk, its text as given."""
    n = doc.text.count("\n") + 1 - doc.text.endswith("\n")
    return [Chunk("", doc.text, doc.first_line, doc.first_line + max(n, 1) - 1)]
