"""kb's BM25 against bm25s, side by side in one process: the leg alone, and a whole `kb search
--mode bm25` call, on SciFact and Hugo.

    python bench/lexical_speed.py --data ../shared/data --fixtures ../shared/fixtures --out bench/out [--rounds 5]

For each set, a BM25-only artifact (kb-build --embedder none --no-reranker, default kb.toml) and
a bm25s 0.3.16 model over the same documents (method lucene, k1 1.2, b 0.75, PyStemmer's English
stemmer and bm25s's English stopwords: the peer kb's quality is compared with in the "lexical"
region). Each query is timed one at a time, top 10, in rounds over all the queries; within a
round each query runs under every contender back to back (kb leg, kb search, bm25s; which
goes first rotates from query to query), so that they meet the same machine (this VM's speed
drifts by half within minutes) and none always follows the same one. A query's time is
its median over the rounds, and q/s = queries / sum of those medians.

- leg: kb analyses the query (kb.runtime.bm25.query_terms) and ranks (top_bm25, k 10) over the
  mmapped artifact; bm25s tokenizes the query (stemmer, stopwords) and retrieves k 10.
- whole call: what `kb search QUERY --mode bm25 --json` does once the artifact is open, in
  process: parse the query syntax, filters, the leg, fusion, confidence, snippets (text blocks
  decoded for the 10 results only) and the JSON rendering; against bm25s tokenize + retrieve.

Writes the "lexical-speed" region of bench/RESULTS.md and OUT/lexical_speed.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402

K = 10


def build_kb(name: str, data: Path, out: Path) -> Path:
    from kb.builder.build import build
    from kb.builder.config import BuildConfig

    art = out / f"{name}-bm25.kb"
    cfg = replace(BuildConfig(), embedding_model="none", reranker="none")
    if name == "hugo":
        build([data / "hugo-docs" / "content" / "en"], art, cfg)
    else:
        build([], art, cfg, jsonl=[data / name / "corpus.jsonl"])
    return art


def queries(name: str, data: Path, fixtures: Path) -> list[str]:
    from kb.runtime.bench import load_beir, load_fixture

    bset = load_fixture(fixtures / "hugo-docs.json") if name == "hugo" else load_beir(data / name, "train")
    return [q.text for q in bset.queries if q.text.strip()]


def bm25s_model(name: str, data: Path):
    import bm25s
    import peers as P
    import Stemmer

    docs = P.load_corpus_markdown(data / "hugo-docs" / "content" / "en") if name == "hugo" else P.load_corpus_beir(data / name)
    stem = Stemmer.Stemmer("english").stemWords
    model = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    model.index(bm25s.tokenize([P._content(d) for d in docs], stopwords="en", stemmer=stem, show_progress=False), show_progress=False)

    def search(text: str):
        qt = bm25s.tokenize([text], stopwords="en", stemmer=stem, return_ids=False, show_progress=False)
        if qt[0]:
            model.retrieve(qt, k=min(K, len(docs)), show_progress=False, n_threads=1)

    return search


def interleaved(fns: dict, texts: list[str], rounds: int) -> dict[str, float]:
    """Seconds per query summed over the queries (each query's median over ``rounds``)."""
    for fn in fns.values():
        for t in texts[:5]:
            fn(t)
    per = {name: [[] for _ in texts] for name in fns}
    order = list(fns.items())
    for r in range(rounds):
        for i, t in enumerate(texts):
            shift = (i + r) % len(order)  # back to back on each query, each contender first in turn
            for name, fn in order[shift:] + order[:shift]:
                s = time.perf_counter()
                fn(t)
                per[name][i].append(time.perf_counter() - s)
    return {name: sum(statistics.median(x) for x in rows) for name, rows in per.items()}


def run_set(name: str, data: Path, fixtures: Path, out: Path, rounds: int, limit: int) -> dict:
    from kb.runtime.bm25 import query_terms, top_bm25
    from kb.runtime.index import Index
    from kb.runtime.output import render_json
    from kb.runtime.search import Query, Searcher

    art = build_kb(name, data, out)
    texts = queries(name, data, fixtures)[:limit]
    theirs = bm25s_model(name, data)
    with Index(art) as ix:
        searcher = Searcher(ix)
        artifact = {"id": ix.artifact.id, "path": str(ix.path)}

        def leg(t):
            top_bm25(ix, query_terms(ix, t), K)

        def whole(t):
            render_json(searcher.search(Query(t, top_k=K, mode="bm25")), artifact)

        s = interleaved({"kb leg": leg, "kb search": whole, "bm25s": theirs}, texts, rounds)
        chunks, terms = ix.n_chunks, ix.n_terms
    n = len(texts)
    return {
        "set": name, "queries": n, "chunks": chunks, "terms": terms,
        "kb_leg_qps": n / s["kb leg"], "bm25s_qps": n / s["bm25s"], "kb_search_qps": n / s["kb search"],
        "leg_ratio": s["bm25s"] / s["kb leg"],  # > 1: kb's leg answers more queries per second
        "search_over_bm25s": s["kb search"] / s["bm25s"],  # the acceptance asks <= 2
        "kb_leg_ms": 1000 * s["kb leg"] / n, "kb_search_ms": 1000 * s["kb search"] / n, "bm25s_ms": 1000 * s["bm25s"] / n,
    }  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--fixtures", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sets", default="scifact,hugo")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--limit", type=int, default=1000, help="queries per set")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    ap.add_argument("--no-results", action="store_true", help="print only; leave RESULTS.md alone")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    head = [f"Machine: {machine()}  ", f"Date: {time.strftime('%Y-%m-%d')}  ", f"Command: `python bench/lexical_speed.py {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    rows = [run_set(s, a.data, a.fixtures, a.out, a.rounds, a.limit) for s in a.sets.split(",")]
    lines = head + [
        f"One query at a time, top {K}, per-query medians of {a.rounds} rounds, each query run back to back by every contender (bm25s: stemmer + stopwords, tokenize + retrieve).", "",
        "| set | queries | chunks | kb leg q/s | bm25s q/s | leg: kb / bm25s q/s (≥ 1.5) | kb search ms | bm25s ms | search: kb / bm25s time (≤ 2) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['queries']} | {r['chunks']} | {r['kb_leg_qps']:.0f} | {r['bm25s_qps']:.0f} | {r['leg_ratio']:.2f}x | "
            f"{r['kb_search_ms']:.3f} | {r['bm25s_ms']:.3f} | {r['search_over_bm25s']:.2f}x |"
        )
    (a.out / "lexical_speed.json").write_text(json.dumps(rows, indent=2) + "\n")
    if not a.no_results:
        update_region(a.results, "lexical-speed", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
