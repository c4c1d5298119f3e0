"""Torch-free conversion of Hugging Face BERT models to CTranslate2, and reading model folders.

Shared by kb-build (which packs converted models into artifacts) and kb (whose ``--reranker
PATH`` may name an HF folder, converted on first use). Heavy imports (ctranslate2.specs,
safetensors, tokenizers) happen inside the functions that need them; the frozen ``kb`` leaves
them out, and ``read_model_folder`` then says to convert with kb-build first.

A converted model is a dict {filename: bytes}: the CTranslate2 files (model.bin, config.json,
vocabulary.json) plus kb's tokenizer.json, kb_model.json and, for a cross-encoder, head.npz
(formats/SPEC.md: the model sections and the model card).

Converted folders are cached under ``$KB_CACHE_DIR`` (default ``~/.cache/kb``)::

    <cache>/models/ct2/<name>-<quant>-<key>/  model.bin, config.json, vocabulary.json,
                                          tokenizer.json, kb_model.json[, head.npz]

written to a temporary folder first and renamed into place, so a folder that exists is complete.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

from ..common import cache_root
from ..common.errors import ModelError

__all__ = ["CONVERTER_VERSION", "HF_FILES", "cache_root", "convert_bert", "read_model_folder"]

# Bump when the converted output changes for the same inputs (layout, config,
# kb_model.json fields): it is part of the conversion cache key.
CONVERTER_VERSION = 1

HF_FILES = ("model.safetensors", "config.json", "tokenizer.json")  # what an HF BERT folder needs


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def publish(tmp: Path, final: Path) -> None:
    """Atomically move a fully written temp folder into place.

    If another process won the race, keep its folder and drop ours.
    """
    try:
        os.replace(tmp, final)  # fails if final is a non-empty directory
    except OSError:
        if final.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            raise


def read_folder(folder: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".")
    }


def _strip_prefix(weights: dict) -> tuple[dict, dict]:
    """Split HF BERT weights into (encoder weights without "bert." prefix, head)."""
    enc, head = {}, {}
    for k, v in weights.items():
        if k.startswith("bert."):
            enc[k[5:]] = v
        elif k.startswith(("classifier.", "cls.")):
            head[k] = v
        else:
            enc[k] = v
    return enc, head


def _build_spec(cfg: dict, w: dict, vocab: list[str], unk_token: str, with_pooler: bool):
    import numpy as np
    from ctranslate2.specs import common_spec, transformer_spec

    acts = {
        "gelu": common_spec.Activation.GELU,
        "gelu_python": common_spec.Activation.GELU,
        "gelu_new": common_spec.Activation.GELUTanh,
        "gelu_fast": common_spec.Activation.GELUTanh,
        "gelu_pytorch_tanh": common_spec.Activation.GELUTanh,
        "quick_gelu": common_spec.Activation.GELUSigmoid,
        "relu": common_spec.Activation.RELU,
        "silu": common_spec.Activation.SWISH,
        "swish": common_spec.Activation.SWISH,
    }
    act = cfg.get("hidden_act", "gelu")
    if act not in acts:
        raise ModelError(f"unsupported BERT hidden_act {act!r}")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ModelError("only absolute position embeddings are supported")
    n_layers = int(cfg["num_hidden_layers"])

    def get(name):
        try:
            a = w[name]
        except KeyError:
            raise ModelError(f"weight {name!r} missing from model.safetensors; not a BERT checkpoint?") from None
        return np.ascontiguousarray(a, dtype=np.float32)

    def linear(spec, prefix):
        spec.weight = get(prefix + ".weight")
        spec.bias = get(prefix + ".bias")

    def norm(spec, prefix):
        # Old checkpoints name LayerNorm params gamma/beta.
        if prefix + ".weight" in w:
            spec.gamma, spec.beta = get(prefix + ".weight"), get(prefix + ".bias")
        else:
            spec.gamma, spec.beta = get(prefix + ".gamma"), get(prefix + ".beta")

    enc = transformer_spec.TransformerEncoderSpec(
        n_layers,
        int(cfg["num_attention_heads"]),
        pre_norm=False,
        activation=acts[act],
        layernorm_embedding=True,
        num_source_embeddings=2,
        embeddings_merge=common_spec.EmbeddingsMerge.ADD,
    )
    spec = transformer_spec.TransformerEncoderModelSpec(
        enc, pooling_layer=with_pooler, pooling_activation=common_spec.Activation.Tanh
    )
    spec.encoder.scale_embeddings = False
    spec.encoder.embeddings[0].weight = get("embeddings.word_embeddings.weight")
    spec.encoder.embeddings[1].weight = get("embeddings.token_type_embeddings.weight")
    spec.encoder.position_encodings.encodings = get("embeddings.position_embeddings.weight")
    norm(spec.encoder.layernorm_embedding, "embeddings.LayerNorm")
    if with_pooler:
        linear(spec.pooler_dense, "pooler.dense")

    for i, layer in enumerate(spec.encoder.layer):
        p = f"encoder.layer.{i}."
        qkv = layer.self_attention.linear[0]
        qkv.weight = np.concatenate([get(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")])
        qkv.bias = np.concatenate([get(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
        linear(layer.self_attention.linear[1], p + "attention.output.dense")
        norm(layer.self_attention.layer_norm, p + "attention.output.LayerNorm")
        linear(layer.ffn.linear_0, p + "intermediate.dense")
        linear(layer.ffn.linear_1, p + "output.dense")
        norm(layer.ffn.layer_norm, p + "output.LayerNorm")

    n_vocab = spec.encoder.embeddings[0].weight.shape[0]
    vocab = list(vocab) + [f"<extra_id_{i}>" for i in range(n_vocab - len(vocab))]
    spec.register_vocabulary(vocab[:n_vocab])
    spec.config.unk_token = unk_token
    spec.config.layer_norm_epsilon = float(cfg.get("layer_norm_eps", 1e-12))
    return spec


def checked_quantization(quantization: str | None) -> str:
    """The CTranslate2 weight type a conversion writes for ``quantization`` (None: float32)."""
    quant = "float32" if quantization in (None, "float32") else str(quantization)
    accepted = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
    if quant not in accepted:
        raise ModelError(f"quantization {quantization!r} not supported; use one of {', '.join(accepted)} or None")
    return quant


def convert_bert(
    hf_dir: Path,
    quantization: str | None,
    cache_dir: Path | None = None,
    *,
    name: str | None = None,
    max_tokens: int | None = None,
) -> dict[str, bytes]:
    """Convert an HF BertModel (or BertForSequenceClassification) folder to
    CTranslate2 files, without torch or transformers.

    ``hf_dir`` holds model.safetensors, config.json and tokenizer.json.
    ``quantization``: "int8", None/"float32", or another CTranslate2 weight type.
    Returns the converted files (module docstring), cached under <cache>/models/ct2/ by a
    hash of the inputs, the quantization and CONVERTER_VERSION.
    """
    hf_dir = Path(hf_dir)
    for n in HF_FILES:
        if not (hf_dir / n).is_file():
            raise ModelError(f"{hf_dir / n} not found; a BERT folder needs {', '.join(HF_FILES)}")
    quant = checked_quantization(quantization)

    try:
        cfg = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {hf_dir / 'config.json'}: {e}") from None
    if cfg.get("model_type", "bert") != "bert":
        raise ModelError(f"{hf_dir} holds a {cfg.get('model_type')!r} model, only BERT is supported")
    archs = cfg.get("architectures") or []
    kind = "cross-encoder" if any("SequenceClassification" in a for a in archs) else "embedder"
    name = name or hf_dir.name
    if max_tokens is None:
        sbert = hf_dir / "sentence_bert_config.json"
        if sbert.is_file():
            max_tokens = int(json.loads(sbert.read_text(encoding="utf-8")).get("max_seq_length") or 0) or None
    if max_tokens is None:
        max_tokens = min(512, int(cfg.get("max_position_embeddings", 512)))
    max_tokens = min(int(max_tokens), int(cfg.get("max_position_embeddings", max_tokens)))

    src_sha = sha256_file(hf_dir / "model.safetensors")
    key = hashlib.sha256()
    key.update(f"kb-convert-bert/{CONVERTER_VERSION}/{quant}/{name}/{max_tokens}/{src_sha}\n".encode())
    for n in ("config.json", "tokenizer.json"):
        key.update(hashlib.sha256((hf_dir / n).read_bytes()).digest())
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    root = cache_root(cache_dir) / "models" / "ct2"
    final = root / f"{safe}-{quant}-{key.hexdigest()[:16]}"
    if (final / "kb_model.json").is_file():
        return read_folder(final)

    try:
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ModelError(f"model conversion needs {e.name}; install kb-search[build]") from None

    try:
        weights = load_file(str(hf_dir / "model.safetensors"))
    except Exception as e:  # safetensors raises its own error types
        raise ModelError(f"cannot read {hf_dir / 'model.safetensors'}: {e}") from None
    enc_w, head_w = _strip_prefix(weights)
    if kind == "embedder" and "classifier.weight" in head_w:
        kind = "cross-encoder"

    tok_bytes = (hf_dir / "tokenizer.json").read_bytes()
    try:
        tok = Tokenizer.from_str(tok_bytes.decode("utf-8"))
    except Exception as e:
        raise ModelError(f"cannot load {hf_dir / 'tokenizer.json'}: {e}") from None
    vocab_map = tok.get_vocab(with_added_tokens=True)
    vocab = [t for t, _ in sorted(vocab_map.items(), key=lambda kv: kv[1])]
    unk = "[UNK]" if "[UNK]" in vocab_map else (vocab[0] if vocab else "[UNK]")

    spec = optimized(_build_spec(cfg, enc_w, vocab, unk, with_pooler=(kind == "cross-encoder")), quant)

    meta = {
        "kind": kind,
        "name": name,
        "source_sha256": src_sha,
        "quantization": quant,
        "pooling": "mean" if kind == "embedder" else "cls",
        "normalize": kind == "embedder",
        "max_tokens": max_tokens,
        "dim": int(cfg["hidden_size"]),
    }

    head_bytes = None
    if kind == "cross-encoder":
        if "classifier.weight" not in head_w:
            raise ModelError(f"{hf_dir} is a sequence-classification model without classifier weights")
        arrays = {
            "pooler_dense_weight": np.asarray(enc_w["pooler.dense.weight"], np.float32),
            "pooler_dense_bias": np.asarray(enc_w["pooler.dense.bias"], np.float32),
            "classifier_weight": np.asarray(head_w["classifier.weight"], np.float32),
            "classifier_bias": np.asarray(head_w["classifier.bias"], np.float32),
        }
        meta["num_labels"] = int(arrays["classifier_weight"].shape[0])
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        head_bytes = buf.getvalue()
    extra = {"tokenizer.json": tok_bytes} | ({"head.npz": head_bytes} if head_bytes is not None else {})
    return save_converted(spec, final, extra, meta)


def optimized(spec, quant: str):
    """``spec`` validated and quantized to ``quant`` by CTranslate2 (a refusal is one ModelError line)."""
    try:
        spec.validate()
        spec.optimize(quantization=None if quant == "float32" else quant)
    except ValueError as e:
        raise ModelError(f"CTranslate2 rejected the converted model: {str(e).splitlines()[0]}") from None
    return spec


def save_converted(spec, final: Path, extra: dict[str, bytes], card: dict) -> dict[str, bytes]:
    """Write a converted model into the cache folder ``final``: the CTranslate2 files, kb's
    ``extra`` files and the model card, in a temporary folder beside it renamed into place (a
    folder that exists is complete). Returns all the files."""
    root = final.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=root))
        tmp.chmod(0o755)  # mkdtemp makes it 0700; the published folder should be readable like any cache entry
    except OSError as e:
        raise ModelError(f"cannot write model cache under {root}: {e}; set KB_CACHE_DIR to a writable folder") from None
    try:
        spec.save(str(tmp))
        for name, data in extra.items():
            (tmp / name).write_bytes(data)
        (tmp / "kb_model.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        files = read_folder(tmp)
        publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return files


def read_model_folder(path, kind: str, quantization: str = "int8") -> dict[str, bytes]:
    """The converted files of the ``kind`` model ("cross-encoder" or "embedder") in ``path``: a
    converted folder (kb_model.json + model.bin) is read as is, an HF BERT folder (model.safetensors
    + config.json + tokenizer.json) is converted (cached). Anything else is refused, in one line."""
    what = "reranker" if kind == "cross-encoder" else "model"
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ModelError(f"{what} {folder} not found")
    if not folder.is_dir():
        raise ModelError(f"{what} {folder} is not a folder")
    if (folder / "kb_model.json").is_file() and (folder / "model.bin").is_file():
        try:
            files = {
                p.name: p.read_bytes()
                for p in sorted(folder.iterdir())
                if p.is_file() and not p.name.startswith(".") and p.suffix != ".md"  # a model card is not a model file
            }
        except OSError as e:
            raise ModelError(f"cannot read {what} {folder}: {e.strerror or e}") from None
    elif (folder / "model.safetensors").is_file() and (folder / "config.json").is_file():
        try:
            import ctranslate2.specs  # noqa: F401 - conversion needs them; the frozen kb leaves them out
            import safetensors  # noqa: F401
        except ImportError:
            raise ModelError(f"{folder} is an HF model; convert it with kb-build --reranker first (this kb cannot convert models)") from None
        files = convert_bert(folder, quantization)
    else:
        raise ModelError(f"{folder} is not a {what} folder (need kb_model.json + model.bin, or HF model.safetensors + config.json)")
    try:
        found = json.loads(files["kb_model.json"]).get("kind", "embedder")
    except (KeyError, ValueError, AttributeError):
        raise ModelError(f"{what} {folder}: kb_model.json is missing or invalid") from None
    if found != kind:
        raise ModelError(f"{what} {folder}: the model is a {found!r}, not a {kind}")
    return files
