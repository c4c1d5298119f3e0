"""kb mcp: the real stdio server as a subprocess, spoken to in raw JSON-RPC lines."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from kb.runtime.cli import main as kb

from corpora import GOLDEN, REPO, SERVE_CLI
from kb.runtime.requests import GET_FIELDS, SEARCH_FIELDS
from servers import Client, mcp_session

GOLD = GOLDEN / "tiny-v1.kb"


@pytest.fixture(scope="module")
def client():
    with mcp_session("-i", GOLD, "--no-stale-check") as c:
        yield c


def cli_json(*args):
    r = CliRunner().invoke(kb, ["search", *map(str, args), "-i", str(GOLD), "--json", "--no-stale-check"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# --- lifecycle -------------------------------------------------------------------------------
@pytest.mark.parametrize("asked, agreed", [("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"), ("2024-11-05", "2024-11-05"), ("1999-01-01", "2025-06-18")])
def test_initialize_negotiates_the_protocol_version(asked, agreed):
    c = Client("-i", GOLD, "--no-stale-check")
    r = c.request("initialize", {"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})["result"]
    assert r["protocolVersion"] == agreed
    assert r["capabilities"] == {"tools": {"listChanged": False}} and r["serverInfo"]["name"] == "kb"
    assert "`search`" in r["instructions"]
    structured = "structuredContent" in c.call("info")
    assert structured == (agreed >= "2025-06-18")
    assert c.close()[0] == 0


def test_ping_and_notifications(client):
    assert client.request("ping")["result"] == {}
    client.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}})  # no reply to a notification
    assert client.request("ping")["result"] == {}


def test_tools_list_documents_every_input(client):
    tools = {t["name"]: t for t in client.request("tools/list")["result"]["tools"]}
    assert set(tools) == {"search", "get", "multi_get", "info", "status"}
    s = tools["search"]["inputSchema"]
    assert s["type"] == "object" and s["additionalProperties"] is False
    assert set(s["properties"]) == set(SEARCH_FIELDS) and {"min_score", "rrf_k", "explain"} <= set(s["properties"])  # what HTTP /search takes
    assert all(p["description"] for p in s["properties"].values())
    assert s["properties"]["rewrites"]["type"] == "array" and s["properties"]["mode"]["enum"] == ["hybrid", "bm25", "vector"]
    assert "natural language" in s["properties"]["query"]["description"]
    assert set(tools["get"]["inputSchema"]["properties"]) == set(GET_FIELDS)  # what HTTP /get takes
    assert set(tools["multi_get"]["inputSchema"]["properties"]) == {"targets", "glob", "max_bytes", "context", "max_chunks", "member"}
    assert tools["info"]["inputSchema"]["properties"] == tools["status"]["inputSchema"]["properties"] == {}
    assert all(t["annotations"]["readOnlyHint"] for t in tools.values())


# --- tools -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arguments, flags",
    [
        ({"query": "restore the snapshot"}, ["restore the snapshot"]),
        ({"query": "restore", "rewrites": ["zfs rollback of the latest snapshot"], "top_k": 3}, ["restore", "--rewrite", "zfs rollback of the latest snapshot", "-n", "3"]),
        ({"query": "", "entities": ["storage", "ops"], "all_statuses": True}, ["", "-e", "storage", "-e", "ops", "--all-statuses"]),
        ({"query": "backup", "status": ["superseded"], "mode": "bm25", "full": True}, ["backup", "--status", "superseded", "--mode", "bm25", "--full"]),
        ({"query": "backup", "tag": ["storage"], "path": "notes/", "all_statuses": True, "rerank": False, "group": "doc"}, ["backup", "--tag", "storage", "--path", "notes/", "--all-statuses", "--no-rerank", "--group", "doc"]),
    ],
)
def test_search_returns_the_json_of_kb_search(client, arguments, flags):
    r = client.call("search", arguments)
    assert r["isError"] is False
    assert r["structuredContent"] == cli_json(*flags)
    assert json.loads(r["content"][0]["text"]) == r["structuredContent"] and r["content"][0]["type"] == "text"


def test_get_a_chunk_with_neighbours_and_a_document(client):
    r = client.call("get", {"chunk_id": 8})["structuredContent"]
    assert r["chunk"]["section"] == "escalation" and [c["chunk_id"] for c in r["previous"]] == [7] and r["next"] == []
    r = client.call("get", {"chunk_id": 2, "context": 0})["structuredContent"]
    assert r["previous"] == r["next"] == []
    doc = client.call("get", {"doc_id": "backups.md"})["structuredContent"]
    assert doc == client.call("get", {"path": "backups.md"})["structuredContent"]
    assert doc["document"]["title"] == "Backups" and [c["section"] for c in doc["chunks"]] == ["Backups", "Backups > Restore"]


def test_get_takes_what_kb_get_takes(sample_artifact):
    def cli(*args):
        r = CliRunner().invoke(kb, ["get", *args, "-i", str(sample_artifact), "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    with mcp_session("-i", sample_artifact, "--no-stale-check") as c:
        for target in ("runbooks/disk-full.md:2:3", "runbooks/disk-full.md:56", "runbooks/disk-full.md"):
            r = c.call("get", {"path": target})
            assert r["isError"] is False and r["structuredContent"] == cli(target)
        assert c.call("get", {"path": "runbooks/disk-full.md:2:3"})["structuredContent"]["lines"] == [2, 4]
        many = c.call("get", {"targets": ["3", "runbooks/disk-full.md:1:1"], "context": 0})["structuredContent"]
        assert many == cli("3", "runbooks/disk-full.md:1:1", "-C", "0") and [i["target"] for i in many["items"]] == ["3", "runbooks/disk-full.md:1:1"]


def test_search_takes_min_score_and_the_knobs_http_takes(client):
    every = client.call("search", {"query": "backup", "all_statuses": True, "top_k": 10})["structuredContent"]["results"]
    floor = 0.5
    kept = client.call("search", {"query": "backup", "all_statuses": True, "top_k": 10, "min_score": floor})["structuredContent"]["results"]
    assert kept == [r for r in every if r["confidence"] >= floor] and 0 < len(kept) < len(every)
    assert client.call("search", {"query": "backup", "rrf_k": 60, "explain": True})["isError"] is False


def test_ctrl_c_exits_130():
    import signal

    c = Client("-i", GOLD, "--no-stale-check")
    c.request("ping")
    c.proc.send_signal(signal.SIGINT)
    assert c.proc.wait(10) == 130
    c = Client("-i", GOLD, "--no-stale-check")
    c.request("ping")
    c.proc.send_signal(signal.SIGTERM)
    assert c.proc.wait(10) == 143


def test_info_is_kb_info_json(client):
    r = CliRunner().invoke(kb, ["info", "-i", str(GOLD), "--json"])
    assert client.call("info")["structuredContent"] == json.loads(r.stdout)


@pytest.mark.parametrize(
    "tool, arguments, text",
    [
        ("search", {"query": "backup", "colour": "red"}, f"error (unknown_field, field colour): unknown field 'colour'; known: {', '.join(sorted(SEARCH_FIELDS))}"),
        ("search", {"query": "backup", "min_score": 2}, "error (bad_value, field min_score): min_score must be within 0..1, got 2"),
        ("search", {"query": "backup", "top_k": "3"}, 'error (bad_type, field top_k): top_k must be an integer, got string "3"'),
        ("search", {"query": "backup", "rewrites": "other words"}, 'error (bad_type, field rewrites): rewrites must be an array of strings, got string "other words"'),
        ("search", {"query": "backup", "status": ["draft"]}, "error (bad_value): unknown status 'draft'; this artifact has: live-doctrine, live, derived, historical, superseded"),
        ("search", {}, "error (missing_field, field query): give a query (or rewrites or entities)"),
        ("get", {"chunk_id": 99}, "error (not_found, field chunk_id): no chunk 99; this artifact has chunk ids 0..9"),
        ("get", {"doc_id": "nope"}, "error (not_found, field doc_id): no document with doc_id 'nope'"),
        ("get", {}, "error (missing_field, field chunk_id): give exactly one of chunk_id, doc_id or path, or targets or a glob (got none)"),
        ("info", {"verbose": True}, "error (unknown_field, field verbose): info takes no arguments, got 'verbose'"),
    ],
)
def test_tool_errors_are_results_with_is_error_naming_the_field(client, tool, arguments, text):
    r = client.call(tool, arguments)
    assert r["isError"] is True and r["content"] == [{"type": "text", "text": text}]


# --- protocol errors -------------------------------------------------------------------------
def test_protocol_errors_are_json_rpc_errors(client):
    assert client.request("tools/call", {"name": "delete_everything", "arguments": {}})["error"]["code"] == -32602
    assert client.request("tools/call", {"name": "search", "arguments": ["backup"]})["error"] == {"code": -32602, "message": "arguments must be an object"}
    assert client.request("resources/list")["error"] == {"code": -32601, "message": "method not found: resources/list"}
    assert client.request("initialize", {})["error"]["code"] == -32602
    client.send_raw(b"this is not json\n")
    assert client.read()["error"]["code"] == -32700
    client.send_raw(b'{"jsonrpc": "1.0", "id": 7, "method": "ping"}\n')
    assert client.read() == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": 'jsonrpc must be "2.0"'}}
    client.send_raw(b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}\n')
    assert client.read()["error"]["code"] == -32600
    client.send_raw(b"\n   \n")  # blank lines are skipped
    assert client.request("ping")["result"] == {}


def test_a_batch_gets_an_array_of_replies(client):
    client.send([{"jsonrpc": "2.0", "id": "a", "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/initialized"}, {"jsonrpc": "2.0", "id": "b", "method": "tools/call", "params": {"name": "search", "arguments": {"query": "backup", "top_k": 1}}}])
    replies = client.read()
    assert [r["id"] for r in replies] == ["a", "b"] and replies[1]["result"]["isError"] is False


def test_stdout_carries_only_json_rpc_and_stdin_eof_ends_cleanly():
    c = Client("-i", GOLD, "--no-stale-check")
    c.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    c.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "restore"}}})
    code, rest, err = c.close()  # EOF right away: the in-flight call is still answered
    lines = [json.loads(x) for x in rest.decode().splitlines()]
    assert code == 0 and [m["id"] for m in lines] == [1, 2] and all(m["jsonrpc"] == "2.0" for m in lines)
    assert "kb mcp: serving" in err


def test_writes_to_stdout_from_anything_else_go_to_stderr():
    code = (
        "import os, sys\n"
        "from kb.runtime.mcp_server import protect_stdout, line_writer\n"
        "out = protect_stdout()\n"
        "print('stray print')\n"
        "os.write(1, b'stray fd write\\n')\n"
        "line_writer(out)({'jsonrpc': '2.0', 'id': 1, 'result': {}})\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30, check=False)
    assert r.stdout == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    assert r.stderr == b"stray print\nstray fd write\n"


def test_a_missing_artifact_exits_3_before_any_protocol():
    r = subprocess.run([*SERVE_CLI, "mcp", "-i", "/nonexistent.kb"], cwd=REPO, input=b"", capture_output=True, timeout=30, check=False)
    assert (r.returncode, r.stdout) == (3, b"")
    assert r.stderr == b"kb: error: no artifact at /nonexistent.kb (from -i); build one with kb-build or pass -i PATH\n"
