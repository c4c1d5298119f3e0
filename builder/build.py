"""The build pipeline, one function a stage; ``build`` runs them in the order ARCHITECTURE.md
draws. Each stage takes and returns plain records (``Run`` carries the inputs and the report).

Input is read only in the read stage and output written only by the final atomic write. The
documents, the text blocks and the vector index are spilled to scratch files beside it as they
are made (builder/store.py, builder/stream.py), so memory is set by the HNSW graph, the postings
stage and one window of documents, not by the text. Everything written is derived
deterministically from the inputs: sorted vocabularies, stable chunk ids (documents sorted by
path, chunks in document order), a single-threaded HNSW build, and no wall-clock time in the
artifact.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import sys
import time
from contextlib import ExitStack, contextmanager
from collections import Counter, defaultdict
from itertools import chain, count
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from kb.common.errors import KbError, UsageError
from kb.formats import layout as L
from kb.formats import records as R
from kb.formats.analyzer import STOP_MARK, Analyzer
from kb.formats.artifact import FORMAT_VERSION, Scratch, SectionData, remove_stale_temporaries, write_artifact
from kb.formats.version import KB_VERSION

from . import shards
from .chunk import Chunk, chunk_document, estimate_tokens
from .config import BuildConfig
from .embedders import AUTO_MODEL, choose_embedder, embedder_files, english_leg, make_embedder, reranker_files
from .executors import LocalExecutor
from .query_model import PackedEmbedder, query_model_section
from .reuse import ReuseSource, open_reuse
from .filetypes import SOURCE_EXTENSIONS
from .ingest import Corpus, Document, read_corpus
from .language import document_languages
from .postings import PostingsSpill, SpilledPostings
from .store import DocumentStore
from .stream import ChunkColumns, TextBlocks, VectorIndex, pack_sources, windows
from .vectors import GivenVectors, check_dim, check_rows, check_values, open_vectors, source_of, whole_chunk

Progress = Callable[[str, int, int], None]


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
    embedder_en: str = ""  # the English leg's model, beside a multilingual one (format 5; "auto" only)
    truncated_chunks: int = 0  # chunks longer than the embedding model's window (their tail is not embedded)
    skipped: list = field(default_factory=list)
    excluded: int = 0
    warnings: list = field(default_factory=list)
    section_bytes: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    rss_mb: dict = field(default_factory=dict)  # stage -> MB by which it raised this process's peak RSS (all its runs): where the peak comes from
    artifact_bytes: int = 0
    executor: str = "local"  # where chunk, analyze and embed ran (builder/executors.py)
    shard: str | None = None  # "i/N" for a --shard build
    embed_nodes: int = 0  # machines that embedded (a Ray build: the nodes its actors ran on)
    reused_chunks: int = 0  # chunks whose vectors came from the reuse source (builder/reuse.py)
    embedded_chunks: int = 0  # chunks embedded by this build (by at least one dense leg)
    reuse_source: str | None = None  # the artifact whose vectors were reused; None: none was


@dataclass(slots=True)
class ChunkRow:
    doc: int
    chunk: Chunk


def _without_cyclic_gc(fn):
    """Run ``fn`` with the cyclic garbage collector off. A build makes millions of objects and no
    cycles worth collecting, and the collector would walk them over and over, in pauses.
    Reference counting still frees everything; the collector is back on when the build returns
    or fails."""

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


@dataclass
class Run:
    """One build's inputs and bookkeeping, handed to every stage (``clock``: ``with clock("stage"):``
    adds a block's time to ``rep``; ``scratch`` makes a scratch file beside the artifact)."""

    config: BuildConfig
    roots: list[Path]
    jsonl: list[Path]
    include: list[str]
    exclude: list[str]
    shard: tuple[int, int] | None
    rep: BuildReport
    clock: Callable
    progress: Progress
    executor: object  # builder/executors.py
    jobs: int | None
    scratch: Callable[[], Scratch]


@dataclass
class Models:
    """What ``choose_models`` decided: each document's language, the analyzer, and the models
    that embed the chunks here (None: none runs here) and whose files are packed."""

    doc_langs: list[str]
    analyzer: Analyzer
    embedder: object | None
    model_files: dict[str, bytes] | None  # model.embed; None: no vectors
    embedder_en: object | None  # the English leg's model (format 5)
    files_en: dict[str, bytes] | None  # model.embed.en
    rerank_files: dict[str, bytes] | None  # model.rerank
    loaded: bool  # a model runs in this process (not given vectors)


@dataclass
class Windows:
    """What ``index_windows`` built from every window of documents, not yet finished."""

    columns: ChunkColumns  # the chunk table, document paths and filters
    text: TextBlocks
    postings: PostingsSpill
    index: VectorIndex | None
    index_en: VectorIndex | None
    inputs: bytearray | None  # vectors.inputs: the digest of each chunk's embedded text; None: not embedded here


