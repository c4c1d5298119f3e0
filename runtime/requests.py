"""Requests from the servers (``kb serve``, ``kb mcp``): one parser, one validator, one service.

Both servers hand a decoded JSON object to ``parse_search`` or ``parse_get`` and get back a typed
request or a ``RequestError`` naming the field at fault; ``Service`` then answers it with the
same Searcher and the same JSON as ``kb search --json`` (runtime/output.py). The field table
``SEARCH_FIELDS`` is the single description of the inputs: the parser, the HTTP query-string
decoder and the MCP tool schema are all derived from it.

Thread safety (a Service is shared by every request thread):

- The Index's lazy views (numpy tables, blob tables, the usearch view) are created once by
  ``Service.warm`` before the first request, so no two threads race to create them; after that
  they are read-only. Concurrent usearch ``search``/``get`` on one view were checked to give
  the serial results (8 threads).
- CTranslate2 ``Encoder.forward_batch`` is thread-safe: calls are queued to the model's worker
  pool (``inter_threads``, 1 by default) and run one at a time, so no lock is needed around
  inference; the embedder and reranker are loaded once, in ``warm``.
- A zstandard ``ZstdDecompressor`` must not be used by two threads at once (python-zstandard's
  documented rule); ``Index._block`` holds a lock around its shared decompressor and its
  bounded cache of decoded blocks.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from dataclasses import dataclass, field, replace

from .search import BLENDS, MODES, Query, SearchError

MAX_QUERY_CHARS = 8192  # a query or rewrite longer than this is refused (the models truncate far earlier)
MAX_TOP_K = 200  # results per request; also bounds the legs' depth (search.LEG_DEPTH is 50)
MAX_RERANK_TOP = 200  # candidates the cross-encoder rescores; its cost is linear in this
MAX_CONTEXT = 10  # neighbouring chunks on each side that ``get`` returns
MAX_DOC_CHUNKS = 1000  # chunks of one document that ``get`` returns
DEFAULT_DOC_CHUNKS = 200
STALE_TTL_S = 30.0  # how long a staleness check (one stat per corpus file) is reused


class RequestError(Exception):
    """A request the server refuses. ``code`` is a stable machine-readable word; ``field`` names
    the input at fault when there is one. The HTTP server maps codes to statuses (HTTP_STATUS)."""

    def __init__(self, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.code, self.message, self.field = code, message, field

    def to_dict(self) -> dict:
        d = {"code": self.code, "message": self.message}
        if self.field is not None:
            d["field"] = self.field
        return d


HTTP_STATUS = {
    "bad_json": 400,
    "bad_request": 400,
    "unknown_field": 400,
    "missing_field": 400,
    "bad_type": 400,
    "bad_value": 400,
    "not_found": 404,
}


# --- the field table -------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    """One input: its JSON type (str, int, float, bool, strs = array of strings), bounds and doc."""

    name: str
    kind: str
    doc: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    max_items: int | None = None
    max_chars: int | None = None
    aliases: tuple[str, ...] = ()
    default: object = None

    def schema(self) -> dict:
        s: dict = {"description": self.doc}
        if self.kind == "strs":
            s.update(type="array", items={"type": "string"})
            if self.max_items is not None:
                s["maxItems"] = self.max_items
        else:
            s["type"] = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}[self.kind]
        if self.choices:
            s["enum"] = list(self.choices)
        if self.minimum is not None:
            s["minimum"] = self.minimum
        if self.maximum is not None:
            s["maximum"] = self.maximum
        if self.default is not None:
            s["default"] = self.default
        return s


SEARCH_FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("query", "str", "The question or topic in natural language, as a person would ask it. Drives the BM25 (exact words) and dense (meaning) legs and the reranker.", max_chars=MAX_QUERY_CHARS),
        Field(
            "rewrites",
            "strs",
            "Optional rewritten natural-language forms of the same need (a paraphrase, the wording the documents probably use, acronyms spelled out). Each adds BM25 and dense sub-legs weighted below the original query.",
            max_items=8,
            max_chars=MAX_QUERY_CHARS,
            aliases=("rewrite",),
        ),
        Field(
            "entities",
            "strs",
            "Optional entities or themes (systems, products, topics) matched against the chunks' tags: chunks carrying more of them rank higher (the tag leg). A soft signal, unlike `tag`.",
            max_items=32,
            max_chars=256,
            aliases=("entity",),
        ),
        Field("status", "strs", "Only chunks with one of these statuses. Default: every status except the artifact's excluded ones (typically historical and superseded).", max_items=32, max_chars=256, aliases=("statuses",)),
        Field("all_statuses", "bool", "Include every status, the excluded ones (historical, superseded) too.", default=False),
        Field("tag", "strs", "Only chunks carrying every one of these tags (a hard filter).", max_items=32, max_chars=256, aliases=("tags",)),
        Field("path", "str", "Only documents whose path starts with this prefix, e.g. 'docs/ops/'.", max_chars=4096),
        Field("top_k", "int", "Number of results. Default: the artifact's [search] default_limit, else 10.", minimum=1, maximum=MAX_TOP_K),
        Field("mode", "str", "Which legs run: hybrid (BM25 + dense, fused), bm25 (exact words only) or vector (meaning only).", choices=MODES, default="hybrid"),
        Field("rerank", "bool", "Rescore the top candidates with the artifact's cross-encoder (hybrid mode only; no effect when the artifact has no reranker). Default: the artifact's [search] rerank setting (off unless kb.toml turned it on).", default=None),
        Field("rerank_top", "int", "How many fused candidates the reranker rescores (default 40).", minimum=0, maximum=MAX_RERANK_TOP),
        Field("budget_ms", "float", "Shrink the rerank depth to fit this many milliseconds (the response's rerank.skipped says how many were not rescored).", minimum=0.0, maximum=600000.0),
        Field("explain", "bool", "Per result: each leg's rank and raw score, the RRF parts and bonus, the rerank logit and blend weights; plus timings_ms.", default=False),
        Field("full", "bool", "Return each chunk's full text instead of a snippet.", default=False),
        Field("group", "str", "chunk: one result per chunk; doc: the best chunk per document (also_matched counts the others).", choices=("chunk", "doc"), default="chunk"),
        Field("semantic_weight", "float", "Dense share of the fusion, 0..1 (default 0.7).", minimum=0.0, maximum=1.0),
        Field("rrf_k", "float", "RRF rank offset k (default 60).", minimum=0.0, maximum=10000.0),
        Field("blend", "str", "Rerank blend rule (default position).", choices=BLENDS),
        Field("rerank_weight", "float", "Sigmoid blend: weight of the reranker, 0..1 (default 1.0).", minimum=0.0, maximum=1.0),
    )
}

# What the MCP `search` tool offers: the inputs an agent needs, without the ranking knobs.
MCP_SEARCH_FIELDS = ("query", "rewrites", "entities", "status", "all_statuses", "tag", "path", "top_k", "mode", "rerank", "full", "group")
OPTION_FIELDS = ("semantic_weight", "rrf_k", "blend", "rerank_weight")

GET_FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("chunk_id", "int", "A chunk's id (a search result's chunk_id): returns the chunk with its neighbouring chunks in the same document.", minimum=0),
        Field("doc_id", "str", "A document's id (a search result's doc_id): returns the document's chunks in order.", max_chars=4096),
        Field("path", "str", "A document's exact path (a search result's path): returns the document's chunks in order.", max_chars=4096),
        Field("context", "int", "With chunk_id: how many neighbouring chunks to return on each side (previous and next).", minimum=0, maximum=MAX_CONTEXT, default=1),
        Field("max_chunks", "int", f"With doc_id or path: the most chunks to return (default {DEFAULT_DOC_CHUNKS}).", minimum=1, maximum=MAX_DOC_CHUNKS, default=DEFAULT_DOC_CHUNKS),
    )
}


def input_schema(fields: dict[str, Field], names=None) -> dict:
    """A JSON Schema for an object of these fields (unknown properties refused)."""
    names = list(fields) if names is None else list(names)
    return {"type": "object", "properties": {n: fields[n].schema() for n in names}, "additionalProperties": False}


# --- validation ------------------------------------------------------------------------------
def _type_name(v) -> str:
    if v is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(type(v), type(v).__name__)


def _check(f: Field, v):
    """The value of field ``f`` as Python, or a RequestError saying what is wrong with it."""
    want = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean (true or false)", "strs": "an array of strings"}[f.kind]
    ok = {
        "str": isinstance(v, str),
        "int": isinstance(v, int) and not isinstance(v, bool),
        "float": isinstance(v, (int, float)) and not isinstance(v, bool),
        "bool": isinstance(v, bool),
        "strs": isinstance(v, list) and all(isinstance(x, str) for x in v),
    }[f.kind]
    if not ok:
        if f.kind == "strs" and isinstance(v, list):
            bad = next(x for x in v if not isinstance(x, str))
            raise RequestError("bad_type", f"{f.name} must be {want}; it holds {_type_name(bad)} {_short(bad)}", f.name)
        raise RequestError("bad_type", f"{f.name} must be {want}, got {_type_name(v)} {_short(v)}", f.name)
    if f.kind == "float":
        v = float(v)
        if not math.isfinite(v):
            raise RequestError("bad_value", f"{f.name} must be a finite number", f.name)
    if f.kind == "strs" and f.max_items is not None and len(v) > f.max_items:
        raise RequestError("bad_value", f"{f.name} takes at most {f.max_items} items, got {len(v)}", f.name)
    for s in (v if f.kind == "strs" else [v] if f.kind == "str" else []):
        if f.max_chars is not None and len(s) > f.max_chars:
            raise RequestError("bad_value", f"{f.name} is {len(s)} characters long; the most is {f.max_chars}", f.name)
    if f.choices and v not in f.choices:
        raise RequestError("bad_value", f"{f.name} must be one of {', '.join(f.choices)}, got {_short(v)}", f.name)
    if f.minimum is not None and v < f.minimum or f.maximum is not None and v > f.maximum:
        raise RequestError("bad_value", f"{f.name} must be within {_num(f.minimum)}..{_num(f.maximum)}, got {_num(v)}", f.name)
    return tuple(v) if f.kind == "strs" else v


def _short(v, n: int = 40) -> str:
    import json

    try:
        s = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _fields_of(data, fields: dict[str, Field], allowed) -> dict:
    """Canonical name -> checked value for every field present; unknown names refused by name."""
    if not isinstance(data, dict):
        raise RequestError("bad_type", f"the request must be a JSON object, got {_type_name(data)}")
    allowed = set(fields if allowed is None else allowed)
    alias = {a: f.name for f in fields.values() if f.name in allowed for a in f.aliases}
    unknown = [k for k in data if k not in allowed and k not in alias]
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise RequestError("unknown_field", f"unknown field{'s' if len(unknown) > 1 else ''} {names}; known: {', '.join(sorted(allowed))}", unknown[0])
    out: dict = {}
    for k, v in data.items():
        name = alias.get(k, k)
        if name in out:
            raise RequestError("bad_request", f"{name} given twice (as {k!r} and as an alias)", name)
        out[name] = _check(fields[name], v)
    return out


@dataclass(frozen=True)
class SearchRequest:
    """A validated search: the Query, and SearchOptions overrides (empty: the artifact's)."""

    query: Query
    options: dict = field(default_factory=dict)


def parse_search(data, allowed=None) -> SearchRequest:
    """A JSON object -> SearchRequest. ``allowed``: the field names this server offers (default all).

    Raises RequestError (unknown_field, bad_type, bad_value, missing_field) naming the field.
    """
    v = _fields_of(data, SEARCH_FIELDS, allowed)
    text = v.get("query", "")
    if not text.strip() and not any(r.strip() for r in v.get("rewrites", ())) and not v.get("entities"):
        raise RequestError("missing_field", "give a query (or rewrites or entities)", "query")
    q = Query(
        text=text,
        rewrites=v.get("rewrites", ()),
        entities=v.get("entities", ()),
        top_k=v.get("top_k"),
        statuses=v.get("status", ()),
        all_statuses=v.get("all_statuses", False),
        tags=v.get("tag", ()),
        path=v.get("path") or None,
        mode=v.get("mode", "hybrid"),
        rerank=v.get("rerank"),
        rerank_top=v.get("rerank_top"),
        budget_ms=v.get("budget_ms"),
        explain=v.get("explain", False),
        group=v.get("group", "chunk"),
        full=v.get("full", False),
    )
    return SearchRequest(q, {k: v[k] for k in OPTION_FIELDS if k in v})


@dataclass(frozen=True)
class GetRequest:
    chunk_id: int | None = None
    doc_id: str | None = None
    path: str | None = None
    context: int = 1
    max_chunks: int = DEFAULT_DOC_CHUNKS


def parse_get(data) -> GetRequest:
    v = _fields_of(data, GET_FIELDS, None)
    given = [k for k in ("chunk_id", "doc_id", "path") if k in v]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise RequestError("missing_field" if not given else "bad_request", f"give exactly one of chunk_id, doc_id or path (got {what})", given[1] if len(given) > 1 else "chunk_id")
    return GetRequest(**v)


def from_query_string(params: dict[str, list[str]], fields: dict[str, Field]) -> dict:
    """URL query parameters (name -> every value given) -> the JSON object a POST would carry.

    Array fields take every value (``tag=a&tag=b``); other fields take exactly one. Booleans are
    true/false/1/0/yes/no/on/off, or empty for true (``?explain``).
    """
    alias = {a: f.name for f in fields.values() for a in f.aliases}
    out: dict = {}
    for key, values in params.items():
        f = fields.get(alias.get(key, key))
        if f is None:
            out[key] = values  # reported as unknown by the parser, which knows what is allowed
            continue
        if f.kind == "strs":
            out[key] = list(values)
            continue
        if len(values) != 1:
            raise RequestError("bad_request", f"{f.name} given {len(values)} times; it takes one value", f.name)
        s = values[0]
        try:
            if f.kind == "int":
                if not s.strip().lstrip("+-").isdigit():
                    raise ValueError
                out[key] = int(s)
            elif f.kind == "float":
                out[key] = float(s)
            elif f.kind == "bool":
                word = s.strip().lower()
                if word not in ("", "true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError
                out[key] = word in ("", "true", "1", "yes", "on")
            else:
                out[key] = s
        except ValueError:
            want = {"int": "an integer", "float": "a number", "bool": "true or false"}[f.kind]
            raise RequestError("bad_type", f"{f.name} must be {want}, got {_short(s)}", f.name) from None
    return out


# --- get: a chunk with its neighbours, or a whole document -----------------------------------
def _doc_range(ix, d: int) -> tuple[int, int]:
    return int(ix.first_chunk[d]), int(ix.first_chunk[d + 1])


def _doc_summary(ix, d: int) -> dict:
    a, b = _doc_range(ix, d)
    path = bytes(ix.doc_paths[d]).decode("utf-8")
    if a == b:
        return {"doc_id": None, "path": path, "title": None, "status": None, "tags": [], "n_chunks": 0, "first_chunk_id": a}
    r = ix.chunk_record(a)
    return {"doc_id": r["doc_id"], "path": path, "title": r["title"], "status": r["status"], "tags": r["tags"], "n_chunks": b - a, "first_chunk_id": a}


def get_chunk(ix, chunk_id: int, context: int = 1) -> dict:
    """The chunk (full text) and up to ``context`` chunks before and after it in its document."""
    if not 0 <= chunk_id < ix.n_chunks:
        raise RequestError("not_found", f"no chunk {chunk_id}; this artifact has chunk ids 0..{ix.n_chunks - 1}", "chunk_id")
    d = int(ix.chunks["doc"][chunk_id])
    a, b = _doc_range(ix, d)
    return {
        "chunk": ix.chunk_record(chunk_id),
        "previous": [ix.chunk_record(c) for c in range(max(a, chunk_id - context), chunk_id)],
        "next": [ix.chunk_record(c) for c in range(chunk_id + 1, min(b, chunk_id + 1 + context))],
        "document": _doc_summary(ix, d),
    }


def get_document(ix, d: int, max_chunks: int = DEFAULT_DOC_CHUNKS) -> dict:
    """Document ``d``'s chunks in order (at most ``max_chunks``; ``truncated`` says if more exist)."""
    a, b = _doc_range(ix, d)
    keep = ("chunk_id", "section", "lines", "text")
    return {
        "document": _doc_summary(ix, d),
        "chunks": [{k: r[k] for k in keep} for r in map(ix.chunk_record, range(a, min(b, a + max_chunks)))],
        "truncated": b - a > max_chunks,
    }


def doc_by_path(ix, path: str) -> int | None:
    """The document index of exactly ``path`` (paths are sorted), else None."""
    paths, want = ix.doc_paths, path.encode("utf-8")
    lo, hi = 0, len(paths)
    while lo < hi:
        mid = (lo + hi) // 2
        if bytes(paths[mid]) < want:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(paths) and bytes(paths[lo]) == want else None


# --- the service both servers share ----------------------------------------------------------
class Service:
    """One open Index and Searcher answering search/get/info requests from many threads."""

    def __init__(self, ix, searcher=None, *, stale_check: bool = True, stale_ttl: float = STALE_TTL_S):
        from .search import Searcher

        self.ix = ix
        self.searcher = searcher or Searcher(ix)
        self.artifact = {"id": ix.artifact.id, "path": str(ix.path)}
        self.stale_check, self.stale_ttl = stale_check, stale_ttl
        self._stale: tuple[float, dict | None] | None = None
        self._stale_lock = threading.Lock()
        self._doc_ids: dict[str, int] | None = None
        self._doc_ids_lock = threading.Lock()
        self._info: dict | None = None

    def warm(self) -> Service:
        """Create every lazy view and load the models now, once, before requests share them."""
        ix = self.ix
        for name in ("chunks", "lengths", "first_chunk", "doc_paths", "term_hashes", "term_strings", "postings", "tf_offsets", "tf", "_text_blocks", "_dctx"):
            getattr(ix, name, None)
        if ix.has_vectors:
            getattr(ix, "vectors")  # noqa: B009 - a cached property: creating it is the point
            getattr(self.searcher, "embedder")  # noqa: B009
        self.searcher.reranker()
        if ix.n_chunks:
            self.searcher.search(Query("warm up", top_k=1, all_statuses=True, rerank_top=1))  # first-call costs, not the first client's
        self.info()
        if self.stale_check:
            self.stale_notice()
        return self

    # --- search --------------------------------------------------------------------------------
    def search(self, req: SearchRequest) -> dict:
        from .output import response_dict

        searcher = self.searcher
        if req.options:
            try:
                opts = replace(searcher.options, **req.options)
                opts.validate()
            except SearchError as e:
                raise RequestError("bad_value", str(e)) from None
            searcher = copy.copy(searcher)  # shares the loaded models; only the options differ
            searcher.options = opts
        try:
            resp = searcher.search(req.query)
        except SearchError as e:
            raise RequestError("bad_value", str(e)) from None
        notice = self.stale_notice()
        if notice:
            resp.notices.append(notice)
        return response_dict(resp, self.artifact)

    def stale_notice(self) -> dict | None:
        """The stale-index notice, rechecked at most every ``stale_ttl`` seconds."""
        if not self.stale_check:
            return None
        with self._stale_lock:
            now = time.monotonic()
            if self._stale is None or now - self._stale[0] > self.stale_ttl:
                from .stale import stale_notice

                self._stale = (now, stale_notice(self.ix.manifest()))
            return self._stale[1]

    # --- get -----------------------------------------------------------------------------------
    def get(self, req: GetRequest) -> dict:
        ix = self.ix
        if req.chunk_id is not None:
            out = get_chunk(ix, req.chunk_id, req.context)
        else:
            d = doc_by_path(ix, req.path) if req.path is not None else self._doc_by_id(req.doc_id)
            if d is None:
                what, val = ("path", req.path) if req.path is not None else ("doc_id", req.doc_id)
                raise RequestError("not_found", f"no document with {what} {val!r}", what)
            out = get_document(ix, d, req.max_chunks)
        out["artifact"] = self.artifact
        return out

    def _doc_by_id(self, doc_id: str) -> int | None:
        d = doc_by_path(self.ix, doc_id)  # a file's doc_id is its path: try that first
        if d is not None and _doc_summary(self.ix, d)["doc_id"] == doc_id:
            return d
        with self._doc_ids_lock:  # JSON Lines ids: one pass over the documents, kept
            if self._doc_ids is None:
                self._doc_ids = {}
                for d in range(self.ix.n_docs):
                    a, b = _doc_range(self.ix, d)
                    if a < b:
                        self._doc_ids.setdefault(self.ix.chunk_record(a)["doc_id"], d)
            return self._doc_ids.get(doc_id)

    # --- info and health -----------------------------------------------------------------------
    def info(self) -> dict:
        if self._info is None:
            from .info import describe

            self._info = describe(self.ix)
        return self._info

    def health(self) -> dict:
        return {"status": "ok", "artifact": self.artifact, "chunks": self.ix.n_chunks, "documents": self.ix.n_docs}
