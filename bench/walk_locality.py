"""Does putting near vectors in near slots of the HNSW graph cut the pages a one-shot search's
walk of the graph reads (issue 18's open_ms)? The experiment behind kb-build's default
``[vectors] order = "clusters"`` (builder/locality.py).

    python bench/walk_locality.py --vectors bench/out/scale-1m/vectors.npy --queries bench/out/scale-1m/queries.npz \
        --chunks 300000 --ef 2048 [--orders natural,clusters,insert-clusters] [--threads 2] [--queries-used 100]

The first ``--chunks`` vectors of a bench/scale.py corpus go into a usearch graph as kb-build
makes it (cos, f16, M 16, ef_add 128, ``--threads``), the vector of chunk i under key i:

- natural: added in chunk-id order and left there (``[vectors] order = "chunks"``);
- clusters: the same graph, its nodes then moved into builder/locality.py's two-level k-means
  order by formats/hnsw.py ``permuted`` (kb-build's default);
- insert-clusters (or insert-two-K, K clusters a level): the vectors added in that order instead,
  the first way tried: a worse graph.

The saved graph is then searched by kb's own walk (runtime/graph_walk.py, the one-shot search past
20,000 chunks) for each query vector, and every 4 KiB page the walk verifies (node records and
vector rows) is counted, from nothing for each query, as a one-shot process would read them.
Reports pages per query, recall@10 against an exact scan, and the time to make the graph.
"""

from __future__ import annotations

import argparse
import mmap
import tempfile
import time
from pathlib import Path

import numpy as np

from kb.builder.locality import unit_rows

PAGE = 4096


def order_of(kind: str, v: np.ndarray) -> np.ndarray:
    from kb.builder.locality import cluster_order

    k = int(kind.rsplit("-", 1)[1]) if kind.startswith("insert-two-") else None
    return cluster_order(len(v), lambda at: np.asarray(v[at], dtype=np.float32), k)


def run(kind: str, v: np.ndarray, queries: np.ndarray, exact: list[set], ef: int, threads: int, folder: Path) -> dict:
    from usearch.index import Index as UIndex

    from kb.builder.locality import moved
    from kb.formats.hnsw import graph_layout
    from kb.runtime.graph_walk import GraphWalk

    if kind not in ("natural", "clusters", "insert-clusters") and not kind.startswith("insert-two-"):
        raise SystemExit(f"unknown order {kind!r}: natural, clusters, insert-clusters or insert-two-K")
    t = time.perf_counter()
    order = order_of(kind, v) if kind.startswith("insert-") else np.arange(len(v))
    index = UIndex(ndim=v.shape[1], metric="cos", dtype="f16", connectivity=16, expansion_add=128, expansion_search=ef)
    index.add(order.astype(np.uint64), v[order], threads=threads)
    path = folder / f"{kind}.usearch"
    index.save(str(path))
    del index
    if kind == "clusters":
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            buf = memoryview(m)
            image = b"".join(moved(buf, len(v)))  # what kb-build does with its saved graph
            buf.release()
        path.write_bytes(image)
        del image
    build_s = time.perf_counter() - t
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        buf = memoryview(m)
        g = graph_layout(buf, len(v))
        row = v.shape[1] * 2
        matrix = np.frombuffer(buf, dtype=np.float16, count=g.image.rows * v.shape[1], offset=g.image.graph_start - g.image.rows * row).reshape(g.image.rows, v.shape[1])
        pages: set[int] = set()

        def check(starts, stops):
            for a, b in zip(np.asarray(starts).tolist(), np.asarray(stops).tolist()):
                pages.update(range(a // PAGE, (b - 1) // PAGE + 1))

        walk = GraphWalk(buf, g, matrix, check, ef)
        per, recall = [], []
        for q, want in zip(queries, exact):
            pages.clear()
            got = walk.search(q.astype(np.float16), 10)
            per.append(len(pages))
            recall.append(len(want & set(np.asarray(got.keys).tolist())) / 10)
        del walk, matrix, g, buf
    path.unlink()
    return {"order": kind, "build_s": build_s, "pages_mean": float(np.mean(per)), "pages_p50": float(np.median(per)), "recall_at_10": float(np.mean(recall))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", type=Path, required=True, help="a bench/scale.py corpus's vectors.npy")
    ap.add_argument("--queries", type=Path, required=True, help="its queries.npz")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--ef", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--orders", default="natural,clusters,insert-clusters")
    ap.add_argument("--queries-used", type=int, default=100)
    a = ap.parse_args(argv)
    v = np.ascontiguousarray(np.load(a.vectors, mmap_mode="r")[: a.chunks])
    queries = unit_rows(np.load(a.queries)["vectors"][: a.queries_used])
    vf = unit_rows(v)
    exact = [set(np.argsort(-(vf @ q))[:10].tolist()) for q in queries]
    del vf
    print(f"{a.chunks} chunks, ef {a.ef}, {len(queries)} queries, {a.threads} build threads")
    print("| order | pages a query's walk reads (mean / p50) | recall@10 | graph s (build, order, move) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for kind in a.orders.split(","):
            r = run(kind, v, queries, exact, a.ef, a.threads, Path(d))
            print(f"| {r['order']} | {r['pages_mean']:.0f} / {r['pages_p50']:.0f} | {r['recall_at_10']:.4f} | {r['build_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
