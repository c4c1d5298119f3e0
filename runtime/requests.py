"""Requests to the servers (``kb serve``, ``kb mcp``): one field table, one parser, one validator.

Both servers hand a decoded JSON object to ``parse_search`` or ``parse_get`` and get back a typed
request or a ``RequestError`` naming the field at fault; runtime/service.py answers it. The field
tables are the single description of the inputs: the parser, the HTTP query-string decoder and
the MCP tool schema are all derived from them, and the search options' fields from
kb.common.options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kb.common.options import DEFAULT_DOC_CHUNKS, DEFAULT_GET_BYTES, GROUPS, MAX_CONTEXT, MAX_DOC_CHUNKS, MAX_GET_BYTES, MAX_GET_TARGETS, MAX_GLOB_MATCHES, MAX_TOP_K, MODES
from kb.common.options import SETTINGS as OPTION_SETTINGS

from .search import Query

MAX_QUERY_CHARS = 8192  # a query or rewrite longer than this is refused (the models truncate far earlier)


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
    "too_large": 400,  # a single get record over max_bytes (a request for too much, not a large body)
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


def _knob_field(s) -> Field:
    """The request field of a search option (kb.common.options): same name, type, bounds, doc."""
    kind = {int: "int", float: "float", bool: "bool", str: "str", tuple: "strs"}[s.kind]
    doc = f"{s.spec.doc} Default: the artifact's [search] {s.name}, else {s.default_text()}."
    return Field(s.name, kind, doc, choices=s.spec.choices, minimum=s.spec.minimum, maximum=s.spec.maximum)


# The search options a request may override: every knob but default_limit (top_k says how many).
OPTION_FIELDS = tuple(name for name in OPTION_SETTINGS if name != "default_limit")

SEARCH_FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("query", "str", "The question or topic in natural language, as a person would ask it. Drives the BM25 (exact words) and dense (meaning) legs and the reranker. May hold \"exact phrases\" (required), -word or -\"phrase\" (excluded), title:word, section:word and path:prefix (scopes).", max_chars=MAX_QUERY_CHARS, aliases=("q",)),
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
        Field("top_k", "int", f"Number of results. Default: the artifact's [search] default_limit, else {OPTION_SETTINGS['default_limit'].default}.", minimum=1, maximum=MAX_TOP_K, aliases=("n",)),
        Field("mode", "str", "Which legs run: hybrid (BM25 + dense, fused), bm25 (exact words only) or vector (meaning only).", choices=MODES, default="hybrid"),
        Field("budget_ms", "float", "Shrink the rerank depth to fit this many milliseconds (the response's rerank.skipped says how many were not rescored).", minimum=0.0, maximum=600000.0),
        Field("explain", "bool", "Per result: each leg's rank and raw score, the RRF parts and bonus, the rerank logit and blend weights; plus timings_ms.", default=False),
        Field("full", "bool", "Return each chunk's full text instead of a snippet.", default=False),
        Field("literal", "bool", "Take query as plain words: quotes, a leading - and field: are not syntax.", default=False),
        Field("group", "str", "chunk: one result per chunk; doc: the best chunk per document (also_matched counts the others).", choices=GROUPS, default="chunk"),
        *(_knob_field(OPTION_SETTINGS[name]) for name in OPTION_FIELDS),
    )
}

# What the MCP `search` tool offers: the inputs an agent needs, without the ranking knobs.
MCP_SEARCH_FIELDS = ("query", "rewrites", "entities", "status", "all_statuses", "tag", "path", "top_k", "mode", "rerank", "full", "group")

GET_FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("chunk_id", "int", "A chunk's id (a search result's chunk_id): returns the chunk with its neighbouring chunks in the same document.", minimum=0),
        Field("doc_id", "str", "A document's id (a search result's doc_id): returns the document's chunks in order.", max_chars=4096),
        Field("path", "str", "A document's exact path (a search result's path): returns the document's chunks in order.", max_chars=4096),
        Field("context", "int", "With chunk_id: how many neighbouring chunks to return on each side (previous and next).", minimum=0, maximum=MAX_CONTEXT, default=1),
        Field("max_chunks", "int", f"With doc_id or path: the most chunks to return (default {DEFAULT_DOC_CHUNKS}).", minimum=1, maximum=MAX_DOC_CHUNKS, default=DEFAULT_DOC_CHUNKS),
        Field(
            "targets",
            "strs",
            "What to read, each as `kb get` takes it: a chunk id ('12', with `context` neighbours), a document's path or doc_id (its chunks), "
            "or PATH:FROM:COUNT (COUNT lines of the document from line FROM, numbered as in the source file; PATH:FROM reads to its end).",
            max_items=MAX_GET_TARGETS,
            max_chars=4096,
        ),
        Field("glob", "str", f"Also every document whose path matches this shell pattern (as kb-build --include: * matches any characters, / too; ?, [abc]), in path order; at most {MAX_GLOB_MATCHES} documents.", max_chars=1024),
        Field(
            "max_bytes",
            "int",
            f"The most bytes of text (UTF-8) to return, default {DEFAULT_GET_BYTES}. Items are taken in order while they fit; each one that does not is listed in `omitted` with its size. "
            "A single chunk_id, doc_id or path over it is an error.",
            minimum=1,
            maximum=MAX_GET_BYTES,
            default=DEFAULT_GET_BYTES,
        ),
    )
}
SINGLE_GET_FIELDS = ("chunk_id", "doc_id", "path", "context", "max_chunks")  # the MCP `get` tool
MULTI_GET_FIELDS = ("targets", "glob", "max_bytes", "context", "max_chunks")  # the MCP `multi_get` tool


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
    """A validated search: the Query, and the search options it overrides (empty: the artifact's)."""

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
        budget_ms=v.get("budget_ms"),
        explain=v.get("explain", False),
        group=v.get("group", "chunk"),
        full=v.get("full", False),
        literal=v.get("literal", False),
    )
    return SearchRequest(q, {k: v[k] for k in OPTION_FIELDS if k in v})


