import json
import math

from click.testing import CliRunner

from kb.runtime import bench as B
from kb.runtime.cli import main as kb

from corpora import GOLDEN, TINY

FIXTURE = TINY.parent / "tiny-fixture.json"


def test_metrics_match_hand_computed_values():
    ranked = ["a", "x", "b", "y"]
    rel = {"a": 1, "b": 2, "c": 1}
    assert B.precision_at(ranked, rel, 2) == 0.5
    assert B.recall_at(ranked, rel, 10) == 2 / 3
    assert B.mrr_at(["x", "a"], rel) == 0.5
    assert B.hit_at(["x", "y"], rel) == 0.0
    dcg = 1 / math.log2(2) + 2 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert abs(B.ndcg_at(ranked, rel) - dcg / idcg) < 1e-12


def test_beir_loader_reads_graded_qrels_and_skips_the_header(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "queries.jsonl").write_text('{"_id": "1", "text": "q one"}\n{"_id": "2", "text": "q two"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t2\n1\td2\t1\n2\td3\t0\n")
    s = B.load_beir(tmp_path, "test")
    assert [(q.id, q.text, q.relevant) for q in s.queries] == [("1", "q one", {"d1": 2, "d2": 1})]
    assert s.key == "doc_id"


def test_kb_bench_reports_every_backend_as_json():
    r = CliRunner().invoke(kb, ["bench", str(FIXTURE), "-i", str(GOLDEN / "tiny-v1.kb"), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["queries"] == 4 and d["negatives"] == 1
    assert set(d["backends"]) == {"bm25", "vector", "hybrid"}  # no reranker in this artifact
    b = d["backends"]["bm25"]
    assert set(b) >= {"ndcg@10", "mrr@10", "p@10", "recall@10", "recall@100", "hit@10", "latency_ms", "by_kind", "low_confidence"}
    assert set(b["latency_ms"]) == {"p50", "p95"} and set(b["by_kind"]) == {"keyword", "natural"}
    assert b["by_kind"]["keyword"]["hit@10"] == 1.0


def test_kb_bench_table_for_people():
    r = CliRunner().invoke(kb, ["bench", str(FIXTURE), "-i", str(GOLDEN / "tiny-v1.kb"), "--backend", "bm25"])
    assert r.exit_code == 0
    assert r.stdout.startswith("tiny-fixture: 4 queries (1 negative)\n\n| backend | ndcg@10 |")


def test_kb_bench_needs_exactly_one_source():
    r = CliRunner().invoke(kb, ["bench", "-i", str(GOLDEN / "tiny-v1.kb")])
    assert (r.exit_code, r.stderr) == (2, "kb: error: give a FIXTURE.json or --beir DIR (one of them)\n")


def test_kb_bench_reports_calibration_per_backend():
    d = json.loads(CliRunner().invoke(kb, ["bench", str(FIXTURE), "-i", str(GOLDEN / "tiny-v1.kb"), "--json"]).stdout)
    for name, b in d["backends"].items():
        c = b["calibration"]
        assert set(c) == {"ece", "bins"} and 0.0 <= c["ece"] <= 1.0, name
        assert all(len(x) == 3 and 0 <= x[0] <= 1 and 0 <= x[1] <= 1 for x in c["bins"])
        assert sum(x[2] for x in c["bins"]) <= 10 * d["queries"]


def test_calibration_is_the_expected_calibration_error_over_ten_bins():
    c = B.calibration([0.05, 0.05, 0.95, 0.95, 0.55], [False, True, True, True, False])
    assert c["bins"] == [[0.05, 0.5, 2], [0.55, 0.0, 1], [0.95, 1.0, 2]]
    assert abs(c["ece"] - (2 / 5 * 0.45 + 1 / 5 * 0.55 + 2 / 5 * 0.05)) < 1e-4
    assert B.calibration([], []) == {"ece": None, "bins": []}


def test_kb_bench_takes_the_search_knobs_of_kb_search():
    args = ["bench", str(FIXTURE), "-i", str(GOLDEN / "tiny-v1.kb"), "--json", "--backend", "hybrid"]
    plain = json.loads(CliRunner().invoke(kb, args).stdout)["backends"]["hybrid"]
    lexical = json.loads(CliRunner().invoke(kb, args + ["--semantic-weight", "0", "--fixed-fusion"]).stdout)["backends"]["hybrid"]
    bm25 = json.loads(CliRunner().invoke(kb, args[:-2] + ["--backend", "bm25"]).stdout)["backends"]["bm25"]
    assert lexical["ndcg@10"] == bm25["ndcg@10"]  # a dense share of 0 is the BM25 leg alone
    assert plain["ndcg@10"] >= 0
    r = CliRunner().invoke(kb, args + ["--rrf-k", "-1"])
    assert r.exit_code == 2 and "--rrf-k" in r.output


def test_a_sweep_reports_each_value_the_best_in_hindsight_and_the_default():
    r = CliRunner().invoke(kb, ["bench", str(FIXTURE), "-i", str(GOLDEN / "tiny-v1.kb"), "--json", "--backend", "hybrid", "--sweep", "semantic_weight=0:1:0.5"])
    assert r.exit_code == 0, r.output
    sw = json.loads(r.stdout)["sweep"]
    assert (sw["setting"], sw["backend"]) == ("semantic_weight", "hybrid")
    assert [v["value"] for v in sw["values"]] == [0.0, 0.5, 1.0]
    assert sw["best"] == max(sw["values"], key=lambda v: v["ndcg@10"])
    assert sw["default"]["value"] is None  # the artifact fixes none: each query's share by its length
    text = CliRunner().invoke(kb, ["bench", str(FIXTURE), "-i", str(GOLDEN / "tiny-v1.kb"), "--backend", "hybrid", "--sweep", "semantic_weight=0.2,0.8"]).stdout
    assert "hybrid nDCG@10 by semantic_weight:" in text and "best fixed semantic_weight in hindsight: " in text and "the default (by query length): " in text


def test_a_sweep_names_its_grammar_and_the_knobs_it_takes():
    assert B.parse_sweep("semantic_weight=0.3:0.8:0.1") == ("semantic_weight", [0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    assert B.parse_sweep("rerank_top=10,40") == ("rerank_top", [10, 40])
    for bad, why in (
        ("semantic_weight", "give KNOB=START:STOP:STEP or KNOB=V1,V2,... with KNOB one of semantic_weight, rrf_k, "),
        ("adaptive_fusion=1:2:1", "give KNOB=START:STOP:STEP or KNOB=V1,V2,... with KNOB one of"),
        ("semantic_weight=0:1:0", "not a range START:STOP:STEP (STEP > 0, at most 101 values) or a list of values"),
        ("semantic_weight=0.5,2", "not a range START:STOP:STEP (STEP > 0, at most 101 values) or a list of values: semantic_weight must be within 0..1, got 2.0"),
        ("semantic_weight=0:100:0.1", "not a range"),
    ):
        try:
            B.parse_sweep(bad)
        except B.UsageError as e:
            assert why in str(e) and str(e).startswith(f"--sweep {bad!r}: "), str(e)
        else:
            raise AssertionError(bad)
    r = CliRunner().invoke(kb, ["bench", str(FIXTURE), "-i", str(GOLDEN / "tiny-v1.kb"), "--sweep", "nope=1"])
    assert r.exit_code == 2 and r.output.startswith("kb: error: --sweep 'nope=1': give KNOB=")
