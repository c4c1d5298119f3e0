"""The build pipeline: read -> chunk -> analyze -> postings -> embed -> hnsw -> tags -> text -> write.

Each stage is a function from data to data; I/O happens only in the read stage and in the final
atomic write. Everything written is derived deterministically from the inputs: sorted
vocabularies, stable chunk ids (documents sorted by path, chunks in document order), a
single-threaded HNSW build, and no wall-clock time in the artifact.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import time
from contextlib import contextmanager
from collections import Counter, defaultdict
from itertools import chain, count
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from kb.common.errors import KbError
from kb.formats import layout as L
from kb.formats import records as R
from kb.formats.analyzer import STOP_MARK, Analyzer
from kb.formats.artifact import FORMAT_VERSION, SectionData, write_artifact
from kb.formats.bm25 import quantize_impacts, tf_component
from kb.formats.version import KB_VERSION

from . import shards
from .chunk import Chunk, chunk_document, estimate_tokens
from .config import BuildConfig
from .embedders import AUTO_MODEL, choose_embedder, make_embedder, reranker_files
from .executors import LocalExecutor
from .query_model import query_model_section
from .filetypes import SOURCE_EXTENSIONS
from .ingest import Document, read_corpus
from .language import document_languages

Progress = Callable[[str, int, int], None]
ZSTD_LEVEL = R.ZSTD_LEVEL  # text blocks compress like the manifest
ZSTD_DICT_BYTES = 32 * 1024  # at most; a dictionary is about a tenth of the text it is trained on
ZSTD_DICT_MIN_BYTES = 4 * 1024  # below this a dictionary does not pay for its own bytes
ZSTD_DICT_MIN_SAMPLES = 64  # below this, training fails or does not pay
# Fixed COVER parameters (segment size k, d-mer size d): letting zstd search for them cost ~5 s
# on 3.6k Hugo chunks; k=256, d=8 trains in 0.1 s and compresses within 1% of the searched best.
ZSTD_DICT_K, ZSTD_DICT_D = 256, 8
# Train on every n-th record, at most about 100x the dictionary's size (zstd's rule of thumb):
# on SciFact's 8.9 MB of records that trains in 0.11 s instead of 0.32 s, for 0.45% more bytes.
ZSTD_DICT_SAMPLE_FACTOR = 100


class BuildError(KbError):
    """The build cannot produce an artifact (exit 1); nothing is written."""


@dataclass
class BuildReport:
    files_read: int = 0
    documents: int = 0
    chunks: int = 0
    terms: int = 0
    vectors: int = 0
    languages: dict = field(default_factory=dict)  # language code -> documents analyzed in it
    embedder: str = ""  # the embedding model used ([embedding] model = "auto" chooses by the languages)
    truncated_chunks: int = 0  # chunks longer than the embedding model's window (their tail is not embedded)
    skipped: list = field(default_factory=list)
    excluded: int = 0
    warnings: list = field(default_factory=list)
    section_bytes: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    artifact_bytes: int = 0
    executor: str = "local"  # where chunk, analyze and embed ran (builder/executors.py)
    shard: str | None = None  # "i/N" for a --shard build
    embed_nodes: int = 0  # machines that embedded (a Ray build: the nodes its actors ran on)


@dataclass(slots=True)
class ChunkRow:
    doc: int
    chunk: Chunk


@dataclass
class Postings:
    """The inverted index: term t's postings are items offsets[t]..offsets[t+1] of ``ids`` (chunk
    ids ascending), ``tf`` and ``impacts``; its document postings likewise over ``doc_offsets``."""

    terms: list[str]  # sorted by (term_hash, term)
    hashes: np.ndarray
    offsets: np.ndarray  # u64 x (terms + 1)
    ids: np.ndarray  # u32 chunk ids
    tf: np.ndarray  # f32 weighted term frequencies (the impacts' input; not stored)
    impacts: np.ndarray  # u8 quantized saturated tf (formats/bm25.py)
    lengths: np.ndarray
    doc_df: np.ndarray  # u32 per term: documents holding it
    doc_offsets: np.ndarray  # u64 x (terms + 1)
    doc_ids: np.ndarray  # u32 document ids
    doc_impacts: np.ndarray  # u8


def _without_cyclic_gc(fn):
    """Run ``fn`` with the cyclic garbage collector off. A build makes millions of objects and no
    cycles worth collecting, and the collector would walk them over and over: on SciFact's
    non-embedding stages that cost ~0.05 s, with pauses of up to 0.15 s. Reference counting
    still frees everything; the collector is back on when the build returns or fails."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return run


