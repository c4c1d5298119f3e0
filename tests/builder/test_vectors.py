"""kb-build --jsonl FILE --vectors FILE.npy: vectors brought with the corpus (builder/vectors.py)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from kb.builder.cli import main as kb_build
from kb.runtime.index import Index
from kb.runtime.search import Query, Searcher

import fakes

LONG = " ".join(f"word{i}" for i in range(400))  # far past the 200-token chunk budget
RECORDS = [
    {"id": "c", "path": "notes/c.md", "title": "Gamma", "text": "the gamma ray burst was brief", "tags": ["sky"], "status": "derived"},
    {"id": "a", "path": "notes/a.md", "title": "Alpha", "text": "alpha particles and helium nuclei\nsecond line\n"},
    {"id": "b", "path": "notes/b.md", "title": "Beta", "text": LONG},
    {"id": "d", "path": "notes/d.md", "title": "Delta", "text": "river delta sediment and silt"},
]


def write_corpus(tmp_path, records=RECORDS, blank_after=1, raw_lines=()):
    lines = [json.dumps(r) for r in records]
    lines.insert(blank_after + 1, "")  # a blank line is no record: it has no row
    lines.extend(raw_lines)
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def vectors_for(records, dtype="float32"):
    """The stand-in embedder's vectors of the records, scaled (a given row need not be unit length)."""
    texts = [r["text"] if isinstance(r, dict) else "malformed" for r in records]
    return (fakes.HashEmbedder().embed(texts) * 3.0).astype(dtype)


def run(tmp_path, *args):
    out = tmp_path / "v.kb"
    r = CliRunner().invoke(kb_build, ["-o", str(out), "--no-reranker", *map(str, args)])
    return r, out


def build_records(tmp_path, dtype="float32"):
    """The artifact of RECORDS with their vectors brought (``dtype``), and the .npy given."""
    jsonl = write_corpus(tmp_path)
    npy = tmp_path / "v.npy"
    np.save(npy, vectors_for(RECORDS, dtype))
    r, out = run(tmp_path, "--jsonl", jsonl, "--vectors", npy, "--embedder", "hash")
    assert r.exit_code == 0, r.output
    return out, npy


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_row_i_is_the_vector_of_record_i_and_each_record_is_one_chunk(tmp_path, dtype):
    out, npy = build_records(tmp_path, dtype)
    given = np.load(npy).astype(np.float32)
    given /= np.linalg.norm(given, axis=1, keepdims=True)
    with Index(out) as ix:
        assert ix.n_chunks == ix.n_docs == 4  # the 400-word record is not re-chunked
        assert ix.meta.embedder["name"] == "hash-64" and ix.meta.source == "jsonl"
        row_of = {rec["id"]: i for i, rec in enumerate(RECORDS)}
        for c in range(ix.n_chunks):
            stored = ix.chunk(c)
            rec = RECORDS[row_of[stored.doc_id]]
            assert stored.text == rec["text"] and stored.title == rec["title"] and stored.section == ""
            np.testing.assert_allclose(ix.dense.vectors_of(np.array([c]))[0], given[row_of[stored.doc_id]], atol=2e-3)
        assert [ix.chunk(c).path for c in range(4)] == ["notes/a.md", "notes/b.md", "notes/c.md", "notes/d.md"]
        assert ix.chunk(0).lines == (1, 2) and ix.chunk(2).status == "derived" and ix.chunk(2).tags == ("sky",)
        assert "v.npy" in {s.path for s in ix.manifest().sources}
        hits = Searcher(ix).search(Query("river delta sediment and silt", mode="vector", top_k=1, all_statuses=True)).results
        assert hits[0].doc_id == "d"  # the query is embedded by the model named with --embedder


