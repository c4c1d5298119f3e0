"""The English leg (format 5): a corpus in several languages, English among them, gets a second
dense leg beside the multilingual one, and a query in an alphabetic script is embedded for it.
Stand-in models (tests/fakes.py) under the two names "auto" picks, so only the plumbing is tested;
the quality it buys is measured in bench/notes/2026-12-01-mixed-corpus.md."""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

import fakes
from kb.builder import build as build_module
from kb.builder import embedders
from kb.builder.build import build
from kb.builder.config import BuildConfig
from kb.common import options
from kb.formats import layout as L
from kb.runtime.cli import main as kb
from kb.runtime.index import Index
from kb.runtime.search import Query, Searcher, english_query

from corpora import TINY, artifact_parts, rewrite

MIXED = TINY.parent / "mixed"
MAIN, ENGLISH = "hash-multi", "hash"  # stand-ins for multilingual-e5-small and all-MiniLM-L6-v2


@pytest.fixture(scope="module")
def two_legs(tmp_path_factory):
    out = tmp_path_factory.mktemp("english") / "mixed.kb"
    with pytest.MonkeyPatch.context() as m:
        m.setitem(embedders.EMBEDDERS, MAIN, lambda quantization: fakes.HashEmbedder(32, MAIN))
        m.setattr(build_module, "choose_embedder", lambda languages: MAIN)
        m.setattr(build_module, "english_leg", lambda languages, model: ENGLISH if languages.get("en") else "")
        rep = build([MIXED], out, replace(BuildConfig(), reranker="none"))
    assert (rep.embedder, rep.embedder_en) == (MAIN, ENGLISH)
    return out


def test_auto_picks_the_english_leg_only_beside_the_multilingual_model_and_with_english_documents():
    e5, minilm = embedders.MULTILINGUAL_MODEL, embedders.MINILM_NAME
    assert embedders.english_leg({"en": 3, "de": 3, "zh": 3}, e5) == minilm
    assert embedders.english_leg({"de": 3, "zh": 3}, e5) == ""
    assert embedders.english_leg({"en": 3}, minilm) == ""


def test_no_english_leg_for_english_below_the_share_a_language_needs():
    """CMRC2018's one "English" passage (Chinese, listing English song titles) must not have every
    chunk embedded twice: English needs 1% of the documents, and two, as any language does."""
    e5, minilm = embedders.MULTILINGUAL_MODEL, embedders.MINILM_NAME
    assert embedders.english_leg({"en": 1, "ja": 24, "zh": 1079}, e5) == ""
    assert embedders.english_leg({"en": 11, "zh": 1079}, e5) == minilm  # 1% of 1,090 is 10.9
    assert embedders.english_leg({"en": 10, "zh": 1079}, e5) == ""
    assert embedders.english_leg({"en": 1, "de": 1}, e5) == ""  # two at the least


def test_the_readme_and_spec_state_the_english_share():
    from kb.builder.language import FOLD_MIN, FOLD_SHARE

    from corpora import REPO

    assert (FOLD_SHARE, FOLD_MIN) == (0.01, 2)
    assert "(at least 1% of the documents, and two)" in " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert "with at least 1% of the documents and two" in " ".join((REPO / "formats" / "SPEC.md").read_text(encoding="utf-8").split())


def test_the_artifact_holds_both_legs_as_format_5(two_legs):
    with Index(two_legs) as ix:
        assert ix.version == 5
        assert {L.VECTORS, L.MODEL_EMBED, L.VECTORS_EN, L.MODEL_EMBED_EN} <= set(ix.artifact.sections)
        assert (ix.meta.embedder["name"], ix.meta.embedder_en["name"]) == (MAIN, "hash-64")  # the stand-in's card
        assert (ix.dense.vector_dims, ix.english.vector_dims) == (32, 64)
    r = CliRunner().invoke(kb, ["info", "-i", str(two_legs)])
    assert r.exit_code == 0 and f"embedder: {MAIN} (hash, dim 32); English leg: hash-64 (hash, dim 64) for queries in alphabetic scripts\n" in r.stdout, r.output
    r = CliRunner().invoke(kb, ["info", "-i", str(two_legs), "--json"])
    assert json.loads(r.stdout)["models"]["embedder_en"]["name"] == "hash-64"


@pytest.mark.parametrize(
    "text, english",
    [
        ("how to patch a punctured tube", True),
        ("restic backup", True),  # no stopwords of any language: taken as English
        ("where", True),
        ("partialCached variant key per section", True),  # Italian "per", by chance: one word is not a language
        ("de la", False),
        ("Brote backt man im Ofen", False),
        ("wie sichere ich die Datenbank", False),
        ("comment configurer le serveur de la base", False),
        ("绿茶怎么泡", False),
        ("寿司の作り方", False),
        ("git cherry-pick 怎么用", False),  # any CJK: the multilingual leg
    ],
)
def test_which_queries_go_to_the_english_leg(text, english):
    assert english_query(text) is english


