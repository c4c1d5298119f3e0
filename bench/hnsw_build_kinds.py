"""Would a graph built over int8 copies of the vectors (faster distances while it is built), then
stored and searched as float16 as kb stores it, be as good? Builds usearch graphs of the first N
vectors of a scale corpus (bench/scale.py) per ``KIND:M:EF_ADD``, and reports each one's add time
and recall@10 (top 10 of a 50-neighbour search, as kb's dense leg takes them) against exact search
over the float16 vectors, at several search ef.

    python bench/hnsw_build_kinds.py --vectors bench/out/scale-1m/vectors.npy \
        --queries bench/out/scale-1m/queries.npz --chunks 200000 f16:16:128 i8:16:128 i8:24:128

A fourth field sets the order the vectors are added in: ``chunk`` (the default: kb-build's),
``clusters`` (leaf by leaf of builder/locality.py's k-means: near vectors one after another, so
the adds find their neighbours in cache), or ``mixedNN`` (a seeded random NN% of them first, for
the graph's long links, then the rest in cluster order; ``mixed``: 5%), or ``interleaved`` (the
top-level clusters in turn, each in its own leaf order, all finishing together). Each recall comes
with the mean time of a search at that ef (one thread, the queries one at a time). The time to
find the order is reported apart from the adds.

``--probe 4,8`` also reports, per search ef, the recall@10 of the graph's top 50 merged with an
exact scan of the P leaves (of the same two-level k-means) whose centroids are nearest the query:
what an inverted-file probe beside the graph would add.

``--as-built`` also searches each int8 graph with its int8 rows, as usearch built it, and re-ranks
its top 100 by exact cosine over the float16 vectors: would storing int8 rows search faster?

A graph built as int8 is stored with float16 rows instead (formats/hnsw.py ``permuted``, as
kb-build does it): the same graph, searched the
way kb would search it. Adds run on 2 threads, as bench/scale.py --hnsw-threads 2 builds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

EFS = (256, 1024, 2048)


def as_f16_image(path: Path, vecs16: np.ndarray) -> Path:
    """The usearch image at ``path`` with its rows replaced by ``vecs16`` (float16, by key), as
    kb-build stores a graph built over int8 copies (formats/hnsw.py ``permuted``)."""
    from kb.formats.hnsw import SCALAR_KINDS, check_hnsw, permuted

    buf = path.read_bytes()
    n = len(vecs16)
    slot_of_key = check_hnsw(memoryview(buf), n, neighbours=False).row_of_key
    key_of_slot = np.arange(n) if slot_of_key is None else np.argsort(slot_of_key)
    out = path.with_suffix(".f16")
    with open(out, "wb") as f:
        for piece in permuted(memoryview(buf), n, np.arange(n), matrix=(SCALAR_KINDS["f16"], lambda slots: vecs16[key_of_slot[slots]])):
            f.write(piece)
    return out


def add_order(x: np.ndarray, order: str) -> np.ndarray:
    """The positions of ``x``'s rows in the order they are added (``order``: see above)."""
    from kb.builder.locality import cluster_labels, cluster_order, mixed_order

    n = len(x)
    if order == "chunk":
        return np.arange(n, dtype=np.int64)
    if order == "interleaved":
        first, second = cluster_labels(n, lambda at: x[at])
        by_leaf = np.lexsort((np.arange(n), second, first))
        sizes = np.bincount(first)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        rank = np.empty(n, dtype=np.float64)
        rank[by_leaf] = np.arange(n) - starts[first[by_leaf]]
        return np.lexsort((first, rank / sizes[first]))
    clustered = cluster_order(n, lambda at: x[at])
    if order == "clusters":
        return clustered
    if not order.startswith("mixed"):
        raise SystemExit(f"unknown order {order!r}")
    return mixed_order(n, clustered, int(order[5:] or 5) / 100)


