"""kb's own walk of an HNSW image (runtime/graph_walk.py, compiled): it finds what usearch (the
reference) finds on the same graph, and a forged graph makes it raise its corrupt error, never
crash or read out of bounds; without the compiled walk a one-shot search goes through usearch.
Its speed and its recall at scale are in bench/RESULTS.md "scale"."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb.formats.hnsw import check_hnsw, graph_layout
from kb.runtime import index as index_module
from kb.runtime.graph_walk import GraphWalk, Pages, _f16_kernels
from kb.runtime.index import Index, _matrix_view

from corpora import TINY, artifact_parts, build_hash, rewrite


class Forged(Exception):
    pass


def _image(n: int, dim: int = 16, threads: int = 1, seed: int = 0) -> tuple[bytes, np.ndarray]:
    """A usearch image (kb's settings: cos, f16, M 16) of ``n`` clustered vectors, and them."""
    from usearch.index import Index as UIndex

    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim))
    vecs = (centres[rng.integers(0, 20, n)] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)
    u = UIndex(ndim=dim, metric="cos", dtype="f16", connectivity=16, expansion_add=128, expansion_search=64)
    u.add(np.arange(n, dtype=np.uint64), vecs, threads=threads)
    return bytes(u.save()), vecs


COMPILED = _f16_kernels() is not None
needs_walk = pytest.mark.skipif(not COMPILED, reason="kb's kernels are not built, or the CPU lacks AVX2 and F16C")


def _walk(buf: bytes, n: int, ef: int = 64) -> GraphWalk:
    """The compiled walk (runtime/_kernels.c walk_f16), with no page to check (the test's bytes
    have no checksums)."""
    g = graph_layout(buf, n)
    return GraphWalk(buf, g, _matrix_view(buf, g.image), lambda starts, stops: None, ef, _f16_kernels(), Pages.none(), corrupt=Forged)


@needs_walk
@pytest.mark.parametrize("threads", [1, 4])
def test_the_walk_finds_what_usearch_finds_on_the_same_graph(threads):
    from usearch.index import Index as UIndex

    n = 3000
    ef = 128  # at 64, a 4-thread graph (a new one each run) put both searches at 377-390 of 400: the floor below failed now and then
    buf, vecs = _image(n, threads=threads)
    walk = _walk(buf, n, ef)
    u = UIndex.restore(buf, view=True)
    u.expansion_search = ef
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    rng = np.random.default_rng(1)
    ours = theirs = 0
    for q in rng.normal(size=(40, 16)).astype(np.float32):
        exact = set(np.argsort(-(unit @ q), kind="stable")[:10].tolist())
        got = walk.search(q, 10)
        theirs_q = u.search(q, 10)
        assert len(set(got.keys.tolist())) == 10 and np.all(np.diff(got.distances) >= 0)
        same = np.intersect1d(got.keys, np.asarray(theirs_q.keys))  # the same float16 cosines, to float rounding
        np.testing.assert_allclose(got.distances[np.isin(got.keys, same)], np.sort(np.asarray(theirs_q.distances)[np.isin(theirs_q.keys, same)]), atol=2e-3)
        ours += len(exact & set(got.keys.tolist()))
        theirs += len(exact & set(np.asarray(theirs_q.keys).tolist()))
    assert ours >= theirs - 8 and ours >= 0.95 * 400, (ours, theirs)  # the same search: no worse


@needs_walk
def test_a_node_key_is_read_from_its_record_whatever_the_order():
    buf, _ = _image(500, threads=4)
    image = check_hnsw(buf, 500, neighbours=False)
    walk = _walk(buf, 500)
    keys = walk.keys_of(np.arange(500))
    expected = np.arange(500) if image.row_of_key is None else np.argsort(image.row_of_key)
    assert np.array_equal(keys.astype(np.int64), expected)


SMALL, SMALL_BUF = 300, None


@needs_walk
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_forged_graph_raises_the_corrupt_error_never_anything_else(data):
    global SMALL_BUF
    if SMALL_BUF is None:
        SMALL_BUF = _image(SMALL, dim=8)[0]
    g = graph_layout(SMALL_BUF, SMALL)
    records = (int(g.starts[0]), len(SMALL_BUF))  # the node records, the slots and counts among them
    rows = (g.image.graph_start - g.image.rows * g.image.cols, g.image.graph_start)  # the stored vectors
    lo, hi = records if data.draw(st.booleans()) else rows
    b = bytearray(SMALL_BUF)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(lo, hi - 1))
        b[at] = data.draw(st.integers(0, 255))
    walk = _walk(bytes(b), SMALL)
    q = np.asarray(data.draw(st.lists(st.floats(-1, 1, width=32), min_size=8, max_size=8)), dtype=np.float32)
    try:
        got = walk.search(q, data.draw(st.integers(1, 20)))
    except Forged:
        return
    assert np.all(got.keys < SMALL) and np.all(np.isfinite(got.distances))


