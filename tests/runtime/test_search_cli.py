import json
import math
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.runtime.cli import main as kb
from kb.runtime.fusion import SHORT_QUERY_WEIGHT
from kb.runtime.index import Index
from kb.common.options import resolve
from kb.runtime.search import Query, Searcher

from corpora import GOLDEN, TINY, build_hash

GOLD = GOLDEN / "tiny-v1.kb"


def run(*args, env=None):
    return CliRunner().invoke(kb, [str(a) for a in args], env=env)


def search_json(*args):
    r = run("search", *args, "--json", "--no-stale-check")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_json_output_has_the_versioned_contract():
    d = search_json("restore the snapshot", "-i", GOLD)
    assert set(d) >= {"schema_version", "query", "rewrites", "entities", "artifact", "results", "tag_contexts", "notices", "filters", "mode"}
    assert d["schema_version"] == 3 and d["query"] == "restore the snapshot"
    assert set(d["artifact"]) == {"id", "name", "path"} and len(d["artifact"]["id"]) == 16 and d["artifact"]["name"] == str(GOLD)
    r = d["results"][0]
    assert set(r) == {"rank", "score", "score_kind", "confidence", "path", "section", "lines", "status", "tags", "path_contexts", "chunk_id", "doc_id", "title", "artifact", "artifact_id", "snippet"}
    assert r["artifact"] == d["artifact"]["name"] and r["artifact_id"] == d["artifact"]["id"]
    assert 0.0 <= r["confidence"] <= 1.0
    assert (r["rank"], r["path"], r["section"], r["score_kind"]) == (1, "backups.md", "Backups > Restore", "rrf")
    assert d["tag_contexts"] == {"ops": "Operations runbooks", "storage": "Disks, pools and backups"}


GOLDEN_HUMAN = '''KB Search Results for: "restore the snapshot"
Showing top 2 results (historical/superseded filtered)

1. [score: 2.62 · confidence 0.96] backups.md § "Backups > Restore"
   > "Pick the newest snapshot and run the restore script. zfs rollback tank/home@latest"
   Status: live-doctrine · lines 11-18 · chunk 3

2. [score: 0.85 · confidence 0.03] backups.md § "Backups"
   > "Nightly snapshots are sent to the backup host with zfs send."
   Status: live-doctrine · lines 7-9 · chunk 2

Tags: ops: Operations runbooks; storage: Disks, pools and backups
'''


def test_human_output_matches_the_golden_text():
    r = run("search", "restore the snapshot", "-i", GOLD, "--mode", "bm25", "-n", "2", "--no-stale-check")
    assert r.exit_code == 0
    assert r.stdout == GOLDEN_HUMAN


def paths(d):
    return [x["path"] for x in d["results"]]


def test_historical_and_superseded_are_excluded_by_default():
    d = search_json("backup rsync storage cluster", "-i", GOLD, "--mode", "bm25", "-n", "10")
    assert "notes/old-backups.md" not in paths(d) and "notes/glossary.md" not in paths(d)


def test_status_filter_draws_only_from_the_chosen_statuses():
    d = search_json("backup", "-i", GOLD, "--status", "superseded", "--mode", "bm25")
    assert paths(d) == ["notes/old-backups.md"] and d["results"][0]["status"] == "superseded"


def test_all_statuses_includes_everything():
    d = search_json("存储集群", "-i", GOLD, "--all-statuses", "--mode", "bm25")
    assert paths(d) == ["notes/glossary.md"]


def test_tag_and_path_filters_apply_before_ranking():
    d = search_json("backup", "-i", GOLD, "--tag", "storage", "--all-statuses", "--mode", "bm25")
    assert set(paths(d)) == {"backups.md", "notes/old-backups.md"}
    d = search_json("backup", "-i", GOLD, "--path", "notes/", "--all-statuses", "--mode", "bm25")
    assert set(paths(d)) == {"notes/old-backups.md", "notes/glossary.md"}


def test_filters_never_starve_top_k_when_results_exist():
    d = search_json("backup", "-i", GOLD, "--path", "notes/", "--all-statuses", "-n", "2")  # hybrid: vector leg fills in
    assert len(d["results"]) == 2


