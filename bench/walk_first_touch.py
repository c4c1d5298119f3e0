"""What one search's walk of the graph costs a fresh process: kb's compiled walk
(runtime/graph_walk.py), or usearch where it is not built (the whole graph checked first), over an artifact whose pages no process has touched, as a one-shot
`kb search` meets it (the artifact in the page cache, none of it mapped yet).

    python bench/walk_first_touch.py --artifact bench/out/scale-1m/scale.kb --queries bench/out/scale-1m/queries.npz [--count 16] [--walks compiled,usearch]

Each query is walked in a process of its own, once by each walk kind, the kinds interleaved; the
process opens the artifact and the graph's headers first (not timed), then times the search and
counts the pages of the vector section it verified. Reports each kind's median and mean walk ms
and pages, and the ratio of the kinds' means; ``--json`` prints them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def one_walk(artifact: str, queries: str, i: int, kind: str) -> dict:
    """In this process: open, walk query ``i`` with ``kind``'s walk, report."""
    import numpy as np

    from kb.runtime import graph_walk
    from kb.runtime.index import Index

    if kind == "usearch":
        graph_walk._f16_kernels = lambda: None
    q = np.load(queries)["vectors"][i]
    with Index(artifact) as ix:
        space = ix.dense
        space.walks = True
        walk = space.graph
        ok = ix.artifact._pages_ok.get(space.section)
        before = int(ok.sum()) if ok is not None else 0
        t = time.perf_counter()
        walk.search(q, 100)
        ms = (time.perf_counter() - t) * 1000
        return {"ms": ms, "pages": (int(ok.sum()) - before) if ok is not None else None, "compiled": isinstance(walk, graph_walk.GraphWalk)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--queries", required=True, help="a bench/scale.py queries.npz")
    ap.add_argument("--count", type=int, default=16, help="queries walked")
    ap.add_argument("--walks", default="compiled,usearch")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("I", "KIND"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(one_walk(a.artifact, a.queries, int(a.child[0]), a.child[1])))
        return
    kinds = a.walks.split(",")
    got: dict = {k: [] for k in kinds}
    for i in range(a.count):
        for k in kinds[i % len(kinds):] + kinds[: i % len(kinds)]:
            out = subprocess.run([sys.executable, __file__, "--artifact", a.artifact, "--queries", a.queries, "--child", str(i), k], capture_output=True, text=True, check=True)
            got[k].append(json.loads(out.stdout))
    res = {k: {"walk_ms_median": statistics.median(r["ms"] for r in v), "walk_ms_mean": statistics.fmean(r["ms"] for r in v),
               "pages_mean": statistics.fmean(r["pages"] or 0 for r in v), "compiled": v[0]["compiled"]} for k, v in got.items()}  # fmt: skip
    if a.json:
        print(json.dumps(res, indent=2))
        return
    for k, r in res.items():
        print(f"{k:9s} walk ms median {r['walk_ms_median']:.1f} mean {r['walk_ms_mean']:.1f}, pages verified {r['pages_mean']:.0f} (compiled: {r['compiled']})")
    if len(kinds) == 2:
        print(f"mean ratio {kinds[0]} / {kinds[1]}: {res[kinds[0]]['walk_ms_mean'] / res[kinds[1]]['walk_ms_mean']:.2f}")


if __name__ == "__main__":
    main()
