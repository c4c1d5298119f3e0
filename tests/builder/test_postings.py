"""The vectorised analyze -> postings path against a plain per-chunk reference, sharded or not."""

from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import given, settings, strategies as st

from kb.builder import build as B
from kb.builder import shards
from kb.builder.chunk import Chunk
from kb.builder.config import BuildConfig
from kb.builder.ingest import Document
from kb.builder.postings import chunk_postings, doc_lengths, doc_postings, impacts_of, sorted_vocabulary, stop_flags
from kb.formats import layout as L
from kb.formats.analyzer import STOP_MARK, Analyzer
from kb.formats.bm25 import BM25Params, quantize_impacts, tf_component

from corpora import SAMPLE, build_hash


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


def build_postings(f: B.Fields, config: BuildConfig, chunk_doc: np.ndarray | None = None, n_docs: int | None = None) -> Postings:
    """The postings of the whole corpus at once, in memory: the reference the build's
    ``PostingsSpill`` (a block at a time) must give the same bytes as.
    Stopword terms (``STOP_MARK`` + word) get postings but count in no chunk's length.
    ``chunk_doc``: each chunk's document, for the document frequencies and impacts (None: one
    per chunk); ``n_docs``: the documents (default: the highest in ``chunk_doc`` + 1)."""
    p = config.bm25
    if chunk_doc is None:
        chunk_doc = np.arange(f.chunks, dtype=np.int64)
    if n_docs is None:
        n_docs = int(chunk_doc.max()) + 1 if len(chunk_doc) else 0
    terms, hashes, order = sorted_vocabulary(f.vocabulary, f.hashes)
    rank = np.empty(len(terms) + 1, dtype=np.int64)  # first-seen id -> dictionary id; -1 stays -1
    rank[order] = np.arange(len(terms))
    rank[-1] = -1
    post_term, post_chunk, tf, lengths = chunk_postings(rank[f.ids], f.offsets, f.use_chunk, f.use_piece, f.use_field, f.chunks, stop_flags(terms), p)
    df = np.bincount(post_term, minlength=len(terms))
    post_doc = chunk_doc[post_chunk]
    doc_start, doc_tf = doc_postings(post_term, post_doc, tf)
    doc_df = np.bincount(post_term[doc_start], minlength=len(terms))
    if np.any(df == 0):  # terms whose every occurrence had weight 0 have no postings: drop them
        live = np.flatnonzero(df > 0)
        terms, hashes, df, doc_df = [terms[i] for i in live], hashes[live], df[live], doc_df[live]
    offsets = np.zeros(len(terms) + 1, dtype=L.OFFSET_DTYPE)
    np.cumsum(df, out=offsets[1:])
    avg = float(lengths.mean()) if len(lengths) else 0.0
    impacts = impacts_of(tf, lengths[post_chunk], avg, p)
    doc_ids = post_doc[doc_start]
    doc_len, doc_avg = doc_lengths(chunk_doc, lengths, n_docs)
    doc_impacts = impacts_of(doc_tf, doc_len[doc_ids], doc_avg, p)
    doc_offsets = np.zeros(len(terms) + 1, dtype=L.OFFSET_DTYPE)
    np.cumsum(doc_df, out=doc_offsets[1:])
    return Postings(
        terms, hashes, offsets, post_chunk.astype(L.ID_DTYPE), tf, impacts, lengths, doc_df.astype(L.ID_DTYPE),
        doc_offsets, doc_ids.astype(L.ID_DTYPE), doc_impacts,
    )  # fmt: skip

WORDS = ["the", "die", "Häuser", "running", "cell", "Cells", "nas", "backup", "ß", "北京大学", "x" * 70, "e.g.", "café", "the"]
text = st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)
docs = st.lists(st.tuples(text, text, st.lists(st.tuples(text, text), min_size=1, max_size=4)), min_size=1, max_size=6)


