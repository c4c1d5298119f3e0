"""Calibrated confidence: for each result, an estimate of the probability that its document
answers the query, from signals the search already has.

A logistic model per backend (bm25, vector, hybrid, hybrid+rerank) over the FEATURES below,
fitted by bench/calibrate.py on kb's dev sets with a part of their queries held out, and stored
with kb's code in runtime/confidence_model.py (not per artifact: the signals are scaled the same
way for every artifact, so one model serves all). bench/calibrate.py documents the fit and
refits it; `kb bench` reports how well calibrated it is (ECE and reliability bins).

The model is fitted on English and CJK sets, on artifacts of both shipped embedders, with
queries of the other sets as negatives (bench/calibrate.py). The low-confidence notice derives
from it: a search whose top result's confidence is below the backend's fitted floor
(MODEL["low_confidence_floor"]: the highest floor under which at most 10% of every dev set's
answerable queries fall) gets the notice; ``low_confidence_floor`` in kb.toml [search] (or
--low-confidence-floor) overrides it.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .fusion import Leg, minilm_cosine

FEATURES = (
    "bias",
    "log_rank",  # ln of the result's rank (1-based)
    "cos",  # cosine between the query and this result's chunk (0 without a dense leg)
    "top_cos",  # the dense leg's top cosine: how close anything in the corpus comes
    "cos_gap",  # top cosine minus the second: a clear winner or a crowd
    "bm25n",  # this result's BM25 score over the query's ceiling (0 if not in the BM25 leg)
    "top_bm25n",  # the BM25 leg's top score over its ceiling
    "known",  # share of the query's words the index knows (a word by any of its forms)
    "both",  # 1 when the result is in both the BM25 and the dense leg
    "fused_share",  # the result's fused (or final) score over the top result's
    "rerank_p",  # sigmoid of the cross-encoder's logit (0 when not reranked)
    "cos_spread",  # the dense leg's top cosine minus its SPREAD_RANK-th: how far the best stands out
    "bm25_spread",  # the BM25 leg's top minus its 10th score, over the ceiling
    "log_qlen",  # ln(1 + the number of distinct query terms)
    "cjk",  # 1 when the query is written in a CJK script (its BM25 terms are character bigrams)
    "fused_gap",  # (first - second) / first of the fused (or final) scores: a decided ranking or a tie
    "cos_crowd",  # ln(1 + the dense hits within CROWD of the top cosine): one answer or many alike
)


# Terms the model adds to FEATURES: products of two features, and squares of the similarity
# signals. Query length times the main signals (a long query's best matches mean something else
# than a short one's: CISI's 77-term queries have dozens of relevant documents, SciFact's claims
# one or two); the script times them (a CJK query's BM25 terms are character bigrams, and its
# cosines come from another model); the ranking's decidedness and the crowd times the rank (a clear
# winner is likelier right, and the results after it likelier wrong).
PRODUCTS = (
    *(("log_qlen", f) for f in ("cos", "bm25n", "top_cos", "log_rank", "fused_share")),
    *(("cjk", f) for f in ("cos", "bm25n", "top_cos", "log_rank", "fused_share")),
    ("fused_gap", "log_rank"),
    ("cos_crowd", "log_rank"),
)
SQUARES = ("cos", "bm25n", "top_cos")
MODEL_TERMS = FEATURES + tuple(f"{a}*{b}" for a, b in PRODUCTS) + tuple(f"{f}^2" for f in SQUARES)


_LEFT = [FEATURES.index(a) for a, _ in PRODUCTS]
_RIGHT = [FEATURES.index(b) for _, b in PRODUCTS]
_SQUARE = [FEATURES.index(f) for f in SQUARES]


def expand(rows: np.ndarray) -> np.ndarray:
    """FEATURES rows -> MODEL_TERMS rows."""
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    if not len(rows):
        return np.zeros((0, len(MODEL_TERMS)))
    return np.concatenate([rows, rows[:, _LEFT] * rows[:, _RIGHT], rows[:, _SQUARE] ** 2], axis=1)


SPREAD_RANK = 50  # the rank cos_spread compares the top with: fixed, so a deeper search sees the same feature
CROWD = 0.05  # cos_crowd counts the dense hits (of the first SPREAD_RANK) this close to the top cosine


def backend_of(mode: str, reranked: bool) -> str:
    return "hybrid+rerank" if reranked else mode


def feature_rows(candidates, legs: list[Leg], cosines: list[float] | None, model: str | None = None, cjk: bool = False) -> np.ndarray:
    """One row of FEATURES per candidate, in rank order; cosines on all-MiniLM-L6-v2's scale
    (fusion.minilm_cosine: one model serves every embedder; ``model`` is the artifact's
    embedding model). ``cjk``: the query is in a CJK script."""
    bm25 = next((lg for lg in legs if lg.name == "bm25"), None)
    dense = next((lg for lg in legs if lg.name == "vector"), None)
    to_minilm = minilm_cosine(model)
    if to_minilm is not None and cosines is not None:
        cosines = [to_minilm(c) for c in cosines]
    if to_minilm is not None and dense is not None:
        dense = dense._replace(hits=tuple(h._replace(score=to_minilm(h.score)) for h in dense.hits[: SPREAD_RANK]))
    top_cos = dense.hits[0].score if dense and dense.hits else 0.0
    gap = dense.hits[0].score - dense.hits[1].score if dense and len(dense.hits) > 1 else 0.0
    ceiling = bm25.ceiling if bm25 and bm25.ceiling else 0.0
    top_bm25n = bm25.strength if bm25 else 0.0
    known = bm25.known if bm25 and bm25.known is not None else 0.0
    top_score = candidates[0].score if candidates else 0.0
    spread = dense.hits[0].score - dense.hits[min(SPREAD_RANK, len(dense.hits)) - 1].score if dense and dense.hits else 0.0
    tenth = bm25.hits[min(9, len(bm25.hits) - 1)].score if bm25 and bm25.hits else 0.0
    bm25_spread = (bm25.hits[0].score - tenth) / ceiling if bm25 and bm25.hits and ceiling else 0.0
    qlen = math.log1p(bm25.words) if bm25 and bm25.words else 0.0
    second = candidates[1].score if len(candidates) > 1 else 0.0
    fused_gap = (top_score - second) / top_score if top_score > 0 else 0.0
    crowd = math.log1p(sum(1 for h in dense.hits[:SPREAD_RANK] if h.score >= top_cos - CROWD)) if dense and dense.hits else 0.0
    rows = []
    for i, c in enumerate(candidates):
        parts = c.fused.contributions
        b = parts.get("bm25")
        rows.append((
            1.0,
            math.log(i + 1),
            cosines[i] if cosines is not None else 0.0,
            top_cos,
            gap,
            b[1] / ceiling if b and ceiling else 0.0,
            top_bm25n,
            known,
            1.0 if ("bm25" in parts and "vector" in parts) else 0.0,
            c.score / top_score if top_score > 0 else 0.0,
            c.rerank.probability if c.rerank is not None else 0.0,
            spread,
            bm25_spread,
            qlen,
            1.0 if cjk else 0.0,
            fused_gap,
            crowd,
        ))
    return np.array(rows, dtype=np.float64).reshape(len(candidates), len(FEATURES))


def predict(backend: str, rows: np.ndarray) -> np.ndarray:
    """P(relevant) per row under the backend's fitted model, made to follow rank (``monotone``):
    rows are one result list, in rank order."""
    z = expand(rows) @ _weights(backend)
    with np.errstate(invalid="ignore"):
        p = np.exp(-np.logaddexp(0.0, -z))  # the logistic function, without overflow for any z
    return monotone(np.where(np.isfinite(p), p, 0.0))  # a feature that is not a number (a forged artifact's) tells nothing


MONOTONE_DEPTH = 10  # the ranks whose confidences the ones above them are raised to (monotone)


def monotone(p: np.ndarray) -> np.ndarray:
    """Confidences that never rise down a result list, so ``--min-score`` keeps a prefix of the
    ranking: within the first MONOTONE_DEPTH ranks each is raised to the highest below it (where
    the per-result model rates a lower result above a higher one, the ranking's order is
    trusted), and past them each is capped by the one above. The window is fixed so that a
    result's confidence does not depend on how many results were asked for (the search computes
    at least MONOTONE_DEPTH). Of the monotone forms tried on the dev sets' top 10s (this one, a
    running minimum from the top, the nearest non-increasing sequence, the confidences sorted)
    it kept ECE best: bench/notes/2026-12-06-trust.md."""
    if not len(p):
        return p
    head = np.maximum.accumulate(p[:MONOTONE_DEPTH][::-1])[::-1]
    return np.minimum.accumulate(np.concatenate([head, p[MONOTONE_DEPTH:]]))


@functools.lru_cache(maxsize=None)
def _weights(backend: str) -> np.ndarray:
    from .confidence_model import MODEL

    return np.asarray(MODEL["backends"].get(backend) or MODEL["backends"]["hybrid"], dtype=np.float64)


def low_confidence_floor(backend: str) -> float:
    """The top-result confidence under which a search with ``backend`` gets the low-confidence notice."""
    from .confidence_model import MODEL

    floors = MODEL["low_confidence_floor"]
    return float(floors[backend] if isinstance(floors, dict) and backend in floors else floors.get("hybrid", 0.3) if isinstance(floors, dict) else floors)
