"""``kb bench``: retrieval quality and latency per backend on a query fixture or a BEIR split.

Backends: bm25, vector, hybrid (no rerank) and hybrid+rerank (when a reranker is available).
Each query is searched in-process on a warm Searcher with results grouped by document
(``--group doc``), since judgments are per document (fixture paths, BEIR corpus ids).

Metrics, all at document level (one formula each, below): P@k, recall@10 and @100, MRR@10,
nDCG@10 with graded gains (BEIR qrels scores; fixtures count 1 per relevant path), hit@10, and
latency p50/p95 of the search a user runs: a whole top-k call (``-k``, default 10, results by
chunk with snippets), timed apart from the depth-100 quality call (``quality_call_ms``), so that
latency compares with peers at the same depth. Negative queries (no relevant document) are left out
of the quality means; for them, and for the others, the report gives how often the
low-confidence notice fired, and the no_match notice (negatives / answerable).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kb.common.errors import UsageError
from kb.common.options import SearchOptions

from .search import Query, Searcher

DEPTH = 100  # documents retrieved per query (recall@100)


class BenchError(UsageError):
    pass


@dataclass(frozen=True)
class BenchQuery:
    id: str
    text: str
    relevant: dict  # doc key (path or doc id) -> graded gain (> 0)
    kind: str = "all"


@dataclass
class BenchSet:
    name: str
    key: str  # "path" (fixtures) or "doc_id" (BEIR)
    queries: list[BenchQuery] = field(default_factory=list)


def load_fixture(path: Path) -> BenchSet:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        qs = [BenchQuery(str(q["id"]), q["query"], {p: 1 for p in q.get("relevant", [])}, q.get("kind", "all")) for q in data["queries"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BenchError(f"{path}: not a query fixture ({e.__class__.__name__}: {e})") from None
    return BenchSet(Path(path).stem, "path", qs)


def load_beir(folder: Path, split: str) -> BenchSet:
    folder = Path(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    try:
        texts = {}
        for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                q = json.loads(line)
                texts[str(q["_id"])] = q["text"]
        rel: dict[str, dict] = {}
        for i, line in enumerate(qrels_path.read_text(encoding="utf-8").splitlines()):
            parts = line.split("\t")
            if i == 0 and not parts[-1].strip().lstrip("-").isdigit():
                continue  # header
            if len(parts) < 3:
                continue
            qid, did, score = parts[0], parts[1], int(parts[2])
            if score > 0:
                rel.setdefault(qid, {})[did] = score
            else:
                rel.setdefault(qid, {})
    except (OSError, ValueError, KeyError) as e:
        raise BenchError(f"{folder}: not a BEIR folder with split {split!r} ({e.__class__.__name__}: {e})") from None
    qs = [BenchQuery(qid, texts[qid], r) for qid, r in rel.items() if qid in texts and r]
    if not qs:
        raise BenchError(f"{qrels_path}: no judged queries with text")
    return BenchSet(folder.name, "doc_id", qs)


# --- metrics: one small function each; ``ranked`` is the list of document keys in rank order ---


def precision_at(ranked: list, rel: dict, k: int) -> float:
    return sum(1 for d in ranked[:k] if d in rel) / k


def recall_at(ranked: list, rel: dict, k: int) -> float:
    return sum(1 for d in ranked[:k] if d in rel) / len(rel)


def mrr_at(ranked: list, rel: dict, k: int = 10) -> float:
    for i, d in enumerate(ranked[:k]):
        if d in rel:
            return 1.0 / (i + 1)
    return 0.0


def hit_at(ranked: list, rel: dict, k: int = 10) -> float:
    return 1.0 if any(d in rel for d in ranked[:k]) else 0.0


def ndcg_at(ranked: list, rel: dict, k: int = 10) -> float:
    """nDCG with linear gains (the graded score), log2 discount, as BEIR / pytrec_eval compute it."""
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def calibration(conf, rel, bins: int = 10) -> dict:
    """Expected calibration error over ``bins`` equal-width confidence bins, and the bins as
    [mean confidence, fraction relevant, count] (empty bins left out)."""
    conf, rel = np.asarray(conf, dtype=np.float64), np.asarray(rel, dtype=np.float64)
    if not len(conf):
        return {"ece": None, "bins": []}
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    out, total = [], 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            out.append([round(float(conf[m].mean()), 4), round(float(rel[m].mean()), 4), int(m.sum())])
            total += m.sum() / len(conf) * abs(conf[m].mean() - rel[m].mean())
    return {"ece": round(float(total), 4), "bins": out}


def query_metrics(ranked: list, rel: dict, k: int) -> dict:
    return {
        "ndcg@10": ndcg_at(ranked, rel, 10),
        "mrr@10": mrr_at(ranked, rel, 10),
        f"p@{k}": precision_at(ranked, rel, k),
        "recall@10": recall_at(ranked, rel, 10),
        "recall@100": recall_at(ranked, rel, 100),
        "hit@10": hit_at(ranked, rel, 10),
    }


def _mean(rows: list[dict]) -> dict:
    if not rows:
        return {}
    return {m: round(float(np.mean([r[m] for r in rows])), 4) for m in rows[0]}


BACKENDS = {  # backend -> (mode, rerank)
    "bm25": ("bm25", False),
    "vector": ("vector", False),
    "hybrid": ("hybrid", False),
    "hybrid+rerank": ("hybrid", True),
}


def run_bench(searcher: Searcher, bset: BenchSet, k: int = 10, backends: list[str] | None = None, progress=None, options: SearchOptions | None = None, timed: bool = True) -> dict:
    """Quality and latency of each backend on ``bset``, with ``options`` (default: the artifact's)
    apart from the mode and rerank each backend sets. ``timed=False``: quality only (no top-k
    call per query; latencies are None)."""
    ix = searcher.ix
    names = backends or [b for b in BACKENDS if b != "hybrid+rerank" or searcher.reranker() is not None]
    if not ix.has_vectors:
        names = [b for b in names if b == "bm25"]
    out = {"backends": {}, "queries": len(bset.queries), "set": bset.name, "k": k}
    negatives = [q for q in bset.queries if not q.relevant]
    out["negatives"] = len(negatives)
    for name in names:
        mode, rerank = BACKENDS[name]
        opts = (options or searcher.defaults)._replace(rerank=rerank)
        per_kind: dict[str, list[dict]] = {}
        rows, lat, deep = [], [], []
        fired = {"negative": 0, "positive": 0}
        no_match = {"negative": 0, "positive": 0}
        conf, judged = [], []  # the top 10 results of every query: confidence, relevant?
        for i, q in enumerate(bset.queries):
            if not q.text.strip():  # an empty query (a few exist in the sets) retrieves nothing: scored as such
                results, notices = [], []
            else:
                # literal: benchmark queries are natural language, not written in kb's query syntax
                query = Query(q.text, top_k=DEPTH, group="doc", all_statuses=True, mode=mode, literal=True)
                t = time.perf_counter()
                resp = searcher.search(query, opts)
                deep.append((time.perf_counter() - t) * 1000)
                results, notices = resp.results, resp.notices
                if timed:
                    t = time.perf_counter()
                    searcher.search(Query(q.text, top_k=k, all_statuses=True, mode=mode, literal=True), opts)
                    lat.append((time.perf_counter() - t) * 1000)
            # the notice as kb search gives it: the top result below the floor, or no result at all;
            # and no_match (no query word in the index, nothing near in meaning)
            low = any(n.kind == "low_confidence" for n in notices)
            unmatched = any(n.kind == "no_match" for n in notices)
            for r in results[:10]:
                conf.append(r.confidence)
                judged.append(q.relevant.get(getattr(r, bset.key), 0) > 0)
            side = "positive" if q.relevant else "negative"
            fired[side] += low
            no_match[side] += unmatched
            if not q.relevant:
                continue
            ranked = [getattr(r, bset.key) for r in results]
            m = query_metrics(ranked, q.relevant, k)
            rows.append(m)
            per_kind.setdefault(q.kind, []).append(m)
            if progress:
                progress(name, i + 1, len(bset.queries))
        positives = len(bset.queries) - len(negatives)
        out["backends"][name] = {
            **_mean(rows),
            "latency_ms": _percentiles(lat),
            "quality_call_ms": _percentiles(deep),
            "by_kind": {kind: {**_mean(r), "queries": len(r)} for kind, r in sorted(per_kind.items())} if len(per_kind) > 1 else {},
            "low_confidence": {
                "negatives_flagged": f"{fired['negative']}/{len(negatives)}",
                "positives_flagged": f"{fired['positive']}/{positives}",
                "no_match": f"{no_match['negative']}/{len(negatives)} / {no_match['positive']}/{positives}",
            },
            "calibration": calibration(conf, judged),
        }
    return out


def parse_sweep(spec: str) -> tuple[str, list]:
    """``KNOB=START:STOP:STEP`` (STOP included) or ``KNOB=V1,V2,...``: a numeric search option
    and the values to try, each checked as kb.toml's [search] would check it."""
    from kb.common.options import SETTINGS
    from kb.common.settings import check

    name, sep, values = spec.partition("=")
    s = SETTINGS.get(name.strip())
    if not sep or s is None or s.kind not in (int, float) or not s.flag:
        numeric = ", ".join(n for n, x in SETTINGS.items() if x.kind in (int, float) and x.flag)
        raise UsageError(f"--sweep {spec!r}: give KNOB=START:STOP:STEP or KNOB=V1,V2,... with KNOB one of {numeric}")
    try:
        if ":" in values:
            start, stop, step = (float(x) for x in values.split(":"))
            if not step > 0 or stop < start or (stop - start) / step > MAX_SWEEP:
                raise ValueError
            vals = [round(start + i * step, 10) for i in range(int(math.floor((stop - start) / step + 1e-9)) + 1)]
        else:
            vals = [float(x) for x in values.split(",")]
        vals = [check(s, int(v) if s.kind is int and float(v).is_integer() else v) for v in vals]
    except ValueError as e:
        detail = f": {s.name} {e}" if str(e) else ""
        raise UsageError(f"--sweep {spec!r}: not a range START:STOP:STEP (STEP > 0, at most {MAX_SWEEP} values) or a list of values{detail}") from None
    if not vals or len(vals) > MAX_SWEEP:
        raise UsageError(f"--sweep {spec!r}: give 1 to {MAX_SWEEP} values")
    return s.name, vals


MAX_SWEEP = 101  # values one --sweep tries (each is one quality pass over the queries)
SWEEP_BACKEND = "hybrid"


def run_sweep(searcher: Searcher, bset: BenchSet, name: str, values: list, options_for_value) -> dict:
    """Hybrid nDCG@10 on ``bset`` for each value of the search option ``name`` (options from
    ``options_for_value(value)``), the best in hindsight, and the default's (``options_for_value(None)``)."""

    def ndcg(o: SearchOptions) -> float:
        return run_bench(searcher, bset, 10, [SWEEP_BACKEND], options=o, timed=False)["backends"][SWEEP_BACKEND]["ndcg@10"]

    rows = [{"value": v, "ndcg@10": ndcg(options_for_value(v))} for v in values]
    best = max(rows, key=lambda r: r["ndcg@10"])  # the first of equals: the smallest value given first
    default = options_for_value(None)
    return {"setting": name, "backend": SWEEP_BACKEND, "values": rows, "best": best, "default": {"value": getattr(default, name), "ndcg@10": ndcg(default)}}


def render_sweep(sw: dict) -> str:
    name, best, default = sw["setting"], sw["best"], sw["default"]
    lines = [f"{sw['backend']} nDCG@10 by {name}:", "", f"| {name} | ndcg@10 |", "|---|---|"]
    lines += [f"| {r['value']:g} | {r['ndcg@10']:.4f} |" for r in sw["values"]]
    what = "by query length" if default["value"] is None else f"{default['value']:g}"
    lines += ["", f"best fixed {name} in hindsight: {best['value']:g} (nDCG@10 {best['ndcg@10']:.4f}); the default ({what}): {default['ndcg@10']:.4f} ({default['ndcg@10'] - best['ndcg@10']:+.4f})"]
    return "\n".join(lines)


def _percentiles(ms: list[float]) -> dict:
    return {"p50": round(float(np.percentile(ms, 50)), 2), "p95": round(float(np.percentile(ms, 95)), 2)} if ms else {"p50": None, "p95": None}


def render_table(res: dict) -> str:
    k = res["k"]
    cols = ["ndcg@10", "mrr@10", f"p@{k}", "recall@10", "recall@100", "hit@10"]
    lines = [f"{res['set']}: {res['queries']} queries ({res['negatives']} negative)", ""]
    lines.append("| backend | " + " | ".join(cols) + f" | top-{k} p50 ms | p95 ms | low-conf (neg / pos) | ECE |")
    lines.append("|---" * (len(cols) + 5) + "|")
    for name, b in res["backends"].items():
        vals = " | ".join(f"{b.get(c, 0):.3f}" for c in cols)
        lc = b["low_confidence"]
        ece = b["calibration"]["ece"]
        lines.append(f"| {name} | {vals} | {b['latency_ms']['p50']:.1f} | {b['latency_ms']['p95']:.1f} | {lc['negatives_flagged']} / {lc['positives_flagged']} | {'-' if ece is None else f'{ece:.3f}'} |")
    kinds = sorted({kd for b in res["backends"].values() for kd in b["by_kind"]})
    if kinds:
        lines += ["", "hit@10 / nDCG@10 by query kind:", "", "| backend | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
        for name, b in res["backends"].items():
            cells = [f"{b['by_kind'][kd]['hit@10']:.2f} / {b['by_kind'][kd]['ndcg@10']:.2f} (n={b['by_kind'][kd]['queries']})" if kd in b["by_kind"] else "-" for kd in kinds]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
