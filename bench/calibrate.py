"""Fit kb's confidence model and choose its notice floor and the adaptive-fusion constants, on the
dev sets, with a part of their queries held out.

    python bench/calibrate.py grid    --art DIR --data ../shared/data --fixtures ../shared/fixtures
    python bench/calibrate.py collect --art DIR --data ../shared/data --fixtures ../shared/fixtures --out rows.jsonl
    python bench/calibrate.py fit     --rows rows.jsonl [--write runtime/confidence_model.py] [--plots bench/]

DIR holds artifacts built with the default models: hugo.kb (kb-build ../shared/data/hugo-docs/
content/en), scifact.kb, cranfield.kb, cisi.kb (kb-build --jsonl DATA/NAME/corpus.jsonl).

- grid: nDCG@10 of hybrid with fixed and with adaptive fusion (runtime/fusion.py constants) per set.
- collect: every query's top 10 documents (kb bench's way: group by document, all statuses),
  per backend, with the confidence FEATURES (runtime/confidence.py) and whether the document is
  judged relevant (gain > 0). A query is held out when crc32(set/id) % 10 < 3 (30%).
- fit: a logistic regression per backend (numpy Newton steps, L2 1e-2) on the queries not held
  out, pooled over the sets with each set weighted equally; reports ECE (10 equal-width bins)
  on the held-out part per set and pooled; picks the notice floor on the Hugo fixture (shared +
  bench/fixtures/hugo-extra.json): the highest floor that fires on at most 10% of answerable
  queries with and without rerank; writes the model module and reliability diagrams.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SETS = {"hugo": None, "scifact": "train", "cranfield": "test", "cisi": "test"}
BACKENDS = ("bm25", "vector", "hybrid", "hybrid+rerank")
HELD_OUT = 3  # of 10


def held_out(set_name: str, qid: str) -> bool:
    return zlib.crc32(f"{set_name}/{qid}".encode()) % 10 < HELD_OUT


def load_set(name: str, data: Path, fixtures: Path):
    from kb.runtime.bench import BenchSet, load_beir, load_fixture

    if SETS[name] is not None:
        return load_beir(data / name, SETS[name])
    a, b = load_fixture(fixtures / "hugo-docs.json"), load_fixture(HERE / "fixtures" / "hugo-extra.json")
    return BenchSet("hugo", "path", a.queries + b.queries)


def searches(searcher, bset, backend: str, options, top_k: int = 10):
    """(query, response) of each query, its top ``top_k`` documents (kb bench takes 100 and
    scores the first 10; the confidence features of the top 10 are the same either way)."""
    from kb.runtime.search import Query

    mode = "hybrid" if backend.startswith("hybrid") else backend
    opts = replace(options, rerank=backend == "hybrid+rerank")
    for q in bset.queries:
        if not q.text.strip():
            continue
        resp = searcher.search(Query(q.text, top_k=top_k, group="doc", all_statuses=True, mode=mode, explain=True, literal=True), opts)
        yield q, resp


def cmd_grid(a):
    from kb.common.options import resolve, stored_search
    from kb.runtime import fusion as F
    from kb.runtime.bench import DEPTH, ndcg_at
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    grid = [("fixed", None)] + [(f"adaptive weak={w} strong={s} floor={f}", (w, s, f)) for w, s in ((0.2, 0.4), (0.25, 0.45), (0.3, 0.5), (0.2, 0.3)) for f in (0.1, 0.3)]
    table = {}
    for name in a.sets.split(","):
        bset = load_set(name, a.data, a.fixtures)
        with Index(a.art / f"{name}.kb") as ix:
            s = Searcher(ix)
            for label, consts in grid:
                if consts:
                    F.COS_WEAK, F.COS_STRONG, F.STRENGTH_FLOOR = consts
                opts = resolve(stored_search(ix.meta), {"adaptive_fusion": consts is not None})
                vals = [ndcg_at([getattr(r, bset.key) for r in resp.results], q.relevant, 10) for q, resp in searches(s, bset, "hybrid", opts, DEPTH) if q.relevant]
                table.setdefault(label, {})[name] = round(float(np.mean(vals)), 4)
                print(name, label, table[label][name], file=sys.stderr, flush=True)
    print(json.dumps(table, indent=1))


def cmd_compare(a):
    """kb bench's quality, calibration and notice figures per set, with fixed fusion (kb before
    issue 16) and with adaptive fusion, for the hybrid backends; one JSON object on stdout."""
    from kb.common.options import resolve, stored_search
    from kb.runtime.bench import run_bench
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    out = {}
    for name in a.sets.split(","):
        bset = load_set(name, a.data, a.fixtures)
        with Index(a.art / f"{name}.kb") as ix:
            s = Searcher(ix)
            for label, adaptive in (("fixed", False), ("adaptive", True)):
                res = run_bench(s, bset, backends=a.backends.split(","), options=resolve(stored_search(ix.meta), {"adaptive_fusion": adaptive}))
                out.setdefault(name, {})[label] = res["backends"]
                print(name, label, {b: v["ndcg@10"] for b, v in res["backends"].items()}, file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


def cmd_collect(a):
    from kb.common.options import resolve, stored_search
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    with open(a.out, "w") as out:
        for name in a.sets.split(","):
            bset = load_set(name, a.data, a.fixtures)
            with Index(a.art / f"{name}.kb") as ix:
                s = Searcher(ix)
                opts = resolve(stored_search(ix.meta))
                for backend in a.backends.split(","):
                    t = time.time()
                    for q, resp in searches(s, bset, backend, opts):
                        rows = [
                            {"features": list(r.explain.confidence_features.values()), "relevant": getattr(r, bset.key) in q.relevant, "confidence": r.confidence}
                            for r in resp.results
                        ]
                        notice = any(n.kind == "low_confidence" for n in resp.notices)
                        out.write(json.dumps({"set": name, "id": q.id, "backend": backend, "negative": not q.relevant, "kind": q.kind, "held_out": held_out(name, q.id), "rows": rows, "notice": notice}) + "\n")
                    print(name, backend, f"{time.time() - t:.0f}s", file=sys.stderr, flush=True)


def fit_logistic(X: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-2, steps: int = 50) -> np.ndarray:
    """Weighted L2-regularised logistic regression by Newton's method (the bias is not penalised)."""
    beta = np.zeros(X.shape[1])
    reg = np.full(X.shape[1], l2)
    reg[0] = 0.0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(X @ beta)))
        g = X.T @ (w * (p - y)) + reg * beta
        H = (X * (w * p * (1 - p))[:, None]).T @ X + np.diag(reg + 1e-9)
        step = np.linalg.solve(H, g)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def ece(conf: np.ndarray, rel: np.ndarray) -> tuple[float, list]:
    from kb.runtime.bench import calibration

    c = calibration(conf, rel)
    return c["ece"], c["bins"]


