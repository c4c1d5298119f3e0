"""Reciprocal Rank Fusion: pure functions over legs' rankings.

Weighted RRF (Cormack et al., SIGIR 2009) with qmd's top-rank bonus:

    rrf(c) = sum over legs L containing c of  weight(L) / (k + rank_L(c))      (rank from 1)
           + rank1_bonus   if c is ranked 1st in any leg
           + rank23_bonus  else if c is ranked 2nd or 3rd in any leg

Effects at the extremes: k -> 0 makes the first ranks dominate (1/1 vs 1/2); a large k flattens
the curve so being present in many legs matters more than being high in one. The bonus (added
once, for the best rank over all legs) protects exact top hits: with k = 60 a leg contributes
at most weight/61 ~ 0.016, so +0.05 keeps any leg's winner near the top, right or wrong. The
defaults (k = 20, no bonus) and why: kb.common.options.SearchOptions.

Ties are broken by chunk id (ascending), so fusion is deterministic and independent of the
order in which legs are given.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    k: float
    rank1_bonus: float = 0.0
    rank23_bonus: float = 0.0


@dataclass(frozen=True)
class Fused:
    chunk: int
    score: float
    bonus: float
    contributions: dict  # leg name -> (rank, raw score, rrf part)


def leg_from_ranking(name: str, kind: str, weight: float, chunks, scores) -> Leg:
    return Leg(name, kind, weight, tuple(LegHit(int(c), i + 1, float(s)) for i, (c, s) in enumerate(zip(chunks, scores))))


def fuse_rrf(legs: list[Leg], p: FusionParams) -> list[Fused]:
    """Weighted RRF with the top-rank bonus; sorted by score desc, then chunk id asc."""
    score: dict[int, float] = {}
    parts: dict[int, dict] = {}
    best: dict[int, int] = {}
    for leg in sorted(legs, key=lambda lg: lg.name):  # summation order fixed: same floats whatever the input order
        for h in leg.hits:
            part = leg.weight / (p.k + h.rank)
            score[h.chunk] = score.get(h.chunk, 0.0) + part
            parts.setdefault(h.chunk, {})[leg.name] = (h.rank, h.score, part)
            best[h.chunk] = min(best.get(h.chunk, h.rank), h.rank)
    fused = []
    for c, s in score.items():
        bonus = rank_bonus(best[c], p)
        fused.append(Fused(c, s + bonus, bonus, parts[c]))
    return sorted(fused, key=lambda f: (-f.score, f.chunk))


def rank_bonus(best_rank: int, p: FusionParams) -> float:
    if best_rank == 1:
        return p.rank1_bonus
    if best_rank <= 3:
        return p.rank23_bonus
    return 0.0