def test_an_empty_result_is_an_empty_result_with_a_notice():
    d = search_json("zebra", "-i", GOLD, "--mode", "bm25")
    assert d["results"] == []
    assert d["notices"][0]["kind"] == "low_confidence" and d["notices"][0]["reason"] == "no results"


def test_fewer_results_than_asked_is_no_reason_for_a_notice():
    d = search_json("gateway firewall", "-i", GOLD, "--mode", "bm25", "-n", "5")
    assert paths(d) == ["gateway.txt"]
    assert d["notices"] == []


def test_the_low_confidence_notice_derives_from_the_top_results_confidence():
    d = search_json("gateway firewall", "-i", GOLD, "--mode", "bm25", "--low-confidence-floor", "0.99")
    top = d["results"][0]["confidence"]
    assert [(n["kind"], n["reason"]) for n in d["notices"]] == [("low_confidence", f"top result's confidence {top:.2f} is below the floor 0.99")]
    d = search_json("zzzqqq", "-i", GOLD, "--mode", "bm25")
    assert (d["results"], [(n["kind"], n["reason"]) for n in d["notices"]]) == ([], [("low_confidence", "no results"), ("no_match", "no word of the query is in the index")])


def test_explain_reports_legs_rrf_parts_and_bonus():
    d = search_json("restore the snapshot", "-i", GOLD, "--explain", "-n", "1", "--rank1-bonus", "0.05", "--rrf-k", "60", "--fixed-fusion")  # the legs' own weights
    e = d["results"][0]["explain"]
    assert set(e["legs"]) == {"bm25", "vector"}
    assert e["legs"]["bm25"]["rank"] == 1 and e["bonus"] == 0.05
    assert abs(e["legs"]["bm25"]["rrf"] - (1 - SHORT_QUERY_WEIGHT) / 61) < 1e-6  # a two-term query: lexical weight 1 - 0.8 at rank 1
    assert abs(sum(v["rrf"] for v in e["legs"].values()) + e["bonus"] - e["rrf"]) < 1e-5
    assert e["rerank"] is None and "timings_ms" in d


def test_rewrites_add_sub_legs_weighted_below_the_original():
    d = search_json("restore", "-i", GOLD, "--rewrite", "zfs rollback of the latest snapshot", "--explain", "-n", "3")
    legs = {n for r in d["results"] for n in r["explain"]["legs"]}
    assert {"bm25", "vector", "bm25:rewrite1", "vector:rewrite1"} <= legs
    assert d["rewrites"] == ["zfs rollback of the latest snapshot"]


def test_entities_feed_the_tag_leg_ranked_by_matches():
    d = search_json("", "-i", GOLD, "-e", "storage", "-e", "ops", "--explain", "--all-statuses", "-n", "3")
    first = d["results"][0]
    assert first["path"] == "backups.md" and first["explain"]["legs"]["tag"]["raw_score"] == 2.0


def test_jsonl_streams_one_result_per_line():
    r = run("search", "backup", "-i", GOLD, "--jsonl", "-n", "3", "--no-stale-check")
    lines = r.stdout.strip().split("\n")
    assert len(lines) == 3 and all(json.loads(x)["rank"] == i + 1 for i, x in enumerate(lines))


def test_full_returns_the_chunk_text():
    d = search_json("restore", "-i", GOLD, "--full", "-n", "1", "--mode", "bm25")
    assert d["results"][0]["text"].startswith("## Restore") and "snippet" not in d["results"][0]


def test_group_doc_gives_the_best_chunk_per_document():
    d = search_json("backups snapshot restore", "-i", GOLD, "--group", "doc", "--mode", "bm25")
    assert paths(d).count("backups.md") == 1
    assert d["results"][0]["also_matched"] == 1


def test_modes_report_their_score_kind():
    assert search_json("restore", "-i", GOLD, "--mode", "bm25")["results"][0]["score_kind"] == "bm25"
    assert search_json("restore", "-i", GOLD, "--mode", "vector")["results"][0]["score_kind"] == "cosine"


