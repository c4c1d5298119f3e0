"""formats/hnsw.py ``permuted``: the same graph with its nodes in new slots."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb.formats.hnsw import BadIndex, check_hnsw, graph_layout, permuted
from kb.runtime.graph_walk import GraphWalk, Pages, _f16_kernels
from kb.runtime.index import _matrix_view


def image(n: int, dim: int = 8, connectivity: int = 4, seed: int = 0, dtype: str = "f16") -> tuple[bytes, np.ndarray]:
    """A usearch image of ``n`` random vectors; connectivity 4 gives about one node in four an
    upper level, so lists of every level get renamed."""
    from usearch.index import Index as UIndex

    vecs = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    u = UIndex(ndim=dim, metric="cos", dtype=dtype, connectivity=connectivity, expansion_add=64, expansion_search=64)
    u.add(np.arange(n, dtype=np.uint64), vecs, threads=1)
    return bytes(u.save()), vecs


def moved(buf: bytes, n: int, order) -> bytes:
    return b"".join(permuted(buf, n, np.asarray(order), batch=7))  # small batches: every piece boundary is crossed


def neighbours(buf: bytes, n: int) -> dict[int, list[set[int]]]:
    """Each key's neighbour keys at every level of its node."""
    g = graph_layout(buf, n)
    b = np.frombuffer(buf, dtype=np.uint8)
    key_at = [int(b[s : s + 8].view("<u8")[0]) for s in g.starts.tolist()]
    out = {}
    for slot, (s, level) in enumerate(zip(g.starts.tolist(), g.levels.tolist())):
        lists = []
        for lv in range(level + 1):
            at = s + 10 + (0 if lv == 0 else g.base_bytes + (lv - 1) * g.upper_bytes)
            count = int(b[at : at + 4].view("<u4")[0])
            lists.append({key_at[x] for x in b[at + 4 : at + 4 + 4 * count].view("<u4").tolist()})
        out[key_at[slot]] = lists
    return out


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_the_moved_graph_is_the_same_graph_and_searches_the_same(dtype):
    from usearch.index import Index as UIndex

    n = 600
    buf, vecs = image(n, dtype=dtype)
    order = np.random.default_rng(5).permutation(n)
    new = moved(buf, n, order)
    assert len(new) == len(buf)
    img = check_hnsw(new, n)  # every slot inside the graph, keys a permutation
    assert np.array_equal(img.row_of_key[order], np.arange(n))  # new slot i holds old slot order[i]'s key
    assert neighbours(new, n) == neighbours(buf, n)
    g0, g1 = graph_layout(buf, n), graph_layout(new, n)
    assert np.array_equal(g1.levels, g0.levels[order]) and g1.entry == int(np.flatnonzero(order == g0.entry)[0])
    before, after = UIndex.restore(buf, view=True), UIndex.restore(new, view=True)
    kernels = _f16_kernels() if dtype == "f16" else None  # kb's walk: compiled, over float16 rows
    if kernels is not None:
        walk_before = GraphWalk(buf, g0, _matrix_view(buf, g0.image), lambda a, b: None, 64, kernels, Pages.none())
        walk_after = GraphWalk(new, g1, _matrix_view(new, g1.image), lambda a, b: None, 64, kernels, Pages.none())
    for q in np.random.default_rng(2).normal(size=(30, 8)).astype(np.float32):
        a, b = before.search(q, 10), after.search(q, 10)
        assert np.array_equal(a.keys, b.keys) and np.allclose(a.distances, b.distances)
        if kernels is not None:
            wa, wb = walk_before.search(q, 10), walk_after.search(q, 10)
            assert np.array_equal(np.sort(wa.keys), np.sort(wb.keys))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 120), st.randoms(use_true_random=False))
def test_any_permutation_keeps_every_list(n, rnd):
    buf, _ = image(n, seed=n)
    order = list(range(n))
    rnd.shuffle(order)
    new = moved(buf, n, order)
    check_hnsw(new, n)
    for image_bytes in (buf, new):  # each record's offset from the nodes above level 0 alone, as a running sum would give it
        g = graph_layout(image_bytes, n)
        lengths = 10 + g.base_bytes + g.levels.astype(np.int64) * g.upper_bytes
        assert np.array_equal(g.starts, g.nodes_at + np.concatenate(([0], np.cumsum(lengths)[:-1])))
        assert np.array_equal(g.start_of(np.arange(n)[::-1]), g.starts[::-1]) and np.array_equal(g.bytes_of(np.arange(n)), lengths)
    assert neighbours(new, n) == neighbours(buf, n)
    assert moved(new, n, np.argsort(order)) == buf  # and back


def test_an_order_that_is_not_a_permutation_is_refused():
    buf, _ = image(50)
    for order in (np.zeros(50), np.arange(49), np.arange(1, 51)):
        with pytest.raises(BadIndex, match="not a permutation"):
            moved(buf, 50, order)


@pytest.mark.parametrize("dtype", ["f16", "f32", "bf16"])
def test_the_builder_reads_the_vectors_of_an_image_of_every_stored_kind(dtype):
    from kb.builder.locality import image_vectors

    buf, vecs = image(40, dtype=dtype)
    got = image_vectors(buf, 40).astype(np.float32)
    assert got.shape == vecs.shape and np.allclose(got, vecs, rtol=1e-2, atol=1e-2)  # as given, in the stored precision


def test_rows_stored_in_another_kind_keep_the_graph_and_name_their_kind():
    """``matrix``: a graph built over int8 copies, its rows replaced by float16 ones (kb-build's
    ``[vectors] add_dtype = "i8"``): the same neighbours, the head names f16, and usearch searches
    the new rows."""
    from usearch.index import Index as UIndex

    from kb.formats.hnsw import SCALAR_KINDS

    n = 300
    buf, vecs = image(n, dtype="i8")
    order = np.random.default_rng(2).permutation(n)
    key_of_slot = np.arange(n)  # one thread, keys in order: slot i holds key i
    f16 = vecs.astype("<f2")
    new = b"".join(permuted(buf, n, order, batch=7, matrix=(SCALAR_KINDS["f16"], lambda slots: f16[key_of_slot[slots]])))
    img = check_hnsw(memoryview(new), n)
    assert img.scalar == SCALAR_KINDS["f16"] and img.cols == 2 * vecs.shape[1]
    assert neighbours(new, n) == neighbours(buf, n)
    assert np.array_equal(np.frombuffer(new, dtype="<f2", count=n * vecs.shape[1], offset=8).reshape(n, -1), f16[order])
    u = UIndex.restore(new, view=True)
    assert u.dtype.name == "F16"
    q = vecs[7]
    assert int(u.search(q, 1).keys[0]) == 7
    with pytest.raises(BadIndex, match="replacement rows are not 16 bytes each"):
        b"".join(permuted(buf, n, order, matrix=(SCALAR_KINDS["f16"], lambda slots: vecs[slots])))  # float32 rows: 32 bytes
