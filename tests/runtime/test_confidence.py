"""The confidence model's features and terms (runtime/confidence.py): plumbing and math on
hand-made legs; the model's quality is bench/calibrate.py's (bench/RESULTS.md, "Confidence and calibration")."""

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kb.runtime.confidence import FEATURES, MODEL_TERMS, PRODUCTS, SQUARES, expand, feature_rows, predict
from kb.runtime.fusion import Fused, Leg, LegHit
from kb.runtime.results import Candidate


def _leg(name, kind, scores, **kw):
    return Leg(name, kind, 0.5, tuple(LegHit(i, i + 1, s) for i, s in enumerate(scores)), **kw)


def _candidates(scores):
    return [Candidate(i, s, "rrf", Fused(i, s, 0.0, {"bm25": (i + 1, 1.0, s), "vector": (i + 1, 0.5, s)})) for i, s in enumerate(scores)]


def test_the_new_features_read_the_ranking_the_crowd_and_the_script():
    dense = _leg("vector", "cosine", [0.60, 0.58, 0.56, 0.40, 0.30])
    bm25 = _leg("bm25", "bm25", [6.0, 3.0, 1.0], ceiling=10.0, known=1.0, words=3)
    rows = feature_rows(_candidates([0.04, 0.03, 0.01]), [bm25, dense], [0.60, 0.58, 0.56], cjk=True)
    f = dict(zip(FEATURES, rows[0]))
    assert f["cjk"] == 1.0
    assert math.isclose(f["fused_gap"], 0.25)  # (0.04 - 0.03) / 0.04
    assert math.isclose(f["cos_crowd"], math.log1p(3))  # 0.60, 0.58, 0.56 are within 0.05 of the top
    assert math.isclose(f["log_qlen"], math.log1p(3))
    assert (rows[:, FEATURES.index("fused_gap")] == f["fused_gap"]).all()  # a query's feature, on every row
    english = feature_rows(_candidates([0.04]), [bm25], None)
    assert dict(zip(FEATURES, english[0]))["cjk"] == 0.0 and dict(zip(FEATURES, english[0]))["cos_crowd"] == 0.0


@given(st.lists(st.lists(st.floats(-3, 3), min_size=len(FEATURES), max_size=len(FEATURES)), min_size=1, max_size=5))
def test_expand_appends_the_products_and_squares_in_model_terms_order(rows):
    x = np.array(rows)
    e = expand(x)
    assert e.shape == (len(rows), len(MODEL_TERMS))
    for j, name in enumerate(MODEL_TERMS):
        if name in FEATURES:
            want = x[:, FEATURES.index(name)]
        elif "*" in name:
            a, b = name.split("*")
            assert (a, b) in PRODUCTS
            want = x[:, FEATURES.index(a)] * x[:, FEATURES.index(b)]
        else:
            assert name[:-2] in SQUARES
            want = x[:, FEATURES.index(name[:-2])] ** 2
        assert np.allclose(e[:, j], want)


def test_the_stored_model_has_a_weight_per_term_and_gives_probabilities():
    from kb.runtime.confidence_model import MODEL

    assert MODEL["features"] == list(MODEL_TERMS)
    for backend, weights in MODEL["backends"].items():
        assert len(weights) == len(MODEL_TERMS), backend
        p = predict(backend, np.zeros((3, len(FEATURES))))
        assert ((0 <= p) & (p <= 1)).all()


def test_the_readme_states_the_fitted_hybrid_floor():
    from pathlib import Path

    from kb.runtime.confidence import low_confidence_floor

    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8").split())
    assert f"below the backend's fitted floor (hybrid {low_confidence_floor('hybrid'):g};" in readme
    assert low_confidence_floor("hybrid+rerank") == low_confidence_floor("hybrid")  # a reranked search's notice reads the retrieval's


def test_a_row_that_is_not_a_number_gets_confidence_zero_not_nan():
    rows = np.zeros((2, len(FEATURES)))
    rows[1, FEATURES.index("cos")] = np.nan
    p = predict("hybrid", rows)
    assert np.isfinite(p).all() and p[1] == 0.0
