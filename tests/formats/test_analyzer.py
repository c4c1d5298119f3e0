from hypothesis import given, strategies as st

from kb.formats.analyzer import Analyzer, AnalyzerError

import pytest

A = Analyzer()


def test_words_are_casefolded_and_split_on_punctuation():
    assert A.terms("Restore the ZFS-Pool, then E-QUOTA-17!") == ["restore", "the", "zfs", "pool", "then", "e", "quota", "17"]


def test_nfkc_folds_fullwidth_and_ligatures():
    assert A.terms("ＺＦＳ ﬁle") == ["zfs", "file"]


def test_casefold_handles_german_sharp_s():
    assert A.terms("Straße STRASSE") == ["strasse", "strasse"]


def test_underscores_stay_inside_identifiers():
    assert A.terms("run pg_basebackup now") == ["run", "pg_basebackup", "now"]


def test_chinese_becomes_overlapping_bigrams():
    assert A.terms("存储集群") == ["存储", "储集", "集群"]


def test_japanese_kana_and_kanji_become_bigrams():
    assert A.terms("バックアップ手順") == ["バッ", "ック", "クア", "アッ", "ップ", "プ手", "手順"]


def test_korean_hangul_becomes_bigrams():
    assert A.terms("백업") == ["백업"]


def test_a_lone_cjk_character_is_a_unigram():
    assert A.terms("a 字 b") == ["a", "字", "b"]


def test_mixed_script_words_split_at_the_script_boundary():
    assert A.terms("zfs快照send") == ["zfs", "快照", "send"]


def test_no_stemming_and_no_stopwords_by_default():
    assert A.terms("the backups were running") == ["the", "backups", "were", "running"]


def test_optional_stemmer_strips_english_suffixes():
    assert Analyzer(stem="porter-lite").terms("backups running") == ["backup", "runn"]


def test_params_round_trip_and_unknown_analyzers_are_refused():
    assert Analyzer.from_params(A.params()) == A
    with pytest.raises(AnalyzerError, match="unknown analyzer other-1"):
        Analyzer.from_params({"name": "other", "version": 1})


@given(st.text())
def test_analysis_is_idempotent_on_its_own_output(text):
    terms = A.terms(text)
    assert all(t and t == t.casefold() for t in terms)
    assert A.terms(" ".join(t for t in terms if not any("\u3040" <= c <= "\u9fff" for c in t))) == [
        t for t in terms if not any("\u3040" <= c <= "\u9fff" for c in t)
    ]


@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_the_ascii_fast_path_equals_the_word_regex(text):
    import re

    assert A.terms(text) == re.findall(r"\w+", text.lower())
    assert [w.decode() for w in A.index_words(text)] == A.words(text)
    assert A.terms(text + "\u00e9") == re.findall(r"\w+", (text + "\u00e9").lower())  # the general path agrees


@given(st.text(alphabet=st.characters(codec="utf-8")) | st.text(alphabet="aZ_9 -.\u00e9\u00df\u03b2\u2013\u00b1\u0301\u00a0\uff21\u5317\u4eac\u3042"))
def test_the_builder_reads_the_same_words_as_the_query_side(text):
    got = [w.decode() if isinstance(w, bytes) else w for w in A.index_words(text)]
    assert got == A.words(text)
