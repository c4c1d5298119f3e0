"""The BM25 ceiling (the most a chunk can score for a query) and the share of the query's words
the index knows, counted per word: on an artifact of several languages a word has several terms
(its form in each language), of which a document, analysed in one language, matches one."""

from collections import Counter

import numpy as np
from hypothesis import given, strategies as st

from kb.runtime.bm25 import ceiling_of, query_ceiling, query_words, top_bm25
from kb.runtime.index import Index

IDF = {"a": 1.5, "b": 0.25, "c": 3.0}  # "x", "y": unknown
terms = st.sampled_from([*IDF, "x", "y"])


@given(st.lists(terms, max_size=12))
def test_words_of_one_term_give_the_sum_of_the_known_terms_idf_as_often_as_repeated(query):
    counts = Counter(query)
    want = sum(n * IDF[t] for t, n in counts.items() if t in IDF)
    ceiling, known = ceiling_of([(t,) for t in query], IDF.get)
    assert np.isclose(ceiling, want)
    assert known == (sum(t in IDF for t in counts) / len(counts) if counts else 0.0)


def test_a_word_of_several_terms_counts_its_highest_known_one_once():
    assert ceiling_of([("a", "c"), ("b", "x"), ("x", "y")], IDF.get) == (3.0 + 0.25, 2 / 3)
    assert ceiling_of([("a", "c"), ("a", "c")], IDF.get) == (6.0, 1.0)


def test_no_chunk_of_a_one_language_artifact_scores_above_the_ceiling(sample_artifact):
    with Index(sample_artifact) as ix:
        for q in ("zfs replication snapshot", "restore the newest snapshot from nw-bak-01", "disk full disk full", "where"):
            words = query_words(ix, q)
            ids, scores = top_bm25(ix, [t for w in words for t in w], 5, np.ones(ix.n_chunks, dtype=bool))
            ceiling, known = query_ceiling(ix, words)
            assert len(scores) and scores[0] <= ceiling + 1e-9 and known == 1.0, q
