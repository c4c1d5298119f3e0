"""Fit kb's confidence model and choose its notice floor and the adaptive-fusion constants, on the
dev sets, with a part of their queries held out.

    python bench/calibrate.py grid    --art DIR --data ../shared/data --fixtures ../shared/fixtures
    python bench/calibrate.py collect --art DIR --data ../shared/data --fixtures ../shared/fixtures --out rows.jsonl
    python bench/calibrate.py fit     --rows rows.jsonl [--write runtime/confidence_model.py] [--plots bench/]
    python bench/calibrate.py compare --art DIR --data ../shared/data --fixtures ../shared/fixtures --default-only

DIR holds one artifact per set (SETS): hugo.kb (kb-build ../shared/data/hugo-docs/content/en),
scifact.kb, cranfield.kb, cisi.kb (kb-build --jsonl DATA/NAME/corpus.jsonl: all-MiniLM-L6-v2, as
"auto" picks for English), cmrc2018-zh.kb, jsquad-ja.kb and hugo-e5.kb (--embedder
multilingual-e5-small: what "auto" picks for these languages, and the Hugo docs with it).

- grid: nDCG@10 of hybrid with fixed and with adaptive fusion (runtime/fusion.py constants) per set.
- collect: every query's top 10 documents (kb bench's way: group by document, all statuses),
  per backend, with the confidence FEATURES (runtime/confidence.py) and whether the document is
  judged relevant (gain > 0); at most --limit queries a set. Each artifact also answers
  --foreign queries of every other set as negatives (a SciFact claim against the Hugo docs, a
  Chinese question against Cranfield): queries its corpus cannot answer. A query is held out
  when crc32(source set/id) % 10 < 3 (30%), on the same side for every artifact it runs on.
- fit: a logistic regression per backend (numpy Newton steps, L2 1e-2) on the queries not held
  out, each set weighing the same (--set-power 0) and its foreign negatives a share of it
  (--foreign-weight 0.2); reports ECE (10 equal-width bins) on the held-out part per set, of
  its own queries and with the foreign ones, and pooled, each beside its noise floor (the ECE a
  perfectly calibrated model would show on as many results); with --loso also each set's ECE
  under a model fitted without it; picks each backend's notice floor: the
  highest under which the top result of at most 10% of every set's answerable queries falls,
  set halfway between two dev queries' top confidences
  (hybrid+rerank: the hybrid floor, runtime/search.py low_confidence); writes the model module
  and reliability diagrams.
- compare: kb bench's quality, calibration and notice figures per set (--default-only: kb's
  defaults only; else fixed fusion as well).
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
# name -> (query source, BEIR split or None for the Hugo fixture); the artifact is DIR/NAME.kb.
# hugo-e5 is the Hugo corpus built with multilingual-e5-small: the same queries, another embedder.
SETS = {
    "hugo": ("hugo", None),
    "scifact": ("scifact", "train"),
    "cranfield": ("cranfield", "test"),
    "cisi": ("cisi", "test"),
    "cmrc2018-zh": ("cmrc2018-zh", "dev"),
    "jsquad-ja": ("jsquad-ja", "dev"),
    "hugo-e5": ("hugo", None),
}
ENGLISH = "hugo,scifact,cranfield,cisi"
BACKENDS = ("bm25", "vector", "hybrid", "hybrid+rerank")
HELD_OUT = 3  # of 10


def held_out(source: str, qid: str) -> bool:
    """Whether a query is held out of the fit: by its source set and id, so that one query is on
    the same side for every artifact it runs against (hugo and hugo-e5, foreign negatives)."""
    return zlib.crc32(f"{source}/{qid}".encode()) % 10 < HELD_OUT


def load_set(name: str, data: Path, fixtures: Path, limit: int = 0):
    """The set's queries (at most ``limit``, chosen by crc32 of their ids: the same ones every run)."""
    from kb.runtime.bench import BenchSet, load_beir, load_fixture

    source, split = SETS[name]
    if split is not None:
        bset = load_beir(data / source, split)
    else:
        a, b = load_fixture(fixtures / "hugo-docs.json"), load_fixture(HERE / "fixtures" / "hugo-extra.json")
        bset = BenchSet(name, "path", a.queries + b.queries)
    if limit and len(bset.queries) > limit:
        bset.queries = sorted(bset.queries, key=lambda q: zlib.crc32(f"{source}/{q.id}".encode()))[:limit]
    return bset


