"""Hybrid nDCG@10 for several BM25 gap scales of adaptive fusion (runtime/fusion.py GAP_SCALE),
from each query's stored legs: how GAP_SCALE was chosen (bench/notes/2026-12-02-fusion-gap.md).

    python bench/fusion_sweep.py --set NAME=fixture:FIXTURE[,FIXTURE...]:ARTIFACT --set NAME=beir:FOLDER:SPLIT:ARTIFACT ... \
        [--scales inf,0.2,0.25,0.3,0.35,0.4] [--limit N]

For every query: the BM25 and dense legs (depth 100), once; then, per scale, the legs fused as
kb fuses them (the artifact's semantic weight and RRF k, the dense strength scaling, the BM25 leg
times 1 + gap / scale), grouped by document, scored by kb bench's nDCG@10. ``inf`` is no BM25
boost. Sets as in bench/fusion_gap.py. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fusion_gap import load  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", required=True, metavar="SPEC")
    ap.add_argument("--scales", default="inf,0.2,0.25,0.3,0.35,0.4")
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args(argv)
    from kb.common.options import resolve, stored_search
    from kb.runtime import fusion
    from kb.runtime import legs as L
    from kb.runtime.bench import ndcg_at
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    scales = [float(s) for s in a.scales.split(",")]
    print("| set | queries | " + " | ".join(f"scale {s:g}" for s in scales) + " |")
    print("|---|---|" + "---|" * len(scales))
    for spec in a.set:
        name, bset, art = load(spec)
        queries = [q for q in bset.queries if q.text.strip() and q.relevant][: a.limit or None]
        with Index(art) as ix:
            s = Searcher(ix)
            o = resolve(stored_search(ix.meta))
            model = (ix.meta.embedder or {}).get("name")
            allowed = np.ones(ix.n_chunks, dtype=bool)
            docs = ix.chunks["doc"]
            key = (lambda c: ix.doc_path(int(docs[c]))) if bset.key == "path" else (lambda c: ix.chunk(c).doc_id)
            stored = []
            for q in queries:
                b = L.bm25_leg(ix, "bm25", q.text, 1.0 - o.semantic_weight, 100, allowed)
                v = L.vector_leg(ix, "vector", s.embedder.embed_query(q.text), o.semantic_weight, 100, allowed)
                stored.append((q, b, v))
            row = []
            default = fusion.GAP_SCALE
            for scale in scales:
                fusion.GAP_SCALE = scale
                try:
                    scores = []
                    for q, b, v in stored:
                        legs = fusion.adapt_weights([b, v], model)
                        seen, ranked = set(), []
                        for f in fusion.fuse_rrf(legs, fusion.FusionParams(o.rrf_k, o.rank1_bonus, o.rank23_bonus)):
                            d = key(f.chunk)
                            if d not in seen:
                                seen.add(d)
                                ranked.append(d)
                        scores.append(ndcg_at(ranked, q.relevant, 10))
                    row.append(float(np.mean(scores)))
                finally:
                    fusion.GAP_SCALE = default
        print(f"| {name} | {len(stored)} | " + " | ".join(f"{x:.4f}" for x in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