@_without_cyclic_gc
def build(
    roots: list[Path],
    out: Path,
    config: BuildConfig,
    *,
    jsonl: list[Path] = (),
    include: list[str] = (),
    exclude: list[str] = (),
    strict: bool = False,
    embedder=None,
    progress: Progress | None = None,
    jobs: int | None = None,
    follow_symlinks: bool = False,
    executor=None,
    shard: tuple[int, int] | None = None,
) -> BuildReport:
    """Compile the inputs into the artifact ``out``; ``jobs`` worker processes chunk and analyze
    (default: one per core, at most 8; the artifact is the same for any number). ``executor``
    runs the chunk, analyze and embed stages (builder/executors.py; default: here, in ``jobs``
    forked processes); the artifact is the same for every executor. ``shard=(i, n)`` builds
    only the documents of shard i of n (``shard_of``)."""
    rep = BuildReport()
    executor = executor or LocalExecutor(jobs)
    rep.executor = executor.name
    clock = _clock(rep.seconds)
    progress = progress or (lambda stage, done, total: None)
    # A BM25-only artifact cannot rerank hybrid results, so it packs the default reranker only when asked.
    rerank_choice = "none" if config.reranker == "default" and config.embedding_model == "none" else config.reranker
    rerank_files = reranker_files(rerank_choice)  # a bad --reranker fails before any work

    with clock("read"):
        corpus = read_corpus(roots, jsonl, include, exclude, skip_paths={Path(out)}, follow_symlinks=follow_symlinks)
    rep.files_read = len(corpus.sources)
    rep.skipped = [(s.path, s.reason) for s in corpus.skipped]
    rep.excluded = corpus.excluded
    if strict and corpus.skipped:
        first = corpus.skipped[0]
        raise BuildError(f"--strict: {len(corpus.skipped)} input(s) skipped, first {first.path}: {first.reason}")
    docs = sorted(corpus.documents, key=lambda d: (d.path, d.doc_id))
    if not docs:
        raise BuildError("nothing to index: no readable documents in the inputs")
    if shard is not None:
        whole = len(docs)
        docs = [d for d in docs if shard_of(d.path, shard[1]) == shard[0]]
        if not docs:
            raise BuildError(f"shard {shard[0]}/{shard[1]} holds none of the corpus's {whole} documents; build fewer shards")
        rep.shard = f"{shard[0]}/{shard[1]}"
    rep.warnings.extend(unmatched_contexts(config.contexts, docs))
    with clock("language"):
        doc_langs = document_languages(docs, config.languages)
    rep.languages = dict(sorted(Counter(doc_langs).items()))
    model = choose_embedder(rep.languages) if config.embedding_model == AUTO_MODEL else config.embedding_model
    rep.embedder = model
    if embedder is None and config.chunking.exact_tokens:
        embedder = make_embedder(model, config.quantization)
    exact = config.chunking.exact_tokens and embedder is not None
    analyzer = Analyzer.for_languages(rep.languages).prepare()
    rows, fields = chunk_and_analyze(
        docs, doc_langs, embedder.count_tokens if exact else estimate_tokens, config.chunking, analyzer,
        LocalExecutor(1) if exact else executor, rep.seconds, progress, jobs,
    )  # fmt: skip  # exact token counts use the model loaded here: one process
    rep.documents, rep.chunks = len(docs), len(rows)
    with clock("postings"):
        post = build_postings(fields, config, np.fromiter((r.doc for r in rows), dtype=np.int64, count=len(rows)), len(docs))
    rep.terms = len(post.terms)

    if embedder is None:
        embedder = make_embedder(model, config.quantization)  # loaded after the forked stages, so no model is forked
    vectors_bytes = None
    if embedder is not None:
        with clock("embed"):
            vecs, rep.truncated_chunks, rep.embed_nodes = embed_chunks(docs, rows, embedder, progress, executor=executor)
        with clock("hnsw"):
            vectors_bytes = build_hnsw(vecs, config)
        rep.vectors = len(vecs)

    with clock("tags"):
        statuses, status_bitmaps, tag_names, tag_bitmaps, unknown = build_filters(docs, rows, config)
    rep.warnings.extend(f"unknown status {s!r} (kept; known: {', '.join(config.statuses)})" for s in unknown)

    with clock("text"):
        zdict, blocks = build_text_blocks(docs, rows)
        sources = build_sources(docs, zdict)

    embed_card = None if embedder is None else _card(embedder.files())
    rerank_card = _card(rerank_files)
    meta = R.Meta(
        kb_version=KB_VERSION,
        format_version=FORMAT_VERSION,
        counts=R.Counts(len(docs), len(rows), len(post.terms), rep.vectors),
        analyzer=analyzer.params() | {"documents": rep.languages},
        bm25=config.bm25.params() | {"avg_length": float(post.lengths.mean()) if len(rows) else 0.0},
        embedder=embed_card,
        reranker=rerank_card,
        vectors={"metric": "cos", **vars(config.vectors)} if embedder is not None else None,
        tag_names=tuple(tag_names),
        tag_descriptions={t: config.tags.get(t, "") for t in tag_names},
        statuses=tuple(statuses),
        excluded_statuses=tuple(config.excluded_statuses),
        search=config.search,
        text_block=L.TEXT_BLOCK,
        source="jsonl" if jsonl and not roots else "files",
        path_contexts=config.contexts,
    )
    manifest = R.Manifest(
        root=corpus.root,
        kb_version=KB_VERSION,
        config=config.to_dict(),
        config_file=config.source,
        sources=tuple(R.Source(s.path, s.size, s.mtime_ns, s.sha256) for s in sorted(corpus.sources, key=lambda s: s.path)),
        jsonl=tuple(Path(j).name for j in jsonl),
        skipped=tuple((s.path, s.reason) for s in corpus.skipped),
        excluded=corpus.excluded,
        include=tuple(include),
        exclude=tuple(exclude),
        models={"embedder": embed_card, "reranker": rerank_card},
        analyzer=analyzer.params() | {"documents": rep.languages},
        file_types=tuple(sorted(SOURCE_EXTENSIONS)),
    )
    sections = assemble(meta, manifest, config.default_status, docs, rows, post, status_bitmaps, tag_bitmaps, zdict, blocks, sources, vectors_bytes, embedder)
    if vectors_bytes is not None:
        with clock("query-model"):
            query, why = query_model_section(embedder, next(s.data for s in sections if s.name == L.MODEL_EMBED))
        if query is not None:
            sections.append(SectionData(L.MODEL_QUERY, query))
        elif why:
            rep.warnings.append(why)
    if rerank_files is not None:
        sections.append(SectionData(L.MODEL_RERANK, R.pack_model_files(rerank_files)))
    with clock("write"):
        rep.artifact_bytes = write_artifact(out, sections)
    rep.section_bytes = {s.name: len(s.data) for s in sections}
    return rep