def test_index_comes_from_kb_index_env_var():
    r = CliRunner().invoke(kb, ["search", "restore", "--json", "--no-stale-check"], env={"KB_INDEX": str(GOLD)})
    assert r.exit_code == 0 and json.loads(r.stdout)["artifact"]["path"] == str(GOLD)


@pytest.mark.parametrize(
    "args, code, line",
    [
        (["search", "x", "-i", "/nonexistent.kb"], 3, "kb: error: no artifact at /nonexistent.kb (from -i); build one with kb-build or pass -i PATH"),
        (["search", "x", "-i", GOLD, "--status", "draft"], 2, "kb: error: unknown status 'draft'; this artifact has: live-doctrine, live, derived, historical, superseded"),
        (["search", "", "-i", GOLD], 2, "kb: error: give a query (or --entity/--rewrite); to list a scope use kb list"),
        (["search", "x", "-i", GOLD, "--json", "--jsonl"], 2, "kb: error: give one output format: --format, --json or --jsonl"),
        (["search", "x", "-i", GOLD, "--semantic-weight", "1.5"], 2, "kb: error: Invalid value for '--semantic-weight': 1.5 is not in the range 0.0<=x<=1.0. (see 'kb search --help')"),
        (["search", "x", "-i", GOLD, "-n", "0"], 2, "kb: error: Invalid value for '-n' / '--top-k': 0 is not in the range 1<=x<=200. (see 'kb search --help')"),
        (["search", "x", "-i", GOLD, "--blend", "max"], 2, "kb: error: Invalid value for '--blend': 'max' is not one of 'position', 'sigmoid'. (see 'kb search --help')"),
    ],
)
def test_errors_are_one_line_with_distinct_exit_codes(args, code, line):
    r = run(*args)
    assert (r.exit_code, r.stderr) == (code, line + "\n")


@pytest.mark.parametrize(
    "args, line",
    [
        (("search", "x", "--mode", "fuzzy"), "kb: error: Invalid value for '--mode': 'fuzzy' is not one of 'hybrid', 'bm25', 'vector'. (see 'kb search --help')"),
        (("search", "x", "-n", "abc"), "kb: error: Invalid value for '-n' / '--top-k': 'abc' is not a valid integer range. (see 'kb search --help')"),
        (("nosuch",), "kb: error: No such command 'nosuch'. (see 'kb --help')"),
        (("--bogus",), "kb: error: No such option '--bogus'. (see 'kb --help')"),
        (("serve", "--port", "x"), "kb: error: Invalid value for '--port': 'x' is not a valid integer range. (see 'kb serve --help')"),
    ],
)
def test_usage_errors_from_click_are_one_line_and_exit_2(args, line):
    r = run(*args)
    assert (r.exit_code, r.stderr) == (2, line + "\n")


def test_list_is_the_explicit_way_to_see_a_scope():
    r = run("list", "-i", GOLD, "--path", "notes/", "--all-statuses")
    assert r.stdout == "notes/glossary.md\thistorical\t\nnotes/old-backups.md\tsuperseded\tstorage\n"


def test_stale_index_notice_names_changed_added_and_removed_files(tmp_path):
    corpus = tmp_path / "c"
    shutil.copytree(TINY, corpus)
    out = tmp_path / "t.kb"
    build_hash(corpus, out)
    (corpus / "gateway.txt").write_text("changed\n")
    (corpus / "new.md").write_text("# New\n")
    (corpus / "rotation.yaml").unlink()
    d = json.loads(run("search", "backup", "-i", out, "--json").stdout)
    stale = [n for n in d["notices"] if n["kind"] == "stale_index"]
    assert stale[0]["files"] == ["changed gateway.txt", "added new.md", "removed rotation.yaml"]
    r = run("status", "-i", out)
    assert r.stdout.splitlines() == [
        f"corpus root {corpus}: 3 differences; rebuild with kb-build",
        "  changed: gateway.txt",
        "  added: new.md",
        "  removed: rotation.yaml",
    ]


