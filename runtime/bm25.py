"""The BM25 leg: query terms -> scored chunk ids, over postings viewed in place.

Formula and variant: formats/bm25.py. Chunks are scored; from format 2 N and df count documents
(``terms.doc_df``), in format 1 chunks, and a chunk's score adds ``document_weight`` x its
document's own BM25. Format 3 stores each posting's impact (quantized saturated tf, for the chunk
and for the document), so a query costs one idf and two slices per term over views of the mmap,
then one weighted bincount for the chunks and one for the documents; formats 1-2 compute the
impacts from the stored tf, once per term per process. A query term repeated n times adds its
impact n times (formats 2-3; format 1 queries hold distinct terms). The ``allowed`` filter (a
boolean mask over chunk ids) is applied before ranking, so the top hits are drawn from the
allowed set only, and the top k are selected by partition, not a full sort (or, where a
chunk's score is its own sum, by kb's compiled ``acc_top`` in one pass over the sums).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from kb.formats.analyzer import Analyzer, AnalyzerError
from kb.formats.bm25 import IMPACT_LEVELS, idf_scalar, tf_component


def query_terms(ix, text: str) -> list[str]:
    """The terms ``text`` searches, repeats kept (formats/analyzer.py ``Analyzer.query_terms``)."""
    return analyzer_of(ix).query_terms(text)


def query_words(ix, text: str) -> list[tuple[str, ...]]:
    """The words ``text`` searches, each as its terms (``Analyzer.query_words``)."""
    return analyzer_of(ix).query_words(text)


def query_stopwords(ix, text: str) -> int | None:
    """How many of ``text``'s words are stopwords (``Analyzer.query_stopwords``)."""
    return analyzer_of(ix).query_stopwords(text)


def analyzer_of(ix) -> Analyzer:
    """The artifact's own analyzer, built once per open index."""
    analyzer = ix.leg_cache.get("analyzer")
    if analyzer is None:
        try:
            analyzer = ix.leg_cache["analyzer"] = Analyzer.from_params(ix.meta.analyzer)
        except AnalyzerError as e:
            raise AnalyzerError(f"{ix.path}: {e}; rebuild it with this kb-build, or use a kb that has it") from None
    return analyzer


IMPACT_CACHE = 8192  # terms whose computed impacts a warm process keeps (formats 1-2; a set's rescored postings, runtime/collection.py)


def term_postings(ix, tid: int, documents: bool = True) -> tuple[np.ndarray, np.ndarray, float, np.ndarray | None, np.ndarray | None]:
    """(chunk ids, impacts, scale, document ids, document impacts) of a term: its contribution
    to a chunk is ``scale * impact``, to a document ``scale * document impact``. Format 3 reads
    the stored u8 impacts in place (scale = idf / 255), and the document ones only when asked
    (``documents``); formats 1-2 compute idf-weighted float impacts from the stored tf once per
    process (scale 1)."""
    if ix.version >= 3:
        ids, imp = ix.impact_posting(tid)
        doc_ids, doc_imp = ix.impact_posting(tid, document=True) if documents and document_weight(ix) > 0 else (None, None)
        return ids, imp, term_weight(ix, tid) / IMPACT_LEVELS, doc_ids, doc_imp
    ids, imp, *doc = _computed_impacts(ix, tid)
    return (ids, imp, 1.0, *doc) if doc else (ids, imp, 1.0, None, None)


def _computed_impacts(ix, tid: int) -> tuple:
    """Formats 1-2: (chunk ids, idf * saturated tf[, doc ids, idf * the documents' saturated tf])."""
    cache = ix.leg_cache.setdefault("bm25", {})
    hit = cache.get(tid)
    if hit is not None:
        return hit
    p = ix.meta.bm25
    ids, tf = ix.posting(tid)
    w = term_weight(ix, tid)
    with np.errstate(all="ignore"):  # forged tf or lengths: a posting that overflows scores 0, not NaN
        out = (ids, _finite(w * tf_component(tf, ix.lengths[ids], p["avg_length"], p["k1"], p["b"])))
        if document_weight(ix) > 0:
            chunk_doc, doc_len, avg = doc_stats(ix)
            dtf = np.bincount(chunk_doc[ids], weights=tf, minlength=ix.n_docs)
            docs = np.flatnonzero(dtf)
            out += (docs, _finite(w * tf_component(dtf[docs], doc_len[docs], avg, p["k1"], p["b"])))
    if len(cache) >= IMPACT_CACHE:
        cache.clear()
    cache[tid] = out
    return out


