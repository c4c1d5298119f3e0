"""CTranslate2 encoders (no torch, no transformers): the sentence embedder that kb-build embeds
chunks with and kb embeds queries with, and the device policy both sides share.

Imports only numpy and the stdlib at module level; ctranslate2 and tokenizers are imported when
a model is built, so ``import kb.models.encoders`` is cheap.

A model is the dict {filename: bytes} that kb.models.convert makes and a model section packs
(formats/SPEC.md, ``model.embed``). ctranslate2.Encoder is loaded from memory (``files=``), so
the runtime never writes the model to disk. ``load_embedder`` picks the implementation by the
card's ``backend``: "ctranslate2" (the default) or one registered with ``register_backend``
(tests register a deterministic stand-in).
"""

from __future__ import annotations

import json
import os
import weakref

import numpy as np

from ..common.errors import ModelError, UnsupportedVersion, error_line
from .pooling import l2_normalize, mean_pool

__all__ = ["ModelError", "CT2Embedder", "physical_cores", "load_embedder", "register_backend"]

# Files in the model dict that are kb's, not CTranslate2's.
_KB_FILES = ("tokenizer.json", "kb_model.json", "head.npz")


def physical_cores() -> int:
    """Number of physical cores usable by this process (os.cpu_count() fallback).

    Hyper-threads share the matrix units; on small CPUs one OpenMP thread per
    physical core is the fastest setting for CTranslate2.
    """
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    cores = set()
    try:
        phys = core = None
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "physical id":
                    phys = val.strip()
                elif key == "core id":
                    core = val.strip()
                elif not line.strip():
                    if core is not None:
                        cores.add((phys, core))
                    phys = core = None
            if core is not None:
                cores.add((phys, core))
    except OSError:
        pass
    n = len(cores) or (os.cpu_count() or 1)
    return max(1, min(n, usable))


def _as_bytes(value, name: str):
    if isinstance(value, bytes) or hasattr(value, "read"):
        return value  # ctranslate2 takes bytes or file-like (an mmap works too)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)  # ctranslate2 rejects memoryview; it copies the content anyway
    raise ModelError(f"model file {name!r} is {type(value).__name__}, expected bytes")


def open_encoder(files: dict, label: str, what: str, device: str, compute_type: str, threads: int):
    """A ``ctranslate2.Encoder`` from in-memory files, wrapped in ``ForkSafeEncoder`` (which
    carries the device, compute type and threads chosen), with kb's device policy, shared by the
    embedder and the cross-encoder.

    device "auto" = cuda when CTranslate2 sees a GPU, else cpu. compute_type "auto" = int8 on
    CPU whatever the stored weights (a float32-stored model is quantized at load; int8 is faster
    and its cosines with float32's stay > 0.99: bench/notes/2026-11-30-e5-multilingual.md),
    float16 on CUDA; "default" when the device lacks it. threads 0 = the number of physical cores.
    """
    import ctranslate2

    if device == "auto":
        try:
            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        except Exception:
            device = "cpu"
    if device not in ("cpu", "cuda"):
        raise ModelError(f"device {device!r} not supported; use auto, cpu or cuda")
    if compute_type == "auto":
        compute_type = "int8" if device == "cpu" else "float16"
        try:
            supported = ctranslate2.get_supported_compute_types(device)
        except Exception:
            supported = {compute_type}
        if compute_type not in supported:
            compute_type = "default"
    threads = int(threads) if threads and threads > 0 else physical_cores()
    return ForkSafeEncoder(files, label, what, device, compute_type, threads)


def _ct2_encoder(files: dict, label: str, what: str, device: str, compute_type: str, threads: int):
    import ctranslate2

    ct2_files = {k: _as_bytes(v, k) for k, v in files.items() if k not in _KB_FILES}
    try:
        return ctranslate2.Encoder(label, device=device, compute_type=compute_type, intra_threads=threads, files=ct2_files)
    except Exception as e:
        raise ModelError(f"cannot load {what} on {device}/{compute_type}: {error_line(e)}") from None


class ForkSafeEncoder:
    """A ``ctranslate2.Encoder`` that a forked child can still use. CTranslate2's CPU threads
    are a GNU OpenMP pool and a pool of its own, and neither survives fork(): in a child forked
    after the model ran (a pre-fork server, a multiprocessing pool with the fork method, any
    process kb runs in as a library), a forward on more than one thread waits forever, and so
    does freeing the model (its destructor joins threads the child does not have). So in a
    forked child (``_forked``, run by ``os.register_at_fork``) the parent's model is kept
    forever, never freed, and the first forward loads the model again there, on one thread,
    from the owner's files (kept for this); on CUDA, which no fork survives either, it raises
    ModelError instead. tests/models/test_fork.py runs each case."""

    def __init__(self, files: dict, label: str, what: str, device: str, compute_type: str, threads: int):
        self._files, self._label, self._what = files, label, what
        self.device, self.compute_type, self.threads = device, compute_type, threads
        self._encoder = _ct2_encoder(files, label, what, device, compute_type, threads)
        self._pid = os.getpid()
        _LIVE.add(self)

    def forward_batch(self, *args, **kwargs):
        if self._pid != os.getpid():
            self._load_here()
        return self._encoder.forward_batch(*args, **kwargs)

    def _forked(self) -> None:
        """In a forked child: the parent's model is never freed here (a reference no one drops)."""
        import ctypes

        if self._encoder is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(self._encoder))
        self._pid = None

    def _load_here(self) -> None:
        if self.device != "cpu":
            raise ModelError(f"{self._what} was loaded on {self.device} before this process was forked, and CUDA does not survive a fork; start worker processes with the spawn method")
        self._encoder = _ct2_encoder(self._files, self._label, self._what, "cpu", self.compute_type, 1)
        self.threads, self._pid = 1, os.getpid()


