"""The query encoder: one query's embedding in numpy, over the int8 weights of the artifact's
embedding model read in place (formats/query_model.py), with no CTranslate2 and no warm-up.

kb-build embeds passages with CTranslate2 (common/encoders.py) at compute type int8, and this
encoder takes CTranslate2's steps, float rounding included, so that a query lands where
CTranslate2 would put it, to the bit: every dense layer quantizes its input per row (scale
127 / max |x|, rounded from a fused x * scale + 128 into uint8, as its u8s8 GEMM takes it),
multiplies int8 by int8 into int32 (exact, or cut to int16 in pairs where the machine that
embedded the passages did so, ``saturation``), and scales back as (sum x (1 / input scale)) /
weight scale + bias; layer norms, GELU, softmax and the attention's float products are
CTranslate2's AVX2 kernels' (the ones it selects on x86 CPUs, AVX-512 ones too), step for step
with their fused multiply-adds (``fma``) and summation orders, read off its compiled code and
checked against it value by value (tests/models/test_kernels.py calls its kernels through
ctypes). Only the attention's two float GEMMs are not CTranslate2's own code but its BLAS's
(oneDNN, or MKL on Intel CPUs), whose summation order can depend on the CPU: the section records
the order the building machine's CTranslate2 used (``ATTENTION_SUMS``, picked by kb-build's
self-check). Int8 activation rounding amplifies any difference (a 1e-6 relative change of the
inputs moves a MiniLM vector by up to 0.0035 in cosine), which is why the steps are copied so
closely: on the AMD EPYC (Zen 5) VM every query vector of the dev sets equals CTranslate2's
bit for bit (bench/notes/2026-12-05-query-encoder.md).

The dense layers run on kb's compiled kernels (common/_kernels.c, built by pip from setup.py):
int8 weights multiplied as they lie in the mmap, with no pack and no copy (AVX-512 VNNI or AVX2
where the CPU has them, plain C elsewhere), with their float steps eight at a time where the CPU
has AVX2 and FMA; layer norms and attention too. They give numpy's results bit for bit
(tests/models/test_kernels.py). An install where they could not be compiled runs numkong's
packed int8 kernels (numkong is declared in pyproject.toml and is usearch's own dependency),
and one without numkong, or with one too old for packed products, runs them in numpy;
all three give the same int8 sums (numpy's in float32 where a row's products cannot reach 2^24,
in float64 otherwise). The rest (without the compiled kernels: layer norms, GELU and attention)
is float32 numpy, fused multiply-adds emulated exactly in float64.

A query reads the layer weights (10 MB for all-MiniLM-L6-v2, 21 MB for multilingual-e5-small)
and only the word-embedding rows of its tokens. The first query checks each dense layer's
crc32s before using it, on helper threads that run ahead of the forward pass (``forward``). On
numkong's kernels each layer's weight is also packed: the packs are kept for later queries
(``keep_packed``), or, in a one-shot process, each layer is packed as the pass reaches it and let
go after use, so that each pack reuses the memory of the last instead of touching fresh pages.
The compiled kernels need no pack, which is what makes a one-shot query's first pass cheaper
(bench/encoder_first_pass.py).

The architecture is the BERT encoder CTranslate2's TransformerEncoderSpec describes for kb's
converted models (common/convert.py): post-norm layers, fused QKV, erf GELU, absolute positions,
token-type 0, mean pooling over all tokens, then L2 normalisation.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from ..formats.query_model import ATTENTION_SUMS, INT8_PAIRS
from .errors import ModelError
from .pooling import l2_normalize, mean_pool

__all__ = ["ATTENTION_SUMS", "QueryEncoder", "attention", "dense_int8", "erf", "gelu", "layer_norm", "softmax"]

_F = np.float32
_D = np.float64


_TIE, _LOW = np.int64(0x10000000), np.int64(0x1FFFFFFF)  # the 29 bits a float64 has past a float32's 24
_TINY = float(np.finfo(np.float32).tiny)


def fma(a, b, c) -> np.ndarray:
    """float32 ``a * b + c`` rounded once, as a fused multiply-add (C's fmaf) rounds it. The
    product of two float32s is exact in float64, and rounding their float64 sum to float32 gives
    the one correct rounding unless that sum is itself halfway between two float32s or among
    float32's subnormals: only there is the sum redone, rounded to odd (its TwoSum error
    decides)."""
    c = np.asarray(c, _F).astype(_D)
    with np.errstate(invalid="ignore", over="ignore"):  # inf x 0 and inf - inf are NaN, as in fmaf
        p = np.asarray(a, _F).astype(_D) * np.asarray(b, _F)
        s = p + c
        low = np.asarray(s).view(np.int64) & _LOW
        if not ((low == _TIE) | ((np.abs(s) < _TINY) & (s != 0))).any():  # a float64 0 is exact
            return s.astype(_F)
        bb = s - p
        err = (p - (s - bb)) + (c - bb)
        even = (np.asarray(s).view(np.int64) & 1) == 0
        fix = (err != 0) & np.isfinite(err) & even
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(_F)


# The float steps below are CTranslate2's CPU kernels' (the AVX2 ones it selects on every x86 CPU
# that has AVX2, AVX-512 ones included: bench/notes/2026-12-05-query-encoder.md), step for step, fused
# multiply-adds where its compiled code fuses them: the query vectors are then the very vectors
# CTranslate2 computes, where the attention's float products are summed as the building
# machine's (``attention``).
_EXP_HI, _EXP_LO = _F(88.3762626647949), _F(-88.3762626647949)
_LOG2E, _LN2_HI, _LN2_LO = _F(1.44269504088896341), _F(-0.693359375), _F(2.12194440e-4)
_EXP_P = tuple(_F(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))


def exp(x: np.ndarray) -> np.ndarray:
    """expf as CTranslate2 computes it: Cephes' reduction by ln 2 in two parts and degree-6
    polynomial, with fused multiply-adds (within 1 ulp of the correctly rounded exp)."""
    x = np.clip(np.asarray(x, _F), _EXP_LO, _EXP_HI)
    n = np.floor(fma(x, _LOG2E, _F(0.5)))
    r = fma(n, _LN2_LO, fma(n, _LN2_HI, x))
    y = np.full_like(r, _EXP_P[0])
    for c in _EXP_P[1:]:
        y = fma(y, r, c)
    y = fma(y, r * r, r) + _F(1)
    with np.errstate(invalid="ignore"):  # a NaN's exponent: the product stays NaN
        return y * ((n.astype(np.int32) + 127) << 23).astype(np.int32).view(_F)


# Abramowitz & Stegun 7.1.26: 1.5e-7 absolute, 5e-7 in float32 arithmetic.
_ERF_P = _F(0.3275911)
_ERF_A = tuple(_F(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))


def erf(x: np.ndarray) -> np.ndarray:
    """erf of a float32 array as CTranslate2's GELU computes it, absolute error under 5e-7."""
    x = np.asarray(x, _F)
    a = np.abs(x)
    t = _F(1) / fma(_ERF_P, a, _F(1))
    poly = fma(_ERF_A[0], t, _ERF_A[1])
    for c in _ERF_A[2:]:
        poly = fma(poly, t, c)
    e = fma(-exp(-(x * x)) * t, poly, _F(1))
    return np.copysign(e, x)


