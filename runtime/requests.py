"""Requests to the servers (``kb serve``, ``kb mcp``): the field tables and one parser.

Both servers hand a decoded JSON object to ``parse_search`` or ``parse_get`` and get back a typed
request or a ``RequestError`` naming the field at fault; runtime/service.py answers it. The
fields are the inputs declared once as settings (kb.common.settings) in kb.common.options: the
search's (Query and the ranking knobs) and the get's (GetRequest). The parser, the
HTTP query-string decoder, the MCP tool schema and kb's flags are all derived from them, and
every value is checked by kb.common.settings ``check``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kb.common.options import GET_INPUTS, QUERY_INPUTS, GetRequest, Query
from kb.common.options import SETTINGS as OPTION_SETTINGS
from kb.common.settings import Invalid, Setting, check, json_type, shown


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


# --- the field tables: the search's (Query and the knobs) and the get's (GetRequest) -----------
def _knob(s) -> Setting:
    """The request field of a search option: its doc says the default is the artifact's."""
    return s._replace(doc=f"{s.doc} Default: the artifact's [search] {s.name}, else {s.default_text()}.", default=None)


# The search options a request may override: every knob but default_limit (top_k says how many).
OPTION_FIELDS = tuple(name for name in OPTION_SETTINGS if name != "default_limit")
SEARCH_FIELDS: dict[str, Setting] = {s.key: s for s in QUERY_INPUTS} | {n: _knob(OPTION_SETTINGS[n]) for n in OPTION_FIELDS}


GET_FIELDS: dict[str, Setting] = {s.key: s for s in GET_INPUTS}
# The MCP `search` and `get` tools take every field HTTP /search and /get take (these tables);
# `multi_get` is `get` without the single-record fields.
MULTI_GET_FIELDS = tuple(k for k in GET_FIELDS if k not in ("chunk_id", "doc_id", "path"))


def _schema(s: Setting) -> dict:
    """The JSON Schema of one field."""
    out: dict = {"description": s.doc}
    if s.kind is tuple:
        out.update(type="array", items={"type": "string"}, **({} if s.max_items is None else {"maxItems": s.max_items}))
    else:
        out["type"] = {str: "string", int: "integer", float: "number", bool: "boolean"}[s.kind]
    for key, value in (("enum", list(s.choices)), ("minimum", s.minimum), ("maximum", s.maximum), ("default", s.default)):
        if value not in (None, [], (), ""):
            out[key] = value
    return out


def input_schema(fields: dict[str, Setting], names=None) -> dict:
    """A JSON Schema for an object of these fields (unknown properties refused)."""
    names = list(fields) if names is None else list(names)
    return {"type": "object", "properties": {n: _schema(fields[n]) for n in names}, "additionalProperties": False}


# --- validation: kb.common.settings check, the one validator --------------------------------------
def _fields_of(data, fields: dict[str, Setting], allowed) -> dict:
    """Canonical name -> checked value for every field present; unknown names refused by name."""
    if not isinstance(data, dict):
        raise RequestError("bad_type", f"the request must be a JSON object, got {json_type(data)}")
    allowed = set(fields if allowed is None else allowed)
    alias = {a: f.key for f in fields.values() if f.key in allowed for a in f.aliases}
    unknown = [k for k in data if k not in allowed and k not in alias]
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise RequestError("unknown_field", f"unknown field{'s' if len(unknown) > 1 else ''} {names}; known: {', '.join(sorted(allowed))}", unknown[0])
    out: dict = {}
    for k, v in data.items():
        name = alias.get(k, k)
        if name in out:
            raise RequestError("bad_request", f"{name} given twice (as {k!r} and as an alias)", name)
        try:
            out[name] = check(fields[name], v, request=True)
        except Invalid as e:
            raise RequestError(e.code, f"{name} {e}", name) from None
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
    q = Query(**{SEARCH_FIELDS[k].name: x for k, x in v.items() if k not in OPTION_FIELDS})
    q = q._replace(path=q.path or None)
    return SearchRequest(q, {k: v[k] for k in OPTION_FIELDS if k in v})


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


def from_query_string(params: dict[str, list[str]], fields: dict[str, Setting]) -> dict:
    """URL query parameters (name -> every value given) -> the JSON object a POST would carry.

    Array fields take every value (``tag=a&tag=b``); other fields take exactly one. Booleans are
    true/false/1/0/yes/no/on/off, or empty for true (``?explain``).
    """
    alias = {a: f.key for f in fields.values() for a in f.aliases}
    out: dict = {}
    for key, values in params.items():
        f = fields.get(alias.get(key, key))
        if f is None:
            out[key] = values  # reported as unknown by the parser, which knows what is allowed
            continue
        if f.kind is tuple:
            out[key] = list(values)
            continue
        if len(values) != 1:
            raise RequestError("bad_request", f"{f.key} given {len(values)} times; it takes one value", f.key)
        s = values[0]
        try:
            if f.kind is int:
                if not s.strip().lstrip("+-").isdigit():
                    raise ValueError
                out[key] = int(s)
            elif f.kind is float:
                out[key] = float(s)
            elif f.kind is bool:
                word = s.strip().lower()
                if word not in ("", "true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError
                out[key] = word in ("", "true", "1", "yes", "on")
            else:
                out[key] = s
        except ValueError:
            raise RequestError("bad_type", f"{f.key} must be {f.type_word()}, got {shown(s)}", f.key) from None
    return out
