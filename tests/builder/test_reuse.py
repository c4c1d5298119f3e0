"""kb-build reuses the vectors of the artifact it replaces (or of --reuse OLD.kb) for every chunk
whose embedded text is unchanged, and writes the bytes a full build writes; a source it cannot
use is refused in one line and the build goes on. Chunk keys survive unrelated changes."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import fakes
from kb.builder import build as build_module
from kb.builder import embedders
from kb.builder.build import build
from kb.builder.cli import main as kb_build
from kb.builder.config import BuildConfig, VectorOptions, load_config
from kb.formats import layout as L
from kb.runtime.index import Index
from kb.runtime.requests import parse_get
from kb.runtime.service import Service

from corpora import KB_CLI, SAMPLE, TINY, artifact_parts, build_hash, rewrite

MIXED = TINY.parent / "mixed"
RUNBOOK = "disk-full.md"


@pytest.fixture
def corpus(tmp_path) -> Path:
    c = tmp_path / "corpus"
    shutil.copytree(SAMPLE, c)
    return c


def _edit(c: Path) -> None:
    f = c / "runbooks" / RUNBOOK
    f.write_text(f.read_text() + "\n\n## Afterwards\n\nTell the on-call channel the restore is done.\n")


def _add(c: Path) -> None:
    for i in range(3):
        (c / "notes" / f"new-{i}.md").write_text(f"# New note {i}\n\nThe gateway nw-gw-01 was rebooted on day {i}.\n")


def _delete(c: Path) -> None:
    (c / "notes" / sorted(p.name for p in (c / "notes").iterdir())[0]).unlink()


def _rename(c: Path) -> None:
    f = c / "runbooks" / RUNBOOK
    f.rename(c / "runbooks" / "renamed.md")


def _kb_toml(c: Path) -> None:
    toml = c / "kb.toml"
    toml.write_text(toml.read_text() + "\n[chunking]\nmax_tokens = 120\n")


CHANGES = {"add": _add, "edit": _edit, "delete": _delete, "rename": _rename, "kb.toml": _kb_toml}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_rebuild_after_a_change_is_the_bytes_of_a_full_build_and_embeds_only_new_text(corpus, tmp_path, change):
    old = tmp_path / "old.kb"
    first = build_hash(corpus, old)
    assert (first.reused_chunks, first.embedded_chunks, first.reuse_source) == (0, first.chunks, None)
    CHANGES[change](corpus)
    full = build_hash(corpus, tmp_path / "full.kb")
    again = build_hash(corpus, tmp_path / "again.kb", reuse=old)
    assert (tmp_path / "again.kb").read_bytes() == (tmp_path / "full.kb").read_bytes()
    assert again.reuse_source == str(old) and again.warnings == full.warnings
    assert again.reused_chunks + again.embedded_chunks == again.chunks == full.chunks
    assert 0 < again.reused_chunks and again.embedded_chunks < again.chunks
    if change == "delete":
        assert again.embedded_chunks == 0
    if change in ("edit", "add"):
        assert again.embedded_chunks <= 6


def test_a_rebuild_of_an_unchanged_corpus_embeds_nothing(tmp_path):
    build_hash(TINY, tmp_path / "a.kb")
    rep = build_hash(TINY, tmp_path / "b.kb", reuse=tmp_path / "a.kb")
    assert (rep.reused_chunks, rep.embedded_chunks) == (rep.chunks, 0)
    assert (tmp_path / "a.kb").read_bytes() == (tmp_path / "b.kb").read_bytes()


def test_another_model_is_refused_in_one_line_and_the_build_is_full(tmp_path, monkeypatch):
    monkeypatch.setitem(embedders.EMBEDDERS, "hash-32", lambda quantization: fakes.HashEmbedder(32, "hash-32"))
    build_hash(TINY, tmp_path / "old.kb")
    rep = build_hash(TINY, tmp_path / "new.kb", reuse=tmp_path / "old.kb", embedder="hash-32")
    build_hash(TINY, tmp_path / "full.kb", embedder="hash-32")
    assert rep.warnings == [f"not reusing {tmp_path / 'old.kb'}: it was built with another model (hash-64; this build: hash-32); embedding every chunk"]
    assert (rep.reuse_source, rep.reused_chunks, rep.embedded_chunks) == (None, 0, rep.chunks)
    assert (tmp_path / "new.kb").read_bytes() == (tmp_path / "full.kb").read_bytes()


def _refusal(tmp_path, source: Path, **kw) -> str:
    rep = build_hash(TINY, tmp_path / "new.kb", reuse=source, **kw)
    build_hash(TINY, tmp_path / "full.kb", **kw)
    assert (tmp_path / "new.kb").read_bytes() == (tmp_path / "full.kb").read_bytes()
    assert (rep.reuse_source, rep.reused_chunks) == (None, 0)
    (why,) = rep.warnings
    assert why.startswith(f"not reusing {source}: ") and why.endswith("; embedding every chunk") and "\n" not in why
    return why.removeprefix(f"not reusing {source}: ").removesuffix("; embedding every chunk")


def test_a_damaged_source_is_refused_in_one_line(tmp_path):
    old = tmp_path / "old.kb"
    build_hash(TINY, old)
    version, secs = artifact_parts(old)
    data = bytearray(old.read_bytes())
    vectors = next(s for s in Index(old).artifact.sections.values() if s.name == L.VECTORS)
    data[vectors.offset + 100] ^= 0xFF  # the crc32 no longer matches
    old.write_bytes(bytes(data))
    assert _refusal(tmp_path, old) == "corrupt artifact: crc mismatch in section 'vectors.hnsw'"


def test_a_forged_source_whose_inputs_do_not_fit_is_refused(tmp_path):
    old = tmp_path / "old.kb"
    build_hash(TINY, old)
    version, secs = artifact_parts(old)
    rewrite(old, [s if s.name != L.VECTOR_INPUTS else s._replace(data=s.data[:-16], raw_length=len(s.data) - 16) for s in secs], version)
    assert _refusal(tmp_path, old).startswith("corrupt artifact: vectors.inputs is ")


@pytest.mark.parametrize(
    "source, why",
    [
        ("missing.kb", "no such artifact; build one with kb-build or pass -i PATH"),
        ("text.kb", "not a kb artifact (bad magic)"),
        ("bm25.kb", "it records no vectors.inputs (built with --vectors, with no vectors, or by a kb-build before reuse)"),
        ("golden", "it was built with another analyzer (kb-unicode-2, languages en; this build: kb-unicode-3, languages en)"),
    ],
)
def test_a_foreign_source_is_refused_in_one_line(tmp_path, source, why):
    from corpora import GOLDEN

    (tmp_path / "text.kb").write_text("not an artifact\n")
    if source == "bm25.kb":
        build_hash(TINY, tmp_path / source, embedder="none")
    path = GOLDEN / "tiny-v3.kb" if source == "golden" else tmp_path / source
    assert _refusal(tmp_path, path) == why


def test_another_analyzer_or_vector_precision_is_refused(tmp_path):
    build_hash(TINY, tmp_path / "f16.kb")
    cfg = replace(load_config(TINY / "kb.toml"), embedding_model="hash", reranker="none")
    rep = build([TINY], tmp_path / "de.kb", replace(cfg, languages=("de",)), reuse=tmp_path / "f16.kb")
    assert rep.warnings[-1].endswith("it was built with another analyzer (kb-unicode-3, languages en; this build: kb-unicode-3, languages de); embedding every chunk")
    rep = build([TINY], tmp_path / "bf16.kb", replace(cfg, vectors=VectorOptions(dtype="bf16")), reuse=tmp_path / "f16.kb")
    assert rep.warnings[-1].endswith("its vectors are stored as f16, this build stores bf16; embedding every chunk")


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_reused_vectors_are_exact_at_every_stored_precision(tmp_path, dtype):
    """Also from f32 to a narrower precision: the stored f32 is the embedder's own vector."""
    cfg = replace(load_config(TINY / "kb.toml"), embedding_model="hash", reranker="none", vectors=VectorOptions(dtype=dtype, order="chunks", add_order="chunks"))
    build([TINY], tmp_path / "f32.kb", replace(cfg, vectors=VectorOptions(dtype="f32")))
    build([TINY], tmp_path / "old.kb", cfg)
    for source in ("old.kb", "f32.kb"):
        rep = build([TINY], tmp_path / "new.kb", cfg, reuse=tmp_path / source)
        assert rep.reused_chunks == rep.chunks and rep.warnings == []
        build([TINY], tmp_path / "full.kb", cfg)
        assert (tmp_path / "new.kb").read_bytes() == (tmp_path / "full.kb").read_bytes()


