"""builder/locality.py: the order vectors go into the HNSW graph, and a build that uses it."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.builder import locality
from kb.builder.cli import main as kb_build
from kb.builder.config import VectorOptions
from kb.common.settings import settings_of
from kb.runtime.index import Index
from kb.runtime.legs import hnsw_top


def clustered(n: int, dim: int = 16, clusters: int = 40, seed: int = 3) -> np.ndarray:
    """Unit vectors around ``clusters`` centres, in shuffled order."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + 0.15 * rng.normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def reader(x: np.ndarray, asked: list | None = None):
    def rows(at):
        assert np.all(np.diff(at) > 0), "rows are read in position order"
        if asked is not None:
            asked.append(len(at))
        return x[at]

    return rows


def test_the_order_is_a_permutation_that_puts_near_vectors_together():
    x = clustered(6000)
    order = locality.cluster_order(len(x), reader(x))
    assert sorted(order.tolist()) == list(range(len(x)))
    assert np.array_equal(order, locality.cluster_order(len(x), reader(x)))  # seeded: the same every time
    near = lambda o: float(np.mean(np.sum(x[o[1:]] * x[o[:-1]], axis=1)))  # noqa: E731
    assert near(order) > near(np.arange(len(x))) + 0.5  # consecutive vectors: far more alike than in chunk order


def test_within_a_leaf_vectors_keep_their_chunk_order_and_few_are_read_at_once():
    x = clustered(9000)
    asked: list[int] = []
    order = locality.cluster_order(len(x), reader(x, asked))
    assert max(asked) <= locality.BLOCK_ROWS
    runs = np.split(order, np.flatnonzero(np.diff(order) < 0) + 1)  # ascending runs: at least one per leaf
    assert len(runs) <= locality.clusters_per_level(len(x)) ** 2


@settings(max_examples=20, deadline=None)
@given(st.integers(0, locality.MIN_CLUSTERED - 1))
def test_too_few_vectors_keep_chunk_order(n):
    assert np.array_equal(locality.cluster_order(n, lambda at: pytest.fail("nothing is read")), np.arange(n))


def test_the_settings_name_the_threshold_and_the_share_the_code_uses():
    docs = {s.name: s.doc for s in settings_of(VectorOptions)}
    assert f"Below {locality.MIN_CLUSTERED} vectors" in docs["order"] and f"Below {locality.MIN_CLUSTERED} vectors" in docs["add_order"]
    assert f"a seeded random {locality.RANDOM_FIRST:.0%} first" in docs["add_order"]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 3 * locality.MIN_CLUSTERED))
def test_the_mixed_order_is_a_permutation_random_share_first_then_the_clusters(n):
    clustered = np.random.default_rng(n).permutation(n)
    order = locality.mixed_order(n, clustered)
    assert sorted(order.tolist()) == list(range(n))
    if n < locality.MIN_CLUSTERED:
        assert np.array_equal(order, np.arange(n))
        return
    first = int(n * locality.RANDOM_FIRST)
    assert np.all(np.diff(order[:first]) > 0)  # the random share, in position order
    rest = order[first:]
    assert np.array_equal(rest, clustered[np.isin(clustered, rest)])  # then the rest as clustered
    assert np.array_equal(order, locality.mixed_order(n, clustered))  # seeded


def _build(tmp_path, name: str, **vectors):
    """A build of ``clustered`` vectors for MIN_CLUSTERED + 500 records, with these [vectors] settings."""
    n, dim = locality.MIN_CLUSTERED + 500, 64  # the "hash" stand-in model makes 64
    jsonl, npy = tmp_path / "c.jsonl", tmp_path / "v.npy"
    if not jsonl.exists():
        jsonl.write_text("".join(json.dumps({"id": f"r{i:05d}", "text": f"record {i}"}) + "\n" for i in range(n)))
        np.save(npy, clustered(n, dim))
    (tmp_path / "kb.toml").write_text("[vectors]\n" + "".join(f'{k} = "{v}"\n' for k, v in vectors.items()))
    out = tmp_path / name
    r = CliRunner().invoke(kb_build, ["-o", str(out), "--no-reranker", "--config", str(tmp_path / "kb.toml"), "--jsonl", str(jsonl), "--vectors", str(npy), "--embedder", "hash"])
    assert r.exit_code == 0, r.output
    return out