@pytest.mark.parametrize("text, doc", [("how to patch a punctured tube", "bicycle-repair.md"), ("Brote backt man im Ofen", "brot-backen.md"), ("绿茶怎么泡", "tea.md")])
def test_each_query_is_embedded_for_its_leg(two_legs, text, doc):
    """The dense leg ranks by the routed leg's model and vectors (the stand-ins differ in width,
    32 and 64, so the other's could not even be compared), and hybrid finds the document."""
    import numpy as np

    with Index(two_legs) as ix:
        s = Searcher(ix)
        space = s.space_for(text)
        assert space is (ix.english if english_query(text) else ix.dense)
        model = fakes.HashEmbedder(space.vector_dims, space.name)
        best = float(space.cosines(np.arange(ix.n_chunks), model.embed_query(text)).max())
        top = s.search(Query(text, mode="vector", all_statuses=True)).results[0]
        assert (top.score_kind, top.score) == ("cosine", pytest.approx(best, abs=1e-3))
        assert s.search(Query(text, all_statuses=True)).results[0].path == doc


def test_a_routed_search_takes_its_models_defaults_unless_the_request_or_the_artifact_set_them(two_legs, monkeypatch):
    monkeypatch.setitem(options.MODEL_DEFAULTS, MAIN, {"semantic_weight": 0.5})
    with Index(two_legs) as ix:
        s = Searcher(ix)
        o = options.resolve(options.stored_search(ix.meta))
        assert o.semantic_weight == 0.5  # the main leg's model's default
        assert s.options_for(o, ix.dense).semantic_weight == 0.5
        assert s.options_for(o, ix.english).semantic_weight is None  # MiniLM's stand-in keeps kb's default: by query length
        asked = options.resolve(options.stored_search(ix.meta), {"semantic_weight": 0.5})
        assert s.options_for(asked, ix.english).semantic_weight == 0.5
        ix.meta = ix.meta._replace(search={"semantic_weight": 0.4})  # as kb.toml [search] would have stored it
        s = Searcher(ix)
        assert s.options_for(s.defaults, ix.english).semantic_weight == 0.4


def test_an_english_query_is_as_long_as_its_words_not_its_forms_in_every_language(two_legs):
    """The dense share by length counts a query's words: on an artifact of four languages each
    English word has several forms (stemmed in English and German, as written in Chinese and
    Japanese), which counted as terms gave an English query the share of a longer one."""
    from kb.runtime.bm25 import query_terms
    from kb.runtime.fusion import length_weight

    q = "repairing the bicycles tyres"  # a stopword: not a keyword query (fusion.KEYWORD_QUERY_WEIGHT)
    with Index(two_legs) as ix:
        assert len(set(query_terms(ix, q))) > 3
        o = options.resolve({}, {"adaptive_fusion": False})
        parts = Searcher(ix).search(Query(q, top_k=1, all_statuses=True, explain=True), o).results[0].explain.legs
    share = length_weight(3, 1)
    for name, part in parts.items():
        assert abs(part["rrf"] - (share if name.startswith("vector") else 1 - share) / (10 + part["rank"])) < 1e-6, name


def test_a_shard_build_keeps_one_dense_leg(tmp_path, monkeypatch):
    """Shards are searched as a set, which cannot combine English legs yet."""
    monkeypatch.setitem(embedders.EMBEDDERS, MAIN, lambda quantization: fakes.HashEmbedder(32, MAIN))
    monkeypatch.setattr(build_module, "choose_embedder", lambda languages: MAIN)
    monkeypatch.setattr(build_module, "english_leg", lambda languages, model: ENGLISH)
    rep = build([MIXED], tmp_path / "shard.kb", replace(BuildConfig(), reranker="none"), shard=(0, 1))
    assert (rep.embedder, rep.embedder_en) == (MAIN, "")
    with Index(tmp_path / "shard.kb") as ix:
        assert ix.english is None and ix.version < 5


def test_a_set_refuses_an_artifact_with_an_english_leg(two_legs, tiny_artifact):
    r = CliRunner().invoke(kb, ["search", "tea", "-i", str(two_legs), "-i", str(tiny_artifact), "--json", "--no-stale-check"])
    assert r.exit_code == 4, r.output
    assert r.stderr == f"kb: error: {two_legs} has a second dense leg for English queries (format 5), which a set cannot combine yet; search it alone\n"


def test_a_forged_english_leg_is_corrupt(two_legs, tmp_path):
    _, sections = artifact_parts(two_legs)
    for drop, version, want in (
        (L.VECTORS_EN, 5, "meta: the English leg needs meta.embedder_en, its vectors and model sections, and the main vectors"),
        (L.MODEL_EMBED_EN, 5, "meta: the English leg needs meta.embedder_en, its vectors and model sections, and the main vectors"),
        (None, 4, "an English leg needs format 5"),
    ):
        p = tmp_path / "forged.kb"
        rewrite(p, [s for s in sections if s.name != drop], version)
        r = CliRunner().invoke(kb, ["search", "observing planets", "-i", str(p), "--no-stale-check"])
        assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: corrupt artifact: {want}\n")