def test_a_one_shot_search_walks_the_graph_and_ranks_as_usearch(tmp_path, monkeypatch):
    """With the scan limit at 0 every artifact is searched through its graph: kb search (one
    shot) walks it (through usearch too without the compiled walk), in-process searches go
    through usearch, and both rank alike."""
    from kb.runtime.cli import main as kb
    from kb.runtime.search import Query, Searcher

    out = tmp_path / "tiny.kb"
    build_hash(TINY, out)
    monkeypatch.setattr(index_module, "EXACT_SCAN_MAX", 0)
    for text in ("restore the snapshot", "gateway firewall", "backups running"):
        r = CliRunner().invoke(kb, ["search", text, "-i", str(out), "--mode", "vector", "--json", "--no-stale-check", "--all-statuses"])
        assert r.exit_code == 0, r.output
        walked = [(x["chunk_id"], round(x["score"], 4)) for x in json.loads(r.stdout)["results"]]
        with Index(out) as ix:
            res = Searcher(ix).search(Query(text, mode="vector", all_statuses=True))
            assert ix.dense._walk is None and ix.dense._vector_state is not None  # usearch, the whole graph checked
        assert walked == [(x.chunk_id, round(x.score, 4)) for x in res.results]
    with Index(out) as ix:
        s = Searcher(ix, one_shot=True)
        s.search(Query("restore the snapshot", mode="vector", all_statuses=True))
        assert (ix.dense._walk is not None, ix.dense._vector_state is None) == (COMPILED, COMPILED)  # walked: usearch never loaded


def test_vectors_rows_are_read_for_the_walk_and_checked(tmp_path, monkeypatch):
    """``vectors.rows`` (written when a graph's nodes are not in key order) gives the walk each
    key's row; a row outside the vectors, or a table of the wrong size, is a corrupt artifact."""
    from kb.formats import artifact as A
    from kb.formats import layout as L
    from kb.runtime.cli import main as kb

    good = tmp_path / "tiny.kb"
    build_hash(TINY, good)
    monkeypatch.setattr(index_module, "EXACT_SCAN_MAX", 0)
    version, sections = artifact_parts(good)
    with Index(good) as ix:
        n = ix.n_chunks

    def search(rows: np.ndarray):
        p = tmp_path / "forged.kb"
        rewrite(p, sections + [A.SectionData(L.VECTOR_ROWS, rows.astype("<u4").tobytes())], version)
        return p, CliRunner().invoke(kb, ["search", "restore the snapshot", "-i", str(p), "--json", "--no-stale-check", "--all-statuses"])

    _, r = search(np.arange(n))
    assert r.exit_code == 0, r.output
    p, r = search(np.full(n, n))
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: section 'vectors.rows' names a row outside the vectors\n")
    p, r = search(np.arange(n + 1))
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: section 'vectors.rows' is {4 * (n + 1)} bytes, expected {4 * n}\n")


def _reversed_graph(ix) -> bytes:
    """The artifact's vectors in a graph whose nodes are in reverse key order (node i holds key
    n-1-i): what several build threads make, deterministically."""
    from usearch.index import Index as UIndex

    n = ix.n_chunks
    vecs = ix.dense.vectors_of(np.arange(n))
    u = UIndex(ndim=vecs.shape[1], metric="cos", dtype="f16", connectivity=16, expansion_add=128, expansion_search=64)
    u.add(np.arange(n, dtype=np.uint64)[::-1].copy(), vecs[::-1].copy(), threads=1)
    return bytes(u.save())


@pytest.mark.parametrize("with_rows", [False, True])
def test_a_graph_out_of_key_order_is_walked_through_vectors_rows_or_opened_the_long_way(tmp_path, monkeypatch, with_rows):
    """Without ``vectors.rows`` (an artifact of an earlier kb-build) the walk sees that a node
    does not hold its row's key and the search opens the graph the long way, once; with it, the
    walk reads each key's row there. Either way the one-shot search ranks as usearch does."""
    from kb.formats import artifact as A
    from kb.formats import layout as L
    from kb.runtime.search import Query, Searcher

    good = tmp_path / "tiny.kb"
    build_hash(TINY, good)
    with Index(good) as ix:
        image, n, version = _reversed_graph(ix), ix.n_chunks, ix.version
    perm = check_hnsw(image, n, neighbours=False).row_of_key
    assert perm is not None  # not in key order
    sections = [A.SectionData(L.VECTORS, image) if s.name == L.VECTORS else s for s in artifact_parts(good)[1]]
    if with_rows:
        sections.append(A.SectionData(L.VECTOR_ROWS, perm.astype("<u4").tobytes()))
    out = tmp_path / "reversed.kb"
    rewrite(out, sections, version)
    monkeypatch.setattr(index_module, "EXACT_SCAN_MAX", 0)
    for text in ("restore the snapshot", "gateway firewall"):
        with Index(out) as ix:
            expected = [(r.chunk_id, round(r.score, 4)) for r in Searcher(ix).search(Query(text, mode="vector", all_statuses=True)).results]
        with Index(out) as ix:
            got = [(r.chunk_id, round(r.score, 4)) for r in Searcher(ix, one_shot=True).search(Query(text, mode="vector", all_statuses=True)).results]
            walked = ix.dense._walk is not None
        assert got == expected and walked is (with_rows and COMPILED)
