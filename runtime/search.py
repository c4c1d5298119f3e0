"""Hybrid search: filters -> legs -> RRF fusion -> optional rerank -> results.

One linear pipeline, no fallbacks that change meaning: an empty result is an empty result.

- Filters (status, tag, path prefix) become one boolean mask over chunk ids *before* any leg
  ranks, so every leg draws its candidates from the allowed set only.
- Legs: BM25 and dense for the query (weights 1 - semantic_weight and semantic_weight), the same
  two for each ``--rewrite`` (scaled by rewrite_weight), and a tag leg for ``--entity`` values.
- Fusion: weighted RRF (runtime/fusion.py). Rerank: the top ``rerank_top`` fused candidates are
  rescored by the cross-encoder and blended; the rest keep their fused order after them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace

import numpy as np

from . import fusion as F
from .bm25 import analyzer_of, query_terms, top_bm25

SCHEMA_VERSION = 1
MODES = ("hybrid", "bm25", "vector")
BLENDS = ("position", "sigmoid")
LEG_DEPTH = 50  # candidates each leg contributes to fusion (at least top_k)
RERANK_BATCH = 8  # pairs per cross-encoder call: 4-8 are fastest on few CPU cores
EXACT_VECTOR_MAX = 4096  # a filtered subset this small is scanned exactly, not through HNSW
LOW_CONFIDENCE_FLOOR = {"rerank": 0.3, "cosine": 0.3}  # per signal; see notices()
SNIPPET_CHARS = 240
# Scripts an embedding model was trained on, by model name. A dense leg on a script the model
# never saw ranks noise (all-MiniLM-L6-v2 on CMRC2018-zh: nDCG@10 0.10 against BM25's 0.98,
# and it dragged hybrid to 0.73), so such queries skip the dense legs, with a notice.
EMBEDDER_SCRIPTS = {"all-MiniLM-L6-v2": ("latin",)}


class SearchError(Exception):
    """Bad search input (exit 2)."""


@dataclass(frozen=True)
class SearchOptions:
    """Ranking knobs: defaults here, overridden by kb.toml [search] (stored in the artifact), then flags."""

    default_limit: int = 10
    semantic_weight: float = F.SEMANTIC_WEIGHT
    rrf_k: float = F.RRF_K
    rank1_bonus: float = F.RANK1_BONUS
    rank23_bonus: float = F.RANK23_BONUS
    rewrite_weight: float = F.REWRITE_WEIGHT
    tag_weight: float = F.TAG_WEIGHT
    # Off by default: kb's shipped cross-encoder (models/reranker/MODEL_CARD.md) did not improve
    # nDCG@10 on the sets it did not train on (bench/RESULTS.md, "rerank"). `--rerank` or
    # [search] rerank = true turns it on; an artifact with a better model can ship it on.
    rerank: bool = False
    rerank_top: int = 40
    rerank_passage_tokens: int = 192  # each candidate's passage is cut to this many tokens before pairing (cost)
    rerank_weight: float = F.RERANK_WEIGHT
    blend: str = "position"
    low_confidence_floor: float | None = None  # overrides the per-signal floors when set

    @classmethod
    def from_config(cls, search: dict, **overrides) -> "SearchOptions":
        known = {k: v for k, v in (search or {}).items() if k in cls.__dataclass_fields__}
        known.update({k: v for k, v in overrides.items() if v is not None})
        opts = cls(**known)
        opts.validate()
        return opts

    def validate(self):
        if not 0.0 <= self.semantic_weight <= 1.0:
            raise SearchError(f"semantic_weight must be within 0..1, got {self.semantic_weight}")
        if self.rrf_k < 0:
            raise SearchError(f"rrf_k must be >= 0, got {self.rrf_k}")
        if not 0.0 <= self.rerank_weight <= 1.0:
            raise SearchError(f"rerank_weight must be within 0..1, got {self.rerank_weight}")
        if self.blend not in BLENDS:
            raise SearchError(f"blend must be one of {', '.join(BLENDS)}, got {self.blend!r}")
        if self.rerank_top < 0 or self.default_limit < 1:
            raise SearchError("rerank_top must be >= 0 and default_limit >= 1")


@dataclass(frozen=True)
class Query:
    text: str = ""
    rewrites: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    top_k: int | None = None
    statuses: tuple[str, ...] = ()  # empty = the default set (all but the excluded statuses)
    all_statuses: bool = False
    tags: tuple[str, ...] = ()
    path: str | None = None
    mode: str = "hybrid"
    rerank: bool | None = None  # None = options.rerank
    rerank_top: int | None = None
    budget_ms: float | None = None  # shrink the rerank depth to fit this many milliseconds
    explain: bool = False
    group: str = "chunk"
    full: bool = False


@dataclass
class Response:
    query: Query
    results: list[dict]
    notices: list[dict]
    tag_contexts: dict
    reranked: bool
    timings_ms: dict = field(default_factory=dict)
    rerank: dict | None = None  # model, scored, skipped (by --budget-ms)


class Searcher:
    """Holds an open Index and lazily loaded models; safe to reuse for many queries."""

    def __init__(self, index, options: SearchOptions | None = None, device: str = "auto", compute_type: str = "auto", reranker=None):
        self.ix = index
        self.options = options or SearchOptions.from_config(index.meta.get("search", {}))
        self.device, self.compute_type = device, compute_type
        self._embedder = None
        self._reranker = reranker

    # --- models --------------------------------------------------------------------------------
    @property
    def embedder(self):
        if self._embedder is None:
            from .embed import load_embedder

            self._embedder = load_embedder(self.ix.model_files(), self.device, self.compute_type)
        return self._embedder

    def reranker(self):
        """The cross-encoder: given to the Searcher, else the artifact's, else None."""
        if self._reranker is None and self.ix.has_reranker:
            from .rerank import load_reranker

            self._reranker = load_reranker(self.ix.model_files("model.rerank"), self.device, self.compute_type)
        return self._reranker

    # --- filters -------------------------------------------------------------------------------
    def allowed_mask(self, q: Query) -> np.ndarray:
        ix = self.ix
        known = ix.meta["statuses"]
        if q.all_statuses:
            wanted = list(known)
        elif q.statuses:
            unknown = [s for s in q.statuses if s not in known]
            if unknown:
                raise SearchError(f"unknown status {unknown[0]!r}; this artifact has: {', '.join(known)}")
            wanted = list(q.statuses)
        else:
            wanted = [s for s in known if s not in ix.meta["excluded_statuses"]]
        mask = np.zeros(ix.n_chunks, dtype=bool)
        codes = ix.chunks["status"]
        for s in wanted:
            mask |= codes == known.index(s)
        for t in q.tags:
            bm = ix.tag_bitmap(t.casefold())
            tag_mask = np.zeros(ix.n_chunks, dtype=bool)
            if len(bm):
                tag_mask[np.frombuffer(bm.to_array(), dtype=np.uint32)] = True
            mask &= tag_mask
        if q.path:
            a, b = ix.path_range(q.path)
            window = np.zeros(ix.n_chunks, dtype=bool)
            window[a:b] = True
            mask &= window
        return mask

    # --- legs ----------------------------------------------------------------------------------
    def bm25_leg(self, name: str, text: str, weight: float, depth: int, allowed) -> F.Leg:
        ids, scores = top_bm25(self.ix, query_terms(self.ix, text), depth, allowed)
        return F.leg_from_ranking(name, "bm25", weight, ids, scores)

    def vector_leg(self, name: str, text: str, weight: float, depth: int, allowed) -> F.Leg:
        qv = self.embedder.embed_query(text)
        ids, sims = top_vector(self.ix, qv, depth, allowed)
        return F.leg_from_ranking(name, "cosine", weight, ids, sims)

    def tag_leg(self, entities: tuple[str, ...], weight: float, depth: int, allowed, tiebreak: dict[int, float]) -> F.Leg | None:
        """Chunks ranked by how many entities match one of their tags; ties by the text legs' fused score."""
        names = self.ix.meta["tags"]["names"]
        norm = {_tag_key(n): n for n in names}
        matched = [norm[_tag_key(e)] for e in dict.fromkeys(entities) if _tag_key(e) in norm]
        if not matched:
            return F.Leg("tag", "tag", weight, ())
        counts = np.zeros(self.ix.n_chunks, dtype=np.int32)
        for t in matched:
            bm = self.ix.tag_bitmap(t)
            counts[np.frombuffer(bm.to_array(), dtype=np.uint32)] += 1
        counts[~allowed] = 0
        ids = np.flatnonzero(counts)
        order = sorted(ids.tolist(), key=lambda c: (-counts[c], -tiebreak.get(c, 0.0), c))[:depth]
        return F.leg_from_ranking("tag", "tag", weight, order, [float(counts[c]) for c in order])

    # --- the pipeline --------------------------------------------------------------------------
    def search(self, q: Query) -> Response:
        o = self.options
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        top_k = self._validate(q)
        notices: list[dict] = []
        use_bm25, use_vectors = self._legs_to_run(q, notices)
        allowed = self.allowed_mask(q)
        timings["filter"] = _ms(t0)
        legs = self._run_legs(q, allowed, top_k, use_bm25, use_vectors, notices, timings) if allowed.any() else []
        items = _fused_items(F.fuse_rrf(legs, self._fusion_params()), legs)

        rerank_info = None
        if (o.rerank if q.rerank is None else q.rerank) and q.mode == "hybrid":
            if self.reranker() is None:
                if q.rerank:  # asked for explicitly: say why it did not happen
                    notices.append({"kind": "no_reranker", "message": "no reranker in this artifact (built with --no-reranker?); results are in fused order"})
            elif items:
                t = time.perf_counter()
                rerank_info = self._rerank(q, items)
                timings["rerank"] = _ms(t)
        if q.group == "doc":
            items = _group_by_doc(self.ix, items)
        items = items[:top_k]
        t = time.perf_counter()
        hit_terms = query_terms(self.ix, " ".join((q.text,) + q.rewrites))  # once, for every snippet
        results = [self._result(i + 1, it, q, hit_terms) for i, it in enumerate(items)]
        timings["render"] = _ms(t)
        notices.extend(low_confidence(q, items, top_k, o))
        descr = self.ix.meta["tags"]["descriptions"]
        contexts = {t: descr.get(t, "") for t in sorted({t for r in results for t in r["tags"]})}
        timings["total"] = _ms(t0)
        reranked = rerank_info is not None and rerank_info["scored"] > 0
        return Response(q, results, notices, contexts, reranked, timings, rerank_info)

    def _validate(self, q: Query) -> int:
        """Check the inputs; returns the effective top_k."""
        if q.mode not in MODES:
            raise SearchError(f"mode must be one of {', '.join(MODES)}, got {q.mode!r}")
        if not q.text.strip() and not q.entities and not any(r.strip() for r in q.rewrites):
            raise SearchError("give a query (or --entity/--rewrite); to list a scope use kb list")
        top_k = q.top_k if q.top_k is not None else self.options.default_limit
        if top_k < 1:
            raise SearchError(f"--top-k must be at least 1, got {top_k}")
        if q.group not in ("chunk", "doc"):
            raise SearchError(f"group must be chunk or doc, got {q.group!r}")
        if q.mode == "vector" and not self.ix.has_vectors:
            raise SearchError("this artifact has no vectors (built with --embedder none); use --mode bm25")
        return top_k

    def _legs_to_run(self, q: Query, notices: list[dict]) -> tuple[bool, bool]:
        """(BM25 legs?, dense legs?) for this query and artifact, with a notice for what is skipped."""
        use_bm25 = q.mode in ("hybrid", "bm25")
        use_vectors = q.mode in ("hybrid", "vector") and self.ix.has_vectors
        if q.mode == "hybrid" and not self.ix.has_vectors:
            notices.append({"kind": "no_vectors", "message": "artifact has no vectors; hybrid search used BM25 only"})
        if use_vectors and q.mode == "hybrid" and not self._embedder_covers(" ".join((q.text,) + q.rewrites)):
            use_vectors = False
            name = (self.ix.meta.get("embedder") or {}).get("name")
            notices.append({"kind": "dense_skipped", "message": f"the embedding model {name} does not cover this query's script (CJK); hybrid search used BM25 only"})
        return use_bm25, use_vectors

    def _fusion_params(self) -> F.FusionParams:
        o = self.options
        return F.FusionParams(o.rrf_k, o.rank1_bonus, o.rank23_bonus)

    def _run_legs(self, q: Query, allowed, top_k: int, use_bm25: bool, use_vectors: bool, notices: list[dict], timings: dict) -> list[F.Leg]:
        """BM25 and dense legs for the query and each rewrite, then the tag leg for entities."""
        o = self.options
        depth = max(LEG_DEPTH, top_k, (q.rerank_top if q.rerank_top is not None else o.rerank_top))
        w_dense = o.semantic_weight if q.mode == "hybrid" else 1.0
        w_lex = 1.0 - o.semantic_weight if q.mode == "hybrid" else 1.0
        texts = [("", q.text, 1.0)] if q.text.strip() else []
        texts += [(f":rewrite{i + 1}", r, o.rewrite_weight) for i, r in enumerate(q.rewrites) if r.strip()]
        legs: list[F.Leg] = []
        for suffix, text, scale in texts:
            if use_bm25 and w_lex > 0:
                t = time.perf_counter()
                legs.append(self.bm25_leg("bm25" + suffix, text, w_lex * scale, depth, allowed))
                timings["bm25"] = timings.get("bm25", 0.0) + _ms(t)
            if use_vectors and w_dense > 0:
                t = time.perf_counter()
                legs.append(self.vector_leg("vector" + suffix, text, w_dense * scale, depth, allowed))
                timings["vector"] = timings.get("vector", 0.0) + _ms(t)
        if q.entities:
            tiebreak = {f.chunk: f.score for f in F.fuse_rrf(legs, self._fusion_params())} if legs else {}
            tag = self.tag_leg(q.entities, o.tag_weight, depth, allowed, tiebreak)
            if not tag.hits:
                notices.append({"kind": "no_tag_match", "message": f"no tag matches the entities {', '.join(q.entities)}"})
            legs.append(tag)
        return legs

    def _embedder_covers(self, text: str) -> bool:
        from kb.formats.analyzer import has_cjk

        name = (self.ix.meta.get("embedder") or {}).get("name")
        scripts = EMBEDDER_SCRIPTS.get(name)
        return scripts is None or "cjk" in scripts or not has_cjk(text)

    def _rerank(self, q: Query, items: list[dict]) -> dict:
        """Rescore the fused top with the cross-encoder and blend; the rest keep fused order.

        With a budget, candidates are scored in batches of RERANK_BATCH and scoring stops
        when the next batch would not fit (estimated from the batches so far); the first batch
        always runs.
        """
        rr = self.reranker()
        o = self.options
        depth = min(len(items), q.rerank_top if q.rerank_top is not None else o.rerank_top)
        info = {"model": getattr(rr, "name", "reranker"), "candidates": depth, "scored": 0, "skipped": 0, "budget_ms": q.budget_ms}
        if depth == 0:
            return info
        query = q.text or " ".join(q.rewrites)
        passages = [self.ix.chunk_record(it["chunk"])["text"] for it in items[:depth]]
        logits: list[float] = []
        t0 = time.perf_counter()
        for start in range(0, depth, RERANK_BATCH):
            spent = (time.perf_counter() - t0) * 1000
            if q.budget_ms is not None and start and spent + spent / start * RERANK_BATCH > q.budget_ms:
                break
            batch = passages[start : start + RERANK_BATCH]
            logits.extend(float(x) for x in rr.score(query, batch, passage_tokens=o.rerank_passage_tokens))
        n = len(logits)
        info.update(scored=n, skipped=depth - n)
        head = items[:n]
        probs = [F.sigmoid(x) for x in logits]
        fused_scores = [it["fused"].score for it in head]
        if self.options.blend == "position":
            blended = F.blend_position_aware(fused_scores, probs)
        else:
            blended = F.blend_sigmoid(fused_scores, probs, self.options.rerank_weight)
        for it, lg, pr, (final, w) in zip(head, logits, probs, blended):
            it.update(score=final, score_kind="rerank", rerank={"logit": lg, "probability": pr, "retrieval_weight": w, "rerank_weight": 1.0 - w})
        head.sort(key=lambda it: (-it["score"], it["chunk"]))
        items[:n] = head
        return info

    def _result(self, rank: int, it: dict, q: Query, hit_terms: list[str]) -> dict:
        rec = self.ix.chunk_record(it["chunk"])
        out = {
            "rank": rank,
            "score": round(float(it["score"]), 6),
            "score_kind": it["score_kind"],
            "path": rec["path"],
            "section": rec["section"],
            "lines": rec["lines"],
            "status": rec["status"],
            "tags": rec["tags"],
            "chunk_id": rec["chunk_id"],
            "doc_id": rec["doc_id"],
            "title": rec["title"],
        }
        if q.full:
            out["text"] = rec["text"]
        else:
            out["snippet"] = snippet(rec["text"], hit_terms, analyzer_of(self.ix))
        if "also_matched" in it:
            out["also_matched"] = it["also_matched"]
        if q.explain:
            f: F.Fused = it["fused"]
            out["explain"] = {
                "legs": {name: {"rank": r, "raw_score": round(s, 6), "rrf": round(part, 6)} for name, (r, s, part) in sorted(f.contributions.items())},
                "bonus": f.bonus,
                "rrf": round(f.score, 6),
                "rerank": it.get("rerank"),
            }
        return out


