"""The pages one search's walk of the graph reads, and how many it would read were the vector rows
laid out otherwise, before anything is built that way. A one-shot search at a million chunks
spends its dense leg on first touches of these pages (bench/walk_first_touch.py), so the pages
a walk reads are the measure of a layout.

    python bench/walk_pages.py --artifact bench/out/scale-1m/scale.kb --queries bench/out/scale-1m/queries.npz [--count 24] [--block 1024] [--json]

Each query (the first ``--count`` of a bench/scale.py queries.npz) is walked by kb's numpy walk
(runtime/graph_walk.py; the compiled walk expands one node at a time and reads about a tenth
fewer) with its checks recorded: every node record and vector row it read. Reported, medians over
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

from kb.formats.artifact import PAGE  # the unit of the page checks (and of a first touch)
from kb.formats.hnsw import MATRIX_START


def walked(artifact: str, queries: str, count: int, k: int):
    """(row bytes, row size of the matrix, [rows read per query], [record pages per query], vectors)."""
    from kb.formats.hnsw import graph_layout
    from kb.runtime.graph_walk import GraphWalk
    from kb.runtime.index import Index, _matrix_view

    ix = Index(artifact)
    space = ix.dense
    view, g = space._checked(lambda v: graph_layout(v, space.n_chunks), graph_head_only=True)
    matrix = _matrix_view(view, g.image)
    ranges: list = []
    walk = GraphWalk(view, g, matrix, lambda a, b: ranges.append((np.asarray(a, np.int64).copy(), np.asarray(b, np.int64).copy())),
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