def test_a_skipped_record_keeps_its_row(tmp_path):
    jsonl = write_corpus(tmp_path, raw_lines=["{not json"])
    npy = tmp_path / "v.npy"
    np.save(npy, vectors_for(RECORDS + [None]))
    r, out = run(tmp_path, "--jsonl", jsonl, "--vectors", npy, "--embedder", "hash")
    assert r.exit_code == 0, r.output
    assert "skipped 1:\n  c.jsonl:6: malformed JSON" in r.stderr
    with Index(out) as ix:
        d = next(c for c in range(ix.n_chunks) if ix.chunk(c).doc_id == "d")
        want = vectors_for(RECORDS)[3] / 3.0
        np.testing.assert_allclose(ix.dense.vectors_of(np.array([d]))[0], want, atol=2e-3)


def refused(tmp_path, args, message):
    r, out = run(tmp_path, *args)
    assert (r.exit_code, r.stderr) == (2, f"kb-build: error: {message}\n")
    assert not out.exists()


def test_wrong_width_row_count_and_values_are_one_line_and_exit_2(tmp_path):
    jsonl = write_corpus(tmp_path)
    npy = tmp_path / "v.npy"
    args = ("--jsonl", jsonl, "--vectors", npy, "--embedder", "hash")
    np.save(npy, np.ones((4, 32), np.float32))
    refused(tmp_path, args, f"{npy}: rows of 32 dimensions, but hash makes 64; --embedder must name the model that made the vectors")
    np.save(npy, vectors_for(RECORDS[:3]))
    refused(tmp_path, args, f"{npy}: 3 rows, but {jsonl} holds 4 records (one row per non-blank line)")
    v = vectors_for(RECORDS)
    v[2, 5] = np.nan
    np.save(npy, v)
    refused(tmp_path, args, f"{npy}: row 2 holds NaN; every value must be finite")
    v[2, 5], v[3, 0] = 0.0, np.inf
    np.save(npy, v.astype(np.float16))
    refused(tmp_path, args, f"{npy}: row 3 holds an infinity; every value must be finite")
    v[3] = 0.0
    np.save(npy, v)
    refused(tmp_path, args, f"{npy}: row 3 is all zeros; a cosine needs a direction")


def test_arrays_that_are_not_2d_float32_or_float16_are_refused(tmp_path):
    jsonl = write_corpus(tmp_path)
    npy = tmp_path / "v.npy"
    args = ("--jsonl", jsonl, "--vectors", npy, "--embedder", "hash")
    np.save(npy, vectors_for(RECORDS, "float64"))
    refused(tmp_path, args, f"{npy}: float64 vectors; give float32 or float16")
    np.save(npy, np.ones(64, np.float32))
    refused(tmp_path, args, f"{npy}: a 1-dimensional array; give one row per JSON Lines record (records x dimensions)")
    npy.write_text("not an array")
    refused(tmp_path, args, f"{npy}: not a .npy file; --vectors takes one array saved by numpy.save")
    npy.write_bytes(b"\x93NUMPY\x01\x00")  # a truncated header: numpy's own words in the parentheses
    r, out = run(tmp_path, *args)
    assert r.exit_code == 2 and r.stderr.startswith(f"kb-build: error: {npy}: not a readable .npy array (") and r.stderr.count("\n") == 1
    refused(tmp_path, ("--jsonl", jsonl, "--vectors", tmp_path / "none.npy", "--embedder", "hash"), f"{tmp_path / 'none.npy'}: no such file (--vectors)")


def test_vectors_need_one_jsonl_no_folder_and_the_model_that_made_them(tmp_path):
    jsonl = write_corpus(tmp_path)
    npy = tmp_path / "v.npy"
    np.save(npy, vectors_for(RECORDS))
    refused(tmp_path, ("--jsonl", jsonl, "--vectors", npy), "--vectors needs --embedder NAME, the model that made the vectors (it embeds the queries)")
    refused(tmp_path, ("--jsonl", jsonl, "--vectors", npy, "--embedder", "none"), "--vectors needs the model that made them; --embedder none builds no vectors")
    one = "--vectors needs exactly one --jsonl FILE and no CORPUS folder: row i of the array is the vector of record i of that file"
    refused(tmp_path, ("--jsonl", jsonl, "--jsonl", jsonl, "--vectors", npy, "--embedder", "hash"), one)
    refused(tmp_path, (tmp_path, "--jsonl", jsonl, "--vectors", npy, "--embedder", "hash"), one)


