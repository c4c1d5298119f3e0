"""Query syntax (phrases, exclusions, field and path scopes) and output formats (issue 21)."""

import json
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from kb.runtime.cli import main as kb
from kb.runtime.query_syntax import ParsedQuery, QuerySyntaxError, parse, parse_syntax

from corpora import GOLDEN

GOLD = str(GOLDEN / "tiny-v1.kb")


def hits(query, *extra):
    r = CliRunner().invoke(kb, ["search", query, "-i", GOLD, "--mode", "bm25", "--all-statuses", "--json", "--no-stale-check", *extra])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    return [(x["path"], x["section"]) for x in d["results"]], d


@pytest.mark.parametrize(
    "query, want",
    [
        ('"restore script"', [("backups.md", "Backups > Restore")]),
        ("restore -rollback", [("backups.md", "Backups")]),
        ('snapshot -"zfs send"', [("backups.md", "Backups > Restore")]),
        ("title:backups restore", [("backups.md", "Backups > Restore"), ("backups.md", "Backups")]),
        ("section:restore snapshot", [("backups.md", "Backups > Restore")]),
        ("path:notes backups", [("notes/old-backups.md", "Old backup procedure")]),
        ("backup path:gateway", []),
    ],
)
def test_each_syntax_form_filters_and_the_words_still_rank(query, want):
    assert hits(query)[0] == want


def test_the_json_echoes_the_parsed_query():
    d = hits('"restore script" -rollback title:backups path:b')[1]
    assert d["query"] == '"restore script" -rollback title:backups path:b'
    assert d["parsed_query"] == {"text": "restore script backups", "phrases": ["restore script"], "excluded": ["rollback"], "title": ["backups"], "section": [], "path": "b", "lex": "", "vec": "", "hyde": ""}


def test_words_with_colons_are_words():
    assert parse("meet at 10:30 http://x").text == "meet at 10:30 http://x"
    assert parse("plain words") == ParsedQuery("plain words")


@pytest.mark.parametrize(
    "query, line",
    [
        ('"restore script', 'kb: error: unbalanced quote in the query: close the phrase with another "'),
        ('-rollback -"zfs send"', "kb: error: the query has no words left to rank (only exclusions or path:); add at least one word"),
        ("path:notes", "kb: error: the query has no words left to rank (only exclusions or path:); add at least one word"),
    ],
)
def test_syntax_errors_are_usage_errors(query, line):
    r = CliRunner().invoke(kb, ["search", "-i", GOLD, "--", query])
    assert (r.exit_code, r.stderr) == (2, line + "\n")


def test_the_same_syntax_works_over_http_and_mcp_requests():
    from kb.runtime.index import Index
    from kb.runtime.requests import parse_search
    from kb.runtime.service import Service

    with Index(GOLD) as ix:
        d = Service(ix, stale_check=False).search(parse_search({"query": '"restore script"', "mode": "bm25", "all_statuses": True}))
    assert [(x["path"], x["section"]) for x in d["results"]] == [("backups.md", "Backups > Restore")] and d["parsed_query"]["phrases"] == ["restore script"]


def test_output_formats():
    run = lambda *a: CliRunner().invoke(kb, ["search", "restore snapshot", "-i", GOLD, "--mode", "bm25", "--no-stale-check", *a])  # noqa: E731
    assert run("--format", "files").stdout == "backups.md\n"
    csv = run("--format", "csv", "-n", "1").stdout.splitlines()
    assert csv[0] == "rank,score,score_kind,confidence,path,section,start_line,end_line,status,tags,chunk_id,doc_id,title,snippet"
    assert csv[1].startswith("1,") and ',backups.md,Backups > Restore,11,18,live-doctrine,"ops,storage",3,backups.md,Backups,' in csv[1]
    md = run("--format", "md", "-n", "1").stdout
    assert md.startswith("### kb search: restore snapshot\n\n1. `backups.md` § Backups > Restore (lines 11-18, confidence ")
    assert json.loads(run("--format", "json").stdout) == json.loads(run("--json").stdout) | {"artifact": json.loads(run("--format", "json").stdout)["artifact"]}
    r = run("--json", "--format", "csv")
    assert (r.exit_code, r.stderr) == (2, "kb: error: give one output format: --format, --json or --jsonl\n")


