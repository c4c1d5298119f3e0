"""Snippets: the passage of a chunk that best shows why it matched, and highlighting for a terminal."""

from __future__ import annotations

import re

SNIPPET_CHARS = 240
_HEADING = re.compile(r"#{1,6}\s")
_WORD = re.compile(r"\w+")
BOLD, RESET = "\x1b[1m", "\x1b[0m"


def snippet(text: str, terms: list[str], analyzer, width: int = SNIPPET_CHARS) -> str:
    """The run of consecutive lines (at most ``width`` characters, joined by spaces) holding the
    most distinct query terms, the earliest and then the longest on ties (so the first lines
    when none match). A single
    line longer than ``width`` is cut around its first hit. Lines are analyzed with the
    artifact's analyzer, as the query was; headings (already in the section path) and code
    fences are skipped when there is anything else."""
    lines = [ln.strip() for ln in text.split("\n") if ln.strip() and not ln.strip().startswith("```")]
    lines = [ln for ln in lines if not _HEADING.match(ln)] or lines
    if not lines:
        return ""
    want = set(terms)
    found = _hits_per_line(lines, want, analyzer) if want and len(lines) > 1 else [set()] * len(lines)  # one line: it is the passage
    best, best_score = (0, 1), (-1, 0, 0)
    for i in [i for i in range(len(lines)) if found[i]] or [0]:  # a passage starts at a hit
        seen, size, j = set(), -1, i
        while j < len(lines) and (j == i or size + 1 + len(lines[j]) <= width):
            size += 1 + len(lines[j])
            seen |= found[j]
            j += 1
            if (len(seen), -i, size) > best_score:
                best, best_score = (i, j), (len(seen), -i, size)
    passage = " ".join(lines[best[0] : best[1]])
    if len(passage) <= width:
        return passage
    low = passage.casefold()
    pos = min((p for p in map(low.find, want) if p >= 0), default=0)
    start = max(0, min(pos - width // 4, len(passage) - width))
    cut = passage[start : start + width]
    return ("…" if start else "") + cut + ("…" if start + width < len(passage) else "")


def _hits_per_line(lines: list[str], want: set[str], analyzer) -> list[set[str]]:
    """The query terms each line shows, as ``want & analyzer.terms(line)`` would give: the lines'
    words are split in C, the words that hit found by set operations (Analyzer.term_hits), and
    only those looked at per line."""
    words = [analyzer.words(ln) for ln in lines]
    hits = analyzer.term_hits(set().union(*words), want)
    if not hits:
        return [set()] * len(lines)
    keys = hits.keys()
    return [set().union(*(hits[w] for w in keys & set(ws))) for ws in words]


def highlighter(terms: list[str], analyzer):
    """A function that wraps the words of a text whose analyzed terms are query terms in bold
    (ANSI), for human output on a terminal."""
    want = set(terms)

    def bold(m: re.Match) -> str:
        w = m.group(0)
        return f"{BOLD}{w}{RESET}" if want.intersection(analyzer.terms(w)) else w

    return lambda text: _WORD.sub(bold, text) if want else text
