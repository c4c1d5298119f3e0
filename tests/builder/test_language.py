"""Documents in several languages in one artifact: each analyzed in its own language (builder/
language.py detects it), each found by a query in its own language."""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from kb.builder import language as lang
from kb.builder.build import build
from kb.builder.config import BuildConfig
from kb.builder.ingest import Document
from kb.runtime.cli import main as kb
from kb.runtime.index import Index

from corpora import TINY, artifact_parts, rewrite

MIXED = TINY.parent / "mixed"
# (query in the document's language, the document it must find first)
QUERIES = [
    ("how to patch a punctured tube", "bicycle-repair.md"),
    ("composting leaves", "garden-compost.md"),
    ("observing planets", "telescope-night.md"),
    ("Brote backt man im Ofen", "brot-backen.md"),
    ("Fahrkarte für Züge", "bahnreise.md"),
    ("Wanderung im Wald", "wandern.md"),
    ("绿茶怎么泡", "tea.md"),
    ("书法练习", "calligraphy.md"),
    ("熊猫吃什么", "panda.md"),
    ("寿司の作り方", "sushi.md"),
    ("温泉のマナー", "onsen.md"),
    ("お花見", "sakura.md"),
]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    out = tmp_path_factory.mktemp("mixed") / "mixed.kb"
    rep = build([MIXED], out, replace(BuildConfig(), reranker="none", embedding_model="none"))
    assert rep.languages == {"de": 3, "en": 3, "ja": 3, "zh": 3}
    return out


def test_a_mixed_corpus_records_each_language_with_its_stemmer(mixed):
    with Index(mixed) as ix:
        a = ix.meta.analyzer
    assert a["languages"] == ["de", "en", "ja", "zh"]
    assert a["stemmers"] == {"de": "german", "en": "english", "ja": None, "zh": None}
    assert a["documents"] == {"de": 3, "en": 3, "ja": 3, "zh": 3}


