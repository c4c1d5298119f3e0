"""kb serve: the real server on a loopback port, called as a client would (http.client).

One subprocess (``python -m kb.runtime.serve_cli serve --port 0``) serves most tests; the
capacity and timeout tests run the same server class in a thread with a deliberately slow
reranker, so they can hold a search open.
"""

import http.client
import json
import socket
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from kb.runtime.cli import main as kb
from kb.runtime.index import Index
from kb.runtime.service import Service
from kb.runtime.search import Searcher
from kb.runtime.serve import make_server

from corpora import GOLDEN, REPO, SERVE_CLI
from servers import call, serving, start_server

GOLD = GOLDEN / "tiny-v1.kb"


@pytest.fixture(scope="module")
def server():
    with serving("-i", GOLD, "--no-stale-check") as port:
        yield port


def recv_until_closed(s) -> str:
    """Everything the server sends on a raw socket until it closes the connection."""
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    s.close()
    return data.decode()


def cli_json(*args):
    r = CliRunner().invoke(kb, ["search", *map(str, args), "-i", str(GOLD), "--json", "--no-stale-check"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def without_timings(d):
    d = dict(d)
    d.pop("timings_ms", None)
    return d


# --- the contract ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body, flags",
    [
        ({"query": "restore the snapshot"}, ["restore the snapshot"]),
        ({"query": "backup", "mode": "bm25", "tag": ["storage"], "all_statuses": True, "top_k": 3}, ["backup", "--mode", "bm25", "--tag", "storage", "--all-statuses", "-n", "3"]),
        ({"query": "restore", "rewrites": ["zfs rollback of the latest snapshot"], "explain": True, "top_k": 3}, ["restore", "--rewrite", "zfs rollback of the latest snapshot", "--explain", "-n", "3"]),
        ({"query": "", "entities": ["storage", "ops"], "all_statuses": True, "full": True}, ["", "-e", "storage", "-e", "ops", "--all-statuses", "--full"]),
        ({"query": "backup", "status": ["superseded"], "group": "doc", "path": "notes/"}, ["backup", "--status", "superseded", "--group", "doc", "--path", "notes/"]),
        ({"query": "backup", "semantic_weight": 0.2, "rrf_k": 10}, ["backup", "--semantic-weight", "0.2", "--rrf-k", "10"]),
    ],
)
def test_post_search_answers_the_same_json_as_kb_search_json(server, body, flags):
    status, headers, got = call(server, "POST", "/search", body)
    assert status == 200 and headers["Content-Type"] == "application/json; charset=utf-8"
    assert without_timings(got) == without_timings(cli_json(*flags))
    assert ("timings_ms" in got) == bool(body.get("explain"))


def test_get_search_takes_the_same_inputs_as_query_parameters(server):
    _, _, post = call(server, "POST", "/search", {"query": "backup", "tag": ["storage"], "all_statuses": True, "mode": "bm25", "top_k": 2})
    status, _, got = call(server, "GET", "/search?query=backup&tag=storage&all_statuses=true&mode=bm25&top_k=2")
    assert status == 200 and got == post
    status, _, got = call(server, "GET", "/search?q=backup&tag=storage&all_statuses=true&mode=bm25&n=2")  # q and n: aliases
    assert status == 200 and got == post
    status, _, got = call(server, "GET", "/search?q=backup&query=backup")
    assert (status, got["error"]["code"], got["error"]["field"]) == (400, "bad_request", "query")


def test_rerank_input_is_a_boolean_that_defaults_to_the_artifacts_setting(server):
    _, _, on = call(server, "POST", "/search", {"query": "backup", "rerank": True})
    _, _, off = call(server, "POST", "/search", {"query": "backup", "rerank": False})
    assert on["results"] == off["results"] and on["reranked"] is False  # the golden artifact has no reranker


def test_health_and_info(server):
    status, _, h = call(server, "GET", "/health")
    assert status == 200 and h["status"] == "ok" and h["artifact"]["path"] == str(GOLD) and len(h["artifact"]["id"]) == 16
    status, _, info = call(server, "GET", "/info")
    r = CliRunner().invoke(kb, ["info", "-i", str(GOLD), "--json"])
    assert status == 200 and info == json.loads(r.stdout)


def test_get_returns_a_chunk_with_its_neighbours_or_a_whole_document(server):
    status, _, d = call(server, "GET", "/get?chunk_id=3")
    assert status == 200
    assert d["chunk"]["chunk_id"] == 3 and d["chunk"]["text"].startswith("## Restore")
    assert [c["chunk_id"] for c in d["previous"]] == [2] and d["next"] == []  # chunk 4 is another document
    assert d["document"]["path"] == "backups.md" and d["document"]["n_chunks"] == 2
    _, _, d = call(server, "POST", "/get", {"chunk_id": 7, "context": 3})
    assert d["previous"] == [] and [c["chunk_id"] for c in d["next"]] == [8]
    _, _, by_path = call(server, "POST", "/get", {"path": "rotation.yaml"})
    _, _, by_id = call(server, "GET", "/get?doc_id=rotation.yaml")
    assert by_path == by_id and [c["chunk_id"] for c in by_path["chunks"]] == [7, 8] and by_path["truncated"] is False
    status, _, d = call(server, "POST", "/get", {"path": "nope.md"})
    assert (status, d["error"]) == (404, {"code": "not_found", "message": "no document with path 'nope.md'", "field": "path"})
    status, _, d = call(server, "POST", "/get", {"chunk_id": 3, "path": "backups.md"})
    assert status == 400 and "exactly one of chunk_id, chunk_key, doc_id or path" in d["error"]["message"]


def test_keep_alive_serves_many_requests_on_one_connection(server):
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    for q in ("backup", "restore", "gateway firewall"):
        status, _, d = call(server, "POST", "/search", {"query": q, "mode": "bm25"}, conn=conn)
        assert status == 200 and d["query"] == q
    status, _, _ = call(server, "POST", "/search", {"query": 1}, conn=conn)  # an error keeps the connection too
    status, _, d = call(server, "GET", "/health", conn=conn)
    assert status == 200
    conn.close()


# --- hostile and malformed input -------------------------------------------------------------
def error_of(port, method, path, body=None, headers=None):
    status, _, d = call(port, method, path, body, headers)
    return status, d["error"]


@pytest.mark.parametrize(
    "body, code, field, message",
    [
        (b'{"query": "backup"', "bad_json", None, "the body is not valid JSON: Expecting ',' delimiter at line 1 column 19"),
        (b'{"query": NaN}', "bad_json", None, "the body is not valid JSON: NaN is not valid JSON"),
        (b'{"query": "a", "query": "b"}', "bad_json", "query", "field 'query' appears twice in the JSON object"),
        (b"\xff\xfe", "bad_json", None, "the body is not UTF-8 (invalid start byte at byte 0)"),
        (b"[" * 30000 + b"]" * 30000, "bad_json", None, "the body nests too deeply"),
        (b'["backup"]', "bad_type", None, "the request must be a JSON object, got array"),
        ({"query": "backup", "colour": "red", "size": 1}, "unknown_field", "colour", "unknown fields 'colour', 'size'; known: adaptive_fusion, all_statuses, blend, budget_ms, entities, explain, full, group, literal, low_confidence_floor, min_score, mode, path, query, rank1_bonus, rank23_bonus, rerank, rerank_passage_tokens, rerank_top, rerank_weight, rewrite_weight, rewrites, rrf_k, semantic_weight, status, tag, tag_weight, top_k"),
        ({"query": 42}, "bad_type", "query", "query must be a string, got integer 42"),
        ({"query": "backup", "top_k": "5"}, "bad_type", "top_k", 'top_k must be an integer, got string "5"'),
        ({"query": "backup", "top_k": 2.5}, "bad_type", "top_k", "top_k must be an integer, got number 2.5"),
        ({"query": "backup", "rerank": "no"}, "bad_type", "rerank", 'rerank must be a boolean (true or false), got string "no"'),
        ({"query": "backup", "tag": "storage"}, "bad_type", "tag", 'tag must be an array of strings, got string "storage"'),
        ({"query": "backup", "status": ["live", 3]}, "bad_type", "status", "status must be an array of strings; it holds integer 3"),
        ({"query": "backup", "top_k": 0}, "bad_value", "top_k", "top_k must be within 1..200, got 0"),
        ({"query": "backup", "mode": "fuzzy"}, "bad_value", "mode", 'mode must be one of hybrid, bm25, vector, got "fuzzy"'),
        ({"query": "backup", "semantic_weight": 1.5}, "bad_value", "semantic_weight", "semantic_weight must be within 0..1, got 1.5"),
        ({"query": "backup", "status": ["draft"]}, "bad_value", None, "unknown status 'draft'; this artifact has: live-doctrine, live, derived, historical, superseded"),
        ({"query": "  "}, "missing_field", "query", "give a query (or rewrites or entities)"),
        ({"query": "x" * 9000}, "bad_value", "query", "query is 9000 characters long; the most is 8192"),
        ({"query": "a", "rewrite": ["b"], "rewrites": ["c"]}, "bad_request", "rewrites", "rewrites given twice (as 'rewrites' and as an alias)"),
    ],
)
def test_bad_requests_get_a_400_that_names_the_problem(server, body, code, field, message):
    headers = {"Content-Type": "application/json"}
    status, err = error_of(server, "POST", "/search", body, headers)
    assert status == 400
    assert err == {"code": code, "message": message, **({"field": field} if field else {})}


def test_an_oversized_body_gets_413_and_the_connection_closes(server):
    status, headers, d = call(server, "POST", "/search", json.dumps({"query": "a" * 70_000}).encode(), {"Content-Type": "application/json"})
    assert (status, d["error"]["code"]) == (413, "payload_too_large") and headers["Connection"] == "close"
    assert d["error"]["message"] == "the body is 70013 bytes; the most is 65536"


def test_a_body_far_over_the_limit_is_refused_without_reading_it(server):
    s = socket.create_connection(("127.0.0.1", server), timeout=10)
    s.sendall(f"POST /search HTTP/1.1\r\nHost: 127.0.0.1:{server}\r\nContent-Type: application/json\r\nContent-Length: {10**9}\r\n\r\n".encode())
    reply = recv_until_closed(s)
    assert reply.startswith("HTTP/1.1 413 ") and '"payload_too_large"' in reply


def test_chunked_bodies_are_read_within_the_limit_and_other_media_types_refused(server):
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    conn.request("POST", "/search", body=iter([b'{"query": ', b'"backup"}']), headers={"Content-Type": "application/json"}, encode_chunked=True)
    r = conn.getresponse()
    assert (r.status, json.loads(r.read())["query"]) == (200, "backup")
    conn.close()
    s = socket.create_connection(("127.0.0.1", server), timeout=10)
    s.sendall(f"POST /search HTTP/1.1\r\nHost: 127.0.0.1:{server}\r\nTransfer-Encoding: chunked\r\n\r\n{70000:x}\r\n".encode())
    reply = recv_until_closed(s)
    assert reply.startswith("HTTP/1.1 413 ") and '"payload_too_large"' in reply
    status, err = error_of(server, "POST", "/search", b"query=backup", {"Content-Type": "application/x-www-form-urlencoded"})
    assert (status, err["code"]) == (415, "unsupported_media_type")


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example:8181"},
        {"Host": "attacker.test"},
        {"Host": "127.0.0.1:1"},  # right address, wrong port: another server's name
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "https://127.0.0.1"},
    ],
)
def test_foreign_host_or_origin_is_refused_against_dns_rebinding(server, headers):
    for method, path, body in (("GET", "/health", None), ("POST", "/search", {"query": "backup"})):
        status, err = error_of(server, method, path, body, headers)
        assert (status, err["code"]) == (403, "forbidden")


