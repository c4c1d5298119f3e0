"""The retrieval legs: each ranks the allowed chunks by one signal and returns a fusion.Leg.

- BM25 (exact words): runtime/bm25.py scores postings viewed in place.
- Dense (meaning): cosine between the query's embedding and the chunks' vectors, through the
  HNSW index, or exactly over a small filtered subset.
- Tag (entities): chunks ranked by how many of the given entities match one of their tags.

``allowed`` is a boolean mask over chunk ids (runtime/filters.py), applied before ranking, so
every leg draws its candidates from the allowed set only.
"""

from __future__ import annotations

import re

import numpy as np

from .bm25 import query_ceiling, query_stopwords, query_words, top_bm25
from .fusion import Leg, hits_of, leg_from_ranking


def bm25_leg(ix, name: str, text: str, weight: float, depth: int, allowed: np.ndarray) -> Leg:
    words = query_words(ix, text)
    ids, scores = top_bm25(ix, [t for word in words for t in word], depth, allowed)
    ceiling, known = query_ceiling(ix, words)
    return Leg(name, "bm25", weight, hits_of(ids, scores), ceiling, known, len(set(words)), query_stopwords(ix, text))


def vector_leg(space, name: str, query_vector: np.ndarray, weight: float, depth: int, allowed: np.ndarray) -> Leg:
    ids, sims = top_vector(space, query_vector, depth, allowed)
    return leg_from_ranking(name, "cosine", weight, ids, sims)


def tag_leg(ix, entities, weight: float, depth: int, allowed: np.ndarray, tiebreak: dict[int, float]) -> Leg:
    """Chunks ranked by how many entities match one of their tags; ties by the text legs' fused
    score (``tiebreak``), then chunk id."""
    return rank_tag_counts(tag_counts(ix, entities), weight, depth, allowed, tiebreak)


def tag_counts(ix, entities) -> np.ndarray | None:
    """How many of ``entities`` match one of each chunk's tags; None when no entity names a tag."""
    norm = {tag_key(n): n for n in ix.meta.tag_names}
    matched = [norm[tag_key(e)] for e in dict.fromkeys(entities) if tag_key(e) in norm]
    if not matched:
        return None
    counts = np.zeros(ix.n_chunks, dtype=np.int32)
    for t in matched:
        counts[np.frombuffer(ix.tag_bitmap(t).to_array(), dtype=np.uint32)] += 1
    return counts


def rank_tag_counts(counts: np.ndarray | None, weight: float, depth: int, allowed: np.ndarray, tiebreak: dict[int, float]) -> Leg:
    """The tag leg from ``tag_counts`` (None: no entity matched a tag)."""
    if counts is None:
        return Leg("tag", "tag", weight, ())
    counts = np.where(allowed, counts, 0)
    ids = np.flatnonzero(counts)
    order = sorted(ids.tolist(), key=lambda c: (-counts[c], -tiebreak.get(c, 0.0), c))[:depth]
    return leg_from_ranking("tag", "tag", weight, order, [float(counts[c]) for c in order])


def tag_key(s: str) -> str:
    """Entities and tags compare casefolded, with runs of spaces, _ and - as one -."""
    return re.sub(r"[\s_\-]+", "-", s.strip().casefold())


def top_vector(space, qv: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` chunks by cosine among ``allowed``: an exact scan of every allowed vector in an
    artifact small enough (DenseSpace.scans_vectors: no graph to check, no usearch to load, which is
    most of a one-shot search's dense cost there); otherwise by whichever strategy costs less for
    a subset of this size (``exact_is_cheaper``): an exact scan of the subset's vectors, or an HNSW search
    that over-fetches neighbours and keeps the allowed ones. Both are exact on the subset's
    terms: the scan by construction, the search by widening until ``k`` allowed hits are found."""
    n_allowed = int(allowed.sum())
    if n_allowed == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    if space.scans_vectors or exact_is_cheaper(n_allowed, space.n_chunks, k):
        return exact_top(space, qv, k, allowed)
    return hnsw_top(space, qv, k, allowed, n_allowed)


# The two strategies' costs, measured by bench/scale.py (RESULTS.md, "scale") on 384-dimensional
# float16 vectors: an exact scan costs about SCAN_ROW_US per allowed chunk (gather, widen,
# dot product), an HNSW search about SEARCH_NEIGHBOUR_US per neighbour it is asked for (its
# beam is as wide as that count). The search over-fetches OVERFETCH times the neighbours that
# hold k allowed chunks on average, so the scan wins below about sqrt(k N) x a few.
SCAN_ROW_US = 0.5
SEARCH_NEIGHBOUR_US = 6.0
OVERFETCH = 1.5
SCAN_BLOCK = 16384  # rows gathered at a time (12 MB of 384-d float16): bounded scratch memory


def overfetch_count(n_allowed: int, n: int, k: int) -> int:
    """Neighbours an HNSW search asks for so that about ``OVERFETCH * k`` of them are allowed."""
    return min(n, max(k, int(k * n / max(n_allowed, 1) * OVERFETCH)))


def exact_is_cheaper(n_allowed: int, n: int, k: int) -> bool:
    """Whether scanning ``n_allowed`` vectors costs less than over-fetching through HNSW."""
    if n_allowed >= n:
        return False  # nothing filtered out: the index is the plain search
    return n_allowed * SCAN_ROW_US <= overfetch_count(n_allowed, n, k) * SEARCH_NEIGHBOUR_US


def exact_top(space, qv: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` of ``allowed`` by exact cosine over their stored vectors (ties by chunk id)."""
    ids = np.flatnonzero(allowed)
    sims = np.empty(len(ids), dtype=np.float32)
    for lo in range(0, len(ids), SCAN_BLOCK):
        sims[lo : lo + SCAN_BLOCK] = space.cosines(ids[lo : lo + SCAN_BLOCK], qv)
    if len(ids) > k:
        keep = np.argpartition(-sims, k - 1)[:k]
        tied = sims >= sims[keep].min()  # every chunk tied with the k-th, so ties go by chunk id
        ids, sims = ids[tied], sims[tied]
    order = np.lexsort((ids, -sims))[:k]
    return ids[order], sims[order].astype(np.float64)


def hnsw_top(space, qv: np.ndarray, k: int, allowed: np.ndarray, n_allowed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` of ``allowed`` through the HNSW index: fetch enough neighbours that ``k`` of them
    are likely allowed, and widen the search until they are (or the index is exhausted)."""
    index = space.graph  # usearch, or for a one-shot search kb's checked walk (runtime/graph_walk.py)
    n_allowed = int(allowed.sum()) if n_allowed is None else n_allowed
    count = overfetch_count(n_allowed, space.n_chunks, k)
    while True:
        m = index.search(qv, count)
        keys = np.asarray(m.keys, dtype=np.int64)
        sims = 1.0 - np.asarray(m.distances, dtype=np.float64)
        if not np.isfinite(sims).all():  # a forged vector (NaN) gives NaN distances
            from kb.formats.artifact import CorruptArtifact

            raise CorruptArtifact(f"{space.path}: corrupt artifact: a stored vector is not finite")
        keep = allowed[keys]
        if keep.sum() >= k or count >= space.n_chunks:
            keys, sims = keys[keep], sims[keep]
            order = np.lexsort((keys, -sims))[:k]
            space.check_vectors(keys[order])
            return keys[order], sims[order]
        count = min(space.n_chunks, count * 4)
