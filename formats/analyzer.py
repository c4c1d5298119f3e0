"""The text analyzer shared by builder and runtime: text -> terms for BM25.

``kb-unicode-2``: NFKC normalisation, then casefold, then Unicode word runs (Python's ``\\w+``:
letters, digits and underscore; punctuation, hyphens and combining marks that NFKC does not
compose split words). Inside a run, characters of CJK scripts (Han, Hiragana, Katakana,
Hangul) become overlapping character bigrams (a lone CJK character stays a unigram); the rest
of the run is one word. Then, per document language (``LANGUAGES``): a word on the language's
stopword list (formats/stopwords.py) becomes the stopword term ``STOP_MARK + word`` (kept in
the postings, left out of lengths, searched only by a query made of stopwords alone); any other
word is stemmed by the language's Snowball stemmer (PyStemmer). CJK bigrams are never stemmed,
whatever the language; zh, ja and ko have neither stemmer nor stopwords.

A query has no language: each query word is stemmed by every language of the artifact and keeps
its distinct forms (``query_terms``).

``kb-unicode-3`` first joins a word that marks letters inside it with square
brackets, as command references mark a menu's accelerator key (``E[x]tract``, ``[c]reate``): a
bracketed run of one to three letters followed by a word character loses its brackets
(``_unmark``), so the word is indexed and searched as written without them (``extract``,
``create``). A mark at a word's end (``Sav[e]``) is left alone, as code's ``a[i]`` is. Artifacts
of ``kb-unicode-2`` are searched as they were analysed, without this.

``kb-unicode-1`` (format 1 artifacts) is the same tokenizer with no stemming and no stopwords.

The builder records ``Analyzer.params()`` in the artifact (languages, stemmer names and the
PyStemmer version, the stopword lists) and the runtime rebuilds the analyzer from them with
``Analyzer.from_params``, refusing names, versions or stemmers it does not know, so the query
side always analyzes exactly as the index side did.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import cached_property, lru_cache
from typing import NamedTuple

from kb.common.errors import UnsupportedVersion

ANALYZER_NAME = "kb-unicode"
ANALYZER_VERSION = 3
ANALYZER_VERSIONS = (1, 2, 3)  # the versions from_params rebuilds
FORMS_CACHE = 65536  # query-side words whose forms an analyzer remembers
STOP_MARK = "~"  # a stopword occurrence's term is "~" + the word: never a word character, so never a word's term

# Language code -> Snowball stemmer (PyStemmer's name), None: no stemmer and no stopwords (CJK
# text is bigrams). Every language with a stemmer has a stopword list in formats/stopwords.py.
LANGUAGES: dict[str, str | None] = {
    "da": "danish", "de": "german", "en": "english", "es": "spanish", "fr": "french", "it": "italian",
    "nl": "dutch", "no": "norwegian", "pt": "portuguese", "ru": "russian", "sv": "swedish", "tr": "turkish",
    "ja": None, "ko": None, "zh": None,
}  # fmt: skip

CJK_RANGES = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # Han extension A
    "\u4e00-\u9fff"  # Han
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # Han compatibility
    "\U00020000-\U0003134f"  # Han extensions B..G
)
# CJK_RANGES as sorted edges [first, last + 1, ...]: a code point is CJK when an odd number of
# edges lie at or below it. ``has_cjk`` starts with these because compiling the pattern costs
# milliseconds a one-shot search should not pay (``SCANS_BEFORE_PATTERN``).
_CJK_EDGES = tuple(e for a, b in re.findall("(.)-(.)", CJK_RANGES) for e in (ord(a), ord(b) + 1))
_WORD = re.compile(r"\w+")
# ASCII text, as UTF-8 bytes: A-Z lowercased, every non-word character a space, bytes >= 0x80
# (parts of non-ASCII characters) kept as they are. One bytes.translate, then a split, gives
# exactly ``_WORD.findall`` of the lowercased text, several times faster (str.translate with a
# table is about ten times slower than bytes.translate).
_WORD_BYTES = bytes(c if c >= 128 else (c | 0x20 if 65 <= c <= 90 else c) if _WORD.fullmatch(chr(c)) else 32 for c in range(256))
_WORD_BYTES_LINES = _WORD_BYTES[:10] + b"\n" + _WORD_BYTES[11:]  # the same, with newlines kept
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
_MARKED = re.compile(r"\[([^\W\d_]{1,3})\](?=\w)")  # E[x]tract, [c]reate: letters marked inside a word (version 3)


def _unmark(text: str) -> str:
    """``text`` with the brackets of letters marked inside a word removed (``_MARKED``)."""
    return _MARKED.sub(r"\1", text) if "[" in text else text


@lru_cache(maxsize=None)
def _cjk_patterns() -> tuple[re.Pattern, re.Pattern]:
    """(has-CJK, split-on-CJK-runs), compiled on first use: ~3 ms that ASCII queries never need."""
    return re.compile(f"[{CJK_RANGES}]"), re.compile(f"([{CJK_RANGES}]+)")


class AnalyzerError(UnsupportedVersion):
    """An analyzer this kb cannot rebuild: unknown name or version, or a stemmer it lacks (exit 4)."""


def _stemmer_module():
    """PyStemmer's module, or AnalyzerError when it is not installed."""
    try:
        import Stemmer
    except ImportError:
        raise AnalyzerError("PyStemmer is not installed; this artifact's analyzer needs it (pip install PyStemmer)") from None
    return Stemmer


