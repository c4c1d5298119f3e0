"""What a search produces, as immutable records: candidates between the stages, then results.

After fusion each candidate is a ``Candidate``; the rerank stage returns new candidates, never
changes old ones. ``Response`` holds the final ``Result``s and ``Notice``s; runtime/output.py is
the one place they become JSON or text.
"""

from __future__ import annotations

from typing import NamedTuple

from .fusion import Fused

SCHEMA_VERSION = 3  # of the JSON a search returns (runtime/output.py); 2: each result names its artifact, and the top-level artifact is a list for a set; 3: a result's artifact is its name, artifact_id its id


# NamedTuples, not frozen dataclasses: start-up cost (bench/startup_records.py).
class RerankScore(NamedTuple):
    logit: float
    probability: float
    retrieval_weight: float  # share of the (min-max normalised) fused score in the final score
    rerank_weight: float


class RerankInfo(NamedTuple):
    model: str
    candidates: int  # how many fused candidates were to be rescored
    scored: int
    skipped: int  # left unscored by --budget-ms
    budget_ms: float | None


class Candidate(NamedTuple):
    chunk: int
    score: float
    score_kind: str  # rrf | rerank | bm25 | cosine
    fused: Fused
    rerank: RerankScore | None = None
    also_matched: int | None = None  # --group doc: other matching chunks of the document
    more_sections: tuple[int, ...] | None = None  # --group diverse: the document's other matching chunks, not shown
    confidence: float | None = None  # P(relevant), runtime/confidence.py
    features: tuple | None = None  # what the confidence was computed from (runtime/confidence.py FEATURES)


class Notice(NamedTuple):
    kind: str  # low_confidence | no_match | below_min_score | phrase_not_found | empty_scope | unknown_field | no_vectors | dense_skipped | no_reranker | no_tag_match | stale_index
    message: str
    reason: str | None = None
    files: tuple[str, ...] | None = None


class Explain(NamedTuple):
    legs: dict  # leg name -> {"rank", "raw_score", "rrf"}
    bonus: float
    rrf: float
    rerank: RerankScore | None
    confidence_features: dict | None = None


class PathContext(NamedTuple):
    """A kb.toml [contexts] entry a result's path is under."""

    prefix: str
    description: str


class MoreSection(NamedTuple):
    """Another matching chunk of a result's document, not shown (--group diverse)."""

    chunk_id: int
    section: str
    lines: tuple[int, int]


class Result(NamedTuple):
    rank: int
    score: float
    score_kind: str
    confidence: float  # estimated probability that the result's document answers the query
    path: str
    section: str
    lines: tuple[int, int]
    status: str
    tags: tuple[str, ...]
    path_contexts: tuple[PathContext, ...]  # the [contexts] the path is under, most specific first
    chunk_id: int
    chunk_key: str | None  # stable across rebuilds while the chunk's text and path are (kb get KEY); None: an artifact built before keys
    doc_id: str
    title: str
    artifact: str  # the name of the artifact holding the chunk (chunk_id counts within it): -i's path, or its set file entry
    artifact_id: str  # that artifact's content id
    text: str | None = None  # --full
    snippet: str | None = None  # otherwise
    also_matched: int | None = None
    more_sections: tuple[MoreSection, ...] | None = None  # --group diverse, on a document's best result: its other matching chunks, not shown
    explain: Explain | None = None


class Response(NamedTuple):
    query: object  # the Query answered (runtime/search.py)
    results: tuple[Result, ...]
    notices: tuple[Notice, ...]
    tag_contexts: dict
    reranked: bool
    timings_ms: dict
    rerank: RerankInfo | None = None
    parsed: object = None  # the query's syntax, parsed (runtime/query_syntax.py ParsedQuery)

    def with_min_confidence(self, floor: float | None) -> Response:
        """The results down to the last whose confidence is at least ``floor``: a prefix of the
        ranking (confidence never rises with rank: runtime/confidence.py monotone). When that
        leaves none of some results, a ``below_min_score`` notice says so."""
        if floor is None:
            return self
        kept = 0
        while kept < len(self.results) and self.results[kept].confidence >= floor:
            kept += 1
        resp = self._replace(results=self.results[:kept])
        if self.results and not kept:
            top = self.results[0].confidence
            n = len(self.results)
            resp = resp.with_notice(Notice("below_min_score", f"--min-score {floor:g} left none of the {n} result{'' if n == 1 else 's'}: the top result's confidence is {top:.2f}"))
        return resp

    def with_notice(self, notice: Notice | None) -> Response:
        return self if notice is None else self._replace(notices=self.notices + (notice,))

    def with_notices(self, notices) -> Response:
        return self._replace(notices=self.notices + tuple(notices)) if notices else self
