"""Read stage: corpus folders, files and JSON Lines -> Documents, plus what was skipped and why.

Nothing is dropped silently: every file that is not indexed comes back as a ``Skipped`` with its
reason (binary, undecodable, malformed, too large, unsupported type, hidden), and the CLI reports
them all; ``--strict`` turns any skip into a failed build.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kb.common.errors import UsageError

from .filetypes import CONFIG_NAME
from .filetypes import JSON_EXTENSIONS as JSON
from .filetypes import MARKDOWN_EXTENSIONS as MARKDOWN
from .filetypes import SOURCE_EXTENSIONS as SUPPORTED
from .filetypes import TEXT_EXTENSIONS as TEXT
from .filetypes import TOML_EXTENSIONS as TOML
from .filetypes import YAML_EXTENSIONS as YAML
DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
_BINARY_SNIFF = 8192
_MINIFIED_LINE = 400  # a JSON file with a line this long is treated as minified and pretty-printed


@dataclass(frozen=True)
class Document:
    doc_id: str  # the file's relative path, or the JSON Lines record's own id
    path: str  # relative, "/"-separated; JSON Lines: the record's path or FILE#id
    kind: str  # markdown | text | json | yaml | toml | jsonl
    title: str
    text: str  # body to chunk (front matter removed; minified JSON pretty-printed)
    first_line: int = 1  # line number of text's first line in the source file
    tags: tuple[str, ...] = ()
    status: str | None = None
    description: str = ""


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True)
class SourceFile:
    path: str
    size: int
    mtime_ns: int
    sha256: str


@dataclass
class Corpus:
    root: str  # absolute folder paths are relative to
    documents: list[Document] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    sources: list[SourceFile] = field(default_factory=list)
    excluded: int = 0  # files left out by --include/--exclude, on purpose


class InputError(UsageError):
    """A corpus argument or JSON Lines file that cannot be read at all (exit 2)."""


def read_corpus(
    roots: list[Path],
    jsonl: list[Path] = (),
    include: list[str] = (),
    exclude: list[str] = (),
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    skip_paths: set[Path] = frozenset(),
) -> Corpus:
    roots = [Path(r) for r in roots]
    for r in list(roots) + [Path(j) for j in jsonl]:
        if not r.exists():
            raise InputError(f"{r}: no such file or folder")
    corpus = Corpus(root=str(corpus_root(roots, jsonl)))
    base = Path(corpus.root)
    skip = {p.resolve() for p in skip_paths}
    for path in _walk(roots):
        rel = path.resolve().relative_to(base.resolve()).as_posix() if _is_under(path, base) else path.as_posix()
        if path.resolve() in skip or path.name == CONFIG_NAME:
            continue  # the artifact being written, and the corpus's own config (not content)
        if include and not any(fnmatch.fnmatch(rel, g) for g in include):
            corpus.excluded += 1
            continue
        if any(fnmatch.fnmatch(rel, g) for g in exclude):
            corpus.excluded += 1
            continue
        _read_one(corpus, path, rel, max_file_bytes)
    for j in jsonl:
        _read_jsonl(corpus, Path(j), max_file_bytes)
    return corpus


def corpus_root(roots: list[Path], jsonl: list[Path] = ()) -> Path:
    """The folder that relative paths start from: the one folder given, else the common parent."""
    if len(roots) == 1 and roots[0].is_dir() and not jsonl:
        return roots[0].resolve()
    parents = [p.resolve().parent for p in list(roots) + list(jsonl)]
    return Path(os.path.commonpath(parents)) if parents else Path.cwd()


def _is_under(path: Path, base: Path) -> bool:
    try:
        path.resolve().relative_to(base.resolve())
        return True
    except ValueError:
        return False


def _walk(roots: list[Path]):
    """Files under the roots, sorted, hidden entries included (the reader reports them)."""
    out = []
    for r in roots:
        if r.is_file():
            out.append(r)
            continue
        for dirpath, dirnames, filenames in os.walk(r):
            dirnames.sort()
            out.extend(Path(dirpath) / f for f in filenames)
    return sorted(set(out), key=lambda p: p.as_posix())


def _read_one(corpus: Corpus, path: Path, rel: str, max_file_bytes: int) -> None:
    parts = rel.split("/")
    if any(p.startswith(".") for p in parts):
        corpus.skipped.append(Skipped(rel, "hidden"))
        return
    ext = path.suffix.lower()
    if ext not in SUPPORTED:
        corpus.skipped.append(Skipped(rel, f"unsupported type {ext or '(no extension)'}"))
        return
    try:
        st = path.stat()
        if st.st_size > max_file_bytes:
            corpus.skipped.append(Skipped(rel, f"too large ({st.st_size} bytes > {max_file_bytes})"))
            return
        data = path.read_bytes()
    except OSError as e:
        corpus.skipped.append(Skipped(rel, f"unreadable: {e.strerror}"))
        return
    corpus.sources.append(SourceFile(rel, len(data), st.st_mtime_ns, hashlib.sha256(data).hexdigest()))
    try:
        doc = parse_file(rel, ext, data)
    except ParseError as e:
        corpus.skipped.append(Skipped(rel, str(e)))
        return
    corpus.documents.append(doc)


class ParseError(Exception):
    pass


def decode(data: bytes) -> str:
    if b"\0" in data[:_BINARY_SNIFF]:
        raise ParseError("binary")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ParseError(f"undecodable: not UTF-8 (byte {e.start})") from None


def parse_file(rel: str, ext: str, data: bytes) -> Document:
    text = decode(data).replace("\r\n", "\n").replace("\r", "\n")
    stem = rel.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    if ext in MARKDOWN:
        return _parse_markdown(rel, text, stem)
    if ext in TEXT:
        return Document(rel, rel, "text", stem, text)
    if ext in JSON:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ParseError(f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        if any(len(line) > _MINIFIED_LINE for line in text.split("\n")):
            text = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
        return Document(rel, rel, "json", stem, text)
    if ext in YAML:
        _yaml_load_all(text, "malformed YAML")
        return Document(rel, rel, "yaml", stem, text)
    if ext in TOML:
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ParseError(f"malformed TOML: {e}") from None
        return Document(rel, rel, "toml", stem, text)
    raise ParseError(f"unsupported type {ext}")


def _yaml_load_all(text: str, what: str):
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "parse error"
        raise ParseError(f"{what}: {problem}{where}") from None


_FM_YAML = re.compile(r"\A---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_FM_TOML = re.compile(r"\A\+\+\+[ \t]*\n(.*?\n)?\+\+\+[ \t]*(?:\n|\Z)", re.S)
_H1 = re.compile(r"^#[ \t]+(.+?)[ \t#]*$", re.M)


def split_front_matter(text: str) -> tuple[dict, str, int]:
    """(front matter, body, line number of the body's first line)."""
    for rx, kind in ((_FM_YAML, "YAML"), (_FM_TOML, "TOML")):
        m = rx.match(text)
        if not m:
            continue
        raw = m.group(1) or ""
        if kind == "YAML":
            docs = _yaml_load_all(raw, "malformed YAML front matter")
            meta = docs[0] if docs else {}
        else:
            try:
                meta = tomllib.loads(raw)
            except tomllib.TOMLDecodeError as e:
                raise ParseError(f"malformed TOML front matter: {e}") from None
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise ParseError(f"malformed {kind} front matter: not a mapping")
        return meta, text[m.end() :], text[: m.end()].count("\n") + 1
    return {}, text, 1


def _parse_markdown(rel: str, text: str, stem: str) -> Document:
    meta, body, first = split_front_matter(text)
    title = _str(meta.get("title"))
    if not title:
        m = _H1.search(body)
        title = m.group(1).strip() if m else stem
    status = _str(meta.get("status")) or None
    return Document(
        rel, rel, "markdown", title, body, first, tags_of(meta.get("tags")), status, _str(meta.get("description"))
    )


def _str(v) -> str:
    return v.strip() if isinstance(v, str) else ("" if v is None else str(v))


def tags_of(v) -> tuple[str, ...]:
    """Tags from front matter or JSON Lines: a list, or a comma/space separated string."""
    if v is None:
        return ()
    if isinstance(v, str):
        items = re.split(r"[,\s]+", v)
    elif isinstance(v, (list, tuple)):
        items = [str(x) for x in v]
    else:
        items = [str(v)]
    return tuple(sorted({t.strip().casefold() for t in items if t and t.strip()}))


def _read_jsonl(corpus: Corpus, path: Path, max_file_bytes: int) -> None:
    name = path.name
    try:
        st = path.stat()
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read JSON Lines file: {e.strerror}") from None
    corpus.sources.append(SourceFile(name, len(data), st.st_mtime_ns, hashlib.sha256(data).hexdigest()))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: JSON Lines file is not UTF-8 (byte {e.start})") from None
    seen: set[str] = set()
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        if len(line) > max_file_bytes:
            corpus.skipped.append(Skipped(where, f"too large ({len(line)} bytes > {max_file_bytes})"))
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            corpus.skipped.append(Skipped(where, f"malformed JSON: {e.msg} at column {e.colno}"))
            continue
        if not isinstance(rec, dict):
            corpus.skipped.append(Skipped(where, "malformed record: not a JSON object"))
            continue
        doc_id = rec.get("id", rec.get("_id"))
        body = rec.get("text")
        if doc_id is None or not isinstance(body, str):
            corpus.skipped.append(Skipped(where, "malformed record: needs id (or _id) and text"))
            continue
        doc_id = str(doc_id)
        if doc_id in seen:
            corpus.skipped.append(Skipped(where, f"duplicate id {doc_id!r}"))
            continue
        seen.add(doc_id)
        title = _str(rec.get("title"))
        doc_path = _str(rec.get("path")) or f"{name}#{doc_id}"
        status = _str(rec.get("status")) or None
        corpus.documents.append(
            Document(doc_id, doc_path, "jsonl", title or doc_id, body, 1, tags_of(rec.get("tags")), status)
        )
