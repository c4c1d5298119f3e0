"""Snippets: the passage of a chunk that best shows why it matched, and highlighting for a terminal."""

from __future__ import annotations

import re

SNIPPET_CHARS = 240
_HEADING = re.compile(r"#{1,6}\s")
_WORD = re.compile(r"\w+")
BOLD, RESET = "\x1b[1m", "\x1b[0m"


def snippet(text: str, terms: list[str], analyzer, width: int = SNIPPET_CHARS, words: dict[str, set[str]] | None = None) -> str:
    """The run of consecutive lines (at most ``width`` characters, joined by spaces) holding the
    most distinct query terms, the earliest and then the longest on ties (so the first lines
    when none match). A single
    line longer than ``width`` is cut around its first hit. Lines are analyzed with the
    artifact's analyzer, as the query was; headings (already in the section path) and code
    fences are skipped when there is anything else. ``words`` (``surface_hits``), when given:
    the words the artifact turned into each query term, so that the lines are searched for those
    few words instead of analyzing all of their own (the same lines in a corpus of one language;
    in several, a word that another language's stemmer would have made the term is not one)."""
    if "\n" not in text:  # one line (a JSON Lines record, a paragraph): it is the passage
        line = text.strip()
        return "" if not line or line.startswith("```") else _around_first_hit(line, terms, width)
    lines = [ln for ln in map(str.strip, text.split("\n")) if ln and not ln.startswith("```")]
    lines = [ln for ln in lines if not (ln[0] == "#" and _HEADING.match(ln))] or lines
    if not lines:
        return ""
    want = set(terms)
    if not want or len(lines) == 1:  # one line: it is the passage
        found = {}
    elif words is not None:
        found = _word_hits_per_line(lines, words, analyzer)
    else:
        found = _hits_per_line(lines, want, analyzer)
    n, lens = len(lines), [len(ln) + 1 for ln in lines]
    best, best_score = (0, 1), (-1, 0, 0)
    for i in sorted(found) or [0]:  # a passage starts at a hit
        # the longest run from i that fits: running further never shows fewer terms
        seen, size, j = set(found.get(i, ())), lens[i] - 1, i + 1
        while j < n and size + lens[j] <= width:
            size += lens[j]
            if j in found:
                seen |= found[j]
            j += 1
        if (len(seen), -i, size) > best_score:
            best, best_score = (i, j), (len(seen), -i, size)
    return _around_first_hit(" ".join(lines[best[0] : best[1]]), want, width)


def _around_first_hit(passage: str, terms, width: int) -> str:
    """``passage`` if it fits in ``width``, else ``width`` characters of it around the first
    occurrence of a query term (its start when none occurs), with … where it is cut."""
    if len(passage) <= width:
        return passage
    low = passage.casefold()
    pos = len(low)
    for t in terms:
        p = low.find(t, 0, pos + len(t) - 1)  # only an earlier hit matters
        if p >= 0:
            pos = p
    pos = pos if pos < len(low) else 0
    start = max(0, min(pos - width // 4, len(passage) - width))
    cut = passage[start : start + width]
    return ("…" if start else "") + cut + ("…" if start + width < len(passage) else "")


def _hits_per_line(lines: list[str], want: set[str], analyzer) -> dict[int, set[str]]:
    """Line index -> the query terms that line shows, as ``want & analyzer.terms(line)`` would
    give (lines that show none left out). The text's distinct words are found at once and the
    words that hit by set operations (Analyzer.term_hits); then the lines that hold one of
    those few words, as ``_word_hits_per_line`` finds them."""
    hits = analyzer.term_hits(set(analyzer.words("\n".join(lines))), want)
    return _word_hits_per_line(lines, hits, analyzer) if hits else {}


def surface_hits(ix, terms: list[str]) -> dict[str, set[str]] | None:
    """Word -> the query ``terms`` it shows, from the artifact's terms.surfaces (the words of the
    corpus each term stands for: runtime/index.py ``term_surfaces``); None when the artifact does
    not list some term's words (snippets then analyze each line)."""
    out: dict[str, set[str]] = {}
    for t in set(terms):
        words = ix.term_surfaces(t)
        if words is None:
            return None
        for w in words:
            out.setdefault(w, set()).add(t)
    return out


def _word_hits_per_line(lines: list[str], words: dict[str, set[str]], analyzer) -> dict[int, set[str]]:
    """``_hits_per_line`` when the words that show the query terms are known: on ASCII text,
    substring tests of " word " on the text as the analyzer reads it (every non-word character
    a space), first over the whole text, then over the lines of the words it holds; on other
    text, the words (the analyzer's split) of each line that holds one of them as a substring."""
    text = "\n".join(lines)
    out: dict[int, set[str]] = {}
    blanked = analyzer.blanked_lines(text)
    if blanked is None:
        keys = words.keys()
        for i, line_words in enumerate(analyzer.words_by_line(text, lambda line: any(w in line for w in keys))):
            common = keys & set(line_words)
            if common:
                out[i] = set().union(*(words[w] for w in common))
        return out
    whole = f" {' '.join(blanked)} "
    present = [w for w in words if f" {w} " in whole]
    if present:
        padded = [f" {ln} " for ln in blanked]
        for w in present:
            key, terms = f" {w} ", words[w]
            for i, ln in enumerate(padded):
                if key in ln:
                    out.setdefault(i, set()).update(terms)
    return out


def highlighter(terms: list[str], analyzer):
    """A function that wraps the words of a text whose analyzed terms are query terms in bold
    (ANSI), for human output on a terminal."""
    want = set(terms)

    def bold(m: re.Match) -> str:
        w = m.group(0)
        return f"{BOLD}{w}{RESET}" if want.intersection(analyzer.terms(w)) else w

    return lambda text: _WORD.sub(bold, text) if want else text
