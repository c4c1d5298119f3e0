"""Fit kb's confidence model and choose its notice floor and the adaptive-fusion constants, on the
dev sets, with a part of their queries held out.

    python bench/calibrate.py grid    --art DIR --data ../shared/data --fixtures ../shared/fixtures
    python bench/calibrate.py unanswerable --art DIR --data ../shared/data --fixtures ../shared/fixtures
    python bench/calibrate.py collect --art DIR --data ../shared/data --fixtures ../shared/fixtures --out rows.jsonl --unanswerable
    python bench/calibrate.py fit     --rows rows.jsonl [--write runtime/confidence_model.py] [--plots bench/]
    python bench/calibrate.py compare --art DIR --data ../shared/data --fixtures ../shared/fixtures --default-only
    python bench/calibrate.py separation --rows rows.jsonl [--backend hybrid]

DIR holds one artifact per set (SETS): hugo.kb (kb-build ../shared/data/hugo-docs/content/en),
scifact.kb, cranfield.kb, cisi.kb (kb-build --jsonl DATA/NAME/corpus.jsonl: all-MiniLM-L6-v2, as
"auto" picks for English), cmrc2018-zh.kb, jsquad-ja.kb and hugo-e5.kb (--embedder
multilingual-e5-small: what "auto" picks for these languages, and the Hugo docs with it).

- grid: nDCG@10 of hybrid with fixed and with adaptive fusion (runtime/fusion.py constants) per set.
- unanswerable: builds DIR/NAME-minus.kb, each set's corpus without the relevant documents of
  up to --count of its queries (those with at most MINUS_MAX_RELEVANT, while the removed stay
  under MINUS_MAX_SHARE of the corpus; listed in DIR/NAME-minus.json): in-domain queries with no
  answer, the negatives a real user meets.
- collect: every query's top 10 documents (kb bench's way: group by document, all statuses),
  per backend, with the confidence FEATURES (runtime/confidence.py) and whether the document is
  judged relevant (gain > 0); at most --limit queries a set. Each artifact also answers
  --foreign queries of every other set as negatives (a SciFact claim against the Hugo docs, a
  Chinese question against Cranfield): queries its corpus cannot answer. A query is held out
  when crc32(source set/id) % 10 < 3 (30%), on the same side for every artifact it runs on.
  --unanswerable adds each set's unanswerable queries, run against DIR/NAME-minus.kb.
- fit: a logistic regression per backend (numpy Newton steps, L2 1e-2) on the queries not held
  out, each set weighing the same (--set-power 0), its foreign negatives a share of it
  (--foreign-weight) and its unanswerable queries another (--unanswerable-weight); reports ECE
  (10 equal-width bins) on the held-out part per set, of its own queries and with its negatives,
  and pooled, each beside its noise floor (the ECE a perfectly calibrated model would show on as
  many results); with --loso also each set's ECE under a model fitted without it; picks each
  backend's notice floor: the highest under which the top result of at most 10% of every set's
  answerable queries falls, set halfway between two dev queries' top confidences (hybrid+rerank:
  the hybrid floor, runtime/search.py low_confidence); writes the model module and reliability
  diagrams.
- compare: kb bench's quality, calibration and notice figures per set (--default-only: kb's
  defaults only; else fixed fusion as well).
- separation: how well the notice's statistic (the top result's confidence under the stored
  model) and other query-level statistics tell each set's answerable queries from its in-domain
  negatives (Hugo's own, every set's unanswerable ones) and from its foreign ones: ROC AUC, on
  rows `collect --unanswerable` wrote.
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
LIMIT = 1000  # collect's default: at most this many queries a set


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


# Unanswerable in-domain queries: a set's own queries run against its corpus without their relevant
# documents (DIR/NAME-minus.kb, built by `calibrate.py unanswerable`). Unlike a foreign query,
# such a query asks the corpus's own kind of question in its own words, which is what a real
# unanswerable query looks like; the Hugo fixture's 15 hand-written negatives are too few to fit on.
MINUS_MAX_RELEVANT = 5  # a query is picked only if it has at most this many relevant documents
MINUS_MAX_SHARE = 0.08  # and while the documents removed stay under this share of the corpus


def unanswerable_pick(name: str, data: Path, fixtures: Path, count: int, documents: int) -> list:
    """Up to ``count`` answerable queries of set ``name`` (of the ones ``collect`` runs) to make
    unanswerable, chosen by crc32 of their ids (hugo and hugo-e5 pick the same), each with at most
    MINUS_MAX_RELEVANT relevant documents, while the documents they need stay under
    MINUS_MAX_SHARE of the corpus's ``documents``."""
    source = SETS[name][0]
    qs = [q for q in load_set(name, data, fixtures, LIMIT).queries if q.relevant and len(q.relevant) <= MINUS_MAX_RELEVANT]
    qs.sort(key=lambda q: zlib.crc32(f"unanswerable/{source}/{q.id}".encode()))
    picked, removed = [], set()
    for q in qs:
        if len(picked) >= count:
            break
        if len(removed | set(q.relevant)) <= MINUS_MAX_SHARE * documents:
            picked.append(q)
            removed |= set(q.relevant)
    return picked


