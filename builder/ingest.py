"""Read stage: corpus folders, files and JSON Lines -> Documents, plus what was skipped and why.

Nothing is dropped silently: every file that is not indexed comes back as a ``Skipped`` with its
reason (binary, undecodable, malformed, too large, unsupported type, hidden), and the CLI reports
them all; ``--strict`` turns any skip into a failed build.
"""

from __future__ import annotations

import fnmatch
import errno
import hashlib
import json
import os
import re
import stat
import sys
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
MAX_JSONL_BYTES = 1 << 40  # a JSON Lines file is a whole corpus: no size bound, but still one bounded read
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
    record: int | None = None  # JSON Lines: the record's index among its file's non-blank lines (its --vectors row)
    head: str = ""  # what the file holds before text (front matter): first_line - 1 whole lines

    @property
    def source(self) -> str:
        """The text chunks' line numbers count in: head + text (the artifact's docs.source)."""
        return self.head + self.text


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
    records: int = 0  # JSON Lines records (non-blank lines) read, skipped ones included, all files together


class InputError(UsageError):
    """A corpus argument or JSON Lines file that cannot be read at all (exit 2)."""


def read_corpus(
    roots: list[Path],
    jsonl: list[Path] = (),
    include: list[str] = (),
    exclude: list[str] = (),
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    skip_paths: set[Path] = frozenset(),
    follow_symlinks: bool = False,
    documents=None,
) -> Corpus:
    """Read the corpus. Without ``follow_symlinks`` no file whose real path is outside the corpus
    root is read and symlinked folders are not entered; each is reported as skipped.
    ``documents``: where the documents are appended (default: a list; kb-build's DocumentStore)."""
    roots = [Path(r) for r in roots]
    for r in list(roots) + [Path(j) for j in jsonl]:
        if not os.path.lexists(r):
            raise InputError(f"{r}: no such file or folder")
    corpus = Corpus(root=str(corpus_root(roots, jsonl)), documents=[] if documents is None else documents)
    base = Path(corpus.root)
    skip = {os.path.realpath(p) for p in skip_paths}

    def wanted(rel: str) -> bool:
        if include and not any(fnmatch.fnmatch(rel, g) for g in include):
            return False
        return not any(fnmatch.fnmatch(rel, g) for g in exclude)

    for entry in _walk(roots, base, follow_symlinks):
        if isinstance(entry, Skipped):  # a folder that could not be entered
            if wanted(entry.path):
                corpus.skipped.append(Skipped(display_path(entry.path), entry.reason))
            continue
        rel, real, why = entry
        if real in skip or rel.rsplit("/", 1)[-1] == CONFIG_NAME:
            continue  # the artifact being written, and the corpus's own config (not content)
        if not wanted(rel):
            corpus.excluded += 1
            continue
        if why:
            corpus.skipped.append(Skipped(display_path(rel), why))
            continue
        _read_one(corpus, Path(real), rel, max_file_bytes)
    for j in jsonl:
        _read_jsonl(corpus, Path(j), max_file_bytes)
    return corpus


def corpus_root(roots: list[Path], jsonl: list[Path] = ()) -> Path:
    """The folder that relative paths start from: the one folder given, else the common parent."""
    if len(roots) == 1 and roots[0].is_dir() and not jsonl:
        return _realpath(roots[0])
    parents = [_realpath(p).parent for p in list(roots) + list(jsonl)]
    return Path(os.path.commonpath(parents)) if parents else Path.cwd()


def _realpath(p: Path) -> Path:
    """Path.resolve without its RuntimeError on a symlink loop (the loop is reported later)."""
    return Path(os.path.realpath(p))


