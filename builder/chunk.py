"""Chunk stage: Document -> Chunks, structure first, size second.

1. Sections: markdown headings outside code fences give a section path ("Storage > Backups");
   YAML top-level keys, TOML tables and top-level keys of (pretty-printed) JSON objects give one
   section each; plain text is one section.
2. Units: inside a section, fenced code blocks are atomic units (never split); prose splits into
   paragraphs; a paragraph longer than the budget splits into lines, then sentences, then words.
3. Packing: units are packed greedily into chunks of at most ``max_tokens`` tokens of the
   embedding model; a new chunk starts with the previous chunk's trailing units, up to
   ``overlap_tokens``. A code fence larger than the budget becomes a chunk of its own.

Token counts come from the embedder's own tokenizer (``count_tokens``), so the budget is in the
model's tokens. A document that yields no text still gets one chunk (its title and description),
so no document vanishes from the index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from kb.formats.analyzer import CJK_RANGES
from kb.formats.records import text_lines

from kb.common.settings import setting

from .ingest import Document

# Token counts of texts. They must add up over whitespace: a text's count is the sum of its
# whitespace-separated pieces' counts (true of WordPiece and of estimate_tokens).
TokenCounter = Callable[[Sequence[str]], list[float]]


@dataclass(frozen=True)
class ChunkOptions:
    """kb.toml [chunking]."""

    max_tokens: int = setting(200, "Body budget of a chunk in the embedding model's tokens (title and section path are prepended within its 256-token window).", minimum=16, maximum=8192)
    overlap_tokens: int = setting(32, "Tokens a size-split chunk repeats from the end of the one before it.", minimum=0, maximum=4096)
    exact_tokens: bool = setting(False, "Count tokens with the model's tokenizer instead of the estimate (slower; one process).")


_PUNCT = re.compile(r"[^\w\s]")
_CJK_CHAR = re.compile(f"[{CJK_RANGES}]")  # BERT tokenizers split every CJK character into its own token
TOKENS_PER_PIECE = 1.3125  # 21/16, about 1.3 MiniLM WordPiece tokens per (whitespace word + punctuation mark), and exact in binary, so sums of estimates do not depend on their order; see estimate_tokens
PRESPLIT_CHARS_PER_TOKEN = 3  # one-line units longer than this many characters per budget token are counted by sentences


def estimate_tokens(texts: Sequence[str]) -> list[float]:
    """Estimated WordPiece tokens: 1.3 x (whitespace-separated words + punctuation marks), plus
    one per CJK character. Linear, so it adds up over whitespace as a TokenCounter must.

    Checked against all-MiniLM-L6-v2's tokenizer on the chunks it makes: the
    median true/estimated ratio is 0.97 on SciFact (95th percentile 1.17) and 0.83 on Hugo
    (95th percentile 1.10; markdown syntax is punctuation WordPiece merges). Counting with the
    tokenizer itself costs about 2 s on SciFact's 5,183 abstracts, four times all other
    non-embedding stages together, so the estimate is the default; ``exact_tokens = true`` in
    kb.toml [chunking] counts exactly. The build reports how many chunks the model truncated.
    CJK characters count one token each, as BERT's tokenizer splits them.
    """
    return [_estimate(t) for t in texts]


_ASCII_PUNCT = b".,;:()-/%[]=+<>\"'!?*#`{}|&_@$^~\\"
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _estimate(t: str) -> float:
    # Deleting the ASCII marks from the UTF-8 bytes and comparing lengths beats a regex by far
    # (bytes of multi-byte characters are all >= 0x80, so no mark is miscounted); only the
    # non-ASCII characters, usually a handful, go through the regexes.
    b = t.encode()
    pieces = len(t.split()) + len(b) - len(b.translate(None, _ASCII_PUNCT))
    if len(b) == len(t):
        return TOKENS_PER_PIECE * pieces
    rest = "".join(_NON_ASCII.findall(t))
    return TOKENS_PER_PIECE * (pieces + len(_PUNCT.findall(rest))) + len(_CJK_CHAR.findall(rest))


@dataclass(slots=True)
class Chunk:
    section: str  # "Heading > Subheading", "" before the first heading
    text: str
    start_line: int  # 1-based, inclusive, in the source file
    end_line: int


@dataclass(slots=True)  # not frozen: tens of thousands are made, and a frozen init is three times slower
class _Unit:
    text: str
    start: int  # 0-based line index within the document body
    end: int  # inclusive
    atomic: bool = False


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_SENTENCE_END = re.compile(r"[.!?。！？]\s+")
_YAML_KEY = re.compile(r"^(?![\s#-])([^:#\n][^:\n]*?):(?:\s|$)")
_TOML_TABLE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_JSON_KEY = re.compile(r'^  "((?:[^"\\]|\\.)*)"\s*:')


def chunk_document(doc: Document, count: TokenCounter, opts: ChunkOptions = ChunkOptions()) -> list[Chunk]:
    lines = text_lines(doc.text)
    sections = _sections(doc.kind, lines)
    chunks: list[Chunk] = []
    for path, start, end in sections:
        units = _units(lines, start, end, fenced=doc.kind == "markdown")
        if not units:
            continue
        for group in _pack(units, count, opts):
            text = _join(group, lines)
            chunks.append(
                Chunk(" > ".join(path), text, doc.first_line + group[0].start, doc.first_line + group[-1].end)
            )
    if not chunks:
        text = "\n".join(x for x in (doc.title, doc.description) if x)
        n = max(len(lines), 1)
        chunks.append(Chunk("", text, doc.first_line, doc.first_line + n - 1))
    return chunks


def _join(group: list[_Unit], lines: list[str]) -> str:
    """The chunk's text: the source lines it spans, or its pieces when it holds parts of lines."""
    if all(u.text == "\n".join(lines[u.start : u.end + 1]) for u in group):
        return "\n".join(lines[group[0].start : group[-1].end + 1]).strip("\n")
    out = group[0].text
    for prev, u in zip(group, group[1:]):
        out += (" " if u.start == prev.end else "\n") + u.text
    return out