@dataclass
class Parts:
    """Everything the artifact's sections are made of, finished. ``search`` is meta's [search]
    table (kb.toml's as given): a stage inserted before ``describe`` may add to it."""

    columns: ChunkColumns
    post: SpilledPostings
    single: bool  # one chunk per document, in order
    filters: tuple  # statuses, status bitmaps, tag names, tag bitmaps (ChunkColumns.filters)
    text: tuple  # the zstd dictionary, the text blocks, the documents' sources
    vectors: tuple | None  # the HNSW image (VectorIndex.save) and its rows; None: no vectors
    vectors_en: tuple | None  # the English leg's
    search: dict
    inputs: bytearray | None  # vectors.inputs (Windows.inputs)


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
    vectors: Path | None = None,
    executor=None,
    shard: tuple[int, int] | None = None,
    reuse: Path | None = None,
) -> BuildReport:
    """Compile the inputs into the artifact ``out``; ``jobs`` worker processes chunk and analyze
    (default: one per core, at most 8; the artifact is the same for any number). ``vectors``: a
    .npy whose row i is the vector of record i of the one ``jsonl`` file (builder/vectors.py);
    each record is then one chunk, and ``config.embedding_model`` names the model that made them.
    ``executor`` runs the chunk, analyze and embed stages of each window (builder/executors.py;
    default: here, in ``jobs`` forked processes); the artifact is the same for every executor.
    ``shard=(i, n)`` builds only the documents of shard i of n (``shard_of``). ``reuse``: an
    artifact whose vectors are taken for the chunks whose embedded text is unchanged
    (builder/reuse.py; the artifact is the same bytes as without it).

    Scratch files lie beside ``out``; they are removed when the build ends, and a killed build's
    by the next build of ``out``. A stage that needs the finished parts (the chunk texts, the
    vectors, the graph) goes between ``finish`` and ``describe``."""
    rep = BuildReport()
    executor = executor or LocalExecutor(jobs)
    rep.executor = executor.name
    clock = _clock(rep.seconds, rep.rss_mb)
    rerank_files = reranker_files(rerank_choice(config))  # a bad --reranker fails before any work
    given = model_files = None
    if vectors is not None:
        with clock("vectors"):
            given, model_files = _given_vectors(Path(vectors), roots, jsonl, config, embedder)
    out = Path(out)
    remove_stale_temporaries(out)  # a killed build's scratch files
    with ExitStack() as stack:
        scratch = lambda: stack.enter_context(Scratch(out))  # noqa: E731
        run = Run(config, roots, jsonl, include, exclude, shard, rep, clock, progress or (lambda stage, done, total: None), executor, jobs, scratch)
        store = DocumentStore(scratch(), keep=None if shard is None else lambda path: shard_of(path, shard[1]) == shard[0])
        stack.callback(store.close)
        corpus = read(run, store, out, given, strict=strict, follow_symlinks=follow_symlinks)
        models = choose_models(run, store, embedder, given, model_files, rerank_files)
        source = reuse_source(run, models, reuse) if given is None else None
        if source is not None:
            stack.callback(source.close)  # also when a stage fails
        windows = index_windows(run, store, models, given, source)
        if source is not None:
            source.close()  # before the write replaces it
        given = None  # the given vectors are in the graph now: let them go before the postings stage
        parts = finish(run, windows, store, models)
        meta, manifest = describe(run, parts, models, corpus)
        sections = artifact_sections(run, parts, models, meta, manifest)
        with clock("write"):
            rep.artifact_bytes = write_artifact(out, sections, version=meta.format_version)
        rep.section_bytes = {s.name: s.size for s in sections}
    return rep


def read(run: Run, store: DocumentStore, out: Path, given: GivenVectors | None, *, strict: bool, follow_symlinks: bool) -> Corpus:
    """The read stage: every input document into ``store`` (sealed), and what was read and
    skipped; BuildError when nothing (or, ``strict``, not everything) can be indexed."""
    rep = run.rep
    with run.clock("read"):
        corpus = read_corpus(run.roots, run.jsonl, run.include, run.exclude, skip_paths={out}, follow_symlinks=follow_symlinks, documents=store)
        contexts_unmatched = unmatched_contexts(run.config.contexts, store.paths())
        store.seal()
    if given is not None:
        check_rows(given, corpus.records, Path(run.jsonl[0]))
        corpus.sources.append(source_of(given, corpus.root))
    rep.files_read = len(corpus.sources)
    rep.skipped = [(s.path, s.reason) for s in corpus.skipped]
    rep.excluded = corpus.excluded
    if strict and corpus.skipped:
        first = corpus.skipped[0]
        raise BuildError(f"--strict: {len(corpus.skipped)} input(s) skipped, first {first.path}: {first.reason}")
    if not store.seen:
        raise BuildError("nothing to index: no readable documents in the inputs")
    if run.shard is not None:
        i, n = run.shard
        if not len(store):
            raise BuildError(f"shard {i}/{n} holds none of the corpus's {store.seen} documents; build fewer shards")
        rep.shard = f"{i}/{n}"
    rep.warnings.extend(contexts_unmatched)
    return corpus