def test_min_score_keeps_only_confident_results():
    all_ = hits("restore snapshot")[1]["results"]
    kept = hits("restore snapshot", "--min-score", "0.5")[1]["results"]
    assert [r["rank"] for r in kept] == [r["rank"] for r in all_ if r["confidence"] >= 0.5] and len(kept) < len(all_)


def test_files_output_feeds_xargs_on_the_sample(sample_artifact, tmp_path):
    from pathlib import Path

    import sys

    from corpora import SAMPLE

    kb_bin = str(Path(sys.executable).parent / "kb")
    p = subprocess.run(f"{kb_bin} search 'disk full' -i {sample_artifact} --mode bm25 --format files --no-stale-check | xargs -d '\\n' ls", shell=True, cwd=SAMPLE, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and p.stderr == "" and "runbooks/disk-full.md" in p.stdout.splitlines()


def test_literal_takes_the_query_as_plain_words():
    assert hits('"restore script" -rollback')[0] == []
    words = hits('"restore script" -rollback', "--literal")
    assert words[1]["parsed_query"] is None and ("backups.md", "Backups > Restore") in words[0]


def test_a_phrase_no_chunk_holds_gives_a_notice_and_the_words_in_any_order():
    got, d = hits('"script restore" snapshot')  # both words are in backups.md, never in this order
    assert got == hits("script restore snapshot")[0] and got
    assert [(n["kind"], n["message"]) for n in d["notices"] if n["kind"] == "phrase_not_found"] == [
        ("phrase_not_found", 'no chunk contains "script restore" as written; these results hold the words in any order')
    ]


def test_a_phrase_that_exists_but_is_excluded_stays_required():
    assert hits('"restore script" -rollback')[0] == []  # the one chunk with the phrase also has rollback


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list("ab -:\"\t\n_é字\x1c\xa0\u2003\u3000")), max_size=20))
def test_the_plain_words_shortcut_parses_as_the_token_loop(query):
    def outcome(fn):
        try:
            return fn(query)
        except QuerySyntaxError as e:
            return str(e)

    assert outcome(parse) == outcome(parse_syntax)


def test_one_word_needles_are_decided_by_the_postings(sample_artifact):
    """A one-word phrase or exclusion is decided by the index, without reading chunk text: on the
    sample corpus, the chunks it keeps are those whose title, section or text ``matches`` the
    word, plus first chunks of documents whose front-matter description holds it (the index
    counts the description with the document's first chunk)."""
    import numpy as np

    from kb.runtime.bm25 import analyzer_of
    from kb.runtime.filters import syntax_mask
    from kb.runtime.index import Index
    from kb.runtime.query_syntax import matches

    with Index(sample_artifact) as ix:
        analyzer = analyzer_of(ix)
        every = np.ones(ix.n_chunks, dtype=bool)
        recs = [ix.chunk(c) for c in range(ix.n_chunks)]
        first = {int(ix.first_chunk[d]): d for d in range(ix.n_docs)}

        def description(c: int) -> str:
            lines = ix.source_lines(first[c]) if c in first else []
            if lines[:1] not in (["---"], ["+++"]):
                return ""
            front = lines[1 : lines.index(lines[0], 1)]  # YAML (description: ...) or TOML (description = "...")
            return "\n".join(ln for ln in front if ln.startswith("description"))

        words = sorted({w for r in recs for w in analyzer.words(r.text)})[::7] + ["the", "Restoring", "2", "and"]
        for w in words:
            holds = np.array([matches(analyzer, "\n".join((r.title, r.section, r.text, description(c))), w) for c, r in enumerate(recs)])
            assert (syntax_mask(ix, ParsedQuery(w, phrases=(w,)), every) == holds).all(), w
            assert (syntax_mask(ix, ParsedQuery("x", excluded=(w,)), every) == ~holds).all(), w