def test_the_stale_check_reads_nested_folders_and_hashes_only_files_whose_time_moved(tmp_path):
    import os

    from kb.runtime.stale import stale_report

    corpus = tmp_path / "c"
    (corpus / "a" / "b").mkdir(parents=True)
    (corpus / "a" / "b" / "deep.md").write_text("# Deep\n\nbackup words\n")
    (corpus / "a" / "same.md").write_text("# Same\n\nbackup text\n")
    (corpus / "a" / "edit.md").write_text("# Edit\n\nbackup abc\n")
    out = tmp_path / "t.kb"
    build_hash(corpus, out)
    with Index(out) as ix:
        m = ix.manifest()
    assert stale_report(m) == {"root": str(corpus), "root_exists": True, "changed": [], "added": [], "removed": []}
    os.utime(corpus / "a" / "same.md", ns=(1, 1))  # touched, the same bytes: not a change
    (corpus / "a" / "edit.md").write_text("# Edit\n\nbackup xyz\n")  # the same size, other bytes
    (corpus / "a" / "b" / "new.md").write_text("# New\n")
    (corpus / ".hidden").mkdir()
    (corpus / ".hidden" / "x.md").write_text("# Hidden\n")  # hidden folders are not read
    rep = stale_report(m)
    assert (rep["changed"], rep["added"], rep["removed"]) == (["a/edit.md"], ["a/b/new.md"], [])
    assert "touched" not in rep  # kb status compares every file
    rep = stale_report(m, hash_bytes=0)  # a search's check with no bytes left to read
    assert (rep["changed"], rep["touched"]) == ([], ["a/edit.md", "a/same.md"])
    rep = stale_report(m, hash_bytes=(corpus / "a" / "edit.md").stat().st_size)  # room for the first
    assert (rep["changed"], rep["touched"]) == (["a/edit.md"], ["a/same.md"])


def test_a_search_past_its_hashing_budget_says_which_files_it_did_not_compare(tmp_path, monkeypatch):
    from kb.runtime import stale

    corpus = tmp_path / "c"
    shutil.copytree(TINY, corpus)
    out = tmp_path / "t.kb"
    build_hash(corpus, out)
    os.utime(corpus / "gateway.txt", ns=(1, 1))
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"up to {stale.SEARCH_HASH_BYTES >> 20} MiB of them per search" in " ".join(readme.split())  # the README's figure is the code's
    monkeypatch.setattr(stale, "SEARCH_HASH_BYTES", 0)
    d = json.loads(run("search", "backup", "-i", out, "--json").stdout)
    notice = next(n for n in d["notices"] if n["kind"] == "stale_index")
    assert notice["files"] == ["touched gateway.txt"]
    assert notice["message"] == "Index may be stale: touched gateway.txt (touched: its time moved, its bytes were not compared); rebuild with kb-build (kb status lists all)"
    assert run("status", "-i", out).stdout.splitlines() == [f"corpus root {corpus}: up to date"]


class LengthReranker:
    """Scores passages by length: longer = more relevant. Deterministic plumbing check only."""

    name = "length"

    def score(self, query, passages, **kw):
        return [len(p) / 10.0 - 3 for p in passages]


def _reranked(blend: str):
    q = Query("backup snapshot", top_k=6, all_statuses=True, explain=True)
    with Index(GOLD) as ix:
        fixed = {"rrf_k": 20, "adaptive_fusion": False}  # the fused order these tests were written on
        base = Searcher(ix).search(q, resolve({}, fixed))
        rr = Searcher(ix, reranker=LengthReranker()).search(q, resolve({}, {**fixed, "rerank": True, "rerank_top": 3, "blend": blend}))
        lengths = {r.chunk_id: len(ix.chunk(r.chunk_id).text) for r in base.results}
    return base, rr, lengths


def test_the_sigmoid_blend_at_weight_1_orders_the_head_by_the_reranker_alone():
    base, rr, lengths = _reranked("sigmoid")
    assert rr.reranked and not base.reranked
    assert [r.chunk_id for r in base.results] == [1, 3, 5, 2, 6, 9]
    assert [lengths[c] for c in (1, 3, 5)] == [27, 137, 60]
    assert [r.chunk_id for r in rr.results] == [3, 5, 1, 2, 6, 9]  # head by length, the rest in fused order
    assert [r.score for r in rr.results[:3]] == [round(1 / (1 + math.exp(-(lengths[c] / 10.0 - 3))), 6) for c in (3, 5, 1)]
    assert [r.score_kind for r in rr.results] == ["rerank"] * 3 + ["rrf"] * 3
    assert {r.explain.rerank.retrieval_weight for r in rr.results[:3]} == {0.0}