def _finite(x: np.ndarray) -> np.ndarray:
    return np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)


def term_weight(ix, tid: int) -> float:
    """A term's idf: over documents (formats 2-4; with statistics per language, over its main
    language's documents), or over chunks (format 1)."""
    if ix.version >= 2:
        return idf_scalar(ix.term_df(tid), ix.term_documents(tid))
    return idf_scalar(int(ix.tf_offsets[tid + 1] - ix.tf_offsets[tid]), ix.n_chunks)


def document_weight(ix) -> float:
    """meta.bm25.document_weight (formats/bm25.py); 0 for artifacts from before it (format 1)."""
    return float(ix.meta.bm25.get("document_weight", 0.0)) if ix.version >= 2 else 0.0


def doc_stats(ix) -> tuple[np.ndarray, np.ndarray, float]:
    """(each chunk's document, each document's length = its chunks' lengths, their mean)."""
    hit = ix.leg_cache.get("doc_stats")
    if hit is None:
        chunk_doc = ix.chunks["doc"].astype(np.int64)
        doc_len = np.bincount(chunk_doc, weights=ix.lengths, minlength=ix.n_docs)
        hit = ix.leg_cache["doc_stats"] = (chunk_doc, doc_len, float(doc_len.mean()) if ix.n_docs else 1.0)
    return hit


def bm25_scores(ix, terms: list[str], postings=None, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, scores) of every chunk matching at least one term, ids ascending; a term
    given n times counts n times. All the terms' postings are summed at once: one weighted
    ``bincount`` over the chunk impacts (and one over the document impacts), each posting
    weighted by its term's scale; every impact is positive, so the matching chunks are the
    nonzero sums. ``postings(term, tid)`` gives a term's postings as ``term_postings`` does
    (default: the artifact's own; a set of artifacts passes ones rescored to its statistics,
    runtime/collection.py). ``allowed``: a bool mask over chunk ids; only those are returned."""
    return _scores(ix, _chunk_sums(ix, terms, postings), allowed)


def _scores(ix, summed, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``bm25_scores`` from ``_chunk_sums``'s result."""
    if summed is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    acc, lam, single, doc_parts, scales = summed
    hit = acc > 0  # a bool mask: several times faster to scan than the floats
    ids = np.flatnonzero(hit if allowed is None else np.logical_and(hit, allowed, out=hit))
    if single:
        score = acc[ids]
        return ids, score + lam * score
    if _adds_documents(summed):
        score = acc[ids]
        dacc = _weighted_sum(ix, doc_parts, scales, ix.n_docs)
        return ids, score + lam * dacc[ix.chunks["doc"][ids]]
    return ids, acc[ids]


def _adds_documents(summed) -> bool:
    """Whether a chunk's score adds its document's sum (of ``_chunk_sums``'s result), rather than
    being its own sum alone (times 1 + lam where each document is its one chunk)."""
    _, lam, single, doc_parts, _ = summed
    return not single and lam > 0 and doc_parts[0][0] is not None


def _chunk_sums(ix, terms: list[str], postings=None):
    """``bm25_scores``'s sums over the chunks: (sums, the document weight lam, whether each
    document is its one chunk, the terms' document postings, their scales), or None when the
    index knows no term of the query."""
    lam = document_weight(ix)
    single = lam > 0 and one_chunk_per_document(ix)  # each document is its chunk: the same postings, the same sums
    parts, doc_parts, scales = [], [], []
    for t, times in Counter(terms).items():
        tid = ix.term_id(t)
        if tid is None:
            continue
        ids, imp, scale, doc_ids, doc_imp = term_postings(ix, tid, documents=not single) if postings is None else postings(t, tid)
        parts.append((ids, imp))
        doc_parts.append((doc_ids, doc_imp))
        scales.append(scale * times)
    if not parts:
        return None
    return _weighted_sum(ix, parts, scales, ix.n_chunks), lam, single, doc_parts, scales