def _sections(kind: str, lines: list[str]) -> list[tuple[tuple[str, ...], int, int]]:
    """(section path, first line, last line) triples covering the document in order."""
    starts: list[tuple[int, tuple[str, ...]]] = [(0, ())]
    if kind == "markdown":
        stack: list[tuple[int, str]] = []
        fence = None
        for i, line in enumerate(lines):
            m = _FENCE.match(line)
            if m:
                mark = m.group(1)
                if fence is None:
                    fence = mark
                elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark) :].strip():
                    fence = None
                continue
            if fence is not None:
                continue
            h = _HEADING.match(line)
            if h:
                level = len(h.group(1))
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, h.group(2).strip()))
                starts.append((i, tuple(t for _, t in stack)))
    elif kind in ("yaml", "toml", "json"):
        rx = {"yaml": _YAML_KEY, "toml": _TOML_TABLE, "json": _JSON_KEY}[kind]
        for i, line in enumerate(lines):
            m = rx.match(line)
            if m:
                starts.append((i, (m.group(1).strip().strip("\"'"),)))
    out = []
    for j, (s, path) in enumerate(starts):
        e = starts[j + 1][0] - 1 if j + 1 < len(starts) else len(lines) - 1
        if e >= s:
            out.append((path, s, e))
    return out


def _units(lines: list[str], start: int, end: int, fenced: bool) -> list[_Unit]:
    units: list[_Unit] = []
    para: list[int] = []

    def flush():
        if para:
            units.append(_Unit("\n".join(lines[para[0] : para[-1] + 1]), para[0], para[-1]))
            para.clear()

    i = start
    body_lines = 0
    while i <= end:
        line = lines[i]
        m = _FENCE.match(line) if fenced else None
        if m:
            flush()
            mark = m.group(1)
            j = i + 1
            while j <= end:
                m2 = _FENCE.match(lines[j])
                if m2 and m2.group(1)[0] == mark[0] and len(m2.group(1)) >= len(mark):
                    break
                j += 1
            j = min(j, end)
            units.append(_Unit("\n".join(lines[i : j + 1]), i, j, atomic=True))
            body_lines += 1
            i = j + 1
            continue
        if not line.strip():
            flush()
        else:
            para.append(i)
            if not (fenced and _HEADING.match(line)):
                body_lines += 1
        i += 1
    flush()
    return units if body_lines else []