def display_path(rel: str) -> str:
    """A path as it can be printed and stored: bytes that are not UTF-8 (kept by the OS as lone
    surrogates) become \\xNN escapes."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _rel(lexical: Path, base: Path) -> str:
    try:
        return lexical.relative_to(base).as_posix()
    except ValueError:
        return lexical.as_posix()


def _real(path: str) -> tuple[str | None, str]:
    """(real path, "") or (None, why it cannot be resolved: a loop or a dangling link)."""
    try:
        return os.path.realpath(path, strict=True), ""
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None, "symlink loop"
        if e.errno == errno.ENOENT:
            return None, "broken symlink (its target does not exist)"
        return None, f"unreadable: {e.strerror}"
    except RuntimeError:  # some Pythons report a loop this way
        return None, "symlink loop"


def _is_within(real: str, base: str) -> bool:
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _walk(roots: list[Path], base: Path, follow: bool) -> list:
    """Every file under the roots as (relative path, real path, reason to skip or ""), and every
    folder that cannot be entered as a Skipped; sorted by path. Hidden entries are included (the
    reader reports them). Only real folders are entered, unless ``follow``; with it a symlinked
    folder is entered once (its real path is remembered, so a loop ends)."""
    out: list = []
    base_real = str(base)
    for r in roots:
        if not os.path.isdir(r):  # a file named on the command line is read as named
            real, why = _real(str(r))
            out.append((_rel(_realpath(r.parent) / r.name, base), real or str(r), why))
            continue
        top = _realpath(r)
        visited = {str(top)}
        stack = [(str(r), top, str(top))]  # (folder as walked, as shown, its real path)
        while stack:
            folder, lexical, real_folder = stack.pop()
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as e:
                out.append(Skipped(_rel(lexical, base) + "/", f"unreadable folder: {e.strerror}"))
                continue
            for e in entries:
                lex = lexical / e.name
                rel = _rel(lex, base)
                try:
                    is_link = e.is_symlink()
                    is_dir = e.is_dir(follow_symlinks=False)
                except OSError as err:
                    out.append((rel, e.path, f"unreadable: {err.strerror}"))
                    continue
                if not is_link:
                    if is_dir:
                        stack.append((e.path, lex, os.path.join(real_folder, e.name)))
                    else:
                        out.append((rel, os.path.join(real_folder, e.name), ""))
                    continue
                real, why = _real(e.path)
                if real is None:
                    out.append((rel, e.path, why))
                elif os.path.isdir(real):
                    if not follow:
                        out.append(Skipped(rel + "/", "symlinked folder, not followed (kb-build --follow-symlinks enters it)"))
                    elif real not in visited:
                        visited.add(real)
                        stack.append((e.path, lex, real))
                elif follow or _is_within(real, base_real):
                    out.append((rel, real, ""))
                else:
                    out.append((rel, real, "symlink to a file outside the corpus root, not read (kb-build --follow-symlinks reads it)"))
    return sorted(out, key=lambda x: x.path if isinstance(x, Skipped) else x[0])


def _read_one(corpus: Corpus, path: Path, rel: str, max_file_bytes: int) -> None:
    shown = display_path(rel)
    parts = rel.split("/")
    if any(p.startswith(".") for p in parts):
        corpus.skipped.append(Skipped(shown, "hidden"))
        return
    ext = os.path.splitext(parts[-1])[1].lower()
    if ext not in SUPPORTED:
        corpus.skipped.append(Skipped(shown, f"unsupported type {display_path(ext) or '(no extension)'}"))
        return
    if shown != rel:
        corpus.skipped.append(Skipped(shown, "file name is not UTF-8 (rename the file to index it)"))
        return
    try:
        data, st = read_regular_file(path, max_file_bytes)
    except SkipFile as e:
        corpus.skipped.append(Skipped(shown, str(e)))
        return
    corpus.sources.append(SourceFile(rel, len(data), st.st_mtime_ns, hashlib.sha256(data).hexdigest()))
    try:
        doc = parse_file(rel, ext, data)
    except ParseError as e:
        corpus.skipped.append(Skipped(shown, str(e)))
        return
    corpus.documents.append(doc)


class SkipFile(Exception):
    """A file that is not read: not a regular file, too large, unreadable, changed mid-read."""


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def read_regular_file(path: Path, max_bytes: int) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most ``max_bytes``, read through one descriptor: opened
    without blocking (a FIFO would wait for a writer), checked with fstat, and read no further than
    the size it checked (a device or a growing file cannot make the read run on)."""
    f, st = open_regular_file(path, max_bytes)
    with f:
        data = b"".join(read_checked(f, st.st_size))
    return data, st


