"""Offline fusion study over the legs bench/fusion_legs.py stored: nDCG@10 (kb bench's, documents
ranked by their best chunk) of each leg alone, the fusion the legs were stored with ("stored": the
artifact's semantic_weight when fusion_legs.py ran), kb's default now (each query's weight by its
length unless the artifact fixes one: runtime/fusion.py length_weight), an equal-weight RRF k 60,
and a sweep of fixed semantic weights, per set. The same fusion code as kb search (fusion.py);
``kb bench --sweep semantic_weight=0:1:0.1`` gives the same figures through the CLI.

    python bench/fusion_study.py DIR/*.legs.pkl [--results bench/RESULTS.md] [--minmax] [--keyword-cap X]

``--minmax`` adds the score fusion that was tried and not kept (bench/notes/
2026-12-06-fusion-by-query-length.md): a convex combination of each leg's min-max normalized
scores under the same weights, against kb's RRF, with a paired bootstrap interval, and again with
the legs cut to depth 50.

"before" is kb's fusion until 2026-12-06: a fixed semantic_weight of 0.7 (multilingual-e5-small:
0.5). With ``--results``, the acceptance table of issue 45 goes into that file's "fusion" region.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

from kb.runtime import fusion as F
from kb.runtime.bench import ndcg_at


def read_rows(path: Path) -> tuple[str, list]:
    """A set's name and rows from fusion_legs.py's pickle, its plain legs made kb Legs again."""
    d = pickle.loads(path.read_bytes())
    for r in d["rows"]:  # legs stored before 2026-12-07 have no stopword count (None: no keyword cap)
        r["legs"] = [F.Leg(n, k, w, tuple(F.LegHit(*h) for h in hits), *rest) for n, k, w, hits, *rest in r["legs"]]
    return d["set"], d["rows"]


def ranked_docs(order, key) -> list:
    seen, out = set(), []
    for c in order:
        d = key[c]
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def weighted(row, sw: float, depth: int | None = None) -> list:
    """The row's legs with the dense share ``sw`` (BM25 the rest), their hits cut to ``depth``."""
    return [lg._replace(weight=(sw if lg.kind == "cosine" else 1.0 - sw), hits=lg.hits[:depth]) for lg in row["legs"]]


def fuse(row, sw: float, k: float, adaptive: bool) -> list:
    legs = weighted(row, sw)
    if adaptive:
        legs = F.adapt_weights(legs, row["space"])
    fused = F.fuse_rrf(legs, F.FusionParams(k))
    return ranked_docs([f.chunk for f in fused], row["key"])


def leg_alone(row, kind: str) -> list:
    for lg in row["legs"]:
        if lg.kind == kind:
            return ranked_docs([h.chunk for h in lg.hits], row["key"])
    return []


def fuse_minmax(row, sw: float, depth: int = 100) -> list:
    """Score fusion: the sum over legs of weight x (score - leg's lowest) / (leg's highest - lowest),
    with the same adaptive weights as ``fuse``; ties by chunk id."""
    legs = F.adapt_weights(weighted(row, sw, depth), row["space"])
    total: dict[int, float] = {}
    for lg in legs:
        s = [h.score for h in lg.hits]
        lo, span = (min(s), max(s) - min(s)) if s else (0.0, 0.0)
        for h in lg.hits:
            total[h.chunk] = total.get(h.chunk, 0.0) + lg.weight * ((h.score - lo) / span if span > 0 else 1.0)
    return ranked_docs(sorted(total, key=lambda c: (-total[c], c)), row["key"])


def per_query(rows, rank) -> np.ndarray:
    return np.array([ndcg_at(rank(r), r["relevant"], 10) for r in rows])


def mean_ndcg(rows, rank) -> float:
    return float(per_query(rows, rank).mean())


def paired(diff: np.ndarray, seed: int = 0) -> str:
    """Mean of per-query differences, its 95% bootstrap interval, and the queries won and lost."""
    rng = np.random.default_rng(seed)
    boot = [diff[rng.integers(0, len(diff), len(diff))].mean() for _ in range(5000)]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return f"{diff.mean():+.4f} [{lo:+.4f}, {hi:+.4f}], {(diff > 1e-9).sum()}/{(diff < -1e-9).sum()}"


def minmax_study(name: str, rows) -> str:
    """One row of the min-max table: kb's RRF, min-max with kb's weights, min-max at depth 50, the
    best fixed weight in the min-max family, and min-max's paired difference from kb's RRF and from
    an equal-weight RRF k 60."""
    now = per_query(rows, lambda r: fuse(r, default_weight(r), r["rrf_k"], True))
    mm = per_query(rows, lambda r: fuse_minmax(r, default_weight(r)))
    mm50 = mean_ndcg(rows, lambda r: fuse_minmax(r, default_weight(r), 50))
    r60 = per_query(rows, lambda r: fuse(r, 0.5, 60, False))
    sweep = {sw / 10: mean_ndcg(rows, lambda r: fuse_minmax(r, sw / 10)) for sw in range(11)}
    best = max(sweep, key=sweep.get)
    return (f"| {name} | {len(rows)} | {now.mean():.4f} | {mm.mean():.4f} | {mm50:.4f} | {best:g}: {sweep[best]:.4f} | "
            f"{paired(mm - now)} | {paired(mm - r60)} |")