def foreign_queries(name: str, data: Path, fixtures: Path, per_set: int) -> list:
    """Negatives for artifact ``name``: ``per_set`` queries of each other query source (SciFact's
    claims against the Hugo docs, Chinese questions against Cranfield...), with no relevant
    document: the corpus cannot answer them. Their ids keep their source (``cisi/12``)."""
    from kb.runtime.bench import BenchQuery

    own = SETS[name][0]
    out = []
    for other, (source, _) in SETS.items():
        if source == own or other != source:
            continue
        for q in load_set(other, data, fixtures, per_set).queries:
            out.append(BenchQuery(f"{source}/{q.id}", q.text, {}, "foreign"))
    return out


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
    issue 16) and with adaptive fusion, for the hybrid backends; a JSON line per set on stdout."""
    from kb.common.options import resolve, stored_search
    from kb.runtime.bench import run_bench
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    out = {}
    for name in a.sets.split(","):
        bset = load_set(name, a.data, a.fixtures, a.limit)
        with Index(a.art / f"{name}.kb") as ix:
            s = Searcher(ix)
            for label, adaptive in (("fixed", False), ("adaptive", True)) if not a.default_only else (("default", True),):
                res = run_bench(s, bset, backends=a.backends.split(","), options=resolve(stored_search(ix.meta), {"adaptive_fusion": adaptive}))
                out.setdefault(name, {})[label] = res["backends"]
                print(name, label, {b: v["ndcg@10"] for b, v in res["backends"].items()}, file=sys.stderr, flush=True)
        print(json.dumps({name: out[name]}), flush=True)  # one line per set, as it is done


def cmd_collect(a):
    from kb.common.options import resolve, stored_search
    from kb.runtime import confidence
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    # The rows keep the features; the model that scores them is the one being fitted: until then
    # (the FEATURES may have changed since the stored fit) every confidence reads 0.5.
    confidence._weights = lambda backend: np.zeros(len(confidence.MODEL_TERMS))
    with open(a.out, "w") as out:
        for name in a.sets.split(","):
            bset = load_set(name, a.data, a.fixtures, a.limit)
            if a.foreign:
                bset.queries += foreign_queries(name, a.data, a.fixtures, a.foreign)
            with Index(a.art / f"{name}.kb") as ix:
                s = Searcher(ix)
                opts = resolve(stored_search(ix.meta))
                for backend in a.backends.split(","):
                    if backend == "hybrid+rerank" and not ix.has_reranker:
                        continue
                    t = time.time()
                    for q, resp in searches(s, bset, backend, opts):
                        rows = [{"features": r.explain.confidence_features, "relevant": getattr(r, bset.key) in q.relevant} for r in resp.results]
                        source = q.id.split("/")[0] if q.kind == "foreign" else SETS[name][0]
                        qid = q.id.split("/", 1)[1] if q.kind == "foreign" else q.id
                        out.write(json.dumps({"set": name, "id": q.id, "backend": backend, "negative": not q.relevant, "kind": q.kind, "held_out": held_out(source, qid), "rows": rows}) + "\n")
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


def probability(features: np.ndarray, beta: np.ndarray) -> np.ndarray:
    from kb.runtime.confidence import expand

    return 1 / (1 + np.exp(-(expand(features) @ beta)))


def ece(conf: np.ndarray, rel: np.ndarray) -> tuple[float, list]:
    from kb.runtime.bench import calibration

    c = calibration(conf, rel)
    return c["ece"], c["bins"]


def features_of(row: dict) -> list:
    """A collected row's FEATURES, in runtime/confidence.py's order: rows name their features
    (a dict), so rows collected before a feature was added or dropped fail loudly, not silently
    shifted; older rows hold a bare list in the order of their day."""
    from kb.runtime.confidence import FEATURES

    f = row["features"]
    if isinstance(f, list):
        if len(f) != len(FEATURES):
            raise SystemExit(f"calibrate: a row has {len(f)} features, runtime/confidence.py has {len(FEATURES)}: collect again")
        return f
    missing = [n for n in FEATURES if n not in f]
    if missing:
        raise SystemExit(f"calibrate: rows lack the features {', '.join(missing)}: collect again")
    return [f[n] for n in FEATURES]


def training_weights(train: list, rs: list, sets: list, foreign_weight: float, set_power: float) -> np.ndarray:
    """Each set weighs the same (or its queries ** ``set_power``); within a set its foreign
    negatives weigh ``foreign_weight`` (their share of the set's weight) and its own queries the rest."""
    per_part = {}
    for part, _ in train:
        per_part[part] = per_part.get(part, 0) + 1
    share = {(s, foreign): (foreign_weight if foreign else 1.0 - foreign_weight) if (s, not foreign) in per_part else 1.0 for s, foreign in per_part}
    queries = {s: sum(1 for r in rs if r["set"] == s and not r["held_out"] and r["kind"] != "foreign") for s in sets}
    set_w = {s: max(queries[s], 1) ** set_power for s in sets}
    total = sum(set_w[s] for s in {p[0] for p in per_part})
    return np.array([len(train) * share[part] * set_w[part[0]] / (total * per_part[part]) for part, _ in train])


def fit_rows(rs: list, keep, foreign_weight: float, set_power: float) -> np.ndarray:
    """The logistic model's weights over the training rows of the records ``keep`` admits."""
    from kb.runtime.confidence import expand

    sets = sorted({r["set"] for r in rs})
    train = [((r["set"], r["kind"] == "foreign"), row) for r in rs if not r["held_out"] and keep(r) for row in r["rows"]]
    X = expand(np.array([features_of(row) for _, row in train]))
    y = np.array([float(row["relevant"]) for _, row in train])
    return fit_logistic(X, y, training_weights(train, rs, sets, foreign_weight, set_power))


def noise_floor(conf: np.ndarray, draws: int = 200, seed: int = 0) -> float:
    """The ECE a perfectly calibrated model would show on this many results: the mean ECE of
    ``draws`` label sets drawn with the model's own confidences as their probabilities. A
    held-out ECE near it is as good as so few results can show."""
    rng = np.random.default_rng(seed)
    return round(float(np.mean([ece(conf, (rng.random(len(conf)) < conf).astype(float))[0] for _ in range(draws)])), 4)


def leave_one_set_out(rs: list, a) -> dict:
    """ECE on each set's own queries (all of them) of a model fitted without that set: the nearest
    the dev sets come to a corpus kb was not fitted on. Leaving out hugo also leaves out hugo-e5
    (the same queries) and the other sets' foreign negatives drawn from the set's queries."""
    out = {}
    sets = sorted({r["set"] for r in rs})
    for s in sets:
        source = SETS[s][0]
        beta = fit_rows(rs, lambda r: SETS[r["set"]][0] != source and not (r["kind"] == "foreign" and r["id"].split("/")[0] == source), a.foreign_weight, a.set_power)
        test = [row for r in rs if r["set"] == s and r["kind"] != "foreign" for row in r["rows"]]
        out[s] = ece(probability(np.array([features_of(row) for row in test]), beta), np.array([float(row["relevant"]) for row in test]))[0]
    return out


def cmd_fit(a):
    from kb.runtime.confidence import MODEL_TERMS

    recs = [json.loads(x) for x in open(a.rows)]
    model = {"features": list(MODEL_TERMS), "backends": {}, "low_confidence_floor": None, "fit": {}}
    report, loso = {}, {}
    for backend in BACKENDS:
        rs = [r for r in recs if r["backend"] == backend]
        if not rs:
            continue
        sets = sorted({r["set"] for r in rs})
        beta = fit_rows(rs, lambda r: True, a.foreign_weight, a.set_power)
        model["backends"][backend] = [round(float(b), 6) for b in beta]
        report[backend] = {}
        for s in sets + ["all"]:
            for label, keep in (("", lambda r: r["kind"] != "foreign"), (" +foreign", lambda r: True)):
                test = [row for r in rs if r["held_out"] and keep(r) and (s == "all" or r["set"] == s) for row in r["rows"]]
                if not test:
                    continue
                yt = np.array([float(row["relevant"]) for row in test])
                conf = probability(np.array([features_of(row) for row in test]), beta)
                e, bins = ece(conf, yt)
                report[backend][s + label] = {"ece": e, "noise_floor": noise_floor(conf), "bins": bins, "results": len(test)}
        print(backend, {s: (round(v["ece"], 3), v["noise_floor"]) for s, v in report[backend].items() if "+" not in s}, "(ECE, noise floor)", file=sys.stderr)
        if a.loso:
            loso[backend] = leave_one_set_out(rs, a)
            print(backend, "leave one set out:", {s: round(e, 3) for s, e in loso[backend].items()}, file=sys.stderr)
    # The notice floor per backend: the highest floor under which the top result of at most 10% of
    # the answerable queries of every set falls (a query with no result always gets the notice).
    # Negatives: the Hugo fixture's own and every set's foreign queries. A reranked search's notice
    # reads the hybrid model's confidence in the top fused result (runtime/search.py
    # low_confidence), so hybrid+rerank has the hybrid floor and the hybrid rates.
    model["low_confidence_floor"], rates = {}, {}
    for backend, beta in model["backends"].items():
        if backend == "hybrid+rerank":
            continue
        qs = [r for r in recs if r["backend"] == backend]
        top = {id(r): float(probability(np.array([features_of(r["rows"][0])]), beta)[0]) if r["rows"] else 0.0 for r in qs}
        sets = sorted({r["set"] for r in qs})

        def flagged(floor, want_negative, s=None, kind=None):
            chosen = [r for r in qs if r["negative"] == want_negative and (s is None or r["set"] == s) and (kind is None or r["kind"] == kind)]
            return sum(top[id(r)] < floor for r in chosen), len(chosen)

        # Each set admits a floor up to the confidence of its answerable query that would be one
        # too many to flag; the lowest of these binds. The floor goes halfway between that query
        # and the next lower top confidence of its set, so no dev query sits on the floor (a
        # search at another depth moves a confidence by about 1e-3).
        limit, binding = np.inf, None
        for s in sets:
            answerable = sorted(top[id(r)] for r in qs if r["set"] == s and not r["negative"])
            allowed = int(0.10 * len(answerable))
            if allowed < len(answerable) and answerable[allowed] < limit:
                limit, binding = answerable[allowed], s
        below = [top[id(r)] for r in qs if r["set"] == binding and top[id(r)] < limit]
        best = round(float((limit + max(below)) / 2 if below else limit / 2), 4) if binding else 0.5
        model["low_confidence_floor"][backend] = best
        rates[backend] = {s: {"negatives_flagged": "%d/%d" % flagged(best, True, s), "answerable_flagged": "%d/%d" % flagged(best, False, s)} for s in sets}
        rates[backend]["hugo's own negatives"] = "%d/%d" % flagged(best, True, "hugo", "negative")
        rates[backend]["foreign negatives"] = "%d/%d" % flagged(best, True, kind="foreign")
    if "hybrid" in model["low_confidence_floor"]:
        model["low_confidence_floor"]["hybrid+rerank"] = model["low_confidence_floor"]["hybrid"]
    model["fit"] = {"command": " ".join(["python", "bench/calibrate.py", *sys.argv[1:]]), "date": time.strftime("%Y-%m-%d"), "held_out": f"{HELD_OUT}/10 of each set's queries (crc32 of source set/id)", "foreign_weight": a.foreign_weight, "set_power": a.set_power, "ece_held_out": {b: {s: v["ece"] for s, v in r.items()} for b, r in report.items()}, "notice": rates}
    if loso:
        model["fit"]["ece_leave_one_set_out"] = loso
    print(json.dumps({"floors": model["low_confidence_floor"], "notice": rates}, indent=1), file=sys.stderr)
    if a.write:
        Path(a.write).write_text(
            '"""The fitted confidence model (runtime/confidence.py). Generated by bench/calibrate.py: do not edit\n'
            'by hand; rerun it (bench/RESULTS.md, "confidence", gives the command)."""\n\nMODEL = ' + json.dumps(model, indent=4) .replace("null", "None").replace("true", "True").replace("false", "False") + "\n"
        )
    if a.report:
        Path(a.report).write_text(json.dumps({**report, "leave_one_set_out": loso} if loso else report, indent=1))
    if a.plots:
        plot(report, Path(a.plots))


def plot(report: dict, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = sorted({s for r in report.values() for s in r if "+" not in s})  # each set's own queries
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
        p.add_argument("--sets", default=",".join(SETS) if name == "collect" else ENGLISH)
        if name == "collect":
            p.add_argument("--out", required=True)
            p.add_argument("--limit", type=int, default=1000, help="at most this many queries of a set (chosen by crc32 of their ids)")
            p.add_argument("--foreign", type=int, default=20, help="negatives: this many queries of each other set, run against the set's artifact")
        if name == "compare":
            p.add_argument("--limit", type=int, default=0, help="at most this many queries of a set (chosen by crc32 of their ids; 0: all)")
            p.add_argument("--default-only", action="store_true", help="only kb's defaults (adaptive fusion), not fixed weights as well")
        if name in ("collect", "compare"):
            p.add_argument("--backends", default=",".join(BACKENDS) if name == "collect" else "hybrid,hybrid+rerank")
    p = sub.add_parser("fit")
    p.add_argument("--rows", required=True)
    p.add_argument("--write")
    p.add_argument("--report")
    p.add_argument("--plots")
    p.add_argument("--foreign-weight", type=float, default=0.2, help="the share of each set's weight its foreign negatives get")
    p.add_argument("--set-power", type=float, default=0.0, help="each set weighs (its queries) ** this: 0 = all sets alike, 1 = every query alike")
    p.add_argument("--loso", action="store_true", help="also report each set's ECE under a model fitted without it (leave one set out)")
    a = ap.parse_args(argv)
    {"grid": cmd_grid, "collect": cmd_collect, "compare": cmd_compare, "fit": cmd_fit}[a.cmd](a)


if __name__ == "__main__":
    main()
