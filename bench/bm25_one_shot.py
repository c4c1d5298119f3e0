"""What a one-shot search's BM25 leg costs a fresh process at scale: ``top_bm25`` (runtime/bm25.py)
with the top k picked from the sums by kb's compiled ``acc_top``, or by ``top_k`` over every
matching chunk's score (numpy: the mask, the ids, the scores and their partition), over an
artifact in the page cache with none of it mapped yet.

    python bench/bm25_one_shot.py --artifact bench/out/scale-1m/scale.kb --queries bench/out/scale-1m/queries.npz [--count 8] [--rounds 3]

Each query runs in a process of its own, once by each kind, the kinds' order alternating by
round; the process opens the artifact and analyses the query first (not timed), then times
``top_bm25(ix, terms, 100)``. Reports each kind's median and mean ms (``--json``: as JSON) and
checks that both kinds ranked alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def one(artifact: str, queries: str, i: int, kind: str) -> dict:
    """In this process: open, rank query ``i`` with ``kind``'s pick, report."""
    import numpy as np

    from kb.runtime import cosines as native
    from kb.runtime import bm25
    from kb.runtime.index import Index

    if kind == "numpy":
        compiled = native.kernels()

        class WithoutAccTop:  # the kernels as they were before acc_top
            def __getattr__(self, name):
                if name == "acc_top":
                    raise AttributeError(name)
                return getattr(compiled, name)

        shim = WithoutAccTop()
        native.kernels = lambda: shim
    ix = Index(artifact)
    terms = bm25.query_terms(ix, str(np.load(queries)["texts"][i]))
    t = time.perf_counter()
    ids, scores = bm25.top_bm25(ix, terms, 100)
    return {"ms": (time.perf_counter() - t) * 1000, "ids": ids.tolist(), "scores": scores.tolist()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--queries", required=True, help="a bench/scale.py queries.npz")
    ap.add_argument("--count", type=int, default=8, help="queries ranked")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("I", "KIND"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(one(a.artifact, a.queries, int(a.child[0]), a.child[1])))
        return
    kinds = ["compiled", "numpy"]
    ms: dict = {k: [] for k in kinds}
    for r in range(a.rounds):
        for i in range(a.count):
            got = {}
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                out = subprocess.run([sys.executable, __file__, "--artifact", a.artifact, "--queries", a.queries, "--child", str(i), kind],
                                     capture_output=True, text=True, check=True).stdout  # fmt: skip
                got[kind] = json.loads(out)
                ms[kind].append(got[kind]["ms"])
            if got["compiled"]["ids"] != got["numpy"]["ids"] or got["compiled"]["scores"] != got["numpy"]["scores"]:
                raise SystemExit(f"query {i}: the two picks differ")
    report = {k: {"median_ms": round(statistics.median(v), 2), "mean_ms": round(statistics.mean(v), 2), "runs": len(v)} for k, v in ms.items()}
    if a.json:
        print(json.dumps(report, indent=2))
        return
    for k, v in report.items():
        print(f"{k:>9}: median {v['median_ms']} ms, mean {v['mean_ms']} ms over {v['runs']} processes")


if __name__ == "__main__":
    main()