@pytest.mark.parametrize("query, path", QUERIES)
def test_each_document_is_found_by_a_query_in_its_own_language(mixed, query, path):
    r = CliRunner().invoke(kb, ["search", query, "-i", str(mixed), "--mode", "bm25", "--json", "--no-stale-check"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["results"][0]["path"] == path


def test_a_phrase_finds_its_document_when_the_languages_stem_its_words_differently(mixed):
    """"kitchen" is "kitchen" to the English stemmer and "kitch" to the German one: the English
    document holds only the English stem, and the phrase filter must still find it there."""
    from kb.formats.analyzer import Analyzer

    a = Analyzer.for_languages({"de": 1, "en": 1})
    assert len(a.forms("kitchen")[0]) == 2
    r = CliRunner().invoke(kb, ["search", '"kitchen scraps" soil', "-i", str(mixed), "--mode", "bm25", "--json", "--no-stale-check"])
    assert r.exit_code == 0, r.output
    assert [x["path"] for x in json.loads(r.stdout)["results"]] == ["garden-compost.md"]


def test_an_inflected_german_query_matches_through_the_german_stemmer(mixed):
    with Index(mixed) as ix:
        assert ix.term_id("fahrkart") is not None and ix.term_id("fahrkarten") is None


def test_a_configured_language_skips_detection(tmp_path):
    rep = build([MIXED], tmp_path / "en.kb", replace(BuildConfig(), reranker="none", embedding_model="none", languages=("en",)))
    assert rep.languages == {"en": 12}


def doc(i, text):
    return Document(f"d{i}.md", f"d{i}", "markdown", "", text)


def test_a_language_of_a_single_document_joins_the_majority():
    docs = [doc(i, "the cat sat on the mat and it was happy with the day") for i in range(5)]
    docs.append(doc(9, "der Hund ist mit dem Ball in den Garten gelaufen und hat sich gefreut"))
    assert lang.document_languages(docs, ("auto",)) == ["en"] * 6
    docs.append(doc(10, "die Katze ist auf dem Dach und will nicht mehr herunter kommen"))
    assert lang.document_languages(docs, ("auto",)) == ["en"] * 5 + ["de", "de"]


def test_text_without_stopwords_takes_the_majority_without_the_model(monkeypatch):
    monkeypatch.setattr(lang, "_model", lambda c: pytest.fail("the model was loaded"))
    docs = [doc(i, "the cat sat on the mat and it was happy with the day") for i in range(3)]
    docs += [doc(7, "port: 5432\nhost: db01\nreplicas: 3"), doc(8, "")]
    assert lang.document_languages(docs, ("auto",)) == ["en"] * 5


def test_alphabetic_pages_beside_a_cjk_majority_keep_an_alphabetic_language(monkeypatch):
    """English pages (one of them a config file with no prose) in a corpus of mostly Chinese
    passages: the config file and a lone German page go to English, the majority of the
    alphabetic pages, not to Chinese; a lone Japanese passage still folds into the majority."""
    monkeypatch.setattr(lang, "_model", lambda c: pytest.fail("the model was loaded"))
    zh = [doc(i, "数据库的主节点在凌晨发生故障之后由备用节点接管了全部的写入请求") for i in range(10)]
    en = [doc(100 + i, "the cat sat on the mat and it was happy with the day") for i in range(3)]
    odd = [doc(200, "port: 5432\nhost: db01\nreplicas: 3"), doc(201, "der Hund ist mit dem Ball in den Garten gelaufen und hat sich gefreut"),
           doc(202, "データベースの主ノードが停止したので予備のノードに切り替えました")]
    assert lang.document_languages(zh + en + odd, ("auto",)) == ["zh"] * 10 + ["en"] * 3 + ["en", "en", "zh"]


def test_the_model_decides_only_where_its_answer_could_matter(monkeypatch):
    calls = []

    def model(candidates):
        calls.append(candidates)
        return lambda text: "de"

    monkeypatch.setattr(lang, "_model", model)
    clear = [doc(i, "the cat sat on the mat and it was happy with the day") for i in range(300)]
    vague = [doc(1000 + i, "the and was with das und ist mit") for i in range(2)]  # prose of two languages, no clear winner
    assert lang.document_languages(clear + vague, ("auto",)) == ["en"] * 302 and not calls  # 2 of 302 < 1%: folded whatever the model said
    assert lang.document_languages(clear[:50] + vague, ("auto",)) == ["en"] * 50 + ["de"] * 2 and calls


def test_votes_in_forked_shards_give_the_same_languages(monkeypatch):
    """The votes run over shards in forked workers: weak, undecided and decided documents keep
    their places."""
    from kb.builder import shards

    monkeypatch.setattr(shards, "MIN_SHARD_CHARS", 1)
    monkeypatch.setattr(lang, "_model", lambda candidates: lambda text: "de")
    docs = [doc(i, "the cat sat on the mat and it was happy with the day") for i in range(40)]
    docs[5] = doc(5, "port: 5432\nhost: db01")  # weak: the majority's
    docs[17] = doc(17, "die Katze ist auf dem Dach und will nicht mehr herunter kommen")
    docs[30] = doc(30, "der Hund ist mit dem Ball in den Garten gelaufen und hat sich gefreut")
    docs[33] = doc(33, "the and was with das und ist mit")  # undecided: the model's
    sizes = [len(d.title) + len(d.text) for d in docs]
    one = lang.document_languages(docs, ("auto",))
    assert one[5] == "en" and one[17] == one[30] == one[33] == "de"
    assert lang.document_languages(docs, ("auto",), jobs=3, sizes=sizes) == one


def test_a_mixed_corpus_builds_the_same_bytes_with_any_number_of_jobs(tmp_path, monkeypatch):
    from kb.builder import shards

    monkeypatch.setattr(shards, "MIN_SHARD_CHARS", 1)
    cfg = replace(BuildConfig(), reranker="none", embedding_model="none")
    build([MIXED], tmp_path / "one.kb", cfg, jobs=1)
    build([MIXED], tmp_path / "three.kb", cfg, jobs=3)
    assert (tmp_path / "one.kb").read_bytes() == (tmp_path / "three.kb").read_bytes()


@pytest.fixture(scope="module")
def mixed_v4(tmp_path_factory):
    """The mixed corpus with statistics per language for its three-document languages (kb-build
    keeps them for languages of 50 documents and more: builder/postings.py STATS_MIN_DOCS)."""
    from kb.builder import postings

    out = tmp_path_factory.mktemp("mixed4") / "mixed.kb"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(postings, "STATS_MIN_DOCS", 1)
        build([MIXED], out, replace(BuildConfig(), reranker="none", embedding_model="none"))
    return out


def test_languages_of_a_few_documents_share_the_corpus_statistics(mixed):
    with Index(mixed) as ix:
        assert ix.version == 3 and "languages" not in ix.meta.bm25  # 3 documents each: under STATS_MIN_DOCS


def test_each_language_is_scored_as_if_it_were_alone(mixed_v4, tmp_path):
    """Format 4: BM25 keeps statistics per language in a corpus of several. The English documents'
    scores for an English query are the ones an artifact of the English documents alone gives
    (their mean lengths and N), whatever the other languages' documents weigh."""
    import shutil

    alone = tmp_path / "en"
    alone.mkdir()
    for name in ("bicycle-repair.md", "garden-compost.md", "telescope-night.md"):
        shutil.copy(MIXED / name, alone / name)
    out = tmp_path / "en.kb"
    build([alone], out, replace(BuildConfig(), reranker="none", embedding_model="none"))

    def scores(path):
        r = CliRunner().invoke(kb, ["search", "how to patch a punctured tube on the bicycle", "-i", str(path), "--mode", "bm25", "--json", "--no-stale-check"])
        assert r.exit_code == 0, r.output
        return {x["path"]: x["score"] for x in json.loads(r.stdout)["results"] if x["path"].endswith(("bicycle-repair.md", "garden-compost.md", "telescope-night.md"))}

    mixed = mixed_v4
    with Index(mixed) as ix, Index(out) as en:
        assert (ix.version, en.version) == (4, 3)  # one language: the format 3 bytes as before
        assert [v["code"] for v in ix.meta.bm25["languages"]] == ["de", "en", "ja", "zh"]
        assert [v["documents"] for v in ix.meta.bm25["languages"]] == [3, 3, 3, 3]
        assert "languages" not in en.meta.bm25
    got, want = scores(mixed), scores(out)
    assert got and got == want


def test_a_set_refuses_an_artifact_with_statistics_per_language(mixed_v4, tiny_artifact):
    mixed = mixed_v4
    r = CliRunner().invoke(kb, ["search", "tea", "-i", str(mixed), "-i", str(tiny_artifact), "--json", "--no-stale-check"])
    assert r.exit_code == 4, r.output
    assert r.stderr == f"kb: error: {mixed} keeps BM25 statistics per language (a corpus in several languages, format 4), which a set cannot combine yet; search it alone\n"


def test_forged_statistics_per_language_are_corrupt_not_a_wrong_score(mixed_v4, tmp_path):
    import numpy as np

    from kb.formats import artifact as A
    from kb.formats import layout as L

    _, sections = artifact_parts(mixed_v4)
    n_terms = len(next(s for s in sections if s.name == L.TERM_DOC_N).data) // 4
    for name, data, version, want in (
        (L.TERM_DOC_N, np.zeros(n_terms, "<u4").tobytes(), 4, "documents for BM25 (0) lie outside"),  # below its df
        (L.TERM_DOC_N, None, 3, "BM25 statistics per language need format 4"),
    ):
        p = tmp_path / "forged.kb"
        rewrite(p, [A.SectionData(s.name, data) if s.name == name and data is not None else s for s in sections], version)
        r = CliRunner().invoke(kb, ["search", "observing planets", "-i", str(p), "--mode", "bm25", "--no-stale-check"])
        assert r.exit_code == 3 and r.stderr.startswith(f"kb: error: {p}: corrupt artifact: ") and want in r.stderr, r.stderr
