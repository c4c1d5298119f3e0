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
than the beam's farthest. Over float16 rows, where kb's compiled kernels run (AVX2 and F16C), the
walk is theirs (common/_kernels.c ``walk_f16``): one node expanded at a time, with the page checks
in the same loop, so that its time is that of the pages it reads. Elsewhere numpy walks: the beam
expands up to ef / 16 (16 to 64) of its nearest unexpanded nodes at a time, so that numpy does the
work of one step per batch rather than per node. Long-lived processes (kb serve, kb mcp, kb bench)
check the graph once and search it with usearch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kb.formats.artifact import sorted_unique
from kb.formats.hnsw import NODE_HEAD, GraphLayout

from .cosines import stored_cosines

# Nodes the beam expands per step: ef / BATCH_PER_EF, within BATCH_MIN..BATCH_MAX. Wider steps
# mean fewer numpy steps and a few more nodes read. At 16 the walk's recall@10 equals usearch's on
# the same graphs (bench/notes/2026-12-02-scale-million.md); at ef 1024 and 2048, 64 gave the same recall as 16
# on 200 queries at 100,000 and 1,000,000 chunks and a first (one-shot) search of 42-44 ms
# instead of 55 (the same note).
BATCH_MIN, BATCH_MAX, BATCH_PER_EF = 16, 64, 16


class Matches(NamedTuple):  # NamedTuples: a frozen dataclass costs ~0.7 ms of a one-shot search's start to create
    """What usearch's ``Index.search`` returns, as the dense leg reads it."""

    keys: np.ndarray  # u64 chunk ids, nearest first
    distances: np.ndarray  # cosine distance, 1 - cosine


class Pages(NamedTuple):
    """The section's page checks, for the compiled walk, which does them itself: the crc32 of each
    4 KiB page and which were verified (Artifact.page_table; both empty when the whole section
    was), and ``mismatch(page)``, the exception for a page whose crc32 is wrong."""

    crcs: np.ndarray  # u32 a page
    ok: np.ndarray  # bool a page, set as pages are verified
    mismatch: object

    @classmethod
    def none(cls) -> "Pages":
        """No page to check: the whole section was verified."""
        return cls(np.zeros(0, np.uint32), np.zeros(0, bool), None)


# What a graph that breaks its rules raises, either walk, by common/_kernels.c walk_f16's status.
_WALK_ERRORS = {
    2: "vector index: a neighbour list is longer than its capacity",
    3: "vector index: a neighbour slot points outside the graph",
    4: "a stored vector is not finite",
    6: "vector index: a node lies outside the graph",
}