def test_a_graph_whose_nodes_are_not_in_key_order_still_gives_each_chunk_its_vector(tmp_path, monkeypatch):
    """Several build threads ([vectors] threads) add nodes in the order they arrive, and
    [vectors] order = "clusters" moves them: the matrix rows are then not the chunk ids, and the
    reader maps them through the checked key order."""
    from kb.builder import locality

    monkeypatch.setattr(locality, "MIN_CLUSTERED", 1)
    monkeypatch.setattr(locality, "cluster_order", lambda n, rows: np.arange(n)[::-1].copy())
    out, npy = build_records(tmp_path)
    given = np.load(npy)
    given /= np.linalg.norm(given, axis=1, keepdims=True)
    with Index(out) as ix:
        assert list(ix.dense.vector_rows(np.arange(4))) == [3, 2, 1, 0]
        row_of = {rec["id"]: i for i, rec in enumerate(RECORDS)}
        ids = np.arange(ix.n_chunks)
        want = np.array([given[row_of[ix.chunk(c).doc_id]] for c in ids])
        assert np.allclose(ix.dense.vectors_of(ids), want, atol=2e-3)  # stored as f16
        assert np.allclose(ix.dense.cosines(ids, want[2]), want @ want[2], atol=2e-3)
        # every row (computed over the matrix in place, then picked) or some (gathered): the same values
        assert np.array_equal(ix.dense.cosines(ids[[3, 1]], want[2]), ix.dense.cosines(ids, want[2])[[3, 1]])
        hits = Searcher(ix).search(Query(RECORDS[0]["text"], mode="vector", top_k=1), None)
        assert hits.results[0].doc_id == "c"


def test_a_graph_whose_keys_repeat_is_corrupt():
    from usearch.index import Index as UIndex

    from kb.formats.hnsw import BadIndex, check_hnsw

    ix = UIndex(ndim=8, metric="cos", dtype="f32", multi=True)
    ix.add(np.array([0, 0, 1], dtype=np.uint64), np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32))
    with pytest.raises(BadIndex):
        check_hnsw(bytes(ix.save()), 3)


def test_one_chunk_per_document_scores_bm25_as_the_document_postings_would(tmp_path, monkeypatch):
    """Each record is one chunk: the BM25 leg reuses the chunk sums for the document's part."""
    from kb.runtime import bm25

    out, _ = build_records(tmp_path)
    with Index(out) as ix:
        assert bm25.one_chunk_per_document(ix) and bm25.document_weight(ix) > 0
        for q in ("gamma ray", "alpha helium delta", "word7 word9 silt"):
            terms = bm25.query_terms(ix, q)
            fast = bm25.bm25_scores(ix, terms)
            ix.leg_cache["one_chunk_per_document"] = False
            slow = bm25.bm25_scores(ix, terms)
            del ix.leg_cache["one_chunk_per_document"]
            assert np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1]), q


def test_the_compiled_pick_of_the_bm25_top_equals_top_k_over_every_score(tmp_path):
    """top_bm25 picks the best chunks from the sums (kb's ``acc_top``) where a chunk's score is
    its own sum, as one chunk a document makes it: the same ids and scores as ``top_k`` over
    ``bm25_scores``, with and without a filter."""
    from kb.runtime.cosines import kernels
    from kb.runtime import bm25

    if not hasattr(kernels(), "acc_top"):
        pytest.skip("kb's compiled kernels are not built")
    out, _ = build_records(tmp_path)
    with Index(out) as ix:
        allowed = np.arange(ix.n_chunks) % 3 != 1
        for q in ("gamma ray", "alpha helium delta", "word7 word9 silt"):
            terms = bm25.query_terms(ix, q)
            for mask in (None, allowed):
                for k in (1, 3, 100):
                    got = bm25.top_bm25(ix, terms, k, mask)
                    want = bm25.top_k(*bm25.bm25_scores(ix, terms, allowed=mask), k)
                    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (q, k)


