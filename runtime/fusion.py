"""Reciprocal Rank Fusion: pure functions over legs' rankings.

Weighted RRF (Cormack et al., SIGIR 2009) with qmd's top-rank bonus:

    rrf(c) = sum over legs L containing c of  weight(L) / (k + rank_L(c))      (rank from 1)
           + rank1_bonus   if c is ranked 1st in any leg
           + rank23_bonus  else if c is ranked 2nd or 3rd in any leg

Effects at the extremes: k -> 0 makes the first ranks dominate (1/1 vs 1/2); a large k flattens
the curve so being present in many legs matters more than being high in one. The bonus (added
once, for the best rank over all legs) protects exact top hits: with k = 60 a leg contributes
at most weight/61 ~ 0.016, so +0.05 keeps any leg's winner near the top, right or wrong. The
defaults and why: kb.common.options.SearchOptions.

Ties are broken by chunk id (ascending), so fusion is deterministic and independent of the
order in which legs are given.
"""

from __future__ import annotations

import math
from typing import NamedTuple


# NamedTuples, not frozen dataclasses: start-up cost (bench/startup_records.py).
class LegHit(NamedTuple):
    chunk: int
    rank: int  # 1-based
    score: float  # the leg's raw score (bm25, cosine, entity matches)


class Leg(NamedTuple):
    name: str  # "bm25", "vector", "bm25:rewrite1", "tag", ...
    kind: str  # "bm25" | "cosine" | "tag"
    weight: float
    hits: tuple[LegHit, ...]
    ceiling: float | None = None  # bm25: the highest score any chunk could get for this query
    known: float | None = None  # bm25: the share of the query's words the index knows
    words: int | None = None  # bm25: the query's distinct words (formats/analyzer.py query_words)
    stops: int | None = None  # bm25: how many of its words are stopwords (None: the analyzer has no stopword list)

    @property
    def strength(self) -> float:
        """How well the leg's best hit matches, 0..1, comparable across queries: a BM25 leg's top
        score over its ceiling, a dense leg's top cosine; 0 for no hits (tag legs: 1)."""
        if not self.hits:
            return 0.0
        if self.kind == "bm25":
            return self.hits[0].score / self.ceiling if self.ceiling else 0.0
        if self.kind == "cosine":
            return max(0.0, self.hits[0].score)
        return 1.0


class FusionParams(NamedTuple):
    k: float
    rank1_bonus: float = 0.0
    rank23_bonus: float = 0.0


class Fused(NamedTuple):
    chunk: int
    score: float
    bonus: float
    contributions: dict  # leg name -> (rank, raw score, rrf part)


def leg_from_ranking(name: str, kind: str, weight: float, chunks, scores) -> Leg:
    return Leg(name, kind, weight, hits_of(chunks, scores))


def hits_of(chunks, scores) -> tuple[LegHit, ...]:
    """A leg's hits from its ranking (numpy arrays or lists), ranks from 1."""
    chunks = chunks.tolist() if hasattr(chunks, "tolist") else chunks
    scores = scores.tolist() if hasattr(scores, "tolist") else scores
    return tuple(LegHit(int(c), i, float(s)) for i, (c, s) in enumerate(zip(chunks, scores), 1))


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


# Query-adaptive fusion, both ways (figures, and what was tried instead:
# bench/notes/2026-12-02-fusion-gap.md and 2026-12-02-confidence-model.md):
# - a dense leg's weight is scaled by how strongly its best hit matches (its top cosine), so a
#   weak dense leg (a top cosine near what unrelated text gets, as for the one-word query
#   `where`) does not bury an exact lexical match;
# - a BM25 leg's weight grows with how far its winner stands above the runner-up (the relative
#   gap (s1 - s2) / s1, in [0, 1]): weight * (1 + gap / GAP_SCALE). A lexical winner that clearly
#   beats every other chunk is a strong signal a dense leg should not outvote. The gap is a
#   ratio of one query's own scores, so it means the same for any corpus and language; GAP_SCALE
#   sits in the middle of the flat range the dev sets gave. A lone hit (one chunk holds the
#   query's terms: the page that names an identifier) has no runner-up, so it leads by all of it.
COS_WEAK = 0.2  # a dense leg whose top cosine is at most this keeps STRENGTH_FLOOR of its weight
COS_STRONG = 0.4  # ... at least this, all of it (all-MiniLM-L6-v2: unrelated text scores 0.0-0.25)
STRENGTH_FLOOR = 0.1  # the least share of its weight a dense leg keeps
GAP_SCALE = 0.25  # a BM25 leg whose top score is twice its second's (gap 0.5) gets 3x its weight


