"""Rank fusion and rerank blending: pure functions with named, documented constants.

Reciprocal Rank Fusion (Cormack et al., SIGIR 2009), weighted, with qmd's top-rank bonus:

    rrf(c) = sum over legs L containing c of  weight(L) / (RRF_K + rank_L(c))      (rank from 1)
           + RANK1_BONUS   if c is ranked 1st in any leg
           + RANK23_BONUS  else if c is ranked 2nd or 3rd in any leg

Effects at the extremes: RRF_K -> 0 makes the first ranks dominate (1/1 vs 1/2); a large RRF_K
flattens the curve so being present in many legs matters more than being high in one. The
bonus (added once, for the best rank over all legs) protects exact top hits: with k = 60 a leg
contributes at most weight/61 ~ 0.016, so +0.05 keeps any leg's winner near the top, right or
wrong (a BM25 winner on a paraphrase is often wrong); that is why it is off by default.

Ties are broken by chunk id (ascending), so fusion is deterministic and independent of the
order in which legs are given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Defaults chosen by bench/fusion_grid.py (bench/RESULTS.md, "fusion"): the seeds' k = 60 with
# qmd's +0.05/+0.02 bonus left hybrid below its dense leg on the Hugo fixture and CISI; k = 20
# without the bonus put hybrid at or above both legs on all four English sets (mean nDCG@10
# 0.563 against 0.545), losing 0.012 on SciFact. The seeds' values stay one setting away:
# [search] rrf_k = 60, rank1_bonus = 0.05, rank23_bonus = 0.02.
RRF_K = 20  # rank offset k in 1 / (k + rank): smaller = top ranks dominate, larger = presence in many legs dominates
RANK1_BONUS = 0.0  # added once when a chunk is first in any leg (qmd and the seeds: 0.05)
RANK23_BONUS = 0.0  # added once when a chunk's best rank in any leg is 2 or 3 (qmd and the seeds: 0.02)
SEED_RRF_K, SEED_RANK1_BONUS, SEED_RANK23_BONUS = 60, 0.05, 0.02
SEMANTIC_WEIGHT = 0.7  # share of the dense legs; lexical legs get 1 - this (0 = keyword only, 1 = semantic only)
REWRITE_WEIGHT = 0.5  # a rewrite's sub-legs count this fraction of the original query's legs
TAG_WEIGHT = 0.3  # weight of the tag (entity) leg

# Position-aware blend (qmd): share of the retrieval score kept at each fused rank.
POSITION_WEIGHTS = ((3, 0.75), (10, 0.60))  # ranks 1-3 keep 0.75, 4-10 keep 0.60
POSITION_WEIGHT_REST = 0.40  # ranks 11+ keep 0.40
RERANK_WEIGHT = 1.0  # sigmoid rule: 1.0 = the reranker alone orders the reranked top


@dataclass(frozen=True)
class LegHit:
    chunk: int
    rank: int  # 1-based
    score: float  # the leg's raw score (bm25, cosine, entity matches)


@dataclass(frozen=True)
class Leg:
    name: str  # "bm25", "vector", "bm25:rewrite1", "tag", ...
    kind: str  # "bm25" | "cosine" | "tag"
    weight: float
    hits: tuple[LegHit, ...]


@dataclass(frozen=True)
class FusionParams:
    k: float = RRF_K
    rank1_bonus: float = RANK1_BONUS
    rank23_bonus: float = RANK23_BONUS


@dataclass
class Fused:
    chunk: int
    score: float
    bonus: float
    contributions: dict = field(default_factory=dict)  # leg name -> (rank, raw score, rrf part)


def leg_from_ranking(name: str, kind: str, weight: float, chunks, scores) -> Leg:
    return Leg(name, kind, weight, tuple(LegHit(int(c), i + 1, float(s)) for i, (c, s) in enumerate(zip(chunks, scores))))


def fuse_rrf(legs: list[Leg], p: FusionParams = FusionParams()) -> list[Fused]:
    """Weighted RRF with the top-rank bonus; sorted by score desc, then chunk id asc."""
    out: dict[int, Fused] = {}
    best: dict[int, int] = {}
    for leg in sorted(legs, key=lambda lg: lg.name):  # summation order fixed: same floats whatever the input order
        for h in leg.hits:
            f = out.get(h.chunk)
            if f is None:
                f = out[h.chunk] = Fused(h.chunk, 0.0, 0.0)
            part = leg.weight / (p.k + h.rank)
            f.score += part
            f.contributions[leg.name] = (h.rank, h.score, part)
            best[h.chunk] = min(best.get(h.chunk, h.rank), h.rank)
    for c, f in out.items():
        f.bonus = rank_bonus(best[c], p)
        f.score += f.bonus
    return sorted(out.values(), key=lambda f: (-f.score, f.chunk))


def rank_bonus(best_rank: int, p: FusionParams = FusionParams()) -> float:
    if best_rank == 1:
        return p.rank1_bonus
    if best_rank <= 3:
        return p.rank23_bonus
    return 0.0


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


def blend_sigmoid(fused_scores: list[float], probs: list[float], rerank_weight: float = RERANK_WEIGHT) -> list[tuple[float, float]]:
    """Seed 001's rule: final = rerank_weight * sigmoid(logit) + (1 - rerank_weight) * minmax(fused).

    Returns (final score, retrieval weight) per item, in input order.
    """
    norm = min_max(fused_scores)
    return [(rerank_weight * pr + (1.0 - rerank_weight) * r, 1.0 - rerank_weight) for r, pr in zip(norm, probs)]