class GraphWalk:
    """Searches a checked ``GraphLayout`` over ``buf`` (the section's bytes). ``matrix``: the
    vectors as a (rows, dims) numpy view (row r is node r's vector); ``check(starts, stops)``:
    verifies those byte ranges of the section before they are read (Artifact.check_pages);
    ``corrupt(why)``: the exception to raise for a node that breaks the graph's rules; ``pages``:
    the section's page checks (``Pages``), given where the compiled walk may do them itself
    (without them, numpy walks, through ``check``)."""

    def __init__(self, buf, layout: GraphLayout, matrix: np.ndarray, check, expansion_search: int, corrupt=ValueError, pages: Pages | None = None):
        self.b = np.frombuffer(buf, dtype=np.uint8)
        self.g = layout
        self.matrix = matrix
        self.row_bytes = matrix.strides[0]
        self.matrix_at = layout.image.graph_start - layout.image.rows * self.row_bytes
        self._check = check
        self.expansion_search = expansion_search
        self._corrupt = corrupt  # why -> the exception a node that breaks the graph's rules raises
        self._windows: dict[int, np.ndarray] = {}  # width -> sliding-window view of the section (rows by start)
        self._pages = pages
        self._kernels = _f16_kernels() if pages is not None and matrix.dtype == np.float16 else None

    def _rows(self, starts: np.ndarray, width: int) -> np.ndarray:
        """The ``width`` bytes at each of ``starts``, one row each (a copy; formats/hnsw.py ``_rows``)."""
        view = self._windows.get(width)
        if view is None:
            view = self._windows[width] = np.lib.stride_tricks.sliding_window_view(self.b, width)
        return view[starts]

    # --- reading, checked ----------------------------------------------------------------------
    def _records(self, slots: np.ndarray) -> None:
        starts = self.g.start_of(slots)
        self._check(starts, starts + self.g.bytes_of(slots))

    def _lists(self, slots: np.ndarray, level: int) -> np.ndarray:
        """The neighbours (slots) of ``slots`` at ``level``, concatenated."""
        g = self.g
        if level:
            slots = slots[g.levels[slots] >= level]  # a node has lists up to its own level
        if not len(slots):
            return np.zeros(0, np.int64)
        self._records(slots)
        width = g.base_bytes if level == 0 else g.upper_bytes
        at = g.start_of(slots) + g.list_at(level)
        lists = self._rows(at, width).view("<u4")
        counts, cap = lists[:, 0], width // 4 - 1
        if np.any(counts > cap):
            raise self._corrupt(_WALK_ERRORS[2])
        found = lists[:, 1:][np.arange(cap) < counts[:, None]].astype(np.int64)
        if np.any(found >= g.size):
            raise self._corrupt(_WALK_ERRORS[3])
        return found

    def _distances(self, slots: np.ndarray, q: np.ndarray) -> np.ndarray:
        """1 - cosine of ``q`` (unit length, in the stored kind) with the vectors of ``slots``, over
        the rows as stored (runtime/cosines.py ``stored_cosines``), as usearch computes it."""
        at = self.matrix_at + slots * self.row_bytes
        self._check(at, at + self.row_bytes)
        rows = self.matrix[slots]
        d = 1.0 - stored_cosines(q, rows).astype(np.float64)
        bad = ~np.isfinite(d)
        if bad.any():
            if not np.isfinite(rows[bad].astype(np.float32)).all():
                raise self._corrupt(_WALK_ERRORS[4])
            d[bad] = 1.0  # a zero vector: no direction, no similarity
        return d

    def keys_of(self, slots: np.ndarray) -> np.ndarray:
        """The keys (chunk ids) of nodes ``slots``, each checked to be inside the graph."""
        self._records(slots)
        keys = self._rows(self.g.start_of(slots), 8).view("<u8").ravel()
        if np.any(keys >= self.g.size):
            raise self._corrupt("vector index: a node's key is outside the graph")
        return keys

    # --- the search ----------------------------------------------------------------------------
    def search(self, query: np.ndarray, count: int) -> Matches:
        """The ``count`` nearest nodes found by a beam of width max(count, expansion_search)."""
        g = self.g
        ef = max(count, self.expansion_search)
        q = np.asarray(query, dtype=np.float32).ravel()
        q = (q / max(float(np.linalg.norm(q)), 1e-12)).astype(self.matrix.dtype)
        if self._kernels is not None:
            return self._compiled(q, count, ef)
        batch = min(BATCH_MAX, max(BATCH_MIN, ef // BATCH_PER_EF))
        cur = np.array([g.entry], dtype=np.int64)
        cur_d = self._distances(cur, q)[0]
        for level in range(g.max_level, 0, -1):  # greedy: move to the nearest neighbour while it is nearer
            while True:
                nb = self._lists(cur, level)
                if not len(nb):
                    break
                d = self._distances(nb, q)
                j = int(np.argmin(d))
                if d[j] >= cur_d:
                    break
                cur, cur_d = nb[j : j + 1], d[j]
        seen = np.zeros(g.size, dtype=bool)
        seen[cur] = True
        found, found_d = cur, np.array([cur_d])  # the beam: at most ef nearest so far
        todo, todo_d = cur, found_d  # found but not expanded
        while len(todo):
            if len(found) >= ef:
                near = todo_d < found_d.max()
                todo, todo_d = todo[near], todo_d[near]
                if not len(todo):
                    break
            if len(todo) > batch:
                pick = np.argpartition(todo_d, batch - 1)[:batch]
                rest = np.ones(len(todo), dtype=bool)
                rest[pick] = False
                expand, todo, todo_d = todo[pick], todo[rest], todo_d[rest]
            else:
                expand, todo, todo_d = todo, todo[:0], todo_d[:0]
            nb = sorted_unique(self._lists(expand, 0))
            nb = nb[~seen[nb]]
            if not len(nb):
                continue
            seen[nb] = True
            d = self._distances(nb, q)
            if len(found) >= ef:
                near = d < found_d.max()
                nb, d = nb[near], d[near]
            found, found_d = np.concatenate([found, nb]), np.concatenate([found_d, d])
            if len(found) > ef:
                keep = np.argpartition(found_d, ef - 1)[:ef]
                found, found_d = found[keep], found_d[keep]
            todo, todo_d = np.concatenate([todo, nb]), np.concatenate([todo_d, d])
        order = np.argsort(found_d, kind="stable")[:count]
        return Matches(self.keys_of(found[order]), found_d[order])

    def _compiled(self, q: np.ndarray, count: int, ef: int) -> Matches:
        """``search`` by common/_kernels.c ``walk_f16`` (``q``: unit length, float16)."""
        g, p = self.g, self._pages
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
    from .cosines import _f16_kernels as kernels

    k = kernels()
    return k if k is not None and hasattr(k, "walk_f16") else None
