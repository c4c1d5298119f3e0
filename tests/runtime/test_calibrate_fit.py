"""bench/calibrate.py's fit plumbing: rows mapped to runtime/confidence.py's FEATURES by name, the
noise floor of an ECE, and a fit on synthetic rows whose true model is logistic. The fitted
model's quality on real data is bench/RESULTS.md's ("Confidence and calibration")."""

import json
from pathlib import Path

import numpy as np
import pytest

from kb.runtime.confidence import FEATURES

from corpora import load_script

calibrate = load_script("calibrate", Path(__file__).resolve().parents[2] / "bench" / "calibrate.py")


def test_rows_are_read_by_feature_name():
    row = {"features": {n: float(i) for i, n in enumerate(reversed(FEATURES))}}
    assert calibrate.features_of(row) == [float(len(FEATURES) - 1 - i) for i in range(len(FEATURES))]
    assert calibrate.features_of({"features": list(range(len(FEATURES)))}) == list(range(len(FEATURES)))  # older rows: a list


def test_rows_of_another_feature_list_are_refused():
    with pytest.raises(SystemExit, match="rows lack the features cos_crowd: collect again"):
        calibrate.features_of({"features": {n: 0.0 for n in FEATURES if n != "cos_crowd"}})
    with pytest.raises(SystemExit, match=f"a row has 3 features, runtime/confidence.py has {len(FEATURES)}: collect again"):
        calibrate.features_of({"features": [0.0, 1.0, 2.0]})


def test_noise_floor_shrinks_with_more_results():
    rng = np.random.default_rng(1)
    few, many = rng.random(200), rng.random(20000)
    assert calibrate.noise_floor(many) < calibrate.noise_floor(few) < 0.1
    assert calibrate.noise_floor(many) < 0.01
    assert calibrate.noise_floor(np.zeros(50)) == 0.0  # certain labels: no sampling noise


@pytest.fixture
def synthetic_rows(tmp_path, monkeypatch) -> Path:
    """rows.jsonl of three sets a, b, c (calibrate.SETS patched to name them), 300 queries each,
    whose relevance is drawn from a logistic model of one feature (cos), alike in every set."""
    monkeypatch.setattr(calibrate, "SETS", {s: (s, "x") for s in "abc"})
    path = tmp_path / "rows.jsonl"
    rng = np.random.default_rng(0)
    queries = 300
    with open(path, "w") as out:
        for s in "abc":
            for q in range(queries):
                rows = []
                for rank in range(10):
                    f = dict.fromkeys(FEATURES, 0.0)
                    f["bias"], f["log_rank"], f["cos"] = 1.0, float(np.log(rank + 1)), float(rng.random())
                    rows.append({"features": f, "relevant": bool(rng.random() < 1 / (1 + np.exp(-(6 * f["cos"] - 4))))})
                out.write(json.dumps({"set": s, "id": f"q{q}", "backend": "hybrid", "negative": not any(r["relevant"] for r in rows), "kind": "natural", "held_out": q % 10 < 3, "rows": rows}) + "\n")
    return path


def test_fit_on_a_well_specified_model_reaches_its_noise_floor(synthetic_rows, tmp_path):
    report = tmp_path / "rep.json"
    calibrate.main(["fit", "--rows", str(synthetic_rows), "--loso", "--report", str(report)])
    got = json.loads(report.read_text())
    for s in ("a", "b", "c"):
        held = got["hybrid"][s]
        assert held["results"] == 900
        assert held["ece"] < held["noise_floor"] + 0.03
        assert got["leave_one_set_out"]["hybrid"][s] < 0.06  # the sets are alike: leaving one out costs little