def test_own_names_are_accepted_as_host_and_origin(server):
    for host in (f"127.0.0.1:{server}", f"localhost:{server}", f"LOCALHOST:{server}", f"[::1]:{server}"):
        status, _, _ = call(server, "POST", "/search", {"query": "backup"}, {"Host": host, "Origin": f"http://{host}"})
        assert status == 200, host


def test_unknown_path_404_and_wrong_method_405(server):
    status, err = error_of(server, "GET", "/admin")
    assert (status, err["code"]) == (404, "not_found")
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS", "BREW"):
        status, headers, d = call(server, method, "/search")
        assert (status, d["error"]["code"], headers["Allow"]) == (405, "method_not_allowed", "GET, POST"), method
    status, headers, d = call(server, "POST", "/health", {})
    assert (status, headers["Allow"]) == (405, "GET")


def test_get_parameters_are_checked_like_json(server):
    status, err = error_of(server, "GET", "/search?query=backup&top_k=many")
    assert (status, err) == (400, {"code": "bad_type", "message": 'top_k must be an integer, got "many"', "field": "top_k"})
    status, err = error_of(server, "GET", "/search?query=backup&mode=bm25&mode=vector")
    assert (status, err["message"]) == (400, "mode given 2 times; it takes one value")
    status, _, d = call(server, "GET", "/search?query=backup&explain&top_k=1")
    assert status == 200 and "explain" in d["results"][0]