def leaves(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit centroid of each leaf, each leaf's rows as a slice of ``order``, order): the leaves
    of builder/locality.py's two-level k-means over ``x``."""
    from kb.builder.locality import cluster_labels, clusters_per_level, unit_rows

    first, second = cluster_labels(len(x), lambda at: x[at])
    leaf = first * clusters_per_level(len(x)) + second
    order = np.argsort(leaf, kind="stable")
    bounds = np.searchsorted(leaf[order], np.arange(leaf.max() + 2))
    cents = np.stack([unit_rows(x[order[bounds[j] : bounds[j + 1]]].sum(0)) if bounds[j + 1] > bounds[j] else np.zeros(x.shape[1], np.float32)
                      for j in range(len(bounds) - 1)])
    return cents, bounds, order


def recall_at(g, ef: int, q: np.ndarray, exact: np.ndarray, top10) -> str:
    """recall@10 of ``top10(query)`` (keys) with the graph searched at ``ef``, and the mean ms
    of a query."""
    g.expansion_search = ef
    hits, t = 0, time.perf_counter()
    for qv, e in zip(q, exact):
        hits += len(set(np.asarray(top10(qv)).tolist()) & set(e.tolist()))
    ms = (time.perf_counter() - t) * 1000 / len(q)
    return f"{hits / (10 * len(q)):.4f} ({ms:.1f} ms)"


def graph_top10(g):
    """The top 10 of a 50-neighbour search, as kb's dense leg takes them."""
    return lambda qv: np.asarray(g.search(qv, 50).keys)[:10]


def reranked_top10(g, stored: np.ndarray):
    """The graph's top 100 re-ranked by exact cosine over ``stored``."""

    def top10(qv):
        found = np.asarray(g.search(qv, 100).keys).astype(np.int64)
        return found[np.argsort(-(stored[found] @ qv), kind="stable")[:10]]

    return top10


def probed_top10(g, stored: np.ndarray, lv, p: int):
    """The graph's top 50 merged with an exact scan of the ``p`` leaves (``leaves``) nearest the query."""
    cents, bounds, order = lv

    def top10(qv):
        found = np.asarray(g.search(qv, 50).keys).astype(np.int64)
        near = np.argsort(-(cents @ qv))[:p]
        rows = np.unique(np.concatenate([order[bounds[j] : bounds[j + 1]] for j in near] + [found]))
        return rows[np.argsort(-(stored[rows] @ qv), kind="stable")[:10]]

    return top10


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vectors", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--chunks", type=int, default=200_000)
    ap.add_argument("--probe", default="", help="comma-separated leaf counts P: also report recall@10 of the graph's top 50 merged with an exact scan of the P leaves (of builder/locality.py's two-level k-means) whose centroids are nearest the query")
    ap.add_argument("--as-built", action="store_true", help="also search each int8 graph as built (int8 rows), its top 100 re-ranked by exact cosine over the float16 vectors")
    ap.add_argument("kinds", nargs="+", metavar="KIND:M:EF_ADD[:ORDER]", help="usearch scalar kind (f16, i8, bf16), connectivity, expansion_add, add order (chunk, clusters, mixed)")
    a = ap.parse_args(argv)
    from usearch.index import Index

    x = np.asarray(np.load(a.vectors, mmap_mode="r")[: a.chunks], dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x16 = x.astype(np.float16)
    stored = x16.astype(np.float32)
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    q = np.load(a.queries)["vectors"]
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    exact = np.argsort(-(q @ stored.T), axis=1, kind="stable")[:, :10]
    print(f"{len(x):,} vectors, {len(q)} queries; recall@10 at ef {', '.join(map(str, EFS))}", flush=True)
    probes = [int(v) for v in a.probe.split(",") if v]
    lv = leaves(x) if probes else None
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.kinds:
            kind, m, ef_add, order = (spec.split(":") + ["chunk"])[:4]
            t = time.perf_counter()
            at = add_order(x, order)
            ordered = time.perf_counter() - t
            idx = Index(ndim=x.shape[1], metric="cos", dtype=kind, connectivity=int(m), expansion_add=int(ef_add))
            t = time.perf_counter()
            idx.add(at.astype(np.uint64), x[at] if order != "chunk" else x, threads=2)
            took = time.perf_counter() - t
            path = Path(tmp) / f"{kind}-{m}-{ef_add}.usearch"
            idx.save(str(path))
            del idx
            if kind != "f16" and a.as_built:
                g = Index.restore(str(path), view=True)
                print(f"| {spec} as built, top 100 re-ranked | | | " + " | ".join(recall_at(g, ef, q, exact, reranked_top10(g, stored)) for ef in EFS) + " |", flush=True)
                del g
            if kind != "f16":
                path = as_f16_image(path, x16)
            g = Index.restore(str(path), view=True)
            recalls = [recall_at(g, ef, q, exact, graph_top10(g)) for ef in EFS]
            print(f"| {spec} | {ordered:.1f} s | {took:.1f} s | " + " | ".join(recalls) + " |", flush=True)
            for p in probes:
                print(f"| {spec} + probe {p} | | | " + " | ".join(recall_at(g, ef, q, exact, probed_top10(g, stored, lv, p)) for ef in EFS) + " |", flush=True)
            del g


if __name__ == "__main__":
    sys.exit(main())
