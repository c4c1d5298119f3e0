"""The BM25 leg: query terms -> scored chunk ids, over postings viewed in place.

Formula and variant: formats/bm25.py. Scores accumulate per term with numpy over each term's
posting list; the ``allowed`` filter (a boolean mask over chunk ids) is applied before ranking,
so the top hits are drawn from the allowed set only.
"""

from __future__ import annotations

import numpy as np

from kb.formats.analyzer import Analyzer
from kb.formats.bm25 import idf, tf_component


def query_terms(ix, text: str) -> list[str]:
    """Distinct analyzed terms of ``text``, in first-seen order (a repeated query term counts once)."""
    return list(dict.fromkeys(analyzer_of(ix).terms(text)))


def analyzer_of(ix) -> Analyzer:
    """The artifact's own analyzer, built once per open index."""
    analyzer = ix.leg_cache.get("analyzer")
    if analyzer is None:
        analyzer = ix.leg_cache["analyzer"] = Analyzer.from_params(ix.meta.analyzer)
    return analyzer


IMPACT_CACHE = 8192  # terms whose decoded impacts a warm process keeps


def impacts(ix, tid: int) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, BM25 impact idf * saturated tf) of a term: decoded and computed once per
    process, then reused (kb serve and kb bench see each common term many times)."""
    cache = ix.leg_cache.setdefault("bm25", {})
    hit = cache.get(tid)
    if hit is not None:
        return hit
    p = ix.meta.bm25
    ids, tf = ix.posting(tid)
    out = (ids, idf(len(ids), ix.n_chunks) * tf_component(tf, ix.lengths[ids], p["avg_length"], p["k1"], p["b"]))
    if len(cache) >= IMPACT_CACHE:
        cache.clear()
    cache[tid] = out
    return out


def bm25_scores(ix, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, scores) of every chunk matching at least one term, ids ascending."""
    n = ix.n_chunks
    acc = np.zeros(n, dtype=np.float64)
    touched = np.zeros(n, dtype=bool)
    for t in terms:
        tid = ix.term_id(t)
        if tid is None:
            continue
        ids, imp = impacts(ix, tid)
        acc[ids] += imp
        touched[ids] = True
    ids = np.flatnonzero(touched)  # a dense mask beats np.unique over the concatenated postings
    return ids, acc[ids]


def top_k(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (ids, scores) by score descending, ties by id ascending (deterministic)."""
    if len(ids) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth  # everything tied with the k-th stays in, so ties resolve by id
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:k]
    return ids[order], scores[order]


def top_bm25(ix, terms: list[str], k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` (chunk ids, scores) by BM25 among ``allowed`` (a bool mask over chunk ids, or
    None for all); ties broken by chunk id."""
    ids, scores = bm25_scores(ix, terms)
    if allowed is not None and len(ids):
        keep = allowed[ids]
        ids, scores = ids[keep], scores[keep]
    return top_k(ids, scores, k)


def query_ceiling(ix, terms: list[str]) -> tuple[float, float]:
    """(the highest BM25 score any chunk could get for ``terms``, the share of them the index
    knows). Each term's saturated tf stays below 1 (formats/bm25.py), so the ceiling is the sum
    of the known terms' idf: a leg's top score over it says how completely the best chunk
    matches, on a scale that means the same for every query."""
    if not terms:
        return 0.0, 0.0
    ceiling, known = 0.0, 0
    for t in terms:
        tid = ix.term_id(t)
        if tid is None:
            continue
        known += 1
        ceiling += float(idf(int(ix.tf_offsets[tid + 1] - ix.tf_offsets[tid]), ix.n_chunks))
    return ceiling, known / len(terms)
