"""Which query embedder a search uses, and what each command imports (issue 20): an artifact
with a ``model.query`` section is searched with the in-place encoder and never loads
CTranslate2; one without it (older kb-build) uses CTranslate2 as before; a BM25-only search
imports neither usearch nor any encoder."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

pytest.importorskip("ctranslate2")
pytest.importorskip("safetensors")

from bert_ref import ct2_int8_pairs, rich_wordpiece, tiny_embedder  # noqa: E402
from corpora import SAMPLE, build_hash  # noqa: E402
from kb.builder.embedders import EMBEDDERS, register_embedder  # noqa: E402
from kb.models.encoders import CT2Embedder  # noqa: E402
from kb.formats import artifact as A  # noqa: E402
from kb.formats import layout as L  # noqa: E402

# On a CPU without int8 dot products, CTranslate2's int8 cuts pair sums to int16
# (models/query_encoder.py ``saturation``): noise that a real model shrugs off (cosine 0.99) but
# that reorders the tiny random model's few passages. A --vectors build's section keeps exact
# sums, so there its vectors come from CTranslate2 in float32, which exact int8 sums agree with;
# an artifact kb-build embedded records the saturation, and its queries are embedded that way.
CT2_INT8 = ct2_int8_pairs() == "exact"

WATCH = ("usearch", "numkong", "tokenizers", "ctranslate2", "torch", "kb.models.encoders", "kb.models.query_encoder", "kb.models._encoder",
         "kb.models.query_tokenizer", "kb.formats.query_model")
QUERY = "the shared drive is out of space, what should I do"


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    """A tiny random CTranslate2 BERT (int8), registered as the embedder "tiny-wp"."""
    files = tiny_embedder(tmp_path_factory.mktemp("tiny-model") / "tiny-wp", rich_wordpiece())
    register_embedder("tiny-wp", lambda quantization: CT2Embedder(files, device="cpu"))
    yield files
    EMBEDDERS.pop("tiny-wp", None)  # other modules' tests list the models kb-build accepts


@pytest.fixture(scope="module")
def tiny_model_artifact(tiny_files, tmp_path_factory):
    """The sample corpus embedded by the tiny model, with model.query."""
    out = tmp_path_factory.mktemp("tiny-artifact") / "sample.kb"
    rep = build_hash(SAMPLE, out, embedder="tiny-wp")
    assert L.MODEL_QUERY in rep.section_bytes, rep.warnings
    return out


def test_a_build_with_given_vectors_packs_the_query_section_and_kb_search_uses_it(tiny_files, tmp_path):
    """--vectors never runs the model to embed; its query section is still written (the
    self-check loads the packed model at the end) and a one-shot search embeds in place."""
    import numpy as np

    from kb.builder.build import build
    from kb.builder.config import load_config
    from kb.builder.embedders import make_embedder
    from kb.runtime.index import Index

    texts = ["the shared drive is out of space", "printers on the third floor", "vacation days carry over"]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"id": f"r{i}", "path": f"r{i}.md", "text": t}) + "\n" for i, t in enumerate(texts)))
    maker = make_embedder("tiny-wp") if CT2_INT8 else CT2Embedder(tiny_files, device="cpu", compute_type="float32")
    np.save(tmp_path / "v.npy", maker.embed(texts))
    out = tmp_path / "byo.kb"
    cfg = dataclasses.replace(load_config(None), embedding_model="tiny-wp", reranker="none")
    rep = build([], out, cfg, jsonl=[jsonl], vectors=tmp_path / "v.npy")
    assert L.MODEL_QUERY in rep.section_bytes, rep.warnings
    with Index(out) as ix:
        assert ix.dense.has_query_model
    code, found, modules, err = _kb("search", texts[0], "-i", out, "--json", "--no-stale-check", "--mode", "vector", "--top-k", "1")
    assert code == 0, err
    assert found["results"][0]["doc_id"] == "r0"
    assert "kb.models.query_encoder" in modules and "ctranslate2" not in modules


def _rewritten(path, out, name, edit):
    """``path`` written to ``out`` with raw section ``name``'s bytes replaced by ``edit(bytes)``
    (None drops the section) and every checksum recomputed, as someone editing the file would."""
    buf = path.read_bytes()
    _, secs = A.validate(memoryview(buf), "x")
    sections = []
    for s in secs.values():
        data = buf[s.offset : s.offset + s.length]
        if s.name == name:
            data = edit(data)
            if data is None:
                continue
        sections.append(A.SectionData(s.name, data, s.codec, len(data) if s.name == name else s.raw_length))
    out.write_bytes(b"".join(A.serialize(sections)))
    return out


def _kb(*args) -> tuple[int, dict, list[str], str]:
    """Run kb in a fresh interpreter: (exit code, parsed JSON stdout or {}, the WATCH modules it
    imported, stderr)."""
    code = (
        "import atexit, sys\n"
        f"WATCH = {WATCH!r}\n"
        "atexit.register(lambda: print('MODULES', ' '.join(m for m in WATCH if m in sys.modules), file=sys.stderr))\n"
        f"sys.argv = ['kb'] + {[str(a) for a in args]!r}\n"
        "from kb.runtime.cli import main\n"
        "main()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    modules = next(l for l in r.stderr.splitlines() if l.startswith("MODULES")).split()[1:]
    try:
        out = json.loads(r.stdout)
    except ValueError:
        out = {}
    return r.returncode, out, modules, r.stderr


def test_a_hybrid_search_uses_the_in_place_encoder_and_never_loads_ctranslate2(tiny_model_artifact):
    code, out, modules, _ = _kb("search", QUERY, "-i", tiny_model_artifact, "--json", "--no-stale-check")
    assert code == 0 and out["results"]
    assert "kb.models.query_encoder" in modules and "kb.models._encoder" in modules  # its int8 products (models/_encoder.c)
    assert "ctranslate2" not in modules and "kb.models.encoders" not in modules and "torch" not in modules
    assert "usearch" not in modules  # a small artifact's dense leg scans its vectors (DenseSpace.scans_vectors)
    assert "tokenizers" not in modules  # printable ASCII is split into words in Python (models/query_tokenizer.py)
    assert "numkong" not in modules  # the scan's cosines: kb's kernel or numpy (runtime/cosines.py stored_cosines)
    code, out, modules, _ = _kb("search", "où est le disque partagé", "-i", tiny_model_artifact, "--json", "--no-stale-check")
    assert code == 0 and "tokenizers" in modules and "ctranslate2" not in modules


def test_ctranslate2_is_used_when_asked_for_and_ranks_alike(tiny_model_artifact):
    _, fast, _, _ = _kb("search", QUERY, "-i", tiny_model_artifact, "--json", "--no-stale-check", "--mode", "vector")
    code, ct2, modules, _ = _kb("search", QUERY, "-i", tiny_model_artifact, "--json", "--no-stale-check", "--mode", "vector",
                                "--compute-type", "int8")
    assert code == 0 and "ctranslate2" in modules and "kb.models.query_encoder" not in modules
    assert [r["chunk_id"] for r in fast["results"]][:3] == [r["chunk_id"] for r in ct2["results"]][:3]


def test_an_artifact_without_the_section_is_searched_with_ctranslate2(tiny_model_artifact, tmp_path):
    old = _rewritten(tiny_model_artifact, tmp_path / "old.kb", L.MODEL_QUERY, lambda data: None)
    code, out, modules, _ = _kb("search", QUERY, "-i", old, "--json", "--no-stale-check")
    assert code == 0 and out["results"] and "ctranslate2" in modules and "kb.formats.query_model" not in modules


@pytest.mark.parametrize("args", [
    ("search", QUERY, "--mode", "bm25", "--json", "--no-stale-check"),
    ("info", "--json"),
    ("list",),
    ("get", "0"),
])
def test_commands_that_embed_nothing_import_no_model_code(tiny_model_artifact, args):
    code, _, modules, err = _kb(*args, "-i", tiny_model_artifact)
    assert code == 0, err
    assert modules == []


def test_kb_version_imports_nothing_heavy():
    code, _, modules, _ = _kb("--version")
    assert code == 0 and modules == []


def test_a_damaged_query_section_is_a_corrupt_artifact_exit_3(tiny_model_artifact, tmp_path):
    bad = _rewritten(tiny_model_artifact, tmp_path / "bad.kb", L.MODEL_QUERY, lambda d: d[:40] + bytes([d[40] ^ 0xFF]) + d[41:])  # in the directory
    code, _, _, err = _kb("search", QUERY, "-i", bad, "--json", "--no-stale-check")
    lines = [l for l in err.splitlines() if not l.startswith("MODULES")]
    assert code == 3 and lines == [f"kb: error: {bad}: corrupt artifact: section 'model.query': directory crc mismatch"]
    code, _, _, _ = _kb("search", QUERY, "-i", bad, "--mode", "bm25", "--json", "--no-stale-check")
    assert code == 0  # BM25 never reads the model


def test_kb_info_verify_checks_the_query_section(tiny_model_artifact):
    code, out, _, err = _kb("info", "-i", tiny_model_artifact, "--json", "--verify")
    assert code == 0, err


def test_the_entry_point_defers_the_tokenizers_librarys_ready_made_classes():
    """runtime/entry.py registers tokenizers.implementations as a stand-in without importing
    tokenizers; the query tokenizer's imports leave it unloaded, and real use still works."""
    code = (
        "import sys\n"
        "from kb.runtime import entry\n"
        "for name, callables in entry._LAZY_MODULES.items():\n"
        "    entry._lazy(name, callables)\n"
        "loaded_early = 'tokenizers' in sys.modules\n"
        "from tokenizers import Tokenizer, models\n"
        "stand_in = type(sys.modules['tokenizers.implementations']).__name__\n"
        "from tokenizers import BertWordPieceTokenizer\n"
        "made = type(BertWordPieceTokenizer()).__name__\n"
        "print(loaded_early, stand_in, made, type(sys.modules['tokenizers.implementations']).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "_LazyModule", "BertWordPieceTokenizer", "module"]


def test_a_query_section_whose_model_card_lacks_its_window_is_corrupt(tiny_model_artifact, tmp_path):
    import msgpack

    def without_window(data):
        meta = msgpack.unpackb(data)
        del meta["embedder"]["max_tokens"]
        return msgpack.packb(meta)

    bad = _rewritten(tiny_model_artifact, tmp_path / "no-window.kb", L.META, without_window)
    code, _, _, err = _kb("search", QUERY, "-i", bad, "--json", "--no-stale-check", "--mode", "bm25")
    assert code == 3 and "a query-model section without its embedding model's card (dim, max_tokens)" in err


def test_a_card_whose_window_cannot_hold_a_query_is_a_corrupt_artifact(tiny_model_artifact, tmp_path):
    """Found by the fuzzer (seed 33, input 100715): max_tokens 1 leaves no room for a query's
    special tokens; the in-place encoder's refusal is the artifact's fault (exit 3), not exit 1."""
    import msgpack

    def one_token(data):
        meta = msgpack.unpackb(data)
        meta["embedder"]["max_tokens"] = 1
        return msgpack.packb(meta)

    bad = _rewritten(tiny_model_artifact, tmp_path / "one-token.kb", L.META, one_token)
    code, _, _, err = _kb("search", QUERY, "-i", bad, "--json", "--no-stale-check")
    assert code == 3 and "corrupt artifact: its embedding model does not load: a query of" in err, err


def _alive(name: str) -> bool:
    import threading

    return any(t.name == name for t in threading.enumerate())


def test_a_one_shot_search_checks_the_encoders_layers_beside_its_bm25_leg(tiny_model_artifact, monkeypatch):
    """A one-shot hybrid search of a small artifact runs its legs one after the other; the
    in-place encoder loads and checks its layers on a thread beside the BM25 leg
    (Searcher._prepare_encoder), done before the search returns, with the same results."""
    import threading

    from kb.models.query_encoder import QueryEncoder
    from kb.runtime.index import Index
    from kb.runtime.search import Query, Searcher

    threads = []
    prepare = QueryEncoder.prepare

    def spy(self):
        threads.append(threading.current_thread().name)
        prepare(self)

    monkeypatch.setattr(QueryEncoder, "prepare", spy)
    q = Query(QUERY, top_k=5)
    with Index(tiny_model_artifact) as ix:
        s = Searcher(ix, one_shot=True)
        got = [(r.chunk_id, r.score) for r in s.search(q, s.defaults).results]
        assert threads == ["kb-prepare-encoder"] and not _alive("kb-prepare-encoder")
        assert len(s.embedder._prepared) == len(s.embedder._linears)
        again = [(r.chunk_id, r.score) for r in s.search(q, s.defaults).results]  # loaded: nothing to prepare
        assert threads == ["kb-prepare-encoder"]
    monkeypatch.setattr(Searcher, "_prepare_encoder", lambda self, space: None)
    with Index(tiny_model_artifact) as ix:
        s = Searcher(ix, one_shot=True)
        assert [(r.chunk_id, r.score) for r in s.search(q, s.defaults).results] == got == again


def test_a_failing_bm25_leg_waits_for_the_encoders_preparation(tiny_model_artifact, monkeypatch):
    """The search raises only once the thread checking the encoder's layers is done: a caller
    that then closes the artifact must not pull the map from under it."""
    import time

    from kb.models.query_encoder import QueryEncoder
    from kb.runtime.index import Index
    from kb.runtime.search import Query, Searcher

    done = []
    prepare = QueryEncoder.prepare

    def slow(self):
        time.sleep(0.3)
        prepare(self)
        done.append(True)

    def failing(*a, **k):
        raise RuntimeError("bm25 leg failed")

    monkeypatch.setattr(QueryEncoder, "prepare", slow)
    with Index(tiny_model_artifact) as ix:
        s = Searcher(ix, one_shot=True)
        monkeypatch.setattr(s.ops, "bm25_leg", failing)
        with pytest.raises(RuntimeError, match="^bm25 leg failed$"):
            s.search(Query(QUERY, top_k=5), s.defaults)
        assert done == [True] and not _alive("kb-prepare-encoder")
