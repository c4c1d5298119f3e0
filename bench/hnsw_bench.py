"""HNSW parameters: recall@10 against exact search, query latency, build time and size, varying
one parameter at a time (connectivity M, expansion_search ef) on a real artifact's vectors.

    python bench/hnsw_bench.py --artifact bench/out/scifact.kb --queries ../shared/data/scifact/queries.jsonl

Vectors are read back from the artifact (f16), queries embedded with the artifact's own model.
Writes the "hnsw" region of bench/notes/2026-11-30-hnsw-parameters.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifact", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True, help="queries.jsonl (BEIR) or a fixture .json")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "notes" / "2026-11-30-hnsw-parameters.md")
    a = ap.parse_args(argv)
    from usearch.index import Index as UIndex

    from kb.models.encoders import load_embedder
    from kb.runtime.index import Index

    ix = Index(a.artifact)
    keys = np.arange(ix.n_chunks, dtype=np.uint64)
    vecs = np.asarray(ix.dense.vectors.get(keys), dtype=np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    if a.queries.suffix == ".jsonl":
        texts = [json.loads(x)["text"] for x in a.queries.read_text().splitlines() if x.strip()][: a.limit]
    else:
        texts = [q["query"] for q in json.loads(a.queries.read_text())["queries"]][: a.limit]
    emb = load_embedder(ix.model_files(), device="cpu")
    qv = emb.embed(texts)
    exact = np.argsort(-(qv @ vecs.T), axis=1)[:, :10]
    rows = []
    for m in (8, 16, 32):
        t = time.perf_counter()
        u = UIndex(ndim=vecs.shape[1], metric="cos", dtype="f16", connectivity=m, expansion_add=128)
        u.add(keys, vecs, threads=1)
        build_s = time.perf_counter() - t
        size = len(u.save())
        for ef in (16, 32, 64, 128):
            u.expansion_search = ef
            lat = []
            hits = 0
            for i, q in enumerate(qv):
                t = time.perf_counter()
                res = u.search(q, 10)
                lat.append((time.perf_counter() - t) * 1000)
                hits += len(set(np.asarray(res.keys).tolist()) & set(exact[i].tolist()))
            rows.append((m, ef, hits / (10 * len(qv)), float(np.percentile(lat, 50)), float(np.percentile(lat, 95)), build_s, size))
    t = time.perf_counter()
    for q in qv:
        np.argpartition(-(vecs @ q), 10)[:10]
    exact_ms = (time.perf_counter() - t) * 1000 / len(qv)
    lines = [
        f"Machine: {machine()}  ",
        f"Date: {time.strftime('%Y-%m-%d')}  ",
        f"Command: `python bench/hnsw_bench.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        "",
        f"{ix.n_chunks} vectors (dim {vecs.shape[1]}, f16), {len(qv)} queries; exact numpy search: {exact_ms:.2f} ms/query.",
        "",
        "| M | ef | recall@10 vs exact | p50 ms | p95 ms | build s (1 thread) | bytes |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {m} | {ef} | {r:.4f} | {p50:.3f} | {p95:.3f} | {b:.2f} | {s:,} |" for m, ef, r, p50, p95, b, s in rows]
    update_region(a.results, "hnsw", "\n".join(lines))
    print("\n".join(lines))
    ix.close()


if __name__ == "__main__":
    main()
