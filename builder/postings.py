"""The postings stage: format 3's impact postings (formats/bm25.py), spilled a block of chunks at a time.

Every occurrence of a term in a chunk becomes one (term, chunk, field) triple; sorting them groups
them by (term, chunk), and summing each run's field weights gives tf' (``chunk_postings``). The
in-memory reference (tests/builder/test_postings.py ``build_postings``) does that once for the whole corpus: several
int64 arrays of all occurrences at its peak, most of a large build's memory
(bench/notes/2026-11-30-postings-spill.md). ``PostingsSpill`` does it per block
of whole documents of at most ``BLOCK_OCCURRENCES`` occurrences, as each window of the build
arrives, and spills each block's postings to a scratch file; ``finish`` merges the blocks by term.

Why the merge needs no sort of the corpus: the dictionary orders terms by (hash, UTF-8 bytes), a
total order that does not depend on which other terms exist, so a block sorted in its own
dictionary order is already in the final order, and blocks hold ascending chunk ranges. Term t's
postings are the concatenation, in block order, of each block's run for t: ``finish`` reads the
runs of a batch of consecutive terms from every block (one read per block and batch) and puts
them in term order with a stable sort of the batch. Impacts need the corpus's average lengths,
known only at the end, so blocks spill tf' (f32; a document's tf', f64) and ``finish`` quantizes.

What stays in memory: the vocabulary, a few integers per term and block, a length and a document
number per chunk, and one block or batch. The bytes are those of ``build_postings`` (tests/builder/
test_postings.py compares them): every sum adds the same numbers in the same order.

Spill file: per block, back to back, the chunk ids (u32, global), tf' (f32), then the document
ids (u32) and document tf' (f64), each in the block's (term, id) order.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import count
from typing import Callable

import numpy as np

from kb.formats import layout as L
from kb.formats.analyzer import STOP_MARK
from kb.formats.artifact import FileRange, Scratch
from kb.formats.bm25 import quantize_impacts, tf_component

from .stream import windows

BLOCK_OCCURRENCES = 1 << 21  # occurrences per spilled block: 100 to 250 MB of working set (bench/notes/2026-11-30-postings-spill.md)
MERGE_BATCH = 1 << 21  # postings merged at a time (a term with more is merged alone)


def group_variants(pairs) -> dict[str, list[str]]:
    """Fields.variants' distinct (term, word) pairs as term -> its words."""
    out: dict[str, list[str]] = {}
    for t, w in pairs:
        out.setdefault(t, []).append(w)
    return out