@lru_cache(maxsize=None)
def stemmer_library() -> str:
    """"PyStemmer <version>" (what the artifact records), or AnalyzerError when it is not installed."""
    from importlib.metadata import version

    _stemmer_module()
    return f"PyStemmer {version('PyStemmer')}"


class _AnalyzerFields(NamedTuple):  # not a frozen dataclass: start-up cost (bench/startup_records.py)
    languages: tuple[str, ...] = ()
    stopwords: tuple[tuple[str, tuple[str, ...]], ...] = ()
    cjk_bigrams: bool = True
    max_term_chars: int = 64
    version: int = ANALYZER_VERSION


class Analyzer(_AnalyzerFields):  # a subclass, so that it has a __dict__ for its cached stemmers and sets
    """``languages``: the codes (``LANGUAGES``) whose stemmers and stopwords apply, sorted;
    ``stopwords``: (code, sorted words) per language with a list. Version 1 ignores both."""

    @classmethod
    def for_languages(cls, languages) -> "Analyzer":
        """The current analyzer for ``languages``, with kb's stopword lists."""
        from .stopwords import STOPWORDS

        langs = tuple(sorted(set(languages)))
        unknown = [lang for lang in langs if lang not in LANGUAGES]
        if unknown:
            raise AnalyzerError(f"unknown language {unknown[0]!r}; known: {', '.join(sorted(LANGUAGES))}")
        return cls(langs, tuple((lang, STOPWORDS[lang]) for lang in langs if lang in STOPWORDS))

    def params(self) -> dict:
        d = {"name": ANALYZER_NAME, "version": self.version, "cjk_bigrams": self.cjk_bigrams, "max_term_chars": self.max_term_chars}
        if self.version >= 2:
            stemmers = {lang: LANGUAGES[lang] for lang in self.languages}
            d["languages"] = list(self.languages)
            d["stemmers"] = stemmers
            d["stemmer_library"] = stemmer_library() if any(stemmers.values()) else None
            d["stopwords"] = {lang: list(words) for lang, words in self.stopwords}
        else:
            d.update(stem=None, stopwords=[])
        return d

    @classmethod
    def from_params(cls, params: dict) -> "Analyzer":
        version = params.get("version")
        if params.get("name") != ANALYZER_NAME or version not in ANALYZER_VERSIONS:
            raise AnalyzerError(
                f"unknown analyzer {params.get('name')}-{version}; this kb knows {ANALYZER_NAME}-{'/'.join(map(str, ANALYZER_VERSIONS))}"
            )
        common = {"cjk_bigrams": bool(params["cjk_bigrams"]), "max_term_chars": int(params["max_term_chars"]), "version": version}
        if version == 1:
            if params.get("stem") is not None or params.get("stopwords"):
                raise AnalyzerError(f"unknown stemmer {params.get('stem')!r}")  # porter-lite is gone; no artifact used it
            return cls(**common)
        langs = tuple(params.get("languages") or ())
        stemmers = params.get("stemmers") or {}
        for lang in langs:
            name = stemmers.get(lang)
            if name is None:
                continue
            Stemmer = _stemmer_module()
            if name not in Stemmer.algorithms():
                raise AnalyzerError(f"unknown stemmer {name!r} for language {lang!r}; this kb's {stemmer_library()} has {', '.join(Stemmer.algorithms())}")
        stop = tuple((lang, tuple(words)) for lang, words in sorted((params.get("stopwords") or {}).items()))
        return cls(langs, stop, **common)._with_stemmers(stemmers)

    def prepare(self) -> "Analyzer":
        """Build the stemmers and stopword sets now (before the builder forks its workers)."""
        self._stemmers, self._stop_sets
        return self

    def _with_stemmers(self, stemmers: dict) -> "Analyzer":
        """Remember the stored stemmer names (an artifact says which algorithm each language used)."""
        self._stemmer_names = {lang: stemmers.get(lang) for lang in self.languages}
        return self

    # --- words: the tokenizer, the same in every version ---------------------------------------
    def words(self, text: str) -> list[str]:
        """Normalised, casefolded words, CJK runs as bigrams, before the length limit, stemming
        and stopwords (``finish``). The builder finishes each distinct word once."""
        if self.version >= 3:
            text = _unmark(text)
        if text.isascii():  # lowercase and blank the non-word characters in one bytes.translate
            return text.encode("ascii").translate(_WORD_BYTES).decode("ascii").split()
        text = _normalize(text)
        if self.cjk_bigrams and has_cjk(text):
            return _cjk_words(text)
        return _WORD.findall(text)

    def blanked_lines(self, text: str) -> list[str] | None:
        """ASCII text's lines as ``words`` reads them: lowercased, every non-word character a
        space, so that a word's whole-word occurrences are those of " word " in " line "; None
        for other text (normalisation may change lengths)."""
        if not text.isascii():
            return None
        if self.version >= 3:
            text = _unmark(text)
        return text.encode("ascii").translate(_WORD_BYTES_LINES).decode("ascii").split("\n")

    def words_by_line(self, text: str, keep=None) -> list[list[str]]:
        """``words`` of each line of ``text`` (split at \\n), normalising the text once: ASCII
        text by one bytes.translate that keeps the newlines, other text by one NFKC + casefold
        (neither crosses a line: \\n is a starter that composes with nothing). ``keep``, when
        given, is asked of each normalised line first: a line it refuses gets no words."""
        blanked = self.blanked_lines(text)
        if blanked is not None:
            return [line.split() if keep is None or keep(line) else [] for line in blanked]
        text = _normalize(_unmark(text) if self.version >= 3 else text)
        lines = text.split("\n")
        split = _cjk_words if self.cjk_bigrams and has_cjk(text) else _WORD.findall  # after NFKC, as ``words`` looks
        return [split(line) if keep is None or keep(line) else [] for line in lines]

    def index_words(self, text: str) -> list[str] | list[bytes]:
        """``words`` as the builder reads them, as UTF-8 bytes (str where CJK bigrams are made).
        Non-word characters become spaces (the few distinct non-ASCII ones by ``str.replace``,
        the ASCII ones by one table that also lowercases), then ``bytes.split`` cuts the words:
        no str per word, and no regex over the text. Decode the distinct ones before ``finish``."""
        if self.version >= 3:
            text = _unmark(text)
        if text.isascii():
            return text.encode("ascii").translate(_WORD_BYTES).split()
        text = _normalize(text)
        chars = set("".join(_NON_ASCII_RUN.findall(text)))
        if self.cjk_bigrams and chars and has_cjk("".join(chars)):
            return _cjk_words(text)
        for c in chars:
            if not _WORD.match(c):
                text = text.replace(c, " ")
        return text.encode("utf-8").translate(_WORD_BYTES).split()

    def _cut(self, words: list[str]) -> list[str]:
        limit = self.max_term_chars
        return [w[:limit] for w in words] if words and max(map(len, words)) > limit else list(words)

    # --- index side ------------------------------------------------------------------------------
    def finish(self, words: list[str], language: str | None = None) -> list[str]:
        """The term each word of a document in ``language`` becomes, aligned with ``words``: cut
        to ``max_term_chars``, then ``STOP_MARK + word`` for a stopword, else the stem (CJK
        bigrams and words of languages without a stemmer stay as they are)."""
        out = self._cut(words)
        if self.version < 2 or language is None:
            return out
        stop = self._stop_sets.get(language, frozenset())
        stem = self._stemmers.get(language)
        if not stop and stem is None:
            return out
        stems = stem.stemWords(out) if stem is not None else out
        mark = STOP_MARK
        return [mark + w if w in stop else s if w.isascii() or not has_cjk(w) else w for w, s in zip(out, stems)]

    # --- query side ------------------------------------------------------------------------------
    def forms(self, word: str) -> tuple[tuple[str, ...], str | None]:
        """(the distinct terms ``word`` is in the artifact's languages where it is no stopword,
        its stopword term if it is one in some language). ``word`` is one of ``words``'s.
        Memoised: snippets analyze every line of every result shown."""
        cache = self._forms_cache
        hit = cache.get(word)
        if hit is not None:
            return hit
        w = word[: self.max_term_chars]
        if self.version < 2 or not self.languages or (not w.isascii() and has_cjk(w)):
            out = (w,), None
        else:
            content, stopped = [], False
            for lang in self.languages:
                if w in self._stop_sets.get(lang, ()):
                    stopped = True
                    continue
                stem = self._stemmers.get(lang)
                content.append(stem.stemWord(w) if stem is not None else w)
            out = tuple(dict.fromkeys(content)), (STOP_MARK + w if stopped else None)
        if len(cache) >= FORMS_CACHE:
            cache.clear()
            self._term_words.clear()
        cache[word] = out
        for t in out[0] if out[1] is None else (*out[0], out[1]):
            self._term_words.setdefault(t, set()).add(word)
        return out

    def term_hits(self, words: set[str], want: set[str]) -> dict[str, set[str]]:
        """For each of ``words`` whose terms (as ``terms`` gives them) meet ``want``: those terms.
        Each word is analysed once per process; after that a word is found through the terms it
        has (the memo's reverse side), so a passage costs set operations, not a loop over its words."""
        cache, index = self._forms_cache, self._term_words
        out: dict[str, set[str]] = {}
        size = len(cache)
        for w in words.difference(cache):  # a dict: membership tests, not a walk over the memo
            forms, stop = self.forms(w)
            got = want.intersection(forms)
            if stop is not None and stop in want:
                got.add(stop)
            if got:
                out[w] = got
            if len(cache) < size:  # the memo was emptied on the way: the reverse side lost words
                return {w: got for w in words if (got := want.intersection(self.terms(w)))}
            size = len(cache)
        for t in want:
            for w in index.get(t, set()).intersection(words):
                out.setdefault(w, set()).add(t)
        return out

    def query_words(self, text: str) -> list[tuple[str, ...]]:
        """The words a query searches, each as its terms. Version 2: each word's distinct forms
        over the artifact's languages (one on an artifact of one language), repeats across words
        kept (a repeated query word counts again, as in Lucene). A word that is a stopword in any
        of the languages is left out, unless every word is one: then every word is searched by
        all its forms, stopword term included, so ``where`` alone or ``the who`` still finds
        something. Version 1: each distinct term, first-seen order."""
        if self.version < 2:
            return [(t,) for t in dict.fromkeys(self.terms(text))]
        content, every = [], []
        for w in self.words(text):
            forms, stop = self.forms(w)
            if stop is None:
                content.append(forms)
            else:
                every.append((*forms, stop))
        return content or every

    def query_stopwords(self, text: str) -> int | None:
        """How many of a query's words are a stopword in one of the artifact's languages; None
        where the analyzer has no stopword list (version 1, or only CJK languages), which cannot
        tell a keyword query from a sentence."""
        if self.version < 2 or not self.stopwords:
            return None
        return sum(self.forms(w)[1] is not None for w in self.words(text))

    def query_terms(self, text: str) -> list[str]:
        """The terms a query searches: its ``query_words``' terms, in order."""
        return [t for word in self.query_words(text) for t in word]

    def terms(self, text: str) -> list[str]:
        """Every term a text's words can match, in order (for snippets and highlighting: a line
        shows a query term when its own terms include it). Version 1: the indexed terms."""
        words = self.words(text)
        if self.version < 2 or self._plain:
            return self._cut(words)
        out = []
        for w in words:
            forms, stop = self.forms(w)
            out += forms
            if stop is not None:
                out.append(stop)
        return out

    # --- stemmers and stopword sets, built on first use ---------------------------------------------
    @cached_property
    def _plain(self) -> bool:
        """No language stems or has stopwords (zh, ja, ko only): every word is its own term."""
        return not self.stopwords and not any(self.__dict__.get("_stemmer_names", {lang: LANGUAGES.get(lang) for lang in self.languages}).values())

    @cached_property
    def _forms_cache(self) -> dict:
        return {}

    @cached_property
    def _term_words(self) -> dict[str, set[str]]:
        """term -> the memoised words that have it (``forms``'s reverse side, for ``term_hits``)."""
        return {}

    @cached_property
    def _stop_sets(self) -> dict[str, frozenset]:
        return {lang: frozenset(words) for lang, words in self.stopwords}

    @cached_property
    def _stemmers(self) -> dict:
        names = self.__dict__.get("_stemmer_names") or {lang: LANGUAGES.get(lang) for lang in self.languages}
        if not any(names.values()):
            return {}
        Stemmer = _stemmer_module()

        # no cache (0): the builder stems each distinct word once, where PyStemmer's default cache slows it down
        return {lang: Stemmer.Stemmer(name, 0) for lang, name in names.items() if name is not None}


