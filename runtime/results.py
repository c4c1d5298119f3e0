"""What a search produces, as immutable records: candidates between the stages, then results.

After fusion each candidate is a ``Candidate``; the rerank stage returns new candidates, never
changes old ones. ``Response`` holds the final ``Result``s and ``Notice``s; runtime/output.py is
the one place they become JSON or text.
"""

from __future__ import annotations

from typing import NamedTuple

from .fusion import Fused

SCHEMA_VERSION = 3  # of the JSON a search returns (runtime/output.py); 2: each result names its artifact, and the top-level artifact is a list for a set; 3: a result's artifact is its name, artifact_id its id


# NamedTuples, not frozen dataclasses: every one-shot kb creates these classes at import, and a
# frozen dataclass costs ~0.7 ms to create, a NamedTuple ~0.15 (bench/startup_records.py).
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
    confidence: float | None = None  # P(relevant), runtime/confidence.py
    features: tuple | None = None  # what the confidence was computed from (runtime/confidence.py FEATURES)


class Notice(NamedTuple):
    kind: str  # low_confidence | no_vectors | dense_skipped | no_reranker | no_tag_match | stale_index
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
    doc_id: str
    title: str
    artifact: str  # the name of the artifact holding the chunk (chunk_id counts within it): -i's path, or its set file entry
    artifact_id: str  # that artifact's content id
    text: str | None = None  # --full
    snippet: str | None = None  # otherwise
    also_matched: int | None = None
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
        """Only the results whose confidence is at least ``floor`` (ranks kept as they were)."""
        return self if floor is None else self._replace(results=tuple(r for r in self.results if r.confidence >= floor))

    def with_notice(self, notice: Notice | None) -> Response:
        return self if notice is None else self._replace(notices=self.notices + (notice,))

    def with_notices(self, notices) -> Response:
        return self._replace(notices=self.notices + tuple(notices)) if notices else self
