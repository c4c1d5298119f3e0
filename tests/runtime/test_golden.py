"""Golden artifacts of every supported format version open and search as they did when built:
tiny-v1.kb (format 1: no stemming, no stopwords, chunk statistics, distinct query terms),
tiny-v2.kb (format 2: English Snowball stemming and stopwords, document statistics, query term
frequency) and tiny-v3.kb (format 3: the same analysis, impact postings), all built from
tests/data/tiny with the hash stand-in embedder; mixed-v4.kb (format 4: BM25 statistics per
language) from tests/data/mixed, without vectors, built with builder/postings.py STATS_MIN_DOCS = 1
(its languages have 3 documents each); mixed-v5.kb (format 5: an English leg) from tests/data/mixed
with two stand-in embedders (tests/runtime/test_english_leg.py builds the same)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from kb.formats.bm25 import idf, tf_component
from kb.runtime.bm25 import bm25_scores, query_terms
from kb.runtime.cli import main as kb
from kb.runtime.index import Index

from corpora import GOLDEN, TINY, build_hash

V1, V2, V3 = GOLDEN / "tiny-v1.kb", GOLDEN / "tiny-v2.kb", GOLDEN / "tiny-v3.kb"
QUERIES = ("restore the snapshot", "backups running", "gateway firewall", "the who", "存储集群", "backup backup restore")


def search(artifact, query):
    r = CliRunner().invoke(kb, ["search", query, "-i", str(artifact), "--mode", "bm25", "--json", "--no-stale-check"])
    assert r.exit_code == 0, r.output
    return [(x["path"], x["section"]) for x in json.loads(r.stdout)["results"]]


@pytest.mark.parametrize("artifact, version", [(V1, 1), (V2, 2), (V3, 3)])
def test_each_golden_opens_with_its_own_format_and_analyzer(artifact, version):
    with Index(artifact) as ix:
        assert ix.version == ix.meta.format_version == version
        assert ix.meta.analyzer["version"] == min(version, 2)  # format 3 changed the postings, not the analysis
        assert search(artifact, "restore the snapshot")[0] == ("backups.md", "Backups > Restore")


def test_format_1_keeps_its_analysis_and_chunk_statistics():
    with Index(V1) as ix:
        assert query_terms(ix, "the backups the running") == ["the", "backups", "running"]
        assert ix.term_id("snapshots") is not None  # unstemmed terms
        ids, tf = ix.posting(ix.term_id("snapshot"))
        p = ix.meta.bm25
        want = idf(len(ids), ix.n_chunks) * tf_component(tf, ix.lengths[ids], p["avg_length"], p["k1"], p["b"])  # N, df over chunks
        got_ids, got = bm25_scores(ix, ["snapshot", "snapshot"])  # a repeat counts twice; format 1 query_terms never repeat one
        assert got_ids.tolist() == ids.tolist()
        np.testing.assert_allclose(got, 2 * want)


def test_format_2_stems_drops_stopwords_and_counts_documents():
    with Index(V2) as ix:
        assert query_terms(ix, "the backups the running backups") == ["backup", "run", "backup"]
        assert ix.term_id("snapshots") is None and ix.term_id("snapshot") is not None
        tid = ix.term_id("backup")
        chunk_docs = {ix.doc_of(int(c)) for c in ix.posting(tid)[0]}
        assert int(ix.doc_df[tid]) == len(chunk_docs) < len(ix.posting(tid)[0])  # backups.md has several chunks with it
        assert ix.term_id("~the") is not None  # stopwords keep their postings under their own term


def test_a_fresh_build_of_the_tiny_corpus_searches_as_the_v3_golden(tmp_path):
    build_hash(TINY, tmp_path / "t.kb")
    for q in QUERIES:
        assert search(tmp_path / "t.kb", q) == search(V3, q), q


@pytest.mark.parametrize("query", QUERIES)
def test_format_3_impacts_score_as_format_2_computes_from_tf_within_one_rounding_step(query):
    """The stored u8 impacts against the float impacts format 2 computes from the stored tf, on
    the same corpus and analysis: the same chunks match, and each score is within the bound of
    rounding each term's chunk and document impacts (formats/bm25.py); the rankings agree."""
    from kb.runtime.bm25 import document_weight, term_weight

    with Index(V2) as old, Index(V3) as new:
        terms = query_terms(new, query)
        assert terms == query_terms(old, query)
        ids2, s2 = bm25_scores(old, terms)
        ids3, s3 = bm25_scores(new, terms)
        bound = (1 + document_weight(new)) * sum(term_weight(new, new.term_id(t)) for t in terms if new.term_id(t) is not None) / 510
    assert ids3.tolist() == ids2.tolist()
    np.testing.assert_allclose(s3, s2, rtol=0, atol=bound + 1e-5)
    assert search(V3, query) == search(V2, query)