def cmd_unanswerable(a):
    """Build DIR/NAME-minus.kb: the set's corpus without the relevant documents of the queries
    ``unanswerable_pick`` chooses (listed in DIR/NAME-minus.json), with the embedder its own
    artifact has."""
    import shutil
    import subprocess
    import tempfile

    from kb.runtime.index import Index

    for name in a.sets.split(","):
        source, split = SETS[name]
        with tempfile.TemporaryDirectory(dir=a.art) as tmp:
            if split is None:  # the Hugo docs: a folder of markdown, relevant keys are paths under it
                root = a.data / "hugo-docs" / "content" / "en"
                docs = [p for p in root.rglob("*") if p.is_file()]
                picked = unanswerable_pick(name, a.data, a.fixtures, a.count, len([p for p in docs if p.suffix == ".md"]))
                gone = {k for q in picked for k in q.relevant}
                corpus = Path(tmp) / "en"
                for p in docs:
                    rel = p.relative_to(root).as_posix()
                    if rel not in gone:
                        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(p, corpus / rel)
                args = [str(corpus)]
            else:
                lines = (a.data / source / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
                picked = unanswerable_pick(name, a.data, a.fixtures, a.count, len(lines))
                gone = {k for q in picked for k in q.relevant}
                corpus = Path(tmp) / "corpus.jsonl"
                corpus.write_text("".join(line + "\n" for line in lines if line.strip() and str(json.loads(line)["_id"]) not in gone), encoding="utf-8")
                args = ["--jsonl", str(corpus)]
            with Index(a.art / f"{name}.kb") as ix:
                embedder = ix.meta.embedder["name"]
            out = a.art / f"{name}-minus.kb"
            cmd = ["kb-build", *args, "-o", str(out), "--embedder", embedder, "--quiet", "--force"]
            t = time.time()
            subprocess.run(cmd, check=True)
            (a.art / f"{name}-minus.json").write_text(json.dumps({"queries": [q.id for q in picked], "removed_documents": sorted(gone)}, indent=1))
            print(name, f"{len(picked)} queries, {len(gone)} documents removed, {time.time() - t:.0f}s", file=sys.stderr, flush=True)


def unanswerable_queries(name: str, art: Path, data: Path, fixtures: Path) -> list:
    """The queries DIR/NAME-minus.json lists, as negatives (their relevant documents are gone)."""
    from kb.runtime.bench import BenchQuery

    listed = art / f"{name}-minus.json"
    if not listed.exists():
        return []
    ids = set(json.loads(listed.read_text())["queries"])
    return [BenchQuery(q.id, q.text, {}, "unanswerable") for q in load_set(name, data, fixtures).queries if q.id in ids]


def searches(searcher, bset, backend: str, options, top_k: int = 10):
    """(query, response) of each query, its top ``top_k`` documents (kb bench takes 100 and
    scores the first 10; the confidence features of the top 10 are the same either way)."""
    from kb.runtime.search import Query

    mode = "hybrid" if backend.startswith("hybrid") else backend
    opts = options._replace(rerank=backend == "hybrid+rerank")
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
            runs = [(a.art / f"{name}.kb", bset)]
            if a.unanswerable:  # the set's unanswerable queries, on its artifact without their documents
                minus = replace(bset, queries=unanswerable_queries(name, a.art, a.data, a.fixtures))
                runs += [(a.art / f"{name}-minus.kb", minus)] if minus.queries else []
            for path, queries in runs:
                with Index(path) as ix:
                    s = Searcher(ix)
                    opts = resolve(stored_search(ix.meta))
                    for backend in a.backends.split(","):
                        if backend == "hybrid+rerank" and not ix.has_reranker:
                            continue
                        t = time.time()
                        for q, resp in searches(s, queries, backend, opts):
                            rows = [{"features": r.explain.confidence_features, "relevant": getattr(r, queries.key) in q.relevant,
                                     "legs": {name: leg["rank"] for name, leg in r.explain.legs.items()}} for r in resp.results]
                            source = q.id.split("/")[0] if q.kind == "foreign" else SETS[name][0]
                            qid = q.id.split("/", 1)[1] if q.kind == "foreign" else q.id
                            out.write(json.dumps({"set": name, "id": q.id, "backend": backend, "negative": not q.relevant, "kind": q.kind, "held_out": held_out(source, qid), "rows": rows}) + "\n")
                        print(name, path.name, backend, f"{time.time() - t:.0f}s", file=sys.stderr, flush=True)


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


def kind_of(r: dict) -> str:
    """A collected query's part of its set: "own" (the set's queries on its artifact), "foreign"
    (another set's) or "unanswerable" (its own, on its artifact without their relevant documents)."""
    return r["kind"] if r["kind"] in ("foreign", "unanswerable") else "own"


def training_weights(train: list, rs: list, sets: list, a) -> np.ndarray:
    """Each set weighs the same (or its queries ** --set-power); within a set its foreign
    negatives weigh --foreign-weight (their share of the set's weight), its unanswerable queries
    --unanswerable-weight, and its own queries the rest (shares of the parts a set lacks go to
    the parts it has)."""
    per_part = {}
    for part, _ in train:
        per_part[part] = per_part.get(part, 0) + 1
    shares = {"foreign": a.foreign_weight, "unanswerable": a.unanswerable_weight}
    shares["own"] = 1.0 - sum(shares.values())
    present = {}
    for s, kind in per_part:
        present[s] = present.get(s, 0.0) + shares[kind]
    share = {(s, kind): shares[kind] / present[s] if present[s] else 0.0 for s, kind in per_part}
    queries = {s: sum(1 for r in rs if r["set"] == s and not r["held_out"] and kind_of(r) == "own") for s in sets}
    set_w = {s: max(queries[s], 1) ** a.set_power for s in sets}
    total = sum(set_w[s] for s in {p[0] for p in per_part})
    return np.array([len(train) * share[part] * set_w[part[0]] / (total * per_part[part]) for part, _ in train])


def fit_rows(rs: list, keep, a) -> np.ndarray:
    """The logistic model's weights over the training rows of the records ``keep`` admits."""
    from kb.runtime.confidence import expand

    sets = sorted({r["set"] for r in rs})
    train = [((r["set"], kind_of(r)), row) for r in rs if not r["held_out"] and keep(r) for row in r["rows"]]
    X = expand(np.array([features_of(row) for _, row in train]))
    y = np.array([float(row["relevant"]) for _, row in train])
    return fit_logistic(X, y, training_weights(train, rs, sets, a))


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
        beta = fit_rows(rs, lambda r: SETS[r["set"]][0] != source and not (r["kind"] == "foreign" and r["id"].split("/")[0] == source), a)
        test = [row for r in rs if r["set"] == s and kind_of(r) == "own" for row in r["rows"]]
        out[s] = ece(probability(np.array([features_of(row) for row in test]), beta), np.array([float(row["relevant"]) for row in test]))[0]
    return out


def packages() -> dict:
    """The versions of the installed packages a search's results depend on (this process's: run
    fit where collect ran)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("numpy", "usearch", "numkong", "ctranslate2", "tokenizers", "PyStemmer", "pyroaring", "zlib-ng"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def cmd_fit(a):
    from kb.runtime.confidence import MODEL_TERMS
    from kb.runtime.confidence_model import MODEL as STORED

    recs = [json.loads(x) for x in open(a.rows)]
    model = {"features": list(MODEL_TERMS), "backends": {}, "low_confidence_floor": None, "fit": {}}
    if a.keep_weights:
        if STORED["features"] != list(MODEL_TERMS):
            raise SystemExit("calibrate: --keep-weights: runtime/confidence_model.py was fitted on other terms than runtime/confidence.py's")
        model["backends"] = {b: list(w) for b, w in STORED["backends"].items()}  # those without rows here too
    report, loso = {}, {}
    for backend in BACKENDS:
        rs = [r for r in recs if r["backend"] == backend]
        if not rs:
            continue
        sets = sorted({r["set"] for r in rs})
        if a.keep_weights:  # the stored model, its floors chosen again on these rows
            if backend not in STORED["backends"]:
                raise SystemExit(f"calibrate: --keep-weights: runtime/confidence_model.py has no {backend} model")
            beta = np.asarray(STORED["backends"][backend], dtype=np.float64)
        else:
            beta = fit_rows(rs, lambda r: True, a)
        model["backends"][backend] = [round(float(b), 6) for b in beta]
        report[backend] = {}
        for s in sets + ["all"]:
            for label, keep in (("", lambda r: kind_of(r) == "own"), (" +negatives", lambda r: True)):
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
    # Negatives: the Hugo fixture's own, every set's foreign queries and its unanswerable ones. A
    # reranked search's notice reads the hybrid model's confidence in the top fused result
    # (runtime/search.py low_confidence), so hybrid+rerank has the hybrid floor and the hybrid rates.
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
        unanswerable = {s: flagged(best, True, s, "unanswerable") for s in sets}
        rates[backend]["unanswerable"] = {s: "%d/%d" % got for s, got in unanswerable.items() if got[1]}
    if "hybrid" in model["low_confidence_floor"]:
        model["low_confidence_floor"]["hybrid+rerank"] = model["low_confidence_floor"]["hybrid"]
    model["fit"] = {"command": " ".join(["python", "bench/calibrate.py", *sys.argv[1:]]), "date": time.strftime("%Y-%m-%d"), "held_out": f"{HELD_OUT}/10 of each set's queries (crc32 of source set/id)", "foreign_weight": a.foreign_weight, "unanswerable_weight": a.unanswerable_weight, "set_power": a.set_power, "ece_held_out": {b: {s: v["ece"] for s, v in r.items()} for b, r in report.items()}, "notice": rates}
    model["fit"]["packages"] = packages()  # the rows' searches depend on them: a refit elsewhere can differ
    if loso:
        model["fit"]["ece_leave_one_set_out"] = loso
    if a.keep_weights:  # this record is the floors'; the weights' own stays beside it
        for key in ("foreign_weight", "unanswerable_weight", "set_power"):
            del model["fit"][key]
        model["fit"]["weights"] = "kept from weights_fit; only the floors were chosen on these rows"
        model["fit"]["weights_fit"] = STORED["fit"].get("weights_fit", STORED["fit"])
    print(json.dumps({"floors": model["low_confidence_floor"], "notice": rates}, indent=1), file=sys.stderr)
    if a.write:
        Path(a.write).write_text(
            '"""The fitted confidence model (runtime/confidence.py). Generated by bench/calibrate.py: do not edit\n'
            'by hand; rerun it (bench/RESULTS.md, "Confidence and calibration", gives the command)."""\n\nMODEL = ' + json.dumps(model, indent=4) .replace("null", "None").replace("true", "True").replace("false", "False") + "\n"
        )
    if a.report:
        Path(a.report).write_text(json.dumps({**report, "leave_one_set_out": loso} if loso else report, indent=1))
    if a.plots:
        plot(report, Path(a.plots))