def shard_of(path: str, n: int) -> int:
    """The shard (0..n-1) of the document at ``path``: the first 8 bytes of its path's BLAKE2b
    digest, little-endian, modulo n. A document's shard depends on its path alone, so adding or
    removing a document changes only its own shard; documents keep their sorted order in it."""
    return int.from_bytes(hashlib.blake2b(path.encode("utf-8"), digest_size=8).digest(), "little") % n


def unmatched_contexts(contexts: dict, docs: list[Document]) -> list[str]:
    """A warning for each [contexts] prefix no document path starts with. Not an error: the
    kb.toml may describe a folder the corpus does not hold yet; the prefix is kept, unused."""
    from bisect import bisect_left

    paths = sorted(d.path for d in docs)  # the paths under a prefix are the ones from bisect_left on

    def matched(p: str) -> bool:
        i = bisect_left(paths, p)
        return i < len(paths) and paths[i].startswith(p)

    return [f"[contexts] {p!r} matches no document path; no result will carry its description" for p in contexts if not matched(p)]


def _clock(into: dict):
    """``with clock("stage"):`` adds the block's wall time to ``into["stage"]``."""

    @contextmanager
    def stage(name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            into[name] = into.get(name, 0.0) + time.perf_counter() - t

    return stage


def chunk_and_analyze(docs, doc_langs, count, opts, analyzer, executor, seconds: dict, progress: Progress, jobs: int | None = None) -> tuple[list[ChunkRow], Fields]:
    """The chunk and analyze stages, over contiguous document shards on ``executor`` (up to
    ``jobs`` of them; default: the executor's workers). ``seconds["chunk"]`` gets the chunking
    of the first shard when it runs here, and ``seconds["analyze"]`` the rest of the wall time
    (its analysis, waiting for the other shards, merging), so the stage seconds still add up to
    the wall time."""
    cuts = shards.bounds([len(d.text) for d in docs], jobs or executor.workers())
    start = time.perf_counter()
    seconds["chunk"] = 0.0

    def shard(lo: int, hi: int):  # for a forking executor: runs here (shard 0) or in a fork
        if lo == 0:  # this process: it reports progress and returns its rows as they are
            return chunk_shard(docs[:hi], doc_langs[:hi], count, opts, analyzer, lambda i: progress("chunk", i + 1, len(docs)), seconds, start)
        rows, fields = chunk_shard(docs[lo:hi], doc_langs[lo:hi], count, opts, analyzer)
        return pack_rows(rows, lo), fields

    job = ShardJob(count, opts, analyzer.languages)
    try:
        parts = executor.map_shards(shard, cuts, docs, doc_langs, job)
    except KbError as e:
        raise BuildError(str(e)) from None
    rows = as_rows(parts[0][0])  # shard 0 ran here (ChunkRow) or elsewhere (tuples)
    for packed, _ in parts[1:]:
        rows.extend(unpack_rows(packed))
    fields = merge_fields([f for _, f in parts]) if len(parts) > 1 else parts[0][1]
    progress("chunk", len(docs), len(docs))
    seconds["analyze"] = time.perf_counter() - start - seconds["chunk"]
    return rows, fields


@dataclass(frozen=True)
class ShardJob:
    """What every chunk + analyze shard needs besides its documents, for an executor that runs
    shards elsewhere (a Ray task gets this and its shard's documents): the token counter, the
    [chunking] options, the analyzer's languages (its stemmers do not pickle: rebuilt there)."""

    count: Callable[[list[str]], list[int]]
    chunking: object  # ChunkOptions
    languages: tuple[str, ...]

    def run(self, docs, doc_langs, first: int) -> tuple[list[tuple], Fields]:
        """Chunk and analyze ``docs`` (documents ``first``, ``first + 1``, ... of the build)."""
        rows, fields = chunk_shard(docs, doc_langs, self.count, self.chunking, Analyzer.for_languages(self.languages).prepare())
        return pack_rows(rows, first), fields


def chunk_shard(docs, doc_langs, count, opts, analyzer, chunked=None, seconds: dict | None = None, start: float = 0.0) -> tuple[list[ChunkRow], Fields]:
    """Chunk and analyze ``docs`` (whole documents, numbered from 0 here). ``chunked(i)`` is
    called after document i; ``seconds["chunk"]``, when given, gets the chunking time since
    ``start``."""
    rows = []
    for i, d in enumerate(docs):
        rows.extend(ChunkRow(i, c) for c in chunk_document(d, count, opts))
        if chunked is not None:
            chunked(i)
    if seconds is not None:
        seconds["chunk"] = time.perf_counter() - start
    return rows, analyze(docs, rows, analyzer, doc_langs)


def pack_rows(rows: list[ChunkRow], first: int) -> list[tuple]:
    """Rows as tuples, documents numbered from ``first``: a worker's chunks travel as tuples,
    pickling them is five times cheaper than dataclasses."""
    return [(first + r.doc, r.chunk.section, r.chunk.text, r.chunk.start_line, r.chunk.end_line) for r in rows]


def unpack_rows(packed: list[tuple]) -> list[ChunkRow]:
    return [ChunkRow(d, Chunk(section, text, a, b)) for d, section, text, a, b in packed]


def as_rows(rows: list) -> list[ChunkRow]:
    return rows if not rows or isinstance(rows[0], ChunkRow) else unpack_rows(rows)


def _card(files: dict[str, bytes] | None) -> dict | None:
    """The model card of converted ``files`` as meta stores it."""
    return None if files is None else R.ModelCard.from_json(files[R.CARD_FILE]).to_dict()


BODY, SECTION, TITLE = 0, 1, 2  # field codes of Fields.use_field


@dataclass
class Fields:
    """Analyzed text, each distinct string once, and where it counts.

    ``ids[offsets[p]:offsets[p + 1]]`` are the term ids of piece ``p`` (a chunk's text, a section
    path, a title, a description), indexes into ``vocabulary``; -1 marks a dropped stopword. Use
    ``i`` puts piece ``use_piece[i]`` into chunk ``use_chunk[i]`` as field ``use_field[i]``: a
    title or section path shared by many chunks is analyzed once and repeated in numpy.
    """

    vocabulary: list[str]  # distinct terms, in first-seen order
    hashes: np.ndarray  # term_hash of each vocabulary term (computed in the shards, in parallel)
    ids: np.ndarray
    offsets: np.ndarray
    use_chunk: np.ndarray
    use_piece: np.ndarray
    use_field: np.ndarray
    chunks: int


def analyze(docs: list[Document], rows: list[ChunkRow], analyzer: Analyzer, doc_langs: list[str] | None = None) -> Fields:
    """Analyze ``rows``, which hold whole documents (a shard starts at a document's first chunk).
    ``doc_langs[d]`` is document d's language (its stemmer and stopwords); None: no language."""
    langs = sorted({doc_langs[r.doc] for r in rows}) if doc_langs is not None and rows else [None]
    multi = len(langs) > 1
    lang_no = {lang: i for i, lang in enumerate(langs)}
    index: dict = {}
    pieces: list[list[str]] = []
    piece_lang: list[int] = []
    words_of = analyzer.index_words

    def piece(text: str, li: int) -> int:
        key = (li, text) if multi else text  # a title shared by documents of two languages is analyzed twice
        p = index.get(key)
        if p is None:
            p = index[key] = len(pieces)
            pieces.append(words_of(text))
            piece_lang.append(li)
        return p

    use_chunk, use_piece, use_field = [], [], []
    prev = -1
    li = 0
    for cid, r in enumerate(rows):
        d = docs[r.doc]
        if multi and r.doc != prev:
            li = lang_no[doc_langs[r.doc]]
        use_chunk += (cid, cid, cid)
        use_piece += (piece(r.chunk.text, li), piece(r.chunk.section, li), piece(d.title, li))
        use_field += (BODY, SECTION, TITLE)
        if r.doc != prev:  # the description counts once per document, with its first chunk
            prev = r.doc
            if d.description:
                use_chunk.append(cid)
                use_piece.append(piece(d.description, li))
                use_field.append(BODY)
    offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)), out=offsets[1:])
    # Per language: word ids in first-seen order in one C-level pass (a defaultdict numbering its
    # misses), then each distinct word is finished (length limit, stemmer, stopwords) once.
    term_id: dict[str, int] = {}
    total = int(offsets[-1])
    token_lang = np.repeat(np.asarray(piece_lang, dtype=np.int8), np.diff(offsets)) if multi else None
    ids = np.empty(total if multi else 0, dtype=np.int32)  # int32: half the bytes to send back from a worker
    for li, lang in enumerate(langs):
        mine = [pieces[p] for p in range(len(pieces)) if piece_lang[p] == li] if multi else pieces
        seen = defaultdict(count().__next__)
        n = sum(map(len, mine)) if multi else total
        word_ids = np.fromiter(map(seen.__getitem__, chain.from_iterable(mine)), dtype=np.int64, count=n)
        finished = analyzer.finish([w.decode() if w.__class__ is bytes else w for w in seen], lang)
        local = np.fromiter((term_id.setdefault(t, len(term_id)) for t in finished), dtype=np.int32, count=len(finished))
        if multi:
            ids[token_lang == li] = local[word_ids]
        else:
            ids = local[word_ids]
    vocabulary = list(term_id)
    return Fields(
        vocabulary,
        L.term_hashes(vocabulary),
        ids,
        offsets,
        np.asarray(use_chunk, dtype=np.int64),
        np.asarray(use_piece, dtype=np.int64),
        np.asarray(use_field, dtype=np.int8),
        len(rows),
    )