_LIVE: weakref.WeakSet = weakref.WeakSet()  # this process's ForkSafeEncoders


def _after_fork_in_child() -> None:
    for encoder in list(_LIVE):
        encoder._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


OPTIONAL_INTS = ("dim", "num_labels")  # card fields a model may lack, integers where present


class CT2Model:
    """The start-up the embedder and the cross-encoder share, in three steps their ``__init__``
    runs in order (the cross-encoder reads its head between the first two): the card
    (``_card``), the tokenizer (``_tokenizer``), the CTranslate2 encoder (``_open``; the warm-up
    after it is each one's own forward). The errors' words: ``user`` needs the packages
    ("embedder", "reranker"), ``what`` names the files ("model", "reranker"), ``subject`` the
    model ("model", "cross-encoder"); ``remedy`` ends them."""

    def _card(self, files: dict[str, bytes], kind: str, pooling: str, int_fields: tuple[str, ...], remedy: str, *,
              user: str, what: str, subject: str) -> dict:
        """kb_model.json, checked: ctranslate2 and tokenizers import, model.bin is there, the card
        parses with a ``name``, integer ``int_fields`` (and OPTIONAL_INTS where present), and its
        kind and pooling are these."""
        try:
            import ctranslate2  # noqa: F401
            from tokenizers import Tokenizer  # noqa: F401
        except ImportError as e:
            raise ModelError(f"the {user} needs the {e.name} package; reinstall kb-search") from None
        if not files or "kb_model.json" not in files or "model.bin" not in files:
            raise ModelError(f"{what} files incomplete (need kb_model.json and model.bin); {remedy}")
        try:
            meta = json.loads(bytes(files["kb_model.json"]).decode("utf-8"))
            str(meta["name"])
            for f in int_fields + tuple(f for f in OPTIONAL_INTS if f in meta):
                int(meta[f])
        except (ValueError, KeyError, TypeError) as e:
            raise ModelError(f"kb_model.json is invalid ({e!r}); {remedy}") from None
        self.name: str = str(meta["name"])
        if meta.get("kind", "embedder") != kind:
            raise ModelError(f"model {self.name!r} is a {meta.get('kind', 'embedder')!r}, not {'an' if kind == 'embedder' else 'a'} {kind}")
        if meta.get("pooling", pooling) != pooling:
            raise ModelError(f"{subject} {self.name!r} uses {meta.get('pooling')!r} pooling, only {pooling} is supported")
        self.meta, self._files, self.quantization, self._subject = meta, files, meta.get("quantization"), subject
        return meta

    def _tokenizer(self, files: dict[str, bytes], lacks: str = "", truncate: int | None = None):
        """tokenizer.json without padding and truncation (or truncating at ``truncate``); ``lacks``
        is the error when there is none."""
        from tokenizers import Tokenizer

        if "tokenizer.json" not in files:
            raise ModelError(lacks)
        try:
            tok = Tokenizer.from_str(bytes(files["tokenizer.json"]).decode("utf-8"))
            tok.no_padding()
            tok.no_truncation()
            if truncate is not None:
                tok.enable_truncation(truncate)
            return tok
        except Exception as e:
            raise ModelError(f"tokenizer.json is invalid ({type(e).__name__}: {error_line(e)[:120]})") from None

    def _open(self, label: str, device: str, compute_type: str, threads: int) -> None:
        import ctranslate2

        self._encoder = open_encoder(self._files, f"{label}:{self.name}:{self.quantization}", f"{self._subject} {self.name!r}", device, compute_type, threads)
        self.device, self.compute_type = self._encoder.device, self._encoder.compute_type
        self._cpu = ctranslate2.Device.cpu

    def files(self) -> dict[str, bytes]:
        """The model files this model was loaded from (what an artifact packs)."""
        return self._files

    @property
    def threads(self) -> int:
        """CTranslate2's intra-op threads (1 in a process forked after the model ran: ForkSafeEncoder)."""
        return self._encoder.threads