# --- the command line ------------------------------------------------------------------------
def test_a_missing_artifact_exits_3_with_one_line():
    r = subprocess.run([*SERVE_CLI, "serve", "-i", "/nonexistent.kb"], cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    assert (r.returncode, r.stderr) == (3, "kb: error: no artifact at /nonexistent.kb (from -i); build one with kb-build or pass -i PATH\n")


def test_a_busy_port_exits_1_with_one_line():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        r = subprocess.run([*SERVE_CLI, "serve", "-i", str(GOLD), "--port", str(port)], cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    finally:
        s.close()
    assert r.returncode == 1 and r.stderr.startswith(f"kb: error: cannot listen on 127.0.0.1:{port}: ")


# --- capacity and timeout, with a reranker that waits to be released --------------------------
class GatedReranker:
    """Scores passages, but a query "slow" waits until ``gate`` is set."""

    def __init__(self):
        self.gate, self.entered = threading.Event(), threading.Event()

    def score(self, query, passages, **kw):
        if query == "slow":
            self.entered.set()
            self.gate.wait(10)
        return [0.0] * len(passages)


@pytest.fixture
def gated_server():
    ix = Index(GOLD)
    rr = GatedReranker()
    svc = Service(ix, Searcher(ix, reranker=rr), stale_check=False).warm()
    servers = []

    def start(**kw):
        srv = make_server(svc, "127.0.0.1", 0, **kw)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
        return srv.port

    yield start, rr
    rr.gate.set()
    for srv in servers:
        srv.shutdown()
        srv.server_close()
    ix.close()


def test_over_capacity_gets_503_and_a_freed_slot_serves_again(gated_server):
    start, rr = gated_server
    port = start(max_concurrent=1, timeout=10)
    first = {}
    t = threading.Thread(target=lambda: first.update(r=call(port, "POST", "/search", {"query": "slow", "rerank": True})))
    t.start()
    assert rr.entered.wait(5)
    status, headers, d = call(port, "POST", "/search", {"query": "backup"})
    assert (status, d["error"]["code"], headers["Retry-After"]) == (503, "busy", "1")
    assert call(port, "GET", "/health")[0] == 200  # health needs no search slot
    rr.gate.set()
    t.join(10)
    assert first["r"][0] == 200 and first["r"][2]["reranked"] is True
    assert call(port, "POST", "/search", {"query": "backup"})[0] == 200


def test_a_request_past_the_timeout_gets_504_and_keeps_its_slot_until_it_ends(gated_server):
    start, rr = gated_server
    port = start(max_concurrent=1, timeout=0.3)
    t0 = time.monotonic()
    status, _, d = call(port, "POST", "/search", {"query": "slow", "rerank": True})
    assert (status, d["error"]["code"]) == (504, "timeout") and time.monotonic() - t0 < 5
    assert call(port, "POST", "/search", {"query": "backup"})[0] == 503  # the abandoned search still runs
    rr.gate.set()
    deadline = time.monotonic() + 5
    while call(port, "POST", "/search", {"query": "backup"})[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_concurrent_requests_give_the_serial_answers(gated_server):
    start, _ = gated_server
    port = start(max_concurrent=4, queue_wait=5)
    queries = ["backup", "restore the snapshot", "gateway firewall", "rotation escalation", "存储集群", "disk alerts"]
    want = {q: call(port, "POST", "/search", {"query": q, "all_statuses": True})[2]["results"] for q in queries}
    got, errors = [], []

    def worker(k):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for i in range(12):
            q = queries[(i + k) % len(queries)]
            status, _, d = call(port, "POST", "/search", {"query": q, "all_statuses": True}, conn=conn)
            (got if status == 200 and d["results"] == want[q] else errors).append((q, status))
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert errors == [] and len(got) == 72


def test_connections_past_the_limit_get_503_and_are_closed(gated_server):
    start, _ = gated_server
    port = start(max_connections=2)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        reply = recv_until_closed(s)
        assert reply.startswith("HTTP/1.1 503 ") and '"busy"' in reply and "Connection: close" in reply
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + 5
    while True:  # the idle connections' threads end once their sockets close
        try:
            if call(port, "GET", "/health")[0] == 200:
                break
        except (ConnectionError, http.client.HTTPException):
            pass
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_the_commands_plug_into_the_kb_group():
    from kb.runtime.clikit import Group
    from kb.runtime.serve_cli import mcp, serve

    group = Group(name="kb", commands={"serve": serve, "mcp": mcp})
    r = CliRunner().invoke(group, ["serve", "--help"])
    assert r.exit_code == 0 and "--port" in r.stdout and "--allow-host" in r.stdout
    r = CliRunner().invoke(group, ["mcp", "--help"])
    assert r.exit_code == 0 and "MCP client over stdio" in r.stdout
    r = CliRunner().invoke(group, ["serve", "-i", "/nonexistent.kb"])
    assert (r.exit_code, r.stderr) == (3, "kb: error: no artifact at /nonexistent.kb (from -i); build one with kb-build or pass -i PATH\n")
    r = CliRunner().invoke(group, ["serve", "-i", str(GOLD), "--port", "70000"])
    assert r.exit_code == 2 and "70000 is not in the range 0<=x<=65535" in r.stderr


def test_the_stale_index_notice_is_added_and_rechecked_after_its_ttl(tmp_path):
    import shutil

    from kb.runtime.requests import parse_search

    from corpora import TINY, build_hash

    corpus = tmp_path / "c"
    shutil.copytree(TINY, corpus)
    out = tmp_path / "t.kb"
    build_hash(corpus, out)
    with Index(out) as ix:
        svc = Service(ix, stale_check=True, corpus_root=str(corpus), stale_ttl=3600).warm()
        req = parse_search({"query": "backup"})
        assert [n["kind"] for n in svc.search(req)["notices"]] == []
        (corpus / "new.md").write_text("# New\n")
        assert [n["kind"] for n in svc.search(req)["notices"]] == []  # within the TTL: the cached answer
        svc.stale_ttl = 0
        stale = [n for n in svc.search(req)["notices"] if n["kind"] == "stale_index"]
        assert stale[0]["files"] == ["added new.md"]


def test_ctrl_c_exits_130_and_sigterm_143_as_readme_says():
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        proc, port = start_server("-i", GOLD, "--no-stale-check")
        assert call(port, "GET", "/health")[0] == 200
        proc.send_signal(sig)
        assert proc.wait(10) == 128 + sig
        assert proc.stderr.read().decode().count("\n") <= 1  # no traceback


def test_a_crafted_artifact_naming_root_slash_makes_no_walk_and_leaks_no_path(tmp_path, tiny_artifact):
    from corpora import crafted_root_artifact

    crafted = crafted_root_artifact(tiny_artifact, tmp_path / "crafted.kb")
    with serving("-i", crafted) as port:  # the stale check is off: nothing walked, nothing reported
        status, _, d = call(port, "GET", "/search?q=backup")
        assert status == 200 and [n for n in d["notices"] if n["kind"] == "stale_index"] == []
    with serving("-i", crafted, "--stale-check") as port:  # on, by the operator: counts, bounded
        status, _, d = call(port, "GET", "/search?q=backup")
        notice = next(n for n in d["notices"] if n["kind"] == "stale_index")
        assert status == 200 and "files" not in notice and len(notice["message"]) < 300 and "etc" not in notice["message"]


@pytest.mark.parametrize("twice", ["Host", "Content-Length", "Origin"])
def test_a_header_that_counts_once_given_twice_is_400(server, twice):
    """Issue 50: duplicate Host headers were accepted (the first won); a proxy may read the other."""
    values = {"Host": f"127.0.0.1:{server}", "Content-Length": "19", "Origin": f"http://127.0.0.1:{server}"}
    head = "".join(f"{k}: {v}\r\n" for k, v in values.items()) + f"{twice}: {values[twice] if twice != 'Host' else 'evil.example'}\r\n"
    s = socket.create_connection(("127.0.0.1", server), timeout=10)
    s.sendall((f"POST /search HTTP/1.1\r\n{head}Content-Type: application/json\r\n\r\n" + '{"query": "backup"}').encode())
    reply = recv_until_closed(s)
    assert reply.startswith("HTTP/1.1 400 ") and f'"several {twice} headers; a request has at most one"' in reply


def test_a_bound_given_alone_is_named_as_one():
    from kb.runtime.requests import RequestError, parse_get

    with pytest.raises(RequestError, match=r"^chunk_id must be at least 0, got -1$"):
        parse_get({"chunk_id": -1})
