"""kb get with line ranges and several targets, and the servers' /get and MCP multi_get that take
the same arguments (issue 21). Line ranges come from the source text the artifact keeps
(docs.source), so they are the file's lines exactly, front matter included."""

import json

import pytest
from click.testing import CliRunner

from kb.common.options import DEFAULT_GET_BYTES, MAX_GET_BYTES
from kb.runtime.cli import main as kb
from kb.runtime.index import Index

from corpora import GOLDEN, SAMPLE, build_hash
from servers import call, mcp_session, serving

V2 = GOLDEN / "tiny-v2.kb"
RUNBOOKS = sorted(p.name for p in (SAMPLE / "runbooks").glob("*.md"))


def run(*args):
    return CliRunner().invoke(kb, [str(a) for a in args])


def get_json(*args):
    r = run("get", *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def file_lines(rel: str) -> list[str]:
    return (SAMPLE / rel).read_text(encoding="utf-8").split("\n")[:-1]  # the sample's files end with a newline


def numbered(text_output: str) -> list[tuple[int, str]]:
    """(number, line) of each numbered line of kb get's text output."""
    rows = [line.split("\t", 1) for line in text_output.split("\n") if "\t" in line]
    return [(int(n), rest) for n, rest in rows]


# --- line ranges ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", RUNBOOKS)
def test_a_line_range_prints_exactly_those_lines_of_the_file(sample_artifact, name):
    rel = f"runbooks/{name}"
    r = run("get", f"{rel}:3:5", "-i", sample_artifact)
    assert r.exit_code == 0 and r.stderr == ""
    want = file_lines(rel)
    assert numbered(r.stdout) == [(n, want[n - 1]) for n in range(3, 8)]  # front matter lines, as in the file
    head = r.stdout.split("\n")[0]
    assert head.startswith(f"{rel} · ") and head.endswith(f" · lines 3-7 of {len(want)}")
    d = get_json(f"{rel}:3:5", "-i", sample_artifact)
    assert (d["lines"], d["total_lines"], d["text"]) == ([3, 7], len(want), "\n".join(want[2:7]))
    assert d["document"]["path"] == rel and d["artifact"]["path"] == str(sample_artifact)


def test_the_exact_text_output_of_a_range(sample_artifact):
    r = run("get", "runbooks/disk-full.md:9:4", "-i", sample_artifact)
    assert r.stdout == (
        "runbooks/disk-full.md · When a volume runs out of room · lines 9-12 of 57\n"
        "Context: runbooks/: Step-by-step procedures for running the lab; follow these first\n"
        " 9\t\n"
        "10\t# When a volume runs out of room\n"
        "11\t\n"
        "12\tYou are here because `NwDiskAlmostFull` fired (warning at 85 % used, page at 92 %), or because someone in `#nw-oncall` says their job died with \"No space left on device\". Stay calm: a ZFS pool that is 95 % full is slow, but it is not yet losing data. A pool at 100 % is much harder to recover, so act early.\n"
    )


def test_every_document_is_stored_as_its_source_and_chunks_count_its_lines(sample_artifact):
    with Index(sample_artifact) as ix:
        for d in range(ix.n_docs):
            path = ix.doc_path(d)
            lines = ix.source_lines(d)
            if path == "reference/services.json":  # minified: kept as kb-build pretty-printed it, as its chunks' lines count
                assert "\n".join(lines) == json.dumps(json.loads((SAMPLE / path).read_text()), indent=2, ensure_ascii=False)
            else:
                assert lines == file_lines(path), path
            for c in ix.doc_chunks(d):
                rec = ix.chunk(c)
                span = " ".join("\n".join(lines[rec.lines[0] - 1 : rec.lines[1]]).split())
                assert " ".join(rec.text.split()) in span, (path, c)  # a chunk's text is (pieces of) the lines it names


def test_crlf_no_final_newline_and_front_matter_keep_their_numbering(tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.md").write_bytes(b"---\r\ntitle: A\r\n---\r\n# A\r\n\r\nfirst\r\nlast")
    (corpus / "empty.txt").write_bytes(b"")
    out = tmp_path / "c.kb"
    build_hash(corpus, out)
    d = get_json("a.md:1", "-i", out)
    assert (d["text"], d["lines"], d["total_lines"]) == ("---\ntitle: A\n---\n# A\n\nfirst\nlast", [1, 7], 7)
    with Index(out) as ix:
        assert [ix.chunk(c).lines for c in ix.doc_chunks(ix.doc_by_path("a.md"))] == [(4, 7)]
    r = run("get", "empty.txt:1:1", "-i", out)
    assert (r.exit_code, r.stderr) == (2, "kb: error: 'empty.txt:1:1' starts past the end: empty.txt has 0 lines\n")


def test_a_count_past_the_end_gives_the_lines_up_to_it(sample_artifact):
    d = get_json("runbooks/disk-full.md:55:10", "-i", sample_artifact)
    assert (d["lines"], d["total_lines"]) == ([55, 57], 57)
    assert d["text"] == "\n".join(file_lines("runbooks/disk-full.md")[54:])
    assert get_json("runbooks/disk-full.md:57", "-i", sample_artifact)["lines"] == [57, 57]


@pytest.mark.parametrize(
    "target, message",
    [
        ("runbooks/disk-full.md:58", "'runbooks/disk-full.md:58' starts past the end: runbooks/disk-full.md has 57 lines"),
        ("runbooks/disk-full.md:90:5", "'runbooks/disk-full.md:90:5' starts past the end: runbooks/disk-full.md has 57 lines"),
        ("runbooks/disk-full.md:0:5", "'runbooks/disk-full.md:0:5': lines are numbered from 1, not 0"),
        ("runbooks/disk-full.md:3:0", "'runbooks/disk-full.md:3:0': COUNT must be at least 1, got 0"),
        ("runbooks/disk-ful.md:3:5", "no document with path or doc_id 'runbooks/disk-ful.md:3:5'; closest: runbooks/disk-full.md, runbooks/deploys.md"),
        ("disk-full.md", "no document with path or doc_id 'disk-full.md'; closest: runbooks/disk-full.md"),
        ("nothing-like-it", "no document with path or doc_id 'nothing-like-it'"),
        ("9999", "no chunk 9999; this artifact has chunk ids 0..131"),
    ],
)
def test_a_bad_target_is_one_line_and_exit_2(sample_artifact, target, message):
    r = run("get", target, "-i", sample_artifact)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"kb: error: {message}\n")


def test_an_artifact_built_before_line_ranges_says_to_rebuild():
    r = run("get", "backups.md:1:2", "-i", V2)
    assert (r.exit_code, r.stderr) == (2, "kb: error: this artifact was built without its documents' source lines (before kb get took line ranges); rebuild it with kb-build to read 'backups.md:1:2'\n")
    assert run("get", "backups.md", "-i", V2).exit_code == 0  # everything else reads as before


# --- several targets, --glob, --max-bytes ----------------------------------------------------
def test_several_targets_come_back_in_order_each_with_its_target(sample_artifact):
    d = get_json("runbooks/disk-full.md:3:2", "12", "notes/network-cheatsheet.md", "-i", sample_artifact, "-C", "0")
    assert [i["target"] for i in d["items"]] == ["runbooks/disk-full.md:3:2", "12", "notes/network-cheatsheet.md"]
    assert d["items"][0]["text"] == "\n".join(file_lines("runbooks/disk-full.md")[2:4])
    assert d["items"][1]["chunk"]["chunk_id"] == 12 and d["items"][1]["previous"] == []
    assert d["items"][2]["document"]["path"] == "notes/network-cheatsheet.md" and d["items"][2]["chunks"]
    assert d["omitted"] == [] and d["max_bytes"] == DEFAULT_GET_BYTES
    assert d["bytes"] == sum(len(x.encode()) for x in [d["items"][0]["text"], d["items"][1]["chunk"]["text"], *(c["text"] for c in d["items"][2]["chunks"])])
    whole = get_json("12", "runbooks/disk-full.md:1:1", "--doc", "-i", sample_artifact)["items"][0]
    assert whole["target"] == whole["document"]["path"] == "incidents/2021-03-nas-legacy-outage.md" and "chunks" in whole


def test_a_glob_adds_every_matching_document_in_path_order(sample_artifact):
    d = get_json("--glob", "runbooks/*.md", "-i", sample_artifact)
    assert [i["target"] for i in d["items"]] == [f"runbooks/{n}" for n in RUNBOOKS]
    d = get_json("reference/hosts.md:1:1", "--glob", "decisions/000[34]-*", "-i", sample_artifact)
    assert [i["target"] for i in d["items"]] == ["reference/hosts.md:1:1", "decisions/0003-zfs-replication-over-rsync.md", "decisions/0004-wireguard-remote-access.md"]


@pytest.mark.parametrize(
    "glob, message",
    [
        ("runbooks/[a.md", "glob 'runbooks/[a.md' has a [ that is never closed (to match [ itself, write [[])"),
        ("", "glob is empty; give a pattern such as 'runbooks/*.md'"),
        ("runbooks/*.mdx", "no document path matches glob 'runbooks/*.mdx'"),
    ],
)
def test_a_bad_glob_is_one_line_and_exit_2(sample_artifact, glob, message):
    r = run("get", "--glob", glob, "-i", sample_artifact)
    assert (r.exit_code, r.stderr) == (2, f"kb: error: {message}\n")


def test_a_glob_that_matches_too_many_documents_is_refused(sample_artifact, monkeypatch):
    from kb.runtime import service

    monkeypatch.setattr(service, "MAX_GLOB_MATCHES", 3)
    r = run("get", "--glob", "runbooks/*", "-i", sample_artifact)
    assert (r.exit_code, r.stderr) == (2, "kb: error: glob 'runbooks/*' matches 7 documents; the most is 3: narrow it\n")


def test_what_does_not_fit_in_max_bytes_is_named_never_dropped(sample_artifact):
    targets = ["runbooks/disk-full.md:3:1", "runbooks/gpu-nodes.md", "runbooks/disk-full.md:4:1"]
    small = [len(line.encode()) for line in file_lines("runbooks/disk-full.md")[2:4]]
    budget = sum(small) + 10
    d = get_json(*targets, "--max-bytes", budget, "-i", sample_artifact)
    assert [i["target"] for i in d["items"]] == [targets[0], targets[2]]  # the later small one still fits
    big = get_json("runbooks/gpu-nodes.md", "-i", sample_artifact)
    size = sum(len(c["text"].encode()) for c in big["chunks"])
    assert d["omitted"] == [{"target": "runbooks/gpu-nodes.md", "bytes": size, "reason": f"more than the {budget - small[0]} bytes left of max_bytes {budget}"}]
    assert d["bytes"] == sum(small)
    r = run("get", *targets, "--max-bytes", budget, "-i", sample_artifact)
    assert r.exit_code == 0 and [n for n, _ in numbered(r.stdout)] == [3, 4]
    assert r.stderr == f"kb: note: left out runbooks/gpu-nodes.md ({size:,} bytes): more than the {budget - small[0]} bytes left of max_bytes {budget}\n"


def test_one_target_over_max_bytes_is_an_error(sample_artifact):
    r = run("get", "runbooks/gpu-nodes.md", "--max-bytes", 100, "-i", sample_artifact)
    big = get_json("runbooks/gpu-nodes.md", "-i", sample_artifact)
    size = sum(len(c["text"].encode()) for c in big["chunks"])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"kb: error: runbooks/gpu-nodes.md is {size:,} bytes of text, more than --max-bytes 100; read part of it (PATH:FROM:COUNT) or raise --max-bytes\n")
    r = run("get", "x", "--max-bytes", MAX_GET_BYTES + 1, "-i", sample_artifact)
    assert r.exit_code == 2 and "--max-bytes" in r.stderr