class CT2Embedder(CT2Model):
    """Sentence embedder: BERT encoder in CTranslate2 + masked mean pooling + L2 norm.

    files: {filename: bytes} of a converted model (see module docstring).
    device: "auto" (cuda if a GPU is visible, else cpu), "cpu" or "cuda".
    compute_type: "auto" = int8 on CPU, float16 on CUDA, or any CTranslate2
      compute type.
    threads: intra-op threads; 0 = number of physical cores.
    """

    def __init__(self, files: dict[str, bytes], device: str = "auto", compute_type: str = "auto", threads: int = 0):
        remedy = "rebuild the index with kb-build"
        meta = self._card(files, "embedder", "mean", ("dim", "max_tokens"), remedy, user="embedder", what="model", subject="model")
        self.dim: int = int(meta["dim"])
        self.max_tokens: int = int(meta["max_tokens"])
        self.normalize = bool(meta.get("normalize", True))
        # What the model was trained to see before a text (multilingual-e5: "query: " and
        # "passage: "); absent for models that need none (all-MiniLM-L6-v2).
        self.query_prefix = str(meta.get("query_prefix", ""))
        self.passage_prefix = str(meta.get("passage_prefix", ""))
        # Two tokenizers: this one truncating at the model window (embed), one not (count_tokens),
        # built on first use: only the builder counts tokens, and a one-shot query need not pay for it.
        self._tok = self._tokenizer(files, f"model files lack tokenizer.json; {remedy}", truncate=self.max_tokens)
        self._count_tok = None
        self._open("kb-model", device, compute_type, threads)
        # The first forward after loading is several times slower (allocations,
        # kernel selection): pay it here, not on the first query. A model whose config and
        # weights disagree fails here (CTranslate2 raises ValueError or RuntimeError).
        try:
            self._forward([self._tok.encode("warm up").ids])
        except (ValueError, RuntimeError) as e:
            raise ModelError(f"model {self.name!r} does not run ({type(e).__name__}: {str(e)[:120]})") from None

    # ------------------------------------------------------------------

    def _forward(self, ids: list[list[int]]) -> np.ndarray:
        """Masked mean pooling of last_hidden_state for one batch -> (b, dim) float32."""
        out = self._encoder.forward_batch(ids)
        hidden = out.last_hidden_state
        if self.device != "cpu":
            hidden = hidden.to_device(self._cpu)
        h = np.asarray(hidden)
        if h.dtype != np.float32:
            h = h.astype(np.float32)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        # last_hidden_state covers padded positions in ragged batches: masked.
        return mean_pool(h, lengths)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Token count of each text without special tokens and without truncation."""
        if not texts:
            return []
        if self._count_tok is None:
            self._count_tok = self._tokenizer(self._files)
        encs = self._count_tok.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encs]

    def embed(self, texts: list[str], batch_size: int = 8, prefix: str | None = None) -> np.ndarray:
        """Embed passages -> float32 (n, dim), L2-normalised; texts over max_tokens are truncated.
        Each text gets the model's passage prefix (or ``prefix``) first.

        Small batches (4-8) are fastest on few CPU cores. Texts are sorted by length and a
        batch holds texts of one token length only, so nothing is padded: padding moves an int8
        model's vectors, and a text's vector must be the one it gets alone, whatever it is
        embedded with (shards, executors and reused vectors rely on it).
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts; use embed_query() for one")
        prefix = self.passage_prefix if prefix is None else prefix
        if prefix:
            texts = [prefix + t for t in texts]
        n = len(texts)
        result = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return result
        batch_size = max(1, int(batch_size))
        ids = [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=True)]
        order = sorted(range(n), key=lambda i: len(ids[i]), reverse=True)
        start = 0
        while start < n:
            length, end = len(ids[order[start]]), start + 1
            while end < n and end - start < batch_size and len(ids[order[end]]) == length:
                end += 1
            idx = order[start:end]
            result[idx] = self._forward([ids[i] for i in idx])
            start = end
        return l2_normalize(result) if self.normalize else result

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (with the model's query prefix) -> float32 (dim,)."""
        return self.embed([text], batch_size=1, prefix=self.query_prefix)[0]

    def __repr__(self) -> str:
        return f"CT2Embedder({self.name!r}, dim={self.dim}, device={self.device!r}, compute_type={self.compute_type!r}, threads={self.threads})"


# Embedder implementations by the model card's "backend"; tests register a stand-in.
_BACKENDS: dict = {}


def register_backend(name: str, factory) -> None:
    """Make ``load_embedder`` build cards with ``backend: name`` by ``factory(files, card, device,
    compute_type)``. kb registers none besides CTranslate2; tests register a hash stand-in."""
    _BACKENDS[name] = factory


def load_embedder(files: dict[str, bytes], device: str = "auto", compute_type: str = "auto", threads: int = 0):
    """The embedder a model section (or a converted folder) holds; ``threads`` as CT2Embedder's."""
    try:
        card = json.loads(bytes(files["kb_model.json"]))
        backend = card.get("backend", "ctranslate2")
    except (KeyError, ValueError, AttributeError):
        raise ModelError("kb_model.json is missing or invalid; rebuild the index with kb-build") from None
    if backend == "ctranslate2":
        return CT2Embedder(files, device=device, compute_type=compute_type, threads=threads)
    factory = _BACKENDS.get(backend)
    if factory is None:  # an artifact from a kb that has it (exit 4, like a format this kb does not read)
        raise UnsupportedVersion(f"embedder backend {backend!r} is not available in this kb; upgrade kb, or rebuild the index with this kb-build")
    return factory(files, card, device, compute_type)