def open_regular_file(path: Path, max_bytes: int):
    """(unbuffered binary file, its fstat) of a regular file of at most ``max_bytes``, opened as
    ``read_regular_file`` says; SkipFile otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SkipFile("symlink (it changed while the corpus was read)") from None
        raise SkipFile(f"unreadable: {e.strerror}") from None
    f = os.fdopen(fd, "rb", buffering=0)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
            raise SkipFile(f"not a regular file ({kind})")
        if st.st_size > max_bytes:
            raise SkipFile(f"too large ({st.st_size} bytes > {max_bytes})")
    except BaseException:
        f.close()
        raise
    return f, st


READ_BLOCK = 1 << 20


def read_checked(f, size: int):
    """Yield the bytes of ``f`` in blocks, no further than ``size`` (checked by fstat) and one
    byte: SkipFile when the file turns out longer or shorter (it changed while it was read)."""
    left, got = size + 1, 0  # one byte more than checked tells a file that grew
    try:
        while left > 0:
            block = f.read(min(left, READ_BLOCK))
            if not block:
                break
            left -= len(block)
            got += len(block)
            if got > size:
                break
            yield block
    except OSError as e:
        raise SkipFile(f"unreadable: {e.strerror}") from None
    if got != size:
        raise SkipFile("changed while it was read (its size moved); rebuild once it is written")


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
        obj = load_json(text, "malformed JSON")
        if any(len(line) > _MINIFIED_LINE for line in text.split("\n")):
            # a string's lone surrogate escape (\\ud800) stays an escape, so the text is valid UTF-8
            pretty = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
            text = pretty.encode("utf-8", "backslashreplace").decode("utf-8")
        return Document(rel, rel, "json", stem, text)
    if ext in YAML:
        _yaml_load_all(text, "malformed YAML")
        return Document(rel, rel, "yaml", stem, text)
    if ext in TOML:
        load_toml(text, "malformed TOML")
        return Document(rel, rel, "toml", stem, text)
    raise ParseError(f"unsupported type {ext}")


# Bounds on structured input (JSON, JSON Lines records, TOML, YAML, front matter). Nesting deeper
# than this is refused before anything recurses over it; no real document comes close.
MAX_NESTING = 100
# YAML aliases may repeat a node; past this many nodes added by repetition a file is refused (an
# alias bomb: a few hundred bytes that expand to billions of nodes). Anchors used as intended
# (a shared block merged into a few places) add tens or hundreds.
MAX_ALIAS_NODES = 10_000


def _value_error(what: str, e: Exception) -> ParseError:
    msg = str(e)
    if "integer string conversion" in msg:  # Python's int_max_str_digits guard (3.11+)
        return ParseError(f"{what}: an integer with more than {sys.get_int_max_str_digits()} digits")
    return ParseError(f"{what}: {msg.splitlines()[0] if msg else type(e).__name__}")


def _too_deep(what: str) -> ParseError:
    return ParseError(f"{what}: nested more than {MAX_NESTING} levels deep")


def load_json(text: str, what: str):
    """Parse JSON within the bounds: one ParseError for bad syntax, depth or huge integers."""
    return _load_bounded(json.loads, text, what, json.JSONDecodeError, lambda e: f"{e.msg} at line {e.lineno} column {e.colno}")


def load_toml(text: str, what: str) -> dict:
    return _load_bounded(tomllib.loads, text, what, tomllib.TOMLDecodeError, str)


def _load_bounded(parse, text: str, what: str, syntax_error: type, describe):
    """``parse(text)`` with its syntax error (``describe``d), too deep a nesting and oversized
    integers each as one ParseError naming ``what``."""
    try:
        obj = parse(text)
    except syntax_error as e:
        raise ParseError(f"{what}: {describe(e)}") from None
    except RecursionError:
        raise _too_deep(what) from None
    except ValueError as e:
        raise _value_error(what, e) from None
    check_nesting(obj, what)
    return obj


def check_nesting(obj, what: str) -> None:
    """Refuse containers nested deeper than MAX_NESTING (walked without recursion)."""
    stack = [(obj, 0)]
    while stack:
        o, depth = stack.pop()
        if isinstance(o, dict):
            items = o.values()
        elif isinstance(o, (list, tuple)):
            items = o
        else:
            continue
        if depth >= MAX_NESTING:
            raise _too_deep(what)
        stack.extend((v, depth + 1) for v in items)


def _yaml_load_all(text: str, what: str):
    """Every document of a YAML stream, safely: the node graph is checked for depth, recursive
    aliases and alias expansion (MAX_ALIAS_NODES) before any Python object is built from it."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            _check_yaml_graph(node, what)
            docs.append(loader.construct_document(node))
        return docs
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "parse error"
        raise ParseError(f"{what}: {problem}{where}") from None
    except RecursionError:
        raise _too_deep(what) from None
    except (ValueError, TypeError, OverflowError, IndexError, KeyError, AttributeError) as e:
        # a scalar with an explicit tag the constructor cannot build: PyYAML fails on `!!int ""`
        # with IndexError, `!!bool ""` with KeyError and `!!timestamp ""` with AttributeError
        raise ParseError(f"{what}: {_tag_failure(e)}") from None
    finally:
        loader.dispose()


def _tag_failure(e: Exception) -> str:
    if isinstance(e, ValueError):
        return _value_error("", e).args[0][2:]
    return "a tagged scalar cannot be built (e.g. !!int or !!timestamp on a value that is not one)"


