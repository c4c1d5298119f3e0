"""The rerank stage: pure functions from fused candidates and cross-encoder logits to a new order.

The cross-encoder itself is runtime/cross_encoder.py; this module only decides which candidates
it scores (``rerank_top``, shrunk to fit ``--budget-ms``) and how its scores mix with retrieval.

Blends (``blend`` in kb.common.options.SearchOptions):

- position (qmd): final = w(rank) * minmax(fused) + (1 - w(rank)) * sigmoid(logit), where
  w = 0.75 for fused ranks 1-3, 0.60 for 4-10, 0.40 after. This stops the reranker destroying
  exact-match hits while letting it rescue mid-ranked semantic matches.
- sigmoid (seed 001): final = rerank_weight * sigmoid(logit) + (1 - rerank_weight) * minmax(fused).

Candidates beyond the rescored head keep their fused order after it.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

from .results import Candidate, RerankInfo, RerankScore

# Position-aware blend (qmd): share of the retrieval score kept at each fused rank.
POSITION_WEIGHTS = ((3, 0.75), (10, 0.60))  # ranks 1-3 keep 0.75, 4-10 keep 0.60
POSITION_WEIGHT_REST = 0.40  # ranks 11+ keep 0.40
RERANK_BATCH = 8  # pairs per cross-encoder call: 4-8 are fastest on few CPU cores


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def min_max(values: list[float]) -> list[float]:
    """Scale to [0, 1]; all-equal values map to 1.0 (none is worse than another)."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi == lo:
        return [1.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]


def position_weight(rank: int) -> float:
    """Retrieval share kept at fused ``rank`` (1-based) in the position-aware blend."""
    for last, w in POSITION_WEIGHTS:
        if rank <= last:
            return w
    return POSITION_WEIGHT_REST


def blend_position_aware(fused_scores: list[float], probs: list[float]) -> list[tuple[float, float]]:
    """qmd's position-aware blend: final = w(rank) * retrieval + (1 - w(rank)) * rerank prob.

    The retrieval part is the fused score min-max normalised over the reranked candidates, not
    qmd's 1/rank: with 1/rank, fused rank 1 scores 0.75 + 0.25 p and rank 2 at most
    0.75 * 0.5 + 0.25 = 0.625, so the reranker could never displace rank 1. With the
    normalised score a near-tie at the top can be reordered by a confident reranker, while a
    clear retrieval winner still needs a large probability gap to lose its place.
    Input is in fused order (rank 1 first). Returns (final score, retrieval weight) per item.
    """
    norm = min_max(fused_scores)
    out = []
    for i, (r, pr) in enumerate(zip(norm, probs)):
        w = position_weight(i + 1)
        out.append((w * r + (1.0 - w) * pr, w))
    return out


def blend_sigmoid(fused_scores: list[float], probs: list[float], rerank_weight: float) -> list[tuple[float, float]]:
    """Seed 001's rule: final = rerank_weight * sigmoid(logit) + (1 - rerank_weight) * minmax(fused).

    Returns (final score, retrieval weight) per item, in input order.
    """
    norm = min_max(fused_scores)
    return [(rerank_weight * pr + (1.0 - rerank_weight) * r, 1.0 - rerank_weight) for r, pr in zip(norm, probs)]


def blend(candidates: Sequence[Candidate], logits: Sequence[float], how: str, rerank_weight: float) -> list[Candidate]:
    """The rescored head (``candidates`` in fused order, one logit each) in its new order."""
    probs = [sigmoid(x) for x in logits]
    fused = [c.fused.score for c in candidates]
    blended = blend_position_aware(fused, probs) if how == "position" else blend_sigmoid(fused, probs, rerank_weight)
    head = [
        c._replace(score=final, score_kind="rerank", rerank=RerankScore(float(lg), pr, w, 1.0 - w))
        for c, lg, pr, (final, w) in zip(candidates, logits, probs, blended)
    ]
    return sorted(head, key=lambda c: (-c.score, c.chunk))


def rerank(
    candidates: list[Candidate],
    passages: Callable[[list[Candidate]], list[str]],
    score: Callable[[list[str]], Sequence[float]],
    *,
    model: str,
    depth: int,
    how: str,
    rerank_weight: float,
    budget_ms: float | None = None,
) -> tuple[list[Candidate], RerankInfo]:
    """Rescore the first ``depth`` candidates with ``score`` (passages -> logits) and blend; the
    rest keep their fused order after them. With ``budget_ms``, candidates are scored in batches
    of RERANK_BATCH and scoring stops when the next batch would not fit (estimated from the
    batches so far); the first batch always runs."""
    depth = min(len(candidates), depth)
    logits: list[float] = []
    t0 = time.perf_counter()
    for start in range(0, depth, RERANK_BATCH):
        spent = (time.perf_counter() - t0) * 1000
        if budget_ms is not None and start and spent + spent / start * RERANK_BATCH > budget_ms:
            break
        batch = candidates[start : min(start + RERANK_BATCH, depth)]
        logits.extend(float(x) for x in score(passages(batch)))
    n = len(logits)
    info = RerankInfo(model, depth, n, depth - n, budget_ms)
    if n == 0:
        return list(candidates), info
    return blend(candidates[:n], logits, how, rerank_weight) + list(candidates[n:]), info