def test_kb_build_reuses_its_output_by_default_and_reports_it(corpus, tmp_path):
    out = tmp_path / "out.kb"
    args = [str(corpus), "-o", str(out), "--embedder", "hash", "--no-reranker"]
    first = json.loads(CliRunner().invoke(kb_build, [*args, "--json", "-q"]).stdout)
    assert (first["reused_chunks"], first["embedded_chunks"], first["reuse_source"]) == (0, first["chunks"], None)
    _edit(corpus)
    r = CliRunner().invoke(kb_build, [*args, "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["reuse_source"] == str(out) and rep["reused_chunks"] + rep["embedded_chunks"] == rep["chunks"] and 0 < rep["embedded_chunks"] <= 3
    assert f"reused the vectors of {rep['reused_chunks']} chunks from {out}; embedded {rep['embedded_chunks']} chunk" in r.stderr
    rep = json.loads(CliRunner().invoke(kb_build, [*args, "--json", "-q", "--no-reuse"]).stdout)
    assert (rep["reused_chunks"], rep["reuse_source"]) == (0, None)
    r = CliRunner().invoke(kb_build, [*args, "--reuse", str(out), "--no-reuse"])
    assert (r.exit_code, r.stderr) == (2, "kb-build: error: --reuse and --no-reuse are exclusive\n")


def test_a_missing_reuse_source_is_one_warning_and_a_full_build(tmp_path):
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(tmp_path / "a.kb"), "--no-reranker", "--reuse", str(tmp_path / "nope.kb")])
    assert r.exit_code == 0, r.output
    assert f"warning: not reusing {tmp_path / 'nope.kb'}: no such artifact; build one with kb-build or pass -i PATH; embedding every chunk\n" in r.stderr