def rerank_choice(config: BuildConfig) -> str:
    """The cross-encoder to pack: "auto" packs the shipped one only when the artifact's searches
    rerank ([search] rerank = true) and have vectors to rerank hybrid results of; otherwise what
    --reranker or [embedding] reranker names. The shipped model did not improve held-out sets and
    is 17 MiB, most of a small artifact (README, [embedding] reranker)."""
    if config.reranker != "auto":
        return config.reranker
    return "default" if config.search.get("rerank") is True and config.embedding_model != "none" else "none"


def choose_models(run: Run, store: DocumentStore, embedder, given: GivenVectors | None, model_files: dict | None, rerank_files: dict | None) -> Models:
    """The language stage, then what it decides: each document's language (the analyzer's
    languages) and, for [embedding] model = "auto", the embedding model and the English leg."""
    config, rep = run.config, run.rep
    with run.clock("language"):
        # the votes in forks beside this process, unless a model already runs here or the
        # shards go to a cluster (Ray's threads do not survive a fork)
        forks = run.executor.workers() if run.executor.name == "local" and embedder is None else 1
        try:
            doc_langs = document_languages(store, config.languages, jobs=forks, sizes=store.text_sizes())
        except shards.WorkerDied as e:
            raise BuildError(str(e)) from None
    rep.languages = dict(sorted(Counter(doc_langs).items()))
    model = choose_embedder(rep.languages) if config.embedding_model == AUTO_MODEL else config.embedding_model
    rep.embedder = model
    if given is None and embedder is None:
        embedder = make_embedder(model, config.quantization)  # None for "none"
    if given is None and embedder is not None:
        model_files = embedder.files()
    # The English leg: MiniLM over every chunk beside e5, for queries in alphabetic scripts
    # (runtime/search.py english_query), when "auto" picked e5 for a corpus with English in it.
    # Not for a --shard build: a set cannot combine English legs yet (runtime/collection.py).
    rep.embedder_en = english_leg(rep.languages, model) if config.embedding_model == AUTO_MODEL and given is None and run.shard is None else ""
    embedder_en = make_embedder(rep.embedder_en, config.quantization) if rep.embedder_en else None
    files_en = embedder_en.files() if embedder_en is not None else None
    analyzer = Analyzer.for_languages(rep.languages).prepare()
    return Models(doc_langs, analyzer, embedder, model_files, embedder_en, files_en, rerank_files, loaded=given is None and embedder is not None)


def reuse_source(run: Run, models: Models, path: Path | None) -> ReuseSource | None:
    """The reuse stage: the artifact at ``path`` checked as a source of vectors for this build
    (builder/reuse.py), or None, with a warning saying why when there was one to check."""
    if path is None or models.model_files is None or not models.loaded:
        return None
    legs = {"main": R.pack_model_files(models.model_files), "en": R.pack_model_files(models.files_en) if models.files_en is not None else None}
    with run.clock("reuse"):
        source, why = open_reuse(Path(path), models.analyzer.params(), legs, run.config.vectors.dtype)
    if source is None:
        run.rep.warnings.append(why)
    else:
        run.rep.reuse_source = str(path)
    return source