def test_get_needs_a_target_or_a_glob_and_at_most_100_targets(sample_artifact):
    r = run("get", "-i", sample_artifact)
    assert (r.exit_code, r.stderr) == (2, "kb: error: give a TARGET (a chunk id or key, a document's path or doc_id, or PATH:FROM:COUNT) or --glob PATTERN\n")
    r = run("get", *["1"] * 101, "-i", sample_artifact)
    assert (r.exit_code, r.stderr) == (2, "kb: error: targets takes at most 100 items, got 101\n")


def test_kb_get_help_says_what_a_target_is():
    r = run("get", "--help")
    assert "PATH:FROM:COUNT   COUNT lines from line FROM, numbered as in the source file" in r.stdout
    assert "a COUNT past the end stops at the last line" in r.stdout
    assert "--max-bytes INTEGER RANGE" in r.stdout and "--glob PATTERN" in r.stdout


# --- the servers take the same arguments ------------------------------------------------------
MANY = {"targets": ["runbooks/disk-full.md:3:5", "12", "nope.md:1:1"], "glob": "decisions/*", "max_bytes": 4000, "context": 0}


def cli_many(sample_artifact, args):
    flags = [*args["targets"], "--glob", args["glob"], "--max-bytes", args["max_bytes"], "-C", args["context"]]
    return run("get", *flags, "-i", sample_artifact, "--json")