def _rr(row: dict, leg: str) -> float:
    rank = row.get("legs", {}).get(leg)
    return 1.0 / rank if rank else 0.0


# Query-level statistics `separation` compares: each reads a query's collected top 10 (``rows``,
# in rank order) and the stored model's confidence of each (``conf``).
SEPARATION = {
    "top result's confidence (the notice's)": lambda rows, conf: conf[0],
    "highest confidence of the top 3": lambda rows, conf: max(conf[:3]),
    "top result's mean 1/rank over the two legs": lambda rows, conf: (_rr(rows[0], "bm25") + _rr(rows[0], "vector")) / 2,
    "top result's lower 1/rank of the two legs": lambda rows, conf: min(_rr(rows[0], "bm25"), _rr(rows[0], "vector")),
    "results of the top 10 in both legs' top 10": lambda rows, conf: sum(1 for r in rows if r.get("legs", {}).get("bm25", 99) <= 10 and r.get("legs", {}).get("vector", 99) <= 10),
    "top cosine": lambda rows, conf: rows[0]["features"]["top_cos"],
    "BM25 top over its ceiling": lambda rows, conf: rows[0]["features"]["top_bm25n"],
}


def roc_auc(positive, negative) -> float:
    """P(a positive scores above a negative), ties counting half; nan without both."""
    p, n = np.asarray(positive, dtype=np.float64), np.asarray(negative, dtype=np.float64)
    if not len(p) or not len(n):
        return float("nan")
    return float((p[:, None] > n[None, :]).mean() + 0.5 * (p[:, None] == n[None, :]).mean())