def index_windows(run: Run, store: DocumentStore, models: Models, given: GivenVectors | None, source: ReuseSource | None = None) -> Windows:
    """The stages that run a window of documents at a time (builder/stream.py windows): chunk
    and analyze (``chunk_and_analyze``), then each window's postings, chunk table and filters
    (tags), text blocks, vectors (embed, or the given ones, or ``source``'s for the texts it
    embedded before: ``leg_vectors``) and their HNSW graph."""
    config, rep, clock, progress, executor, jobs = run.config, run.rep, run.clock, run.progress, run.executor, run.jobs
    embedder, embedder_en, analyzer, doc_langs = models.embedder, models.embedder_en, models.analyzer, models.doc_langs
    exact = models.loaded and config.chunking.exact_tokens
    job = ShardJob(embedder.count_tokens if exact else estimate_tokens, config.chunking, analyzer.languages, whole=given is not None)
    # Chunk and analyze run on the executor, except here in one process when exact token
    # counts need the model loaded here, or when a local build embeds: forks beside a loaded
    # model buy little (a build that embeds is bound by the embedding). The artifact is the
    # same either way.
    stage = LocalExecutor(1) if exact or (models.loaded and executor.name == "local") else executor
    w = Windows(
        ChunkColumns(config.statuses, config.default_status, config.tags),
        TextBlocks(run.scratch(), run.scratch()),
        PostingsSpill(config.bm25, run.scratch),
        None if models.model_files is None else VectorIndex(given.dim if given is not None else embedder.dim, config.vectors, run.scratch),
        None if embedder_en is None else VectorIndex(embedder_en.dim, config.vectors, run.scratch),
        bytearray() if given is None and embedder is not None else None,
    )
    for lo, hi in windows(store.text_sizes()):
        with clock("read"):
            docs = [store[i] for i in range(lo, hi)]
        rows, fields = chunk_and_analyze(docs, doc_langs[lo:hi], job, analyzer, stage, rep.seconds, _shifted(progress, lo, len(store)), jobs if stage is executor else None)
        with clock("postings"):
            w.postings.add(fields, np.fromiter((lo + r.doc for r in rows), dtype=np.int64, count=len(rows)))
        del fields
        with clock("tags"):
            first_chunk = len(w.columns)
            w.columns.add(docs, rows, lo)
        with clock("text"):
            w.text.add(docs, rows)
        if given is not None:
            with clock("vectors"):
                vecs = given.take(np.fromiter((docs[r.doc].record for r in rows), dtype=np.int64, count=len(rows)))
        elif embedder is not None:
            with clock("embed"):
                texts = embed_texts(docs, rows)
                digests = b"".join([L.input_digest(t) for t in texts])
                w.inputs += digests
                old = source.find(digests) if source is not None else None
                vecs, truncated, nodes, fresh = leg_vectors(texts, old, source, "main", embedder, _shifted(progress, first_chunk, first_chunk + len(rows)), executor)
            rep.truncated_chunks += truncated
            rep.embed_nodes = max(rep.embed_nodes, nodes)  # the most machines any window's embedding used
        if w.index is not None:
            with clock("hnsw"):
                w.index.add(vecs)
        if w.index_en is not None:
            with clock("embed-en"):
                vecs, _, _, fresh_en = leg_vectors(texts, old, source, "en", embedder_en, _shifted(_renamed(progress, "embed (English leg)"), first_chunk, first_chunk + len(rows)), executor)
                fresh |= fresh_en
            with clock("hnsw"):
                w.index_en.add(vecs)
        if w.inputs is not None:
            embedded = int(np.count_nonzero(fresh))
            rep.embedded_chunks += embedded
            rep.reused_chunks += len(rows) - embedded
            if rep.reused_chunks:
                progress("reused", rep.reused_chunks, first_chunk + len(rows))
        del docs, rows
    rep.documents, rep.chunks = len(store), len(w.columns)
    return w


def finish(run: Run, w: Windows, store: DocumentStore, models: Models) -> Parts:
    """The stages that finish what the windows built: the HNSW graphs (saved to scratch), the
    text blocks and documents' sources (the store is closed after them), the postings (merged
    by term) and the status and tag bitmaps."""
    rep, clock, progress = run.rep, run.clock, run.progress
    vectors = vectors_en = None
    if w.index is not None:
        with clock("hnsw"):
            vectors = (w.index.save(run.scratch, progress), w.index.rows)
        rep.vectors = w.index.count
    if w.index_en is not None:
        with clock("hnsw"):
            vectors_en = (w.index_en.save(run.scratch, _renamed(progress, "graph (English leg)")), w.index_en.rows)
    threads = 1 if models.loaded else (run.jobs or shards.default_jobs())  # text compression
    with clock("text"):
        zdict, blocks = w.text.finish(threads=threads)
        sources = pack_sources(store, zdict, run.scratch(), threads=threads)
    store.close()
    with clock("postings"):
        chunk_doc = w.columns.chunk_doc()
        post = w.postings.finish(chunk_doc, rep.documents, models.doc_langs)
        single = rep.chunks == rep.documents and bool(np.array_equal(chunk_doc, np.arange(rep.chunks)))
        del chunk_doc
    w.postings = None
    rep.terms = len(post.terms)
    with clock("tags"):
        filters = w.columns.filters()
    rep.warnings.extend(f"unknown status {s!r} (kept; known: {', '.join(run.config.statuses)})" for s in w.columns.unknown)
    return Parts(w.columns, post, single, filters, (zdict, blocks, sources), vectors, vectors_en, run.config.search, w.inputs)