def _with_analyzer(src, dst, change):
    """A copy of artifact ``src`` whose meta.analyzer is ``change(analyzer)``."""
    from kb.formats import records as R
    from kb.formats.artifact import Artifact, SectionData, write_artifact

    with Artifact(src) as art:
        sections = []
        for name, s in art.sections.items():
            data = bytes(art.raw(name))
            if name == "meta":
                meta = R.unpack_meta(data)
                data = R.pack_meta(meta._replace(analyzer=change(dict(meta.analyzer))))
            sections.append(SectionData(name, data, s.codec, s.raw_length if s.codec else None))
        version = art.version
    write_artifact(dst, sections, version)
    return dst


def test_a_stemmer_this_kb_lacks_is_refused_with_one_line_and_exit_4(tmp_path):
    bad = _with_analyzer(V2, tmp_path / "bad.kb", lambda a: a | {"stemmers": {"en": "klingon"}})
    r = CliRunner().invoke(kb, ["search", "backups", "-i", str(bad), "--mode", "bm25", "--no-stale-check"])
    assert r.exit_code == 4
    assert r.stderr.startswith(f"kb: error: {bad}: unknown stemmer 'klingon' for language 'en'; this kb's PyStemmer ")
    assert r.stderr.endswith("; rebuild it with this kb-build, or use a kb that has it\n") and r.stderr.count("\n") == 1


V4 = GOLDEN / "mixed-v4.kb"  # format 4: tests/data/mixed (de, en, ja, zh), BM25 statistics per language (STATS_MIN_DOCS 1), no vectors


def test_the_v4_golden_keeps_its_statistics_per_language():
    with Index(V4) as ix:
        assert ix.version == ix.meta.format_version == 4
        assert [(v["code"], v["documents"]) for v in ix.meta.bm25["languages"]] == [("de", 3), ("en", 3), ("ja", 3), ("zh", 3)]
        tid = ix.term_id("planet")
        assert ix.term_documents(tid) == 3  # N: the English documents
    assert search(V4, "observing planets")[0][0] == "telescope-night.md"
    assert search(V4, "温泉のマナー")[0][0] == "onsen.md"


def test_kb_info_shows_the_statistics_per_language():
    r = CliRunner().invoke(kb, ["info", "-i", str(V4)])
    assert r.exit_code == 0, r.output
    assert "bm25 per language: de 3 documents, mean chunk length 31.7; en 3 documents, mean chunk length 46.3; ja 3 documents" in r.stdout


V5 = GOLDEN / "mixed-v5.kb"  # format 5: tests/data/mixed with an English leg: stand-ins "hash-multi" (32-d, main) and the hash embedder (64-d, English); no statistics per language


def test_the_v5_golden_routes_each_query_to_its_dense_leg():
    from kb.runtime.search import Query, Searcher

    with Index(V5) as ix:
        assert ix.version == ix.meta.format_version == 5 and "languages" not in ix.meta.bm25
        assert (ix.meta.embedder["name"], ix.meta.embedder_en["name"]) == ("hash-multi", "hash-64")
        s = Searcher(ix)
        assert s.space_for("observing planets") is ix.english and s.space_for("温泉のマナー") is ix.dense
        for text, doc in (("observing planets", "telescope-night.md"), ("温泉のマナー", "onsen.md"), ("Wanderung im Wald", "wandern.md")):
            assert s.search(Query(text, all_statuses=True)).results[0].path == doc


def test_kb_info_says_how_a_search_weighs_its_legs():
    r = CliRunner().invoke(kb, ["info", "-i", str(V4)])
    assert "search: semantic_weight by query length (0.8 up to 4 words, 0.45 from 20, at most 0.5 with no stopword), rrf_k 10, adaptive fusion, no rerank" in r.stdout.splitlines()
    d = json.loads(CliRunner().invoke(kb, ["info", "-i", str(V4), "--json"]).stdout)
    assert d["search_defaults"]["semantic_weight"] is None and d["search_defaults"]["semantic_weight_by_length"] == {"short_terms": 4, "short_weight": 0.8, "long_terms": 20, "long_weight": 0.45, "keyword_weight": 0.5}
    # analyzer version 1 has no stopword list, so it cannot tell a keyword query: no cap, and kb info does not claim one
    r = CliRunner().invoke(kb, ["info", "-i", str(V1)])
    assert "search: semantic_weight by query length (0.8 up to 4 words, 0.45 from 20), rrf_k 10, adaptive fusion, no rerank" in r.stdout.splitlines()
