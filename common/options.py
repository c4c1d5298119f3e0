"""The search options: every ranking knob declared once, here.

Each field is one knob: its kb.toml key under ``[search]``, its type, range, default and a
one-line description. kb-build validates ``[search]`` against it (and stores the table in the
artifact as given); kb's ``search`` flags, the HTTP and MCP request fields and their
descriptions, and README.md's table are all derived from it. At query time the options are
resolved once: these defaults, then the artifact's ``[search]``, then the request's overrides.

Why the defaults are what they are: bench/notes/ (*-fusion-grid, *-lexical-bm25, *-reranker). The
seeds' RRF k = 60 with qmd's top-rank bonus (+0.05 / +0.02) left hybrid below its dense leg on
the Hugo fixture and CISI. With the stemmed BM25 leg of format 2, k = 20 left hybrid below the
dense leg on Hugo (0.672 vs 0.686) and k = 10 put it above both legs on all four English dev sets
(Hugo 0.713, Cranfield 0.408, CISI 0.447: bench/notes/2026-12-01-lexical-bm25.md).
The shipped cross-encoder did not improve nDCG@10 on the sets it did not train on, so rerank is
off unless asked for.
"""

from __future__ import annotations

from typing import NamedTuple

from .errors import UsageError
from .settings import check, setting, settings_of, settings_tuple

MODES = ("hybrid", "bm25", "vector")  # a search's mode: which legs run (not a [search] setting)
GROUPS = ("chunk", "doc")  # a search's grouping: one result per chunk, or the best chunk per document
MAX_TOP_K = 200  # results per search; also bounds the legs' depth
MAX_RERANK_TOP = 200  # candidates the cross-encoder rescores; its cost is linear in this
MAX_CONTEXT = 10  # neighbouring chunks on each side that a get returns
MAX_DOC_CHUNKS = 1000  # chunks of one document that a get returns
DEFAULT_DOC_CHUNKS = 200
MAX_GET_TARGETS = 100  # targets of one get (kb get TARGET..., targets of /get and multi_get)
MAX_GLOB_MATCHES = 1000  # documents one get's glob may match; a glob that matches more is refused
DEFAULT_GET_BYTES = 1 << 20  # bytes of text one get returns unless max_bytes says otherwise
MAX_GET_BYTES = 16 << 20
BLENDS = ("position", "sigmoid")


