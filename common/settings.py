"""Typed settings: each one declared once, as a field that carries its doc and bounds.

    @settings_tuple
    class BM25Params(NamedTuple):
        k1: float = setting(1.2, "Term-frequency saturation.", minimum=0.0, maximum=10.0)

(a NamedTuple for a record that a one-shot ``kb`` creates at import, a frozen dataclass elsewhere).

Everything else is derived from that field: kb.toml validation (``from_table``), the click
options, the HTTP/MCP request fields and their JSON Schema, and the README's tables (which
tests/builder/test_config.py makes from it and compares). A value is checked by one validator
wherever it comes from (``check``).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import NamedTuple

from .errors import ConfigError

_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", tuple: "an array of strings"}
_JSON_TYPES = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


def setting(default, doc: str, **spec):
    """A field declaring one setting (see the module doc): of a dataclass, or of a NamedTuple that
    ``settings_tuple`` finishes; ``spec``: Setting's fields after ``doc``."""
    return dataclasses.field(default=default, metadata={"kb": {"doc": doc, **spec}})


def settings_tuple(cls):
    """A NamedTuple class whose defaults are ``setting``s, finished: the settings' values become
    its defaults, and ``settings_of`` reads the declarations (kept in ``_declared``)."""
    declared = {k: f for k, f in cls._field_defaults.items() if isinstance(f, dataclasses.Field)}
    for name, f in declared.items():
        f.name = name
    cls._declared = tuple(declared.values())
    cls._field_defaults = {k: declared[k].default if k in declared else v for k, v in cls._field_defaults.items()}
    cls.__new__.__defaults__ = tuple(cls._field_defaults.values())
    return cls


# NamedTuples, not frozen dataclasses: start-up cost (bench/startup_records.py).
class Setting(NamedTuple):
    """One declared setting, read off its field."""

    name: str
    kind: type  # int, float, bool, str or tuple (of strings)
    nullable: bool
    default: object
    doc: str  # one line: what it does, its effect at the extremes
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple = ()
    flag: str = ""  # the kb flag's declarations (space-separated): "--" + name with dashes unless given, "" = none
    metavar: str | None = None  # what --help calls the flag's value
    key: str = ""  # the request field's name: the name unless given
    aliases: tuple[str, ...] = ()  # other names a request may give it by
    max_items: int | None = None  # a request's array holds at most this many strings
    max_chars: int | None = None  # ... each at most this long; or a request's string
    one_or_many: bool = False  # ``str | tuple[str, ...]``: a lone string is a one-item array

    def default_text(self) -> str:
        """The default as help texts say it: on, off, none, or the value."""
        d = self.default
        return "on" if d is True else "off" if d is False else "none" if d is None else _num(d) if isinstance(d, (int, float)) else str(d)

    def type_word(self) -> str:
        return "a string or an array of strings" if self.one_or_many else _TYPE_WORDS[self.kind]

    def range_text(self) -> str:
        """'0..1', '>= 0', 'position, sigmoid' or '' (for the docs)."""
        if self.choices:
            return ", ".join(self.choices)
        if self.minimum is not None and self.maximum is not None:
            return f"{_num(self.minimum)}..{_num(self.maximum)}"
        if self.minimum is not None:
            return f">= {_num(self.minimum)}"
        if self.maximum is not None:
            return f"<= {_num(self.maximum)}"
        return ""