@dataclass(frozen=True)
class GetRequest:
    """One read: a chunk_id, doc_id or path (one record back), or targets and a glob (``many``:
    items and what was omitted back)."""

    chunk_id: int | None = None
    doc_id: str | None = None
    path: str | None = None
    context: int = 1
    max_chunks: int = DEFAULT_DOC_CHUNKS
    targets: tuple[str, ...] = ()
    glob: str | None = None
    max_bytes: int = DEFAULT_GET_BYTES

    @property
    def many(self) -> bool:
        return bool(self.targets) or self.glob is not None


def parse_get(data, allowed=None) -> GetRequest:
    """A JSON object -> GetRequest: exactly one of chunk_id, doc_id or path, or targets and/or a
    glob. ``allowed``: the field names this server offers (default all)."""
    v = _fields_of(data, GET_FIELDS, allowed)
    offered = set(GET_FIELDS if allowed is None else allowed)
    single = [k for k in ("chunk_id", "doc_id", "path") if k in v]
    many = [k for k in ("targets", "glob") if k in v]
    if single and many:
        raise RequestError("bad_request", f"give chunk_id, doc_id or path, or targets or a glob, not both (got {', '.join(single + many)})", many[0])
    if not many and len(single) != 1:
        what = "none" if not single else " and ".join(single)
        if not single and "chunk_id" not in offered:
            raise RequestError("missing_field", "give targets or glob (got neither)", "targets")
        also = ", or targets or a glob" if "targets" in offered else ""
        raise RequestError("missing_field" if not single else "bad_request", f"give exactly one of chunk_id, doc_id or path{also} (got {what})", single[1] if len(single) > 1 else "chunk_id")
    if "targets" in v and not v["targets"] and "glob" not in v:
        raise RequestError("missing_field", "targets is empty; give at least one target (or a glob)", "targets")
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
