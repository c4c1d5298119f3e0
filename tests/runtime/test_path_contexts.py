"""kb.toml [contexts]: a one-line description per path prefix, returned with every result under
it (most specific first) in JSON, text, HTTP and MCP, and listed by kb info (issue 21)."""

import json

import msgpack
from click.testing import CliRunner

from kb.formats import layout as L
from kb.formats.artifact import Artifact
from kb.runtime.cli import main as kb

from corpora import GOLDEN, SAMPLE
from servers import call, mcp_session, serving

RUNBOOKS = {"prefix": "runbooks/", "description": "Step-by-step procedures for running the lab; follow these first"}
LEGACY = {"prefix": "runbooks/backup-rsync-legacy.md", "description": "Superseded in 2021; kept only to read old backup disks"}
REFERENCE = {"prefix": "reference/", "description": "Inventories and schedules: hosts, services, alerts and the on-call rotation"}
SAMPLE_CONTEXTS = {
    "decisions/": "Architecture decision records: the choices made and the reasons",
    "incidents/": "Post-incident reviews: what happened, why, and what we changed",
    "notes/": "Informal notes and cheat sheets; less authoritative than the runbooks",
    "reference/": REFERENCE["description"],
    "runbooks/": RUNBOOKS["description"],
    "runbooks/backup-rsync-legacy.md": LEGACY["description"],
}
QUERY = ("rsync backup of the old nas", "--all-statuses", "-n", "8")


def run(*args):
    return CliRunner().invoke(kb, [str(a) for a in args])


def expected_contexts(path):
    """What the sample's kb.toml gives a result at ``path``: longest prefix first."""
    under = [(p, d) for p, d in SAMPLE_CONTEXTS.items() if path.startswith(p)]
    return [{"prefix": p, "description": d} for p, d in sorted(under, key=lambda pd: -len(pd[0]))]


def search_results(artifact):
    r = run("search", *QUERY, "-i", artifact, "--json", "--no-stale-check")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["results"]


def test_every_result_under_a_prefix_carries_its_contexts_most_specific_first(sample_artifact):
    results = search_results(sample_artifact)
    assert {r["path"].split("/")[0] for r in results} >= {"runbooks", "incidents"}  # the query reaches several folders
    for r in results:
        assert r["path_contexts"] == expected_contexts(r["path"]), r["path"]
    legacy = next(r for r in results if r["path"] == "runbooks/backup-rsync-legacy.md")
    assert legacy["path_contexts"] == [LEGACY, RUNBOOKS]
    assert list(legacy)[list(legacy).index("tags") + 1] == "path_contexts"  # beside tags, as tag_contexts describes them


def test_jsonl_results_carry_them_too(sample_artifact):
    r = run("search", *QUERY, "-i", sample_artifact, "--jsonl", "--no-stale-check")
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["path_contexts"] for x in rows] == [x["path_contexts"] for x in search_results(sample_artifact)]


def test_text_output_gives_each_result_a_context_line(sample_artifact):
    r = run("search", "rsync", "-i", sample_artifact, "--all-statuses", "--path", "runbooks/backup-rsync-legacy.md", "-n", "1", "--no-stale-check", "--mode", "bm25")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("   Status: "))
    assert lines[i + 1] == f"   Context: {LEGACY['prefix']}: {LEGACY['description']}; {RUNBOOKS['prefix']}: {RUNBOOKS['description']}"


def test_a_result_under_no_prefix_has_none_and_an_artifact_without_contexts_stores_no_key(tmp_path, sample_artifact):
    results = search_results(GOLDEN / "tiny-v2.kb")
    assert results and all(r["path_contexts"] == [] for r in results)
    r = run("search", "gateway", "-i", GOLDEN / "tiny-v2.kb", "--mode", "bm25", "--no-stale-check")
    assert "Context:" not in r.stdout
    with Artifact(GOLDEN / "tiny-v2.kb") as art:
        assert "path_contexts" not in msgpack.unpackb(bytes(art.section(L.META)))  # optional: absent = none
    with Artifact(sample_artifact) as art:
        assert msgpack.unpackb(bytes(art.section(L.META)))["path_contexts"] == SAMPLE_CONTEXTS


def test_kb_info_lists_them(sample_artifact):
    d = json.loads(run("info", "-i", sample_artifact, "--json").stdout)
    assert d["path_contexts"] == SAMPLE_CONTEXTS
    text = run("info", "-i", sample_artifact).stdout.splitlines()
    i = text.index("path contexts: 6")
    assert text[i + 1 : i + 7] == [f"  {p}: {desc}" for p, desc in SAMPLE_CONTEXTS.items()]
    assert "path contexts: 0" in run("info", "-i", GOLDEN / "tiny-v2.kb").stdout.splitlines()


def test_http_search_results_carry_them(sample_artifact):
    with serving("-i", sample_artifact, "--no-stale-check") as port:
        status, _, d = call(port, "POST", "/search", {"query": QUERY[0], "all_statuses": True, "top_k": 8})
        assert status == 200 and d["results"]
        assert all(r["path_contexts"] == expected_contexts(r["path"]) for r in d["results"])
        assert any(r["path_contexts"] == [LEGACY, RUNBOOKS] for r in d["results"])


def test_mcp_search_results_carry_them(sample_artifact):
    with mcp_session("-i", sample_artifact, "--no-stale-check") as c:
        d = c.call("search", {"query": QUERY[0], "all_statuses": True, "top_k": 8})["structuredContent"]
        search_tool = next(t for t in c.request("tools/list")["result"]["tools"] if t["name"] == "search")
    assert d["results"] and all(r["path_contexts"] == expected_contexts(r["path"]) for r in d["results"])
    assert any(r["path_contexts"] == [LEGACY, RUNBOOKS] for r in d["results"])
    assert "`path_contexts`" in search_tool["description"]


def test_the_sample_kb_toml_describes_every_top_folder():
    import tomllib

    contexts = tomllib.loads((SAMPLE / "kb.toml").read_text())["contexts"]
    assert contexts == SAMPLE_CONTEXTS
    folders = {p.name + "/" for p in SAMPLE.iterdir() if p.is_dir()}
    assert folders <= set(contexts)


def test_kb_get_gives_a_documents_contexts(sample_artifact):
    d = json.loads(run("get", "runbooks/backup-rsync-legacy.md", "-i", sample_artifact, "--json").stdout)
    assert d["document"]["path_contexts"] == [LEGACY, RUNBOOKS]


def test_the_readme_states_the_bounds_the_code_enforces():
    from kb.formats.meta import MAX_CONTEXT_CHARS, MAX_CONTEXT_PREFIX_CHARS, MAX_PATH_CONTEXTS

    from corpora import REPO

    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"each mapped to one line of at most {MAX_CONTEXT_CHARS} characters (at most {MAX_PATH_CONTEXTS} prefixes, each at most {MAX_CONTEXT_PREFIX_CHARS} characters)" in readme
