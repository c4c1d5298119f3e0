"""The query encoder's compiled kernels (models/_encoder.c): the int8 dense layer, the layer norm and the
attention agree with the numpy reference (models/query_encoder.py) to float rounding, GELU's erf
(libm's against numpy's Abramowitz & Stegun) within 5e-7; and a buffer that does not match its
shape is refused before it is read.

The extension is built by ``pip install`` (setup.py); it is imported here without a skip, so an
install that failed to compile it fails these tests.
"""

from __future__ import annotations

import math
import platform

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bert_ref import cpu_flags
from kb.models import _encoder as K
from kb.models.query_encoder import attention, dense_int8, gelu, layer_norm, quantize_rows, risky_pairs


def _native_dense(x, w, ws, b, act=False, saturate=False, kernel="auto"):
    n, k = x.shape
    y = np.empty((n, w.shape[0]), np.float32)
    K.dense(x, w, ws, b, y, n, k, w.shape[0], act, saturate, kernel)
    return y


def _close_dense(got, want, x, ws, err_msg=""):
    """Equal to float rounding, or to one int8 step of an input value rounded the other way at a
    tie (a compiler may fuse the quantization's x * scale + 128)."""
    step = 128 / quantize_rows(x)[1][:, None] / np.abs(ws)  # one q step times the largest weight
    np.testing.assert_array_less(np.abs(got.astype(np.float64) - want), 1e-5 * np.abs(want) + 1.01 * step + 1e-30, err_msg=err_msg)


FLAGS = cpu_flags()
# The product kernels this CPU runs: each is tested, whichever "auto" picks.
KERNELS = ["plain"] + (["avx2"] if "avx2" in FLAGS else []) + (["avx512vnni"] if {"avx512f", "avx512bw", "avx512_vnni"} <= FLAGS else [])


def _case(rng, n, k, m, spread=4.0):
    x = (rng.standard_normal((n, k)) * spread).astype(np.float32)
    w = rng.integers(-128, 128, (m, k), dtype=np.int8)
    return x, w, rng.uniform(20, 400, m).astype(np.float32), rng.standard_normal(m).astype(np.float32)


# k: any width (the plain C loop) and multiples of 16 (the AVX2 kernel where the CPU has it; its
# saturating one takes multiples of 32, the AVX-512 VNNI one multiples of 64)
WIDTHS = st.one_of(st.integers(1, 70), st.integers(1, 100).map(lambda j: 16 * j))


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 13), k=WIDTHS, m=st.integers(1, 37), seed=st.integers(0, 2**32 - 1), spread=st.sampled_from([1e-30, 1e-3, 1.0, 50.0, 1e30]))
def test_dense_agrees_with_the_numpy_int8_layer(n, k, m, seed, spread):
    x, w, ws, b = _case(np.random.default_rng(seed), n, k, m, spread)
    want = dense_int8(x, w, ws, b)
    for kernel in ["auto"] + KERNELS:
        _close_dense(_native_dense(x, w, ws, b, kernel=kernel), want, x, ws, kernel)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 13), k=WIDTHS, m=st.integers(1, 37), seed=st.integers(0, 2**32 - 1), spread=st.sampled_from([1e-3, 1.0, 50.0]))
def test_saturating_dense_agrees_with_the_numpy_saturating_layer(n, k, m, seed, spread):
    """``saturate``: int8 pair sums cut to int16 as CTranslate2 does without int8 dot products
    (vpmaddubsw on AVX2 for widths that are multiples of 32, plain C otherwise, odd widths too)."""
    x, w, ws, b = _case(np.random.default_rng(seed), n, k, m, spread)
    want = dense_int8(x, w, ws, b, risky=risky_pairs(w))
    for kernel in ["auto"] + [k for k in KERNELS if k != "avx512vnni"]:
        _close_dense(_native_dense(x, w, ws, b, saturate=True, kernel=kernel), want, x, ws, kernel)


def test_the_saturating_sums_cut_where_exact_ones_do_not():
    x = np.ones((1, 64), np.float32)  # quantizes to 127: uint8 255
    w = np.full((2, 64), 127, np.int8)
    w[1] = -127
    ws, b = np.ones(2, np.float32), np.zeros(2, np.float32)
    exact, cut = _native_dense(x, w, ws, b), _native_dense(x, w, ws, b, saturate=True)
    f = np.float32
    np.testing.assert_array_equal(exact[0], [f(127 * 127 * 64) / f(127), f(-127 * 127 * 64) / f(127)])
    # 32 pairs of 255 x +-127 x 2 = +-64,770, cut to 32,767 and -32,768; the shift 128 x sum(w) back
    np.testing.assert_array_equal(cut[0], [f(32 * 32767 - 128 * 127 * 64) / f(127), f(-32 * 32768 + 128 * 127 * 64) / f(127)])