def _jsonl(tmp_path, n: int, skip: int | None = None) -> Path:
    lines = [json.dumps({"id": f"d{i}", "title": f"Doc {i}", "text": f"Record {i} is about the {['gateway', 'backup', 'pager'][i % 3]} number {i}."}) for i in range(n) if i != skip]
    p = tmp_path / f"corpus-{n}-{skip}.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_jsonl_reuses_and_given_vectors_embed_nothing(tmp_path):
    cfg = replace(BuildConfig(), embedding_model="hash", reranker="none")
    build([], tmp_path / "old.kb", cfg, jsonl=[_jsonl(tmp_path, 30)])
    new = _jsonl(tmp_path, 32, skip=4)
    rep = build([], tmp_path / "new.kb", cfg, jsonl=[new], reuse=tmp_path / "old.kb")
    build([], tmp_path / "full.kb", cfg, jsonl=[new])
    assert (rep.reused_chunks, rep.embedded_chunks) == (29, 2)
    assert (tmp_path / "new.kb").read_bytes() == (tmp_path / "full.kb").read_bytes()
    # --vectors: nothing is embedded, nothing reused; the artifact records no inputs, so it is no source either
    given = tmp_path / "v.npy"
    np.save(given, np.random.default_rng(0).standard_normal((30, 64)).astype(np.float32))
    rep = build([], tmp_path / "given.kb", cfg, jsonl=[_jsonl(tmp_path, 30)], vectors=given, reuse=tmp_path / "old.kb")
    assert (rep.reused_chunks, rep.embedded_chunks, rep.reuse_source, rep.warnings) == (0, 0, None, [])
    rep = build([], tmp_path / "after.kb", cfg, jsonl=[_jsonl(tmp_path, 30)], reuse=tmp_path / "given.kb")
    assert rep.reused_chunks == 0 and "it records no vectors.inputs" in rep.warnings[0]


