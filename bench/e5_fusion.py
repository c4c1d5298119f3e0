"""Hybrid nDCG@10 of multilingual-e5-small artifacts under fusion settings (issue 17).

    python bench/e5_fusion.py --fixture hugo=../shared/fixtures/hugo-docs.json:E5_HUGO.kb \
        --beir cmrc2018-zh=../shared/data/cmrc2018-zh:dev:E5_CMRC.kb \
        --beir jsquad-ja=../shared/data/jsquad-ja:dev:E5_JSQUAD.kb [--limit 300] [--weights 0.7,0.6,0.5,0.4]

For each set: the BM25 and dense legs alone, then hybrid with each ``semantic_weight`` (the
artifact's other [search] values unchanged, adaptive fusion on), scored by kb bench's code
(documents, grouped). ``--cos-thresholds WEAK,STRONG`` also runs the default weight with
runtime/fusion.py's dense-strength thresholds set to these (bench/dense_noise.py derives a
model's from its background cosines). The first ``--limit`` queries of each set. Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", action="append", default=[], metavar="NAME=FIXTURE:ARTIFACT")
    ap.add_argument("--beir", action="append", default=[], metavar="NAME=FOLDER:SPLIT:ARTIFACT")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--weights", default="0.7,0.5")
    ap.add_argument("--cos-thresholds", help="WEAK,STRONG")
    a = ap.parse_args(argv)
    from kb.common.options import resolve
    from kb.runtime import fusion
    from kb.runtime.bench import load_beir, load_fixture, run_bench
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    sets = []
    for spec in a.fixture:
        name, rest = spec.split("=", 1)
        fixture, art = rest.split(":", 1)
        sets.append((name, load_fixture(Path(fixture)), art))
    for spec in a.beir:
        name, rest = spec.split("=", 1)
        folder, split, art = rest.split(":", 2)
        sets.append((name, load_beir(Path(folder), split), art))
    weights = [float(w) for w in a.weights.split(",")]
    cols = ["bm25", "vector"] + [f"hybrid {w:g}" for w in weights] + ([f"hybrid 0.7, cos {a.cos_thresholds}"] if a.cos_thresholds else [])
    print("| set | queries | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for name, bset, art in sets:
        bset.queries[:] = bset.queries[: a.limit]
        with Index(art) as ix:
            s = Searcher(ix)
            legs = run_bench(s, bset, 10, ["bm25", "vector"])["backends"]
            row = [legs["bm25"]["ndcg@10"], legs["vector"]["ndcg@10"]]
            for w in weights:
                row.append(run_bench(s, bset, 10, ["hybrid"], options=resolve(ix.meta.search, {"semantic_weight": w}))["backends"]["hybrid"]["ndcg@10"])
            if a.cos_thresholds:
                saved = fusion.COS_WEAK, fusion.COS_STRONG
                fusion.COS_WEAK, fusion.COS_STRONG = (float(x) for x in a.cos_thresholds.split(","))
                row.append(run_bench(s, bset, 10, ["hybrid"], options=resolve(ix.meta.search, {"semantic_weight": 0.7}))["backends"]["hybrid"]["ndcg@10"])
                fusion.COS_WEAK, fusion.COS_STRONG = saved
        print(f"| {name} | {len(bset.queries)} | " + " | ".join(f"{x:.4f}" for x in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