def test_gelu_over_a_sweep_of_inputs_is_close_to_the_exact_gelu():
    """GELU over 2**18 inputs from -17 to 15, compiled (libm's erff) and numpy's, within 5e-7 of
    the exact GELU."""
    m = 1 << 18
    b = np.linspace(-16, 16, m, dtype=np.float32) - 1
    x = np.zeros((1, 16), np.float32)
    x[0, 0] = 1  # quantized to 127, times a weight of 1: each output is b[o] + 1, exactly
    w = np.zeros((m, 16), np.int8)
    w[:, 0] = 1
    pre = dense_int8(x, w, np.ones(m, np.float32), b)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in pre[0].astype(np.float64)])
    for got in (_native_dense(x, w, np.ones(m, np.float32), b, act=True), gelu(pre)):
        assert np.abs(got[0] - exact).max() <= 5e-7 * np.maximum(1, np.abs(exact)).max()
    assert np.isnan(_native_dense(np.full((1, 16), np.nan, np.float32), w[:8], np.ones(8, np.float32), b[:8], act=True)).all()


def test_the_models_float_tensors_may_lie_at_any_address():
    """CTranslate2's file puts many scales, biases and layer norms at offsets that are not a
    multiple of 4; the kernels read them where they lie."""
    x, w, ws, b = _case(np.random.default_rng(5), 3, 32, 7)
    buf = bytearray(1 + 8 * 7)
    odd_ws = np.frombuffer(buf, dtype=np.float32, count=7, offset=1)
    odd_b = np.frombuffer(buf, dtype=np.float32, count=7, offset=1 + 4 * 7)
    odd_ws[:], odd_b[:] = ws, b
    assert not odd_ws.flags.aligned and not odd_b.flags.aligned
    np.testing.assert_array_equal(_native_dense(x, w, odd_ws, odd_b), _native_dense(x, w, ws, b))
    g, beta = ws[:, None].repeat(32, 1)[0] / 100, b[:, None].repeat(32, 1)[0]
    gbuf = bytearray(1 + 8 * 32)
    odd_g, odd_beta = np.frombuffer(gbuf, np.float32, 32, 1), np.frombuffer(gbuf, np.float32, 32, 1 + 4 * 32)
    odd_g[:], odd_beta[:] = g, beta
    y = np.empty_like(x)
    K.layer_norm(x, None, odd_g, odd_beta, y, 3, 32, 1e-12)
    np.testing.assert_allclose(y, layer_norm(x, g, beta, 1e-12), rtol=1e-5, atol=1e-5)


def test_a_row_that_is_not_finite_gives_nan_and_leaves_the_others_alone():
    x, w, ws, b = _case(np.random.default_rng(6), 4, 32, 5)
    x[1, 3], x[2, 0] = np.nan, np.inf
    y = _native_dense(x, w, ws, b)
    assert np.isnan(y[1:3]).all()
    np.testing.assert_array_equal(y[[0, 3]], _native_dense(x[[0, 3]], w, ws, b))


def test_rows_of_zeros_and_the_extremes_of_int8():
    x = np.zeros((3, 32), np.float32)
    x[1] = 1e-38  # under the amax floor (127 / FLT_MAX): its scale times the weight's is inf, as in numpy
    x[2, ::2], x[2, 1::2] = 3e38, -3e38
    w = np.full((5, 32), -128, np.int8)
    w[1] = 127
    ws, b = np.full(5, 100, np.float32), np.arange(5, dtype=np.float32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(_native_dense(x, w, ws, b), dense_int8(x, w, ws, b))


def test_int8_sums_past_float32s_integers_stay_exact_in_numpy():
    """1,536 products of 127 x 127 (a layer as wide as e5's or MiniLM's feed-forward output) sum
    past 2^24, where float32 holds only even integers: numpy's dense layer (which sums such rows in
    float64) still gives the int32 sum rounded once, as the compiled one does."""
    k = 1536
    x = np.ones((2, k), np.float32)
    x[1, ::3] = -1
    w = np.full((3, k), 127, np.int8)
    w[0, 0] = 126  # an odd total past 2^24: no float32
    w[1, ::2] = -128
    w[2, ::7] = 1
    ws, b = np.ones(3, np.float32), np.zeros(3, np.float32)
    exact = (np.where(x > 0, 127, -127).astype(np.int64) @ w.astype(np.int64).T).astype(np.float64)
    assert exact[0, 0] > 2**24 and exact[0, 0] % 2 == 1
    want = exact.astype(np.float32) / np.float32(127) / ws + b  # the int32 sum, rounded once
    np.testing.assert_array_equal(dense_int8(x, w, ws, b), want)
    np.testing.assert_array_equal(_native_dense(x, w, ws, b), want)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 9), k=st.integers(1, 800), seed=st.integers(0, 2**32 - 1), residual=st.booleans())
