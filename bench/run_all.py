"""One-command quality bench: build every set in the shared data, run `kb bench` on each, compare
peers, and write the tables into bench/RESULTS.md (its "quality" region).

    python bench/run_all.py --data ../shared/data --fixtures ../shared/fixtures [--out bench/out]
        [--sets hugo,scifact,cranfield,cisi,cmrc2018-zh,jsquad-ja] [--rebuild] [--no-peers]

Artifacts are built once into OUT/<set>.kb (reused unless --rebuild). Every number comes from
kb.runtime.bench (the same code as `kb bench`); peers from bench/peers.py with the same metrics.
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


def bench_set(name: str, art: Path, data: Path, fixtures: Path) -> dict:
    from kb.runtime.bench import load_beir, load_fixture, run_bench
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    kind, split = SETS[name]
    bset = load_fixture(fixtures / "hugo-docs.json") if kind == "fixture" else load_beir(data / name, split)
    ix = Index(art)
    try:
        return run_bench(Searcher(ix), bset)
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
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    from kb.runtime.bench import render_table

    names = [s for s in a.sets.split(",") if s]
    results, builds = {}, {}
    for name in names:
        art, rep = build_set(name, a.data, a.out, a.rebuild)
        if rep:
            builds[name] = rep
        print(f"[{name}] bench", file=sys.stderr)
        results[name] = bench_set(name, art, a.data, a.fixtures)
    peers = {}
    if not a.no_peers:
        import peers as P

        for name in names:
            kind, split = SETS[name]
            try:
                peers[name] = P.run_set(name, a.data, a.fixtures, split)
            except Exception as e:  # a peer failing is reported, not fatal to the bench
                peers[name] = {"error": f"{e.__class__.__name__}: {e}"}
    (a.out / "run_all.json").write_text(json.dumps({"results": results, "builds": builds, "peers": peers}, indent=2))
    cmd = "python bench/run_all.py " + " ".join(argv if argv is not None else sys.argv[1:])
    parts = [f"Machine: {machine()}  ", f"Date: {time.strftime('%Y-%m-%d')}  ", f"Command: `{cmd}`", ""]
    for name in names:
        parts += [f"### {name}", "", render_table(results[name]), ""]
        if name in peers:
            parts += [peer_table(peers[name]), ""]
    update_region(a.results, "quality", "\n".join(parts))
    print("\n".join(parts))


def peer_table(p: dict) -> str:
    if "error" in p:
        return f"Peers: failed ({p['error']})"
    cols = ["ndcg@10", "mrr@10", "recall@10", "recall@100", "hit@10"]
    lines = ["Peers on the same queries:", "", "| peer | " + " | ".join(cols) + " | index s | p50 ms | p95 ms |", "|---" * (len(cols) + 4) + "|"]
    for name, r in p.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error']} |")
            continue
        vals = " | ".join(f"{r.get(c, 0):.3f}" for c in cols)
        lat = r.get("latency_ms", {})
        lines.append(f"| {name} | {vals} | {r.get('index_seconds', 0):.2f} | {lat.get('p50', 0):.1f} | {lat.get('p95', 0):.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
