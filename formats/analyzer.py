"""The text analyzer shared by builder and runtime: text -> terms for BM25.

``kb-unicode-1``: NFKC normalisation, then casefold, then Unicode word runs (``\\w+``, i.e. letters,
digits, marks and underscore; punctuation and hyphens split words). Inside a run, characters of
CJK scripts (Han, Hiragana, Katakana, Hangul) become overlapping character bigrams (a lone CJK
character stays a unigram); the rest of the run is one term. No stemming and no stopwords by
default; the optional ``stem="porter-lite"`` strips a few English suffixes.

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
        # NFKC is the identity on ASCII and casefold equals lower there: skip the general path.
        if text.isascii():
            text = text.lower()
        else:
            import unicodedata

            text = unicodedata.normalize("NFKC", text).casefold()
        cjk_re = _cjk_patterns()[0] if self.cjk_bigrams and not text.isascii() else None
        if cjk_re is not None and cjk_re.search(text):
            out = []
            for word in _WORD.findall(text):
                if cjk_re.search(word):
                    out.extend(_split_cjk(word))
                else:
                    out.append(word)
        else:
            out = _WORD.findall(text)
        limit = self.max_term_chars
        if out and max(map(len, out)) > limit:
            out = [t[:limit] for t in out]
        if self.stem:
            out = [_stem(t) for t in out]
        if self.stopwords:
            stop = set(self.stopwords)
            out = [t for t in out if t not in stop]
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
