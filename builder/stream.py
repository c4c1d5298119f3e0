"""The stages that take the corpus a window at a time, so a build's memory does not grow with its text.

``build`` reads the documents back from their store (builder/store.py) in windows of about
``WINDOW_BYTES``, cut between documents; each window is chunked and analyzed, then handed to
these accumulators in chunk-id order:

- ``ChunkColumns``: the chunk table's columns, each status's and tag's chunk ids, the document
  paths: a few bytes per chunk and per document;
- ``TextBlocks``: each chunk's record, appended to a scratch file; ``finish`` trains the zstd
  dictionary on every n-th record (n from the total size) and compresses the blocks into a
  second scratch file (formats/text_codec.py), which the writer copies;
- ``VectorIndex``: the vectors, spilled to a scratch file; ``save`` adds them to the HNSW graph
  in ``[vectors] add_order`` on one thread (the same graph at every build; ``[vectors] threads``
  trades that for speed), writes it to a scratch file with its nodes moved so that near vectors
  lie together (``[vectors] order``, builder/locality.py), which the writer copies.

The postings stage takes the same windows (builder/postings.py). What stays in memory is the HNSW
graph (built at the end), the vocabulary, a few bytes per chunk, and one window. Every output
byte is the same as when the whole corpus was one window.
"""

from __future__ import annotations

import os
from array import array
from contextlib import contextmanager
from typing import Callable

import numpy as np

from kb.formats import layout as L
from kb.formats import records as R
from kb.formats.artifact import FileRange, Scratch, within_zstd_ratio
from kb.formats.text_codec import text_writer, train_dictionary

WINDOW_BYTES = 32 << 20  # stored document bytes per window: bounds the chunking and analysis working set
COMPRESS_BATCH = 4096  # text blocks (or document sources) compressed at a time: a few MB of records


def windows(sizes: np.ndarray, budget: int | None = None) -> list[tuple[int, int]]:
    """Consecutive document ranges [lo, hi) of about ``budget`` bytes (default ``WINDOW_BYTES``)
    each, at least one document each."""
    budget = WINDOW_BYTES if budget is None else budget
    ends = np.cumsum(sizes)
    out, lo = [], 0
    while lo < len(sizes):
        start = ends[lo - 1] if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, start + budget, side="right")))
        out.append((lo, hi))
        lo = hi
    return out


class ChunkColumns:
    """The chunk table, the status and tag filters and the document paths, filled in chunk-id order.

    Statuses are coded in ``statuses`` order: the configured ones, then unknown ones as first met."""

    def __init__(self, statuses, default_status: str, tags):
        self.statuses = list(statuses)
        self.unknown: list[str] = []
        self._code = {s: i for i, s in enumerate(self.statuses)}
        self._default = default_status
        self.doc, self.start, self.end, self.status = array("I"), array("I"), array("I"), array("H")
        self.tag_ids: dict[str, array] = {t: array("I") for t in tags}
        self.paths = bytearray()
        self.path_ends = array("Q", [0])
        self.keys = bytearray()  # chunks.key

    def __len__(self) -> int:
        return len(self.doc)

    def add(self, docs, rows, first_doc: int) -> None:
        """A window: its ``docs`` (document ``first_doc`` onwards) and their chunks ``rows``."""
        for d in docs:
            self.paths += d.path.encode("utf-8")
            self.path_ends.append(len(self.paths))
        code = self._code
        seen: dict = {}  # (document, text) -> chunks of it so far: a text repeated in a document gets a key each
        for r in rows:
            d = docs[r.doc]
            n = seen[r.doc, r.chunk.text] = seen.get((r.doc, r.chunk.text), -1) + 1
            self.keys += L.chunk_key(d.path, r.chunk.text, n)
            st = d.status or self._default
            c = code.get(st)
            if c is None:
                c = code[st] = len(self.statuses)
                self.statuses.append(st)
                self.unknown.append(st)
            cid = len(self.doc)
            self.doc.append(first_doc + r.doc)
            self.start.append(r.chunk.start_line)
            self.end.append(r.chunk.end_line)
            self.status.append(c)
            for t in d.tags:
                ids = self.tag_ids.get(t)
                if ids is None:
                    ids = self.tag_ids[t] = array("I")
                ids.append(cid)

    def chunk_doc(self) -> np.ndarray:
        return np.frombuffer(self.doc, dtype=np.uint32).astype(np.int64)

    def table(self) -> bytes:
        t = np.zeros(len(self.doc), dtype=L.CHUNK_DTYPE)
        t["doc"], t["start_line"], t["end_line"], t["status"] = self.doc, self.start, self.end, self.status
        return t.tobytes()

    def first_chunk(self, documents: int) -> bytes:
        """``docs.first_chunk``: u32 x (documents + 1), document d's chunks are [f[d], f[d + 1])."""
        f = np.zeros(documents + 1, dtype=L.ID_DTYPE)
        np.cumsum(np.bincount(np.frombuffer(self.doc, dtype=np.uint32), minlength=documents), out=f[1:])
        return f.tobytes()

    def doc_paths(self) -> bytes:
        return L.pack_blob_buffer(self.paths, np.frombuffer(self.path_ends, dtype=np.uint64))

    def filters(self) -> tuple[list[str], list[bytes], list[str], list[bytes]]:
        """(statuses, their bitmaps, tag names sorted, their bitmaps), bitmaps serialized."""
        from pyroaring import BitMap

        status = np.frombuffer(self.status, dtype=np.uint16)
        status_bitmaps = [BitMap(array("I", np.flatnonzero(status == i).astype(np.uint32).tobytes())).serialize() for i in range(len(self.statuses))]
        names = sorted(self.tag_ids)
        return self.statuses, status_bitmaps, names, [BitMap(self.tag_ids[t]).serialize() for t in names]