def _found(ix, x, want, queries: int = 20) -> int:
    """How many of the exact top 10 of ``queries`` queries the graph search finds."""
    everything = np.ones(ix.n_chunks, dtype=bool)
    return sum(len(set(np.argsort(-(want @ q))[:10].tolist()) & set(hnsw_top(ix.dense, q, 10, everything)[0].tolist())) for q in x[:queries])


def test_a_clustered_build_finds_what_an_exact_scan_finds_and_writes_the_same_bytes_twice(tmp_path):
    n = locality.MIN_CLUSTERED + 500
    x = clustered(n, 64)
    as_added = {"add_order": "chunks", "add_dtype": "same"}
    first = _build(tmp_path, "v.kb", order="clusters", **as_added).read_bytes()
    outs = [_build(tmp_path, "v.kb", order="clusters", **as_added), _build(tmp_path, "plain.kb", order="chunks", **as_added)]
    assert outs[0].read_bytes() == first
    with Index(outs[0]) as ix, Index(outs[1]) as plain:
        rows = ix.dense.vector_rows(np.arange(n))
        assert sorted(rows.tolist()) == list(range(n)) and not np.array_equal(rows, np.arange(n))
        assert np.array_equal(plain.dense.vector_rows(np.arange(n)), np.arange(n))
        want = x[[int(ix.chunk(c).doc_id[1:]) for c in range(n)]]
        assert np.allclose(ix.dense.vectors_of(np.arange(n)), want, atol=2e-3)
        assert np.array_equal(ix.dense.vectors_of(np.arange(n)), plain.dense.vectors_of(np.arange(n)))
        everything = np.ones(n, dtype=bool)
        for q in x[:20]:
            keys, sims = hnsw_top(ix.dense, q, 10, everything)
            plain_keys, plain_sims = hnsw_top(plain.dense, q, 10, everything)
            assert np.array_equal(keys, plain_keys) and np.allclose(sims, plain_sims)  # the same graph, moved
        assert _found(ix, x, want) >= 190


@pytest.mark.parametrize("dtype", ["f16", "f32", "bf16"])
def test_a_graph_added_in_mixed_order_over_int8_stores_the_vectors_at_dtype_and_finds_the_neighbours(tmp_path, dtype):
    """The defaults (add_order mixed, add_dtype i8): the graph is built over int8 copies, in an
    order of its own, and stored with every vector as [vectors] dtype stores it, the same values
    as a graph built at dtype in chunk order; the same bytes at every build."""
    from kb.formats.hnsw import SCALAR_KINDS, check_hnsw

    n = locality.MIN_CLUSTERED + 500
    x = clustered(n, 64)
    first = _build(tmp_path, "v.kb", dtype=dtype).read_bytes()
    again = _build(tmp_path, "v.kb", dtype=dtype)
    plain = _build(tmp_path, "plain.kb", dtype=dtype, order="chunks", add_order="chunks", add_dtype="same")
    assert again.read_bytes() == first
    with Index(again) as ix, Index(plain) as p:
        assert ix.meta.vectors["add_order"] == "mixed" and ix.meta.vectors["add_dtype"] == "i8"
        image = check_hnsw(ix.artifact.section(ix.dense.section, paged=True), n, neighbours=True)
        assert image.scalar == SCALAR_KINDS[dtype]
        ids = np.arange(n)
        assert np.array_equal(ix.dense.vectors_of(ids), p.dense.vectors_of(ids))
        want = x[[int(ix.chunk(c).doc_id[1:]) for c in range(n)]]
        assert _found(ix, x, want) >= 190
