"""A set of N shards against one artifact over the same corpus (issue 19's acceptance).

    python bench/set_vs_single.py --beir ../shared/data/scifact --split train --out /tmp/kb-set-bench

Builds the whole BEIR corpus into one artifact and, split into ``--shards`` contiguous pieces of
corpus.jsonl (written under ``--out``, never into the repository), into one artifact per piece
(all-MiniLM-L6-v2, kb-build's defaults; existing artifacts are reused unless ``--rebuild``).
Then, for every judged query of the split: (a) the overlap of the set's hybrid top 10 with the
single artifact's (chunks compared by doc_id and lines), averaged, and how many BM25-only
top 10s are identical; (b) warm in-process latency of a hybrid top-10 search (``--repeat``
passes, the per-query median summarised), set against single. Writes JSON to stdout and the
"set-vs-single" region of bench/RESULTS.md.
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


def build_all(beir: Path, out: Path, shards: int, rebuild: bool) -> tuple[Path, list[Path], dict]:
    from kb.builder.build import build
    from kb.builder.config import BuildConfig

    out.mkdir(parents=True, exist_ok=True)
    seconds = {}
    whole = out / "whole.kb"
    if rebuild or not whole.exists():
        t = time.perf_counter()
        build([], whole, BuildConfig(), jsonl=[beir / "corpus.jsonl"])
        seconds["whole"] = round(time.perf_counter() - t, 1)
    lines = [x for x in (beir / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    parts = []
    for i, piece in enumerate(np.array_split(np.arange(len(lines)), shards)):
        art = out / f"shard{i}.kb"
        if rebuild or not art.exists():
            src = out / f"shard{i}" / "corpus.jsonl"
            src.parent.mkdir(exist_ok=True)
            src.write_text("\n".join(lines[j] for j in piece) + "\n", encoding="utf-8")
            t = time.perf_counter()
            build([], art, BuildConfig(), jsonl=[src])
            seconds[f"shard{i}"] = round(time.perf_counter() - t, 1)
        parts.append(art)
    return whole, parts, seconds


def key(r) -> tuple:
    """A chunk, the same in both: its document, place and snippet. A chunk id is not (it counts
    within its artifact), and (doc_id, section, lines) alone is not unique: a one-line document
    cut into several chunks (as BEIR passages are) gives each of them the same lines."""
    return (r.doc_id, r.section, tuple(r.lines), r.snippet)


def timed(searcher, query, repeat: int) -> float:
    per = []
    for _ in range(repeat):
        t = time.perf_counter()
        searcher.search(query)
        per.append((time.perf_counter() - t) * 1000)
    return statistics.median(per)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--beir", type=Path, required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    a = ap.parse_args(argv)
    from kb.runtime.bench import load_beir
    from kb.runtime.collection import open_paths
    from kb.runtime.index import Index
    from kb.runtime.search import Query, Searcher

    whole_path, parts, build_s = build_all(a.beir, a.out, a.shards, a.rebuild)
    queries = [q.text for q in load_beir(a.beir, a.split).queries if q.text.strip()]
    one, many = Searcher(Index(whole_path)), Searcher(open_paths([str(p) for p in parts]))
    overlaps, bm25_same, lat_one, lat_many = [], 0, [], []
    for text in queries:
        q = Query(text, top_k=10, all_statuses=True, literal=True)
        a1, a2 = one.search(q), many.search(q)
        overlaps.append(len({key(r) for r in a1.results} & {key(r) for r in a2.results}) / max(len(a1.results), 1))
        qb = Query(text, top_k=10, all_statuses=True, literal=True, mode="bm25")
        bm25_same += [key(r) for r in one.search(qb).results] == [key(r) for r in many.search(qb).results]
    for text in queries:  # latency after every query ran once on both (warm)
        q = Query(text, top_k=10, all_statuses=True, literal=True)
        lat_one.append(timed(one, q, a.repeat))
        lat_many.append(timed(many, q, a.repeat))
    p50_one, p50_many = float(np.percentile(lat_one, 50)), float(np.percentile(lat_many, 50))
    res = {
        "set": a.beir.name, "split": a.split, "queries": len(queries), "shards": a.shards,
        "hybrid_top10_overlap": round(float(np.mean(overlaps)), 4),
        "queries_with_full_overlap": sum(o == 1.0 for o in overlaps),
        "bm25_top10_identical": f"{bm25_same}/{len(queries)}",
        "latency_ms": {"single_p50": round(p50_one, 2), "set_p50": round(p50_many, 2), "single_p95": round(float(np.percentile(lat_one, 95)), 2), "set_p95": round(float(np.percentile(lat_many, 95)), 2)},
        "set_over_single_p50": round(p50_many / p50_one, 3),
        "build_seconds": build_s,
        "chunks": {"single": one.ix.n_chunks, "set": many.ix.n_chunks},
    }
    print(json.dumps(res, indent=2))
    body = "\n".join([
        f"Machine: {machine()}  ",
        "Date: 2026-11-30  ",
        f"Command: `python bench/set_vs_single.py --beir ../shared/data/{a.beir.name} --split {a.split} --out {a.out} --shards {a.shards}`",
        "",
        f"{a.beir.name} ({a.split}, {len(queries)} queries): one artifact against a set of {a.shards} artifacts built from contiguous quarters of corpus.jsonl (all-MiniLM-L6-v2, kb-build defaults), hybrid search, no rerank, top 10 by chunk.",
        "",
        "| measure | value | acceptance |",
        "|---|---|---|",
        f"| hybrid top-10 overlap with the single artifact (mean) | {res['hybrid_top10_overlap']:.4f} ({res['queries_with_full_overlap']}/{len(queries)} queries identical sets) | ≥ 0.99 |",
        f"| BM25-only top 10 identical, in order | {res['bm25_top10_identical']} | - |",
        f"| hybrid top-10 latency p50 single / set | {p50_one:.2f} ms / {p50_many:.2f} ms ({res['set_over_single_p50']:.2f}x) | ≤ 1.5x |",
        f"| p95 single / set | {res['latency_ms']['single_p95']:.2f} ms / {res['latency_ms']['set_p95']:.2f} ms | - |",
    ])
    update_region(a.results, "set-vs-single", body)


if __name__ == "__main__":
    main()