def test_a_shard_reuses_its_previous_build(corpus, tmp_path):
    build_hash(corpus, tmp_path / "old.kb", shard=(1, 3))
    _add(corpus)
    rep = build_hash(corpus, tmp_path / "new.kb", shard=(1, 3), reuse=tmp_path / "old.kb")
    build_hash(corpus, tmp_path / "full.kb", shard=(1, 3))
    assert rep.reused_chunks > 0 and rep.shard == "1/3"
    assert (tmp_path / "new.kb").read_bytes() == (tmp_path / "full.kb").read_bytes()


def test_both_dense_legs_of_a_multilingual_artifact_are_reused(tmp_path, monkeypatch):
    main, english = "hash-multi", "hash"  # stand-ins for multilingual-e5-small and all-MiniLM-L6-v2 (tests/runtime/test_english_leg.py)
    monkeypatch.setitem(embedders.EMBEDDERS, main, lambda quantization: fakes.HashEmbedder(32, main))
    monkeypatch.setattr(build_module, "choose_embedder", lambda languages: main)
    monkeypatch.setattr(build_module, "english_leg", lambda languages, model: english if languages.get("en") else "")
    corpus = tmp_path / "mixed"
    shutil.copytree(MIXED, corpus)
    cfg = replace(BuildConfig(), reranker="none")
    build([corpus], tmp_path / "old.kb", cfg)
    f = corpus / "tea.md"
    f.write_text(f.read_text() + "\n\nGreen tea is steamed, black tea is oxidised.\n")
    rep = build([corpus], tmp_path / "new.kb", cfg, reuse=tmp_path / "old.kb")
    full = build([corpus], tmp_path / "full.kb", cfg)
    assert full.embedder_en == english and rep.reuse_source is not None
    assert rep.reused_chunks > 0 and 0 < rep.embedded_chunks <= 2
    assert (tmp_path / "new.kb").read_bytes() == (tmp_path / "full.kb").read_bytes()


# --- chunk keys ------------------------------------------------------------------------------------
def _keys(path: Path) -> dict[str, str]:
    with Index(path) as ix:
        return {ix.chunk_key(c): ix.chunk(c).text for c in range(ix.n_chunks)}


@pytest.mark.parametrize("change", ["add", "edit", "delete"])
def test_a_chunk_key_names_the_same_text_after_unrelated_changes(corpus, tmp_path, change):
    build_hash(corpus, tmp_path / "old.kb")
    before = _keys(tmp_path / "old.kb")
    assert len(before) == Index(tmp_path / "old.kb").n_chunks  # one key a chunk
    with Index(tmp_path / "old.kb") as ix:
        kept = [ix.chunk_key(c) for c in range(ix.n_chunks) if ix.chunk(c).path.startswith("decisions/")]
    CHANGES[change](corpus)
    build_hash(corpus, tmp_path / "new.kb")
    with Index(tmp_path / "new.kb") as ix:
        service = Service(ix, stale_check=False)
        for key in kept:
            for req in ({"chunk_key": key}, {"targets": [key]}):
                got = service.get(parse_get(req))
                record = got["chunk"] if "chunk" in got else got["items"][0]["chunk"]
                assert (record["chunk_key"], record["text"]) == (key, before[key])