def describe(run: Run, parts: Parts, models: Models, corpus: Corpus) -> tuple[R.Meta, R.Manifest]:
    """The records stage: meta (what the runtime reads at open) and the manifest (how the
    artifact was built), from the finished parts."""
    config, rep, post = run.config, run.rep, parts.post
    statuses, _, tag_names, _ = parts.filters
    embed_card = _card(models.model_files)
    rerank_card = _card(models.rerank_files)
    card_en = _card(models.files_en)
    # 5: an English leg; 4: BM25 statistics per language; else the format 3 bytes as before
    version = FORMAT_VERSION if card_en is not None else 4 if post.doc_n is not None else 3
    meta = R.Meta(
        kb_version=KB_VERSION,
        format_version=version,
        counts=R.Counts(rep.documents, rep.chunks, len(post.terms), rep.vectors),
        analyzer=models.analyzer.params() | {"documents": rep.languages},
        bm25=config.bm25.params() | {"avg_length": float(post.lengths.mean()) if rep.chunks else 0.0, "one_chunk_per_document": parts.single} | ({"languages": post.language_stats} if post.language_stats else {}),
        embedder=embed_card,
        reranker=rerank_card,
        vectors={"metric": "cos", **{k: v for k, v in vars(config.vectors).items() if k != "threads"}} if models.model_files is not None else None,
        tag_names=tuple(tag_names),
        tag_descriptions={t: config.tags.get(t, "") for t in tag_names},
        statuses=tuple(statuses),
        excluded_statuses=tuple(config.excluded_statuses),
        search=parts.search,
        text_block=L.TEXT_BLOCK,
        source="jsonl" if run.jsonl and not run.roots else "files",
        path_contexts=config.contexts,
        embedder_en=card_en,
    )
    manifest = R.Manifest(
        root=corpus.root,
        kb_version=KB_VERSION,
        config=config.to_dict(),
        config_file=config.source,
        sources=tuple(R.Source(s.path, s.size, s.mtime_ns, s.sha256) for s in sorted(corpus.sources, key=lambda s: s.path)),
        jsonl=tuple(Path(j).name for j in run.jsonl),
        skipped=tuple((s.path, s.reason) for s in corpus.skipped),
        excluded=corpus.excluded,
        include=tuple(run.include),
        exclude=tuple(run.exclude),
        models={"embedder": embed_card, "reranker": rerank_card} | ({"embedder_en": card_en} if card_en is not None else {}),
        analyzer=models.analyzer.params() | {"documents": rep.languages},
        file_types=tuple(sorted(SOURCE_EXTENSIONS)),
    )
    return meta, manifest


def artifact_sections(run: Run, parts: Parts, models: Models, meta: R.Meta, manifest: R.Manifest) -> list[SectionData]:
    """Every section of the artifact, in the order written: the records, the lexical index, the
    filters and texts (``assemble``), then the vectors, their models and the query encoders'
    sections (checked against the models: ``query_model_section``), and the reranker."""
    sections = assemble(meta, manifest, parts)
    for built, files, names in ((parts.vectors, models.model_files, (L.VECTORS, L.VECTOR_ROWS, L.MODEL_EMBED)), (parts.vectors_en, models.files_en, (L.VECTORS_EN, L.VECTOR_ROWS_EN, L.MODEL_EMBED_EN))):
        if built is not None:
            (image, rows), (vectors_name, rows_name, model_name) = built, names
            sections += [SectionData(vectors_name, (image,)), *([SectionData(rows_name, rows)] if rows is not None else []), SectionData(model_name, R.pack_model_files(files))]
    if parts.vectors is not None and parts.inputs is not None:
        sections.append(SectionData(L.VECTOR_INPUTS, bytes(parts.inputs)))
    if parts.vectors is not None:
        with run.clock("query-model"):  # a --vectors build's model is loaded only for the self-check
            embedder = models.embedder  # None for a --vectors build: the self-check loads the packed model
            reference = embedder if embedder is not None else PackedEmbedder(models.model_files)
            legs = [(reference, L.MODEL_EMBED, L.MODEL_QUERY)] + ([(models.embedder_en, L.MODEL_EMBED_EN, L.MODEL_QUERY_EN)] if parts.vectors_en is not None else [])
            for model_of, embed_name, query_name in legs:
                query, why = query_model_section(model_of, next(s.data for s in sections if s.name == embed_name), embedder is not None)
                if query is not None:
                    sections.append(SectionData(query_name, query))
                elif why:
                    run.rep.warnings.append(why)
    if models.rerank_files is not None:
        sections.append(SectionData(L.MODEL_RERANK, R.pack_model_files(models.rerank_files)))
    return sections


def _given_vectors(path: Path, roots, jsonl, config: BuildConfig, embedder) -> tuple[GivenVectors, dict[str, bytes]]:
    """The checked ``--vectors`` array and the files of the model that made them (its card gives
    the width, checked before any other work; the model is never run at build time). Every
    refusal is a usage error."""
    if roots or len(jsonl) != 1:
        raise UsageError("--vectors needs exactly one --jsonl FILE and no CORPUS folder: row i of the array is the vector of record i of that file")
    if config.embedding_model == AUTO_MODEL:
        raise UsageError("--vectors needs --embedder NAME, the model that made the vectors (it embeds the queries)")
    if config.embedding_model == "none":
        raise UsageError("--vectors needs the model that made them; --embedder none builds no vectors")
    given = open_vectors(path)
    files = embedder.files() if embedder is not None else embedder_files(config.embedding_model, config.quantization)
    check_dim(given, config.embedding_model, R.ModelCard.from_json(files[R.CARD_FILE]).dim)
    check_values(given)
    return given, files