def _check_yaml_graph(root, what: str) -> None:
    from yaml.nodes import MappingNode, SequenceNode

    def children(n):
        if isinstance(n, SequenceNode):
            return n.value
        if isinstance(n, MappingNode):
            return [x for pair in n.value for x in pair]
        return ()

    size: dict[int, int] = {}  # node -> nodes it expands to (aliases counted each time)
    height: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [(root, False)]
    while stack:
        n, done = stack.pop()
        k = id(n)
        if done:
            on_path.discard(k)
            kids = children(n)
            size[k] = 1 + sum(size[id(c)] for c in kids)
            height[k] = 1 + max((height[id(c)] for c in kids), default=0)
            if height[k] > MAX_NESTING + 1:
                raise _too_deep(what)
            continue
        if k in size:
            continue
        if k in on_path:
            raise ParseError(f"{what}: an alias refers to a node that contains it (a recursive structure)")
        on_path.add(k)
        stack.append((n, True))
        stack.extend((c, False) for c in children(n))
    if size[id(root)] - len(size) > MAX_ALIAS_NODES:
        raise ParseError(f"{what}: aliases expand to more than {MAX_ALIAS_NODES} extra nodes (an alias bomb?)")


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
            meta = load_toml(raw, "malformed TOML front matter")
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
    tags, description = tags_of(meta.get("tags")), _str(meta.get("description"))
    _check_unicode("front matter", title, status or "", description, *tags)
    return Document(rel, rel, "markdown", title, body, first, tags, status, description, head=text[: len(text) - len(body)])


def _check_unicode(what: str, *values: str) -> None:
    """Strings from JSON or YAML escapes may hold lone surrogates (\\ud800), which UTF-8 cannot
    store: refuse them here rather than fail at the final write."""
    for v in values:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ParseError(f"malformed {what}: a string holds a lone surrogate escape (not valid Unicode)") from None


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
    """The records of a JSON Lines file, streamed: a line at a time, never the whole file."""
    name = display_path(path.name)
    try:
        f, st = open_regular_file(path, MAX_JSONL_BYTES)
    except SkipFile as e:
        raise InputError(f"{path}: cannot read JSON Lines file: {e}") from None
    digest = hashlib.sha256()
    seen: set[str] = set()
    record = -1
    with f:
        try:
            for lineno, (at, raw) in enumerate(_lines(read_checked(f, st.st_size), digest), 1):
                try:
                    line = raw.decode("utf-8-sig" if at == 0 else "utf-8")
                except UnicodeDecodeError as e:
                    raise InputError(f"{path}: JSON Lines file is not UTF-8 (byte {at + e.start})") from None
                if not line.strip():
                    continue
                record += 1
                corpus.records += 1
                where = f"{name}:{lineno}"
                if len(line) > max_file_bytes:
                    corpus.skipped.append(Skipped(where, f"too large ({len(line)} bytes > {max_file_bytes})"))
                    continue
                try:
                    doc = jsonl_record(line, name, seen, record)
                except ParseError as e:
                    corpus.skipped.append(Skipped(where, str(e)))
                    continue
                seen.add(doc.doc_id)
                corpus.documents.append(doc)
        except SkipFile as e:
            raise InputError(f"{path}: cannot read JSON Lines file: {e}") from None
    corpus.sources.append(SourceFile(name, st.st_size, st.st_mtime_ns, digest.hexdigest()))


def _lines(blocks, digest):
    """(byte offset, line without its newline) of the bytes in ``blocks``, hashing them into ``digest``."""
    at, pending = 0, []  # the pieces of a line that spans blocks
    for block in blocks:
        digest.update(block)
        lines = block.split(b"\n")
        if len(lines) > 1 and pending:
            pending.append(lines[0])
            lines[0] = b"".join(pending)
            pending = []
        pending.append(lines.pop())
        for line in lines:
            yield at, line
            at += len(line) + 1
    yield at, b"".join(pending)


def jsonl_record(line: str, name: str, seen=frozenset(), record: int | None = None) -> Document:
    """One JSON Lines record as a Document (``record``: its index among the file's records), or
    ParseError with the reason it is skipped. ``line`` is decoded UTF-8, so it holds no lone
    surrogate itself; its ``\\u`` escapes may."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        raise ParseError(f"malformed JSON: {e.msg} at column {e.colno}") from None
    except RecursionError:
        raise _too_deep("malformed JSON") from None
    except ValueError as e:
        raise _value_error("malformed JSON", e) from None
    if line.count("{") + line.count("[") > MAX_NESTING:  # fewer containers cannot nest that deep
        check_nesting(rec, "malformed JSON")
    if not isinstance(rec, dict):
        raise ParseError("malformed record: not a JSON object")
    doc_id = rec.get("id", rec.get("_id"))
    body = rec.get("text")
    if doc_id is None or not isinstance(body, str):
        raise ParseError("malformed record: needs id (or _id) and text")
    doc_id = str(doc_id)
    if doc_id in seen:
        raise ParseError(f"duplicate id {doc_id!r}")
    title = _str(rec.get("title"))
    doc_path = _str(rec.get("path")) or f"{name}#{doc_id}"
    status = _str(rec.get("status")) or None
    tags = tags_of(rec.get("tags"))
    if "\\u" in line:  # a lone surrogate comes only from a \u escape: the line itself is UTF-8
        _check_unicode("record", doc_id, title, body, doc_path, status or "", *tags)
    return Document(doc_id, doc_path, "jsonl", title or doc_id, body, 1, tags, status, record=record)
