"""``kb mcp``: the search library as a Model Context Protocol server over stdio.

The protocol subset is implemented here on the standard library instead of the official ``mcp``
SDK: the SDK (mcp 2.3 with pydantic, starlette, uvicorn, httpx, cryptography, ...) adds about
46 MB in 27 packages and 0.45-0.9 s of imports (580 modules) to a runtime that starts in about
0.3 s and is frozen into one binary, for a stdio server that needs only the messages below.

Transport: newline-delimited JSON-RPC 2.0 messages on stdin and stdout (one message per line, no
embedded newlines). Nothing but protocol messages is written to stdout: ``protect_stdout`` moves
file descriptor 1 to stderr before anything else runs, so stray prints and C libraries' output go
to stderr, where the logs go too.

Messages: ``initialize`` (version negotiation: the client's version when it is one of
PROTOCOL_VERSIONS, else the newest), ``notifications/initialized``, ``ping``, ``tools/list``,
``tools/call``, ``notifications/cancelled`` (a cancelled call's result is dropped); JSON-RPC
batches (arrays) are accepted. Tools: ``search``, ``get``, ``multi_get``, ``info``, ``status``. A
tool's own failure (bad argument, unknown status, chunk not found) is a tool result with
``isError: true`` that names the field, so the model can correct itself; malformed messages,
unknown methods, unknown tools and non-object arguments are JSON-RPC errors.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

from kb.common.options import DEFAULT_GET_BYTES
from kb.formats.version import KB_VERSION

from .requests import GET_FIELDS, MULTI_GET_FIELDS, SEARCH_FIELDS, RequestError, input_schema, parse_get, parse_search

PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")  # newest first
STRUCTURED_SINCE = "2025-06-18"  # tool results carry structuredContent from this version on
MAX_LINE = 4 * 1024 * 1024  # bytes of one incoming message
TOOL_WORKERS = 2  # tool calls answered concurrently (a ping is answered while a search runs)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603

INSTRUCTIONS = (
    "Searches one kb knowledge-base artifact (a team's documents). Call `search` with the user's "
    "need in natural language as `query`; add `rewrites` (other phrasings, the documents' likely "
    "wording) and `entities` (systems, products, topics that may be tags) when they help. Results "
    "carry chunk_id, doc_id, path, section, status and a snippet; call `get` with a chunk_id to "
    "read a chunk in full with its neighbouring chunks, with a doc_id or path for a whole "
    "document, or with path PATH:FROM:COUNT for exact lines; `multi_get` reads several at once, exact line ranges (PATH:FROM:COUNT) and every "
    "document matching a glob, within a byte budget. `info` lists the artifact's statuses, tags, "
    "path contexts and counts; `status` says whether files changed since the build (when the server "
    "checks). By default "
    "historical and superseded documents are left out (all_statuses or status to include them)."
)

TOOLS = (
    {
        "name": "search",
        "title": "Search the knowledge base",
        "description": (
            "Hybrid search over the knowledge base: BM25 (exact words) and dense vectors (meaning), fused "
            "with Reciprocal Rank Fusion, plus a tag leg for `entities`; with `rerank` (off unless the "
            "artifact's kb.toml turned it on) the top candidates are rescored by the artifact's cross-encoder. "
            "`min_score` keeps only results at least that confident. Takes every field HTTP /search takes, the "
            "fusion and rerank knobs too (each defaults to the artifact's kb.toml [search]). Returns JSON: `results` ranked best first (rank, score, score_kind, "
            "path, section, lines, status, tags, confidence, `path_contexts` (what the folders the path is under hold, "
            "most specific first), chunk_id, doc_id, title, snippet or text), `tag_contexts` "
            "(what each tag means) and `notices` (low confidence, stale index). An empty `results` means "
            "nothing matched in the chosen scope."
        ),
        "fields": (SEARCH_FIELDS, None),
    },
    {
        "name": "get",
        "title": "Read a chunk, a document or a line range",
        "description": (
            "Read from the knowledge base, as `kb get` and HTTP /get do (the same fields). With `chunk_id`: that "
            "chunk's full text with `context` chunks before (`previous`) and after (`next`) it in the same "
            "document. With `doc_id` or `path`: the whole document's chunks in order; `path` may also be "
            "PATH:FROM:COUNT for COUNT lines from line FROM exactly as in the source file (PATH:FROM: to its end), "
            "returned as `lines` [first, last], `total_lines` and `text`. Give exactly one of chunk_id, doc_id, "
            "path, or `targets` (each as kb get's TARGET) and/or `glob` for several (then as multi_get). "
            f"One record of more than {DEFAULT_GET_BYTES:,} bytes of text (max_bytes) is refused: read a line range. "
            "Of a set of artifacts, `member` names the result's `artifact` to read from."
        ),
        "fields": (GET_FIELDS, None),
    },
    {
        "name": "multi_get",
        "title": "Read several chunks, documents or line ranges",
        "description": (
            "Read several things at once, as `kb get` and HTTP /get take them. `targets`: chunk ids ('12', "
            "with `context` neighbours), document paths or doc_ids (their chunks), or PATH:FROM:COUNT for "
            "COUNT lines from line FROM exactly as in the source file (PATH:FROM: to its end). `glob`: also "
            "every document whose path matches. Returns JSON: `items` (each record with its `target`; a line "
            "range has `lines` [first, last], `total_lines` and `text`), then `omitted`: every target left "
            "out because it did not fit in `max_bytes`, with its size, so nothing is dropped unsaid."
        ),
        "fields": (GET_FIELDS, MULTI_GET_FIELDS),
    },
    {
        "name": "info",
        "title": "Describe the knowledge base",
        "description": (
            "What the artifact holds: document, chunk and term counts, the embedder and reranker, the "
            "statuses (and which are excluded by default), the tags and path contexts with their "
            "descriptions, search defaults and the corpus root it was built from."
        ),
        "fields": ({}, None),
    },
    {
        "name": "status",
        "title": "Is the knowledge base up to date?",
        "description": (
            "Compares the artifact with the corpus on disk, as `kb status --json`, when the server's operator "
            "turned that on (kb mcp --stale-check; else `checked` false and `fresh` null): `fresh`, "
            "`differences` (how many files `changed`, were `added` or `removed` since the build) and, when "
            "the operator gave the corpus root, the files themselves (`root_exists` false when the corpus "
            "is not on this machine); plus the artifact's `counts` (documents, chunks, terms, vectors) and "
            "`models` (embedder and reranker cards)."
        ),
        "fields": ({}, None),
    },
)


def tool_list() -> list[dict]:
    out = []
    for t in TOOLS:
        fields, names = t["fields"]
        out.append(
            {
                "name": t["name"],
                "title": t["title"],
                "description": t["description"],
                "inputSchema": input_schema(fields, names),
                "annotations": {"title": t["title"], "readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
            }
        )
    return out


class RpcError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _valid_id(i) -> bool:
    return isinstance(i, str) or (isinstance(i, int) and not isinstance(i, bool))


class McpServer:
    """Answers MCP messages with a Service. ``write`` sends one message (a dict or a list)."""

    def __init__(self, service, write, log=None, workers: int = TOOL_WORKERS):
        self.service = service
        self._write = write
        self._write_lock = threading.Lock()
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.protocol: str | None = None
        self.client: dict | None = None
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kb-mcp")
        self._cancelled: set = set()
        self._lock = threading.Lock()

    def send(self, msg):
        with self._write_lock:
            self._write(msg)

    # --- the transport loop --------------------------------------------------------------------
    def run(self, stdin) -> None:
        """Read messages from the binary stream ``stdin`` until EOF; answer in-flight calls, return."""
        try:
            while True:
                line = stdin.readline(MAX_LINE + 1)
                if not line:
                    break
                if len(line) > MAX_LINE and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # skip the rest of the oversized message
                        line = stdin.readline(MAX_LINE)
                    self.send(_error(None, INVALID_REQUEST, f"message longer than {MAX_LINE} bytes"))
                    continue
                if line.strip():
                    self.handle_line(line)
        finally:
            self._pool.shutdown(wait=True)

    def handle_line(self, line: bytes) -> None:
        try:
            msg = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            self.send(_error(None, PARSE_ERROR, f"parse error: {e}"))
            return
        if isinstance(msg, list):
            if not msg:
                self.send(_error(None, INVALID_REQUEST, "empty batch"))
                return
            self._pool.submit(self._answer_batch, msg)
            return
        if isinstance(msg, dict) and msg.get("method") == "tools/call" and _valid_id(msg.get("id")):
            self._pool.submit(self._answer_async, msg)  # long work: answered from a worker
            return
        reply = self.handle(msg)
        if reply is not None:
            self.send(reply)

    def _answer_async(self, msg):
        reply = self.handle(msg)
        with self._lock:
            cancelled = msg.get("id") in self._cancelled
            self._cancelled.discard(msg.get("id"))
        if reply is not None and not cancelled:
            self.send(reply)

    def _answer_batch(self, msgs):
        replies = [r for r in map(self.handle, msgs) if r is not None]
        if replies:
            self.send(replies)

    # --- one message ---------------------------------------------------------------------------
    def handle(self, msg) -> dict | None:
        """The reply to one decoded message (None for notifications and client responses)."""
        if not isinstance(msg, dict):
            return _error(None, INVALID_REQUEST, "a message must be a JSON object")
        mid = msg.get("id")
        has_id = "id" in msg
        if has_id and not _valid_id(mid):
            return _error(None, INVALID_REQUEST, "id must be a string or an integer")
        if msg.get("jsonrpc") != "2.0":
            return _error(mid if has_id else None, INVALID_REQUEST, 'jsonrpc must be "2.0"')
        if "method" not in msg:
            if has_id and ("result" in msg or "error" in msg):
                return None  # a response to a request of ours; we send none
            return _error(mid if has_id else None, INVALID_REQUEST, "a request needs a method")
        method = msg["method"]
        if not isinstance(method, str):
            return _error(mid if has_id else None, INVALID_REQUEST, "method must be a string")
        params = msg.get("params", {})
        if params is None:
            params = {}
        if not has_id:
            self._notification(method, params)
            return None
        try:
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            return {"jsonrpc": "2.0", "id": mid, "result": self._request(method, params)}
        except RpcError as e:
            return _error(mid, e.code, e.message)
        except Exception as e:  # noqa: BLE001 - one message fails, the server stays up
            self.log(f"kb mcp: error: {method}: {e.__class__.__name__}: {e}\n{traceback.format_exc()}")
            return _error(mid, INTERNAL_ERROR, f"internal error: {e.__class__.__name__}: {e}")

    def _notification(self, method: str, params) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict):
            with self._lock:
                self._cancelled.add(params.get("requestId"))
        # notifications/initialized and anything else need no action

    def _request(self, method: str, params: dict) -> dict:
        if method == "initialize":
            return self._initialize(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": tool_list()}
        if method == "tools/call":
            return self._call(params)
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _initialize(self, params: dict) -> dict:
        asked = params.get("protocolVersion")
        if not isinstance(asked, str):
            raise RpcError(INVALID_PARAMS, "initialize needs protocolVersion (a string)")
        self.protocol = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        self.client = params.get("clientInfo") if isinstance(params.get("clientInfo"), dict) else None
        return {
            "protocolVersion": self.protocol,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "kb", "title": "kb knowledge-base search", "version": KB_VERSION},
            "instructions": INSTRUCTIONS,
        }

    # --- tools ---------------------------------------------------------------------------------
    def _call(self, params: dict) -> dict:
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call needs name (a string)")
        args = params.get("arguments")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise RpcError(INVALID_PARAMS, "arguments must be an object")
        handler = {"search": self._search, "get": self._get, "multi_get": self._multi_get, "info": self._info, "status": self._status}.get(name)
        if handler is None:
            raise RpcError(INVALID_PARAMS, f"unknown tool {name!r}; tools: {', '.join(t['name'] for t in TOOLS)}")
        try:
            return self._result(handler(args), False)
        except RequestError as e:
            return self._result({"error": e.to_dict()}, True)
        except Exception as e:  # noqa: BLE001 - reported to the model as a failed call
            self.log(f"kb mcp: error: tool {name}: {e.__class__.__name__}: {e}\n{traceback.format_exc()}")
            return self._result({"error": {"code": "internal", "message": f"{e.__class__.__name__}: {e}"}}, True)

    def _search(self, args: dict) -> dict:
        return self.service.search(parse_search(args))

    def _get(self, args: dict) -> dict:
        return self.service.get(parse_get(args))

    def _multi_get(self, args: dict) -> dict:
        return self.service.get(parse_get(args, allowed=MULTI_GET_FIELDS))

    def _info(self, args: dict) -> dict:
        _no_arguments("info", args)
        return self.service.info()

    def _status(self, args: dict) -> dict:
        _no_arguments("status", args)
        return self.service.status()

    def _result(self, payload: dict, is_error: bool) -> dict:
        if is_error:
            e = payload["error"]
            text = f"error ({e['code']}" + (f", field {e['field']}" if "field" in e else "") + f"): {e['message']}"
        else:
            text = json.dumps(payload, ensure_ascii=False)
        out = {"content": [{"type": "text", "text": text}], "isError": is_error}
        if (self.protocol or PROTOCOL_VERSIONS[0]) >= STRUCTURED_SINCE:
            out["structuredContent"] = payload
        return out


def _no_arguments(tool: str, args: dict) -> None:
    if args:
        raise RequestError("unknown_field", f"{tool} takes no arguments, got {', '.join(map(repr, args))}", next(iter(args)))


def _error(mid, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": mid, "error": {"code": code, "message": message}}


def protect_stdout():
    """Keep file descriptor 1 for the protocol alone; return a binary writer onto it.

    Everything else that writes to stdout (print, sys.stdout, C libraries writing to fd 1) lands
    on stderr from here on.
    """
    sys.stdout.flush()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "wb", buffering=0)


def line_writer(stream):
    """``write(msg)`` for ``McpServer``: one compact JSON line per message."""

    def write(msg):
        stream.write(json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")
        if hasattr(stream, "flush"):
            stream.flush()

    return write


def run_stdio(service, out_stream=None, in_stream=None) -> None:
    """Serve MCP on stdin/stdout until stdin closes."""
    out = out_stream if out_stream is not None else protect_stdout()
    McpServer(service, line_writer(out)).run(in_stream if in_stream is not None else sys.stdin.buffer)