def gelu(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + erf(x / sqrt 2)), CTranslate2's GELU."""
    x = np.asarray(x, _F)
    return _F(0.5) * (x * (_F(1) + erf(_F(0.7071067811865475) * x)))


def _lanes8(a: np.ndarray) -> np.ndarray:
    """The sum of eight accumulator lanes (..., 8) as the compiled horizontal sum adds them."""
    h = a[..., :4] + a[..., 4:]
    h = h[..., :2] + h[..., 2:]
    return h[..., 0] + h[..., 1]


def _row_sums(x: np.ndarray, squares: bool = False) -> np.ndarray:
    """Each row's float32 sum (of squares, each rounded, when ``squares``) in CTranslate2's
    order: eight lanes over the whole blocks of eight, their horizontal sum, then the rest one at
    a time (the squares of the rest fused)."""
    n, k = x.shape
    full = k - k % 8
    acc = np.zeros((n, 8), _F)
    for j in range(0, full, 8):
        v = x[:, j : j + 8]
        acc += v * v if squares else v
    s = _lanes8(acc)
    for j in range(full, k):
        s = fma(x[:, j], x[:, j], s) if squares else s + x[:, j]
    return s


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """CTranslate2's layer norm: mean and E[x^2] from float32 sums times 1 / k, variance
    E[x^2] - mean^2 (fused, clamped at 0), then (x - mean) * (gamma / sd) + beta (fused)."""
    x = np.asarray(x, _F)
    inv = _F(1) / _F(x.shape[1])
    mean = _row_sums(x) * inv
    var = np.maximum(fma(_row_sums(x, True), inv, -(mean * mean)), _F(0))
    rstd = _F(1) / np.sqrt(var + _F(eps))
    return fma(x - mean[:, None], rstd[:, None] * gamma, beta)


