"""Each document's language, for the analyzer's stemmer and stopwords (kb.toml ``[analyzer]``).

A cascade, cheapest first, on a prefix of each document (title and text):

1. Script: a prefix mostly in CJK characters is ja (any kana), ko (any Hangul) or zh.
2. Stopword vote on ``SAMPLE_CHARS``, then on ``LONG_SAMPLE_CHARS`` when that is not enough: the
   language whose stopword list (formats/stopwords.py) covers most words wins when it is
   confident: at least ``VOTE_MIN_HITS`` hits and ``VOTE_MARGIN`` times the runner-up, or, where
   lists share words (Dutch "of", "in", "is"), a clear lead in the words only its list has.
   This settles 5,182 of SciFact's 5,183 abstracts, every Cranfield and CISI document.
3. A prefix with fewer than ``WEAK_HITS`` stopwords of any language is not prose to judge (code,
   a list of names, a config file, a one-line page): the majority's language among the
   alphabetic ones (``_alphabetic_majority``: English pages beside a majority of Chinese
   passages stay English).
4. py3langid (a naive Bayes model inside its wheel, BSD), restricted to the candidate languages,
   for the prose the vote leaves undecided; loaded only when its answers could change the
   outcome (below), which costs about a second.

Then languages holding fewer than ``FOLD_SHARE`` of the documents, or a single document, are
folded into the majority (an alphabetic language into the alphabetic majority): in a
one-language corpus those are misreads (992 Hugo pages: fr 6, nl, da and it 1 each by the vote,
all English; in a small corpus, a JSON or YAML file of names). The model is skipped when no undecided document could lift a language above that share,
since every undecided one then ends in the majority whatever the model says.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

import numpy as np

from kb.formats.analyzer import LANGUAGES, Analyzer, _cjk_patterns
from kb.formats.stopwords import STOPWORDS

from . import shards

SAMPLE_CHARS = 300  # of title + text: enough words for most votes, short enough to be cheap
LONG_SAMPLE_CHARS = 3000  # the second look, for prefixes that said too little
CJK_SHARE = 0.3  # a prefix whose word characters are at least this share CJK is a CJK document
VOTE_MIN_HITS = 3
VOTE_MARGIN = 1.5
WEAK_HITS = 6  # fewer stopwords than this in the long sample: not prose, the majority's
FOLD_SHARE = 0.01  # languages with fewer documents than this share go to the majority,
FOLD_MIN = 2  # and so do languages of a single document (in a small corpus, mostly misreads)
AUTO = "auto"
DEFAULT = "en"  # when no document says anything
CJK = ("ja", "ko", "zh")  # decided by script (step 1), never by the stopword vote


def document_languages(docs, wanted: tuple[str, ...], jobs: int = 1, sizes=None) -> list[str]:
    """The language code of each document. ``wanted``: ("auto",) for every language kb knows,
    else the candidate codes (one code: no detection). With ``jobs`` > 1 and each document's
    ``sizes`` (bytes, to cut shards on), the votes run over document shards in forked workers
    (builder/shards.py); each document's vote is its own, so the result is the same."""
    candidates = tuple(sorted(LANGUAGES)) if wanted == (AUTO,) else tuple(sorted(set(wanted)))
    if len(candidates) == 1 or not docs:
        return [candidates[0]] * len(docs)
    vote = _Voter(candidates)

    def votes(lo: int, hi: int) -> list[tuple[str | None, int]]:
        out = []
        for i in range(lo, hi):
            d = docs[i]
            head = d.title + "\n" + d.text
            lang, hits = vote(head[:SAMPLE_CHARS])
            if lang is None and len(head) > SAMPLE_CHARS:
                lang, hits = vote(head[:LONG_SAMPLE_CHARS])
            out.append((lang, hits))
        return out

    cuts = shards.bounds(np.minimum(sizes, LONG_SAMPLE_CHARS).tolist(), jobs) if jobs > 1 and sizes is not None else [0, len(docs)]
    langs: list[str | None] = []
    undecided: list[int] = []  # prose, but no clear winner
    weak: list[int] = []  # too few stopwords to judge: the majority's
    for lang, hits in chain.from_iterable(shards.map_shards(votes, cuts)):
        if lang is None:
            (undecided if hits >= WEAK_HITS else weak).append(len(langs))
        langs.append(lang)
    counts = Counter(lang for lang in langs if lang is not None)
    floor = fold_floor(len(docs))
    majority = _alphabetic_majority(counts, candidates)  # weak and undecided text is never in a CJK script
    for i in weak:
        langs[i] = majority
    others = max((n for lang, n in counts.items() if lang != majority), default=0)
    model_matters = undecided and (not counts or others + len(undecided) >= floor or counts[majority] < others + len(undecided))
    classify = _model(candidates) if model_matters else None
    for i in undecided:
        langs[i] = classify((docs[i].title + "\n" + docs[i].text)[:LONG_SAMPLE_CHARS]) if classify is not None else majority
    counts = Counter(langs)
    fold = {lang: _majority(counts, candidates) if lang in CJK else _alphabetic_majority(counts, candidates) for lang in counts}
    return [lang if counts[lang] >= floor else fold[lang] for lang in langs]