def test_the_position_blend_keeps_a_clear_retrieval_order_in_the_head():
    base, rr, lengths = _reranked("position")
    # 0.75 * minmax(fused) + 0.25 * sigmoid(logit): fused 1.0, 0.57, 0.0 outweigh any probability gap
    fused = [r.explain.rrf for r in base.results[:3]]
    lo, hi = min(fused), max(fused)
    blended = {r.chunk_id: 0.75 * (f - lo) / (hi - lo) + 0.25 / (1 + math.exp(-(lengths[r.chunk_id] / 10.0 - 3))) for r, f in zip(base.results[:3], fused)}
    assert [r.chunk_id for r in rr.results] == [1, 3, 5, 2, 6, 9]
    assert [r.score for r in rr.results[:3]] == pytest.approx([blended[c] for c in (1, 3, 5)], abs=1e-3)  # explain rounds rrf
    assert {r.explain.rerank.retrieval_weight for r in rr.results[:3]} == {0.75}


def test_cjk_queries_skip_a_dense_leg_whose_model_never_saw_the_script(monkeypatch):
    from kb.runtime import search as S

    monkeypatch.setitem(S.EMBEDDER_SCRIPTS, "hash-64", ("latin",))
    d = search_json("存储集群", "-i", GOLD, "--all-statuses", "--explain")
    assert [n["kind"] for n in d["notices"]][0] == "dense_skipped"
    assert set(d["results"][0]["explain"]["legs"]) == {"bm25"}
    d = search_json("storage cluster", "-i", GOLD, "--all-statuses", "--explain", "-n", "1")
    assert "vector" in d["results"][0]["explain"]["legs"]


def test_every_command_has_help_and_appears_in_the_readme():
    from corpora import REPO

    readme = (REPO / "README.md").read_text()
    for name, cmd in kb.commands.items():
        assert cmd.help and cmd.help.strip(), name
        assert f"kb {name}" in readme, name
    assert "kb-build" in readme


def _all_commands():
    """(name, command) of kb, each subcommand (kb set's too) and kb-build."""
    import click
    from kb.builder.cli import main as kb_build

    out, todo = [("kb-build", kb_build)], [("kb", kb)]
    while todo:
        name, cmd = todo.pop()
        out.append((name, cmd))
        if isinstance(cmd, click.Group):
            todo.extend((f"{name} {n}", c) for n, c in cmd.commands.items())
    return out


