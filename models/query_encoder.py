"""The query encoder: one query's embedding over the int8 weights of the artifact's embedding
model read in place (formats/query_model.py), with no CTranslate2 and no warm-up.

kb-build embeds passages with CTranslate2 (models/encoders.py) at compute type int8, and this
encoder takes the same steps: every dense layer quantizes its input per row (scale
127 / max |x|), multiplies int8 by int8 into int32 (exact, or cut to int16 in pairs where the
machine that embedded the passages did so, ``saturation``), and scales back by the input's and
the weight's row scales; layer norms, erf GELU, softmax and the attention in float32. The float
steps are not CTranslate2's to the bit (its own AVX2 and AVX-512 kernels differ from each other
by more than that would buy): the query vectors agree with CTranslate2's by cosine 0.999 or more
(tests/models/test_query_encoder.py), and the dense leg's nDCG@10 within 0.002 on every dev set
(bench/query_encoder_bench.py).

The fast path is kb's compiled kernels (models/_encoder.c, built by pip from setup.py): int8
weights multiplied as they lie in the mmap, with no pack and no copy (AVX-512 VNNI or AVX2 where
the CPU has them, plain C elsewhere). The reference, which the tests hold the kernels against and
which runs where no compiler did, is numpy below.

A query reads the layer weights (10 MB for all-MiniLM-L6-v2, 21 MB for multilingual-e5-small)
and only the word-embedding rows of its tokens. The first query checks each dense layer's
crc32s before using it, on helper threads that run ahead of the forward pass (``forward``).

The architecture is the BERT encoder CTranslate2's TransformerEncoderSpec describes for kb's
converted models (models/convert.py): post-norm layers, fused QKV, erf GELU, absolute positions,
token-type 0, mean pooling over all tokens, then L2 normalisation.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from ..formats.query_model import INT8_PAIRS
from ..common.errors import ModelError
from .pooling import l2_normalize, mean_pool

__all__ = ["QueryEncoder", "attention", "dense_int8", "erf", "gelu", "layer_norm", "softmax"]

_F = np.float32
_D = np.float64

# Abramowitz & Stegun 7.1.28: erf x = 1 - 1 / (1 + a1 x + ... + a6 x^6)^16 for x >= 0, within
# 3e-7: a polynomial, which compiled code vectorizes; the compiled kernels take these float64
# steps too (models/_encoder.c ``gelu``).
_ERF_A = (0.0705230784, 0.0422820123, 0.0092705272, 0.0001520143, 0.0002765672, 0.0000430638)


def erf(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, _D)
    a, p = np.abs(x), 0.0
    for c in reversed(_ERF_A):
        p = (p + c) * a
    p = p + 1.0
    with np.errstate(over="ignore"):  # far out p^16 overflows to inf, and erf is 1
        for _ in range(4):
            p = p * p
        return np.copysign(1.0 - 1.0 / p, x)


def gelu(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + erf(x / sqrt 2)), the exact (erf) GELU."""
    x = np.asarray(x, _F)
    return (0.5 * x * (1.0 + erf(x.astype(_D) * 0.70710678118654752))).astype(_F)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) / sd * gamma + beta per row, the mean and variance summed in float64."""
    x = np.asarray(x, _F)
    d = x - x.mean(-1, dtype=_D, keepdims=True).astype(_F)
    rstd = (1 / np.sqrt((d.astype(_D) ** 2).mean(-1, keepdims=True) + eps)).astype(_F)
    return d * (rstd * gamma) + beta


_SCALE_CAP = _F(127) / np.finfo(np.float32).max  # amax floor: a row of zeros quantizes to zeros, finitely


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row int8 quantization: (int8 rows, scales 127 / max |row|), rounded in uint8 (x * scale
    + 128) as CTranslate2's u8s8 GEMM takes it."""
    amax = np.abs(x).max(-1)
    np.maximum(amax, _SCALE_CAP, out=amax)
    scale = _F(127) / amax
    return (np.rint(x * scale[:, None] + _F(128)) - _F(128)).astype(np.int8), scale


def softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(-1, keepdims=True))
    return e * (1 / e.sum(-1, keepdims=True))


def attention(qkv: np.ndarray, heads: int) -> np.ndarray:
    """Self-attention of one sequence from its fused QKV projection (n, 3 x hidden): the
    (n, hidden) context, softmax(q k^T / sqrt(d)) v per head."""
    n, hidden = qkv.shape[0], qkv.shape[1] // 3
    d = hidden // heads
    q, k, v = (qkv[:, j * hidden : (j + 1) * hidden].reshape(n, heads, d).transpose(1, 0, 2) for j in range(3))
    p = softmax(q @ k.transpose(0, 2, 1) * _F(1 / np.sqrt(d)))
    return (p @ v).transpose(1, 0, 2).reshape(n, hidden).astype(_F)


def dense_int8(x: np.ndarray, weight: np.ndarray, weight_scale: np.ndarray, bias: np.ndarray, risky=None) -> np.ndarray:
    """``x @ W.T + b`` for int8 ``weight`` (out, in) with per-row ``weight_scale``, in int8.
    ``risky``: ``risky_pairs(weight)`` to sum as CTranslate2 does on a CPU without int8 dot
    products (``saturation``), or None for exact sums."""
    q, scale = quantize_rows(x)
    # float32 sums of int8 products are exact while under 2^24, whatever BLAS's order
    exact = int(np.abs(q, dtype=np.int32).sum(-1).max(initial=0)) * 128 < 1 << 24
    t = _F if exact else _D
    acc = (q.astype(t) @ weight.astype(t).T).astype(_F, copy=False)
    if risky is not None:
        acc += saturation(q, risky, weight.shape[0])
    return acc * (_F(1) / scale[:, None]) / weight_scale + bias  # CTranslate2's order


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
    """The compiled kernels (models/_encoder.c), or None where the install could not build them
    or the CPU is big-endian (they read the artifact's little-endian floats as native ones)."""
    try:
        from . import _encoder
    except ImportError:
        return None
    return _encoder if sys.byteorder == "little" else None


