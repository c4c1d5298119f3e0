"""The pages one search's walk of the graph reads, and how many it would read were the vector rows
laid out otherwise, before anything is built that way. A one-shot search at a million chunks
spends its dense leg on first touches of these pages (bench/walk_first_touch.py), so the pages
a walk reads are the measure of a layout.

    python bench/walk_pages.py --artifact bench/out/scale-1m/scale.kb --queries bench/out/scale-1m/queries.npz [--count 24] [--block 1024] [--json]

Each query (the first ``--count`` of a bench/scale.py queries.npz) is walked by the numpy walk
below (kb's walk as it was in numpy; the compiled walk, runtime/graph_walk.py, expands one node
at a time and reads about a tenth fewer) with its checks recorded: every node record and vector row it read. Reported, medians over
the queries: the rows read, the 4 KiB pages of node records and of rows as stored, the row pages
if each row took half its bytes (int8 rows instead of float16), and the row pages under another
order of the slots: within each block of ``--block`` consecutive slots (kb-build's ``clusters``
order puts a k-means leaf of about a thousand near vectors in consecutive slots), the rows
sorted by recursive halving along their widest spread down to groups of a page's rows.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from kb.formats.artifact import PAGE, sorted_unique  # the unit of the page checks (and of a first touch)
from kb.formats.hnsw import MATRIX_START
from kb.runtime.cosines import cosines_of

BATCH_MIN, BATCH_MAX, BATCH_PER_EF = 16, 64, 16  # nodes the beam expands a step: ef / 16, within 16..64


def walked(artifact: str, queries: str, count: int, k: int):
    """(row bytes, row size of the matrix, [rows read per query], [record pages per query], vectors)."""
    from kb.formats.hnsw import graph_layout
    from kb.runtime.index import Index, _matrix_view

    ix = Index(artifact)
    space = ix.dense
    view, g = space._checked(lambda v: graph_layout(v, space.n_chunks), graph_head_only=True)
    matrix = _matrix_view(view, g.image)
    ranges: list = []
    walk = NumpyWalk(view, g, matrix, lambda a, b: ranges.append((np.asarray(a, np.int64).copy(), np.asarray(b, np.int64).copy())),
                     (ix.meta.vectors or {}).get("expansion_search") or 1024)  # fmt: skip
    row = matrix.strides[0]
    at = g.image.graph_start - g.image.rows * row
    rows, records = [], []
    for q in np.load(queries)["vectors"][:count]:
        ranges.clear()
        q = np.asarray(q, np.float32)
        walk.search(q / np.linalg.norm(q), k)
        starts = np.concatenate([a for a, _ in ranges])
        stops = np.concatenate([b for _, b in ranges])
        is_row = (starts >= at) & (starts < g.image.graph_start)
        rows.append(np.unique((starts[is_row] - at) // row))
        pages = [np.arange(a // PAGE, (b - 1) // PAGE + 1) for a, b in zip(starts[~is_row], stops[~is_row])]
        records.append(len(np.unique(np.concatenate(pages))) if pages else 0)
    return row, rows, records, matrix


class NumpyWalk:
    """The walk of runtime/graph_walk.py in numpy, batched (up to ef / 16 nodes expanded a step),
    for this study only: it reports every byte range it reads to ``check(starts, stops)``, where
    the compiled walk checks its pages itself. (kb searches with the compiled walk, or usearch.)"""

    def __init__(self, buf, layout, matrix, check, expansion_search: int):
        from kb.runtime.graph_walk import GraphWalk, Pages

        self._keys = GraphWalk(buf, layout, matrix, check, expansion_search, None, Pages.none())
        self.b, self.g, self.matrix, self._check = self._keys.b, layout, matrix, check
        self.row_bytes = matrix.strides[0]
        self.matrix_at = self._keys.matrix_at
        self.expansion_search = expansion_search
        self._corrupt = ValueError

    def _rows(self, starts: np.ndarray, width: int) -> np.ndarray:
        return np.lib.stride_tricks.sliding_window_view(self.b, width)[starts]

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
            raise ValueError("a list is longer than its capacity")
        found = lists[:, 1:][np.arange(cap) < counts[:, None]].astype(np.int64)
        if np.any(found >= g.size):
            raise ValueError("a slot outside the graph")
        return found

    def _distances(self, slots: np.ndarray, q: np.ndarray) -> np.ndarray:
        """1 - cosine of ``q`` (unit length, in the stored kind) with the vectors of ``slots``, over
        the rows as stored, in numpy."""
        at = self.matrix_at + slots * self.row_bytes
        self._check(at, at + self.row_bytes)
        rows = self.matrix[slots]
        d = 1.0 - cosines_of(rows.astype(np.float32), q.astype(np.float32)).astype(np.float64)
        bad = ~np.isfinite(d)
        if bad.any():
            d[bad] = 1.0  # a zero vector: no direction, no similarity
        return d

    def search(self, query: np.ndarray, count: int) -> tuple:
        """The ``count`` nearest nodes found by a beam of width max(count, expansion_search)."""
        g = self.g
        ef = max(count, self.expansion_search)
        q = np.asarray(query, dtype=np.float32).ravel()
        q = (q / max(float(np.linalg.norm(q)), 1e-12)).astype(self.matrix.dtype)
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
        return self._keys.keys_of(found[order]), found_d[order]


def halving_order(matrix: np.ndarray, block: int, group: int) -> np.ndarray:
    """New slot of each slot: within each block of ``block`` slots, rows split in halves along the
    direction from their mean to the row farthest from it, recursively, down to ``group`` rows."""
    n = len(matrix)
    order = np.empty(n, np.int64)
    for lo in range(0, n, block):
        x = matrix[lo : lo + block].astype(np.float32)
        stack, done = [np.arange(len(x))], []
        while stack:
            ids = stack.pop()
            if len(ids) <= group:
                done.append(ids)
                continue
            y = x[ids] - x[ids].mean(0)
            side = np.argsort(y @ y[np.argmax((y * y).sum(1))], kind="stable")
            stack += [ids[side[len(ids) // 2 :]], ids[side[: len(ids) // 2]]]
        order[lo : lo + len(x)] = lo + np.concatenate(done)
    new = np.empty(n, np.int64)
    new[order] = np.arange(n)
    return new


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--queries", required=True, help="a bench/scale.py queries.npz")
    ap.add_argument("--count", type=int, default=24, help="queries walked")
    ap.add_argument("--k", type=int, default=50, help="results a walk returns (the dense leg asks for 50)")
    ap.add_argument("--block", type=int, default=1024, help="slots reordered together")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    row, rows, records, matrix = walked(a.artifact, a.queries, a.count, a.k)
    new = halving_order(matrix, a.block, max(1, PAGE // row))

    def row_pages(position, width):  # the pages under each row's first and last byte (a row may cross a page's end)
        def pages(r):
            first = MATRIX_START + position[r] * width
            return len(np.unique(np.concatenate([first // PAGE, (first + width - 1) // PAGE])))

        return statistics.median(map(pages, rows))

    slots = np.arange(len(matrix))
    out = {"queries": len(rows), "rows_read": statistics.median(map(len, rows)), "record_pages": statistics.median(records),
           "row_pages": row_pages(slots, row), "row_pages_half_width": row_pages(slots, row // 2),
           f"row_pages_halving_in_{a.block}": row_pages(new, row)}  # fmt: skip
    if a.json:
        print(json.dumps(out, indent=2))
        return
    for key, v in out.items():
        print(f"{key:>28}  {v:g}")


if __name__ == "__main__":
    main()
