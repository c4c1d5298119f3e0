"""The text analyzer shared by builder and runtime: text -> terms for BM25.

``kb-unicode-1``: NFKC normalisation, then casefold, then Unicode word runs (Python's ``\\w+``:
letters, digits and underscore; punctuation, hyphens and combining marks that NFKC does not
compose split words). Inside a run, characters of CJK scripts (Han, Hiragana, Katakana,
Hangul) become overlapping character bigrams (a lone CJK character stays a unigram); the rest
of the run is one term. No stemming and no stopwords by default; the optional
``stem="porter-lite"`` strips a few English suffixes.

The builder records ``Analyzer.params()`` in the artifact and the runtime rebuilds the analyzer
from them with ``Analyzer.from_params``, refusing names or versions it does not know, so the
query side always analyzes exactly as the index side did.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import lru_cache

ANALYZER_NAME = "kb-unicode"
ANALYZER_VERSION = 1

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
_WORD = re.compile(r"\w+")
# ASCII text: every non-word character becomes a space and ``str.split`` cuts the words, which
# gives exactly ``_WORD.findall`` about three times faster (str.translate has an ASCII fast path).
_ASCII_NONWORD = str.maketrans({c: " " for c in map(chr, range(128)) if not _WORD.fullmatch(c)})
# The same on UTF-8 bytes, lowercasing too, and keeping bytes >= 0x80 (parts of non-ASCII
# characters) as they are: one bytes.translate and no str object per word.
_WORD_BYTES = bytes(c if c >= 128 else (c | 0x20 if 65 <= c <= 90 else c) if _WORD.fullmatch(chr(c)) else 32 for c in range(256))
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")


@lru_cache(maxsize=None)
def _cjk_patterns() -> tuple[re.Pattern, re.Pattern]:
    """(has-CJK, split-on-CJK-runs), compiled on first use: ~3 ms that ASCII queries never need."""
    return re.compile(f"[{CJK_RANGES}]"), re.compile(f"([{CJK_RANGES}]+)")


_SUFFIXES = ("ingly", "edly", "ings", "ing", "ies", "ied", "es", "ed", "s")


class AnalyzerError(Exception):
    pass


@dataclass(frozen=True)
class Analyzer:
    cjk_bigrams: bool = True
    stem: str | None = None
    stopwords: tuple[str, ...] = ()
    max_term_chars: int = 64

    def params(self) -> dict:
        d = asdict(self)
        d["stopwords"] = list(self.stopwords)
        return {"name": ANALYZER_NAME, "version": ANALYZER_VERSION, **d}

    @classmethod
    def from_params(cls, params: dict) -> "Analyzer":
        if params.get("name") != ANALYZER_NAME or params.get("version") != ANALYZER_VERSION:
            raise AnalyzerError(
                f"unknown analyzer {params.get('name')}-{params.get('version')}; this kb knows {ANALYZER_NAME}-{ANALYZER_VERSION}"
            )
        if params.get("stem") not in (None, "porter-lite"):
            raise AnalyzerError(f"unknown stemmer {params.get('stem')!r}")
        return cls(
            cjk_bigrams=bool(params["cjk_bigrams"]),
            stem=params.get("stem"),
            stopwords=tuple(params.get("stopwords", ())),
            max_term_chars=int(params["max_term_chars"]),
        )

    def terms(self, text: str) -> list[str]:
        """All terms of ``text`` in order, repeats kept (term frequencies come from this)."""
        words = self.words(text)
        if not words or not (self.stem or self.stopwords or max(map(len, words)) > self.max_term_chars):
            return words
        return [t for t in self.finish(words) if t is not None]

    def words(self, text: str) -> list[str]:
        """The first half of ``terms``: normalised, casefolded words, CJK runs as bigrams, before
        the length limit, stemming and stopwords (``finish``). The builder finishes each distinct
        word once instead of every occurrence."""
        text = _normalize(text)
        if text.isascii():
            return text.translate(_ASCII_NONWORD).split()
        if self.cjk_bigrams and _cjk_patterns()[0].search(text):
            return _cjk_words(text)
        return _WORD.findall(text)

    def index_words(self, text: str) -> list[str] | list[bytes]:
        """``words`` as the builder reads them, as UTF-8 bytes (str where CJK bigrams are made).
        Non-word characters become spaces (the few distinct non-ASCII ones by ``str.replace``,
        the ASCII ones by one table that also lowercases), then ``bytes.split`` cuts the words:
        no str per word, and no regex over the text. Decode the distinct ones before ``finish``."""
        if text.isascii():
            return text.encode("ascii").translate(_WORD_BYTES).split()
        text = _normalize(text)
        chars = set("".join(_NON_ASCII_RUN.findall(text)))
        if self.cjk_bigrams and chars and _cjk_patterns()[0].search("".join(chars)):
            return _cjk_words(text)
        for c in chars:
            if not _WORD.match(c):
                text = text.replace(c, " ")
        return text.encode("utf-8").translate(_WORD_BYTES).split()

    def finish(self, words: list[str]) -> list[str | None]:
        """The second half of ``terms``, word by word: the term each word becomes (cut to
        ``max_term_chars``, stemmed), or None for a stopword. Aligned with ``words``."""
        limit = self.max_term_chars
        out = [w[:limit] for w in words] if words and max(map(len, words)) > limit else list(words)
        if self.stem:
            out = [_stem(t) for t in out]
        if self.stopwords:
            stop = set(self.stopwords)
            out = [None if t in stop else t for t in out]
        return out


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
    """True when ``text`` holds any Han, Hiragana, Katakana or Hangul character."""
    return not text.isascii() and _cjk_patterns()[0].search(text) is not None


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


def _stem(term: str) -> str:
    if not term.isascii() or len(term) <= 4:
        return term
    for suf in _SUFFIXES:
        if term.endswith(suf) and len(term) - len(suf) >= 3:
            return term[: -len(suf)]
    return term