_SCALE_CAP = _F(127) / np.finfo(np.float32).max  # amax floor: a row of zeros quantizes to zeros, finitely


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row int8 quantization as CTranslate2's CPU kernels do it: (int8 rows, scales)."""
    amax = np.abs(x).max(-1)
    np.maximum(amax, _SCALE_CAP, out=amax)
    scale = _F(127) / amax
    q = np.rint(fma(x, scale[:, None], _F(128)))  # shifted into uint8 as the u8s8 GEMM takes it
    q -= _F(128)
    return q.astype(np.int8), scale


def softmax(s: np.ndarray) -> np.ndarray:
    """Softmax over the last axis as CTranslate2's kernel: exp(x - max), its sum in the order of
    ``_row_sums`` (one at a time for eight or fewer), times 1 / sum."""
    shape = s.shape
    s = np.asarray(s, _F).reshape(-1, shape[-1])
    y = exp(s - s.max(-1, keepdims=True))
    if shape[-1] <= 8:
        total = y[:, 0].copy()
        for j in range(1, shape[-1]):
            total += y[:, j]
    else:
        total = _row_sums(y)
    return (y * (_F(1) / total)[:, None]).reshape(shape)


# How the attention's float products are summed where kb-build's CTranslate2 ran (the section's
# ``attention``), its float GEMM being oneDNN's or MKL's: "sequential", one fused multiply-add
# after another, then times 1 / sqrt(d); "onednn-avx512", oneDNN's choices on an AVX-512 CPU
# (read off on an AMD EPYC, heads of 32): the same but for 2 to 15 tokens, where the queries are
# scaled first and the products summed in 16 lanes of two (j and j + 16) added by halves, and
# for 101 to 199 tokens and more than one head, where the keys are scaled first. kb-build's
# self-check (builder/query_model.py) picks the one that agrees with its machine. The names are
# the section's (formats/query_model.py ATTENTION_SUMS).
def attention(qkv: np.ndarray, heads: int, sums: str = "sequential") -> np.ndarray:
    """Self-attention of one sequence from its fused QKV projection (n, 3 x hidden): the
    (n, hidden) context, in CTranslate2's float steps (``ATTENTION_SUMS``)."""
    n, hidden = qkv.shape[0], qkv.shape[1] // 3
    d = hidden // heads
    q, k, v = (np.ascontiguousarray(qkv[:, j * hidden : (j + 1) * hidden].reshape(n, heads, d).transpose(1, 0, 2)) for j in range(3))
    alpha = _F(1) / np.sqrt(_F(d))
    onednn = sums == "onednn-avx512" and d == 32
    if onednn and 2 <= n < 16:
        a = q * alpha
        acc = fma(a[:, :, None, 16:], k[:, None, :, 16:], a[:, :, None, :16] * k[:, None, :, :16])
        while acc.shape[-1] > 1:
            h = acc.shape[-1] // 2
            acc = acc[..., :h] + acc[..., h:]
        s = acc[..., 0]
    else:
        keys_scaled = onednn and heads > 1 and 101 <= n < 200
        if keys_scaled:
            k = k * alpha
        s = np.zeros((heads, n, n), _F)
        for j in range(d):
            s = fma(q[:, :, None, j], k[:, None, :, j], s)
        if not keys_scaled:
            s *= alpha
    p = softmax(s)
    ctx = np.zeros((heads, n, d), _F)
    for j in range(n):
        ctx = fma(p[:, :, j, None], v[:, None, j, :], ctx)
    return ctx.transpose(1, 0, 2).reshape(n, hidden)