def shard_of(path: str, n: int) -> int:
    """The shard (0..n-1) of the document at ``path``: the first 8 bytes of its path's BLAKE2b
    digest, little-endian, modulo n. A document's shard depends on its path alone, so adding or
    removing a document changes only its own shard; documents keep their sorted order in it."""
    return int.from_bytes(hashlib.blake2b(path.encode("utf-8"), digest_size=8).digest(), "little") % n


def unmatched_contexts(contexts: dict, paths: Iterable[str]) -> list[str]:
    """A warning for each [contexts] prefix no document path starts with. Not an error: the
    kb.toml may describe a folder the corpus does not hold yet; the prefix is kept, unused."""
    from bisect import bisect_left

    if not contexts:
        return []
    paths = sorted(paths)  # the paths under a prefix are the ones from bisect_left on

    def matched(p: str) -> bool:
        i = bisect_left(paths, p)
        return i < len(paths) and paths[i].startswith(p)

    return [f"[contexts] {p!r} matches no document path; no result will carry its description" for p in contexts if not matched(p)]


def _renamed(progress: Progress, stage: str) -> Progress:
    """``progress`` reporting under ``stage``'s name."""
    return lambda _, d, t: progress(stage, d, t)


def _shifted(progress: Progress, done: int, total: int) -> Progress:
    """``progress`` for a window: its counts start at ``done`` and end at ``total``."""
    return lambda stage, d, t: progress(stage, done + d, total)


def _clock(into: dict, rss: dict | None = None):
    """``with clock("stage"):`` adds the block's wall time to ``into["stage"]``, and to
    ``rss["stage"]`` the MB by which the block raised the process's peak RSS."""

    @contextmanager
    def stage(name: str):
        t = time.perf_counter()
        peak = _peak_rss_mb() if rss is not None else 0.0
        try:
            yield
        finally:
            into[name] = into.get(name, 0.0) + time.perf_counter() - t
            if rss is not None:
                rss[name] = round(rss.get(name, 0.0) + _peak_rss_mb() - peak, 1)

    return stage


def _peak_rss_mb() -> float:
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)  # bytes on macOS, KiB on Linux


def chunk_and_analyze(docs, doc_langs, job: ShardJob, analyzer, executor, seconds: dict, progress: Progress, jobs: int | None = None) -> tuple[list[ChunkRow], Fields]:
    """The chunk and analyze stages of a window, over contiguous document shards on ``executor``
    (up to ``jobs`` of them; default: the executor's workers); ``job`` says how a document is cut
    into chunks. ``seconds["chunk"]`` gets the chunking of the first shard when it runs here, and
    ``seconds["analyze"]`` the rest of the wall time (its analysis, waiting for the other shards,
    merging), so the stage seconds still add up to the wall time."""
    cuts = shards.bounds([len(d.text) for d in docs], jobs or executor.workers())
    start = time.perf_counter()
    chunked = {"chunk": 0.0}

    def shard(lo: int, hi: int):  # for a forking executor: runs here (shard 0) or in a fork
        if lo == 0:  # this process: it reports progress and returns its rows as they are
            return job.chunk(docs[:hi], doc_langs[:hi], analyzer, lambda i: progress("chunk", i + 1, len(docs)), chunked, start)
        return job.run(docs[lo:hi], doc_langs[lo:hi], lo, analyzer)

    try:
        parts = executor.map_shards(shard, cuts, docs, doc_langs, job)
    except KbError as e:
        raise BuildError(str(e)) from None
    rows = as_rows(parts[0][0])  # shard 0 ran here (ChunkRow) or elsewhere (tuples)
    for packed, _ in parts[1:]:
        rows.extend(unpack_rows(packed))
    fields = merge_fields([f for _, f in parts]) if len(parts) > 1 else parts[0][1]
    progress("chunk", len(docs), len(docs))
    seconds["chunk"] = seconds.get("chunk", 0.0) + chunked["chunk"]
    seconds["analyze"] = seconds.get("analyze", 0.0) + time.perf_counter() - start - chunked["chunk"]
    return rows, fields


