"""One-command quality bench: build every set in the shared data, run `kb bench` on each, compare
peers, and write one row a set into bench/RESULTS.md (its "quality" region) and the full tables
(every metric, by query kind, the peers) into OUT/run_all.md.

    python bench/run_all.py --data ../shared/data --fixtures ../shared/fixtures [--out bench/out]
        [--sets hugo,scifact,cranfield,cisi,lisa,cmrc2018-zh,jsquad-ja] [--rebuild] [--no-peers] [--no-rerank SETS] [--kb-results OUT/run_all.json]

Artifacts are built once into OUT/<set>.kb (reused unless --rebuild). --kb-results takes kb's
tables from an earlier run's run_all.json instead of benching again (to run the peers alone).
Every number comes from kb.runtime.bench (the same code as `kb bench`); peers from
bench/peers.py with the same metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from results_md import machine, update_region  # noqa: E402

# name -> (kind, split)
SETS = {
    "hugo": ("fixture", None),
    "scifact": ("beir", "train"),
    "cranfield": ("beir", "test"),
    "cisi": ("beir", "test"),
    "lisa": ("beir", "test"),
    "cmrc2018-zh": ("beir", "dev"),
    "jsquad-ja": ("beir", "dev"),
}


def build_set(name: str, data: Path, out: Path, rebuild: bool) -> tuple[Path, dict | None]:
    from dataclasses import asdict

    from kb.builder.build import build
    from kb.builder.config import BuildConfig

    art = out / f"{name}.kb"
    if art.exists() and not rebuild:
        return art, None
    t = time.perf_counter()
    if name == "hugo":
        rep = build([data / "hugo-docs" / "content" / "en"], art, BuildConfig())
    else:
        rep = build([], art, BuildConfig(), jsonl=[data / name / "corpus.jsonl"])
    d = asdict(rep)
    d["wall_seconds"] = time.perf_counter() - t
    return art, d


def load_set(name: str, data: Path, fixtures: Path):
    from kb.runtime.bench import load_beir, load_fixture

    kind, split = SETS[name]
    return load_fixture(fixtures / "hugo-docs.json") if kind == "fixture" else load_beir(data / name, split)


def bench_set(name: str, art: Path, data: Path, fixtures: Path, reranker=None, rerank: bool = True) -> dict:
    from kb.runtime.bench import BACKENDS, run_bench
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    bset = load_set(name, data, fixtures)
    ix = Index(art)
    try:
        searcher = Searcher(ix, reranker=reranker)
        backends = None if rerank else [b for b in BACKENDS if b != "hybrid+rerank"]
        return run_bench(searcher, bset, backends=backends)
    finally:
        ix.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description="build and evaluate every benchmark set")
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--fixtures", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-rerank", default="", help="sets benched without hybrid+rerank (comma-separated; rerank is off by default and slow on a CPU over thousands of queries)")
    ap.add_argument("--reranker", type=Path, help="rerank with this model folder instead of the artifact's own")
    ap.add_argument("--kb-results", type=Path, help="kb's results from an earlier run's run_all.json: bench the peers only")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    from kb.runtime.bench import render_table

    names = [s for s in a.sets.split(",") if s]
    reranker = None
    if a.reranker:
        from kb.runtime.cross_encoder import load_reranker_path

        reranker = load_reranker_path(a.reranker)
    results, builds = {}, {}
    if a.kb_results:
        earlier = json.loads(a.kb_results.read_text())
        results, builds = {name: earlier["results"][name] for name in names}, earlier.get("builds", {})
    for name in [n for n in names if n not in results]:
        art, rep = build_set(name, a.data, a.out, a.rebuild)
        if rep:
            builds[name] = rep
        print(f"[{name}] bench", file=sys.stderr)
        results[name] = bench_set(name, art, a.data, a.fixtures, reranker, rerank=name not in a.no_rerank.split(","))
    peers = {}
    if not a.no_peers:
        import peers as P

        for name in names:
            docs = P.load_corpus_markdown(a.data / "hugo-docs" / "content" / "en") if name == "hugo" else P.load_corpus_beir(a.data / name)
            which = P.PEERS if name in ("hugo", "scifact", "cranfield", "cisi") else ("bm25s", "tantivy")
            try:
                peers[name] = P.run_set(name, docs, load_set(name, a.data, a.fixtures), which, 10, a.out, lambda m: print(m, file=sys.stderr))
            except Exception as e:  # a peer failing is reported, not fatal to the bench
                peers[name] = {"error": f"{e.__class__.__name__}: {e}"}
    (a.out / "run_all.json").write_text(json.dumps({"results": results, "builds": builds, "peers": peers}, indent=2))
    cmd = "python bench/run_all.py " + " ".join(argv if argv is not None else sys.argv[1:])
    head = [f"Machine: {machine()}  ", f"Date: {time.strftime('%Y-%m-%d')}  ", f"Command: `{cmd}`", ""]
    parts = list(head)
    for name in names:
        parts += [f"### {name}", "", render_table(results[name]), ""]
        if name in peers:
            parts += ["Peers on the same queries, same metrics code:", "", P.render(name, peers[name]) if "error" not in peers[name] else f"failed: {peers[name]['error']}", ""]
    (a.out / "run_all.md").write_text("\n".join(parts))
    update_region(a.results, "quality", "\n".join(head + summary(results)))
    print("\n".join(parts))


def summary(results: dict) -> list[str]:
    """One row a set for RESULTS.md: each backend's nDCG@10, then hybrid's recall@100, ECE and p50."""
    backends = ["bm25", "vector", "hybrid", "hybrid+rerank"]
    lines = ["| set | queries | " + " | ".join(backends) + " | hybrid recall@100 | hybrid ECE | hybrid p50 ms |", "|---" * (len(backends) + 5) + "|"]
    for name, res in results.items():
        got = res["backends"]
        queries = f"{res['queries']} ({res['negatives']} negative)" if res["negatives"] else f"{res['queries']}"
        cells = [f"{got[b]['ndcg@10']:.3f}" if b in got else "-" for b in backends]
        h = got.get("hybrid")
        ece = h and h["calibration"]["ece"]
        tail = [f"{h['recall@100']:.3f}", "-" if ece is None else f"{ece:.3f}", f"{h['latency_ms']['p50']:.1f}"] if h else ["-"] * 3
        lines.append(f"| {name} | {queries} | " + " | ".join(cells + tail) + " |")
    return lines


if __name__ == "__main__":
    main()