def dense_int8(x: np.ndarray, weight: np.ndarray, weight_scale: np.ndarray, bias: np.ndarray, packed=None, risky=None) -> np.ndarray:
    """``x @ W.T + b`` for int8 ``weight`` (out, in) with per-row ``weight_scale``, in int8 like
    CTranslate2. ``packed``: ``weight`` packed by numkong.dots_pack, or None for numpy.
    ``risky``: ``risky_pairs(weight)`` to sum as CTranslate2 does on a CPU without int8 dot
    products (``saturation``), or None for exact sums."""
    q, scale = quantize_rows(x)
    if packed is not None:
        import numkong

        acc = np.asarray(numkong.dots_packed(q, packed)).astype(_F)
    else:  # float32 sums of int8 products are exact while under 2^24, whatever BLAS's order
        exact = int(np.abs(q, dtype=np.int32).sum(-1).max(initial=0)) * 128 < 1 << 24
        t = _F if exact else _D
        acc = (q.astype(t) @ weight.astype(t).T).astype(_F, copy=False)
    if risky is not None:
        acc += saturation(q, risky, weight.shape[0])
    acc *= _F(1) / scale[:, None]  # CTranslate2's rescale: (sum x (1 / input scale)) / weight scale + bias
    acc /= weight_scale
    acc += bias
    return acc


# How CTranslate2 sums int8 products where the CPU has no int8 dot-product instruction (x86
# without VNNI, such as AVX2-only AMD EPYC; CTranslate2 runs oneDNN there, and Intel MKL on Intel
# CPUs of that age): the input is shifted into uint8 (q + 128) and vpmaddubsw multiplies it by
# the int8 weight, adding each two neighbouring products (columns 2p and 2p + 1) into an int16
# with saturation before the int32 sums; the shift is taken back exactly. A pair sum beyond the
# int16 range is thus cut, which moves a passage's vector by up to 0.012 in cosine (MiniLM on such
# a CPU), and moves its queries as much. kb-build's self-check (builder/query_model.py) finds
# which way that machine's CTranslate2 sums and records it in the model.query section
# ("int8_pairs"); the encoder then embeds queries the way the passages were embedded, on any
# machine (the compiled kernels with vpmaddubsw as CTranslate2 does, or numpy with ``saturation``).
INT16_MIN, INT16_MAX = -32768, 32767
_RISKY = INT16_MAX // 255 + 1  # |w1| + |w2| below this cannot leave int16 for any uint8 input