def test_results_carry_chunk_keys_and_kb_get_mcp_and_http_take_them(sample_artifact):
    from kb.runtime.cli import main as kb

    r = CliRunner().invoke(kb, ["search", "restore a snapshot", "-i", str(sample_artifact), "--json", "--no-stale-check"])
    top = json.loads(r.stdout)["results"][0]
    assert len(top["chunk_key"]) == 16
    with Index(sample_artifact) as ix:
        assert ix.chunk_key(top["chunk_id"]) == top["chunk_key"] and ix.chunk_of_key(top["chunk_key"]) == top["chunk_id"]
    r = CliRunner().invoke(kb, ["get", top["chunk_key"], "-i", str(sample_artifact), "--json"])
    assert json.loads(r.stdout)["chunk"]["chunk_id"] == top["chunk_id"], r.output
    r = CliRunner().invoke(kb, ["get", "0123456789abcdef", "-i", str(sample_artifact)])
    assert (r.exit_code, r.stderr) == (2, "kb: error: no chunk with key '0123456789abcdef' (a chunk's key changes when its text or its document's path does; search again)\n")
    with Index(sample_artifact) as ix:
        from kb.runtime.requests import RequestError

        assert Service(ix, stale_check=False).get(parse_get({"chunk_key": top["chunk_key"]}))["chunk"]["chunk_id"] == top["chunk_id"]
        with pytest.raises(RequestError) as e:
            Service(ix, stale_check=False).get(parse_get({"chunk_key": "nope"}))
        assert (e.value.code, e.value.field) == ("not_found", "chunk_key")


def test_an_artifact_without_keys_says_so(tmp_path):
    from corpora import GOLDEN
    from kb.runtime.cli import main as kb

    r = CliRunner().invoke(kb, ["get", "0123456789abcdef", "-i", str(GOLDEN / "tiny-v3.kb")])
    assert (r.exit_code, r.stderr) == (2, "kb: error: no chunk with key '0123456789abcdef': this artifact has no chunk keys (built before them); rebuild it with kb-build\n")


def test_with_the_real_model_a_rebuild_is_the_bytes_of_a_full_build(tmp_path):
    """all-MiniLM-L6-v2 (int8): a reused vector is the one a fresh embedding gives, because the
    embedder pads nothing (a padded batch would move it, models/encoders.py)."""
    from kb.common.errors import ModelError

    try:
        embedders.default_embedder_files("int8")
    except ModelError as e:
        pytest.skip(f"all-MiniLM-L6-v2 unavailable: {e}")
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLE / "runbooks", corpus / "runbooks")
    cfg = replace(BuildConfig(), embedding_model="all-MiniLM-L6-v2", reranker="none")
    build([corpus], tmp_path / "old.kb", cfg)
    _edit(corpus)
    (corpus / "runbooks" / "deploys.md").unlink()
    rep = build([corpus], tmp_path / "new.kb", cfg, reuse=tmp_path / "old.kb")
    build([corpus], tmp_path / "full.kb", cfg)
    assert rep.reused_chunks > 0 and 0 < rep.embedded_chunks <= 3
    assert (tmp_path / "new.kb").read_bytes() == (tmp_path / "full.kb").read_bytes()


@pytest.mark.parametrize("name, width", [(L.CHUNK_KEYS, L.KEY_BYTES), (L.VECTOR_INPUTS, L.INPUT_BYTES)])
def test_a_forged_key_or_inputs_section_of_the_wrong_size_is_a_corrupt_artifact(tmp_path, tiny_artifact, name, width):
    from kb.runtime.cli import main as kb

    p = tmp_path / "forged.kb"
    version, secs = artifact_parts(tiny_artifact)
    n = len(next(s for s in secs if s.name == name).data) // width
    rewrite(p, [s if s.name != name else s._replace(data=s.data[:-1], raw_length=len(s.data) - 1) for s in secs], version)
    r = CliRunner().invoke(kb, ["search", "backup", "-i", str(p), "--no-stale-check"])
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: section {name!r} is {n * width - 1} bytes, expected {n * width}\n")