def reference(docs, rows, analyzer, p, langs):
    """Per chunk: tf over every term (stopword terms too), length over the non-stopword terms;
    and each term's documents."""
    tf = defaultdict(float)
    term_docs = defaultdict(set)
    lengths = []
    prev = -1
    for cid, r in enumerate(rows):
        d = docs[r.doc]
        fields = [(r.chunk.text, 1.0), (r.chunk.section, p.section_weight), (d.title, p.title_weight)]
        if r.doc != prev and d.description:
            fields.append((d.description, 1.0))
        prev = r.doc
        n = 0.0
        for s, w in fields:
            terms = analyzer.finish(analyzer.words(s), langs[r.doc] if langs else None)
            n += w * sum(not t.startswith(STOP_MARK) for t in terms)
            for t in terms:
                if w > 0:
                    tf[t, cid] += w
                    term_docs[t].add(r.doc)
        lengths.append(n)
    return tf, lengths, {t: len(ds) for t, ds in term_docs.items()}


BILINGUAL = Analyzer.for_languages(["de", "en"])


@settings(max_examples=60, deadline=None)
@given(docs, st.sampled_from([(Analyzer(), None), (BILINGUAL, "en"), (BILINGUAL, "mixed"), (Analyzer(max_term_chars=3), None)]), st.sampled_from([0.0, 1.5]))
def test_postings_equal_a_per_chunk_reference_sharded_or_not(spec, analysis, section_weight):
    analyzer, how = analysis
    documents = [Document(f"d{i}", f"d{i}", "text", title, "", description=desc) for i, (title, desc, _) in enumerate(spec)]
    langs = None if how is None else [("en", "de")[i % 2] if how == "mixed" else how for i in range(len(documents))]
    rows = [B.ChunkRow(i, Chunk(sec, body, 1, 1)) for i, (_, _, chunks) in enumerate(spec) for sec, body in chunks]
    cfg = replace(BuildConfig(), bm25=BM25Params(section_weight=section_weight))
    want_tf, want_len, want_df = reference(documents, rows, analyzer, cfg.bm25, langs)
    chunk_doc = np.array([r.doc for r in rows])

    whole = B.analyze(documents, rows, analyzer, langs)
    cut = next((i for i, r in enumerate(rows) if r.doc >= len(documents) // 2), 0)  # two shards of whole documents, as workers get them
    halves = B.merge_fields([B.analyze(documents, rows[:cut], analyzer, langs), B.analyze(documents, rows[cut:], analyzer, langs)])
    want_imp, want_doc_imp = reference_impacts(want_tf, want_len, chunk_doc, len(documents), cfg.bm25)
    for fields in (whole, halves):
        post = build_postings(fields, cfg, chunk_doc, len(documents))
        got, got_imp, got_doc_imp = {}, {}, {}
        for i, term in enumerate(post.terms):
            a, b = post.offsets[i], post.offsets[i + 1]
            assert np.all(np.diff(post.ids[a:b].astype(np.int64)) > 0)  # chunk ids ascending
            got.update({(term, int(c)): float(w) for c, w in zip(post.ids[a:b], post.tf[a:b])})
            got_imp.update({(term, int(c)): int(q) for c, q in zip(post.ids[a:b], post.impacts[a:b])})
            a, b = post.doc_offsets[i], post.doc_offsets[i + 1]
            got_doc_imp.update({(term, int(d)): int(q) for d, q in zip(post.doc_ids[a:b], post.doc_impacts[a:b])})
        assert got == {k: v for k, v in want_tf.items()}
        assert np.allclose(post.lengths, want_len)
        assert dict(zip(post.terms, post.doc_df.tolist())) == want_df
        assert list(post.hashes) == sorted(post.hashes)
        # impacts: one rounding step at most from the reference (its float sums differ in the last bits)
        assert got_imp.keys() == want_imp.keys() and all(abs(got_imp[k] - want_imp[k]) <= 1 for k in want_imp)
        assert got_doc_imp.keys() == want_doc_imp.keys() and all(abs(got_doc_imp[k] - want_doc_imp[k]) <= 1 for k in want_doc_imp)


def reference_impacts(tf, lengths, chunk_doc, n_docs, p):
    """Format 3's u8 impacts from the reference tf and lengths, one posting at a time."""
    avg = max(sum(lengths) / len(lengths), 1e-9)
    doc_tf, doc_len = defaultdict(float), [0.0] * n_docs
    for c, n in enumerate(lengths):
        doc_len[chunk_doc[c]] += n
    for (t, c), f in tf.items():
        doc_tf[t, int(chunk_doc[c])] += f
    avg_doc = max(sum(doc_len) / n_docs, 1e-9)

    def q(f, n, mean):
        return int(quantize_impacts([tf_component(f, n, mean, p.k1, p.b)])[0])

    return ({(t, c): q(f, lengths[c], avg) for (t, c), f in tf.items()}, {(t, d): q(f, doc_len[d], avg_doc) for (t, d), f in doc_tf.items()})


def test_any_number_of_jobs_gives_the_same_artifact(tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "MIN_SHARD_CHARS", 1)
    assert len(shards.bounds([len(p.read_text()) for p in SAMPLE.rglob("*.md")], 3)) == 4
    build_hash(SAMPLE, tmp_path / "one.kb", jobs=1)
    build_hash(SAMPLE, tmp_path / "three.kb", jobs=3)
    assert (tmp_path / "one.kb").read_bytes() == (tmp_path / "three.kb").read_bytes()


def test_shard_bounds_balance_text_and_keep_small_inputs_whole(monkeypatch):
    assert shards.bounds([10] * 5, 4) == [0, 5]  # far below MIN_SHARD_CHARS: one shard
    monkeypatch.setattr(shards, "MIN_SHARD_CHARS", 10)
    assert shards.bounds([10] * 8, 2) == [0, 4, 8]
    assert shards.bounds([50, 10, 10, 10, 10, 10], 2) == [0, 1, 6]
    assert shards.bounds([10] * 3, 8) == [0, 1, 2, 3]


def _file_bytes(data: tuple) -> bytes:
    (part,) = data
    with open(part.path, "rb") as f:
        f.seek(part.offset)
        return f.read(part.length)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(text, text, st.lists(st.tuples(text, text), min_size=1, max_size=4)), min_size=1, max_size=12),
    st.sampled_from([(Analyzer(), None), (BILINGUAL, "mixed")]),
    st.sampled_from([0.0, 1.5]),
    st.lists(st.integers(0, 11), max_size=4),
    st.integers(1, 60),
    st.integers(1, 40),
)
def test_postings_spilled_in_blocks_are_the_bytes_of_the_in_memory_path(spec, analysis, section_weight, cuts, block, batch):
    """PostingsSpill over windows, blocks of a few occurrences and merges of a few postings gives
    build_postings's bytes, dropped terms (a zero section weight) included."""
    import tempfile
    from pathlib import Path

    from kb.builder.postings import PostingsSpill, group_variants
    from kb.formats.artifact import Scratch

    analyzer, how = analysis
    documents = [Document(f"d{i}", f"d{i}", "text", title, "", description=desc) for i, (title, desc, _) in enumerate(spec)]
    langs = None if how is None else [("en", "de")[i % 2] for i in range(len(documents))]
    rows = [B.ChunkRow(i, Chunk(sec, body, 1, 1)) for i, (_, _, chunks) in enumerate(spec) for sec, body in chunks]
    cfg = replace(BuildConfig(), bm25=BM25Params(section_weight=section_weight))
    chunk_doc = np.array([r.doc for r in rows], dtype=np.int64)
    want = build_postings(B.analyze(documents, rows, analyzer, langs), cfg, chunk_doc, len(documents))
    bounds = sorted({0, len(rows), *(int(np.searchsorted(chunk_doc, c)) for c in cuts)})  # windows of whole documents
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        scratch = lambda: stack.enter_context(Scratch(Path(tmp) / "a.kb"))  # noqa: E731
        spill = PostingsSpill(cfg.bm25, scratch, block_occurrences=block, merge_batch=batch)
        for lo, hi in zip(bounds, bounds[1:]):
            spill.add(B.analyze(documents, rows[lo:hi], analyzer, langs), chunk_doc[lo:hi])
        got = spill.finish(chunk_doc, len(documents))
        assert got.terms == want.terms
        want_variants = group_variants(set(B.analyze(documents, rows, analyzer, langs).variants))
        assert {t: sorted(ws) for t, ws in got.variants.items()} == {t: sorted(ws) for t, ws in want_variants.items()}  # windows add up to the whole
        for name in ("hashes", "offsets", "lengths", "doc_df", "doc_offsets"):
            assert getattr(got, name).tobytes() == getattr(want, name).tobytes(), name
        for name in ("ids", "impacts", "doc_ids", "doc_impacts"):
            assert _file_bytes(getattr(got, name)) == getattr(want, name).tobytes(), name