def one_chunk_per_document(ix) -> bool:
    """Whether every document is exactly one chunk (JSON Lines records, brought vectors, short
    notes): a document's postings and statistics are then its chunk's, so its BM25 need not be
    summed again."""
    hit = ix.leg_cache.get("one_chunk_per_document")
    if hit is None and isinstance(ix.meta.bm25.get("one_chunk_per_document"), bool):
        hit = ix.leg_cache["one_chunk_per_document"] = ix.meta.bm25["one_chunk_per_document"]  # kb-build's word: reading first_chunk took 7-23 ms at 1M chunks
    if hit is None:
        first = ix.first_chunk
        hit = ix.leg_cache["one_chunk_per_document"] = bool(ix.n_docs == ix.n_chunks and np.array_equal(first[: ix.n_docs + 1], np.arange(ix.n_docs + 1)))
    return hit


def _weighted_sum(ix, parts: list[tuple[np.ndarray, np.ndarray]], scales: list[float], n: int) -> np.ndarray:
    """sum over parts of scale x impact, by id, as a length-``n`` array (ids checked against ``n``).
    Stored postings (u32 ids, u8 impacts) are added by kb's compiled ``impact_add`` where it is
    built: the same float64 sums in the same order as the bincount below, without its copies of
    every posting, and with the GIL let go (a one-shot search runs this leg beside the dense one)."""
    from .cosines import kernels

    k = kernels()
    if k is not None and hasattr(k, "impact_add") and all(ids.dtype == np.uint32 and imp.dtype == np.uint8 for ids, imp in parts):
        acc = np.zeros(n)
        for (ids, imp), scale in zip(parts, scales):
            if k.impact_add(ids, imp, float(scale), acc, len(ids), n):
                _past_the_tables(ix)
        return acc
    if len(parts) == 1:
        ids, w = parts[0][0], parts[0][1] * scales[0]
    else:
        ids = np.concatenate([p[0] for p in parts])
        w = np.concatenate([p[1] for p in parts]) * np.repeat(scales, [len(p[0]) for p in parts])
    if len(ids) and int(ids.max()) >= n:
        _past_the_tables(ix)
    return np.bincount(ids, weights=w, minlength=n)


def _past_the_tables(ix):
    from kb.formats.artifact import CorruptArtifact

    raise CorruptArtifact(f"{ix.path}: corrupt artifact: a posting names a chunk or document past the tables")


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
    None for all); ties broken by chunk id. Where a chunk's score is its own sum (no document
    part to add), kb's compiled ``acc_top`` picks them from the sums in one pass, as ``top_k``
    over ``bm25_scores`` would, bit for bit: at a million chunks a long query matches over half
    of them (bench/notes/2026-12-02-scale-million.md)."""
    from .cosines import kernels

    kern = kernels()
    summed = _chunk_sums(ix, terms)
    if summed is not None and kern is not None and hasattr(kern, "acc_top") and not _adds_documents(summed):
        acc, lam, single, _, _ = summed
        ids, scores = np.empty(max(k, 0), dtype=np.int64), np.empty(max(k, 0))
        mask = None if allowed is None else np.ascontiguousarray(allowed, dtype=bool)
        n = kern.acc_top(acc, len(acc), mask, lam if single else 0.0, max(k, 0), ids, scores)
        return ids[:n], scores[:n]
    return top_k(*_scores(ix, summed, allowed), k)


def query_ceiling(ix, words: list[tuple[str, ...]]) -> tuple[float, float]:
    """(the highest BM25 score any chunk could get for the query's ``words`` (``query_words``),
    the share of its distinct words the index knows): ``ceiling_of`` with the artifact's idf."""
    ceiling, known = ceiling_of(words, lambda t: None if (tid := ix.term_id(t)) is None else term_weight(ix, tid))
    return ceiling * (1.0 + document_weight(ix)), known


def ceiling_of(words: list[tuple[str, ...]], idf) -> tuple[float, float]:
    """(the sum over the query's words of the highest ``idf`` among each word's known terms, a
    word as often as the query repeats it; the share of the distinct words with a known term).
    Each term's saturated tf stays below 1 (formats/bm25.py), in the chunk's score and in its
    document's, and a document is analysed in one language, so it matches one form of a word:
    (1 + document_weight) x this is the most a chunk can score, and a leg's top score over it
    says how completely the best chunk matches, on a scale that means the same for every query.
    ``idf(term)`` is None for a term the index does not know."""
    if not words:
        return 0.0, 0.0
    ceiling, known = 0.0, 0
    counts = Counter(words)
    for word, times in counts.items():
        weights = [w for w in map(idf, word) if w is not None]
        if weights:
            known += 1
            ceiling += times * max(weights)
    return ceiling, known / len(counts)
