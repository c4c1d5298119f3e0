"""The fuzz targets (tests/fuzz/), briefly, under hypothesis: a few hundred inputs each in the
normal test run. ``python -m tests.fuzz.run --inputs 1000000 --target artifact|parsers|http``
runs them at length (bench/RESULTS.md, "Fuzz")."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz import targets as T

BRIEF = settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def seed_artifacts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-seeds")
    return folder, T.build_seed_artifacts(folder)


def test_the_seed_artifacts_are_read_whole(seed_artifacts):
    folder, seeds = seed_artifacts
    reader = T.ArtifactReader(folder)
    assert [reader(s) for s in seeds] == ["ok"] * len(seeds)  # current format (vectors, BM25 only), golden v1 and v2, tiny model, formats 4 and 5
    assert len(seeds) in (6, 7) and (len(seeds) == 6 or b"KBQMOD1" in seeds[4])  # the tiny real model's seed carries model.query
    assert struct.unpack_from("<I", seeds[-2], 8)[0] == 4  # BM25 statistics per language
    assert struct.unpack_from("<I", seeds[-1], 8)[0] == 5 and b"vectors.en.rows" in seeds[-1]  # the English leg, with vectors.rows


@BRIEF
@given(rng=st.randoms(use_true_random=False))
def test_the_artifact_reader_refuses_mutated_artifacts_with_exit_3_or_4(seed_artifacts, rng):
    folder, seeds = seed_artifacts
    outcome = T.ArtifactReader(folder)(T.mutate_artifact(rng, seeds))
    assert outcome in ("ok", "exit 2", "exit 3", "exit 4")


@pytest.mark.parametrize("kind", T.PARSER_KINDS)
@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rng=st.randoms(use_true_random=False))
def test_corpus_parsers_index_or_skip_mutated_and_generated_files(kind, rng):
    assert T.parse_corpus_input(kind, T.generate_parser_input(rng, kind)) in ("ok", "skipped")


@pytest.fixture(scope="module")
def http_target(seed_artifacts):
    folder, seeds = seed_artifacts
    (folder / "http.kb").write_bytes(seeds[0])
    target = T.HttpRequests(folder / "http.kb")
    yield target
    target.close()


@BRIEF
@given(rng=st.randoms(use_true_random=False))
def test_the_http_handler_answers_mutated_requests_without_a_500(http_target, rng):
    http_target(T.generate_http(rng))


@BRIEF
@given(body=st.one_of(st.binary(max_size=300), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.sampled_from(["query", "top_k", "mode", "tag", "path", "chunk_id", "context", "x"]), kids, max_size=4),
    max_leaves=12).map(lambda v: __import__("json").dumps(v).encode())))
def test_the_json_request_parser_answers_400_or_a_request(body):
    assert T.json_body_input(body) in ("ok", "400")


def test_the_long_runner_counts_inputs_and_findings(tmp_path):
    from fuzz import run

    summary = run.fuzz("parsers", 40, None, seed=1, hang_s=10.0, out=tmp_path / "parsers.json")
    assert (summary["inputs"], summary["findings"], summary["hangs"], summary["crashes"]) == (40, 0, 0, 0)
    assert sum(summary["by_kind"].values()) == 40 and (tmp_path / "parsers.json").is_file()


# --- what an operator hands kb (issue 50): tests/fuzz/operator_targets.py -------------------------
@pytest.mark.parametrize("target", ["sets", "npy", "toml", "argv", "inplace"])
def test_each_operator_target_runs_its_inputs_without_a_finding(tmp_path, target):
    """A short run of each (the long runs: bench/RESULTS.md, "Fuzz"): forked workers, so a
    SIGBUS of the in-place target would be counted as a crash."""
    from fuzz import run

    summary = run.fuzz(target, 300, None, seed=7, hang_s=10.0, out=tmp_path / f"{target}.json")
    assert (summary["inputs"], summary["findings"], summary["hangs"], summary["crashes"]) == (300, 0, 0, 0), summary["first_findings"]


def test_the_fuzzers_operator_findings_stay_fixed(tmp_path):
    """Round two's findings: numpy's tokenizer error on a header, a set member whose name is too
    long for the OS, a usage error quoting an argument with a line break (two lines)."""
    from click.testing import CliRunner

    from fuzz import operator_targets as O
    from kb.runtime.cli import main as kb

    npy = O.NpyVectors(tmp_path)
    assert npy(O._npy_header("'<f4'", "False", "(4, 64") + bytes(1024)) == "exit 2"  # an unclosed parenthesis: TokenError
    sets = O.SetFiles(tmp_path)
    doc = {"kb_set": 1, "artifacts": [{"path": "a" * 5000, "id": "0" * 16, "bytes": 1, "sha256": "0" * 64}]}
    assert sets(__import__("json").dumps(doc).encode()) == "exit 3"
    r = CliRunner().invoke(kb, ["info", "backup", "\r\n"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "\\x0d\\x0a" in r.stderr


def test_an_error_quoting_a_line_break_is_one_line_and_a_python_2_npy_header_warns_nothing(tmp_path):
    """Found by the argv target (``-i $'\\r\\n'``) and the npy target (numpy's UserWarning on a
    header of Python 2's form, a second stderr line)."""
    from click.testing import CliRunner

    from fuzz import operator_targets as O
    from kb.runtime.cli import main as kb

    r = CliRunner().invoke(kb, ["list", "-i", "\r\n"])
    assert (r.exit_code, r.stderr) == (3, "kb: error: no artifact at \\x0d\\x0a (from -i); build one with kb-build or pass -i PATH\n")
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4L, 64L), }"  # a Python 2 long
    header += b" " * ((64 - (len(header) + 11) % 64) % 64) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(4 * 64 * 4)
    assert O.NpyVectors(tmp_path)(npy) == "exit 2"  # all zeros: refused, without a warning
