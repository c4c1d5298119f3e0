"""The dense leg at scale: its two strategies for a filtered subset, and the HNSW expansion it searches with."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest

from kb.runtime.index import Index
from kb.runtime.legs import exact_is_cheaper, exact_top, hnsw_top, overfetch_count
from kb.runtime.search import Query, Searcher

from corpora import SAMPLE


def test_both_dense_strategies_agree_with_a_brute_force_ranking(sample_artifact):
    with Index(sample_artifact) as ix:
        vecs = ix.dense.vectors_of(np.arange(ix.n_chunks))
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        rng = np.random.default_rng(0)
        for _ in range(5):
            q = vecs[rng.integers(ix.n_chunks)] + 0.1 * rng.standard_normal(vecs.shape[1]).astype(np.float32)
            allowed = rng.random(ix.n_chunks) < 0.5
            sims = np.where(allowed, vecs @ q / np.linalg.norm(q), -np.inf)
            want = np.lexsort((np.arange(ix.n_chunks), -sims))[:5]
            assert exact_top(ix.dense, q, 5, allowed)[0].tolist() == want.tolist()
            assert set(hnsw_top(ix.dense, q, 5, allowed)[0].tolist()) == set(want.tolist())


def test_the_search_uses_the_expansion_the_build_was_configured_with(tmp_path):
    from dataclasses import replace

    from kb.builder.build import build
    from kb.builder.config import BuildConfig

    cfg = BuildConfig()
    cfg = replace(cfg, embedding_model="hash", reranker="none", vectors=replace(cfg.vectors, expansion_search=211))
    build([SAMPLE], tmp_path / "e.kb", cfg)
    with Index(tmp_path / "e.kb") as ix:
        assert ix.meta.vectors["expansion_search"] == 211 and ix.dense.vectors.expansion_search == 211


def test_the_strategy_is_the_cheaper_one_for_the_subset_size():
    n, k = 1_000_000, 50
    assert overfetch_count(10_000, n, k) == 7500 and overfetch_count(n, n, k) == 75
    assert exact_is_cheaper(10_000, n, k)  # 1%: a scan of 10,000 rows beats a beam of 7,500
    assert not exact_is_cheaper(300_000, n, k)  # 30%: the index wins
    assert not exact_is_cheaper(n, n, k)  # unfiltered: always the index
    assert exact_is_cheaper(50, 60, k)  # a tiny corpus: the scan


def test_the_scan_and_the_graph_rank_a_small_artifact_alike(sample_artifact, monkeypatch):
    """Up to EXACT_SCAN_MAX chunks the dense leg scans every vector (no graph check, no usearch);
    past it the same query goes through HNSW, whose top hits on a corpus this small are exact."""
    from kb.runtime import index as index_mod
    from kb.runtime import legs

    art = sample_artifact
    with Index(art) as ix:
        assert ix.dense.scans_vectors
        allowed = np.ones(ix.n_chunks, dtype=bool)
        rng = np.random.default_rng(3)
        queries = [ix.dense.vectors_of(np.array([c]))[0] + rng.normal(scale=0.05, size=ix.dense.vector_dims).astype(np.float32) for c in range(0, ix.n_chunks, 7)]
        scanned = [legs.top_vector(ix.dense, q, 5, allowed) for q in queries]
    monkeypatch.setattr(index_mod, "EXACT_SCAN_MAX", 0)
    with Index(art) as ix:
        assert not ix.dense.scans_vectors
        for q, (ids, sims) in zip(queries, scanned):
            hids, hsims = legs.top_vector(ix.dense, q, 5, allowed)
            assert list(hids) == list(ids)
            assert np.allclose(hsims, sims, atol=2e-3)


def test_the_readme_states_the_scan_limit():
    from kb.runtime.index import EXACT_SCAN_MAX

    from corpora import REPO

    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"Up to {EXACT_SCAN_MAX:,} chunks the dense leg scans every stored vector" in readme


def _threads_of_legs(s, monkeypatch) -> dict[str, str]:
    """{leg: the name of the thread it last ran on}, filled as searcher ``s`` runs its legs."""
    where: dict[str, str] = {}
    for leg in ("bm25_leg", "vector_leg"):
        def spy(*a, _leg=leg, _fn=getattr(s.ops, leg), **k):
            where[_leg] = threading.current_thread().name
            return _fn(*a, **k)

        monkeypatch.setattr(s.ops, leg, spy)
    return where


def test_a_long_lived_search_runs_its_dense_leg_beside_the_bm25_leg_with_the_same_results(sample_artifact, monkeypatch):
    with Index(sample_artifact) as ix:
        s = Searcher(ix)
        where = _threads_of_legs(s, monkeypatch)
        q = Query("rotate the database credentials", top_k=5, explain=True)
        beside = s.search(q, s.defaults)
        assert where["bm25_leg"] == threading.current_thread().name
        assert where["vector_leg"].startswith("kb-dense-leg")
        s.one_shot = True  # the embedder is loaded now; a one-shot search runs both legs on this thread
        alone = s.search(q, s.defaults)
        assert where["vector_leg"] == threading.current_thread().name
        assert [(r.chunk_id, r.score, r.confidence) for r in beside.results] == [(r.chunk_id, r.score, r.confidence) for r in alone.results]


def test_an_error_in_the_dense_leg_beside_reaches_the_search(sample_artifact, monkeypatch):
    with Index(sample_artifact) as ix:
        s = Searcher(ix)

        def broken(*a, **k):
            raise RuntimeError("dense leg failed")

        monkeypatch.setattr(s.ops, "vector_leg", broken)
        with pytest.raises(RuntimeError, match="dense leg failed"):
            s.search(Query("rotate the database credentials", top_k=5), s.defaults)


def test_a_one_shot_search_that_walks_a_graph_runs_its_bm25_leg_beside_the_walk(sample_artifact, monkeypatch):
    """Past EXACT_SCAN_MAX chunks a one-shot search walks the graph, whose page checks let go of
    the GIL: its BM25 leg then runs on a thread of its own, with the same results; a small
    artifact's one-shot search (a scan) keeps both legs on its thread."""
    from kb.runtime import index as index_mod

    q = Query("rotate the database credentials", top_k=5)
    with Index(sample_artifact) as ix:
        expected = [(r.chunk_id, round(r.score, 6)) for r in Searcher(ix).search(q).results]
    for limit, bm25_thread in ((10**9, "MainThread"), (0, "kb-bm25-leg")):
        monkeypatch.setattr(index_mod, "EXACT_SCAN_MAX", limit)
        with Index(sample_artifact) as ix:
            s = Searcher(ix, one_shot=True)
            where = _threads_of_legs(s, monkeypatch)
            got = s.search(q)
            assert where == {"bm25_leg": bm25_thread, "vector_leg": "MainThread"}
            assert ix.dense.walks_graph is (limit == 0) and (ix.dense._walk is not None) is (limit == 0)
            assert [(r.chunk_id, round(r.score, 6)) for r in got.results] == expected
            assert got.timings_ms["bm25"] > 0 and got.timings_ms["vector"] > 0