@dataclass(frozen=True)
class ShardJob:
    """What every chunk + analyze shard needs besides its documents, for an executor that runs
    shards elsewhere (a Ray task gets this and its shard's documents): the token counter, the
    [chunking] options, the analyzer's languages (its stemmers do not pickle: rebuilt there),
    and ``whole``: each document is one chunk as given (a ``--vectors`` build, ``whole_chunk``).
    Plain values, not a chunking closure, so that it pickles."""

    count: Callable[[list[str]], list[int]]
    chunking: object  # ChunkOptions
    languages: tuple[str, ...]
    whole: bool = False

    def chunk(self, docs, doc_langs, analyzer: Analyzer, chunked=None, seconds: dict | None = None, start: float = 0.0) -> tuple[list[ChunkRow], Fields]:
        """Chunk and analyze ``docs`` (whole documents, numbered from 0 here). ``chunked(i)`` is
        called after document i; ``seconds["chunk"]``, when given, gets the chunking time since ``start``."""
        chunker = whole_chunk if self.whole else functools.partial(chunk_document, count=self.count, opts=self.chunking)
        rows = []
        for i, d in enumerate(docs):
            rows.extend(ChunkRow(i, c) for c in chunker(d))
            if chunked is not None:
                chunked(i)
        if seconds is not None:
            seconds["chunk"] = time.perf_counter() - start
        return rows, analyze(docs, rows, analyzer, doc_langs)

    def run(self, docs, doc_langs, first: int, analyzer: Analyzer | None = None) -> tuple[list[tuple], Fields]:
        """``chunk`` for a shard that runs elsewhere (a fork, a Ray task: documents ``first``,
        ``first + 1``, ... of the window), its rows packed to travel back; the analyzer is rebuilt
        where none is at hand (a Ray task)."""
        rows, fields = self.chunk(docs, doc_langs, Analyzer.for_languages(self.languages).prepare() if analyzer is None else analyzer)
        return pack_rows(rows, first), fields


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
    variants: list[tuple[str, str]] = field(default_factory=list)  # (term, a word it stands for besides itself): layout.pack_surfaces


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
    variants: list[tuple[str, str]] = []
    total = int(offsets[-1])
    token_lang = np.repeat(np.asarray(piece_lang, dtype=np.int8), np.diff(offsets)) if multi else None
    ids = np.empty(total if multi else 0, dtype=np.int32)  # int32: half the bytes to send back from a worker
    for li, lang in enumerate(langs):
        mine = [pieces[p] for p in range(len(pieces)) if piece_lang[p] == li] if multi else pieces
        seen = defaultdict(count().__next__)
        n = sum(map(len, mine)) if multi else total
        word_ids = np.fromiter(map(seen.__getitem__, chain.from_iterable(mine)), dtype=np.int64, count=n)
        words = [w.decode() if w.__class__ is bytes else w for w in seen]
        finished = analyzer.finish(words, lang)
        local = np.fromiter((term_id.setdefault(t, len(term_id)) for t in finished), dtype=np.int32, count=len(finished))
        # the words a term stands for besides itself (a stopword term "~w" stands for w alone)
        variants += [(t, w) for w, t in zip(words, finished) if w != t and t[0] != STOP_MARK]
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
        variants,
    )


class FieldsMerger:
    """One Fields from the analyses of consecutive chunk ranges, added in order: vocabularies
    unioned, term ids, pieces and chunks renumbered as each part arrives (only distinct terms go
    through Python; the rest is numpy). ``result`` joins the parts into arrays allocated once,
    freeing each part as it is copied, so joining costs one part more than the result."""

    def __init__(self):
        self._seen = defaultdict(count().__next__)
        self._parts: list[tuple] = []
        self._chunks = self._pieces = self._tokens = 0
        self._variants: list[tuple[str, str]] = []

    def add(self, f: Fields) -> None:
        self._variants += f.variants
        known = len(self._seen)
        remap = np.fromiter(map(self._seen.__getitem__, f.vocabulary), dtype=np.int64, count=len(f.vocabulary))
        self._parts.append((
            f.hashes[remap >= known],  # the terms this part adds, in the order they got ids
            np.append(remap, -1).astype(np.int32)[f.ids],  # -1 (a dropped stopword) stays -1
            f.offsets[1:] + self._tokens,
            f.use_chunk + self._chunks,
            f.use_piece + self._pieces,
            f.use_field,
        ))  # fmt: skip
        self._chunks += f.chunks
        self._pieces += len(f.offsets) - 1
        self._tokens += int(f.offsets[-1])

    def result(self) -> Fields:
        parts, self._parts = self._parts, []
        sizes = [[len(a) for a in p] for p in parts]
        joined = [np.empty(sum(s[k] for s in sizes) + (k == 2), dtype=np.int32 if k == 1 else np.int8 if k == 5 else np.uint64 if k == 0 else np.int64) for k in range(6)]
        joined[2][0] = 0
        at = [0, 0, 1, 0, 0, 0]
        while parts:
            for k, a in enumerate(parts.pop(0)):
                joined[k][at[k] : at[k] + len(a)] = a
                at[k] += len(a)
        hashes, ids, offsets, use_chunk, use_piece, use_field = joined
        return Fields(list(self._seen), hashes.astype(L.HASH_DTYPE, copy=False), ids, offsets, use_chunk, use_piece, use_field, self._chunks, self._variants)


def merge_fields(parts: list[Fields]) -> Fields:
    """One Fields from the analyses of consecutive shards (FieldsMerger)."""
    merger = FieldsMerger()
    for f in parts:
        merger.add(f)
    return merger.result()