BEFORE = {"multilingual-e5-small": 0.5}  # else 0.7


def default_weight(row) -> float:
    """The dense share kb gives this query now: the artifact's fixed weight, else by length."""
    if row.get("fixed_weight") is not None:
        return row["fixed_weight"]
    bm25 = next(lg for lg in row["legs"] if lg.kind == "bm25")
    return F.length_weight(bm25.words or 0, bm25.stops)


def study(rows, sweep) -> dict:
    out = {
        "bm25": mean_ndcg(rows, lambda r: leg_alone(r, "bm25")),
        "dense": mean_ndcg(rows, lambda r: leg_alone(r, "cosine")),
        "before": mean_ndcg(rows, lambda r: fuse(r, BEFORE.get(r["space"], 0.7), r["rrf_k"], True)),
        "default": mean_ndcg(rows, lambda r: fuse(r, default_weight(r), r["rrf_k"], True)),
        "rrf60": mean_ndcg(rows, lambda r: fuse(r, 0.5, 60, False)),
    }
    out["sweep"] = {sw: mean_ndcg(rows, lambda r: fuse(r, sw, rows[0]["rrf_k"], True)) for sw in sweep}
    return out


def acceptance_row(name: str, n: int, r: dict) -> str:
    """One set's line of the acceptance table: the figures, then each bar as the margin by which
    the default clears it (negative: missed)."""
    best = max(r["sweep"], key=r["sweep"].get)
    h = r["default"]
    bars = (h - max(r["bm25"], r["dense"]) - 0.005, h - r["rrf60"], h - (r["sweep"][best] - 0.01), h - (r["before"] - 0.005))
    return (f"| {name} | {n} | {r['bm25']:.4f} | {r['dense']:.4f} | {r['rrf60']:.4f} | {best:g}: {r['sweep'][best]:.4f} | {r['before']:.4f} | **{h:.4f}** | "
            + " | ".join(f"{x:+.4f}" for x in bars) + " |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pickles", nargs="+", type=Path)
    ap.add_argument("--results", type=Path, help="write the acceptance table into this file's 'fusion' region")
    ap.add_argument("--minmax", action="store_true", help="also print the min-max score fusion study")
    ap.add_argument("--keyword-cap", type=float, default=F.KEYWORD_QUERY_WEIGHT, help="the most dense share of a query with no stopword in kb's default (1: no cap, the rule before 2026-12-07)")
    a = ap.parse_args(argv)
    F.KEYWORD_QUERY_WEIGHT = a.keyword_cap
    sweep = [round(x, 2) for x in np.arange(0.0, 1.01, 0.1)]
    print("| set | n | bm25 | dense | before | default | rrf60 | best sw | best | " + " | ".join(f"{s:g}" for s in sweep) + " |")
    table = [
        "| set | queries | BM25 | dense | RRF k 60, equal | best fixed weight: nDCG | before | hybrid now | over best leg + 0.005 | over RRF k 60 | over best fixed - 0.01 | over before - 0.005 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    minmax = ["| set | queries | kb (RRF) | min-max | min-max, depth 50 | min-max best fixed | min-max - kb: mean [95%], won/lost | min-max - RRF k 60 equal |", "|---|---|---|---|---|---|---|---|"]
    for p in a.pickles:
        name, rows = read_rows(p)
        if a.minmax:
            minmax.append(minmax_study(name, rows))
        r = study(rows, sweep)
        best = max(r["sweep"], key=r["sweep"].get)
        print(f"| {name} | {len(rows)} | {r['bm25']:.4f} | {r['dense']:.4f} | {r['before']:.4f} | {r['default']:.4f} | {r['rrf60']:.4f} | {best:g} | {r['sweep'][best]:.4f} | " + " | ".join(f"{r['sweep'][s]:.3f}" for s in sweep) + " |", flush=True)
        table.append(acceptance_row(name, len(rows), r))
    if a.minmax:
        print("\n".join(["", *minmax]))
    if a.results:
        import time

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from results_md import machine, update_region

        head = [f"Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}. Command: `python bench/fusion_legs.py --set ... --out DIR` then `python bench/fusion_study.py DIR/*.legs.pkl --results bench/RESULTS.md` (nDCG@10 as kb bench gives it; `kb bench --sweep semantic_weight=0:1:0.1` gives each row's sweep through the CLI).", ""]
        update_region(a.results, "fusion", "\n".join(head + table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
