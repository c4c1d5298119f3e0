"""The BM25 leg: query terms -> scored chunk ids, over postings viewed in place.

Formula and variant: formats/bm25.py. Chunks are scored; in a format 2 artifact N and df count
documents (``terms.doc_df``), in format 1 chunks, and a format 2 chunk's score adds
``document_weight`` x its document's own BM25 (the document's tf and length summed over its
chunks, computed here from the chunk postings). A query term repeated n times adds its impact
n times (format 2; format 1 queries hold distinct terms). Scores accumulate per term with numpy
over each term's posting list; the ``allowed`` filter (a boolean mask over chunk ids) is applied
before ranking, so the top hits are drawn from the allowed set only.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from kb.formats.analyzer import Analyzer, AnalyzerError
from kb.formats.bm25 import idf, tf_component


def query_terms(ix, text: str) -> list[str]:
    """The terms ``text`` searches, repeats kept (formats/analyzer.py ``Analyzer.query_terms``)."""
    return analyzer_of(ix).query_terms(text)


def analyzer_of(ix) -> Analyzer:
    """The artifact's own analyzer, built once per open index."""
    analyzer = ix.leg_cache.get("analyzer")
    if analyzer is None:
        try:
            analyzer = ix.leg_cache["analyzer"] = Analyzer.from_params(ix.meta.analyzer)
        except AnalyzerError as e:
            raise AnalyzerError(f"{ix.path}: {e}; rebuild it with this kb-build, or use a kb that has it") from None
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
    w = term_weight(ix, tid)
    out = (ids, w * tf_component(tf, ix.lengths[ids], p["avg_length"], p["k1"], p["b"]))
    if document_weight(ix) > 0:
        chunk_doc, doc_len, avg = _doc_stats(ix)
        dtf = np.bincount(chunk_doc[ids], weights=tf, minlength=ix.n_docs)
        docs = np.flatnonzero(dtf)
        out += (docs, w * tf_component(dtf[docs], doc_len[docs], avg, p["k1"], p["b"]))
    if len(cache) >= IMPACT_CACHE:
        cache.clear()
    cache[tid] = out
    return out


def term_weight(ix, tid: int) -> float:
    """A term's idf: over documents (format 2), or over chunks (format 1)."""
    if ix.version >= 2:
        return float(idf(int(ix.doc_df[tid]), ix.n_docs))
    return float(idf(int(ix.tf_offsets[tid + 1] - ix.tf_offsets[tid]), ix.n_chunks))


def document_weight(ix) -> float:
    """meta.bm25.document_weight (formats/bm25.py); 0 for artifacts from before it (format 1)."""
    return float(ix.meta.bm25.get("document_weight", 0.0)) if ix.version >= 2 else 0.0


def _doc_stats(ix) -> tuple[np.ndarray, np.ndarray, float]:
    """(each chunk's document, each document's length = its chunks' lengths, their mean)."""
    hit = ix.leg_cache.get("doc_stats")
    if hit is None:
        chunk_doc = ix.chunks["doc"].astype(np.int64)
        doc_len = np.bincount(chunk_doc, weights=ix.lengths, minlength=ix.n_docs)
        hit = ix.leg_cache["doc_stats"] = (chunk_doc, doc_len, float(doc_len.mean()) if ix.n_docs else 1.0)
    return hit


def bm25_scores(ix, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, scores) of every chunk matching at least one term, ids ascending; a term
    given n times counts n times."""
    n = ix.n_chunks
    acc = np.zeros(n, dtype=np.float64)
    touched = np.zeros(n, dtype=bool)
    lam = document_weight(ix)
    dacc = np.zeros(ix.n_docs if lam > 0 else 0, dtype=np.float64)
    for t, times in Counter(terms).items():
        tid = ix.term_id(t)
        if tid is None:
            continue
        ids, imp, *doc = impacts(ix, tid)
        acc[ids] += imp * times if times > 1 else imp
        touched[ids] = True
        if doc:
            dacc[doc[0]] += doc[1] * times if times > 1 else doc[1]
    ids = np.flatnonzero(touched)  # a dense mask beats np.unique over the concatenated postings
    if lam > 0:
        return ids, acc[ids] + lam * dacc[_doc_stats(ix)[0][ids]]
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
    """(the highest BM25 score any chunk could get for ``terms``, the share of the distinct terms
    the index knows). Each term's saturated tf stays below 1 (formats/bm25.py), in the chunk's
    score and in its document's, so the ceiling is (1 + document_weight) x the sum of the known
    terms' idf, each as often as the query repeats it: a leg's top score over it says how
    completely the best chunk matches, on a scale that means the same for every query."""
    if not terms:
        return 0.0, 0.0
    ceiling, known = 0.0, 0
    counts = Counter(terms)
    for t, times in counts.items():
        tid = ix.term_id(t)
        if tid is None:
            continue
        known += 1
        ceiling += times * term_weight(ix, tid)
    return ceiling * (1.0 + document_weight(ix)), known / len(counts)