def test_training_weights_give_each_set_and_part_its_share():
    from types import SimpleNamespace

    a = SimpleNamespace(foreign_weight=0.1, unanswerable_weight=0.2, set_power=0.0)
    parts = [("a", "own")] * 30 + [("a", "foreign")] * 10 + [("a", "unanswerable")] * 5 + [("b", "own")] * 7 + [("b", "foreign")] * 3
    train = [(p, None) for p in parts]
    rs = [{"set": "a", "held_out": False, "kind": "natural"}] * 3 + [{"set": "b", "held_out": False, "kind": "natural"}]
    w = calibrate.training_weights(train, rs, ["a", "b"], a)
    total = {}
    for p, x in zip(parts, w):
        total[p] = total.get(p, 0.0) + x
    n = len(parts)
    assert total[("a", "own")] == pytest.approx(n * 0.7 / 2) and total[("a", "foreign")] == pytest.approx(n * 0.1 / 2)
    assert total[("a", "unanswerable")] == pytest.approx(n * 0.2 / 2)
    # b has no unanswerable queries: its own and foreign parts share its half in their ratio 0.7 : 0.1
    assert total[("b", "own")] == pytest.approx(n / 2 * 0.7 / 0.8) and total[("b", "foreign")] == pytest.approx(n / 2 * 0.1 / 0.8)


def test_keep_weights_rechooses_only_the_floors(synthetic_rows, tmp_path):
    from kb.runtime.confidence_model import MODEL

    out = tmp_path / "model.py"
    calibrate.main(["fit", "--rows", str(synthetic_rows), "--keep-weights", "--write", str(out)])
    written = load_script("written_model", out)
    assert written.MODEL["backends"] == MODEL["backends"]  # every backend's, also those without rows here
    assert written.MODEL["fit"]["weights_fit"] == MODEL["fit"].get("weights_fit", MODEL["fit"])
    floor = written.MODEL["low_confidence_floor"]["hybrid"]
    assert floor == written.MODEL["low_confidence_floor"]["hybrid+rerank"]
    # the rule: at most 10% of each set's answerable queries have their top result under the floor
    recs = [json.loads(x) for x in synthetic_rows.read_text().splitlines()]
    from kb.runtime.confidence import predict

    for s in ("a", "b", "c"):
        top = [float(predict("hybrid", np.array([calibrate.features_of(r["rows"][0])]))[0]) for r in recs if r["set"] == s and not r["negative"]]
        assert sum(t < floor for t in top) <= 0.1 * len(top)


def test_separation_reports_each_statistics_auc_against_in_domain_and_foreign_negatives(tmp_path, monkeypatch, capsys):
    """A set whose answerable queries have a higher top cosine than every negative: AUC 1.000 for
    the top cosine; in-domain negatives are the set's own and its unanswerable ones, a query with
    no result scores lowest, and the own negatives are also reported alone."""
    monkeypatch.setattr(calibrate, "SETS", {"a": ("a", "x")})

    def query(kind, top_cos, negative, results=2):
        rows = []
        for rank in range(results):
            f = dict.fromkeys(FEATURES, 0.0)
            f["bias"], f["log_rank"], f["top_cos"], f["top_bm25n"] = 1.0, float(np.log(rank + 1)), top_cos, 0.5
            rows.append({"features": f, "relevant": not negative and rank == 0, "legs": {"bm25": rank + 1, "vector": rank + 2}})
        return {"set": "a", "id": f"{kind}{top_cos}", "backend": "hybrid", "negative": negative, "kind": kind, "held_out": False, "rows": rows}

    recs = [query("natural", c, False) for c in (0.6, 0.7, 0.8)]
    recs += [query("negative", 0.2, True), query("unanswerable", 0.3, True), query("foreign", 0.1, True), query("foreign", 0.5, True, results=0)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    calibrate.main(["separation", "--rows", str(path)])
    out = capsys.readouterr().out
    assert "| statistic | a (2 neg.) | foreign, range over sets |" in out
    assert "| top cosine | 1.000 | 1.000-1.000 |" in out
    assert "| BM25 top over its ceiling | 0.500 | 0.750-0.750 |" in out  # ties count half; the empty query scores 0
    assert "| top result's mean 1/rank over the two legs | 0.500 |" in out
    assert "a, its 1 own negatives alone:" in out
