"""``kb serve``: the search library over HTTP, standard library only (http.server).

Endpoints (JSON in, JSON out):

- ``GET|POST /search``: the inputs of ``kb search`` (runtime/requests.py SEARCH_FIELDS) as a JSON
  object body or as query parameters; answers the versioned JSON of ``kb search --json``.
- ``GET|POST /get``: the inputs of ``kb get`` (runtime/requests.py GET_FIELDS): a chunk with its
  neighbours (``chunk_id``, ``context``) or a document's chunks (``doc_id`` or ``path``), one
  record; or ``targets`` (chunk ids, paths or doc_ids, ``PATH:FROM:COUNT`` line ranges) and a
  ``glob``, answered as ``kb get --json`` with several targets: ``items`` in order while they fit
  in ``max_bytes``, and ``omitted``, the rest with their sizes (the MCP multi_get tool's answer).
- ``GET /info``: ``kb info --json``. ``GET /health``: liveness and the artifact id.

Errors are ``{"error": {"code", "message", "field"?}}`` with 400 (bad JSON, wrong type, unknown
field, bad value, a single get record over ``max_bytes``, a header given twice), 403 (foreign Host or Origin), 404 (unknown path or chunk/document), 405 (wrong
method), 413 (body over the limit), 415 (not JSON), 503 (all search
slots busy), 504 (the request ran past the per-request timeout).

Safety: it listens on loopback by default, and answers only requests whose Host (and Origin, when
a browser sends one) names this server, so a web page cannot reach it through DNS rebinding or a
cross-site form; a header that counts once (``SINGLE_HEADERS``: Host, Origin, the body's
length and encoding) given twice is 400, as a proxy in front may have read the other. The limits
on searches, queue, request time and connections are the constants below, the flags of
``kb serve`` (README, "kb serve limits") and KbHTTPServer; a search that overruns its timeout
keeps its slot until it really ends, so the bound holds, and a request's deadline runs from its
first byte (not per read, so trickling does not keep a connection).
"""

from __future__ import annotations

import io
import json
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from kb.formats.version import KB_VERSION

from .requests import GET_FIELDS, HTTP_STATUS, SEARCH_FIELDS, RequestError, from_query_string, parse_get, parse_search

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8181
MAX_BODY = 64 * 1024  # bytes of a request body; a search request is a few hundred
DRAIN_MAX = 1024 * 1024  # an oversized body up to this is read and dropped so the 413 arrives cleanly
MAX_CONCURRENT = 4  # searches running at once; CTranslate2 runs one model call at a time anyway
MAX_CONNECTIONS = 256  # open connections (one thread each); see process_request for what happens past it
MAX_QUEUE = 64  # requests waiting for a search slot; past this a request gets 503 at once
QUEUE_WAIT_S = 2.0  # how long a queued request waits for a free search slot before 503
REQUEST_TIMEOUT_S = 30.0
MAX_QUERY_FIELDS = 256  # query parameters of one GET
SINGLE_HEADERS = ("Host", "Origin", "Content-Length", "Transfer-Encoding", "Content-Type")  # given twice: 400 (RFC 9110, 9112)
IDLE_TIMEOUT_S = 15.0  # an idle keep-alive connection is closed after this long without a request
REQUEST_DEADLINE_S = 10.0  # from a request's first byte, its head and body must arrive within this
WRITE_TIMEOUT_S = 10.0  # a client that does not read its response for this long is dropped
BACKLOG = 1024  # the listen queue (the kernel caps it at net.core.somaxconn)
ADMIT_WAIT_S = 1.0  # past max_connections, how long a new connection waits for one to end before 503
EVICT_AFTER_S = 1.0  # past max_connections, a connection still sending its request after this long is closed
LOOPBACK = ("127.0.0.1", "localhost", "::1")
ROUTES = {"/search": ("GET", "POST"), "/get": ("GET", "POST"), "/info": ("GET",), "/health": ("GET",)}


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def allowed_hosts(host: str, port: int, extra=()) -> frozenset[str]:
    """Host header values (lowercase ``host:port``; also bare ``host`` on port 80) naming this server.

    The wildcard addresses (0.0.0.0, ::) name no server: with them, list the names clients use
    with ``extra`` (--allow-host).
    """
    names = {h.strip().strip("[]").lower() for h in ("127.0.0.1", "localhost", "::1", host, *extra)} - {"", "0.0.0.0", "::"}
    out = {host_port(h, port) for h in names}
    if port == 80:
        out |= {f"[{h}]" if ":" in h else h for h in names}
    return frozenset(out)