# Cosines mean different things under different embedding models: the cosines of another model
# that mean what all-MiniLM-L6-v2's COS_WEAK and COS_STRONG mean, found as the same z-scores of
# each model's background cosines (a query against unrelated passages; bench/dense_noise.py, no
# judgments). The dense strength thresholds and the confidence model (fitted on MiniLM) read a
# model's cosines through ``minilm_cosine``. multilingual-e5-small's sit high and close together.
COSINE_ANCHORS: dict[str, tuple[float, float]] = {"multilingual-e5-small": (0.795, 0.832)}


def minilm_cosine(model: str | None):
    """A function mapping ``model``'s cosines linearly onto MiniLM's scale; None for MiniLM and
    for models without anchors (their cosines are read as they are)."""
    if (model or "") not in COSINE_ANCHORS:
        return None
    weak, strong = COSINE_ANCHORS[model]
    slope = (COS_STRONG - COS_WEAK) / (strong - weak)
    return lambda c: COS_WEAK + (c - weak) * slope


def strength_factor(leg: Leg, to_minilm=None) -> float:
    """The factor adaptive fusion scales a leg's weight by: a dense leg by its top cosine (on
    MiniLM's scale; at most 1), a BM25 leg by its winner's relative gap (at least 1), others not
    at all."""
    if leg.kind == "bm25":
        h = leg.hits
        if not h or h[0].score <= 0:
            return 1.0
        second = h[1].score if len(h) > 1 else 0.0  # a lone hit has no runner-up: the widest gap
        return 1.0 + (h[0].score - second) / h[0].score / GAP_SCALE
    if leg.kind != "cosine":
        return 1.0
    top = to_minilm(leg.strength) if to_minilm is not None else leg.strength
    return min(1.0, max(STRENGTH_FLOOR, (top - COS_WEAK) / (COS_STRONG - COS_WEAK)))


# The dense legs' share when semantic_weight is not set, by the query's length in distinct content
# words (the BM25 leg's ``words``): short questions gain from the dense leg, long descriptions from
# BM25 (many independent pieces of evidence for it; several topics for one query vector to
# average), and no fixed share comes within 0.01 nDCG@10 of every dev set's best
# (bench/notes/2026-12-06-fusion-by-query-length.md, which also has what was tried instead).
# A keyword query (content words and no stopword: "colorectal cancer patients", "summaryLength
# default") gets at most an even split: the short questions that earn the dense leg 0.8 are
# sentences, which the sentence-trained model reads well, while the dev sets' queries cut to their
# keywords want 0.3-0.6 and fall under their BM25 leg at 0.8 (the note, "The keyword cap").
# multilingual-e5-small keeps a fixed 0.5 (kb.common.options MODEL_DEFAULTS).
SHORT_QUERY_TERMS = 4  # a query of at most this many distinct words gets SHORT_QUERY_WEIGHT
LONG_QUERY_TERMS = 20  # ... at least this many, LONG_QUERY_WEIGHT; between, linear in log(words)
SHORT_QUERY_WEIGHT = 0.8
LONG_QUERY_WEIGHT = 0.45
KEYWORD_QUERY_WEIGHT = 0.5  # the most a query with no stopword gets


def length_weight(words: int, stops: int | None = None) -> float:
    """The dense legs' share of a query of ``words`` distinct content words and ``stops``
    stopwords (None: not known) when semantic_weight is not set (a query of no content word counts
    as short; one with content words and no stopword gets at most KEYWORD_QUERY_WEIGHT)."""
    if words <= SHORT_QUERY_TERMS:
        share = SHORT_QUERY_WEIGHT
    elif words >= LONG_QUERY_TERMS:
        share = LONG_QUERY_WEIGHT
    else:
        g = (math.log(words) - math.log(SHORT_QUERY_TERMS)) / (math.log(LONG_QUERY_TERMS) - math.log(SHORT_QUERY_TERMS))
        share = SHORT_QUERY_WEIGHT + (LONG_QUERY_WEIGHT - SHORT_QUERY_WEIGHT) * g
    return min(share, KEYWORD_QUERY_WEIGHT) if stops == 0 and words > 0 else share


def adapt_weights(legs: list[Leg], model: str | None = None) -> list[Leg]:
    """The legs with their weights scaled by strength_factor (only when a lexical leg and a dense
    leg both found something: alone, a leg's weight changes no order); ``model``: the embedding
    model the dense legs' cosines come from."""
    kinds = {lg.kind for lg in legs if lg.hits}
    if not {"bm25", "cosine"} <= kinds:
        return legs
    to_minilm = minilm_cosine(model)
    return [lg._replace(weight=lg.weight * strength_factor(lg, to_minilm)) for lg in legs]
