"""Warm in-process search latency per mode, BM25-leg throughput against bm25s, query-embedding
and rerank latency, on real artifacts and their queries.

    python bench/search_latency.py --artifact bench/out/hugo.kb --fixture ../shared/fixtures/hugo-docs.json \
        --artifact bench/out/scifact.kb --beir ../shared/data/scifact:train --scifact-corpus ../shared/data/scifact/corpus.jsonl

Writes the "latency" region of bench/RESULTS.md. Each query runs once untimed (warm-up), then
``--repeat`` timed passes; the per-query median is what the percentiles summarise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402


def timed(fn, items, repeat: int) -> list[float]:
    for it in items[:3]:
        fn(it)
    per = [[] for _ in items]
    for _ in range(repeat):
        for i, it in enumerate(items):
            t = time.perf_counter()
            fn(it)
            per[i].append((time.perf_counter() - t) * 1000)
    return [statistics.median(x) for x in per]


def pct(xs, p):
    return float(np.percentile(xs, p))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifact", type=Path, action="append", required=True)
    ap.add_argument("--fixture", type=Path, help="query fixture for the first artifact")
    ap.add_argument("--beir", action="append", default=[], metavar="FOLDER:SPLIT", help="BEIR queries for the next artifacts, in order")
    ap.add_argument("--scifact-corpus", type=Path, help="corpus.jsonl for the bm25s throughput comparison (with the scifact queries)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit", type=int, default=300, help="queries per set")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    a = ap.parse_args(argv)
    from kb.runtime.bench import load_beir, load_fixture
    from kb.runtime.bm25 import query_terms, top_bm25
    from kb.runtime.index import Index
    from kb.runtime.search import Query, Searcher

    sets = []
    if a.fixture:
        sets.append(load_fixture(a.fixture))
    for spec in a.beir:
        folder, split = spec.rsplit(":", 1)
        sets.append(load_beir(Path(folder), split))
    lines = [f"Machine: {machine()}  ", f"Date: {time.strftime('%Y-%m-%d')}  ", f"Command: `python bench/search_latency.py {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    lines += ["Warm in-process `Searcher.search` (top 10 chunks, default filters), per-query median of the timed passes:", ""]
    lines += ["| artifact | queries | mode | p50 ms | p95 ms | mean ms |", "|---|---|---|---|---|---|"]
    extra = []
    for art, bset in zip(a.artifact, sets):
        ix = Index(art)
        s = Searcher(ix)
        texts = [q.text for q in bset.queries][: a.limit]
        for mode, rerank in (("bm25", False), ("vector", False), ("hybrid", False), ("hybrid", True)):
            if rerank and s.reranker() is None:
                continue
            opts = s.defaults._replace(rerank=rerank)
            lat = timed(lambda t: s.search(Query(t, top_k=10, mode=mode), opts), texts, a.repeat if not rerank else 1)
            name = mode + ("+rerank (40)" if rerank else "")
            lines.append(f"| {art.name} | {len(texts)} | {name} | {pct(lat, 50):.2f} | {pct(lat, 95):.2f} | {statistics.mean(lat):.2f} |")
        emb = s.embedder
        qlat = timed(lambda t: emb.embed_query(t), texts, a.repeat)
        extra.append(f"- {art.name}: query embedding ({emb.name}, {getattr(emb, 'compute_type', '?')}) p50 {pct(qlat, 50):.2f} ms, p95 {pct(qlat, 95):.2f} ms")
        if "scifact" in art.name and a.scifact_corpus:
            extra.append(bm25_vs_bm25s(ix, texts, a.scifact_corpus, a.repeat))
        ix.close()
    lines += ["", *extra]
    update_region(a.results, "latency", "\n".join(lines))
    print("\n".join(lines))


def bm25_vs_bm25s(ix, texts, corpus: Path, repeat: int) -> str:
    """Queries per second of kb's BM25 leg (analyze + score + top 100 over mmapped postings)
    against bm25s (numpy backend, its own tokenizer) over the same documents and queries."""
    import bm25s

    from kb.runtime.bm25 import query_terms, top_bm25

    docs = [json.loads(x) for x in corpus.read_text(encoding="utf-8").splitlines() if x.strip()]
    model = bm25s.BM25(method="lucene")
    model.index(bm25s.tokenize([(d.get("title", "") + " " + d["text"]) for d in docs], stopwords=None, show_progress=False), show_progress=False)

    def ours(t):
        top_bm25(ix, query_terms(ix, t), 100)

    def theirs(t):
        model.retrieve(bm25s.tokenize([t], stopwords=None, show_progress=False), k=100, show_progress=False)

    a = sum(timed(ours, texts, repeat)) / 1000
    b = sum(timed(theirs, texts, repeat)) / 1000
    return f"- BM25 leg on {ix.path.name}, {len(texts)} queries, one at a time, top 100: kb {len(texts) / a:.0f} q/s, bm25s {len(texts) / b:.0f} q/s, ratio {b / a:.2f}x"


if __name__ == "__main__":
    main()