def merge_fields(parts: list[Fields]) -> Fields:
    """One Fields from the analyses of consecutive shards: vocabularies unioned, term ids,
    pieces and chunks renumbered. Only distinct terms go through Python; the rest is numpy."""
    seen = defaultdict(count().__next__)
    hashes, ids, offsets, use_chunk, use_piece = [], [], [np.zeros(1, np.int64)], [], []
    chunks = pieces = tokens = 0
    for f in parts:
        known = len(seen)
        remap = np.fromiter(map(seen.__getitem__, f.vocabulary), dtype=np.int64, count=len(f.vocabulary))
        hashes.append(f.hashes[remap >= known])  # the terms this shard adds, in the order they got ids
        ids.append(np.append(remap, -1).astype(np.int32)[f.ids])  # -1 (a dropped stopword) stays -1
        offsets.append(f.offsets[1:] + tokens)
        use_chunk.append(f.use_chunk + chunks)
        use_piece.append(f.use_piece + pieces)
        chunks, pieces, tokens = chunks + f.chunks, pieces + len(f.offsets) - 1, tokens + int(f.offsets[-1])
    return Fields(
        list(seen),
        np.concatenate(hashes),
        np.concatenate(ids),
        np.concatenate(offsets),
        np.concatenate(use_chunk),
        np.concatenate(use_piece),
        np.concatenate([f.use_field for f in parts]),
        chunks,
    )