def test_http_get_takes_targets_glob_and_max_bytes(sample_artifact):
    with serving("-i", sample_artifact, "--no-stale-check") as port:
        body = dict(MANY, targets=MANY["targets"][:2])
        status, _, d = call(port, "POST", "/get", body)
        assert status == 200 and d == json.loads(cli_many(sample_artifact, body).stdout)
        assert [i["target"] for i in d["items"]] == ["runbooks/disk-full.md:3:5", "12", "decisions/0003-zfs-replication-over-rsync.md"]
        assert [o["target"] for o in d["omitted"]] == ["decisions/0004-wireguard-remote-access.md"]
        status, _, q = call(port, "GET", "/get?targets=runbooks/disk-full.md:3:5&targets=12&glob=decisions/*&max_bytes=4000&context=0")
        assert (status, q) == (200, d)
        status, _, e = call(port, "POST", "/get", MANY)
        assert (status, e["error"]) == (404, {"code": "not_found", "message": "no document with path or doc_id 'nope.md:1:1'", "field": "targets"})
        status, _, e = call(port, "POST", "/get", {"targets": ["runbooks/disk-full.md:0:1"]})
        assert (status, e["error"]) == (400, {"code": "bad_value", "message": "'runbooks/disk-full.md:0:1': lines are numbered from 1, not 0", "field": "targets"})
        status, _, e = call(port, "POST", "/get", {"path": "runbooks/gpu-nodes.md", "max_bytes": 100})
        assert status == 400 and e["error"]["code"] == "too_large" and e["error"]["field"] == "max_bytes"
        status, _, e = call(port, "POST", "/get", {"path": "runbooks/gpu-nodes.md", "targets": ["12"]})
        assert (status, e["error"]["message"]) == (400, "give chunk_id, chunk_key, doc_id or path, or targets or a glob, not both (got path, targets)")


