"""Typed settings: each one declared once, as a field that carries its doc and bounds.

    @settings_tuple
    class BM25Params(NamedTuple):
        k1: float = setting(1.2, "Term-frequency saturation.", minimum=0.0, maximum=10.0)

(a NamedTuple for a record that a one-shot ``kb`` creates at import, a frozen dataclass elsewhere).

Everything else is derived from that field: kb.toml validation (``from_table``), the click
options, the HTTP/MCP request fields and their JSON Schema, and the README's tables. A value is
checked the same way wherever it comes from (``check``).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import NamedTuple

from .errors import ConfigError

_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", tuple: "an array of strings"}


# NamedTuples, not frozen dataclasses: a one-shot kb creates these records at import, and a frozen
# dataclass costs ~0.7 ms to create, a NamedTuple ~0.15 (bench/startup_records.py).
class Spec(NamedTuple):
    """What a setting's field carries besides its default."""

    doc: str  # one line: what it does, its effect at the extremes
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple = ()
    flag: str | None = None  # the kb search flag: None = "--" + name with dashes, "" = none


def setting(default, doc: str, *, minimum=None, maximum=None, choices=(), flag=None):
    """A field declaring one setting (see the module doc): of a dataclass, or of a NamedTuple that
    ``settings_tuple`` finishes."""
    return dataclasses.field(default=default, metadata={"kb": Spec(doc, minimum, maximum, tuple(choices), flag)})


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


class Setting(NamedTuple):
    """One declared setting, read off its field."""

    name: str
    kind: type  # int, float, bool, str or tuple (of strings)
    nullable: bool
    default: object
    spec: Spec
    one_or_many: bool = False  # ``str | tuple[str, ...]``: a lone string is a one-item array

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-") if self.spec.flag is None else self.spec.flag

    def default_text(self) -> str:
        """The default as help texts say it: on, off, none, or the value."""
        d = self.default
        return "on" if d is True else "off" if d is False else "none" if d is None else _num(d) if isinstance(d, (int, float)) else str(d)

    def type_word(self) -> str:
        return "a string or an array of strings" if self.one_or_many else _TYPE_WORDS[self.kind]

    def range_text(self) -> str:
        """'0..1', '>= 0', 'position, sigmoid' or '' (for the docs)."""
        s = self.spec
        if s.choices:
            return ", ".join(s.choices)
        if s.minimum is not None and s.maximum is not None:
            return f"{_num(s.minimum)}..{_num(s.maximum)}"
        if s.minimum is not None:
            return f">= {_num(s.minimum)}"
        if s.maximum is not None:
            return f"<= {_num(s.maximum)}"
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
        out.append(Setting(f.name, kind, nullable, f.default, spec, one_or_many))
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


def check(s: Setting, value):
    """``value`` as the setting's Python type, or ValueError saying what is wrong with it."""
    if value is None and s.nullable:
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
    if not ok:
        raise ValueError(f"must be {s.type_word()}, got {_show(value)}")
    if k is float:
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {_show(value)}")
    if k is tuple:
        value = tuple(value)
        if s.one_or_many and not value:
            raise ValueError(f"must not be empty, got {_show(given)}")
    sp = s.spec
    if sp.choices and value not in sp.choices:
        raise ValueError(f"must be one of {', '.join(sp.choices)}, got {_show(given)}")
    if (sp.minimum is not None and value < sp.minimum) or (sp.maximum is not None and value > sp.maximum):
        raise ValueError(f"must be within {s.range_text()}, got {_show(given)}")
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


def markdown_table(cls, flags: bool = False) -> str:
    """The settings of ``cls`` as a markdown table (README.md holds these; a test compares)."""
    head = ["key"] + (["flag"] if flags else []) + ["type", "range", "default", "what it does"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in settings_of(cls):
        cells = [f"`{s.name}`"] + ([f"`{s.flag}`" if s.flag else ""] if flags else [])
        default = "none" if s.default is None else _toml(s.default)
        cells += [s.type_word(), s.range_text(), f"`{default}`", s.spec.doc]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, tuple):
        return "[" + ", ".join(f'"{x}"' for x in v) + "]"
    return _num(v)


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _show(v, n: int = 40) -> str:
    import json

    try:
        s = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= n else s[: n - 1] + "…"
