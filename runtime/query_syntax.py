"""Query syntax: what a search string may say besides its words.

    "exact phrase"      the chunk must contain the phrase (verified against its text)
    -term  -"phrase"    the chunk must not contain the term (or the phrase)
    title:term          the term (or "phrase") must be in the document's title
    section:term        ... in the chunk's section path (its headings)
    path:prefix         only documents whose path starts with prefix

Phrases, exclusions and scopes filter; every word that is not excluded still ranks (in the
BM25 and dense legs), so `"rate limit" nginx` ranks on all three words among the chunks that
hold the phrase. Words and phrases are compared as the artifact's analyzer sees them (case,
punctuation and, for phrases, whitespace do not matter). A query that is only syntax, with no
word left to rank, is a usage error; so are an unbalanced quote and an unknown field.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from kb.common.errors import UsageError

FIELDS = ("title", "section", "path")
_TOKEN = re.compile(r'\s*(-?)(?:([A-Za-z]+):)?(?:"([^"]*)"|(\S+))')


class QuerySyntaxError(UsageError):
    """A query string that does not parse (exit 2)."""


class ParsedQuery(NamedTuple):  # not a frozen dataclass: ~0.7 ms of a one-shot kb's start to create (bench/startup_records.py)
    text: str  # the words that rank, in order (phrase and scoped words included, exclusions not)
    phrases: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()  # terms or phrases
    title: tuple[str, ...] = ()  # terms or phrases the title must hold
    section: tuple[str, ...] = ()
    path: str | None = None

    @property
    def filters(self) -> bool:
        return bool(self.phrases or self.excluded or self.title or self.section)

    def as_dict(self) -> dict:
        return {"text": self.text, "phrases": list(self.phrases), "excluded": list(self.excluded), "title": list(self.title), "section": list(self.section), "path": self.path}


_SYNTAX = re.compile(r'[":]|(?:^|\s)-')  # a quote, a field or an exclusion: anything else is plain words


def parse(query: str) -> ParsedQuery:
    if _SYNTAX.search(query) is None:  # plain words (most queries): what the loop below would give
        text = " ".join(query.split())
        if not text:
            raise QuerySyntaxError("the query has no words left to rank (only exclusions or path:); add at least one word")
        return ParsedQuery(text)
    return parse_syntax(query)


def parse_syntax(query: str) -> ParsedQuery:
    """``parse`` by the token loop (``parse`` skips it for a query of plain words)."""
    if query.count('"') % 2:
        raise QuerySyntaxError("unbalanced quote in the query: close the phrase with another \"")
    words, phrases, excluded, scoped, path = [], [], [], {"title": [], "section": []}, None
    pos = 0
    for m in _TOKEN.finditer(query):
        if m.start() != pos and query[pos : m.start()].strip():
            break
        pos = m.end()
        neg, field, quoted, bare = m.group(1), m.group(2), m.group(3), m.group(4)
        value = quoted if quoted is not None else bare
        if field is not None and field.lower() not in FIELDS:
            if quoted is None:  # not a field after all: a word with a colon (10:30, C++:, http://...)
                value, field = f"{field}:{bare}", None
            else:
                raise QuerySyntaxError(f"unknown field '{field}:' in the query; the fields are {', '.join(f + ':' for f in FIELDS)}")
        if field is not None:
            field = field.lower()
        if not value.strip():
            continue
        if neg:
            excluded.append(value)
        elif field == "path":
            if path is not None:
                raise QuerySyntaxError("give path: once")
            path = value
        elif field in ("title", "section"):
            scoped[field].append(value)
            words.append(value)
        else:
            if quoted is not None:
                phrases.append(value)
            words.append(value)
    text = " ".join(words)
    if not text.strip():
        raise QuerySyntaxError("the query has no words left to rank (only exclusions or path:); add at least one word")
    return ParsedQuery(text, tuple(phrases), tuple(excluded), tuple(scoped["title"]), tuple(scoped["section"]), path)


def matches(analyzer, haystack: str, needle: str) -> bool:
    """Whether ``needle`` (a word or a phrase) occurs in ``haystack``, as the analyzer sees both:
    its terms in a row."""
    want = analyzer.terms(needle)
    if not want:
        return True
    if len(want) == 1:  # one term: found by set operations, without analysing every word in order
        return bool(analyzer.term_hits(set(analyzer.words(haystack)), set(want)))
    have = analyzer.terms(haystack)
    n = len(want)
    return any(have[i : i + n] == want for i in range(len(have) - n + 1))