def build_postings(f: Fields, config: BuildConfig, chunk_doc: np.ndarray | None = None, n_docs: int | None = None) -> Postings:
    """Weighted term frequencies per (term, chunk), vectorised: every occurrence becomes one
    (term id, chunk id, field weight) triple; sorting the keys and summing runs gives tf'.
    Stopword terms (``STOP_MARK`` + word) get postings but count in no chunk's length.
    ``chunk_doc``: each chunk's document, for the document frequencies and impacts (None: one
    per chunk); ``n_docs``: the documents (default: the highest in ``chunk_doc`` + 1)."""
    p = config.bm25
    n = max(f.chunks, 1)
    if chunk_doc is None:
        chunk_doc = np.arange(f.chunks, dtype=np.int64)
    if n_docs is None:
        n_docs = int(chunk_doc.max()) + 1 if len(chunk_doc) else 0
    terms, hashes, order = sorted_vocabulary(f.vocabulary, f.hashes)
    rank = np.empty(len(terms) + 1, dtype=np.int64)  # first-seen id -> dictionary id; -1 stays -1
    rank[order] = np.arange(len(terms))
    rank[-1] = -1
    ids = rank[f.ids]
    stop = np.fromiter((t.startswith(STOP_MARK) for t in terms), dtype=bool, count=len(terms))
    kept = np.zeros(len(ids) + 1, dtype=np.int64)  # running count of the tokens lengths count (not stopwords)
    np.cumsum(~np.append(stop, True)[ids], out=kept[1:])
    field_weight = np.array([1.0, p.section_weight, p.title_weight])
    weight = field_weight[f.use_field]
    size = (kept[f.offsets[1:]] - kept[f.offsets[:-1]])[f.use_piece]
    lengths = np.bincount(f.use_chunk, weights=weight * size, minlength=f.chunks).astype("<f4")
    size = np.diff(f.offsets)[f.use_piece]
    keep = (weight > 0) & (size > 0)  # a zero field weight contributes nothing, not even a posting
    chunk, start, field, size = f.use_chunk[keep], f.offsets[f.use_piece[keep]], f.use_field[keep], size[keep]
    # Occurrences: use u contributes ids[start[u] : start[u] + size[u]], all to chunk[u]. Each
    # becomes one integer, (term, chunk, field) packed, so a plain sort (several times faster
    # than an argsort and two gathers) groups them by (term, chunk) and keeps the field.
    first = np.cumsum(size) - size
    occ_term = ids[np.repeat(start - first, size) + np.arange(int(size.sum()))]
    live = occ_term >= 0
    packed = np.sort(((occ_term * n + np.repeat(chunk, size)) * 4 + np.repeat(field, size))[live])
    key, w = packed >> 2, field_weight[packed & 3]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    tf = np.add.reduceat(w, starts).astype("<f4") if len(key) else np.zeros(0, "<f4")
    ukey = key[starts]
    post_term, post_chunk = ukey // n, (ukey % n).astype(np.uint32)
    df = np.bincount(post_term, minlength=len(terms))
    post_doc = chunk_doc[post_chunk]
    # postings are sorted by (term, chunk) and a document's chunks are consecutive ids, so a
    # term's documents are non-decreasing: each change of (term, document) is one more document
    new_doc = np.r_[True, (post_term[1:] != post_term[:-1]) | (post_doc[1:] != post_doc[:-1])] if len(post_term) else np.zeros(0, bool)
    doc_df = np.bincount(post_term[new_doc], minlength=len(terms))
    if np.any(df == 0):  # terms whose every occurrence had weight 0 have no postings: drop them
        live = np.flatnonzero(df > 0)
        terms, hashes, df, doc_df = [terms[i] for i in live], hashes[live], df[live], doc_df[live]
        post_term = np.searchsorted(live, post_term)
    offsets = np.zeros(len(terms) + 1, dtype="<u8")
    np.cumsum(df, out=offsets[1:])
    avg = float(lengths.mean()) if len(lengths) else 0.0
    impacts = quantize_impacts(tf_component(tf, lengths[post_chunk], max(avg, 1e-9), p.k1, p.b))
    # document postings: a document's tf' and len' are its chunks' sums (formats/bm25.py)
    doc_start = np.flatnonzero(new_doc)
    doc_tf = np.add.reduceat(tf.astype(np.float64), doc_start) if len(doc_start) else np.zeros(0)
    doc_ids = post_doc[doc_start]
    doc_len = np.bincount(chunk_doc, weights=lengths, minlength=n_docs)
    doc_avg = float(doc_len.mean()) if len(doc_len) else 0.0
    doc_impacts = quantize_impacts(tf_component(doc_tf, doc_len[doc_ids], max(doc_avg, 1e-9), p.k1, p.b))
    doc_offsets = np.zeros(len(terms) + 1, dtype="<u8")
    np.cumsum(doc_df, out=doc_offsets[1:])
    return Postings(
        terms, hashes, offsets, post_chunk.astype("<u4"), tf, impacts, lengths, doc_df.astype("<u4"),
        doc_offsets, doc_ids.astype("<u4"), doc_impacts,
    )  # fmt: skip


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