def test_kb_build_records_whether_every_document_is_one_chunk_and_the_search_takes_its_word(tmp_path):
    """meta.bm25.one_chunk_per_document: what docs.first_chunk says, so a search need not read
    that table (4 MB at a million chunks); an artifact without the key is judged from the table."""
    from corpora import TINY, build_hash

    from kb.runtime import bm25

    records, _ = build_records(tmp_path)
    files = tmp_path / "files.kb"
    build_hash(TINY, files)
    for path, single in ((records, True), (files, False)):
        with Index(path) as ix:
            assert ix.meta.bm25["one_chunk_per_document"] is single
            assert bm25.one_chunk_per_document(ix) is single and "first_chunk" not in ix.__dict__
            first = ix.first_chunk
            assert single == (ix.n_docs == ix.n_chunks and np.array_equal(first, np.arange(ix.n_docs + 1)))
            del ix.meta.bm25["one_chunk_per_document"]
            ix.leg_cache.clear()
            assert bm25.one_chunk_per_document(ix) is single


@pytest.mark.parametrize("scale", [1e-45, 1e-40, 3e38, 3.4e38])
def test_rows_of_subnormal_or_huge_values_keep_their_direction(tmp_path, scale):
    """Issue 50 D: a float32 norm underflows to 0 for subnormal rows (every vector search then
    exited 3) and overflows to inf for rows of 3e38 (every vector zero, score 0, confidence 0.99)."""
    jsonl = write_corpus(tmp_path)
    unit = fakes.HashEmbedder().embed([r["text"] for r in RECORDS]).astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    rows = (np.sign(unit) * scale).astype(np.float32)  # every value +-scale (or 0): the direction of the signs
    npy = tmp_path / "v.npy"
    np.save(npy, rows)
    r, out = run(tmp_path, "--jsonl", jsonl, "--vectors", npy, "--embedder", "hash")
    assert r.exit_code == 0, r.output
    want = np.sign(unit) / np.linalg.norm(np.sign(unit), axis=1, keepdims=True)
    with Index(out) as ix:
        row_of = {rec["id"]: i for i, rec in enumerate(RECORDS)}
        got = ix.dense.vectors_of(np.arange(ix.n_chunks))
        np.testing.assert_allclose(got, want[[row_of[ix.chunk(c).doc_id] for c in range(ix.n_chunks)]], atol=2e-3)
        hits = Searcher(ix).search(Query("river delta sediment and silt", mode="vector", top_k=4, all_statuses=True)).results
    assert len(hits) == 4 and hits[0].score > 0.3 and hits[0].doc_id == "d"


@pytest.mark.parametrize("shape", ["(-20, 384)", "(9223372036854775807, 384)", "(2**63, 384)", "((1,),)", "(" * 3000 + ")" * 3000])
def test_an_npy_header_with_a_hostile_shape_is_one_line_and_exit_2(tmp_path, shape):
    """Issue 50 F: shape (-20, 384) raised OverflowError out of numpy (a traceback)."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape
    header += " " * ((64 - (len(header) + 11) % 64) % 64) + "\n"
    npy = tmp_path / "v.npy"
    npy.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(64))
    r, _ = run(tmp_path, "--jsonl", write_corpus(tmp_path), "--vectors", npy, "--embedder", "hash")
    assert r.exit_code == 2 and r.stderr.startswith(f"kb-build: error: {npy}: not a readable .npy array (") and r.stderr.count("\n") == 1
    assert len(r.stderr) < 300 + len(str(npy))


def test_vectors_from_a_fifo_are_refused_not_waited_for(tmp_path):
    """Issue 50 G: ``--vectors fifo.npy`` blocked forever."""
    import os

    npy = tmp_path / "v.npy"
    os.mkfifo(npy)
    r, _ = run(tmp_path, "--jsonl", write_corpus(tmp_path), "--vectors", npy, "--embedder", "hash")
    assert (r.exit_code, r.stderr) == (2, f"kb-build: error: {npy}: not a regular file (a FIFO, socket or device); --vectors names a .npy file\n")