def sorted_vocabulary(unique_terms, hashes: np.ndarray | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Terms in dictionary order, by (hash, UTF-8 bytes), with their hashes (computed here unless
    given) and ``order``, the input position of each. A numpy sort on the hashes; only terms
    whose hashes collide (practically never) are ordered by bytes."""
    given = list(unique_terms)
    hashes = L.term_hashes(given) if hashes is None else hashes
    order = np.argsort(hashes, kind="stable")
    hashes = hashes[order]
    same = np.flatnonzero(hashes[1:] == hashes[:-1])
    for i in same[::-1]:  # tiny collision runs: order them by bytes
        j = i
        while j > 0 and hashes[j - 1] == hashes[i]:
            j -= 1
        k = i + 2
        while k < len(order) and hashes[k] == hashes[i]:
            k += 1
        order[j:k] = sorted(order[j:k], key=lambda t: given[t].encode("utf-8"))
    return [given[i] for i in order], hashes, order


def stop_flags(terms) -> np.ndarray:
    """Whether each term is a stopword term (``STOP_MARK`` + word): it gets postings but counts in
    no chunk's length."""
    return np.fromiter((t.startswith(STOP_MARK) for t in terms), dtype=bool, count=len(terms))


def chunk_postings(ids: np.ndarray, offsets, use_chunk, use_piece, use_field, chunks: int, stop: np.ndarray, p) -> tuple:
    """(term, chunk, tf') of each posting, sorted by (term, chunk), and each chunk's length.

    ``ids[offsets[q]:offsets[q + 1]]``: the term ids of piece q (-1: a dropped stopword);
    ``use_*``: piece ``use_piece[i]`` counts in chunk ``use_chunk[i]`` (ascending, 0-based) as
    field ``use_field[i]``; ``stop[t]``: term t is a stopword term; ``p``: BM25Params."""
    shift = max(chunks, 1).bit_length()  # (term, chunk) packed as term << shift | chunk: shifts, not a division
    kept = np.zeros(len(ids) + 1, dtype=np.int64)  # running count of the tokens lengths count (not stopwords)
    np.cumsum(~np.append(stop, True)[ids], out=kept[1:])
    field_weight = np.array([1.0, p.section_weight, p.title_weight])
    weight = field_weight[use_field]
    size = (kept[offsets[1:]] - kept[offsets[:-1]])[use_piece]
    lengths = np.bincount(use_chunk, weights=weight * size, minlength=chunks).astype(L.WEIGHT_DTYPE)
    del kept
    size = np.diff(offsets)[use_piece]
    keep = (weight > 0) & (size > 0)  # a zero field weight contributes nothing, not even a posting
    chunk, start, field, size = use_chunk[keep], offsets[use_piece[keep]], use_field[keep], size[keep]
    # Occurrences: use u contributes ids[start[u] : start[u] + size[u]], all to chunk[u]. Each
    # becomes one integer, (term, chunk, field) packed, so a plain sort (several times faster
    # than an argsort and two gathers) groups them by (term, chunk) and keeps the field.
    first = np.cumsum(size) - size
    occ_term = ids[np.repeat(start - first, size) + np.arange(int(size.sum()))]
    live = occ_term >= 0
    packed = np.sort((((occ_term << shift) | np.repeat(chunk, size)) << 2 | np.repeat(field, size))[live])
    del occ_term, live
    key, w = packed >> 2, field_weight[packed & 3]
    del packed
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    tf = np.add.reduceat(w, starts).astype(L.WEIGHT_DTYPE) if len(key) else np.zeros(0, L.WEIGHT_DTYPE)
    ukey = key[starts]
    return ukey >> shift, ukey & ((1 << shift) - 1), tf, lengths


def doc_postings(post_term: np.ndarray, post_doc: np.ndarray, tf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the index of each (term, document)'s first posting, that document's tf'): a document's
    tf' is its chunks' sum. Postings are sorted by (term, chunk) and a document's chunks are
    consecutive ids, so a term's documents are non-decreasing: each change is one more document."""
    if not len(post_term):
        return np.zeros(0, np.int64), np.zeros(0)
    doc_start = np.flatnonzero(np.r_[True, (post_term[1:] != post_term[:-1]) | (post_doc[1:] != post_doc[:-1])])
    return doc_start, np.add.reduceat(tf.astype(np.float64), doc_start)


# A language keeps BM25 statistics of its own (format 4) when it holds at least this many
# documents and this share of them, and at least two languages do; the documents of smaller
# languages share the corpus-wide statistics (a mean length or an N over a handful of documents
# says little: a lone English record among Chinese passages would make its words' idf near 0).
STATS_MIN_DOCS = 50
STATS_MIN_SHARE = 0.01


def impacts_of(tf, lengths, avg, p) -> np.ndarray:
    """u8 impacts of postings with weighted frequencies ``tf`` in units of ``lengths``; ``avg``:
    the mean length, one for all or one per posting (its document's language's)."""
    return quantize_impacts(tf_component(tf, lengths, np.maximum(avg, 1e-9), p.k1, p.b))


def language_means(values: np.ndarray, lang: np.ndarray, n_langs: int) -> np.ndarray:
    """The mean of ``values`` over the items of each language (0 for a language without any)."""
    total = np.bincount(lang, weights=values, minlength=n_langs)
    count = np.bincount(lang, minlength=n_langs)
    return np.divide(total, count, out=np.zeros(n_langs), where=count > 0)


def doc_lengths(chunk_doc: np.ndarray, lengths: np.ndarray, n_docs: int) -> tuple[np.ndarray, float]:
    """Each document's length (its chunks' sum) and their mean."""
    doc_len = np.bincount(chunk_doc, weights=lengths, minlength=n_docs)
    return doc_len, float(doc_len.mean()) if len(doc_len) else 0.0


@dataclass(frozen=True)
class _Block:
    """A spilled block: its terms with postings (first-seen ids, in dictionary order), where each
    term's chunk and document postings start among the block's (cumulative counts, one more than
    the terms), and where its four arrays start in the spill file."""

    terms: np.ndarray
    ends: np.ndarray
    doc_ends: np.ndarray
    at: int  # byte offset of the block's chunk ids; tf', document ids and tf' follow


@dataclass
class SpilledPostings:
    """The postings (as tests/builder/test_postings.py build_postings makes them in memory), whose four posting arrays are section data in scratch files."""

    terms: list[str]
    hashes: np.ndarray
    offsets: np.ndarray
    ids: tuple
    impacts: tuple
    lengths: np.ndarray
    doc_df: np.ndarray
    doc_offsets: np.ndarray
    doc_ids: tuple
    doc_impacts: tuple
    doc_n: np.ndarray | None = None  # u32 per term: BM25's N for it, its main language's documents (several languages only)
    language_stats: list | None = None  # per language: code, documents, mean chunk and document length
    variants: dict = field(default_factory=dict)  # term -> the words it stands for besides itself (layout.pack_surfaces)


class PostingsSpill:
    """The postings stage over a build's windows: ``add`` each window's Fields (chunk ids
    continuing the previous window's, whole documents), then ``finish``."""

    def __init__(self, p, scratch: Callable[[], Scratch], block_occurrences: int | None = None, merge_batch: int | None = None):
        self._p = p
        self._scratch = scratch
        self._spill = scratch()
        self._block_occurrences = block_occurrences or BLOCK_OCCURRENCES
        self._merge_batch = merge_batch or MERGE_BATCH
        self._seen = defaultdict(count().__next__)  # term -> first-seen id
        self._terms: list[str] = []
        self._hashes = np.zeros(0, dtype=np.uint64)
        self._stop = np.zeros(0, dtype=bool)
        self._blocks: list[_Block] = []
        self._lengths: list[np.ndarray] = []
        self._chunks = 0
        self._size = 0
        self._variants: set[tuple[str, str]] = set()  # (term, word) of Fields.variants, distinct

    def add(self, f, chunk_doc: np.ndarray) -> None:
        """A window's Fields; ``chunk_doc``: each of its chunks' document number."""
        self._variants.update(f.variants)
        known = len(self._seen)
        remap = np.fromiter(map(self._seen.__getitem__, f.vocabulary), dtype=np.int64, count=len(f.vocabulary))
        new = np.flatnonzero(remap >= known)  # in the order they got ids
        added = [f.vocabulary[i] for i in new]
        self._terms += added
        self._hashes = np.append(self._hashes, f.hashes[new])
        self._stop = np.append(self._stop, stop_flags(added))
        ids = np.append(remap, -1)[f.ids]
        del remap
        occurrences = np.bincount(f.use_chunk, weights=np.diff(f.offsets)[f.use_piece], minlength=f.chunks)
        for lo, hi in _blocks(occurrences, chunk_doc, self._block_occurrences):
            a, b = np.searchsorted(f.use_chunk, [lo, hi])
            self._add_block(ids, f.offsets, f.use_chunk[a:b] - lo, f.use_piece[a:b], f.use_field[a:b], self._chunks + lo, chunk_doc[lo:hi])
        self._chunks += f.chunks

    def _add_block(self, ids, offsets, use_chunk, use_piece, use_field, first: int, chunk_doc: np.ndarray) -> None:
        """Spill the postings of chunks ``first`` .. ``first + len(chunk_doc) - 1`` (``use_chunk``
        counts from ``first``)."""
        post_term, post_chunk, tf, lengths = chunk_postings(ids, offsets, use_chunk, use_piece, use_field, len(chunk_doc), self._stop, self._p)
        self._lengths.append(lengths)
        # the block's terms in dictionary order; a stable sort keeps each term's chunks ascending.
        # post_term ascends (chunk_postings sorts by term, then chunk): its runs are the terms.
        new_term = np.empty(len(post_term), dtype=bool)
        new_term[:1] = True
        np.not_equal(post_term[1:], post_term[:-1], out=new_term[1:])
        terms = post_term[new_term]
        _, _, order = sorted_vocabulary([self._terms[t] for t in terms], self._hashes[terms])
        rank = np.empty(len(terms), dtype=np.int64)
        rank[order] = np.arange(len(terms))
        local = rank[np.cumsum(new_term) - 1]
        del new_term
        by_dict = np.argsort(local, kind="stable")
        local, post_chunk, tf = local[by_dict], post_chunk[by_dict], tf[by_dict]
        del by_dict, post_term
        post_doc = chunk_doc[post_chunk]
        doc_start, doc_tf = doc_postings(local, post_doc, tf)
        ends, doc_ends = np.zeros(len(terms) + 1, np.int64), np.zeros(len(terms) + 1, np.int64)
        np.cumsum(np.bincount(local, minlength=len(terms)), out=ends[1:])
        np.cumsum(np.bincount(local[doc_start], minlength=len(terms)), out=doc_ends[1:])
        self._blocks.append(_Block(terms[order], ends, doc_ends, self._size))
        for a in ((post_chunk + first).astype("<u4"), tf.astype("<f4"), post_doc[doc_start].astype("<u4"), doc_tf.astype("<f8")):
            self._spill.file.write(memoryview(a))
            self._size += a.nbytes

    def finish(self, chunk_doc: np.ndarray, n_docs: int, doc_lang: list[str] | None = None) -> SpilledPostings:
        """Merge the blocks: the dictionary, offsets and lengths in memory, the posting arrays in
        four scratch files. ``chunk_doc``: every chunk's document number. ``doc_lang``: each
        document's language; with several, each language is scored as if it were alone (formats/
        SPEC.md, "Several languages"): impacts against the mean lengths of the document's own
        language, and each term's idf over the documents of its main language (``doc_n``: the
        language most of its documents are in; at least its document frequency). Only languages
        of ``STATS_MIN_DOCS`` documents and ``STATS_MIN_SHARE`` of them keep statistics of their
        own, and only when two or more do; the others' documents take the corpus's."""
        self._spill.file.flush()
        n_terms = len(self._terms)
        df, doc_df = np.zeros(n_terms, np.int64), np.zeros(n_terms, np.int64)
        for blk in self._blocks:
            df[blk.terms] += np.diff(blk.ends)
            doc_df[blk.terms] += np.diff(blk.doc_ends)
        live = np.flatnonzero(df > 0)  # terms whose every occurrence had weight 0 have no postings
        terms, hashes, order = sorted_vocabulary([self._terms[i] for i in live], self._hashes[live])
        final = live[order]
        rank = np.full(n_terms, -1, dtype=np.int64)
        rank[final] = np.arange(len(final))
        df, doc_df = df[final], doc_df[final]
        offsets, doc_offsets = np.zeros(len(terms) + 1, dtype=L.OFFSET_DTYPE), np.zeros(len(terms) + 1, dtype=L.OFFSET_DTYPE)
        np.cumsum(df, out=offsets[1:])
        np.cumsum(doc_df, out=doc_offsets[1:])
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, L.WEIGHT_DTYPE)
        avg = float(lengths.mean()) if len(lengths) else 0.0
        doc_len, doc_avg = doc_lengths(chunk_doc, lengths, n_docs)
        names = sorted(set(doc_lang)) if doc_lang is not None and len(chunk_doc) else []
        doc_n, stats = None, None
        if len(names) > 1:
            number = {lang: i for i, lang in enumerate(names)}
            lang_of_doc = np.fromiter(map(number.__getitem__, doc_lang), dtype=np.int64, count=len(doc_lang))
            docs_in = np.bincount(lang_of_doc, minlength=len(names))
            own = docs_in >= max(STATS_MIN_DOCS, STATS_MIN_SHARE * n_docs)
        several = len(names) > 1 and int(own.sum()) > 1
        if several:
            lang_of_chunk = lang_of_doc[chunk_doc]
            avg = np.where(own, language_means(lengths, lang_of_chunk, len(names)), avg)  # per language, then per posting below
            doc_avg = np.where(own, language_means(doc_len, lang_of_doc, len(names)), doc_avg)
            n_of = np.where(own, docs_in, n_docs)  # N for a term whose main language it is
            doc_n = np.zeros(len(terms), dtype=L.ID_DTYPE)
            stats = [{"code": lang, "documents": int(docs_in[i]), "own": bool(own[i]), "avg_length": float(avg[i]), "doc_avg_length": float(doc_avg[i])} for i, lang in enumerate(names)]
        outs = [self._scratch() for _ in range(4)]
        positions = [rank[blk.terms] for blk in self._blocks]  # ascending: blocks are in dictionary order
        for t0, t1 in windows(df, self._merge_batch):  # consecutive terms, about merge_batch postings each
            ids, tf, doc_ids, doc_tf = self._merged(positions, t0, t1)
            if several:
                chunk_impacts = impacts_of(tf, lengths[ids], avg[lang_of_chunk[ids]], self._p)
                doc_impacts = impacts_of(doc_tf, doc_len[doc_ids], doc_avg[lang_of_doc[doc_ids]], self._p)
                term = np.repeat(np.arange(t1 - t0), doc_df[t0:t1])  # each document posting's term
                per_lang = np.bincount(term * len(names) + lang_of_doc[doc_ids], minlength=(t1 - t0) * len(names)).reshape(t1 - t0, len(names))
                doc_n[t0:t1] = np.maximum(n_of[per_lang.argmax(axis=1)], doc_df[t0:t1])  # ties: the first code
            else:
                chunk_impacts, doc_impacts = impacts_of(tf, lengths[ids], avg, self._p), impacts_of(doc_tf, doc_len[doc_ids], doc_avg, self._p)
            for out, a in zip(outs, (ids.astype(L.ID_DTYPE), chunk_impacts, doc_ids.astype(L.ID_DTYPE), doc_impacts)):
                out.file.write(memoryview(np.ascontiguousarray(a)))
        parts = []
        for out in outs:
            out.file.flush()
            parts.append((FileRange(out.path, 0, os.path.getsize(out.path)),))
        self._spill.close()
        return SpilledPostings(terms, hashes.astype(L.HASH_DTYPE, copy=False), offsets, parts[0], parts[1], lengths, doc_df.astype(L.ID_DTYPE), doc_offsets, parts[2], parts[3], doc_n, stats, group_variants(self._variants))

    def _merged(self, positions: list[np.ndarray], t0: int, t1: int) -> tuple:
        """The chunk ids, tf', document ids and document tf' of dictionary terms t0..t1-1, in
        (term, id) order: each block's runs for them, read and put in term order (stably)."""
        fd = self._spill.file.fileno()
        got: list[list[np.ndarray]] = [[], [], [], [], [], []]
        for blk, pos in zip(self._blocks, positions):
            i0, i1 = np.searchsorted(pos, [t0, t1])
            if i0 == i1:
                continue
            c, d, at = blk.ends, blk.doc_ends, blk.at
            n, nd = int(c[-1]), int(d[-1])
            got[0].append(_read(fd, at + 4 * int(c[i0]), int(c[i1] - c[i0]), "<u4"))
            got[1].append(_read(fd, at + 4 * n + 4 * int(c[i0]), int(c[i1] - c[i0]), "<f4"))
            got[2].append(np.repeat(pos[i0:i1], np.diff(c[i0 : i1 + 1])))
            got[3].append(_read(fd, at + 8 * n + 4 * int(d[i0]), int(d[i1] - d[i0]), "<u4"))
            got[4].append(_read(fd, at + 8 * n + 4 * nd + 8 * int(d[i0]), int(d[i1] - d[i0]), "<f8"))
            got[5].append(np.repeat(pos[i0:i1], np.diff(d[i0 : i1 + 1])))
        if len(got[0]) == 1:  # one block holds these terms: its runs are in term order already
            return got[0][0].astype(np.int64), got[1][0], got[3][0].astype(np.int64), got[4][0]
        ids, tf, term, doc_ids, doc_tf, doc_term = (np.concatenate(g) if g else np.zeros(0) for g in got)
        by_term, doc_by_term = np.argsort(term, kind="stable"), np.argsort(doc_term, kind="stable")
        return ids[by_term].astype(np.int64), tf[by_term], doc_ids[doc_by_term].astype(np.int64), doc_tf[doc_by_term]


def _read(fd: int, at: int, count: int, dtype: str) -> np.ndarray:
    """``count`` items of ``dtype`` at byte ``at`` of a spill file (read, not mapped: mapped pages
    would count in the build's RSS)."""
    size = count * np.dtype(dtype).itemsize
    raw = os.pread(fd, size, at)
    if len(raw) != size:
        raise OSError(f"a postings spill file ended {size - len(raw)} bytes early")
    return np.frombuffer(raw, dtype=dtype)


def _blocks(occurrences: np.ndarray, chunk_doc: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Chunk ranges [lo, hi) of whole documents, of about ``budget`` occurrences each (at least
    one document each)."""
    if not len(chunk_doc):
        return []
    starts = np.flatnonzero(np.r_[True, chunk_doc[1:] != chunk_doc[:-1]])  # each document's first chunk
    bounds = np.r_[starts, len(chunk_doc)]
    return [(int(bounds[lo]), int(bounds[hi])) for lo, hi in windows(np.add.reduceat(occurrences, starts), budget)]