@pytest.mark.parametrize("name, cmd", _all_commands(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_commands_help_ends_with_two_to_four_examples(name, cmd):
    from kb.builder.cli import main as kb_build

    root = kb_build if name == "kb-build" else kb
    r = CliRunner().invoke(root, [*name.split()[1:], "--help"])
    assert r.exit_code == 0, r.output
    tail = r.stdout.rstrip("\n").split("\n\nExamples:\n")
    assert len(tail) == 2, name
    examples = tail[1].splitlines()
    assert 2 <= len(examples) <= 4 and all(line.startswith("  ") for line in examples), examples


def test_search_help_keeps_the_tuning_knobs_for_help_all():
    short = run("search", "--help").stdout
    full = run("search", "--help-all").stdout
    assert "--rerank-weight" not in short and "--rrf-k" not in short and "--rerank / --no-rerank" in short
    assert "12 tuning options (fusion and rerank) are listed by --help-all." in short
    assert "Tuning options (fusion and rerank; each defaults to the artifact's kb.toml [search]):" in full and "--rerank-weight" in full and "--rrf-k" in full
    assert len(short.splitlines()) < len(full.splitlines()) - 40
    assert "--help-all" in run("bench", "--help").stdout


def test_json_is_one_object_and_jsonl_one_line_per_record_for_every_command():
    d = json.loads(run("list", "-i", GOLD, "--all-statuses", "--json").stdout)
    lines = [json.loads(x) for x in run("list", "-i", GOLD, "--all-statuses", "--jsonl").stdout.splitlines()]
    assert d["items"] == lines and len(lines) > 1 and d["artifact"]["id"] == Index(GOLD).artifact.id
    assert run("list", "-i", GOLD, "--json", "--jsonl").exit_code == 2
    for args in (("list", "-i", GOLD, "--all-statuses"), ("info", "-i", GOLD), ("status", "-i", GOLD), ("get", "3", "-i", GOLD), ("search", "backup", "-i", GOLD, "--mode", "bm25")):
        out = run(*args, "--json").stdout
        assert len(out.splitlines()) == 1 and isinstance(json.loads(out), dict), args


def test_the_readme_and_bench_help_document_the_fixture_format():
    from corpora import REPO

    readme = " ".join((REPO / "README.md").read_text().split())
    help_ = " ".join(run("bench", "--help").stdout.split())
    for text in (readme, help_):
        assert '{"queries": [' in text and '"relevant": ["runbooks/restore.md"]' in text and "an empty list makes a negative query" in text


def test_the_defaults_the_readme_shows_in_its_usage_are_the_commands_defaults():
    import re

    from kb.common.options import SETTINGS

    from corpora import REPO

    readme = (REPO / "README.md").read_text()
    usage = readme.split("## Using it", 1)[1].split("```", 2)[1]
    checked = 0
    for line in usage.splitlines():
        m = re.match(r"kb (\w+)", line.strip())
        if not m:
            continue
        params = {o: p for p in kb.commands[m.group(1)].params for o in p.opts}
        for flag, value in re.findall(r"\[(-{1,2}[\w-]+) ([a-z0-9.]+)\]", line):
            assert str(params[flag].default) == value, (m.group(1), flag)
            checked += 1
    assert checked >= 3  # --host, --port, -k
    assert f"`--rerank-top` ({SETTINGS['rerank_top'].default})" in readme


# --- hostile arguments and files (issue 50 F, G) -------------------------------------------------
@pytest.mark.parametrize("args, shown", [
    (["search", "\udcff disk"], "'\\xff disk'"),
    (["get", "\udcffx"], "'\\xffx'"),
    (["search", "disk", "--path", "\udcff"], "'\\xff'"),
    (["search", "disk", "--tag", "a\udcfe\udcff"], "'a\\xfe\\xff'"),
    (["search", "disk", "-i", "\udcff.kb"], "'\\xff.kb'"),
])
def test_arguments_that_are_not_utf8_are_one_line_and_exit_2(args, shown):
    """Bytes that are not UTF-8 reach Python's argv as surrogate escapes; kb names them as bytes."""
    r = run(*args, "-i", GOLD)
    assert (r.exit_code, r.stderr) == (2, f"kb: error: argument {shown} is not valid UTF-8; give arguments in UTF-8 (see 'kb --help')\n")


@pytest.mark.parametrize("command", [["search", "q"], ["info"], ["list"], ["get", "0"], ["status"]])
def test_an_artifact_path_that_is_a_fifo_is_refused_not_waited_on(tmp_path, command):
    """Issue 50 G: ``mkfifo f; kb search q -i f`` blocked forever."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    r = run(*command, "-i", fifo)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {fifo}: cannot open: not a regular file (a FIFO, socket or device)\n")


def test_kb_build_refuses_an_argument_that_is_not_utf8_and_text_that_is_not_becomes_one_line_anywhere():
    from kb.builder.cli import main as kb_build
    from kb.common.usage import error_line

    r = CliRunner().invoke(kb_build, ["\udcffcorpus", "-o", "x.kb"])
    assert (r.exit_code, r.stderr) == (2, "kb-build: error: argument '\\xffcorpus' is not valid UTF-8; give arguments in UTF-8 (see 'kb-build --help')\n")
    e = UnicodeEncodeError("utf-8", "name \udcff.md", 5, 6, "surrogates not allowed")
    assert error_line("kb", e) == ("kb: error: 'name \\xff.md' is not valid UTF-8; give text, names and paths in UTF-8", 2)