def cmd_separation(a):
    """How well each SEPARATION statistic tells a set's answerable queries from its in-domain
    negatives (Hugo's hand-written ones and every set's unanswerable queries) and from its
    foreign ones, as ROC AUC, on rows `collect` wrote (with the legs' ranks: collected since
    2026-12-02) under the stored confidence model; markdown on stdout."""
    from kb.runtime.confidence import predict

    recs = [r for r in (json.loads(x) for x in open(a.rows)) if r["backend"] == a.backend]
    sets = [s for s in SETS if any(r["set"] == s for r in recs)]
    scored = {s: [] for s in sets}
    for r in recs:
        if r["rows"]:
            conf = predict(a.backend, np.array([features_of(row) for row in r["rows"]]))
            stats = {name: float(f(r["rows"], conf)) for name, f in SEPARATION.items()}
        else:  # nothing matched: the lowest value of every statistic (the notice fires on it too)
            stats = dict.fromkeys(SEPARATION, 0.0)
        scored[r["set"]].append((kind_of(r) if r["negative"] else "answerable", stats))
    counts = {s: sum(1 for k, _ in scored[s] if k in ("own", "unanswerable")) for s in sets}
    print(f"| statistic | {' | '.join(f'{s} ({counts[s]} neg.)' for s in sets)} | foreign, range over sets |")
    print("|---" * (len(sets) + 2) + "|")
    for name in SEPARATION:
        cells, foreign = [], []
        for s in sets:
            pos = [st[name] for k, st in scored[s] if k == "answerable"]
            cells.append(f"{roc_auc(pos, [st[name] for k, st in scored[s] if k in ('own', 'unanswerable')]):.3f}")
            foreign.append(roc_auc(pos, [st[name] for k, st in scored[s] if k == "foreign"]))
        f = [x for x in foreign if x == x]
        print(f"| {name} | {' | '.join(cells)} | {f'{min(f):.3f}-{max(f):.3f}' if f else '-'} |")
    notice = next(iter(SEPARATION))
    for s in sets:  # the hand-written negatives alone (the Hugo fixture's): what the goal counts
        own = [st[notice] for k, st in scored[s] if k == "own"]
        if own:
            print(f"\n{s}, its {len(own)} own negatives alone: {roc_auc([st[notice] for k, st in scored[s] if k == 'answerable'], own):.3f} ({notice})")


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
            p.add_argument("--limit", type=int, default=LIMIT, help="at most this many queries of a set (chosen by crc32 of their ids)")
            p.add_argument("--foreign", type=int, default=20, help="negatives: this many queries of each other set, run against the set's artifact")
            p.add_argument("--unanswerable", action="store_true", help="negatives: also the set's queries listed in DIR/NAME-minus.json, on DIR/NAME-minus.kb (calibrate.py unanswerable)")
        if name == "compare":
            p.add_argument("--limit", type=int, default=0, help="at most this many queries of a set (chosen by crc32 of their ids; 0: all)")
            p.add_argument("--default-only", action="store_true", help="only kb's defaults (adaptive fusion), not fixed weights as well")
        if name in ("collect", "compare"):
            p.add_argument("--backends", default=",".join(BACKENDS) if name == "collect" else "hybrid,hybrid+rerank")
    p = sub.add_parser("unanswerable")
    p.add_argument("--art", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--fixtures", type=Path, required=True)
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--count", type=int, default=60, help="at most this many queries a set made unanswerable")
    p = sub.add_parser("fit")
    p.add_argument("--rows", required=True)
    p.add_argument("--write")
    p.add_argument("--report")
    p.add_argument("--plots")
    p.add_argument("--foreign-weight", type=float, default=0.2, help="the share of each set's weight its foreign negatives get")
    p.add_argument("--unanswerable-weight", type=float, default=0.0, help="the share of each set's weight its unanswerable queries get (collect --unanswerable; a set without any: its other parts share it)")
    p.add_argument("--set-power", type=float, default=0.0, help="each set weighs (its queries) ** this: 0 = all sets alike, 1 = every query alike")
    p.add_argument("--loso", action="store_true", help="also report each set's ECE under a model fitted without it (leave one set out)")
    p.add_argument("--keep-weights", action="store_true", help="keep runtime/confidence_model.py's weights: report them and choose only the floors on these rows")
    p = sub.add_parser("separation")
    p.add_argument("--rows", required=True)
    p.add_argument("--backend", default="hybrid", choices=BACKENDS)
    a = ap.parse_args(argv)
    {"grid": cmd_grid, "collect": cmd_collect, "compare": cmd_compare, "fit": cmd_fit, "unanswerable": cmd_unanswerable, "separation": cmd_separation}[a.cmd](a)


if __name__ == "__main__":
    main()