def _fused_items(fused: list[F.Fused], legs: list[F.Leg]) -> list[dict]:
    """Fused candidates as result items. With a single BM25 or dense leg the score is that
    leg's raw score (score_kind bm25 or cosine); otherwise it is the RRF score."""
    single = [lg for lg in legs if lg.hits]
    kind = single[0].kind if len(single) == 1 and single[0].kind in ("bm25", "cosine") else "rrf"
    return [
        {"chunk": f.chunk, "score": f.contributions[single[0].name][1] if kind != "rrf" else f.score, "score_kind": kind, "fused": f}
        for f in fused
    ]


def _tag_key(s: str) -> str:
    return re.sub(r"[\s_\-]+", "-", s.strip().casefold())


def _ms(t: float) -> float:
    return round((time.perf_counter() - t) * 1000, 3)


def top_vector(ix, qv: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` chunks by cosine among ``allowed``: exact over a small subset, else HNSW with
    the search widened until ``k`` allowed hits are found (or the index is exhausted)."""
    n_allowed = int(allowed.sum())
    if n_allowed == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    index = ix.vectors
    if n_allowed <= EXACT_VECTOR_MAX and n_allowed < ix.n_chunks:
        ids = np.flatnonzero(allowed)
        vecs = np.asarray(index.get(ids.astype(np.uint64)), dtype=np.float32).reshape(len(ids), -1)
        norms = np.linalg.norm(vecs, axis=1)
        sims = vecs @ qv.astype(np.float32) / np.maximum(norms, 1e-12)
        order = np.lexsort((ids, -sims))[:k]
        return ids[order], sims[order].astype(np.float64)
    count = min(ix.n_chunks, max(k, int(k * ix.n_chunks / n_allowed * 1.5)))
    while True:
        m = index.search(qv, count)
        keys = np.asarray(m.keys, dtype=np.int64)
        sims = 1.0 - np.asarray(m.distances, dtype=np.float64)
        keep = allowed[keys]
        if keep.sum() >= k or count >= ix.n_chunks:
            keys, sims = keys[keep], sims[keep]
            order = np.lexsort((keys, -sims))[:k]
            return keys[order], sims[order]
        count = min(ix.n_chunks, count * 4)


def _group_by_doc(ix, items: list[dict]) -> list[dict]:
    docs = ix.chunks["doc"]
    best: dict[int, dict] = {}
    order = []
    for it in items:
        d = int(docs[it["chunk"]])
        if d in best:
            best[d]["also_matched"] += 1
        else:
            best[d] = dict(it, also_matched=0)
            order.append(d)
    return [best[d] for d in order]


def snippet(text: str, terms: list[str], analyzer, width: int = SNIPPET_CHARS) -> str:
    """The line with the most query terms (first line if none), cut to ``width`` around the
    first hit; lines are analyzed with the artifact's analyzer, as the query was."""
    lines = [ln.strip() for ln in text.split("\n") if ln.strip() and not ln.strip().startswith("```")]
    prose = [ln for ln in lines if not re.match(r"#{1,6}\s", ln)]  # headings are already in the section path
    lines = prose or lines
    if not lines:
        return ""
    want = set(terms)
    best = max(range(len(lines)), key=lambda i: (sum(t in want for t in set(analyzer.terms(lines[i]))), -i)) if want else 0
    line = lines[best]
    if len(line) <= width:
        return line
    low = line.casefold()
    pos = min((low.find(t) for t in want if low.find(t) >= 0), default=0)
    start = max(0, min(pos - width // 4, len(line) - width))
    cut = line[start : start + width]
    return ("…" if start else "") + cut + ("…" if start + width < len(line) else "")


def low_confidence(q: Query, items: list[dict], top_k: int, o: SearchOptions) -> list[dict]:
    """Warn (never suppress) when the top result is weak or fewer than top_k came back.

    The signal depends on what the top result carries: a reranked result's probability
    (floor 0.3, the seed's floor), else the dense leg's cosine for the top chunk (floor 0.3),
    else none (BM25 and RRF scores have no absolute scale). ``[search] low_confidence_floor``
    overrides both floors.
    """
    what = q.text or " ".join(q.rewrites + q.entities)
    msg = (
        f'Low confidence results: no strong match found for "{what}". Consider a broader query, '
        "rebuilding the index if it is stale, or checking whether the topic is documented at all."
    )
    if not items:
        return [{"kind": "low_confidence", "reason": "no results", "message": msg}]
    reasons = []
    top = items[0]
    signal, value = None, None
    if "rerank" in top:
        signal, value = "rerank", top["rerank"]["probability"]
    elif "vector" in top["fused"].contributions:
        signal, value = "cosine", top["fused"].contributions["vector"][1]
    if signal is not None:
        floor = o.low_confidence_floor if o.low_confidence_floor is not None else LOW_CONFIDENCE_FLOOR[signal]
        if value < floor:
            reasons.append(f"top result's {signal} {value:.3f} is below the floor {floor}")
    if len(items) < top_k:
        reasons.append(f"only {len(items)} of {top_k} results")
    return [{"kind": "low_confidence", "reason": "; ".join(reasons), "message": msg}] if reasons else []