@settings(max_examples=60, deadline=None)
@given(docs, st.sampled_from([(Analyzer(), None), (BILINGUAL, "mixed"), (Analyzer.for_languages(["en"]), "en"), (Analyzer(max_term_chars=3), None)]))
def test_each_term_knows_the_words_it_stands_for_sharded_or_not(spec, analysis):
    """Fields.variants (terms.surfaces): (term, word) for every word of the analyzed text (text,
    section, title, description) that became the term in its document's language, other than
    the term itself or a stopword term's own word."""
    from kb.builder.postings import group_variants
    from kb.formats.layout import surface_base

    analyzer, how = analysis
    documents = [Document(f"d{i}", f"d{i}", "text", title, "", description=desc) for i, (title, desc, _) in enumerate(spec)]
    langs = None if how is None else [("en", "de")[i % 2] if how == "mixed" else how for i in range(len(documents))]
    rows = [B.ChunkRow(i, Chunk(sec, body, 1, 1)) for i, (_, _, chunks) in enumerate(spec) for sec, body in chunks]
    want = defaultdict(set)
    for r in rows:
        d = documents[r.doc]
        for s in (r.chunk.text, r.chunk.section, d.title, d.description):
            words = analyzer.words(s)
            for w, t in zip(words, analyzer.finish(words, langs[r.doc] if langs else None)):
                if w != surface_base(t):
                    want[t].add(w)
    cut = next((i for i, r in enumerate(rows) if r.doc >= len(documents) // 2), 0)

    def grouped(f):
        return {t: set(ws) for t, ws in group_variants(set(f.variants)).items()}

    assert grouped(B.analyze(documents, rows, analyzer, langs)) == want
    assert grouped(B.merge_fields([B.analyze(documents, rows[:cut], analyzer, langs), B.analyze(documents, rows[cut:], analyzer, langs)])) == want


def test_a_term_that_stands_for_more_words_than_the_artifact_lists_is_marked_so(tmp_path, monkeypatch):
    from kb.formats import layout as L
    from kb.runtime.index import Index

    monkeypatch.setattr(L, "MAX_SURFACES", 2)
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Links\n\nconnect connected connecting connection\n\nrun running\n")
    build_hash(corpus, tmp_path / "a.kb", embedder="none")
    with Index(tmp_path / "a.kb") as ix:
        assert ix.term_surfaces("connect") is None  # 3 words besides itself, above the cap of 2
        assert ix.term_surfaces("run") == ("run", "running")
        assert ix.term_surfaces("link") == ("link", "links") and ix.term_surfaces("nowhere") == ()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sets(st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=8), max_size=5), max_size=6), st.sampled_from(["x", "~x", "ab"]))
def test_terms_surfaces_items_round_trip(word_sets, term):
    from kb.formats import layout as L

    terms = [f"{term}{i}" for i in range(len(word_sets))]
    table = L.BlobTable(L.pack_surfaces(terms, {t: list(ws) for t, ws in zip(terms, word_sets) if ws}))
    for i, (t, ws) in enumerate(zip(terms, word_sets)):
        got = L.unpack_surfaces(bytes(table[i]), t)
        assert got == (None if len(ws) > L.MAX_SURFACES else (L.surface_base(t), *sorted(ws)))