def risky_pairs(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(output rows, pair indices p, weights of column 2p, of column 2p + 1) of the weight pairs
    whose sum can leave the int16 range (about 3% of MiniLM's), as int32 arrays. An odd last
    column (no layer of kb's models) is a pair of its own: one product always fits int16."""
    rows, cols = weight.shape
    w = weight[:, : cols - cols % 2].reshape(rows, cols // 2, 2).astype(np.int32)
    out, p = np.nonzero(np.abs(w).sum(-1) >= _RISKY)
    return out, p, w[out, p, 0], w[out, p, 1]


def saturation(q: np.ndarray, risky, outputs: int) -> np.ndarray:
    """What saturating each pair sum to int16 changes in ``q @ weight.T`` (float32 (n,
    ``outputs``)), for ``risky = risky_pairs(weight)``."""
    out, p, w1, w2 = risky
    u = q.astype(np.int32) + 128
    sums = u[:, 2 * p] * w1 + u[:, 2 * p + 1] * w2  # (n, pairs)
    cut = np.clip(sums, INT16_MIN, INT16_MAX) - sums
    rows, k = np.nonzero(cut)
    fix = np.zeros((len(q), outputs), dtype=_F)
    np.add.at(fix, (rows, out[k]), cut[rows, k].astype(_F))
    return fix


# The dense layers of each encoder layer, and the layer norm that follows two of them ("ao" ->
# "aln", "fo" -> "oln").
_DENSE = ("qkv", "ao", "fi", "fo")
_NORM_AFTER = {"ao": "aln", "fo": "oln"}


def _helper_threads() -> int:
    """Threads that prepare dense layers ahead of the forward pass: the cores beside this one,
    at most 3."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(3, cores - 1))


def _native():
    """kb's compiled kernels (common/_kernels.c), or None where the install could not build them
    or the CPU is big-endian (they read the artifact's little-endian floats as native ones)."""
    from .native import kernels

    return kernels() if sys.byteorder == "little" else None


def _numkong():
    """numkong if it has the packed int8 products, else None (numpy does them)."""
    try:
        import numkong

        numkong.dots_pack  # noqa: B018 - the packed products this encoder uses (numkong 7.8 has them)
        return numkong
    except (ImportError, AttributeError):
        return None


def _raise_mmap_threshold(size: int = 8 << 20) -> None:
    """Raises glibc's threshold for giving a block its own mapping (mallopt(3), M_MMAP_THRESHOLD)
    by freeing one mapped block of ``size`` bytes, never touched. It starts at 128 KB, under the
    numpy pass's float64 temporaries (a GELU input of 14 tokens is 172 KB): each was mapped,
    faulted in page by page and unmapped again, which doubled the pass's time. kb's compiled pass
    makes no such temporaries; other allocators ignore this (bench/notes/2026-12-05-query-encoder.md,
    "Without the compiled kernels")."""
    np.empty(size, np.uint8)


class QueryEncoder:
    """Embeds queries like the artifact's CTranslate2 embedder, from a formats.query_model
    ``QueryModel`` and the model card (meta.embedder). ``kernels``: "auto" (kb's compiled
    kernels, else numkong, else numpy: whichever is installed), "native", "numkong" or "numpy";
    ``int8_pairs``: "exact", or "saturate" to sum as CTranslate2 does on a CPU without int8 dot
    products (``saturation``); None: as the section records the passages were summed
    (builder/query_model.py); ``attention``: how the attention's products are summed
    (``ATTENTION_SUMS``; None: as the section records); ``keep_packed``: keep each layer's numkong
    pack for later queries (False: a one-shot process, ``_dense``)."""

    def __init__(self, model, card: dict, kernels: str = "auto", int8_pairs: str | None = None, keep_packed: bool = True, attention: str | None = None):
        self.model = model
        self.meta = card
        self.name = str(card.get("name", ""))
        try:
            self.dim, self.max_tokens = int(card["dim"]), int(card["max_tokens"])
        except (KeyError, TypeError, ValueError):
            raise ModelError("the embedding model's card lacks dim or max_tokens; rebuild the index with kb-build") from None
        self.query_prefix = str(card.get("query_prefix", ""))
        self.normalize = bool(card.get("normalize", True))
        e = model.encoder
        self.layers, self.heads, self.hidden, self.eps = e["layers"], e["heads"], e["hidden"], e["eps"]
        if self.hidden != self.dim:
            raise ModelError(f"the query encoder's hidden size {self.hidden} is not the model card's dim {self.dim}")
        if self.max_tokens > e["positions"]:
            raise ModelError(f"the model card's window of {self.max_tokens} tokens exceeds the encoder's {e['positions']} positions")
        if int8_pairs is None:
            int8_pairs = e["int8_pairs"]  # formats/query_model.py: "exact" where the section has none
        if int8_pairs not in INT8_PAIRS:
            raise ValueError(f"int8_pairs {int8_pairs!r}")
        self.saturates = int8_pairs == "saturate"
        self.attention_sums = attention if attention is not None else e.get("attention", "sequential")
        if self.attention_sums not in ATTENTION_SUMS:
            raise ValueError(f"attention {self.attention_sums!r}")
        self.keep_packed = keep_packed
        if kernels not in ("auto", "native", "numkong", "numpy"):
            raise ValueError(f"kernels {kernels!r}")
        self._native = _native() if kernels in ("auto", "native") else None
        if kernels == "native" and self._native is None:
            raise ModelError("kb's compiled kernels (common/_kernels.c) are not installed")
        self._nk = _numkong() if kernels in ("auto", "numkong") and self._native is None else None
        if kernels == "numkong" and self._nk is None:
            raise ModelError("numkong with packed int8 products is not installed")
        if self._native is None:
            _raise_mmap_threshold()
        # The dense layers, in the order the forward pass needs them, and each one's preparation
        # (its crc32s checked, its weight packed for numkong), done once for a whole encoder
        # layer by whichever thread claims that layer first (``_ready``).
        self._linears = [f"l{i}.{n}" for i in range(self.layers) for n in _DENSE]
        self._packed: dict[str, object] = {}
        self._claims: dict[str, threading.Event] = {}
        self._failed: dict[str, BaseException] = {}
        self._lock = threading.Lock()
        self._helping = 0  # threads in ``prepare``
        self._tokenizer = None

    # ----------------------------------------------------------------------------------------
    def _prepare(self, layer: str) -> dict:
        """Check encoder layer ``layer``'s (e.g. "l3") dense weights, scales and biases and its
        layer norms, all in one crc32_many call (a helper thread that took the GIL back after
        each tensor held up the thread running the pass); then, when numkong's packs are kept,
        each dense layer's (pack or None, ``risky_pairs`` when the sums saturate, else None),
        else None for each."""
        names = [f"{layer}.{kind}" for kind in _DENSE]
        self.model.verify([f"{n}.{p}" for n in names for p in ("w", "s", "b")] + [f"{layer}.{norm}.{p}" for norm in _NORM_AFTER.values() for p in ("g", "b")])
        return {n: self._packs(n) if self.keep_packed and self._native is None else None for n in names}

    def _packs(self, name: str) -> tuple:
        w = self.model.tensor(name + ".w")
        return (self._nk.dots_pack(w) if self._nk is not None else None, risky_pairs(w) if self.saturates else None)

    def _claim(self, layer: str) -> threading.Event | None:
        """An event to set once ``layer`` is prepared, if this thread is the first to claim it."""
        with self._lock:
            if layer in self._claims:
                return None
            event = self._claims[layer] = threading.Event()
            return event

    def _prepare_claimed(self, layer: str, event: threading.Event) -> None:
        try:
            self._packed.update(self._prepare(layer))
        except BaseException as e:  # raised where the layer is needed (``_ready``)
            self._failed[layer] = e
        finally:
            event.set()

    def _ready(self, name: str):
        """Dense layer ``name``'s ``_prepare`` result, its encoder layer prepared here unless a
        helper has claimed it."""
        if name in self._packed:
            return self._packed[name]
        layer = name.split(".", 1)[0]
        event = self._claim(layer)
        if event is not None:
            self._prepare_claimed(layer, event)
        else:
            self._claims[layer].wait()
        if layer in self._failed:
            raise self._failed[layer]
        return self._packed[name]

    def _help(self) -> None:
        """A helper thread: prepare the encoder layers no thread has claimed yet, in forward order."""
        for i in range(self.layers):
            event = self._claim(f"l{i}")
            if event is not None:
                self._prepare_claimed(f"l{i}", event)

    def prepare(self) -> None:
        """Prepare the layers ahead of the first pass, on the calling thread: a one-shot search
        runs it beside its BM25 leg (runtime/search.py), and the pass then starts that many
        fewer helpers of its own. A layer that fails to prepare raises where the pass needs it."""
        with self._lock:
            self._helping += 1
        try:
            self._help()
        finally:
            with self._lock:
                self._helping -= 1

    def _dense(self, x: np.ndarray, name: str, act: bool = False) -> np.ndarray:
        """``x @ W.T + b`` for dense layer ``name``, then GELU when ``act``."""
        m = self.model
        if self._native is not None:  # no pack: the weight is multiplied as it lies in the mmap
            self._ready(name)
            w, x = m.tensor(name + ".w"), np.ascontiguousarray(x, dtype=_F)
            y = np.empty((len(x), w.shape[0]), dtype=_F)
            self._native.dense(x, w, m.tensor(name + ".s"), m.tensor(name + ".b"), y, len(x), w.shape[1], w.shape[0], act, self.saturates)
            return y
        # Packs not kept (a one-shot process): packed here, as the pass reaches the layer, and
        # let go after use, so that each pack reuses the memory the last one freed. Packs kept
        # are fresh memory: about 5,300 first touches of a page for multilingual-e5-small's
        # 21 MB, 20-25 ms on a 2-core VM (bench/notes/2026-12-05-one-shot-ratios.md).
        packed, risky = self._ready(name) or self._packs(name)
        y = dense_int8(x, m.tensor(name + ".w"), m.tensor(name + ".s"), m.tensor(name + ".b"), packed, risky)
        return gelu(y) if act else y

    def _attention(self, qkv: np.ndarray) -> np.ndarray:
        """The context of one sequence's self-attention, from its fused QKV projection."""
        if self._native is None:
            return attention(qkv, self.heads, self.attention_sums)
        qkv = np.ascontiguousarray(qkv, dtype=_F)
        out = np.empty((len(qkv), self.hidden), dtype=_F)
        self._native.attention(qkv, out, len(qkv), self.heads, self.hidden // self.heads, self.attention_sums == "onednn-avx512")
        return out

    def _norm(self, x: np.ndarray, residual: np.ndarray | None, name: str) -> np.ndarray:
        """LayerNorm(x + residual) with layer norm ``name``'s gamma and beta."""
        g, b = self.model.tensor(name + ".g"), self.model.tensor(name + ".b")
        if self._native is None:
            return layer_norm(x if residual is None else x + residual, g, b, self.eps)
        x = np.ascontiguousarray(x, dtype=_F)
        y = np.empty_like(x)
        self._native.layer_norm(x, None if residual is None else np.ascontiguousarray(residual, dtype=_F), g, b, y, x.shape[0], x.shape[1], self.eps)
        return y

    def forward(self, ids: list[int]) -> np.ndarray:
        """The last hidden state (len(ids), hidden) of one sequence of token ids. The first call
        starts helper threads on the cores beside this one that prepare the dense layers ahead
        of the pass (checking their crc32s, and packing them when packs are kept, takes about as
        long as the arithmetic); every tensor is checked before it is used."""
        m, n = self.model, len(ids)
        if not 0 < n <= self.max_tokens:
            raise ModelError(f"a query of {n} tokens, the model reads 1 to {self.max_tokens}")
        # The query's embedding rows before the helpers start: the main thread's first steps
        # beside a starting helper wait on the GIL (the first pass 1-1.5 ms faster this way,
        # bench/notes/2026-12-05-one-shot-ratios.md).
        x = m.rows("embed.word", ids).astype(_F) * (_F(1) / m.rows("embed.word.scale", ids))[:, None]
        if len(self._packed) < len(self._linears):
            for _ in range(_helper_threads() - self._helping):
                threading.Thread(target=self._help, name="kb-prepare-layers", daemon=True).start()
        x += m.tensor("embed.type")[0].astype(_F) * (_F(1) / m.tensor("embed.type.scale")[0])
        x += m.rows("embed.pos", np.arange(n))
        x = self._norm(x, None, "embed.ln")
        for i in range(self.layers):
            p = f"l{i}."
            a = self._attention(self._dense(x, p + "qkv"))
            x = self._norm(x, self._dense(a, p + "ao"), p + "aln")
            h = self._dense(x, p + "fi", act=True)
            x = self._norm(x, self._dense(h, p + "fo"), p + "oln")
        return x

    @property
    def tokenizer(self):
        """The query tokenizer, set up at its first use: a one-shot search loads the encoder on a
        thread beside its BM25 leg and starts checking the layers while the search's own thread
        sets up the tokenizer (runtime/search.py ``_prepare_encoder``)."""
        if self._tokenizer is None:
            from .query_tokenizer import QueryTokenizer

            self._tokenizer = QueryTokenizer(self.model.tokenizer, self.model.find, self.max_tokens)
        return self._tokenizer

    def token_ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def embed_query(self, text: str) -> np.ndarray:
        """One query (with the model's query prefix) -> float32 (dim,), L2-normalised."""
        h = self.forward(self.tokenizer.encode(self.query_prefix + text))
        e = mean_pool(h[None], np.array([len(h)]))
        e = (l2_normalize(e) if self.normalize else e)[0]
        if not np.all(np.isfinite(e)):
            raise ModelError("the query's embedding is not finite; the artifact's model is damaged, rebuild it with kb-build")
        return e

    def __repr__(self) -> str:
        kernels = "native" if self._native else "numkong" if self._nk else "numpy"
        return f"QueryEncoder({self.name!r}, dim={self.dim}, kernels={kernels})"