def test_layer_norm_agrees_with_numpys(n, k, seed, residual):
    rng = np.random.default_rng(seed)
    x, d = (rng.standard_normal((2, n, k)) * 3 + 1).astype(np.float32)
    g, beta = (rng.standard_normal((2, k))).astype(np.float32)
    y = np.empty_like(x)
    K.layer_norm(x, d if residual else None, g, beta, y, n, k, 1e-12)
    np.testing.assert_allclose(y, layer_norm(x + d if residual else x, g, beta, 1e-12), rtol=1e-4, atol=1e-4)


def test_a_buffer_that_does_not_match_its_shape_is_refused():
    x, w, ws, b = _case(np.random.default_rng(0), 2, 16, 3)
    y = np.empty((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"^x holds 128 bytes, its shape needs 192$"):
        K.dense(x, w, ws, b, y, 3, 16, 3, False)
    with pytest.raises(ValueError, match=r"^the weight holds 48 bytes, its shape needs 64$"):
        K.dense(x, w, ws, b, np.empty((2, 4), np.float32), 2, 16, 4, False)
    with pytest.raises(ValueError, match=r"^the bias holds 8 bytes, its shape needs 12$"):
        K.dense(x, w, ws, b[:2].copy(), y, 2, 16, 3, False)
    with pytest.raises(ValueError, match=r"^out holds 24 bytes, its shape needs 128$"):
        K.layer_norm(x, None, np.ones(16, np.float32), np.zeros(16, np.float32), y, 2, 16, 1e-12)
    with pytest.raises(ValueError, match=r"^the residual holds 64 bytes, its shape needs 128$"):
        K.layer_norm(x, x[:1].copy(), np.ones(16, np.float32), np.zeros(16, np.float32), np.empty_like(x), 2, 16, 1e-12)
    odd = np.frombuffer(b"\0" + x.tobytes(), dtype=np.float32, count=32, offset=1).reshape(2, 16)  # activations at an odd address
    with pytest.raises(ValueError, match=r"^x is not aligned to 4 bytes$"):
        K.dense(odd, w, ws, b, y, 2, 16, 3, False)
    with pytest.raises(ValueError, match=r"^dense: shapes out of range$"):
        K.dense(x, w, ws, b, y, 0, 16, 3, False)
    with pytest.raises(TypeError):  # a read-only output
        K.dense(x, w, ws, b, b"\0" * 24, 2, 16, 3, False)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 only")
def test_the_best_kernel_the_cpu_has_runs():
    if "avx2" not in FLAGS:
        pytest.skip("no AVX2 here")
    assert K.simd() == KERNELS[-1]


def test_a_kernel_the_cpu_lacks_or_an_unknown_one_is_refused():
    x, w, ws, b = _case(np.random.default_rng(1), 2, 64, 3)
    with pytest.raises(ValueError, match=r"^dense: no kernel fast here$"):
        _native_dense(x, w, ws, b, kernel="fast")
    with pytest.raises(ValueError, match=r"^dense: no kernel avx512vnni with saturate here$"):
        _native_dense(x, w, ws, b, saturate=True, kernel="avx512vnni")


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 40), heads=st.integers(1, 4), d=st.sampled_from([1, 7, 32, 64]), seed=st.integers(0, 2**32 - 1))
def test_attention_agrees_with_numpys(n, heads, d, seed):
    qkv = (np.random.default_rng(seed).standard_normal((n, 3 * heads * d)) * 2).astype(np.float32)
    out = np.empty((n, heads * d), np.float32)
    K.attention(qkv, out, n, heads, d)
    np.testing.assert_allclose(out, attention(qkv, heads), rtol=1e-4, atol=1e-5)


def test_attention_checks_its_buffers():
    qkv = np.zeros((3, 12), np.float32)
    with pytest.raises(ValueError, match="qkv holds 144 bytes, its shape needs 288"):
        K.attention(qkv, np.zeros((3, 8), np.float32), 3, 2, 4)
    with pytest.raises(ValueError, match="attention: shapes out of range"):
        K.attention(qkv, np.zeros((3, 4), np.float32), 0, 1, 4)