def fold_floor(documents: int) -> float:
    """The fewest documents a language needs to be one of the corpus's own (FOLD_SHARE, FOLD_MIN)."""
    return max(FOLD_SHARE * documents, FOLD_MIN)


def _alphabetic_majority(counts: Counter, order: tuple[str, ...]) -> str:
    """Where a document in an alphabetic script goes when its own language is not known or too
    rare: the most frequent alphabetic language, else English (when a candidate), else the
    most frequent of all. Never a CJK language by majority alone: a CJK majority (a corpus of
    Chinese passages beside English manual pages) would leave English pages unstemmed."""
    alphabetic = Counter({lang: n for lang, n in counts.items() if lang not in CJK})
    return _majority(alphabetic, order) or (DEFAULT if DEFAULT in order else None) or _majority(counts, order) or order[0]


def _majority(counts: Counter, order: tuple[str, ...]) -> str | None:
    """The most frequent language, ties to the first code; None when nothing is counted."""
    return max(order, key=lambda lang: (counts[lang], -order.index(lang))) if counts else None


class _Voter:
    """Script check, then the stopword vote: (language or None when not confident, stopword hits)."""

    def __init__(self, candidates: tuple[str, ...]):
        self.analyzer = Analyzer()
        self.cjk = [lang for lang in CJK if lang in candidates]
        self.voters = [lang for lang in candidates if lang in STOPWORDS]
        langs_of: dict[str, list[int]] = {}
        for j, lang in enumerate(self.voters):
            for w in STOPWORDS[lang]:
                langs_of.setdefault(w, []).append(j)
        self.langs_of = {w: tuple(js) for w, js in langs_of.items()}

    def __call__(self, sample: str) -> tuple[str | None, int]:
        if self.cjk and not sample.isascii():
            lang = self._script(sample)
            if lang is not None:
                return lang, 0
        n = len(self.voters)
        hits, own = [0] * n, [0] * n  # own: hits on words no other candidate's list has
        # map/filter/Counter run in C; Python loops only over the distinct language sets hit
        for js, k in Counter(filter(None, map(self.langs_of.get, self.analyzer.words(sample)))).items():
            for j in js:
                hits[j] += k
            if len(js) == 1:
                own[js[0]] += k
        total = sum(hits)
        if n == 0 or not total:
            return None, 0
        best = hits.index(max(hits))  # ties: the first code
        second = sorted(hits)[-2] if n > 1 else 0
        own[best], own_best = -1, own[best]
        own_second, own[best] = max(own, default=0), own_best
        confident = hits[best] >= VOTE_MIN_HITS and (hits[best] >= VOTE_MARGIN * second or (own[best] >= 2 and own[best] >= 2 * own_second))
        return (self.voters[best] if confident else None), total

    def _script(self, sample: str) -> str | None:
        cjk = _cjk_patterns()[0].findall(sample)
        if not cjk:  # most non-ASCII samples (an accent, a Greek letter): no letters to count
            return None
        if len(cjk) < CJK_SHARE * sum(c.isalnum() for c in sample):
            return None
        text = "".join(cjk)
        if "ja" in self.cjk and any("\u3040" <= c <= "\u30ff" or "\u31f0" <= c <= "\u31ff" for c in text):
            return "ja"
        if "ko" in self.cjk and any("\uac00" <= c <= "\ud7af" or "\u1100" <= c <= "\u11ff" or "\u3130" <= c <= "\u318f" for c in text):
            return "ko"
        return "zh" if "zh" in self.cjk else self.cjk[0]


def _model(candidates: tuple[str, ...]):
    """py3langid restricted to ``candidates``: a function sample -> code. Loading its model
    takes about a second, so it happens only here. None without py3langid (kb-build's extra):
    the undecided documents then go to the majority."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        return None

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=False)
    ident.set_languages(list(candidates))
    return lambda text: ident.classify(text)[0]