def _refuse_busy(sock, message: str) -> None:
    """Answer 503 on a connection no handler will serve, then close it cleanly: read what the
    client sent (briefly), so the close does not reset a connection whose client has yet to read
    the answer."""
    import socket
    import time

    body = json.dumps({"error": {"code": "busy", "message": message}}).encode()
    head = f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    try:
        sock.settimeout(1.0)
        sock.sendall(head.encode() + body)
        sock.shutdown(socket.SHUT_WR)
        end = time.monotonic() + 1.0
        while time.monotonic() < end and sock.recv(65536):
            pass
    except OSError:
        pass
    finally:
        sock.close()


class KbHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer holding the shared Service and the limits.

    Connections: at most ``max_connections`` have a handler thread. Past that, a new connection
    closes the connection that has been sending its request the longest (more than
    EVICT_AFTER_S: a slow or stalled client, never one whose request is being answered), then
    waits up to ADMIT_WAIT_S for a free place, and only then gets a 503. Every 503 is sent after
    the client's request is read and before a clean close, so the client reads it rather than a
    reset. Requests: each has REQUEST_DEADLINE_S from its first byte for its head and body
    (trickling bytes does not extend it). Searches: ``max_concurrent`` run at once; up to
    ``max_queue`` more wait up to ``queue_wait`` seconds for a slot, the rest get 503.
    """

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    request_queue_size = BACKLOG

    def __init__(self, address, service, *, max_body=MAX_BODY, max_concurrent=MAX_CONCURRENT, timeout=REQUEST_TIMEOUT_S,
                 queue_wait=QUEUE_WAIT_S, max_queue=MAX_QUEUE, max_connections=MAX_CONNECTIONS, deadline=REQUEST_DEADLINE_S,
                 extra_hosts=(), access_log=False, log=None):
        import socket

        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, Handler)
        self.service = service
        self.max_body, self.request_timeout, self.queue_wait, self.deadline = max_body, timeout, queue_wait, deadline
        self.slots = threading.BoundedSemaphore(max_concurrent)
        self.queue = threading.BoundedSemaphore(max(max_queue, 1))
        self.max_queue = max_queue
        self.connections = threading.BoundedSemaphore(max_connections)
        self.waiting = threading.BoundedSemaphore(max_connections)  # connections waiting for admission
        self.reading: dict = {}  # socket -> monotonic time its handler began waiting for a request
        self.reading_lock = threading.Lock()
        self.max_concurrent = max_concurrent
        self.pool = ThreadPoolExecutor(max_workers=max_concurrent, thread_name_prefix="kb-search")
        self.host, self.port = address[0], self.server_address[1]
        self.hosts = allowed_hosts(self.host, self.port, extra_hosts)
        self.access_log = access_log
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))

    def process_request(self, request, client_address):
        """A handler thread per connection, up to max_connections (see the class docstring)."""
        if self.connections.acquire(blocking=False):
            return self._start(request, client_address)
        self._evict_slowest()
        if not self.waiting.acquire(blocking=False):  # a flood far past every limit: refuse outright
            self.shutdown_request(request)
            return
        threading.Thread(target=self._admit, args=(request, client_address), daemon=True).start()

    def _start(self, request, client_address):
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release()
            raise

    def _admit(self, request, client_address):
        try:
            if self.connections.acquire(timeout=ADMIT_WAIT_S):
                self.process_request_thread(request, client_address)  # served on this thread
                return
            _refuse_busy(request, "too many open connections; retry shortly")
        finally:
            self.waiting.release()

    def _evict_slowest(self):
        """Close the connection that has been sending its request the longest, if that is past
        EVICT_AFTER_S: a slowloris client must not hold a place a prompt client needs."""
        import socket
        import time

        now = time.monotonic()
        with self.reading_lock:
            if not self.reading:
                return
            sock, since = min(self.reading.items(), key=lambda kv: kv[1])
            if now - since < EVICT_AFTER_S:
                return
            del self.reading[sock]
        try:
            sock.shutdown(socket.SHUT_RDWR)  # its handler's read returns at once and the thread ends
        except OSError:
            pass

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.reading_lock:
                self.reading.pop(request, None)
            self.connections.release()

    @property
    def url(self) -> str:
        return f"http://{host_port(self.host, self.port)}"

    def server_close(self):
        super().server_close()
        pool = getattr(self, "pool", None)  # absent when binding failed inside __init__
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class _DeadlineReader(io.RawIOBase):
    """A connection's reads, under a deadline for the whole request rather than a timeout per
    read: waiting for a request may take IDLE_TIMEOUT_S, and from the request's first byte its
    head and body must all arrive within ``limit`` seconds, however the bytes trickle in."""

    def __init__(self, sock, idle: float, limit: float):
        self.sock, self.idle, self.limit = sock, idle, limit
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def next_request(self) -> None:
        self.deadline = None

    def readinto(self, b) -> int:
        if self.deadline is None:
            self.sock.settimeout(self.idle)
        else:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request did not arrive within its deadline")
            self.sock.settimeout(left)
        n = self.sock.recv_into(b)
        if self.deadline is None and n:
            self.deadline = time.monotonic() + self.limit
        return n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every response carries Content-Length
    server_version = f"kb/{KB_VERSION}"
    sys_version = ""
    timeout = IDLE_TIMEOUT_S
    disable_nagle_algorithm = True  # headers and body are two writes: without this, delayed ACK adds 40 ms
    server: KbHTTPServer

    # --- plumbing ------------------------------------------------------------------------------
    def setup(self):
        super().setup()
        self.rfile.close()  # http.server's own reader times out per read; this one per request
        self._reader = _DeadlineReader(self.connection, IDLE_TIMEOUT_S, self.server.deadline)
        self.rfile = io.BufferedReader(self._reader, 65536)

    def handle_one_request(self):
        self._reader.next_request()
        with self.server.reading_lock:  # waiting for (or reading) a request: may be evicted
            self.server.reading[self.connection] = time.monotonic()
        super().handle_one_request()

    def _busy(self):
        with self.server.reading_lock:
            self.server.reading.pop(self.connection, None)

    def log_message(self, fmt, *args):
        if self.server.access_log:
            self.server.log(f"kb serve: {self.address_string()} {fmt % args}")

    def send_error(self, code, message=None, explain=None):
        """http.server's own errors (bad request line, headers too large, unknown method) as JSON."""
        words = {400: "bad_request", 414: "uri_too_long", 431: "headers_too_large", 501: "not_implemented", 505: "bad_http_version"}
        self.close_connection = True
        self._json(code, {"error": {"code": words.get(code, "http_error"), "message": message or self.responses.get(code, ("",))[0]}})

    def _json(self, status: int, body: dict, headers=()):
        # a lone surrogate a client sent as \\ud800 and the answer echoes stays that escape
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        try:
            self.connection.settimeout(WRITE_TIMEOUT_S)
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            for k, v in headers:
                self.send_header(k, v)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:  # the client went away, or stopped reading (WRITE_TIMEOUT_S)
            self.close_connection = True

    def _error(self, status: int, code: str, message: str, field=None, headers=(), close=False):
        if close or self._unread_body():
            self.close_connection = True
        err = {"code": code, "message": message}
        if field is not None:
            err["field"] = field
        self._json(status, {"error": err}, headers)

    def _unread_body(self) -> bool:
        return not self._body_read and (self.headers.get("Content-Length", "0").strip() not in ("", "0") or "Transfer-Encoding" in self.headers)

    # --- every method lands here ---------------------------------------------------------------
    def do_GET(self):
        self._dispatch()

    def __getattr__(self, name):
        if name.startswith("do_"):  # any other method (PUT, DELETE, HEAD, OPTIONS, FOO...): 404 or 405
            return self.do_GET
        raise AttributeError(name)

    def version_string(self):
        return self.server_version

    def _dispatch(self):
        self._busy()
        self._body_read = False
        twice = next((h for h in SINGLE_HEADERS if len(self.headers.get_all(h) or ()) > 1), None)
        if twice:  # which one counts would be a guess another server or proxy may guess otherwise
            return self._error(400, "bad_request", f"several {twice} headers; a request has at most one", close=True)
        refused = self._refuse_foreign()
        if refused:
            return self._error(403, "forbidden", refused, close=True)
        url = urlsplit(self.path)
        methods = ROUTES.get(url.path)
        if methods is None:
            return self._error(404, "not_found", f"no endpoint {url.path!r}; endpoints: {', '.join(ROUTES)}")
        if self.command not in methods:
            return self._error(405, "method_not_allowed", f"{url.path} takes {' or '.join(methods)}, not {self.command}", headers=[("Allow", ", ".join(methods))])
        try:
            if url.path == "/health":
                return self._json(200, self.server.service.health())
            if url.path == "/info":
                return self._json(200, self.server.service.info())
            data = self._request_object(url)
            if data is None:
                return
            if url.path == "/search":
                req, run = parse_search(data), self.server.service.search
            else:
                req, run = parse_get(data), self.server.service.get
            self._run_bounded(run, req)
        except RequestError as e:
            self._error(HTTP_STATUS.get(e.code, 400), e.code, e.message, e.field)
        except Exception as e:  # noqa: BLE001 - one request fails, the server stays up
            import traceback

            self.server.log(f"kb serve: error: {self.command} {url.path}: {e.__class__.__name__}: {e}\n{traceback.format_exc()}")
            self._error(500, "internal", f"{e.__class__.__name__}: {e}")

    def _refuse_foreign(self) -> str | None:
        """Why this request does not come to this server by its own name (DNS rebinding), or None."""
        hosts = self.server.hosts
        host = self.headers.get("Host")
        if host is None:
            return "missing Host header"
        if host.strip().lower() not in hosts:
            return f"Host {host!r} is not this server ({self.server.url}); to serve other names, pass --allow-host"
        origin = self.headers.get("Origin")
        if origin is not None:
            o = origin.strip().lower()
            if not (o.startswith("http://") and o[len("http://"):] in hosts):
                return f"Origin {origin!r} is not this server; cross-origin requests are refused"
        return None

    def _request_object(self, url) -> dict | None:
        """The request's JSON object: the body of a POST, the query parameters of a GET."""
        if self.command == "GET":
            try:
                params = parse_qs(url.query, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
            except ValueError:
                raise RequestError("bad_request", f"more than {MAX_QUERY_FIELDS} query parameters") from None
            return from_query_string(params, SEARCH_FIELDS if url.path == "/search" else GET_FIELDS)
        if url.query:
            raise RequestError("bad_request", "a POST takes its parameters in the JSON body, not the query string")
        ctype = self.headers.get("Content-Type", "application/json").split(";")[0].strip().lower()
        if ctype != "application/json":
            self._error(415, "unsupported_media_type", f"the body must be JSON sent as Content-Type: application/json, got {ctype!r} (curl: --json)")
            return None
        te = self.headers.get("Transfer-Encoding")
        if te is not None:
            if te.strip().lower() != "chunked":
                self._error(501, "not_implemented", f"Transfer-Encoding {te!r} is not supported; send a Content-Length or chunked", close=True)
                return None
            body = self._read_chunked()
            return None if body is None else parse_json(body) if body.strip() else {}
        raw_len = self.headers.get("Content-Length", "0").strip() or "0"
        if not (raw_len.isascii() and raw_len.isdigit()):  # str.isdigit alone takes "5³8"
            self._error(400, "bad_request", f"bad Content-Length {raw_len[:40]!r}", close=True)
            return None
        n = int(raw_len) if len(raw_len) <= 18 else 10**18  # int() refuses over 4300 digits
        if n > self.server.max_body:
            self._drain(n)
            self._error(413, "payload_too_large", f"the body is {n} bytes; the most is {self.server.max_body}", close=True)
            return None
        try:
            body = self.rfile.read(n) if n else b""
        except OSError:  # the socket timed out (IDLE_TIMEOUT_S) or broke mid-body
            self._error(408, "request_timeout", "the body did not arrive in time", close=True)
            return None
        self._body_read = True
        if len(body) != n:
            self._error(400, "bad_request", "the body ended before Content-Length bytes", close=True)
            return None
        if not body.strip():
            return {}
        return parse_json(body)

    def _read_chunked(self) -> bytes | None:
        """A chunked body, at most max_body bytes; None after answering 400, 408 or 413."""
        limit, parts, total = self.server.max_body, [], 0
        try:
            while True:
                line = self.rfile.readline(1024)
                size_text = line.split(b";")[0].strip()
                if not _HEX.fullmatch(size_text):  # int(..., 16) would also take "-80" and "0x80"
                    self._error(400, "bad_request", "malformed chunked body", close=True)
                    return None
                size = int(size_text, 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):  # trailers
                        pass
                    break
                total += size
                if total > limit:
                    self._error(413, "payload_too_large", f"the body is over {limit} bytes, the most", close=True)
                    return None
                parts.append(self.rfile.read(size))
                self.rfile.readline(1024)  # the CRLF after each chunk
        except OSError:
            self._error(408, "request_timeout", "the body did not arrive in time", close=True)
            return None
        self._body_read = True
        return b"".join(parts)

    def _drain(self, n: int):
        """Read and drop up to DRAIN_MAX bytes so the client, still sending, can read the 413."""
        if n > DRAIN_MAX:
            return
        left = n
        try:
            while left > 0:
                got = self.rfile.read(min(left, 65536))
                if not got:
                    break
                left -= len(got)
        except OSError:
            pass
        self._body_read = left == 0

    def _run_bounded(self, run, req):
        """Run ``run(req)`` on a search slot: 503 when none frees up in time, 504 past the timeout."""
        srv = self.server
        got = srv.slots.acquire(blocking=False)
        if not got and srv.queue_wait > 0 and srv.max_queue > 0 and srv.queue.acquire(blocking=False):
            try:  # a place in the bounded queue: wait a little for a slot
                got = srv.slots.acquire(timeout=srv.queue_wait)
            finally:
                srv.queue.release()
        if not got:
            return self._error(503, "busy", f"all {srv.max_concurrent} search slots are busy; retry shortly", headers=[("Retry-After", "1")])
        try:
            fut = srv.pool.submit(run, req)
        except RuntimeError:  # the pool is shut down: the server is stopping
            srv.slots.release()
            return self._error(503, "busy", "the server is shutting down", close=True)
        fut.add_done_callback(lambda _f: srv.slots.release())
        try:
            out = fut.result(timeout=srv.request_timeout)
        except FutureTimeout:
            return self._error(504, "timeout", f"the request took longer than {srv.request_timeout:g} s and was abandoned")
        self._json(200, out)


def _no_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _object_pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise RequestError("bad_json", f"field {k!r} appears twice in the JSON object", k)
        d[k] = v
    return d


_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


def _check_unicode(obj) -> None:
    """Strings must be valid Unicode (I-JSON, RFC 7493): a lone surrogate escape such as \\ud800
    decodes to a string that UTF-8 cannot encode, and paths and ids are encoded to be looked up."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise RequestError("bad_json", "a string holds a lone surrogate escape (such as \\ud800); strings must be valid Unicode") from None


def parse_json(body: bytes):
    """Strict JSON: UTF-8, no NaN/Infinity, no duplicate keys, bounded nesting (RecursionError),
    no lone surrogate escapes."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError("bad_json", f"the body is not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        obj = json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_no_constant)
        _check_unicode(obj)
        return obj
    except json.JSONDecodeError as e:
        raise RequestError("bad_json", f"the body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:
        raise RequestError("bad_json", f"the body is not valid JSON: {e}") from None
    except RecursionError:
        raise RequestError("bad_json", "the body nests too deeply") from None


def make_server(service, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, **kw) -> KbHTTPServer:
    """Bind (port 0: any free port) and return the server; ``serve_forever`` starts answering."""
    return KbHTTPServer((host, port), service, **kw)


def serve(server: KbHTTPServer):
    """Answer requests until SIGINT/SIGTERM (or ``server.shutdown()`` from another thread). A
    signal is raised again once the server has closed (KeyboardInterrupt, Terminated), so the CLI
    exits 128 + N as README says (130 for Ctrl-C, 143 for SIGTERM)."""
    import signal

    from kb.common.usage import Terminated

    stopped_by: list[int] = []

    def stop(signum, frame):
        stopped_by.append(signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    if stopped_by:
        raise Terminated(stopped_by[0])
