"""BM25 as kb scores it: one small function per formula, shared by builder, runtime and tests.

Variant: Lucene's BM25 (Robertson-Sparck Jones idf with +1 inside the log, so idf is never
negative; no (k1 + 1) factor in the numerator, a constant that changes no ranking), as in bm25s
``method="lucene"``; see Kamphuis et al., "Which BM25 Do You Mean?"
(ECIR 2020). Fields: a chunk's title and section path count above its body, BM25F-style, by
weighting term frequencies and lengths before saturation:

    tf'(t, c)  = tf_body + title_weight * tf_title + section_weight * tf_section
    len'(c)    = len_body + title_weight * len_title + section_weight * len_section
    score(q,c) = sum over t in q (repeats count) of  idf(t) * tf' / (tf' + k1 * (1 - b + b * len'/avglen'))
    idf(t)     = ln(1 + (N - df + 0.5) / (df + 0.5))

A chunk's score then adds ``document_weight`` x its document's own score, the same formula with
the document's tf' and len' summed over its chunks and avglen' over documents:

    final(q,c) = score(q,c) + document_weight * score(q, doc(c))

(0.25 and the choices below: bench/notes/2026-12-01-lexical-bm25.md). Chunks are scored, but N
and df count documents (format 2: ``terms.doc_df``): a document cut into many chunks is one
document to idf, as it is to bm25s or Lucene over whole documents. Stopword terms count in no
length. Format 1 artifacts: N and df over chunks, distinct query terms.

With the title, section and document weights 0 this is plain Lucene BM25 over the body.

Impacts (format 3). Everything but idf is fixed when the artifact is built, so the builder stores
each posting's saturated tf (a number in (0, 1)) quantized to one byte, for the chunk and for the
document, and a query costs, per term, one idf and one scaled scatter-add of those bytes:

    impact(t, c) = max(1, round(255 * tf'/(tf' + k1 (1 - b + b len'/avglen'))))     (u8)
    score(q, c)  = sum over t in q of  idf(t) * impact(t, c) / 255

idf stays out of the stored bytes so that statistics can be combined at query time. Rounding
moves a term's contribution by at most idf/510 (nDCG@10 on the dev sets: bench/notes/
2026-12-01-lexical-bm25.md); an impact is never 0, so every posting still matches.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kb.common.settings import setting, settings_tuple

from .layout import IMPACT_DTYPE


@settings_tuple  # a NamedTuple: a one-shot kb creates it at import (common/settings.py)
class BM25Params(NamedTuple):
    """kb.toml [bm25]; stored in the artifact's meta."""

    k1: float = setting(1.2, "Term-frequency saturation: 0 = presence only, larger = repeated terms keep counting longer.", minimum=0.0, maximum=10.0)
    b: float = setting(0.75, "Length normalisation: 0 = none, 1 = full.", minimum=0.0, maximum=1.0)
    title_weight: float = setting(2.0, "A title term counts as this many body terms (0 = titles are not indexed).", minimum=0.0, maximum=100.0)
    section_weight: float = setting(1.5, "A section-path term counts as this many body terms (0 = headings are not indexed).", minimum=0.0, maximum=100.0)
    document_weight: float = setting(0.25, "A chunk's score adds this times its whole document's BM25: 0 = the chunk alone, larger = documents that match as a whole rank their chunks higher.", minimum=0.0, maximum=10.0)

    def params(self) -> dict:
        return self._asdict()


def idf(df, n_docs: int):
    """Lucene idf: ln(1 + (N - df + 0.5) / (df + 0.5))."""
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


IMPACT_LEVELS = 255  # format 3: a saturated tf in (0, 1) is stored as one byte, 1..255


def quantize_impacts(saturated) -> np.ndarray:
    """Saturated tf values in [0, 1) as format 3's u8 impacts: round(255 x), at least 1."""
    q = np.rint(np.asarray(saturated, dtype=np.float64) * IMPACT_LEVELS)
    return np.clip(q, 1, IMPACT_LEVELS).astype(IMPACT_DTYPE)


def idf_scalar(df: int, n_docs: int) -> float:
    """``idf`` of one term, in plain floats (the query side computes one per term)."""
    return math.log1p((n_docs - df + 0.5) / (df + 0.5))


def tf_component(tf, length, avg_length: float, k1: float, b: float):
    """Saturated, length-normalised term frequency: tf / (tf + k1 (1 - b + b len/avglen))."""
    tf = np.asarray(tf, dtype=np.float64)
    norm = k1 * (1.0 - b + b * np.asarray(length, dtype=np.float64) / avg_length)
    return tf / (tf + norm)


RESCALE_CEILING = IMPACT_LEVELS - 0.25  # impact 255 read as this many 255ths: a finite tf (255/255 would be an infinite one)
STEP_DENOMINATOR = 8  # field weights that are multiples of 1/8 give tf' values on a known grid


def tf_step(title_weight: float, section_weight: float) -> float | None:
    """The spacing of the weighted tf' values a build can produce (a body word counts 1, a title
    word ``title_weight``, a heading word ``section_weight``): their greatest common divisor, when
    each is a multiple of 1/STEP_DENOMINATOR (defaults 2 and 1.5: 0.5); None otherwise."""
    from fractions import Fraction
    from math import gcd, lcm

    fr = [Fraction(1)]
    for w in (title_weight, section_weight):
        if w > 0:
            f = Fraction(w).limit_denominator(STEP_DENOMINATOR)
            if float(f) != w:
                return None
            fr.append(f)
    den = lcm(*(f.denominator for f in fr))
    return gcd(*(f.numerator * (den // f.denominator) for f in fr)) / den


def recover_tf(impacts, length, avg: float, k1: float, b: float, step: float | None = None, guess=None) -> np.ndarray:
    """The weighted tf' behind format 3 impacts stored under the average length ``avg``: where
    ``guess`` (e.g. a document's chunks' tf' summed) quantizes to the stored byte, the guess;
    else the multiple of ``step`` nearest the byte's centre, where it quantizes to the byte; else
    the centre itself (the inverse of ``tf_component`` at the posting's own length). The byte
    pins tf' down exactly while its interval holds one multiple of ``step``: with the default
    weights, tf' up to about 10 x k1 (tests/formats/test_bm25_rescale.py)."""
    impacts = np.asarray(impacts)
    length = np.asarray(length, dtype=np.float64)
    sat = np.minimum(impacts.astype(np.float64), RESCALE_CEILING) / IMPACT_LEVELS
    tf = sat * k1 * (1.0 - b + b * length / avg) / (1.0 - sat)

    def fits(x):
        return quantize_impacts(tf_component(x, length, avg, k1, b)) == impacts

    if step:
        snapped = np.maximum(np.rint(tf / step), 1.0) * step
        tf = np.where(fits(snapped), snapped, tf)
    if guess is not None:
        tf = np.where(fits(guess), guess, tf)
    return tf
