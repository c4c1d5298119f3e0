"""kb's BM25 leg against bm25s with PyStemmer's English stemmer and its English stopwords, on the
dev sets, with the same metrics code (kb.runtime.bench: run_bench for kb, query_metrics for both).

    python bench/lexical.py --data ../shared/data --fixtures ../shared/fixtures --out /tmp/lex [--sets hugo,scifact]

For each set: a BM25-only artifact built from the set (kb-build --embedder none --no-reranker,
default kb.toml: [analyzer] language = "auto"), scored by `kb bench --backend bm25`'s code; bm25s
0.3.16 (method lucene, k1 1.2, b 0.75, whole documents title + text, stopwords "en",
stemmer Stemmer("english")) as bench/peers.py runs it. CJK sets: kb only (bm25s's tokenizer
cannot segment them). Run it with an older kb on PYTHONPATH for the "before" column: the script
uses only APIs both have. Writes OUT/lexical.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SETS = {  # name: (kind, split)
    "hugo": ("fixture", None),
    "scifact": ("beir", "train"),
    "cranfield": ("beir", "test"),
    "cisi": ("beir", "test"),
    "cmrc2018-zh": ("beir", "dev"),
    "jsquad-ja": ("beir", "dev"),
}
CJK = ("cmrc2018-zh", "jsquad-ja")


def kb_bm25(name: str, data: Path, fixtures: Path, out: Path) -> dict:
    from kb.builder.build import build
    from kb.builder.config import BuildConfig
    from kb.runtime.bench import load_beir, load_fixture, run_bench
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    kind, split = SETS[name]
    art = out / f"{name}.kb"
    cfg = replace(BuildConfig(), embedding_model="none", reranker="none")
    t = time.perf_counter()
    if kind == "fixture":
        rep = build([data / "hugo-docs" / "content" / "en"], art, cfg)
        bset = load_fixture(fixtures / "hugo-docs.json")
    else:
        rep = build([], art, cfg, jsonl=[data / name / "corpus.jsonl"])
        bset = load_beir(data / name, split)
    build_s = time.perf_counter() - t
    with Index(art) as ix:
        res = run_bench(Searcher(ix), bset, 10, ["bm25"])["backends"]["bm25"]
        analyzer = ix.meta.analyzer
    return {"ndcg@10": res["ndcg@10"], "recall@100": res["recall@100"], "p50_ms": res["latency_ms"]["p50"], "build_s": round(build_s, 2),
            "languages": analyzer.get("documents") or analyzer.get("languages"), "analyzer": f"{analyzer['name']}-{analyzer['version']}"}  # fmt: skip


def bm25s_stemmed(name: str, data: Path, fixtures: Path) -> dict:
    import bm25s
    import peers as P
    import Stemmer

    from kb.runtime.bench import load_beir, load_fixture

    kind, split = SETS[name]
    docs = P.load_corpus_markdown(data / "hugo-docs" / "content" / "en") if kind == "fixture" else P.load_corpus_beir(data / name)
    bset = load_fixture(fixtures / "hugo-docs.json") if kind == "fixture" else load_beir(data / name, split)
    stem = Stemmer.Stemmer("english").stemWords
    ids = [d[0] for d in docs]
    model = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    model.index(bm25s.tokenize([P._content(d) for d in docs], stopwords="en", stemmer=stem, show_progress=False), show_progress=False)
    depth = min(P.DEPTH, len(ids))

    def search(text):
        qt = bm25s.tokenize([text], stopwords="en", stemmer=stem, return_ids=False, show_progress=False)
        if not qt[0]:
            return []
        res, scores = model.retrieve(qt, k=depth, show_progress=False, n_threads=1)
        return [ids[i] for i, s in zip(res[0], scores[0]) if s > 0]

    ranked = [search(q.text) if q.text.strip() else [] for q in bset.queries]
    m = P.score_runs(bset, ranked, 10)
    return {"ndcg@10": m["ndcg@10"], "recall@100": m["recall@100"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--fixtures", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True, help="folder for the artifacts and lexical.json")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--no-bm25s", action="store_true", help="kb only")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    res = {}
    for name in a.sets.split(","):
        r = res[name] = {"kb": kb_bm25(name, a.data, a.fixtures, a.out)}
        if name not in CJK and not a.no_bm25s:
            r["bm25s"] = bm25s_stemmed(name, a.data, a.fixtures)
        print(name, json.dumps(r), file=sys.stderr, flush=True)
        (a.out / "lexical.json").write_text(json.dumps(res, indent=1))
    print("| set | kb BM25 nDCG@10 | bm25s + stemmer + stopwords | kb - bm25s | kb recall@100 | bm25s recall@100 |")
    print("|---|---|---|---|---|---|")
    for name, r in res.items():
        k, b = r["kb"], r.get("bm25s")
        bcells = f"{b['ndcg@10']:.3f} | {k['ndcg@10'] - b['ndcg@10']:+.3f}" if b else "- | -"
        print(f"| {name} | {k['ndcg@10']:.3f} | {bcells} | {k['recall@100']:.3f} | {b['recall@100']:.3f} |" if b else f"| {name} | {k['ndcg@10']:.3f} | - | - | {k['recall@100']:.3f} | - |")


if __name__ == "__main__":
    main()
