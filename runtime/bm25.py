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
    analyzer = Analyzer.from_params(ix.meta["analyzer"])
    return list(dict.fromkeys(analyzer.terms(text)))


def bm25_scores(ix, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, scores) of every chunk matching at least one term, ids ascending."""
    p = ix.meta["bm25"]
    n = ix.n_chunks
    acc = None
    touched = []
    for t in terms:
        tid = ix.term_id(t)
        if tid is None:
            continue
        ids, tf = ix.posting(tid)
        if acc is None:
            acc = np.zeros(n, dtype=np.float64)
        w = idf(len(ids), n)
        acc[ids] += w * tf_component(tf, ix.lengths[ids], p["avg_length"], p["k1"], p["b"])
        touched.append(ids)
    if acc is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    ids = np.unique(np.concatenate(touched)).astype(np.int64)
    return ids, acc[ids]


def top_bm25(ix, terms: list[str], k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` (chunk ids, scores) by BM25 among ``allowed`` (a bool mask over chunk ids, or
    None for all); ties broken by chunk id."""
    ids, scores = bm25_scores(ix, terms)
    if allowed is not None and len(ids):
        keep = allowed[ids]
        ids, scores = ids[keep], scores[keep]
    if not len(ids):
        return ids, scores
    order = np.lexsort((ids, -scores))[:k]
    return ids[order], scores[order]
