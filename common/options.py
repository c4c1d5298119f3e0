"""A search's inputs, each declared once, here: the ranking knobs (SearchOptions) and the
query's own inputs (Query).

Each SearchOptions field is one knob: its kb.toml key under ``[search]``, its type, range, default and a
one-line description. kb-build validates ``[search]`` against it (and stores the table in the
artifact as given); kb's ``search`` flags, the HTTP and MCP request fields and their
descriptions, and README.md's table are all derived from it. At query time the options are
resolved once: these defaults, then the artifact's ``[search]``, then the request's overrides.

Why the defaults are what they are: bench/notes/ (*-fusion-grid, *-lexical-bm25, *-reranker;
rerank is off because the shipped cross-encoder did not improve nDCG@10 on unseen sets).
"""

from __future__ import annotations

from typing import NamedTuple

from .errors import UsageError
from .settings import check, setting, settings_of, settings_tuple

MODES = ("hybrid", "bm25", "vector")  # a search's mode: which legs run (not a [search] setting)
GROUPS = ("diverse", "chunk", "doc")  # a search's grouping: at most 2 chunks a document, one result per chunk, or the best chunk per document
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
MAX_QUERY_CHARS = 8192  # a query or rewrite longer than this is refused (the models truncate far earlier)


@settings_tuple  # a NamedTuple: a one-shot kb creates it at import (common/settings.py)
class SearchOptions(NamedTuple):
    default_limit: int = setting(10, "Results a search returns when it gives no -n/--top-k (top_k).", minimum=1, maximum=MAX_TOP_K, flag="")
    semantic_weight: float | None = setting(None, "Share of the dense legs in the fusion; the BM25 legs get the rest: 1.0 = meaning only, 0.0 = exact words only. Unset (the default; multilingual-e5-small: 0.5): each query's own, by its length in distinct content words: 0.8 up to 4, falling to 0.45 at 20 or more; at most 0.5 for a query with no stopword (keywords).", minimum=0.0, maximum=1.0)
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


@settings_tuple  # a NamedTuple, as SearchOptions: a one-shot kb creates it at import
class Query(NamedTuple):
    """One search's own inputs; the ranking knobs are the SearchOptions given with it. kb search's
    QUERY and flags, and the HTTP and MCP request fields (``key``, ``aliases``), with their help,
    are made from these fields (runtime/clikit.py input_flags, runtime/requests.py)."""

    text: str = setting("", "The question or topic in natural language, as a person would ask it. Drives the BM25 (exact words) and dense (meaning) legs and the reranker. May hold \"exact phrases\" (required), -word or -\"phrase\" (excluded), title:word, section:word and path:prefix (scopes); lines starting lex:, vec: or hyde: feed only the BM25 leg, only the dense leg, or a dense leg with a hypothetical answer.", flag="", key="query", aliases=("q",), max_chars=MAX_QUERY_CHARS)
    rewrites: tuple[str, ...] = setting((), "Optional rewritten natural-language forms of the same need (a paraphrase, the wording the documents probably use, acronyms spelled out). Each adds BM25 and dense sub-legs weighted below the original query.", flag="--rewrite", aliases=("rewrite",), max_items=8, max_chars=MAX_QUERY_CHARS)
    entities: tuple[str, ...] = setting((), "Optional entities or themes (systems, products, topics) matched against the chunks' tags: chunks carrying more of them rank higher (the tag leg). A soft signal, unlike `tag`.", flag="-e --entity", metavar="NAME", aliases=("entity",), max_items=32, max_chars=256)
    top_k: int | None = setting(None, f"Number of results. Default: the artifact's [search] default_limit, else {SearchOptions.default_limit}.", flag="-n --top-k", aliases=("n",), minimum=1, maximum=MAX_TOP_K)
    statuses: tuple[str, ...] = setting((), "Only chunks with one of these statuses. Default: every status except the artifact's excluded ones (typically historical and superseded).", flag="--status", metavar="S", key="status", aliases=("statuses",), max_items=32, max_chars=256)
    all_statuses: bool = setting(False, "Include every status, the excluded ones (historical, superseded) too.")
    tags: tuple[str, ...] = setting((), "Only chunks carrying every one of these tags (a hard filter).", flag="--tag", metavar="T", key="tag", aliases=("tags",), max_items=32, max_chars=256)
    path: str | None = setting(None, "Only documents whose path starts with this prefix, e.g. 'docs/ops/'.", metavar="PREFIX", max_chars=4096)
    mode: str = setting("hybrid", "Which legs run: hybrid (BM25 + dense, fused), bm25 (exact words only) or vector (meaning only).", choices=MODES)
    budget_ms: float | None = setting(None, "Shrink the rerank depth to fit this many milliseconds (the response's rerank.skipped says how many were not rescored).", minimum=0.0, maximum=600000.0)
    explain: bool = setting(False, "Per result: each leg's rank and raw score, the RRF parts and bonus, the rerank logit and blend weights; plus timings_ms.")
    group: str = setting("diverse", "diverse: at most 2 chunks of one document, its other matching sections named on its best result (more_sections); chunk: one result per chunk, however many of a document; doc: the best chunk per document (also_matched counts the others).", choices=GROUPS)
    full: bool = setting(False, "Return each chunk's full text instead of a snippet.")
    literal: bool = setting(False, "Take query as plain words: quotes, a leading - and field: are not syntax.")
    min_score: float | None = setting(None, "Only results whose confidence is at least this (0..1; ranks are kept as they were).", minimum=0.0, maximum=1.0, metavar="C")


