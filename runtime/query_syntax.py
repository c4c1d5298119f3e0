"""Query syntax: what a search string may say besides its words.

    "exact phrase"      the chunk must contain the phrase (verified against its text)
    -term  -"phrase"    the chunk must not contain the term (or the phrase)
    title:term          the term (or "phrase") must be in the document's title
    section:term        ... in the chunk's section path (its headings)
    path:prefix         only documents whose path starts with prefix

    lex: words          typed sub-queries, as in qmd, each to the end of its line (or the
    vec: a question     next typed prefix): lex: feeds only the BM25 leg (and may hold the
    hyde: an answer     syntax above), vec: only the dense leg, hyde: a hypothetical answer
                        (its own dense leg); the plain words feed both

Phrases, exclusions and scopes filter; every word that is not excluded still ranks (in the
BM25 and dense legs), so `"rate limit" nginx` ranks on all three words among the chunks that
hold the phrase. Words and phrases are compared as the artifact's analyzer sees them (case,
punctuation and, for phrases, whitespace do not matter). A query that is only syntax, with no
word left to rank, is a usage error; so is an unbalanced quote. An unknown ``word:`` prefix is
searched as words, and named in ``unknown`` (the search gives a notice); one that does not start
with a letter after the colon (``http://``, ``std::``, ``localhost:8080``) is a word, silently.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from kb.common.errors import UsageError

FIELDS = ("title", "section", "path")
TYPES = ("lex", "vec", "hyde")  # typed sub-queries (qmd): which legs a part of the query feeds
_TYPED = re.compile(r"(?<!\S)(lex|vec|hyde):", re.IGNORECASE)
_TOKEN = re.compile(r'\s*(-?)(?:([A-Za-z]+):)?(?:"([^"]*)"|(\S+))')


class QuerySyntaxError(UsageError):
    """A query string that does not parse (exit 2)."""


class ParsedQuery(NamedTuple):  # not a frozen dataclass: start-up cost (bench/startup_records.py)
    text: str  # the words that rank, in order (phrase and scoped words included, exclusions not)
    phrases: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()  # terms or phrases
    title: tuple[str, ...] = ()  # terms or phrases the title must hold
    section: tuple[str, ...] = ()
    path: str | None = None
    lex: str = ""  # lex: words, for the BM25 leg only
    vec: str = ""  # vec: text, for the dense leg only
    hyde: str = ""  # hyde: a hypothetical answer, for a dense leg of its own
    unknown: tuple[str, ...] = ()  # unknown field names, searched as words

    @property
    def filters(self) -> bool:
        return bool(self.phrases or self.excluded or self.title or self.section)

    @property
    def typed(self) -> bool:
        return bool(self.lex or self.vec or self.hyde)

    def legs_text(self) -> tuple[str | None, str | None]:
        """(what the BM25 leg searches, what the dense leg embeds): the plain words with the lex:
        or the vec: part; None for a leg nothing feeds (hyde: is a dense leg of its own)."""
        return " ".join(filter(None, (self.text, self.lex))) or None, " ".join(filter(None, (self.text, self.vec))) or None

    def as_dict(self) -> dict:
        return {"text": self.text, "phrases": list(self.phrases), "excluded": list(self.excluded), "title": list(self.title), "section": list(self.section), "path": self.path,
                "lex": self.lex, "vec": self.vec, "hyde": self.hyde}  # fmt: skip


_SYNTAX = re.compile(r'[":]|(?:^|\s)-')  # a quote, a field or an exclusion: anything else is plain words


def parse(query: str) -> ParsedQuery:
    if _SYNTAX.search(query) is None:  # plain words (most queries): what the loop below would give
        text = " ".join(query.split())
        if not text:
            raise QuerySyntaxError("the query has no words left to rank (only exclusions or path:); add at least one word")
        return ParsedQuery(text)
    return parse_syntax(query)


def parse_syntax(query: str) -> ParsedQuery:
    """``parse`` by the token loop (``parse`` skips it for a query of plain words), after the
    typed sub-queries are cut out (``_typed_parts``)."""
    parts = _typed_parts(query)
    plain = _tokens(parts[""], parts["lex"])
    vec, hyde = (" ".join(parts[t].split()) for t in ("vec", "hyde"))
    if not (plain.text.strip() or plain.lex or vec or hyde):
        raise QuerySyntaxError("the query has no words left to rank (only exclusions or path:); add at least one word")
    return plain._replace(vec=vec, hyde=hyde)


def _typed_parts(query: str) -> dict[str, str]:
    """The query's plain part and its lex:, vec: and hyde: parts (each typed part runs to the end
    of its line or the next typed prefix; parts of one type are joined)."""
    parts: dict[str, list[str]] = {"": [], **{t: [] for t in TYPES}}
    for line in query.split("\n"):
        pieces = _TYPED.split(line)
        parts[""].append(pieces[0])
        for kind, text in zip(pieces[1::2], pieces[2::2]):
            parts[kind.lower()].append(text)
    return {k: " ".join(v) for k, v in parts.items()}


def _tokens(query: str, lex: str = "") -> ParsedQuery:
    """Phrases, exclusions, scopes and words of the plain part, and of the lex: part (its words in
    ``lex``; its phrases, exclusions and scopes filter as the plain part's do)."""
    if (query + lex).count('"') % 2:
        raise QuerySyntaxError("unbalanced quote in the query: close the phrase with another \"")
    phrases, excluded, scoped, path, unknown = [], [], {"title": [], "section": []}, None, []
    words_of = {"": [], "lex": []}
    for part, text in (("", query), ("lex", lex)):
        words = words_of[part]
        path = _token_loop(text, words, phrases, excluded, scoped, path, unknown)
    return ParsedQuery(" ".join(words_of[""]), tuple(phrases), tuple(excluded), tuple(scoped["title"]), tuple(scoped["section"]), path, lex=" ".join(words_of["lex"]), unknown=tuple(dict.fromkeys(unknown)))


def _token_loop(query: str, words: list, phrases: list, excluded: list, scoped: dict, path: str | None, unknown: list) -> str | None:
    """Read ``query``'s tokens into the lists given; returns path: (once in a query)."""
    pos = 0
    for m in _TOKEN.finditer(query):
        if m.start() != pos and query[pos : m.start()].strip():
            break
        pos = m.end()
        neg, field, quoted, bare = m.group(1), m.group(2), m.group(3), m.group(4)
        value = quoted if quoted is not None else bare
        if field is not None and field.lower() not in FIELDS:
            if quoted is not None or bare[0].isalpha():  # colour:red: searched as words, with a notice
                unknown.append(field)
            # a word with a colon (http://..., std::vector, localhost:8080) or an unknown field
            value, field, quoted = f"{field}:{value}" if quoted is None else f"{field} {value}", None, None
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
    return path


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