def cmd_fit(a):
    from kb.runtime.confidence import MODEL_TERMS, expand

    recs = [json.loads(x) for x in open(a.rows)]
    model = {"features": list(MODEL_TERMS), "backends": {}, "low_confidence_floor": None, "fit": {}}
    report = {}
    for backend in BACKENDS:
        rs = [r for r in recs if r["backend"] == backend]
        if not rs:
            continue
        sets = sorted({r["set"] for r in rs})
        train = [(r["set"], row) for r in rs if not r["held_out"] for row in r["rows"]]
        X = expand(np.array([row["features"] for _, row in train]))
        y = np.array([float(row["relevant"]) for _, row in train])
        per_set = {s: sum(1 for n, _ in train if n == s) for s in sets}
        w = np.array([len(train) / (len(sets) * per_set[n]) for n, _ in train])  # each set counts the same
        beta = fit_logistic(X, y, w)
        model["backends"][backend] = [round(float(b), 6) for b in beta]
        report[backend] = {}
        for s in sets + ["all"]:
            test = [row for r in rs if r["held_out"] and (s == "all" or r["set"] == s) for row in r["rows"]]
            if not test:
                continue
            Xt = expand(np.array([row["features"] for row in test]))
            yt = np.array([float(row["relevant"]) for row in test])
            conf = 1 / (1 + np.exp(-(Xt @ beta)))
            e, bins = ece(conf, yt)
            report[backend][s] = {"ece": e, "bins": bins, "results": len(test)}
        print(backend, {s: v["ece"] for s, v in report[backend].items()}, file=sys.stderr)
    # The notice floor per backend, on the Hugo fixture (the only dev set with negative queries):
    # the highest floor under which the top result of at most 10% of answerable queries falls.
    model["low_confidence_floor"], rates = {}, {}
    for backend, beta in model["backends"].items():
        qs = [r for r in recs if r["backend"] == backend and r["set"] == "hugo"]
        top = {id(r): 1 / (1 + np.exp(-(expand([r["rows"][0]["features"]]) @ beta)[0])) if r["rows"] else 0.0 for r in qs}
        best = 0.05
        for f in np.round(np.arange(0.05, 0.95, 0.01), 2):
            if np.mean([top[id(r)] < f for r in qs if not r["negative"]]) <= 0.10:
                best = float(f)
        model["low_confidence_floor"][backend] = best
        rates[backend] = {
            "negatives_flagged": f"{sum(top[id(r)] < best for r in qs if r['negative'])}/{sum(r['negative'] for r in qs)}",
            "positives_flagged": f"{sum(top[id(r)] < best for r in qs if not r['negative'])}/{sum(not r['negative'] for r in qs)}",
        }
    model["fit"] = {"command": " ".join(["python", "bench/calibrate.py", *sys.argv[1:]]), "date": time.strftime("%Y-%m-%d"), "held_out": f"{HELD_OUT}/10 of each set's queries (crc32 of set/id)", "ece_held_out": {b: {s: v["ece"] for s, v in r.items()} for b, r in report.items()}, "notice_on_hugo": rates}
    print(json.dumps({"floors": model["low_confidence_floor"], "notice on hugo": rates}, indent=1), file=sys.stderr)
    if a.write:
        Path(a.write).write_text(
            '"""The fitted confidence model (runtime/confidence.py). Generated by bench/calibrate.py: do not edit\n'
            'by hand; rerun it (bench/RESULTS.md, "confidence", gives the command)."""\n\nMODEL = ' + json.dumps(model, indent=4) .replace("null", "None").replace("true", "True").replace("false", "False") + "\n"
        )
    if a.report:
        Path(a.report).write_text(json.dumps(report, indent=1))
    if a.plots:
        plot(report, Path(a.plots))