QUERY_INPUTS = settings_of(Query)


@settings_tuple
class GetRequest(NamedTuple):
    """One read: a chunk_id, chunk_key, doc_id or path (one record back), or targets and a glob (``many``:
    items and what was omitted back). Each field is a request field of the servers' get and, where
    it has a flag, a flag of kb get (runtime/requests.py, runtime/cli.py)."""

    chunk_id: int | None = setting(None, "A chunk's id (a search result's chunk_id): returns the chunk with its neighbouring chunks in the same document.", minimum=0, flag="")
    chunk_key: str | None = setting(None, "A chunk's stable key (a search result's chunk_key, 16 hex digits): as chunk_id, and the key still names the same text after rebuilds in which that chunk is unchanged.", max_chars=64, flag="")
    doc_id: str | None = setting(None, "A document's id (a search result's doc_id): returns the document's chunks in order.", max_chars=4096, flag="")
    path: str | None = setting(None, "A document's exact path (a search result's path): returns the document's chunks in order; or PATH:FROM:COUNT for COUNT lines from line FROM (PATH:FROM: to its end), as kb get takes it.", max_chars=4096, flag="")
    context: int = setting(1, "With chunk_id: how many neighbouring chunks to return on each side (previous and next).", minimum=0, maximum=MAX_CONTEXT, flag="-C --context")
    max_chunks: int = setting(DEFAULT_DOC_CHUNKS, "With doc_id or path: the most chunks to return.", minimum=1, maximum=MAX_DOC_CHUNKS)
    targets: tuple[str, ...] = setting(
        (),
        "What to read, each as `kb get` takes it: a chunk id ('12', with `context` neighbours) or key (a result's chunk_key), a document's path or doc_id (its chunks), "
        "or PATH:FROM:COUNT (COUNT lines of the document from line FROM, numbered as in the source file; PATH:FROM reads to its end).",
        max_items=MAX_GET_TARGETS,
        max_chars=4096,
        flag="",
    )
    glob: str | None = setting(None, f"Also every document whose path matches this shell pattern (as kb-build --include: * matches any characters, / too; ?, [abc]), in path order; at most {MAX_GLOB_MATCHES} documents.", metavar="PATTERN", max_chars=1024)
    max_bytes: int = setting(
        DEFAULT_GET_BYTES,
        "The most bytes of text (UTF-8) to return. Items are taken in order while they fit; each one that does not is listed in `omitted` with its size. "
        "A single chunk_id, chunk_key, doc_id or path over it is an error.",
        minimum=1,
        maximum=MAX_GET_BYTES,
    )

    member: str | None = setting(None, "Of a set: the artifact to read from, by its name (a search result's artifact) or id (artifact_id). Default: the one member that holds every target.", metavar="NAME", max_chars=4096)

    @property
    def many(self) -> bool:
        return bool(self.targets) or self.glob is not None


GET_INPUTS = settings_of(GetRequest)


# Defaults that differ by embedding model (the artifact's embedder, meta.embedder.name), under the
# artifact's own [search] table. multilingual-e5-small's cosines sit high and close together
# (runtime/fusion.py COSINE_ANCHORS), and its dense leg earns less of the fusion: semantic_weight
# 0.5 (bench/notes/2026-11-30-e5-multilingual.md). MiniLM keeps SearchOptions' defaults.
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
