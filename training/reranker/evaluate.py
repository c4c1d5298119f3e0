"""Evaluate a reranker with kb's own bench: hybrid vs hybrid+rerank under each blend rule.

Every number comes from kb.runtime.bench.run_bench (the code behind `kb bench`), on artifacts
built by kb-build, with the reranker given to the Searcher. Rerank scores are cached per
(query, passage) across blend rules, so each set costs one rerank pass; latencies of cached
configurations are therefore not real and are not reported. The 40-candidate rerank latency is
measured separately, uncached, on the real hybrid candidates of each set's queries.

    python evaluate.py --model models/reranker --art-dir ART --data /work/shared/data
        --fixtures /work/shared/fixtures --out OUT [--sets hugo,scifact,cranfield,cisi]
        [--trained-on-queries SET,...]

Writes OUT/eval.json and OUT/eval.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

SETS = {  # name -> (kind, split), as bench/run_all.py
    "hugo": ("fixture", None),
    "scifact": ("beir", "train"),
    "cranfield": ("beir", "test"),
    "cisi": ("beir", "test"),
}
CONFIGS = [  # (label, SearchOptions overrides); None = no rerank
    ("hybrid (no rerank)", None),
    ("rerank, position blend", {"blend": "position"}),
    ("rerank, sigmoid blend w=1.0", {"blend": "sigmoid", "rerank_weight": 1.0}),
    ("rerank, sigmoid blend w=0.5", {"blend": "sigmoid", "rerank_weight": 0.5}),
]
METRICS = ["ndcg@10", "mrr@10", "recall@10", "hit@10"]


class CachedReranker:
    """Wraps a CT2CrossEncoder: scores each (query, passage) once; counts real model time."""

    def __init__(self, inner):
        self.inner = inner
        self.cache: dict[tuple[str, str], float] = {}
        self.calls_ms: list[float] = []

    def score(self, query, passages, **kw):
        miss = [p for p in dict.fromkeys(passages) if (query, p) not in self.cache]
        if miss:
            t = time.perf_counter()
            s = self.inner.score(query, miss, **kw)
            self.calls_ms.append((time.perf_counter() - t) * 1000)
            for p, x in zip(miss, s):
                self.cache[(query, p)] = float(x)
        return np.array([self.cache[(query, p)] for p in passages], dtype=np.float32)


def load_set(name: str, data: Path, fixtures: Path):
    from kb.runtime.bench import load_beir, load_fixture

    kind, split = SETS[name]
    return load_fixture(fixtures / "hugo-docs.json") if kind == "fixture" else load_beir(data / name, split)


def latency(searcher, rr, queries: list[str], n: int = 40) -> dict:
    """Uncached rr.score() time for the top-n hybrid candidates of each query (ms)."""
    from kb.runtime.search import Query

    ts = []
    for q in queries:
        resp = searcher.search(Query(q, top_k=n, mode="hybrid", all_statuses=True), replace(searcher.defaults, rerank=False))
        passages = [searcher.ix.chunk(r.chunk_id).text for r in resp.results]
        t = time.perf_counter()
        rr.score(q, passages)
        ts.append((time.perf_counter() - t) * 1000)
    return {"queries": len(ts), "candidates": n, "p50_ms": round(float(np.percentile(ts, 50)), 1),
            "p95_ms": round(float(np.percentile(ts, 95)), 1), "mean_ms": round(float(np.mean(ts)), 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True, help="converted reranker folder (or HF folder)")
    ap.add_argument("--art-dir", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--fixtures", type=Path, default=Path("/work/shared/fixtures"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--trained-on-queries", default="", help="sets whose benchmark queries were used in training (marked, not held out)")
    ap.add_argument("--latency-queries", type=int, default=30)
    a = ap.parse_args(argv)

    from kb.runtime.bench import run_bench
    from kb.runtime.index import Index
    from kb.runtime.cross_encoder import load_reranker_path
    from kb.runtime.search import Searcher

    trained = {s for s in a.trained_on_queries.split(",") if s}
    rr = load_reranker_path(a.model)
    out = {"model": str(a.model), "reranker": repr(rr), "meta": rr.meta, "sets": {}}
    for name in a.sets.split(","):
        bset = load_set(name, a.data, a.fixtures)
        ix = Index(a.art_dir / f"{name}.kb")
        base = Searcher(ix).defaults
        cached = CachedReranker(rr)
        res = {"queries": len(bset.queries), "held_out": name not in trained, "configs": {}}
        t0 = time.time()
        for label, over in CONFIGS:
            if over is None:
                r = run_bench(Searcher(ix, reranker=None), bset, backends=["hybrid"], options=base)["backends"]["hybrid"]
            else:
                r = run_bench(Searcher(ix, reranker=cached), bset, backends=["hybrid+rerank"], options=replace(base, **over))["backends"]["hybrid+rerank"]
            res["configs"][label] = {m: r[m] for m in METRICS} | {"low_confidence": r["low_confidence"], "by_kind": r.get("by_kind", {})}
            print(f"{name} | {label}: " + " ".join(f"{m} {r[m]:.4f}" for m in METRICS) + f" ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
        qs = [q.text for q in bset.queries][: a.latency_queries]
        res["rerank_latency_40"] = latency(Searcher(ix), rr, qs)
        print(f"{name} | rerank 40 candidates: {res['rerank_latency_40']}", file=sys.stderr, flush=True)
        out["sets"][name] = res
        ix.close()

    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "eval.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    (a.out / "eval.md").write_text(render(out), encoding="utf-8")
    print(render(out))


def render(out: dict) -> str:
    lines = [f"Reranker `{out['meta'].get('name')}` ({out['meta'].get('quantization')}, max_tokens {out['meta'].get('max_tokens')}); kb bench, document level, rerank top 40.", ""]
    lines.append("| set | queries | held out | configuration | nDCG@10 | MRR@10 | recall@10 | hit@10 | ΔnDCG@10 | ΔMRR@10 |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for name, res in out["sets"].items():
        base = res["configs"]["hybrid (no rerank)"]
        for label, r in res["configs"].items():
            d_n = r["ndcg@10"] - base["ndcg@10"]
            d_m = r["mrr@10"] - base["mrr@10"]
            lines.append(
                f"| {name} | {res['queries']} | {'yes' if res['held_out'] else 'no'} | {label} | {r['ndcg@10']:.3f} | {r['mrr@10']:.3f} | "
                f"{r['recall@10']:.3f} | {r['hit@10']:.3f} | {d_n:+.3f} | {d_m:+.3f} |"
            )
    lines += ["", "Rerank latency, 40 hybrid candidates, uncached `score()` (ms):", "", "| set | queries | p50 | p95 | mean |", "|---|---|---|---|---|"]
    for name, res in out["sets"].items():
        L = res["rerank_latency_40"]
        lines.append(f"| {name} | {L['queries']} | {L['p50_ms']} | {L['p95_ms']} | {L['mean_ms']} |")
    if "hugo" in out["sets"]:
        lines += ["", "Hugo low-confidence notice (negatives flagged / positives flagged):", ""]
        for label, r in out["sets"]["hugo"]["configs"].items():
            lc = r["low_confidence"]
            lines.append(f"- {label}: {lc['negatives_flagged']} / {lc['positives_flagged']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
