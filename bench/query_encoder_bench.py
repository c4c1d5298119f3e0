"""The in-place query encoder (models/query_encoder.py) against the CTranslate2 query embedder it
replaces, on the dev sets: vector-leg nDCG@10, agreement of the query vectors, and warm
in-process latency (query embedding, and a whole hybrid search), the two interleaved query by
query so that other load on the machine hits both alike.

    python bench/query_encoder_bench.py --set hugo=bench/out/hugo.kb:../shared/fixtures/hugo-docs.json \
        --set scifact=bench/out/scifact.kb:../shared/data/scifact:train ...

A set is NAME=ARTIFACT:FIXTURE.json or NAME=ARTIFACT:BEIR_FOLDER:SPLIT. "ct2" is
``Searcher(ix, "cpu", "int8")`` (what kb search did on a CPU before the artifact had model.query,
and what kb serve, kb mcp and kb bench still do); "in-place" is ``Searcher(ix, one_shot=True)``
(kb search). Writes the "query-encoder" region of bench/RESULTS.md.

``--against numpy`` compares the in-place encoder on its default kernels (kb's compiled ones,
models/_encoder.c) with the same encoder on the numpy reference instead of CTranslate2. It
prints its tables and writes no region.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402


def load(spec: str):
    from kb.runtime.bench import load_beir, load_fixture

    name, rest = spec.split("=", 1)
    parts = rest.split(":")
    if len(parts) == 2:
        return name, Path(parts[0]), load_fixture(Path(parts[1]))
    return name, Path(parts[0]), load_beir(Path(parts[1]), parts[2])


def interleaved(fa, fb, items, repeat: int) -> tuple[list[float], list[float]]:
    """Per-item median milliseconds of fa and fb, alternating which runs first."""
    for it in items[:3]:
        fa(it)
        fb(it)
    ta, tb = [[] for _ in items], [[] for _ in items]
    for r in range(repeat):
        for i, it in enumerate(items):
            for f, out in ((fa, ta), (fb, tb)) if (i + r) % 2 == 0 else ((fb, tb), (fa, ta)):
                t = time.perf_counter()
                f(it)
                out[i].append((time.perf_counter() - t) * 1000)
    return [statistics.median(x) for x in ta], [statistics.median(x) for x in tb]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", dest="sets", action="append", required=True)
    ap.add_argument("--latency-queries", type=int, default=200, help="queries per set timed for latency")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    ap.add_argument("--against", choices=["ct2", "numpy"], default="ct2", help="the baseline embedder")
    a = ap.parse_args(argv)
    from kb.runtime.bench import run_bench
    from kb.runtime.index import Index
    from kb.runtime.search import Query, Searcher

    cmd = " ".join(argv if argv is not None else sys.argv[1:])
    base = "ct2" if a.against == "ct2" else f"in-place {a.against}"
    quality = [f"| set | model | queries | vector nDCG@10 {base} | vector nDCG@10 in-place | difference | query cosine min / mean | vectors identical |",
               "|---|---|---|---|---|---|---|---|"]
    speed = [f"| set | model | queries | embed p50 {base} | embed p50 in-place | hybrid search p50 {base} | hybrid search p50 in-place |",
             "|---|---|---|---|---|---|---|"]
    for spec in a.sets:
        name, art, bset = load(spec)
        ix = Index(art)
        if a.against == "ct2":
            baseline = Searcher(ix, "cpu", "int8")
            assert type(baseline.embedder).__name__ == "CT2Embedder"
        else:
            from kb.models.query_encoder import QueryEncoder

            baseline, space = Searcher(ix, one_shot=True), ix.dense
            baseline.set_embedder(space, QueryEncoder(space.query_model, space.card or {}, a.against))
        fast = Searcher(ix, one_shot=True)
        assert type(fast.embedder).__name__ == "QueryEncoder", "no model.query?"
        model = fast.embedder.name
        nd = [run_bench(s, bset, 10, ["vector"])["backends"]["vector"]["ndcg@10"] for s in (baseline, fast)]
        texts = [q.text for q in bset.queries if q.text.strip()]
        pairs = [(baseline.embedder.embed_query(t), fast.embedder.embed_query(t)) for t in texts]
        cos = [float(a @ b) for a, b in pairs]
        same = sum(bool(np.array_equal(a, b)) for a, b in pairs)
        quality.append(f"| {name} | {model} | {len(texts)} | {nd[0]:.4f} | {nd[1]:.4f} | {nd[1] - nd[0]:+.4f} | {min(cos):.4f} / {np.mean(cos):.5f} | {same} of {len(texts)} |")
        sample = texts[: a.latency_queries]
        ea, eb = interleaved(baseline.embedder.embed_query, fast.embedder.embed_query, sample, a.repeat)
        opts = baseline.defaults
        sa, sb = interleaved(lambda t: baseline.search(Query(t, top_k=10), opts), lambda t: fast.search(Query(t, top_k=10), opts), sample, a.repeat)
        p50 = lambda xs: float(np.percentile(xs, 50))  # noqa: E731
        speed.append(f"| {name} | {model} | {len(sample)} | {p50(ea):.2f} | {p50(eb):.2f} | {p50(sa):.2f} | {p50(sb):.2f} |")
        print(quality[-1], speed[-1], sep="\n", flush=True)
        ix.close()
    if a.against != "ct2":
        return
    lines = [f"Machine: {machine()}  ", f"Date: {time.strftime('%Y-%m-%d')}  ", f"Command: `python bench/query_encoder_bench.py {cmd}`", "",
             "Vector leg alone (kb bench's documents, depth 100); the query vectors of both embedders over every query of the set:", "",
             *quality, "", f"Warm in-process milliseconds, per-query median of {a.repeat} interleaved passes (the first queries of each set):", "", *speed, "",
             "kb serve, kb mcp and kb bench keep CTranslate2 (runtime/search.py, `one_shot`: loaded once, it also runs on CUDA); the in-place "
             "encoder is for the one-shot `kb search`, whose start-up it saves (packaging/README.md). Which of the two embeds a query faster warm "
             "depends on the machine (the table above)."]
    update_region(a.results, "query-encoder", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
