"""kb-build --reranker packs a cross-encoder; kb search uses it (plumbing, with a tiny random model)."""

import json

import pytest
from click.testing import CliRunner

from kb.builder.cli import main as kb_build
from kb.runtime.cli import main as kb

from bert_ref import tiny_cross_encoder
from corpora import TINY


@pytest.fixture(scope="module")
def reranked_artifact(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rr")
    tiny = tiny_cross_encoder(tmp)
    out = tmp / "rr.kb"
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(out), "--embedder", "hash", "--reranker", str(tiny["folder"])])
    assert r.exit_code == 0, r.output
    return out, tiny


def search(out, *args):
    r = CliRunner().invoke(kb, ["search", "backup snapshot", "-i", str(out), "--json", "--no-stale-check", "--all-statuses", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_packed_reranker_is_listed_by_kb_info(reranked_artifact):
    out, _ = reranked_artifact
    d = json.loads(CliRunner().invoke(kb, ["info", "-i", str(out), "--json"]).stdout)
    assert d["models"]["reranker"]["kind"] == "cross-encoder"
    assert "model.rerank" in {s["name"] for s in d["sections"]}
    packed = {m["role"]: m for m in d["packed_models"]}
    assert set(packed) == {"embedder", "reranker"} and packed["reranker"]["section"] == "model.rerank"
    assert packed["reranker"]["bytes"] == next(s["bytes"] for s in d["sections"] if s["name"] == "model.rerank")
    text = CliRunner().invoke(kb, ["info", "-i", str(out)]).stdout.splitlines()
    assert text[text.index(next(x for x in text if x.startswith("packed models: "))) + 2] == f"  reranker: {packed['reranker']['name']}, {packed['reranker']['bytes']:,} bytes (model.rerank)"


def test_a_default_build_packs_a_reranker_only_when_its_search_reranks(tmp_path):
    from dataclasses import replace

    from kb.builder.build import rerank_choice
    from kb.builder.config import BuildConfig, load_config

    assert rerank_choice(BuildConfig()) == "none"
    assert rerank_choice(BuildConfig(search={"rerank": True})) == "default"
    assert rerank_choice(BuildConfig(search={"rerank": True}, embedding_model="none")) == "none"  # nothing hybrid to rerank
    assert rerank_choice(BuildConfig(reranker="default", embedding_model="none")) == "default"  # asked for
    assert rerank_choice(BuildConfig(search={"rerank": True}, reranker="none")) == "none"
    toml = tmp_path / "kb.toml"
    toml.write_text('[embedding]\nreranker = "default"\n')
    assert rerank_choice(load_config(toml)) == "default"
    assert rerank_choice(replace(load_config(toml), reranker="none")) == "none"  # --no-reranker over kb.toml


def test_rerank_on_an_artifact_without_a_reranker_is_one_notice_and_exit_0(tiny_artifact):
    r = CliRunner().invoke(kb, ["search", "backup snapshot", "-i", str(tiny_artifact), "--rerank", "--no-stale-check"])
    assert r.exit_code == 0 and r.stdout
    assert r.stderr == "kb: note: no reranker in this artifact (kb-build packs one with --reranker default, or [search] rerank = true in kb.toml); results are in fused order\n"
    d = json.loads(CliRunner().invoke(kb, ["info", "-i", str(tiny_artifact), "--json"]).stdout)
    assert [m["role"] for m in d["packed_models"]] == ["embedder"]


def test_rerank_is_off_by_default_and_on_with_rerank(reranked_artifact):
    out, _ = reranked_artifact
    assert not search(out, "-n", "5")["reranked"]
    d = search(out, "-n", "5", "--explain", "--rerank")
    assert d["reranked"] and d["results"][0]["score_kind"] == "rerank"
    assert d["rerank"]["scored"] == d["rerank"]["candidates"] and d["rerank"]["skipped"] == 0
    e = d["results"][0]["explain"]["rerank"]
    assert set(e) == {"logit", "probability", "retrieval_weight", "rerank_weight"}
    d = search(out, "-n", "5", "--no-rerank")
    assert not d["reranked"] and d["results"][0]["score_kind"] == "rrf"


def test_budget_ms_shrinks_the_rerank_depth_and_reports_the_skipped(reranked_artifact):
    out, _ = reranked_artifact
    d = search(out, "-n", "10", "--rerank", "--rerank-top", "10", "--budget-ms", "0")
    assert d["rerank"]["scored"] == 8 and d["rerank"]["skipped"] == 2  # the first batch always runs
    kinds = [r["score_kind"] for r in d["results"]]
    assert kinds == ["rerank"] * 8 + ["rrf"] * (len(kinds) - 8)


def test_a_missing_reranker_refuses_loudly_at_start(reranked_artifact, tmp_path):
    out, _ = reranked_artifact
    r = CliRunner().invoke(kb, ["search", "x", "-i", str(out), "--reranker", str(tmp_path / "nope")])
    assert (r.exit_code, r.stderr) == (1, f"kb: error: reranker {tmp_path / 'nope'} not found\n")
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(tmp_path / "x.kb"), "--embedder", "none", "--reranker", str(tmp_path / "nope")])
    assert r.exit_code == 1
    assert r.stderr == f"kb-build: error: build failed, {tmp_path / 'x.kb'} left as it was: reranker {tmp_path / 'nope'} not found\n"


def test_search_reranker_flag_takes_an_hf_folder(reranked_artifact, tmp_path):
    out, tiny = reranked_artifact
    d = search(out, "-n", "3", "--rerank", "--reranker", str(tiny["folder"]))
    assert d["reranked"]


def test_an_explicit_rerank_without_a_model_says_so(tmp_path):
    out = tmp_path / "plain.kb"
    CliRunner().invoke(kb_build, [str(TINY), "-o", str(out), "--embedder", "hash", "--no-reranker"])
    d = search(out, "--rerank")
    assert not d["reranked"] and d["notices"][0]["kind"] == "no_reranker"


def test_a_reranked_search_gets_the_notice_its_retrieval_gets(reranked_artifact):
    """The low-confidence notice of a reranked search reads the hybrid model's confidence in the
    top fused result (runtime/search.py low_confidence), whatever the reranker did to the order."""
    out, _ = reranked_artifact
    plain = search(out, "-n", "5", "--explain")
    top = plain["results"][0]["confidence"]
    for floor in (top + 0.001, max(top - 0.001, 0.0)):
        a = search(out, "-n", "5", "--low-confidence-floor", str(floor))
        b = search(out, "-n", "5", "--rerank", "--low-confidence-floor", str(floor))
        assert b["reranked"]
        want = [n["reason"].replace("top result's", "top fused result's") for n in a["notices"] if n["kind"] == "low_confidence"]
        assert [n["reason"] for n in b["notices"] if n["kind"] == "low_confidence"] == want
    assert [n["kind"] for n in search(out, "-n", "5", "--rerank", "--low-confidence-floor", str(top + 0.001))["notices"]] == ["low_confidence"]