def test_an_error_in_the_bm25_leg_beside_a_walk_reaches_the_search(sample_artifact, monkeypatch):
    from kb.runtime import index as index_mod

    monkeypatch.setattr(index_mod, "EXACT_SCAN_MAX", 0)
    with Index(sample_artifact) as ix:
        s = Searcher(ix, one_shot=True)

        def broken(*a, **k):
            raise RuntimeError("bm25 leg failed")

        monkeypatch.setattr(s.ops, "bm25_leg", broken)
        with pytest.raises(RuntimeError, match="bm25 leg failed"):
            s.search(Query("rotate the database credentials", top_k=5))


@pytest.mark.parametrize("one_shot, slow, broken", [(True, "bm25_leg", "vector_leg"), (False, "vector_leg", "bm25_leg")],
                         ids=["the walk fails beside the bm25 thread", "the bm25 leg fails beside the pool's dense leg"])
def test_a_failing_leg_waits_for_the_other_legs_thread(sample_artifact, monkeypatch, one_shot, slow, broken):
    """The search raises only once the other leg's thread is done: a caller that then rewrites or
    closes the artifact must not pull the map from under it (a SIGBUS in CI before this)."""
    import time

    from kb.runtime import index as index_mod

    monkeypatch.setattr(index_mod, "EXACT_SCAN_MAX", 0)  # a one-shot search walks the graph
    with Index(sample_artifact) as ix:
        s = Searcher(ix, one_shot=one_shot)
        done = []

        def slow_leg(*a, _fn=getattr(s.ops, slow), **k):
            time.sleep(0.3)
            done.append(True)
            return _fn(*a, **k)

        def failing(*a, **k):
            raise RuntimeError("a leg failed")

        monkeypatch.setattr(s.ops, slow, slow_leg)
        monkeypatch.setattr(s.ops, broken, failing)
        with pytest.raises(RuntimeError, match="a leg failed"):
            s.search(Query("rotate the database credentials", top_k=5))
        assert done == [True] and not any(t.name == "kb-bm25-leg" for t in threading.enumerate())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_runs_the_dense_leg_beside_on_threads_of_its_own(sample_artifact):
    """A long-lived process that has searched, then forks (a pre-fork server, a multiprocessing
    pool): the child's hybrid search must not wait for the parent's dense-leg threads, which it
    does not have (found by `python -m tests.fuzz.run --target artifact --seed 37`: the first
    hybrid search of each forked worker hung)."""
    with Index(sample_artifact) as ix:
        s = Searcher(ix)
        q = Query("rotate the database credentials", top_k=5)
        want = [r.chunk_id for r in s.search(q, s.defaults).results]  # the pool's threads start here
        pid = os.fork()
        if pid == 0:  # the child: exit 0 with the same results, 1 with others, 2 on an error; SIGALRM kills a hang
            code = 2
            try:
                signal.alarm(20)
                code = 0 if [r.chunk_id for r in s.search(q, s.defaults).results] == want else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status), "the forked child's search hung (killed by its alarm)"
        assert os.WEXITSTATUS(status) == 0


def test_stored_cosines_agree_whichever_kernel_computes_them(monkeypatch):
    """kb's float16 kernel and the numpy reference give the same cosines, up to float rounding
    (runtime/cosines.py ``stored_cosines``)."""
    from kb.runtime import cosines as index_mod

    rng = np.random.default_rng(5)
    rows = rng.standard_normal((300, 384)).astype(np.float16)
    q = rng.standard_normal(384).astype(np.float32)
    compiled = index_mod.stored_cosines(q, rows)
    monkeypatch.setattr(index_mod, "_F16", False)
    by_numpy = index_mod.stored_cosines(q, rows)
    assert compiled.dtype == by_numpy.dtype == np.float32
    np.testing.assert_allclose(compiled, by_numpy, atol=1e-5)