def settings_of(cls) -> tuple[Setting, ...]:
    """The settings a dataclass or a ``settings_tuple`` declares, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in getattr(cls, "_declared", None) or dataclasses.fields(cls):
        spec = f.metadata.get("kb")
        if spec is None:
            continue
        hint = hints[f.name]
        one_or_many = set(typing.get_args(hint)) == {str, tuple[str, ...]}
        kind, nullable = (tuple, False) if one_or_many else _kind(hint)
        spec = {"flag": "--" + f.name.replace("_", "-"), "key": f.name, **spec, "choices": tuple(spec.get("choices", ()))}
        out.append(Setting(f.name, kind, nullable, f.default, one_or_many=one_or_many, **spec))
    return tuple(out)


def _kind(hint) -> tuple[type, bool]:
    args = typing.get_args(hint)
    if args and type(None) in args:  # X | None
        rest = [a for a in args if a is not type(None)]
        return _kind(rest[0])[0], True
    origin = typing.get_origin(hint)
    if origin is tuple:
        return tuple, False
    return hint, False


class Invalid(ValueError):
    """What is wrong with a value; ``code``: bad_type or bad_value (the servers' error codes)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def check(s: Setting, value, request: bool = False):
    """``value`` as the setting's Python type, or Invalid saying what is wrong with it. The one
    validator of kb.toml, the artifact's [search] table, and (``request``: a decoded JSON value,
    null refused, its JSON type named) the servers' request fields."""
    if value is None and s.nullable and not request:
        return None
    given, k = value, s.kind
    if s.one_or_many and isinstance(value, str):
        value = (value,)
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        bool: isinstance(value, bool),
        str: isinstance(value, str),
        tuple: isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value),
    }[k]
    if not ok and not request:
        raise Invalid("bad_type", f"must be {s.type_word()}, got {shown(value)}")
    if not ok:
        if k is tuple and isinstance(value, list):
            bad = next(x for x in value if not isinstance(x, str))
            raise Invalid("bad_type", f"must be an array of strings; it holds {json_type(bad)} {shown(bad)}")
        raise Invalid("bad_type", f"must be {'a boolean (true or false)' if k is bool else s.type_word()}, got {json_type(value)} {shown(value)}")
    if k is float:
        value = float(value) if not isinstance(value, int) or abs(value) < 2**1023 else math.inf  # float() raises on an int past its range
        if not math.isfinite(value):
            raise Invalid("bad_value", "must be a finite number" + ("" if request else f", got {shown(given)}"))
    if k is tuple:
        value = tuple(value)
        if s.one_or_many and not value:
            raise Invalid("bad_value", f"must not be empty, got {shown(given)}")
        if s.max_items is not None and len(value) > s.max_items:
            raise Invalid("bad_value", f"takes at most {s.max_items} items, got {len(value)}")
    for text in value if k is tuple else (value,) if k is str else ():
        if s.max_chars is not None and len(text) > s.max_chars:
            raise Invalid("bad_value", f"is {len(text)} characters long; the most is {s.max_chars}")
    if s.choices and value not in s.choices:
        raise Invalid("bad_value", f"must be one of {', '.join(s.choices)}, got {shown(given)}")
    if (s.minimum is not None and value < s.minimum) or (s.maximum is not None and value > s.maximum):
        bound = f"within {s.range_text()}" if s.minimum is not None and s.maximum is not None else f"at least {_num(s.minimum)}" if s.minimum is not None else f"at most {_num(s.maximum)}"
        raise Invalid("bad_value", f"must be {bound}, got {_num(value) if request else shown(given)}")
    return value


def from_table(cls, table, where: str, **fixed):
    """An instance of ``cls`` from a kb.toml table. ``where`` ("kb.toml: [search]") starts every
    error; a wrong type, an out-of-range value or an unknown key is a ConfigError naming the key."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    known = {s.name: s for s in settings_of(cls)}
    values = {}
    for key, value in table.items():
        s = known.get(key)
        if s is None:
            raise ConfigError(f"{where} {key}: unknown key; known: {', '.join(known)}")
        try:
            values[key] = check(s, value)
        except ValueError as e:
            raise ConfigError(f"{where} {key}: {e}") from None
    return cls(**values, **fixed)


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def json_type(v) -> str:
    return _JSON_TYPES.get(type(v), type(v).__name__)


def shown(v, n: int = 40) -> str:
    import json

    try:
        s = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= n else s[: n - 1] + "…"
