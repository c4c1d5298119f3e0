"""Fusion settings against the legs: hybrid nDCG@10 for a few RRF settings on every English
set, beside the BM25 and dense legs alone. How kb's fusion defaults were chosen.

    python bench/fusion_grid.py --data ../shared/data --fixtures ../shared/fixtures --out bench/out

Needs the artifacts bench/run_all.py builds (OUT/<set>.kb). Writes the "fusion" region of
bench/notes/2026-11-30-fusion-grid.md (``--results bench/RESULTS.md``: RESULTS.md's "fusion" region, which
issue 45's table holds).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402

VARIANTS = {
    "k=60, bonus .05/.02 (seeds)": dict(rrf_k=60, rank1_bonus=0.05, rank23_bonus=0.02),
    "k=60, no bonus": dict(rrf_k=60, rank1_bonus=0.0, rank23_bonus=0.0),
    "k=60, bonus, semantic 0.8": dict(rrf_k=60, rank1_bonus=0.05, rank23_bonus=0.02, semantic_weight=0.8),
    "k=60, bonus, semantic 0.6": dict(rrf_k=60, rank1_bonus=0.05, rank23_bonus=0.02, semantic_weight=0.6),
    "k=20, bonus .05/.02": dict(rrf_k=20, rank1_bonus=0.05, rank23_bonus=0.02),
    "k=20, no bonus (default)": dict(rrf_k=20, rank1_bonus=0.0, rank23_bonus=0.0),
    "k=30, no bonus, semantic 0.8": dict(rrf_k=30, rank1_bonus=0.0, rank23_bonus=0.0, semantic_weight=0.8),
}
SETS = {"hugo": None, "scifact": "train", "cranfield": "test", "cisi": "test"}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--fixtures", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "notes" / "2026-11-30-fusion-grid.md")
    a = ap.parse_args(argv)
    from kb.runtime.bench import load_beir, load_fixture, run_bench
    from kb.runtime.index import Index
    from kb.common.options import resolve
    from kb.runtime.search import Searcher

    table: dict[str, dict[str, float]] = {}
    for name, split in SETS.items():
        bset = load_fixture(a.fixtures / "hugo-docs.json") if split is None else load_beir(a.data / name, split)
        ix = Index(a.out / f"{name}.kb")
        legs = run_bench(Searcher(ix), bset, backends=["bm25", "vector"])["backends"]
        table.setdefault("BM25 leg alone", {})[name] = legs["bm25"]["ndcg@10"]
        table.setdefault("dense leg alone", {})[name] = legs["vector"]["ndcg@10"]
        for v, kw in VARIANTS.items():
            r = run_bench(Searcher(ix), bset, backends=["hybrid"], options=resolve({}, kw))["backends"]["hybrid"]
            table.setdefault(v, {})[name] = r["ndcg@10"]
            print(name, v, r["ndcg@10"], file=sys.stderr)
        ix.close()
    names = list(SETS)
    lines = [f"Machine: {machine()}  ", f"Date: {time.strftime('%Y-%m-%d')}  ", f"Command: `python bench/fusion_grid.py {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    lines += ["nDCG@10 of hybrid (no rerank) per fusion setting; semantic weight 0.7 unless named.", ""]
    lines += ["| setting | " + " | ".join(names) + " | mean | hybrid >= both legs on |", "|---" * (len(names) + 3) + "|"]
    for v, row in table.items():
        mean = sum(row.values()) / len(row)
        ok = "" if "alone" in v else str(sum(row[n] >= max(table["BM25 leg alone"][n], table["dense leg alone"][n]) for n in names)) + f" of {len(names)}"
        lines.append(f"| {v} | " + " | ".join(f"{row[n]:.4f}" for n in names) + f" | {mean:.4f} | {ok} |")
    update_region(a.results, "fusion", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
