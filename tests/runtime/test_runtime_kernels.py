"""kb's compiled runtime kernels (runtime/_kernels.c): float16 cosines against float64, BM25's
impact sums and top k against numpy's, bit for bit; buffers checked against their shapes. (The
graph walk: tests/runtime/test_graph_walk.py.)

The extension is built by ``pip install`` (setup.py); it is imported here without a skip, so an
install that failed to compile it fails these tests.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kb.runtime import _kernels as K


needs_f16c = pytest.mark.skipif(K.f16_kernel() != "f16c", reason="cosines_f16 runs on x86 with AVX2 and F16C")


@needs_f16c
@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 40), k=st.integers(1, 70), seed=st.integers(0, 2**32 - 1))
def test_cosines_of_float16_rows_agree_with_float64(n, k, seed):
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((n, k)).astype(np.float16)
    q = rng.standard_normal(k).astype(np.float32)
    out = np.empty(n, np.float32)
    K.cosines_f16(q, rows, out, n, k)
    r = rows.astype(np.float64)
    want = r @ q.astype(np.float64) / np.sqrt((r * r).sum(1) * float((q.astype(np.float64) ** 2).sum()))
    np.testing.assert_allclose(out, want, atol=2e-6)


@needs_f16c
def test_cosines_f16_leaves_zero_and_non_finite_rows_to_the_caller_and_checks_its_buffers():
    rows = np.zeros((3, 8), np.float16)
    rows[1] = 1
    rows[2, 0] = np.inf
    out = np.empty(3, np.float32)
    K.cosines_f16(np.ones(8, np.float32), rows, out, 3, 8)
    assert np.isnan(out[0]) and out[1] == pytest.approx(1.0) and not np.isfinite(out[2])
    with pytest.raises(ValueError, match=r"^the rows holds 48 bytes, its shape needs 64$"):
        K.cosines_f16(np.ones(8, np.float32), rows, out, 4, 8)
    with pytest.raises(ValueError, match=r"^q holds 32 bytes, its shape needs 36$"):
        K.cosines_f16(np.ones(8, np.float32), np.zeros((3, 9), np.float16), out, 3, 9)
    with pytest.raises(ValueError, match=r"^cosines_f16: shapes out of range$"):
        K.cosines_f16(np.ones(8, np.float32), rows, out, -1, 8)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), terms=st.lists(st.tuples(st.integers(0, 400), st.floats(1e-6, 50.0)), min_size=1, max_size=5), seed=st.integers(0, 2**31))
def test_impact_add_equals_numpys_weighted_bincount_bit_for_bit(n, terms, seed):
    """runtime/bm25.py ``_weighted_sum``: the compiled sums are numpy's, in the same order."""
    rng = np.random.default_rng(seed)
    parts = [(np.sort(rng.choice(n, min(m, n), replace=False)).astype(np.uint32), rng.integers(1, 256, min(m, n)).astype(np.uint8)) for m, _ in terms]
    scales = [s for _, s in terms]
    acc = np.zeros(n)
    for (ids, imp), s in zip(parts, scales):
        assert K.impact_add(ids, imp, s, acc, len(ids), n) == 0
    ids = np.concatenate([p[0] for p in parts])
    w = np.concatenate([p[1] for p in parts]) * np.repeat(scales, [len(p[0]) for p in parts])
    np.testing.assert_array_equal(acc, np.bincount(ids, weights=w, minlength=n))


def test_impact_add_refuses_an_id_past_the_sums_and_adds_nothing():
    acc = np.zeros(4)
    assert K.impact_add(np.array([1, 4], np.uint32), np.array([9, 9], np.uint8), 1.0, acc, 2, 4) == 1
    assert not acc.any()
    with pytest.raises(ValueError, match="ids holds 4 bytes, its shape needs 8"):
        K.impact_add(np.array([1], np.uint32), np.array([9, 9], np.uint8), 1.0, acc, 2, 4)
    with pytest.raises(ValueError, match="acc holds 32 bytes, its shape needs 40"):
        K.impact_add(np.array([1], np.uint32), np.array([9], np.uint8), 1.0, acc, 1, 5)


def _top_k_of_sums(acc, allowed, lam, k):
    """runtime/bm25.py's ``top_k`` over ``bm25_scores``'s ids and scores, from the sums."""
    from kb.runtime.bm25 import top_k

    hit = acc > 0
    ids = np.flatnonzero(hit if allowed is None else hit & allowed)
    score = acc[ids]
    return top_k(ids, score + lam * score if lam > 0 else score, k)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 400), k=st.integers(1, 40), lam=st.sampled_from([0.0, 0.3, 1.0 / 3.0]), levels=st.integers(1, 6),
       masked=st.booleans(), seed=st.integers(0, 2**31))  # fmt: skip
def test_acc_top_picks_what_top_k_over_the_scores_picks_bit_for_bit(n, k, lam, levels, masked, seed):
    """runtime/bm25.py ``top_bm25``: the compiled pick from the sums is ``top_k``'s, ties (few
    levels make many) by id, with zeros, negatives and NaN never picked."""
    rng = np.random.default_rng(seed)
    acc = rng.integers(-1, levels, n).astype(np.float64) * 0.1
    acc[rng.random(n) < 0.05] = np.nan
    allowed = rng.random(n) < 0.7 if masked else None
    ids, scores = np.empty(k, np.int64), np.empty(k)
    got = K.acc_top(acc, n, allowed, lam, k, ids, scores)
    want_ids, want_scores = _top_k_of_sums(acc, allowed, lam, k)
    np.testing.assert_array_equal(ids[:got], want_ids)
    np.testing.assert_array_equal(scores[:got], want_scores)


def test_acc_top_checks_its_buffers():
    acc, ids, scores = np.ones(4), np.empty(2, np.int64), np.empty(2)
    with pytest.raises(ValueError, match=r"^allowed holds 3 bytes, its shape needs 4$"):
        K.acc_top(acc, 4, np.ones(3, bool), 0.0, 2, ids, scores)
    with pytest.raises(ValueError, match=r"^out_ids holds 16 bytes, its shape needs 24$"):
        K.acc_top(acc, 4, None, 0.0, 3, ids, np.empty(3))
    with pytest.raises(ValueError, match=r"^acc holds 32 bytes, its shape needs 40$"):
        K.acc_top(acc, 5, None, 0.0, 2, ids, scores)
    with pytest.raises(ValueError, match=r"^acc_top: sizes out of range$"):
        K.acc_top(acc, 4, None, 0.0, -1, ids, scores)
    assert K.acc_top(acc, 4, None, 0.0, 0, ids[:0], scores[:0]) == 0