def embed_text(doc: Document, chunk: Chunk, first: bool) -> str:
    """What the embedder sees: title, section path, (description once), then the chunk text."""
    head = [doc.title]
    if first and doc.description:
        head.append(doc.description)
    if chunk.section:
        head.append(chunk.section)
    return "\n".join(head) + "\n\n" + chunk.text


def embed_chunks(docs: list[Document], rows: list[ChunkRow], embedder, progress: Progress, batch: int = 64, executor=None) -> tuple[np.ndarray, int, int]:
    """Embeddings of every chunk, how many chunks exceed the model's window, and how many
    machines embedded. The batches are cut here, the same for every executor: a text's vector
    depends on its batch's padding."""
    texts = []
    prev = -1
    for r in rows:
        texts.append(embed_text(docs[r.doc], r.chunk, r.doc != prev))
        prev = r.doc
    # Sort by length so batches hold similar lengths (less padding), then restore order.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    cuts = [order[s : s + batch] for s in range(0, len(order), batch)]
    result = (executor or LocalExecutor()).embed([[texts[i] for i in idx] for idx in cuts], embedder, progress)
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for idx, vecs in zip(cuts, result.vectors):
        out[idx] = vecs
    return out, result.truncated, result.nodes


def build_hnsw(vecs: np.ndarray, config: BuildConfig) -> bytes:
    from usearch.index import Index

    v = config.vectors
    index = Index(
        ndim=vecs.shape[1],
        metric="cos",
        dtype=v.dtype,
        connectivity=v.connectivity,
        expansion_add=v.expansion_add,
        expansion_search=v.expansion_search,
    )
    if len(vecs):
        index.add(np.arange(len(vecs), dtype=np.uint64), vecs, threads=1)  # one thread: deterministic graph
    return bytes(index.save())


