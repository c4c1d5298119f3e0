"""Golden artifacts of every supported format version open and search as they did when built:
tiny-v1.kb (format 1: no stemming, no stopwords, chunk statistics, distinct query terms) and
tiny-v2.kb (format 2: English Snowball stemming and stopwords, document statistics, query term
frequency), both built from tests/data/tiny with the hash stand-in embedder."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from kb.formats.bm25 import idf, tf_component
from kb.runtime.bm25 import bm25_scores, query_terms
from kb.runtime.cli import main as kb
from kb.runtime.index import Index

from corpora import GOLDEN, TINY, build_hash

V1, V2 = GOLDEN / "tiny-v1.kb", GOLDEN / "tiny-v2.kb"


def search(artifact, query):
    r = CliRunner().invoke(kb, ["search", query, "-i", str(artifact), "--mode", "bm25", "--json", "--no-stale-check"])
    assert r.exit_code == 0, r.output
    return [(x["path"], x["section"]) for x in json.loads(r.stdout)["results"]]


@pytest.mark.parametrize("artifact, version", [(V1, 1), (V2, 2)])
def test_each_golden_opens_with_its_own_format_and_analyzer(artifact, version):
    with Index(artifact) as ix:
        assert ix.version == ix.meta.format_version == version
        assert ix.meta.analyzer["version"] == version
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


def test_a_fresh_build_of_the_tiny_corpus_searches_as_the_v2_golden(tmp_path):
    build_hash(TINY, tmp_path / "t.kb")
    for q in ("restore the snapshot", "backups running", "gateway firewall", "the who", "存储集群"):
        assert search(tmp_path / "t.kb", q) == search(V2, q), q


def _with_analyzer(src, dst, change):
    """A copy of artifact ``src`` whose meta.analyzer is ``change(analyzer)``."""
    from dataclasses import replace

    from kb.formats import records as R
    from kb.formats.artifact import Artifact, SectionData, write_artifact

    with Artifact(src) as art:
        sections = []
        for name, s in art.sections.items():
            data = bytes(art.raw(name))
            if name == "meta":
                meta = R.unpack_meta(data)
                data = R.pack_meta(replace(meta, analyzer=change(dict(meta.analyzer))))
            sections.append(SectionData(name, data, s.codec, s.raw_length if s.codec else None))
    write_artifact(dst, sections)
    return dst


def test_a_stemmer_this_kb_lacks_is_refused_with_one_line_and_exit_4(tmp_path):
    bad = _with_analyzer(V2, tmp_path / "bad.kb", lambda a: a | {"stemmers": {"en": "klingon"}})
    r = CliRunner().invoke(kb, ["search", "backups", "-i", str(bad), "--mode", "bm25", "--no-stale-check"])
    assert r.exit_code == 4
    assert r.stderr.startswith(f"kb: error: {bad}: unknown stemmer 'klingon' for language 'en'; this kb's PyStemmer ")
    assert r.stderr.endswith("; rebuild it with this kb-build, or use a kb that has it\n") and r.stderr.count("\n") == 1