def plot(report: dict, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = sorted({s for r in report.values() for s in r})
    for s in sets:
        fig, ax = plt.subplots(figsize=(4.2, 4.2))
        ax.plot([0, 1], [0, 1], color="0.7", lw=1)
        for backend, r in report.items():
            if s in r:
                b = np.array(r[s]["bins"])
                ax.plot(b[:, 0], b[:, 1], marker="o", label=f"{backend} (ECE {r[s]['ece']:.3f})")
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (bin mean)", ylabel="fraction relevant", title=f"{s}: held-out top-10 results")
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        fig.savefig(folder / f"reliability-{s}.png", dpi=110)
        plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("grid", "collect", "compare"):
        p = sub.add_parser(name)
        p.add_argument("--art", type=Path, required=True)
        p.add_argument("--data", type=Path, required=True)
        p.add_argument("--fixtures", type=Path, required=True)
        p.add_argument("--sets", default=",".join(SETS))
        if name == "collect":
            p.add_argument("--out", required=True)
        if name in ("collect", "compare"):
            p.add_argument("--backends", default=",".join(BACKENDS) if name == "collect" else "hybrid,hybrid+rerank")
    p = sub.add_parser("fit")
    p.add_argument("--rows", required=True)
    p.add_argument("--write")
    p.add_argument("--report")
    p.add_argument("--plots")
    a = ap.parse_args(argv)
    {"grid": cmd_grid, "collect": cmd_collect, "compare": cmd_compare, "fit": cmd_fit}[a.cmd](a)


if __name__ == "__main__":
    main()
