import hashlib
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from kb.builder.build import BuildError, build
from kb.builder.cli import main as kb_build
from kb.builder.config import BuildConfig
from kb.builder.postings import sorted_vocabulary
from kb.formats.analyzer import Analyzer
from kb.formats.bm25 import IMPACT_LEVELS, BM25Params
from kb.runtime.bm25 import bm25_scores, query_terms
from kb.runtime.index import Index

from corpora import SAMPLE, TINY, build_hash

BM25_CORPUS = TINY.parent / "bm25"


def sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_building_twice_gives_byte_identical_artifacts(tmp_path):
    build_hash(SAMPLE, tmp_path / "a.kb")
    build_hash(SAMPLE, tmp_path / "b.kb")
    assert sha(tmp_path / "a.kb") == sha(tmp_path / "b.kb")


def test_sample_artifact_holds_chunks_tags_statuses_and_manifest(sample_artifact):
    with Index(sample_artifact) as ix:
        assert ix.meta.counts.documents == 17
        assert set(ix.meta.statuses) >= {"live-doctrine", "derived", "historical", "superseded", "live"}
        assert ix.meta.tag_descriptions["ops"] == "Lab operations runbooks and procedures"
        historical = ix.status_bitmap("historical")
        paths = {ix.chunk(c).path for c in historical}
        assert paths == {"incidents/2021-03-nas-legacy-outage.md"}
        man = ix.manifest()
        assert len(man.sources) == 17 and man.skipped == ()
        assert len(man.sources[0].sha256) == 64 and man.sources[0].size > 0
        assert man.file_types == (".json", ".markdown", ".md", ".toml", ".txt", ".yaml", ".yml")
        assert len(ix.dense.vectors) == ix.n_chunks


def test_chunks_record_doc_section_lines_tags_and_status(sample_artifact):
    with Index(sample_artifact) as ix:
        recs = [ix.chunk(c) for c in range(ix.n_chunks)]
    restore = [r for r in recs if r.section == "Storage > Backups > Restore"]
    assert restore and restore[0].path == "runbooks/storage-backups.md"
    assert restore[0].tags == ("backup", "ops", "storage") and restore[0].status == "live-doctrine"
    assert restore[0].lines[0] < restore[0].lines[1]


def test_path_prefix_maps_to_a_chunk_range(sample_artifact):
    with Index(sample_artifact) as ix:
        a, b = ix.path_range("runbooks/")
        assert {ix.chunk(c).path.split("/")[0] for c in range(a, b)} == {"runbooks"}
        assert ix.path_range("nope/") == (ix.path_range("nope/")[0],) * 2


def _plain_bm25(tmp_path):
    cfg = replace(BuildConfig(), reranker="none", embedding_model="none", languages=("en",), bm25=BM25Params(title_weight=0.0, section_weight=0.0))
    out = tmp_path / "bm25.kb"
    build([BM25_CORPUS], out, cfg)
    return out


QUERIES = ["storage cluster disk", "backup snapshot restore", "gpu xid driver", "canary deploy traffic", "存储集群 バックアップ",
           "the disks were failing and the disk failed, disk", "where are the backups restored from"]  # fmt: skip


@pytest.mark.parametrize("query", QUERIES)
def test_bm25_scores_equal_bm25s_lucene_on_the_committed_corpus(tmp_path, query):
    """The oracle is bm25s (Lucene variant) over the same files, tokenized independently of
    kb's analysis after the word split: bm25s's own copy of NLTK's English stopwords removed,
    then PyStemmer's English stemmer; repeated query words count again, as bm25s counts them.
    Each file is one chunk and one document, so kb's chunk scores with document statistics
    equal bm25s's document scores, plus ``document_weight`` times the same (the document's own
    score, formats/bm25.py)."""
    bm25s = pytest.importorskip("bm25s")
    import Stemmer
    from bm25s.stopwords import STOPWORDS_EN_PLUS

    out = _plain_bm25(tmp_path)
    stem, stop, words = Stemmer.Stemmer("english").stemWord, set(STOPWORDS_EN_PLUS), Analyzer().words

    def tokens(text):
        return [stem(w) for w in words(text) if w not in stop]

    files = sorted(BM25_CORPUS.glob("*.txt"))
    ref = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    ref.index([tokens(f.read_text()) for f in files], show_progress=False)
    q = [t for t in tokens(query) if t in ref.vocab_dict]
    expected = ref.get_scores(q) if q else np.zeros(len(files))
    with Index(out) as ix:
        ids, scores = bm25_scores(ix, query_terms(ix, query))
        got = np.zeros(ix.n_chunks)
        got[ids] = scores
        assert [ix.chunk(c).path for c in range(ix.n_chunks)] == [f.name for f in files]
        bound = quantization_bound(ix, query_terms(ix, query))
    assert expected.max() > 0
    np.testing.assert_allclose(got, (1 + BM25Params().document_weight) * expected, rtol=0, atol=bound)