def test_mcp_multi_get_and_status(sample_artifact):
    with mcp_session("-i", sample_artifact, "--no-stale-check") as c:
        _multi_get_and_status(c, sample_artifact)


def test_mcp_status_names_paths_only_under_the_operators_corpus_root(sample_artifact):
    cli = json.loads(run("status", "-i", sample_artifact, "--json").stdout)
    with mcp_session("-i", sample_artifact, "--corpus-root", cli["root"]) as c:
        status = c.call("status")["structuredContent"]
    assert status == {"checked": True, **cli, "differences": {"changed": 0, "added": 0, "removed": 0}, "counts": status["counts"], "models": status["models"], "artifact": status["artifact"]}
    with mcp_session("-i", sample_artifact, "--stale-check") as c:
        status = c.call("status")["structuredContent"]
    assert status["checked"] is True and status["fresh"] is True and status["differences"] == {"changed": 0, "added": 0, "removed": 0, "touched": 0}
    assert not {"root", "changed", "added", "removed"} & set(status)


def _multi_get_and_status(c, sample_artifact):
    args = dict(MANY, targets=MANY["targets"][:2])
    got = c.call("multi_get", args)
    assert got["isError"] is False and got["structuredContent"] == json.loads(cli_many(sample_artifact, args).stdout)
    bad = c.call("multi_get", {"targets": ["runbooks/disk-full.md:58"]})
    assert bad["isError"] is True and bad["content"][0]["text"] == "error (bad_value, field targets): 'runbooks/disk-full.md:58' starts past the end: runbooks/disk-full.md has 57 lines"
    bad = c.call("multi_get", {"glob": "[x"})
    assert bad["content"][0]["text"] == "error (bad_value, field glob): glob '[x' has a [ that is never closed (to match [ itself, write [[])"
    assert c.call("multi_get", {})["content"][0]["text"] == "error (missing_field, field targets): give targets or glob (got neither)"
    assert c.call("multi_get", {"chunk_id": 1})["content"][0]["text"].startswith("error (unknown_field, field chunk_id): unknown field 'chunk_id'; known: context, glob, max_bytes, max_chunks, member, targets")
    status = c.call("status")["structuredContent"]  # the stale check is off unless the operator turns it on
    info = json.loads(run("info", "-i", sample_artifact, "--json").stdout)
    assert status == {"checked": False, "fresh": None, "reason": "this server does not compare the artifact with its corpus (kb serve/mcp --stale-check turns it on)", "counts": info["counts"], "models": info["models"], "artifact": status["artifact"]}
    assert status["counts"]["documents"] == 17
    assert c.call("status", {"x": 1})["content"][0]["text"] == "error (unknown_field, field x): status takes no arguments, got 'x'"


def test_kb_list_chunks_json_names_each_chunks_key_which_kb_get_takes(sample_artifact):
    items = json.loads(run("list", "-i", sample_artifact, "--chunks", "--all-statuses", "--json").stdout)["items"]
    assert len({i["chunk_key"] for i in items}) == len(items) and all(len(i["chunk_key"]) == 16 for i in items)
    got = get_json(items[3]["chunk_key"], "-i", str(sample_artifact))
    assert got["chunk"]["chunk_id"] == items[3]["chunk_id"]