def build_filters(docs: list[Document], rows: list[ChunkRow], config: BuildConfig):
    from pyroaring import BitMap

    statuses = list(config.statuses)
    unknown = []
    status_ids: dict[str, list[int]] = {s: [] for s in statuses}
    tag_ids: dict[str, list[int]] = {t: [] for t in config.tags}
    for cid, r in enumerate(rows):
        d = docs[r.doc]
        st = d.status or config.default_status
        if st not in status_ids:
            status_ids[st] = []
            statuses.append(st)
            unknown.append(st)
        status_ids[st].append(cid)
        for t in d.tags:
            tag_ids.setdefault(t, []).append(cid)
    tag_names = sorted(tag_ids)
    status_bitmaps = [BitMap(status_ids[s]).serialize() for s in statuses]
    tag_bitmaps = [BitMap(tag_ids[t]).serialize() for t in tag_names]
    return statuses, status_bitmaps, tag_names, tag_bitmaps, unknown


def build_text_blocks(docs: list[Document], rows: list[ChunkRow]) -> tuple[bytes, list[bytes]]:
    import zstandard

    records = [R.pack_chunk_record(R.ChunkRecord(r.chunk.text, r.chunk.section, docs[r.doc].title, docs[r.doc].doc_id, docs[r.doc].tags)) for r in rows]
    raw_blocks = [R.pack_text_block(records[i : i + L.TEXT_BLOCK]) for i in range(0, len(records), L.TEXT_BLOCK)]
    zdict = b""
    total = sum(map(len, records))
    dict_bytes = min(ZSTD_DICT_BYTES, total // 10)
    if len(records) >= ZSTD_DICT_MIN_SAMPLES and dict_bytes >= ZSTD_DICT_MIN_BYTES:
        try:
            step = max(1, -(-total // (ZSTD_DICT_SAMPLE_FACTOR * dict_bytes)))
            d = zstandard.train_dictionary(dict_bytes, records[::step], k=ZSTD_DICT_K, d=ZSTD_DICT_D, threads=1, level=ZSTD_LEVEL)
            zdict = d.as_bytes()
        except zstandard.ZstdError:
            zdict = b""  # too little or too uniform text to train on: plain zstd still works
    return zdict, [_compressor(zdict).compress(b) for b in raw_blocks]


def _compressor(zdict: bytes):
    """The zstd compressor of text.blocks and docs.source: with text.dict when there is one."""
    import zstandard

    params = {"level": ZSTD_LEVEL, "write_content_size": True, "write_checksum": False}
    if zdict:
        params["dict_data"] = zstandard.ZstdCompressionDict(zdict)
    return zstandard.ZstdCompressor(**params)


def build_sources(docs: list[Document], zdict: bytes) -> list[bytes]:
    """docs.source: each document's source text (front matter included), so ``kb get
    PATH:FROM:COUNT`` gives the exact lines the chunks' line numbers count. Chunk texts cannot:
    they drop front matter and the blank lines between chunks, repeat the overlap, and rejoin
    a line split into sentences with single spaces."""
    cctx = _compressor(zdict)
    return [cctx.compress(R.pack_source(d.source)) for d in docs]


def assemble(meta: R.Meta, manifest: R.Manifest, default_status: str, docs, rows, post, status_bitmaps, tag_bitmaps, zdict, blocks, sources, vectors_bytes, embedder) -> list[SectionData]:
    table = np.zeros(len(rows), dtype=L.CHUNK_DTYPE)
    status_index = {s: i for i, s in enumerate(meta.statuses)}
    first_chunk = np.zeros(len(docs) + 1, dtype="<u4")
    for cid, r in enumerate(rows):
        d = docs[r.doc]
        table[cid] = (r.doc, r.chunk.start_line, r.chunk.end_line, status_index[d.status or default_status], 0)
        first_chunk[r.doc + 1] = cid + 1
    np.maximum.accumulate(first_chunk, out=first_chunk)
    sections = [
        SectionData(L.META, R.pack_meta(meta)),
        R.manifest_section(manifest),
        SectionData(L.CHUNKS, table.tobytes()),
        SectionData(L.CHUNK_LENGTHS, post.lengths.tobytes()),
        SectionData(L.DOC_PATHS, L.pack_blobs([d.path.encode("utf-8") for d in docs])),
        SectionData(L.DOC_FIRST_CHUNK, first_chunk.tobytes()),
        SectionData(L.TERM_HASHES, post.hashes.tobytes()),
        SectionData(L.TERM_STRINGS, L.pack_blobs([t.encode("utf-8") for t in post.terms])),
        SectionData(L.TERM_DOC_DF, post.doc_df.tobytes()),
        SectionData(L.POSTING_OFFSETS, post.offsets.tobytes()),
        SectionData(L.POSTING_IDS, post.ids.tobytes()),
        SectionData(L.POSTING_IMPACTS, post.impacts.tobytes()),
        SectionData(L.DOC_POSTING_OFFSETS, post.doc_offsets.tobytes()),
        SectionData(L.DOC_POSTING_IDS, post.doc_ids.tobytes()),
        SectionData(L.DOC_POSTING_IMPACTS, post.doc_impacts.tobytes()),
        SectionData(L.STATUS_BITMAPS, L.pack_blobs(status_bitmaps)),
        SectionData(L.TAG_BITMAPS, L.pack_blobs(tag_bitmaps)),
        SectionData(L.TEXT_DICT, zdict),
        SectionData(L.TEXT_BLOCKS, L.pack_blobs(blocks)),
        SectionData(L.DOC_SOURCES, L.pack_blobs(sources)),
    ]
    if vectors_bytes is not None:
        sections.append(SectionData(L.VECTORS, vectors_bytes))
        sections.append(SectionData(L.MODEL_EMBED, R.pack_model_files(embedder.files())))
    return sections