class TextBlocks:
    """The text stage: chunk records spilled as they come, compressed into blocks at the end."""

    def __init__(self, raw: Scratch, packed: Scratch):
        self._raw, self._packed = raw, packed
        self._ends = array("q")
        self._size = 0

    def add(self, docs, rows) -> None:
        write = self._raw.file.write
        for r in rows:
            d = docs[r.doc]
            rec = R.pack_chunk_record(R.ChunkRecord(r.chunk.text, r.chunk.section, d.title, d.doc_id, d.tags))
            write(rec)
            self._size += len(rec)
            self._ends.append(self._size)

    def finish(self, threads: int = 1) -> tuple[bytes, tuple]:
        """(the zstd dictionary, the ``text.blocks`` section data: its blob-table head in memory,
        the compressed blocks in a scratch file). ``threads`` compress blocks at once (each block
        is its own frame: the bytes do not depend on the number)."""
        self._raw.file.flush()
        n, ends, fd = len(self._ends), self._ends, self._raw.file.fileno()

        def span(i: int, j: int) -> tuple[bytes, int]:
            """Records i..j-1, read (not mapped: mapped pages would count in the build's RSS),
            and the offset of the first."""
            start = ends[i - 1] if i else 0
            return os.pread(fd, ends[j - 1] - start, start), start

        zdict = train_dictionary(n, self._size, lambda i: span(i, i + 1)[0])

        def batches():
            step = L.TEXT_BLOCK * COMPRESS_BATCH
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                data, base = span(lo, hi)
                view = memoryview(data)
                record = [view[(ends[i - 1] if i else 0) - base : ends[i] - base] for i in range(lo, hi)]
                yield [R.pack_text_block(record[b : b + L.TEXT_BLOCK]) for b in range(0, hi - lo, L.TEXT_BLOCK)]

        return zdict, spill_frames(batches(), text_writer(zdict), self._packed, threads)


def spill_frames(batches, cctx, out: Scratch, threads: int = 1) -> tuple:
    """A blob table of one zstd frame per item of ``batches`` (lists of bytes), compressed
    ``threads`` at once (each item is its own frame: the bytes do not depend on the number): its
    head in memory, the frames in the scratch file ``out``."""
    offsets = array("Q", [0])
    write = out.file.write
    for raw in batches:
        packed = cctx.multi_compress_to_buffer(raw, threads=threads) if threads > 1 and raw else [cctx.compress(b) for b in raw]
        for i in range(len(raw)):
            frame = within_zstd_ratio(packed[i], len(raw[i]))
            write(frame)
            offsets.append(offsets[-1] + len(frame))
    out.file.flush()
    head = L.blob_head(np.frombuffer(offsets, dtype=np.uint64))
    return (head, FileRange(out.path, 0, offsets[-1]))


def pack_sources(docs, zdict: bytes, out: Scratch, threads: int = 1) -> tuple:
    """docs.source: each document's source text (front matter included), so ``kb get
    PATH:FROM:COUNT`` gives the exact lines the chunks' line numbers count. Chunk texts cannot:
    they drop front matter and the blank lines between chunks, repeat the overlap, and rejoin
    a line split into sentences with single spaces. ``docs``: the documents in artifact order
    (indexable), read back a batch at a time; the section data as ``spill_frames`` gives it."""

    def batches():
        for lo in range(0, len(docs), COMPRESS_BATCH):
            yield [R.pack_source(docs[i].source) for i in range(lo, min(len(docs), lo + COMPRESS_BATCH))]

    return spill_frames(batches(), text_writer(zdict), out, threads)