@settings_tuple  # a NamedTuple: a one-shot kb creates it at import (common/settings.py)
class SearchOptions(NamedTuple):
    default_limit: int = setting(10, "Results a search returns when it gives no -n/--top-k (top_k).", minimum=1, maximum=MAX_TOP_K, flag="")
    semantic_weight: float | None = setting(None, "Share of the dense legs in the fusion; the BM25 legs get the rest: 1.0 = meaning only, 0.0 = exact words only. Unset (the default; multilingual-e5-small: 0.5): each query's own, by its length in distinct content terms: 0.8 up to 4, falling to 0.45 at 20 or more.", minimum=0.0, maximum=1.0)
    rrf_k: float = setting(10.0, "RRF rank offset k in weight / (k + rank): smaller lets each leg's top ranks dominate, larger rewards chunks found by many legs.", minimum=0.0, maximum=10000.0)
    rank1_bonus: float = setting(0.0, "Added once to a chunk ranked first in any leg (qmd and the seeds: 0.05).", minimum=0.0, maximum=1.0)
    rank23_bonus: float = setting(0.0, "Added once to a chunk whose best rank in any leg is 2 or 3 (qmd and the seeds: 0.02).", minimum=0.0, maximum=1.0)
    rewrite_weight: float = setting(0.5, "Weight of each --rewrite's legs, relative to the query's own legs.", minimum=0.0, maximum=10.0)
    tag_weight: float = setting(0.3, "Weight of the tag (entity) leg.", minimum=0.0, maximum=10.0)
    adaptive_fusion: bool = setting(True, "Scale each dense leg's weight by its top cosine (0.2 to 0.4: 10% to all of it), so a weak dense leg cannot bury an exact word match, and each BM25 leg's by 1 + 4 x its winner's relative lead over the second (s1 - s2) / s1 (s2 = 0 for a lone hit), so a clear lexical winner is not outvoted.", flag="--adaptive-fusion/--fixed-fusion")
    rerank: bool = setting(False, "Rescore the top fused candidates with the artifact's cross-encoder (hybrid mode only).", flag="--rerank/--no-rerank")
    rerank_top: int = setting(40, "How many fused candidates the reranker rescores; the rest keep their fused order after them.", minimum=0, maximum=MAX_RERANK_TOP)
    rerank_passage_tokens: int = setting(192, "Tokens of each candidate passage the reranker reads (its cost grows with this).", minimum=1, maximum=512)
    blend: str = setting("position", "How rerank scores mix with retrieval: position (ranks 1-3 keep 75% retrieval, 4-10 60%, the rest 40%) or sigmoid (rerank_weight).", choices=BLENDS)
    rerank_weight: float = setting(1.0, "Sigmoid blend only: the reranker's share; 1.0 = the reranker alone orders the reranked top.", minimum=0.0, maximum=1.0)
    low_confidence_floor: float | None = setting(None, "Overrides the top-result confidence under which the low-confidence notice is given (default: each backend's floor, fitted by bench/calibrate.py into runtime/confidence_model.py).", minimum=0.0, maximum=1.0)
    # Not a setting: the keys the request itself set (resolve's overrides). A search routed to
    # another dense leg than the main one takes that leg's model defaults for every other key
    # (Searcher.options_for). Not compared: options are equal when their knobs are.
    given: frozenset = frozenset()

    def __eq__(self, other):
        return isinstance(other, SearchOptions) and self[:-1] == other[:-1]

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self[:-1])


SETTINGS = {s.name: s for s in settings_of(SearchOptions)}


# Defaults that differ by embedding model (the artifact's embedder, meta.embedder.name), under the
# artifact's own [search] table. multilingual-e5-small's cosines sit high and close together
# (bench/dense_noise.py; runtime/fusion.py COSINE_ANCHORS), and its dense leg earns less of the fusion: semantic_weight
# 0.5 against 0.7 lifts hybrid nDCG@10 on Hugo 0.513 -> 0.574, CMRC2018 0.952 -> 0.966 and
# JSQuAD 0.850 -> 0.889 (first 300 dev queries; bench/notes/*-e5-multilingual.md); MiniLM keeps
# SearchOptions' defaults.
MODEL_DEFAULTS: dict[str, dict] = {
    "multilingual-e5-small": {"semantic_weight": 0.5},
}


def stored_search(meta, model: str | None = None) -> dict:
    """The [search] table an artifact searches with: its embedding model's defaults
    (MODEL_DEFAULTS; ``model``: another of its models than the main one), then the artifact's
    own kb.toml [search] over them."""
    model = model or (meta.embedder or {}).get("name")
    return {**MODEL_DEFAULTS.get(model, {}), **(meta.search or {})}


def resolve(stored: dict | None, overrides: dict | None = None) -> SearchOptions:
    """The options for a search: defaults, then the artifact's stored ``[search]`` table, then
    ``overrides`` (None values mean "not given"). A bad value is a UsageError naming its key.
    Keys the stored table holds that this kb does not know are ignored (an artifact from a newer
    kb-build); an unknown override is a programming error (KeyError)."""
    values = {}
    for key, value in (stored or {}).items():
        s = SETTINGS.get(key)
        if s is None:
            continue
        try:
            values[key] = check(s, value)
        except ValueError as e:
            raise UsageError(f"the artifact's [search] {key} {e}; rebuild it with a valid kb.toml") from None
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        try:
            values[key] = check(SETTINGS[key], value)
        except ValueError as e:
            raise UsageError(f"{key} {e}") from None
    given = frozenset(k for k, v in (overrides or {}).items() if v is not None)
    return SearchOptions(**values, given=given)
