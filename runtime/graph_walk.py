"""kb's own search of an HNSW graph, over the ``vectors.hnsw`` image in place: what a one-shot
``kb search`` uses instead of usearch on an artifact too large to scan.

usearch trusts the graph it is given, so before it may search, every neighbour slot of every
node must be checked, and every page of the graph checksummed: O(chunks) work before the first
result (at 1,000,000 chunks, about 300 ms of a one-shot search; bench/notes/2026-12-02-scale-million.md). This
walk reads only the nodes it visits, and checks each before it uses it: the pages under the
node's record and its vector (their crc32s), the counts and slots of the lists it follows (each
count within its list's capacity, each slot inside the graph), the keys of the nodes it returns.
Opening costs the headers and the 2-byte levels array (formats/hnsw.py ``graph_layout``).

The search is HNSW's (Malkov and Yashunin, algorithm 5): a greedy descent through the upper
levels, then a beam search of width ``ef`` on level 0; it stops when no unexpanded node is nearer
than the beam's farthest. It is kb's compiled kernels' (runtime/_kernels.c ``walk_f16``, over
float16 rows where the CPU has AVX2 and F16C): one node expanded at a time, with the page checks
in the same loop, so that its time is that of the pages it reads. Without them (no compiler, or
another CPU) a one-shot search opens the graph for usearch as long-lived processes (kb serve, kb
mcp, kb bench) do: usearch is the reference the tests hold this walk against.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kb.formats.hnsw import GraphLayout


class Matches(NamedTuple):  # not a frozen dataclass: start-up cost (bench/startup_records.py)
    """What usearch's ``Index.search`` returns, as the dense leg reads it."""

    keys: np.ndarray  # u64 chunk ids, nearest first
    distances: np.ndarray  # cosine distance, 1 - cosine


class Pages(NamedTuple):
    """The section's page checks, which the walk does itself: the crc32 of each 4 KiB page and
    which were verified (Artifact.page_table; both empty when the whole section was), and
    ``mismatch(page)``, the exception for a page whose crc32 is wrong."""

    crcs: np.ndarray  # u32 a page
    ok: np.ndarray  # bool a page, set as pages are verified
    mismatch: object

    @classmethod
    def none(cls) -> "Pages":
        """No page to check: the whole section was verified."""
        return cls(np.zeros(0, np.uint32), np.zeros(0, bool), None)


# What a graph that breaks its rules raises, by runtime/_kernels.c walk_f16's status.
_WALK_ERRORS = {
    2: "vector index: a neighbour list is longer than its capacity",
    3: "vector index: a neighbour slot points outside the graph",
    4: "a stored vector is not finite",
    6: "vector index: a node lies outside the graph",
}


class GraphWalk:
    """Searches a checked ``GraphLayout`` over ``buf`` (the section's bytes) with ``kernels``
    (``_f16_kernels()``). ``matrix``: the float16 vectors as a (rows, dims) numpy view (row r is
    node r's vector); ``check(starts, stops)``: verifies those byte ranges of the section before
    they are read (Artifact.check_pages; for ``keys_of``); ``corrupt(why)``: the exception to
    raise for a node that breaks the graph's rules; ``pages``: the section's page checks
    (``Pages``), which the walk does itself."""

    def __init__(self, buf, layout: GraphLayout, matrix: np.ndarray, check, expansion_search: int, kernels, pages: Pages, corrupt=ValueError):
        self.b = np.frombuffer(buf, dtype=np.uint8)
        self.g = layout
        self.matrix = matrix
        self.matrix_at = layout.image.graph_start - layout.image.rows * matrix.strides[0]
        self._check = check
        self.expansion_search = expansion_search
        self._corrupt = corrupt  # why -> the exception a node that breaks the graph's rules raises
        self._pages = pages
        self._kernels = kernels

    def keys_of(self, slots: np.ndarray) -> np.ndarray:
        """The keys (chunk ids) of nodes ``slots``, each checked to be inside the graph."""
        starts = self.g.start_of(slots)
        self._check(starts, starts + self.g.bytes_of(slots))
        keys = np.lib.stride_tricks.sliding_window_view(self.b, 8)[starts].view("<u8").ravel()
        if np.any(keys >= self.g.size):
            raise self._corrupt("vector index: a node's key is outside the graph")
        return keys

    def search(self, query: np.ndarray, count: int) -> Matches:
        """The ``count`` nearest nodes found by a beam of width max(count, expansion_search)."""
        g, p = self.g, self._pages
        ef = max(count, self.expansion_search)
        q = np.asarray(query, dtype=np.float32).ravel()
        q = (q / max(float(np.linalg.norm(q)), 1e-12)).astype(np.float16)
        slots, dist = np.empty(count, np.int64), np.empty(count, np.float64)
        status, info, found = self._kernels.walk_f16(
            self.b, q.astype(np.float32), np.ascontiguousarray(g.upper, np.int64), np.ascontiguousarray(g.upper_levels, np.int64),
            p.crcs, p.ok.view(np.uint8), slots, dist, g.size, g.conn, g.base, g.max_level, g.entry, g.levels_at, g.nodes_at,
            self.matrix_at, self.matrix.shape[1], ef, count,
        )  # fmt: skip
        if status == 1:
            raise p.mismatch(info)
        if status:
            raise self._corrupt(_WALK_ERRORS[status])
        return Matches(self.keys_of(slots[:found]), dist[:found])


def _f16_kernels():
    """kb's compiled kernels where their walk runs here (little-endian, AVX2 and F16C), else None."""
    from .cosines import _f16_kernels as kernels

    k = kernels()
    return k if k is not None and hasattr(k, "walk_f16") else None