def quantization_bound(ix, terms) -> float:
    """The most a chunk's score can move by storing impacts in a byte (formats/bm25.py): half a
    step of idf / 255 per query term (repeats count), in the chunk's score and in its document's."""
    from kb.runtime.bm25 import document_weight, term_weight

    tids = [ix.term_id(t) for t in terms]
    return (1 + document_weight(ix)) * sum(term_weight(ix, t) for t in tids if t is not None) / (2 * IMPACT_LEVELS) + 1e-5


def test_a_query_of_stopwords_alone_finds_the_chunks_that_hold_them(tmp_path):
    out = _plain_bm25(tmp_path)
    with Index(out) as ix:
        assert query_terms(ix, "the who") == ["~the", "~who"]
        ids, scores = bm25_scores(ix, query_terms(ix, "the who"))
        holding = [c for c in range(ix.n_chunks) if {"the", "who"} & set(Analyzer().words(ix.chunk(c).text))]
        assert ids.tolist() == holding and len(holding) > 0 and np.all(scores > 0)


def test_title_and_section_terms_count_above_body(tmp_path):
    (tmp_path / "a.md").write_text("# Zebra\n\nanimal text\n")
    (tmp_path / "b.md").write_text("# Animal\n\nzebra text\n")
    out = tmp_path / "t.kb"
    build([tmp_path], out, replace(BuildConfig(), reranker="none", embedding_model="none"))
    with Index(out) as ix:
        ids, scores = bm25_scores(ix, ["zebra"])
        by_path = {ix.chunk(int(i)).path: s for i, s in zip(ids, scores)}
    assert by_path["a.md"] > by_path["b.md"]


def test_cli_builds_and_reports_a_summary(tmp_path):
    out = tmp_path / "s.kb"
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(out), "--embedder", "hash", "--no-reranker"])
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith(f"built {out} (")
    assert "7 files read, 7 documents" in r.stderr
    assert "seconds: read " in r.stderr and "bytes: meta " in r.stderr


def test_cli_reports_every_skipped_file_and_strict_makes_it_fatal(tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "ok.md").write_text("# OK\n\nfine\n")
    (corpus / "bad.json").write_text("{nope")
    out = tmp_path / "c.kb"
    r = CliRunner().invoke(kb_build, [str(corpus), "-o", str(out), "--embedder", "none"])
    assert r.exit_code == 0
    assert "skipped 1:\n  bad.json: malformed JSON: Expecting property name enclosed in double quotes at line 1 column 2\n" in r.stderr
    before = sha(out)
    (corpus / "new.md").write_text("# New\n")
    r = CliRunner().invoke(kb_build, [str(corpus), "-o", str(out), "--embedder", "none", "--strict"])
    assert r.exit_code == 1
    assert r.stderr == (
        f"kb-build: error: build failed, {out} left as it was: --strict: 1 input(s) skipped, first bad.json: "
        "malformed JSON: Expecting property name enclosed in double quotes at line 1 column 2\n"
    )
    assert sha(out) == before


def test_cli_usage_errors_exit_2(tmp_path):
    r = CliRunner().invoke(kb_build, [str(tmp_path / "missing"), "-o", str(tmp_path / "x.kb")])
    assert (r.exit_code, r.stderr) == (2, f"kb-build: error: {tmp_path / 'missing'}: no such file or folder\n")
    r = CliRunner().invoke(kb_build, ["-o", str(tmp_path / "x.kb")])
    assert (r.exit_code, r.stderr) == (2, "kb-build: error: give at least one CORPUS folder or --jsonl FILE\n")
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(tmp_path / "x.kb"), "-j", "0"])
    assert (r.exit_code, r.stderr) == (2, "kb-build: error: Invalid value for '-j' / '--jobs': 0 is not in the range x>=1. (see 'kb-build --help')\n")
    r = CliRunner().invoke(kb_build, [str(TINY)])
    assert (r.exit_code, r.stderr) == (2, "kb-build: error: Missing option '-o' / '--output'. (see 'kb-build --help')\n")


