"""Runtime cross-encoder (kb.runtime.rerank): CTranslate2 encoder + numpy head.

Offline: tiny random BertForSequenceClassification folders (numpy +
safetensors.numpy + a WordPiece tokenizer built with `tokenizers`), converted
with kb.builder.models.convert_bert and checked against a float64 numpy
reference forward (encoder + pooler + classifier). A MiniLM-L6-shaped random
model is also checked against transformers when torch and transformers are
importable.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ctranslate2")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

from kb.models import convert as builder_models  # noqa: E402
from kb.common.errors import ModelError  # noqa: E402
from kb.runtime.cross_encoder import CT2CrossEncoder, load_reranker, load_reranker_path  # noqa: E402

from bert_ref import bert_hidden, random_cross_encoder as _random_ce, tiny_cross_encoder as _tiny_ce, tiny_tokenizer as _tiny_tokenizer  # noqa: E402


def _ref_logits(w: dict, cfg: dict, ids: list[int], types: list[int]) -> np.ndarray:
    """Logits (num_labels,) of an HF BertForSequenceClassification for one sequence."""
    f = lambda n: np.asarray(w[n], dtype=np.float64)  # noqa: E731
    x = bert_hidden(w, cfg, ids, types)
    pooled = np.tanh(f("bert.pooler.dense.weight") @ x[0] + f("bert.pooler.dense.bias"))
    return f("classifier.weight") @ pooled + f("classifier.bias")


QUERY = "what is the risk of a cat on the road"
PASSAGES = [
    "The cat sat on the mat",
    "dogs ran fast on the road",
    "",
    "red fish blue fish " * 6,
    "a bird on a tree near the house",
    "vitamin study patients bone risk",
    "the sky",
]


def _reference(tiny, query, passages, max_tokens):
    """Pair encoding by the tokenizer itself (only_second truncation) + numpy forward."""
    tok = tiny["tok"]
    tok.no_padding()
    tok.enable_truncation(max_tokens, strategy="only_second")
    out = []
    for p in passages:
        e = tok.encode(query, p)
        out.append(_ref_logits(tiny["weights"], tiny["cfg"], e.ids, e.type_ids))
    tok.no_truncation()
    return np.array(out)


@pytest.fixture(scope="module")
def tiny1(tmp_path_factory):
    return _tiny_ce(tmp_path_factory.mktemp("rerank"), num_labels=1, max_tokens=48)


@pytest.fixture(scope="module")
def ce1(tiny1):
    return CT2CrossEncoder(tiny1["files"], device="cpu", compute_type="float32", threads=1)


# --------------------------------------------------------------------------
# correctness


def test_matches_numpy_reference(tiny1, ce1):
    meta = json.loads(tiny1["files"]["kb_model.json"])
    assert meta["kind"] == "cross-encoder" and meta["num_labels"] == 1 and meta["max_tokens"] == 48
    assert (ce1.name, ce1.max_tokens, ce1.num_labels, ce1.dim) == ("tiny-ce", 48, 1, 32)
    got = ce1.score(QUERY, PASSAGES, batch_size=8)
    assert got.shape == (len(PASSAGES),) and got.dtype == np.float32
    ref = _reference(tiny1, QUERY, PASSAGES, 48)[:, 0]
    np.testing.assert_allclose(got, ref, atol=1e-3)
    assert np.ptp(ref) > 0.5  # the test discriminates: passages get different scores


def test_numpy_pooler_fallback_matches(tiny1, ce1):
    ce = CT2CrossEncoder(tiny1["files"], device="cpu", compute_type="float32", threads=1)
    ce._ct2_pooler = False  # as if CTranslate2 returned no pooler_output: pooler from head.npz
    np.testing.assert_allclose(ce.score(QUERY, PASSAGES), ce1.score(QUERY, PASSAGES), atol=1e-4)


def test_two_labels_score_is_logit_difference(tmp_path):
    tiny = _tiny_ce(tmp_path, num_labels=2, seed=3)
    ce = CT2CrossEncoder(tiny["files"], device="cpu", compute_type="float32", threads=1)
    assert ce.num_labels == 2 and ce.max_tokens == 64  # max_position_embeddings of the tiny model
    ref = _reference(tiny, QUERY, PASSAGES, 64)
    np.testing.assert_allclose(ce.score(QUERY, PASSAGES), ref[:, 1] - ref[:, 0], atol=1e-3)


def test_batch_matches_single_and_order_preserved(ce1):
    alone = np.array([ce1.score(QUERY, [p], batch_size=1)[0] for p in PASSAGES], dtype=np.float32)
    for bs in (1, 2, 3, 8, 100):
        np.testing.assert_allclose(ce1.score(QUERY, PASSAGES, batch_size=bs), alone, atol=1e-4)
    perm = np.random.default_rng(0).permutation(len(PASSAGES))
    np.testing.assert_allclose(ce1.score(QUERY, [PASSAGES[i] for i in perm], batch_size=3), alone[perm], atol=1e-4)
    assert ce1.score(QUERY, []).shape == (0,)


def test_int8_close_to_float32(tiny1, ce1):
    ce8 = CT2CrossEncoder(tiny1["files"], device="cpu", compute_type="int8", threads=1)
    a, b = ce8.score(QUERY, PASSAGES), ce1.score(QUERY, PASSAGES)
    assert np.corrcoef(a, b)[0, 1] > 0.95


def test_truncation_keeps_query(tiny1, ce1):
    tok = tiny1["tok"]
    q_ids = tok.encode(QUERY, add_special_tokens=False).ids
    head = [2] + q_ids + [3]
    long = "red fish blue fish " * 40  # 160 tokens >> 48
    ids, types = ce1._encode_pairs(QUERY, [long, "the cat"], None)
    assert len(ids[0]) == 48 and ids[0][: len(head)] == head and ids[0][-1] == 3
    assert types[0] == [0] * len(head) + [1] * (48 - len(head))
    assert ids[1] == head + tok.encode("the cat", add_special_tokens=False).ids + [3]
    # the model sees exactly what the tokenizer's only_second truncation gives
    np.testing.assert_allclose(ce1.score(QUERY, [long]), _reference(tiny1, QUERY, [long], 48)[:, 0], atol=1e-3)

    # passage_tokens caps every passage first
    ids, types = ce1._encode_pairs(QUERY, [long, "the cat"], 5)
    assert len(ids[0]) == len(head) + 5 + 1 and ids[0][: len(head)] == head
    assert ids[1] == head + tok.encode("the cat", add_special_tokens=False).ids + [3]
    five = " ".join(["red", "fish", "blue", "fish", "red"])
    np.testing.assert_allclose(ce1.score(QUERY, [long], passage_tokens=5), ce1.score(QUERY, [five]), atol=1e-5)

    # a query longer than half the window is cut to half; the passage keeps the rest
    long_q = "what is the risk " * 20
    ids, _ = ce1._encode_pairs(long_q, ["the cat sat"], None)
    half = (48 - 3) // 2
    assert ids[0][: half + 2] == [2] + tok.encode(long_q, add_special_tokens=False).ids[:half] + [3]
    assert len(ids[0]) == half + 3 + 3


def test_max_tokens_argument(tiny1):
    ce = CT2CrossEncoder(tiny1["files"], device="cpu", compute_type="float32", threads=1, max_tokens=20)
    assert ce.max_tokens == 20
    ids, _ = ce._encode_pairs(QUERY, ["red fish " * 30], None)
    assert len(ids[0]) == 20
    assert CT2CrossEncoder(tiny1["files"], device="cpu", threads=1, max_tokens=4096).max_tokens == 48


def test_files_and_loaders(tiny1, ce1, tmp_path, monkeypatch):
    assert ce1.files() is tiny1["files"]
    ref = ce1.score(QUERY, PASSAGES)
    ce = load_reranker(tiny1["files"], device="cpu", compute_type="float32")
    np.testing.assert_allclose(ce.score(QUERY, PASSAGES), ref, atol=1e-6)

    # a converted folder
    conv = tmp_path / "converted"
    conv.mkdir()
    for k, v in tiny1["files"].items():
        (conv / k).write_bytes(v)
    ce = load_reranker_path(conv)
    assert ce.files() == tiny1["files"] and ce.compute_type in ("int8", "default")
    assert np.corrcoef(ce.score(QUERY, PASSAGES), ref)[0, 1] > 0.95

    # an HF folder: converted (int8) into $KB_CACHE_DIR on the fly
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path / "kbcache"))
    ce = load_reranker_path(str(tiny1["folder"]))
    assert json.loads(ce.files()["kb_model.json"])["quantization"] == "int8"
    assert list((tmp_path / "kbcache" / "models" / "ct2").iterdir())
    assert np.corrcoef(ce.score(QUERY, PASSAGES), ref)[0, 1] > 0.95


def test_import_is_lean():
    code = (
        "import sys, kb.runtime.rerank, kb.runtime.cross_encoder; "
        "print(sorted(m for m in ('ctranslate2', 'tokenizers', 'torch', 'transformers', 'kb.builder', 'safetensors') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------
# refusals


def _err(fn, *a, **kw) -> str:
    with pytest.raises(ModelError) as ei:
        fn(*a, **kw)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def test_bad_files_raise(tiny1, tmp_path):
    files = tiny1["files"]
    incomplete = "reranker files incomplete (need kb_model.json and model.bin); convert the model with kb-build --reranker"
    assert _err(CT2CrossEncoder, {}) == incomplete
    assert _err(CT2CrossEncoder, {k: v for k, v in files.items() if k != "model.bin"}) == incomplete
    assert _err(CT2CrossEncoder, {**files, "kb_model.json": b"{not json"}).startswith("kb_model.json is invalid (")

    meta = json.loads(files["kb_model.json"])
    for field in ("dim", "num_labels"):  # optional, but integers where present: one line, no ValueError
        bad = json.dumps({**meta, field: "wide"}).encode()
        assert _err(CT2CrossEncoder, {**files, "kb_model.json": bad}).startswith("kb_model.json is invalid (ValueError(")
    emb_meta = json.dumps({**meta, "kind": "embedder"}).encode()
    assert _err(CT2CrossEncoder, {**files, "kb_model.json": emb_meta}) == "model 'tiny-ce' is a 'embedder', not a cross-encoder"
    no_kind = json.dumps({k: v for k, v in meta.items() if k != "kind"}).encode()
    assert _err(CT2CrossEncoder, {**files, "kb_model.json": no_kind}) == "model 'tiny-ce' is a 'embedder', not a cross-encoder"

    assert _err(CT2CrossEncoder, {k: v for k, v in files.items() if k != "head.npz"}) == (
        "cross-encoder 'tiny-ce' lacks head.npz; convert the model with kb-build --reranker"
    )
    assert _err(CT2CrossEncoder, {**files, "head.npz": b"garbage"}).startswith("head.npz of 'tiny-ce' is invalid (")
    head = dict(np.load(io.BytesIO(files["head.npz"])))
    buf = io.BytesIO()
    np.savez(buf, **{k: v for k, v in head.items() if k != "classifier_bias"})
    assert _err(CT2CrossEncoder, {**files, "head.npz": buf.getvalue()}) == (
        "head.npz of 'tiny-ce' lacks 'classifier_bias'; convert the model with kb-build --reranker"
    )
    assert _err(CT2CrossEncoder, {k: v for k, v in files.items() if k != "tokenizer.json"}) == (
        "cross-encoder 'tiny-ce' lacks tokenizer.json; convert the model with kb-build --reranker"
    )
    assert _err(CT2CrossEncoder, {**files, "tokenizer.json": b"{}"}).startswith("tokenizer.json is invalid (")
    assert _err(CT2CrossEncoder, {**files, "model.bin": b"\0" * 16}, device="cpu", compute_type="float32").startswith(
        "cannot load cross-encoder 'tiny-ce' on cpu/float32: "
    )
    assert _err(CT2CrossEncoder, files, device="tpu") == "device 'tpu' not supported; use auto, cpu or cuda"


def test_three_labels_refused(tmp_path):
    tiny = _tiny_ce(tmp_path, num_labels=3)
    assert _err(CT2CrossEncoder, tiny["files"], device="cpu") == (
        "cross-encoder 'tiny-ce' has 3 labels; a reranker needs 1 (relevance logit) or 2 (not relevant, relevant)"
    )


def test_embedder_files_refused(tmp_path):
    from safetensors.numpy import load_file, save_file

    tiny = _tiny_ce(tmp_path, seed=5)
    folder = tiny["folder"]
    w = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if not k.startswith("classifier.")}
    save_file(w, str(folder / "model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["BertModel"]
    (folder / "config.json").write_text(json.dumps(cfg))
    files = builder_models.convert_bert(folder, None, tmp_path / "cache", name="emb")
    assert _err(CT2CrossEncoder, files, device="cpu") == "model 'emb' is a 'embedder', not a cross-encoder"


def test_bad_score_arguments(ce1):
    with pytest.raises(TypeError):
        ce1.score(QUERY, "a passage")
    with pytest.raises(TypeError):
        ce1.score(None, ["a passage"])
    with pytest.raises(ValueError):
        ce1.score(QUERY, ["a passage"], passage_tokens=0)


def test_load_reranker_path_errors(tiny1, tmp_path, monkeypatch):
    missing = tmp_path / "nope"
    assert _err(load_reranker_path, missing) == f"reranker {missing} not found"
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert _err(load_reranker_path, afile) == f"reranker {afile} is not a folder"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _err(load_reranker_path, empty) == (
        f"{empty} is not a reranker folder (need kb_model.json + model.bin, or HF model.safetensors + config.json)"
    )
    # HF folder where the converter's dependencies are missing (the frozen kb)
    monkeypatch.setitem(sys.modules, "safetensors", None)
    assert _err(load_reranker_path, tiny1["folder"]) == (
        f"{tiny1['folder']} is an HF model; convert it with kb-build --reranker first (this kb cannot convert models)"
    )
    monkeypatch.undo()
    # HF folder that is not a cross-encoder: the converter's or the reranker's one-line error
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes(b"not safetensors")
    (bad / "config.json").write_text("{}")
    _err(load_reranker_path, bad)


# --------------------------------------------------------------------------
# transformers (only where torch and transformers are installed)

_MINILM_TOK = (
    Path(os.environ.get("KB_CACHE_DIR") or Path.home() / ".cache" / "kb").expanduser()
    / "models" / "hf" / "all-MiniLM-L6-v2" / "tokenizer.json"
)


def test_minilm_shape_matches_transformers(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    if _MINILM_TOK.is_file():  # real 30522-token WordPiece vocabulary, as ms-marco-MiniLM-L-6-v2
        tok_json = _MINILM_TOK.read_text(encoding="utf-8")
    else:
        tok_json = _tiny_tokenizer().to_str()
    tok = Tokenizer.from_str(tok_json)
    n_vocab = max(tok.get_vocab_size(), 30522 if _MINILM_TOK.is_file() else 0)
    # ms-marco-MiniLM-L-6-v2's architecture, random weights (BERT init scale)
    folder = tmp_path / "ms-marco-shape"
    _random_ce(folder, tok_json, n_vocab, hid=384, heads=12, inter=1536, layers=6, maxpos=512, num_labels=1, seed=7, std=0.05)
    files = builder_models.convert_bert(folder, None, tmp_path / "cache")
    ce = CT2CrossEncoder(files, device="cpu", compute_type="float32")
    assert ce.max_tokens == 512

    model = transformers.BertForSequenceClassification.from_pretrained(str(folder)).eval()
    query = "what is the risk of a cat on the road"
    passages = PASSAGES + ["Vitamin D deficiency is associated with an increased risk of hip fractures. " * 40]
    ids, types = ce._encode_pairs(query, passages, None)
    refs = []
    with torch.no_grad():
        for i, t in zip(ids, types):
            x = torch.tensor([i])
            refs.append(float(model(input_ids=x, token_type_ids=torch.tensor([t]), attention_mask=torch.ones_like(x)).logits[0, 0]))
    got = ce.score(query, passages, batch_size=4)
    np.testing.assert_allclose(got, np.array(refs), atol=1e-3)
