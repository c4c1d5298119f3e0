"""nDCG@10, calibration and the low-confidence notice of hybrid search, before and after the BM25
gap boost of adaptive fusion (runtime/fusion.py GAP_SCALE), by kb bench's own code.

    python bench/fusion_gap.py --set hugo=fixture:../shared/fixtures/hugo-docs.json,bench/fixtures/hugo-extra.json:ART/hugo.kb \
        --set scifact=beir:../shared/data/scifact:train:ART/scifact.kb ... [--limit N] [--backends hybrid,hybrid+rerank]

"Before" is the same code with the boost off (GAP_SCALE = inf: every BM25 leg keeps its weight)
and every model's cosines read as they are (no COSINE_ANCHORS), as kb searched before both;
"after" is the default. Each set: NAME=fixture:FIXTURE[,FIXTURE...]:ARTIFACT or
NAME=beir:FOLDER:SPLIT:ARTIFACT; the first ``--limit`` queries. Writes the "fusion-gap" region of
bench/notes/2026-12-02-fusion-gap.md (``--no-results``: print only).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402


def load(spec: str):
    from kb.runtime.bench import BenchSet, load_beir, load_fixture

    name, rest = spec.split("=", 1)
    kind, rest = rest.split(":", 1)
    if kind == "fixture":
        fixtures, art = rest.rsplit(":", 1)
        parts = [load_fixture(Path(f)) for f in fixtures.split(",")]
        return name, BenchSet(name, "path", [q for p in parts for q in p.queries]), Path(art)
    folder, split, art = rest.split(":", 2)
    return name, load_beir(Path(folder), split), Path(art)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", required=True, metavar="SPEC")
    ap.add_argument("--limit", type=int, default=0, help="first N queries of each set (0: all)")
    ap.add_argument("--backends", default="hybrid,hybrid+rerank")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "notes" / "2026-12-02-fusion-gap.md")
    ap.add_argument("--no-results", action="store_true")
    a = ap.parse_args(argv)
    from kb.common.options import resolve, stored_search
    from kb.runtime import fusion
    from kb.runtime.bench import run_bench
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    head = [f"Machine: {machine()}  ", f"Date: {time.strftime('%Y-%m-%d')}  ", f"Command: `python bench/fusion_gap.py {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    rows = ["| set | queries | backend | nDCG@10 before | after | change | ECE before | after | negatives flagged before / after | answerable flagged before / after |", "|---|---|---|---|---|---|---|---|---|---|"]
    default, anchors_default = fusion.GAP_SCALE, fusion.COSINE_ANCHORS
    for spec in a.set:
        name, bset, art = load(spec)
        if a.limit:
            bset.queries[:] = bset.queries[: a.limit]
        with Index(art) as ix:
            s = Searcher(ix)
            backends = [b for b in a.backends.split(",") if b != "hybrid+rerank" or s.reranker() is not None]
            res = {}
            for label, scale, anchors in (("before", math.inf, {}), ("after", default, anchors_default)):
                fusion.GAP_SCALE, fusion.COSINE_ANCHORS = scale, anchors
                try:
                    res[label] = run_bench(s, bset, 10, backends, options=resolve(stored_search(ix.meta)))["backends"]
                finally:
                    fusion.GAP_SCALE, fusion.COSINE_ANCHORS = default, anchors_default
            for b in backends:
                x, y = res["before"][b], res["after"][b]
                lx, ly = x["low_confidence"], y["low_confidence"]
                rows.append(
                    f"| {name} | {len(bset.queries)} | {b} | {x['ndcg@10']:.4f} | {y['ndcg@10']:.4f} | {y['ndcg@10'] - x['ndcg@10']:+.4f} | "
                    f"{x['calibration']['ece']:.3f} | {y['calibration']['ece']:.3f} | {lx['negatives_flagged']} / {ly['negatives_flagged']} | {lx['positives_flagged']} / {ly['positives_flagged']} |"
                )
                print(rows[-1], flush=True)
    body = "\n".join(head + rows)
    if not a.no_results:
        update_region(a.results, "fusion-gap", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
