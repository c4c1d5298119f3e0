"""Clients of the real servers, for the tests: ``kb serve`` started as a subprocess on a free port
and called over HTTP, and ``kb mcp`` spoken to in raw JSON-RPC lines. (A helper module like
corpora.py: test modules import it, never each other.)"""

from __future__ import annotations

import http.client
import json
import selectors
import signal
import subprocess
import time
from contextlib import contextmanager

from corpora import REPO, SERVE_CLI


def _default_sigint() -> None:
    """In the server process before it starts: SIGINT as a terminal gives it. A test run started
    with SIGINT ignored (a background job of a non-interactive shell) passes that on, and the
    Ctrl-C tests would then wait on a server that, rightly, ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_server(*args, timeout=20.0):
    """Start ``kb serve`` on a free port; return (process, port) once it says where it listens."""
    cmd = [*SERVE_CLI, "serve", "--port", "0", *map(str, args)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_sigint)
    line = read_line(proc.stderr, timeout)
    if not line.startswith("kb serve: listening on http://127.0.0.1:"):
        proc.kill()
        raise AssertionError(f"unexpected first stderr line {line!r}: {proc.stderr.read().decode()}")
    return proc, int(line.rsplit(":", 1)[1])


@contextmanager
def serving(*args):
    """``kb serve ARGS`` on a free port for the block (yields the port); it must stop cleanly on SIGTERM (exit 143, 128 + 15)."""
    proc, port = start_server(*args)
    try:
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM


def read_line(stream, timeout: float) -> str:
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    if not sel.select(timeout):
        raise AssertionError("no output in time")
    return stream.readline().decode().rstrip("\n")


def call(port, method, path, body=None, headers=None, conn=None):
    """(status, headers, decoded JSON body) of one request."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    hdrs = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    conn.request(method, path, body=body, headers=hdrs)
    r = conn.getresponse()
    data = r.read()
    if own:
        conn.close()
    return r.status, r.headers, (json.loads(data) if data else None)



class Client:
    """Writes JSON-RPC lines to the server's stdin; reads its stdout, where every line must be JSON-RPC."""

    def __init__(self, *args):
        cmd = [*SERVE_CLI, "mcp", *map(str, args)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_sigint)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.next_id = 0
        self.seen: list = []  # every message read, in order

    def send_raw(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg):
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def read(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                raise AssertionError("no reply in time")
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"server closed stdout; stderr: {self.proc.stderr.read().decode()}")
            msg = json.loads(line)  # anything that is not JSON fails here
            self.seen.append(msg)
            return msg

    def request(self, method, params=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        reply = self.read()
        assert reply["id"] == self.next_id and reply["jsonrpc"] == "2.0"
        return reply

    def call(self, tool, arguments=None):
        r = self.request("tools/call", {"name": tool, "arguments": arguments or {}})
        return r["result"]

    def close(self):
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        code = self.proc.wait(10)
        err = self.proc.stderr.read().decode()
        return code, rest, err


@contextmanager
def mcp_session(*args):
    """A ``kb mcp ARGS`` client past the initialize handshake (protocol 2025-06-18) for the block;
    the server must then end cleanly, having written nothing but JSON-RPC."""
    c = Client(*args)
    init = c.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}})
    assert init["result"]["protocolVersion"] == "2025-06-18"
    c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield c
    code, rest, err = c.close()
    assert code == 0 and rest == b""
    assert err.startswith("kb mcp: serving ")