def embed_text(doc: Document, chunk: Chunk, first: bool) -> str:
    """What the embedder sees: title, section path, (description once), then the chunk text."""
    head = [doc.title]
    if first and doc.description:
        head.append(doc.description)
    if chunk.section:
        head.append(chunk.section)
    return "\n".join(head) + "\n\n" + chunk.text


def embed_texts(docs: list[Document], rows: list[ChunkRow]) -> list[str]:
    """What the embedder sees of each chunk of ``rows`` (``embed_text``)."""
    texts = []
    prev = -1
    for r in rows:
        texts.append(embed_text(docs[r.doc], r.chunk, r.doc != prev))
        prev = r.doc
    return texts


def leg_vectors(texts: list[str], old: np.ndarray | None, source: ReuseSource | None, leg: str, embedder, progress: Progress, executor) -> tuple[np.ndarray, int, int, np.ndarray]:
    """Each text's vector in dense leg ``leg``: ``source``'s where ``old`` (each text's chunk in
    the source, -1: none) names one and the source has the leg, else embedded (``embed_chunks``).
    Also how many texts exceed the model's window (the reused ones too), how many machines
    embedded, and which texts were embedded."""
    fresh = np.ones(len(texts), dtype=bool) if old is None or not source.has(leg) else old < 0
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    truncated = nodes = 0
    if not fresh.all():
        out[~fresh] = source.vectors(leg, old[~fresh])
        window = embedder.max_tokens - 2  # [CLS] and [SEP], as the executors count
        truncated = sum(n > window for n in embedder.count_tokens([texts[i] for i in np.flatnonzero(~fresh)]))
    todo = np.flatnonzero(fresh)
    if len(todo):
        vecs, more, nodes = embed_chunks([texts[i] for i in todo], embedder, progress, executor=executor)
        out[todo] = vecs
        truncated += more
    return out, truncated, nodes, fresh


def embed_chunks(texts: list[str], embedder, progress: Progress, batch: int = 64, executor=None) -> tuple[np.ndarray, int, int]:
    """Embeddings of ``texts``, how many exceed the model's window, and how many machines
    embedded. The batches are cut here, the same for every executor (the embedder pads nothing,
    so a text's vector does not depend on its batch: models/encoders.py ``embed``)."""
    # Sort by length so batches hold similar lengths (less padding), then restore order.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    cuts = [order[s : s + batch] for s in range(0, len(order), batch)]
    result = (executor or LocalExecutor()).embed([[texts[i] for i in idx] for idx in cuts], embedder, progress)
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for idx, vecs in zip(cuts, result.vectors):
        out[idx] = vecs
    return out, result.truncated, result.nodes


def assemble(meta: R.Meta, manifest: R.Manifest, parts: Parts) -> list[SectionData]:
    """The sections every artifact has: meta, the manifest, the chunk table, the lexical index,
    the filters, the texts, the documents' sources and the chunk keys."""
    columns, post, (zdict, blocks, sources) = parts.columns, parts.post, parts.text
    _, status_bitmaps, _, tag_bitmaps = parts.filters
    return [
        SectionData(L.META, R.pack_meta(meta)),
        R.manifest_section(manifest),
        SectionData(L.CHUNKS, columns.table()),
        SectionData(L.CHUNK_LENGTHS, post.lengths.tobytes()),
        SectionData(L.DOC_PATHS, columns.doc_paths()),
        SectionData(L.DOC_FIRST_CHUNK, columns.first_chunk(meta.counts.documents)),
        SectionData(L.TERM_HASHES, post.hashes.tobytes()),
        SectionData(L.TERM_STRINGS, L.pack_blobs([t.encode("utf-8") for t in post.terms])),
        SectionData(L.TERM_SURFACES, L.pack_surfaces(post.terms, post.variants)),
        SectionData(L.TERM_DOC_DF, post.doc_df.tobytes()),
        *([SectionData(L.TERM_DOC_N, post.doc_n.tobytes())] if post.doc_n is not None else []),
        SectionData(L.POSTING_OFFSETS, post.offsets.tobytes()),
        SectionData(L.POSTING_IDS, post.ids),
        SectionData(L.POSTING_IMPACTS, post.impacts),
        SectionData(L.DOC_POSTING_OFFSETS, post.doc_offsets.tobytes()),
        SectionData(L.DOC_POSTING_IDS, post.doc_ids),
        SectionData(L.DOC_POSTING_IMPACTS, post.doc_impacts),
        SectionData(L.STATUS_BITMAPS, L.pack_blobs(status_bitmaps)),
        SectionData(L.TAG_BITMAPS, L.pack_blobs(tag_bitmaps)),
        SectionData(L.TEXT_DICT, zdict),
        SectionData(L.TEXT_BLOCKS, blocks),
        SectionData(L.DOC_SOURCES, sources),
        SectionData(L.CHUNK_KEYS, bytes(columns.keys)),
    ]
