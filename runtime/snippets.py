"""Snippets: the line of a chunk that best shows why it matched."""

from __future__ import annotations

import re

SNIPPET_CHARS = 240


def snippet(text: str, terms: list[str], analyzer, width: int = SNIPPET_CHARS) -> str:
    """The line with the most query terms (first line if none), cut to ``width`` around the
    first hit; lines are analyzed with the artifact's analyzer, as the query was."""
    lines = [ln.strip() for ln in text.split("\n") if ln.strip() and not ln.strip().startswith("```")]
    prose = [ln for ln in lines if not re.match(r"#{1,6}\s", ln)]  # headings are already in the section path
    lines = prose or lines
    if not lines:
        return ""
    want = set(terms)
    best = max(range(len(lines)), key=lambda i: (sum(t in want for t in set(analyzer.terms(lines[i]))), -i)) if want else 0
    line = lines[best]
    if len(line) <= width:
        return line
    low = line.casefold()
    pos = min((low.find(t) for t in want if low.find(t) >= 0), default=0)
    start = max(0, min(pos - width // 4, len(line) - width))
    cut = line[start : start + width]
    return ("…" if start else "") + cut + ("…" if start + width < len(line) else "")