class VectorIndex:
    """The hnsw stage. ``add`` spills each window's vectors (at ``[vectors] dtype``) to a scratch
    file; ``save`` adds them all to the graph in ``[vectors] add_order`` (builder/locality.py),
    on ``[vectors] threads`` threads (1, the default: the same graph at every build), over
    int8 copies of the vectors when ``[vectors] add_dtype`` is i8, and writes the graph out with
    its nodes in ``[vectors] order`` and its vectors at ``[vectors] dtype``."""

    def __init__(self, dim: int, v, scratch: Callable[[], Scratch]):
        self.dim, self.v = dim, v
        self.spilled = np.dtype(SPILL_KINDS[v.dtype])
        self.spill = scratch()
        self.count = 0
        self.rows: bytes | None = None  # after save: the vectors.rows section, when needed

    def add(self, vecs: np.ndarray) -> None:
        """Vectors of the next ``len(vecs)`` chunks (keys are chunk ids), spilled as stored (bf16:
        rounded, then widened back, so that the graph is built over the stored values and a
        reused bf16 vector is the same input as a fresh one)."""
        if self.v.dtype == "bf16":
            vecs = widened(stored_rows(vecs, "bf16"), "bf16")
        self.spill.file.write(np.ascontiguousarray(vecs, dtype=self.spilled).tobytes())
        self.count += len(vecs)

    def save(self, scratch: Callable[[], Scratch], progress: Callable[[str, int, int], None] = lambda stage, done, total: None) -> FileRange:
        """Build the graph and write it (usearch's ``save`` format) to a scratch file, then,
        unless it was built in ``order`` and at ``dtype``, rewrite it into another with its nodes
        moved into ``order`` and its rows at ``dtype`` (``permuted``). Then ``rows`` is the
        ``vectors.rows`` section (the row of each key's vector) when the nodes are not in key
        order, else None. ``progress(stage, done, total)`` hears of the vectors added."""
        from usearch.index import Index

        from kb.formats.hnsw import SCALAR_KINDS, check_hnsw, permuted

        from .locality import MIN_CLUSTERED, cluster_order, mixed_order

        v, n = self.v, self.count
        self.spill.file.flush()
        vecs = np.memmap(self.spill.path, dtype=self.spilled, mode="r", shape=(n, self.dim)) if n else np.zeros((0, self.dim), self.spilled)
        wide = lambda at: np.asarray(vecs[at], dtype=np.float32)  # noqa: E731
        clustered = cluster_order(n, wide) if n >= MIN_CLUSTERED and (v.order == "clusters" or v.add_order == "mixed") else None
        added = mixed_order(n, clustered) if v.add_order == "mixed" and clustered is not None else np.arange(n, dtype=np.int64)
        kind = "i8" if v.add_dtype == "i8" and n else v.dtype  # an empty graph: nothing to build, its head names dtype
        index = Index(ndim=self.dim, metric="cos", dtype=kind, connectivity=v.connectivity, expansion_add=v.expansion_add, expansion_search=v.expansion_search)
        for lo in range(0, n, ADD_ROWS):
            at = added[lo : lo + ADD_ROWS]
            index.add(at.astype(np.uint64), wide(at), threads=v.threads)
            progress("graph", lo + len(at), n)
        out = scratch()
        index.save(out.path)
        del index
        with _mapped(out.path) as view:
            perm = check_hnsw(view, n, neighbours=False).row_of_key
        move = v.order == "clusters" and clustered is not None
        if move or kind != v.dtype:
            slot_of_key = np.arange(n, dtype=np.int64) if perm is None else perm
            key_of_slot = np.empty(n, dtype=np.int64)
            key_of_slot[slot_of_key] = np.arange(n, dtype=np.int64)
            rows = None if kind == v.dtype else (SCALAR_KINDS[v.dtype], lambda slots: stored_rows(vecs[key_of_slot[slots]], v.dtype))
            built, out = out, scratch()
            with _mapped(built.path) as view:
                for piece in permuted(view, n, slot_of_key[clustered] if move else np.arange(n), matrix=rows):
                    out.file.write(piece)
            out.file.flush()
            built.close()
            with _mapped(out.path) as view:  # the rows of the moved nodes
                perm = check_hnsw(view, n, neighbours=False).row_of_key
        del vecs
        self.spill.close()
        self.rows = None if perm is None else perm.astype(L.ID_DTYPE).tobytes()
        return FileRange(out.path, 0, os.path.getsize(out.path))


@contextmanager
def _mapped(path: str):
    """A read-only memoryview of the file at ``path`` (mapped)."""
    import mmap

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = memoryview(m)
        try:
            yield view
        finally:
            view.release()


ADD_ROWS = 1 << 15  # vectors handed to usearch at a time (gathered from the spill in add order)
SPILL_KINDS = {"f16": "<f2", "f32": "<f4", "bf16": "<f4"}  # the spill holds the stored values (bf16: rounded, as float32)


def stored_rows(x: np.ndarray, dtype: str) -> np.ndarray:
    """Rows ``x`` as ``[vectors] dtype`` stores them: float16, float32, or bf16 (the high half
    of each float32, rounded to nearest even) as uint16."""
    if dtype == "f16":
        return np.asarray(x, dtype="<f2")
    x = np.asarray(x, dtype="<f4")
    if dtype == "f32":
        return x
    bits = x.view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def widened(rows: np.ndarray, dtype: str) -> np.ndarray:
    """Stored rows (``stored_rows``) as float32, exactly: bf16 is the high half of a float32."""
    if dtype == "bf16":
        return (np.asarray(rows, dtype="<u2").astype("<u4") << 16).view("<f4")
    return np.asarray(rows, dtype=np.float32)