class QueryEncoder:
    """Embeds queries like the artifact's CTranslate2 embedder, from a formats.query_model
    ``QueryModel`` and the model card (meta.embedder). ``kernels``: "auto" (kb's compiled
    kernels, else numpy), "native" or "numpy"; ``int8_pairs``: "exact", or "saturate" to sum as
    CTranslate2 does on a CPU without int8 dot products (``saturation``); None: as the section
    records the passages were summed (builder/query_model.py)."""

    def __init__(self, model, card: dict, kernels: str = "auto", int8_pairs: str | None = None):
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
        if kernels not in ("auto", "native", "numpy"):
            raise ValueError(f"kernels {kernels!r}")
        self._native = _native() if kernels != "numpy" else None
        if kernels == "native" and self._native is None:
            raise ModelError("kb's compiled kernels (models/_encoder.c) are not installed")
        # The dense layers, in the order the forward pass needs them, and each one's preparation
        # (its crc32s checked; for numpy's saturating sums, its ``risky_pairs``), done once for a
        # whole encoder layer by whichever thread claims that layer first (``_ready``).
        self._linears = [f"l{i}.{n}" for i in range(self.layers) for n in _DENSE]
        self._prepared: dict[str, object] = {}
        self._claims: dict[str, threading.Event] = {}
        self._failed: dict[str, BaseException] = {}
        self._lock = threading.Lock()
        self._helping = 0  # threads in ``prepare``
        self._tokenizer = None

    # ----------------------------------------------------------------------------------------
    def _prepare(self, layer: str) -> dict:
        """Check encoder layer ``layer``'s (e.g. "l3") dense weights, scales and biases and its
        layer norms, all in one crc32_many call (a helper thread that took the GIL back after
        each tensor held up the thread running the pass); then each dense layer's
        ``risky_pairs`` where numpy sums saturating, else None."""
        names = [f"{layer}.{kind}" for kind in _DENSE]
        self.model.verify([f"{n}.{p}" for n in names for p in ("w", "s", "b")] + [f"{layer}.{norm}.{p}" for norm in _NORM_AFTER.values() for p in ("g", "b")])
        numpy_saturates = self.saturates and self._native is None
        return {n: risky_pairs(self.model.tensor(n + ".w")) if numpy_saturates else None for n in names}

    def _claim(self, layer: str) -> threading.Event | None:
        """An event to set once ``layer`` is prepared, if this thread is the first to claim it."""
        with self._lock:
            if layer in self._claims:
                return None
            event = self._claims[layer] = threading.Event()
            return event

    def _prepare_claimed(self, layer: str, event: threading.Event) -> None:
        try:
            self._prepared.update(self._prepare(layer))
        except BaseException as e:  # raised where the layer is needed (``_ready``)
            self._failed[layer] = e
        finally:
            event.set()

    def _ready(self, name: str):
        """Dense layer ``name``'s ``_prepare`` result, its encoder layer prepared here unless a
        helper has claimed it."""
        if name in self._prepared:
            return self._prepared[name]
        layer = name.split(".", 1)[0]
        event = self._claim(layer)
        if event is not None:
            self._prepare_claimed(layer, event)
        else:
            self._claims[layer].wait()
        if layer in self._failed:
            raise self._failed[layer]
        return self._prepared[name]

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
        risky = self._ready(name)
        w, s, b = m.tensor(name + ".w"), m.tensor(name + ".s"), m.tensor(name + ".b")
        if self._native is None:
            y = dense_int8(x, w, s, b, risky)
            return gelu(y) if act else y
        x = np.ascontiguousarray(x, dtype=_F)
        y = np.empty((len(x), w.shape[0]), dtype=_F)
        self._native.dense(x, w, s, b, y, len(x), w.shape[1], w.shape[0], act, self.saturates)
        return y

    def _attention(self, qkv: np.ndarray) -> np.ndarray:
        """The context of one sequence's self-attention, from its fused QKV projection."""
        if self._native is None:
            return attention(qkv, self.heads)
        qkv = np.ascontiguousarray(qkv, dtype=_F)
        out = np.empty((len(qkv), self.hidden), dtype=_F)
        self._native.attention(qkv, out, len(qkv), self.heads, self.hidden // self.heads)
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
        starts helper threads on the cores beside this one that check the dense layers' crc32s
        ahead of the pass; every tensor is checked before it is used."""
        m, n = self.model, len(ids)
        if not 0 < n <= self.max_tokens:
            raise ModelError(f"a query of {n} tokens, the model reads 1 to {self.max_tokens}")
        # The query's embedding rows before the helpers start: the main thread's first steps
        # beside a starting helper wait on the GIL (bench/notes/2026-12-05-one-shot-ratios.md).
        x = m.rows("embed.word", ids).astype(_F) * (_F(1) / m.rows("embed.word.scale", ids))[:, None]
        if len(self._prepared) < len(self._linears):
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
        kernels = "native" if self._native else "numpy"
        return f"QueryEncoder({self.name!r}, dim={self.dim}, kernels={kernels})"
