from hypothesis import given, settings, strategies as st

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


EN = Analyzer.for_languages(["en"])
EN_DE = Analyzer.for_languages(["de", "en"])


def test_a_document_is_stemmed_by_its_language_and_its_stopwords_are_marked():
    words = A.words("The backups were running in die Häuser")
    assert EN.finish(words, "en") == ["~the", "backup", "~were", "run", "~in", "die", "häuser"]
    assert EN_DE.finish(words, "de") == ["the", "backups", "wer", "running", "~in", "~die", "haus"]


def test_cjk_bigrams_are_never_stemmed_and_cjk_languages_have_no_stopwords():
    words = A.words("the 存储集群 バックアップ")
    assert EN.finish(words, "en")[1:] == A.terms("存储集群 バックアップ")
    assert Analyzer.for_languages(["zh"]).finish(words, "zh") == words


def test_a_query_drops_stopwords_counts_repeats_and_keeps_every_languages_forms():
    assert EN.query_terms("where are the running dogs, dogs") == ["run", "dog", "dog"]
    assert EN_DE.query_terms("running Häuser") == ["running", "run", "haus", "häuser"]
    assert EN_DE.query_terms("die hard") == ["hard"]  # a stopword in any of the languages is left out


def length(analyzer, text):
    return len(set(analyzer.query_words(text)))


def test_a_query_length_counts_each_word_once_whatever_its_forms_in_several_languages():
    assert EN_DE.query_words("running Häuser") == [("running", "run"), ("haus", "häuser")]
    assert length(EN, "where are the running dogs, dogs") == 2
    assert length(EN_DE, "running Häuser") == 2  # four terms
    assert length(EN_DE, "die hard") == 1
    assert length(EN, "the who") == 2 and length(EN_DE, "the") == 1
    assert length(A, "存储集群") == 3  # bigrams are the words of CJK text


@given(st.lists(st.sampled_from([*"ab Z_-.\u00e9\u00df\u4e2d\u6587\u306e", "the ", "dogs ", "running ", "run ", "häuser ", "die "]), max_size=20).map("".join))
def test_a_querys_terms_are_its_words_terms_and_on_one_language_each_word_is_one_term(text):
    for analyzer in (A, EN, EN_DE, Analyzer.for_languages(["zh"])):
        assert analyzer.query_terms(text) == [t for word in analyzer.query_words(text) for t in word]
    for analyzer in (A, EN, Analyzer.for_languages(["zh"])):
        assert all(len(word) == 1 for word in analyzer.query_words(text))
        assert length(analyzer, text) == len(set(analyzer.query_terms(text)))


def test_a_query_counts_its_stopwords_where_the_analyzer_has_a_list():
    assert EN.query_stopwords("where are the running dogs, dogs") == 3
    assert EN.query_stopwords("colorectal cancer patients") == 0  # a keyword query
    assert EN_DE.query_stopwords("die hard") == 1  # a stopword in one of the languages
    assert A.query_stopwords("the dogs") is None  # no list: it cannot tell
    assert Analyzer.for_languages(["zh"]).query_stopwords("存储集群") is None


def test_a_query_of_stopwords_alone_still_searches_them():
    assert EN.query_terms("where") == ["~where"]
    assert EN.query_terms("the who") == ["~the", "~who"]
    assert EN_DE.query_terms("the") == ["the", "~the"]  # de: a word; en: a stopword


def test_version_1_is_the_plain_tokenizer_with_distinct_query_terms():
    v1 = Analyzer.from_params({"name": "kb-unicode", "version": 1, "cjk_bigrams": True, "stem": None, "stopwords": [], "max_term_chars": 64})
    assert v1.query_terms("the running the dogs") == ["the", "running", "dogs"]
    assert v1.params()["version"] == 1 and v1.params()["stem"] is None


def test_params_round_trip_and_unknown_analyzers_are_refused():
    assert Analyzer.from_params(A.params()) == A
    assert Analyzer.from_params(EN_DE.params()) == EN_DE
    assert EN_DE.params()["stemmers"] == {"de": "german", "en": "english"}
    assert EN_DE.params()["stemmer_library"].startswith("PyStemmer ")
    with pytest.raises(AnalyzerError, match="unknown analyzer other-1"):
        Analyzer.from_params({"name": "other", "version": 1})


def test_a_stemmer_this_kb_lacks_is_refused():
    params = EN.params() | {"stemmers": {"en": "klingon"}}
    with pytest.raises(AnalyzerError) as e:
        Analyzer.from_params(params)
    assert str(e.value).startswith("unknown stemmer 'klingon' for language 'en'; this kb's PyStemmer ")
    assert e.value.exit_code == 4


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


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list("ab Z_-\n\r.\u00e9e\u0301\u212b\ufb01\u00df\u4e2d\u6587\u306e\u30ab\uff21\u2028\u0300\u3280\u3281\u3282")), max_size=30))
def test_words_by_line_are_each_lines_words(text):
    for a in (Analyzer.for_languages(["en"]), Analyzer.for_languages(["en", "zh"])):
        assert a.words_by_line(text) == [a.words(line) for line in text.split("\n")]


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list("ab Z_-\n\r.9 \t#:/")), max_size=40))
def test_blanked_lines_split_into_each_lines_words(text):
    a = Analyzer.for_languages(["en"])
    assert [line.split() for line in a.blanked_lines(text)] == [a.words(line) for line in text.split("\n")]
    assert a.blanked_lines(text + "é") is None


def test_has_cjk_agrees_with_the_cjk_pattern_on_every_bmp_code_point_and_every_range_edge(monkeypatch):
    import re

    from kb.formats import analyzer

    from kb.formats.analyzer import _CJK_EDGES, CJK_RANGES, _cjk_patterns, has_cjk

    monkeypatch.setattr(analyzer, "SCANS_BEFORE_PATTERN", 1 << 62)  # the scan, not the pattern

    pattern = _cjk_patterns()[0]
    bmp = "".join(map(chr, range(0x80, 0x10000)))
    cjk = set(pattern.findall(bmp))
    assert [c for c in bmp if has_cjk(c) != (c in cjk)] == []
    edges = {e + d for e in _CJK_EDGES for d in (-1, 0, 1)}
    assert all(has_cjk(chr(o)) == bool(pattern.search(chr(o))) for o in edges)
    assert len(_CJK_EDGES) == 2 * len(re.findall("(.)-(.)", CJK_RANGES))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_has_cjk_agrees_with_the_cjk_pattern_on_any_text(text):
    from kb.formats import analyzer
    from kb.formats.analyzer import _cjk_patterns, has_cjk

    before, analyzer._scans = analyzer._scans, 0  # the scan, whatever ran before (no monkeypatch under hypothesis)
    try:
        assert has_cjk(text) == bool(_cjk_patterns()[0].search(text))
    finally:
        analyzer._scans = before


def test_has_cjk_switches_to_the_pattern_after_its_scans_and_answers_the_same(monkeypatch):
    from kb.formats import analyzer

    texts = ["naïve — café", "日本語", "abc한", "Привет", "x\U00020000"]
    monkeypatch.setattr(analyzer, "_scans", 0)
    scanned = [analyzer.has_cjk(t) for t in texts]
    monkeypatch.setattr(analyzer, "_scans", analyzer.SCANS_BEFORE_PATTERN)
    assert [analyzer.has_cjk(t) for t in texts] == scanned == [False, True, True, False, True]