def _sentences(text: str) -> list[str]:
    """``text`` cut after each sentence mark that whitespace follows, the whitespace dropped
    (a plain pattern and slicing: twice as fast as splitting on a look-behind)."""
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        out.append(text[start : m.start() + 1])
        start = m.end()
    out.append(text[start:])
    return out


def _parts(u: _Unit) -> list[_Unit]:
    """What a prose unit over budget splits into: its lines, or the sentences of its one line."""
    if u.start != u.end:
        return [_Unit(t, u.start + k, u.start + k) for k, t in enumerate(u.text.split("\n")) if t.strip()]
    return [_Unit(t, u.start, u.end) for t in _sentences(u.text) if t.strip()]


def _split_long(u: _Unit, count: TokenCounter, budget: int, parts=None, sizes=None) -> list[tuple[_Unit, float]]:
    """Split a prose unit over budget into lines, then sentences, then word windows; each piece
    comes back with its token count. ``parts`` and their ``sizes`` may come already counted."""
    parts = _parts(u) if parts is None else parts
    if u.start == u.end and len(parts) <= 1:
        words = u.text.split()
        step = max(budget // 2, 1)  # about 1.5 tokens per word keeps a window under budget
        parts = [_Unit(" ".join(words[k : k + step]), u.start, u.end) for k in range(0, len(words), step)]
        return list(zip(parts, count([p.text for p in parts])))
    out: list[tuple[_Unit, float]] = []
    for p, n in zip(parts, count([p.text for p in parts]) if sizes is None else sizes):
        out.extend(_split_long(p, count, budget) if n > budget and p.text != u.text else [(p, n)])
    return out


def _presplit(u: _Unit, budget: int) -> list[_Unit] | None:
    """The sentences of a long one-line prose unit, or None to count it whole."""
    if u.atomic or u.start != u.end or len(u.text) <= PRESPLIT_CHARS_PER_TOKEN * budget:
        return None
    parts = _parts(u)
    return parts if len(parts) > 1 else None


def _pack(units: list[_Unit], count: TokenCounter, opts: ChunkOptions) -> list[list[_Unit]]:
    # A long one-line unit (an abstract, a wrapped-less paragraph) is nearly always over budget:
    # count its sentences, not the whole and then its sentences again. Counts add up over
    # whitespace (WordPiece's do, and estimate_tokens's), so the unit's count is their sum and
    # the chunks are the same either way; only the time differs.
    parts = [_presplit(u, opts.max_tokens) for u in units]
    sizes = iter(count([t for u, ps in zip(units, parts) for t in ([u.text] if ps is None else [p.text for p in ps])]))
    flat: list[tuple[_Unit, float]] = []
    for u, ps in zip(units, parts):
        part_sizes = [next(sizes)] if ps is None else [next(sizes) for _ in ps]
        n = sum(part_sizes)
        if n <= opts.max_tokens or u.atomic:
            flat.append((u, n))
        else:
            flat.extend(_split_long(u, count, opts.max_tokens, ps, None if ps is None else part_sizes))
    groups: list[list[_Unit]] = []
    cur: list[tuple[_Unit, float]] = []
    total = 0
    for u, n in flat:
        if cur and total + n > opts.max_tokens:
            groups.append([x for x, _ in cur])
            carry: list[tuple[_Unit, float]] = []
            kept = 0
            for x, m in reversed(cur):
                if x.atomic or kept + m > opts.overlap_tokens or kept + m + n > opts.max_tokens:
                    break
                carry.insert(0, (x, m))
                kept += m
            cur, total = carry, kept
        cur.append((u, n))
        total += n
    if cur:
        groups.append([x for x, _ in cur])
    return groups