def _normalize(text: str) -> str:
    if text.isascii():
        return text.lower()  # NFKC is the identity on ASCII and casefold equals lower there
    import unicodedata

    return unicodedata.normalize("NFKC", text).casefold()


def _cjk_words(text: str) -> list[str]:
    """Words of normalised text, CJK runs inside them as bigrams."""
    cjk_re = _cjk_patterns()[0]
    out = []
    for word in _WORD.findall(text):
        if cjk_re.search(word):
            out.extend(_split_cjk(word))
        else:
            out.append(word)
    return out


def has_cjk(text: str) -> bool:
    """True when ``text`` holds any Han, Hiragana, Katakana or Hangul character (CJK_RANGES).
    The first SCANS_BEFORE_PATTERN non-ASCII texts of a process are scanned in Python (a few
    microseconds to tens for a chunk); later ones by the compiled pattern, once it has paid off."""
    global _scans
    if text.isascii():
        return False
    if _scans >= SCANS_BEFORE_PATTERN:
        return _cjk_patterns()[0].search(text) is not None
    _scans += 1  # a race between threads only moves the switch by a text or two
    edges, first = _CJK_EDGES, _CJK_EDGES[0]
    return any(o >= first and bisect_right(edges, o) & 1 for o in map(ord, set(text)))


SCANS_BEFORE_PATTERN = 256  # ~256 x 10-20 us of scans ~ the pattern's compile (4-7 ms)
_scans = 0


def _split_cjk(word: str) -> list[str]:
    out = []
    for i, part in enumerate(_cjk_patterns()[1].split(word)):
        if not part:
            continue
        if i % 2 == 0:  # non-CJK piece between CJK runs
            out.append(part)
        elif len(part) == 1:
            out.append(part)
        else:
            out.extend(part[j : j + 2] for j in range(len(part) - 1))
    return out
