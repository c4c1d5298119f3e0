"""Model costs on real text: passages/second at build for int8 and float32, query embedding
latency, int8-vs-float32 agreement, sentence-transformers (torch CPU) on the same model and texts
when it is importable, and the rerank latency for 40 candidates.

    python bench/model_bench.py --corpus ../shared/data/scifact/corpus.jsonl --queries ../shared/data/scifact/queries.jsonl \
        [--reranker models/reranker] [--passages 400]

Run it with a Python that also has torch==2.13.0 and sentence-transformers to get the
side-by-side embedding throughput (e.g. training/.venv, which installs kb editable).
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


def passages(corpus: Path, n: int) -> list[str]:
    out = []
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            out.append((d.get("title", "") + "\n" + d["text"]).strip())
        if len(out) >= n:
            break
    return out


def throughput(fn, texts, repeat=2) -> float:
    fn(texts[:8])
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(texts)
        best = min(best, time.perf_counter() - t)
    return len(texts) / best


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--passages", type=int, default=400)
    ap.add_argument("--reranker", type=Path)
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    a = ap.parse_args(argv)
    from kb.builder.embedders import default_embedder_files, fetch_minilm
    from kb.models.encoders import load_embedder

    texts = passages(a.corpus, a.passages)
    queries = [json.loads(x)["text"] for x in a.queries.read_text().splitlines() if x.strip()][:200]
    lines = [f"Machine: {machine()}  ", f"Date: {time.strftime('%Y-%m-%d')}  ", f"Command: `python bench/model_bench.py {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    emb, pps_of = {}, {}
    for quant in ("int8", "float32"):
        e = load_embedder(default_embedder_files(quantization=quant), device="cpu", compute_type=quant)
        emb[quant] = e
        tok = e.count_tokens(texts)
        pps = pps_of[quant] = throughput(lambda t: e.embed(t), texts)
        lat = []
        for q in queries:
            t = time.perf_counter()
            e.embed_query(q)
            lat.append((time.perf_counter() - t) * 1000)
        lines.append(
            f"- all-MiniLM-L6-v2 via CTranslate2, {quant} weights and compute, 2 threads: {pps:.1f} passages/s "
            f"({len(texts)} SciFact passages, mean {statistics.mean(tok):.0f} tokens, truncated at 256); "
            f"query embedding p50 {np.percentile(lat, 50):.2f} ms, p95 {np.percentile(lat, 95):.2f} ms"
        )
    v8, v32 = emb["int8"].embed(texts), emb["float32"].embed(texts)
    cos = np.sum(v8 * v32, axis=1)
    lines.append(f"- int8 vs float32 embeddings: cosine min {cos.min():.4f}, mean {cos.mean():.4f}")
    try:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(2)
        st = SentenceTransformer(str(fetch_minilm()), device="cpu")
        st.max_seq_length = 256
        st_pps = throughput(lambda t: st.encode(t, batch_size=32, normalize_embeddings=True), texts)
        ref = st.encode(texts, batch_size=32, normalize_embeddings=True)
        agree = np.sum(ref * v32, axis=1)
        lines.append(
            f"- sentence-transformers {__import__('sentence_transformers').__version__} on torch {torch.__version__} CPU, same model and texts: "
            f"{st_pps:.1f} passages/s; kb int8 is {pps_of['int8'] / st_pps:.2f}x that; CTranslate2 float32 vs sentence-transformers cosine min {agree.min():.6f}"
        )
    except ImportError:
        lines.append("- sentence-transformers not importable in this Python: side-by-side throughput not measured in this run")
    if a.reranker:
        from kb.runtime.cross_encoder import load_reranker_path

        rr = load_reranker_path(a.reranker, "cpu", "int8")
        cands = texts[:40]
        for ptok in (128, 192, 256):
            lat = []
            for q in queries[:30]:
                t = time.perf_counter()
                for s in range(0, 40, 8):
                    rr.score(q, cands[s : s + 8], passage_tokens=ptok)
                lat.append((time.perf_counter() - t) * 1000)
            lines.append(f"- rerank {rr.name} (int8, CPU): 40 candidates, passages cut to {ptok} tokens, batches of 8: p50 {np.percentile(lat, 50):.0f} ms, p95 {np.percentile(lat, 95):.0f} ms")
    update_region(a.results, "models", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