def test_an_empty_corpus_fails_without_writing(tmp_path):
    (tmp_path / "c").mkdir()
    r = CliRunner().invoke(kb_build, [str(tmp_path / "c"), "-o", str(tmp_path / "x.kb"), "--embedder", "none"])
    assert r.exit_code == 1
    assert "nothing to index" in r.stderr and not (tmp_path / "x.kb").exists()


def test_unknown_statuses_are_kept_and_warned_about(tmp_path):
    (tmp_path / "a.md").write_text("---\nstatus: draft\n---\n# A\n\ntext\n")
    rep = build([tmp_path], tmp_path / "a.kb", replace(BuildConfig(), reranker="none", embedding_model="none"))
    assert rep.warnings == ["unknown status 'draft' (kept; known: live-doctrine, live, derived, historical, superseded)"]


def test_vocabulary_is_ordered_by_hash_then_bytes_even_on_collisions(monkeypatch):
    from kb.formats import layout as L

    real = L.term_hash
    monkeypatch.setattr(L, "term_hashes", lambda ts: np.array([7 if t in ("b", "a", "c") else real(t) for t in ts], dtype="<u8"))
    given = ["zeta", "c", "b", "alpha", "a"]
    terms, hashes, order = sorted_vocabulary(given)
    assert terms[:3] == ["a", "b", "c"] and list(hashes[:3]) == [7, 7, 7]
    assert [given[i] for i in order] == terms
    assert list(hashes) == sorted(hashes)


def test_a_chunk_score_adds_its_documents_score_summed_over_its_chunks(tmp_path):
    """The runtime's sum recomputed the slow way from the stored impacts: every matching chunk
    gets, per query term (repeats count), idf x its own impact and document_weight x idf x its
    document's impact, whichever of its document's chunks hold the term. (The impacts themselves
    are checked against a per-chunk reference in test_postings.py.)"""
    import math

    out = tmp_path / "s.kb"
    build([SAMPLE], out, replace(BuildConfig(), reranker="none", embedding_model="none", languages=("en",)))
    query = "restore the backup snapshot on the storage cluster, backup"
    with Index(out) as ix:
        p, n_docs, terms = ix.meta.bm25, ix.n_docs, query_terms(ix, query)
        doc = [ix.doc_of(c) for c in range(ix.n_chunks)]
        want = [0.0] * ix.n_chunks
        for t in terms:
            tid = ix.term_id(t)
            if tid is None:
                continue
            w = math.log(1 + (n_docs - int(ix.doc_df[tid]) + 0.5) / (int(ix.doc_df[tid]) + 0.5)) / 255
            ids, imp = ix.impact_posting(tid)
            doc_imp = dict(zip(*(x.tolist() for x in ix.impact_posting(tid, document=True))))
            for c, q in zip(ids.tolist(), imp.tolist()):
                want[c] += w * q
            for c in range(ix.n_chunks):
                want[c] += p["document_weight"] * w * doc_imp.get(doc[c], 0)
        ids, scores = bm25_scores(ix, terms)
    assert len(set(doc[c] for c in ids)) < len(ids)  # documents of several chunks are in play
    assert terms.count("backup") == 2
    got = np.zeros(len(want))
    got[ids] = scores
    hit = [c for c in range(len(want)) if c in set(ids.tolist())]
    np.testing.assert_allclose(got[hit], np.array(want)[hit], rtol=1e-5)


def test_a_corpus_whose_languages_have_no_stemmer_builds_an_artifact_that_opens(tmp_path):
    """CJK only: the analyzer records no stemmer library (nil), which the reader accepts."""
    corpus = tmp_path / "zh"
    corpus.mkdir()
    (corpus / "a.md").write_text("# 存储集群\n\n存储集群的备份在每天夜里运行。\n")
    (corpus / "b.md").write_text("# 网关\n\n网关把端口转发到反向代理。\n")
    out = tmp_path / "zh.kb"
    build([corpus], out, replace(BuildConfig(), reranker="none", embedding_model="none"))
    with Index(out) as ix:
        assert ix.meta.analyzer["stemmer_library"] is None and ix.meta.analyzer["documents"] == {"zh": 2}
        ids, _ = bm25_scores(ix, query_terms(ix, "存储集群"))
        assert [ix.chunk(int(c)).path for c in ids] == ["a.md"]
