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


def test_the_setting_names_the_threshold_the_code_uses():
    help_text = {s.name: s.spec.doc for s in settings_of(VectorOptions)}["order"]
    assert f"Below {locality.MIN_CLUSTERED} vectors" in help_text


def test_a_clustered_build_finds_what_an_exact_scan_finds_and_writes_the_same_bytes_twice(tmp_path):
    n, dim = locality.MIN_CLUSTERED + 500, 64  # the "hash" stand-in model makes 64
    x = clustered(n, dim)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"id": f"r{i:05d}", "text": f"record {i}"}) + "\n" for i in range(n)))
    npy = tmp_path / "v.npy"
    np.save(npy, x)
    def build(order: str, name: str):
        (tmp_path / "kb.toml").write_text(f'[vectors]\norder = "{order}"\n')
        out = tmp_path / name
        r = CliRunner().invoke(kb_build, ["-o", str(out), "--no-reranker", "--config", str(tmp_path / "kb.toml"), "--jsonl", str(jsonl), "--vectors", str(npy), "--embedder", "hash"])
        assert r.exit_code == 0, r.output
        return out

    first = build("clusters", "v.kb").read_bytes()
    outs = [build("clusters", "v.kb"), build("chunks", "plain.kb")]
    assert outs[0].read_bytes() == first
    with Index(outs[0]) as ix, Index(outs[1]) as plain:
        rows = ix.vector_rows(np.arange(n))
        assert sorted(rows.tolist()) == list(range(n)) and not np.array_equal(rows, np.arange(n))
        assert np.array_equal(plain.vector_rows(np.arange(n)), np.arange(n))
        want = x[[int(ix.chunk(c).doc_id[1:]) for c in range(n)]]
        assert np.allclose(ix.vectors_of(np.arange(n)), want, atol=2e-3)
        assert np.array_equal(ix.vectors_of(np.arange(n)), plain.vectors_of(np.arange(n)))
        everything = np.ones(n, dtype=bool)
        found = 0
        for q in x[:20]:
            keys, sims = hnsw_top(ix, q, 10, everything)
            plain_keys, plain_sims = hnsw_top(plain, q, 10, everything)
            assert np.array_equal(keys, plain_keys) and np.allclose(sims, plain_sims)  # the same graph, moved
            found += len(set(np.argsort(-(want @ q))[:10].tolist()) & set(keys.tolist()))
        assert found >= 190
