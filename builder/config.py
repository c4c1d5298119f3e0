"""kb.toml: the corpus's configuration, read and validated once into one options value (``BuildConfig``).

    [tags]        tag = "one-line context returned with results"
    [contexts]    "path/prefix/" = "one-line context returned with every result under it"
    [statuses]    known, exclude_by_default, default                        (StatusOptions, below)
    [search]      the runtime defaults, kb.common.options.SearchOptions; stored in the artifact as given
    [chunking]    builder/chunk.py ChunkOptions
    [bm25]        formats/bm25.py BM25Params
    [analyzer]    language                                                  (AnalyzerOptions, below)
    [embedding]   model, quantization, reranker                             (EmbeddingOptions, below)
    [vectors]     the HNSW graph                                            (VectorOptions, below)

Every key of every section is declared once, as a ``setting`` field with its type, range,
default and doc (kb.common.settings). A wrong type, an out-of-range value or an unknown key
anywhere is a ConfigError naming the file, the section and the key (kb-build exits 2 and writes
nothing), so every value a search later reads from the artifact is known to be valid.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kb.common.errors import ConfigError
from kb.common.options import SearchOptions
from kb.common.settings import from_table, setting
from kb.formats.artifact import open_regular
from kb.formats.bm25 import BM25Params
from kb.formats.meta import MAX_TAG_CHARS

from .chunk import ChunkOptions

__all__ = ["BuildConfig", "ConfigError", "load_config"]

MAX_CONFIG_BYTES = 1 << 20  # a kb.toml larger than this is refused before it is parsed


@dataclass(frozen=True)
class StatusOptions:
    """kb.toml [statuses]."""

    known: tuple[str, ...] = setting(("live-doctrine", "live", "derived", "historical", "superseded"), "Statuses a document may have, in the order kb lists them; any other is kept with a warning.")
    exclude_by_default: tuple[str, ...] = setting(("historical", "superseded"), "Statuses a search leaves out unless asked (--status, --all-statuses).")
    default: str = setting("live", "Status of a document that gives none.")


@dataclass(frozen=True)
class AnalyzerOptions:
    """kb.toml [analyzer]: which languages' stemmers and stopwords apply (formats/analyzer.py)."""

    language: str | tuple[str, ...] = setting(
        "auto",
        "auto = detect each document's language (builder/language.py); a code such as en = every document in it; a list = detect among those.",
    )

    def languages(self, where: str) -> tuple[str, ...]:
        """The candidate codes, ("auto",) for all; ConfigError naming ``where`` for a bad one."""
        from kb.formats.analyzer import LANGUAGES

        given = (self.language,) if isinstance(self.language, str) else tuple(self.language)
        known = ", ".join(sorted(LANGUAGES))
        for code in given:
            if code == "auto" and len(given) > 1:
                raise ConfigError(f"{where} language: auto stands alone, not in a list; or list the codes to detect among ({known})")
            if code != "auto" and code not in LANGUAGES:
                raise ConfigError(f"{where} language: unknown language {code!r}; known: auto, {known}")
        if len(set(given)) != len(given):
            raise ConfigError(f"{where} language: {next(c for c in given if given.count(c) > 1)!r} is listed twice")
        return given


@dataclass(frozen=True)
class EmbeddingOptions:
    """kb.toml [embedding]."""

    model: str = setting("auto", "Embedding model: auto (all-MiniLM-L6-v2 unless 10% or more of the documents are not English, then multilingual-e5-small, with all-MiniLM-L6-v2 beside it for queries in alphabetic scripts when some documents are English), all-MiniLM-L6-v2 (English), multilingual-e5-small (about 100 languages), or none for a BM25-only artifact.")
    quantization: str = setting("int8", "Weights of the packed embedding model.", choices=("int8", "float32"))
    reranker: str = setting("auto", "Cross-encoder packed for kb search --rerank: auto (the shipped one only when [search] rerank = true, so an artifact that does not rerank does not carry its 17 MiB), default (the shipped one), none, or a model folder (as kb-build --reranker).")


@dataclass(frozen=True)
class VectorOptions:
    """kb.toml [vectors]: the usearch HNSW graph."""

    connectivity: int = setting(48, "HNSW M: links per node; more = better recall, bigger index.", minimum=2, maximum=256)
    expansion_add: int = setting(160, "HNSW ef at construction; more = better graph, slower build.", minimum=1, maximum=4096)
    expansion_search: int = setting(1024, "HNSW ef at query time (stored in meta); more = better recall, slower search.", minimum=1, maximum=4096)
    dtype: str = setting("f16", "Stored vector precision.", choices=("f16", "bf16", "f32"))
    order: str = setting("clusters", "Where the graph's nodes and their vectors lie in the artifact: clusters = near vectors together (a two-level k-means; the same graph, but a one-shot search reads fewer pages of it), chunks = in the order they were added. Below 4096 vectors, as added either way.", choices=("clusters", "chunks"))
    add_order: str = setting("mixed", "The order vectors are added to the graph in: mixed = a seeded random 5% first, then the rest near vectors together (a two-level k-means), about 2.5 times faster at a million vectors than chunks = in chunk order, for a slightly worse graph at the same connectivity. Below 4096 vectors, chunk order either way.", choices=("mixed", "chunks"))
    add_dtype: str = setting("i8", "Precision of the distances while the graph is built: i8 = over int8 copies of the vectors (faster adds), same = at dtype. The vectors are stored and searched at dtype either way.", choices=("i8", "same"))
    threads: int = setting(1, "Threads that add vectors to the HNSW graph: 1 = the same graph, and the same artifact bytes, at every build; more = faster on more cores, but the graph differs from build to build.", minimum=1, maximum=256)


SECTIONS = {"statuses": StatusOptions, "search": SearchOptions, "chunking": ChunkOptions, "bm25": BM25Params, "analyzer": AnalyzerOptions, "embedding": EmbeddingOptions, "vectors": VectorOptions}


@dataclass(frozen=True)
class BuildConfig:
    tags: dict = field(default_factory=dict)
    contexts: dict = field(default_factory=dict)  # [contexts]: path prefix -> one-line description, sorted by prefix
    statuses: tuple[str, ...] = StatusOptions.known
    excluded_statuses: tuple[str, ...] = StatusOptions.exclude_by_default
    default_status: str = StatusOptions.default
    search: dict = field(default_factory=dict)  # [search] as given (validated), stored in the artifact
    chunking: ChunkOptions = ChunkOptions()
    bm25: BM25Params = BM25Params()
    languages: tuple[str, ...] = ("auto",)  # [analyzer] language: ("auto",) or the candidate codes
    embedding_model: str = EmbeddingOptions.model
    quantization: str = EmbeddingOptions.quantization
    vectors: VectorOptions = VectorOptions()
    reranker: str = "auto"  # "auto" (the shipped model when [search] rerank is on), "default" (the shipped model), "none", or a model folder
    source: str | None = None  # the kb.toml read, if any

    def to_dict(self) -> dict:
        d = asdict(self) | {"bm25": self.bm25.params()}  # BM25Params is a NamedTuple, which asdict keeps as one
        d["statuses"] = list(self.statuses)
        d["excluded_statuses"] = list(self.excluded_statuses)
        d.pop("source")
        return d


def load_config(path: Path | None) -> BuildConfig:
    if path is None:
        return BuildConfig()
    try:
        with open_regular(path) as f:  # a FIFO or /dev/zero is refused, not read forever
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES:,} bytes; a kb.toml holds settings, not data")
        data = tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"{path}: malformed kb.toml: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: malformed kb.toml: arrays or tables nested too deeply") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    known = ("tags", "contexts", *SECTIONS)
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ConfigError(f"{path}: [{unknown[0]}]: unknown section; known: {', '.join(known)}")
    tags = data.get("tags", {})
    if not isinstance(tags, dict):
        raise ConfigError(f"{path}: [tags] must be a table")
    for k, v in tags.items():
        if not isinstance(v, str):
            raise ConfigError(f'{path}: [tags] {k}: must be a one-line description (a string), e.g. ops = "Runbooks"')
        if len(v) > MAX_TAG_CHARS:
            raise ConfigError(f"{path}: [tags] {k}: the description is {len(v):,} characters long; the most is {MAX_TAG_CHARS} (every result with the tag carries it)")
    contexts = _path_contexts(data.get("contexts", {}), f"{path}: [contexts]")
    t = {name: from_table(cls, data.get(name, {}), f"{path}: [{name}]") for name, cls in SECTIONS.items()}
    from .embedders import EMBEDDERS

    model = t["embedding"].model
    if model not in ("none", "auto") and model not in EMBEDDERS:
        raise ConfigError(f"{path}: [embedding] model: must be one of auto, {', '.join(sorted(EMBEDDERS))}, none, got {model!r}")
    return BuildConfig(
        tags={k.casefold(): v.strip() for k, v in sorted(tags.items())},
        contexts=contexts,
        statuses=t["statuses"].known,
        excluded_statuses=t["statuses"].exclude_by_default,
        default_status=t["statuses"].default,
        search=dict(data.get("search", {})),
        chunking=t["chunking"],
        bm25=t["bm25"],
        languages=t["analyzer"].languages(f"{path}: [analyzer]"),
        embedding_model=model,
        quantization=t["embedding"].quantization,
        reranker=t["embedding"].reranker,
        vectors=t["vectors"],
        source=str(path),
    )


def _path_contexts(table, where: str) -> dict:
    """[contexts]: each key a path prefix (as ``kb search --path`` takes it), each value one line
    that describes the documents under it; bounded (kb.formats.meta) because every artifact and
    every result carries them."""
    from kb.formats.meta import MAX_CONTEXT_CHARS, MAX_CONTEXT_PREFIX_CHARS, MAX_PATH_CONTEXTS

    if not isinstance(table, dict):
        raise ConfigError(f'{where} must be a table of path prefixes, e.g. "runbooks/" = "Lab runbooks"')
    if len(table) > MAX_PATH_CONTEXTS:
        raise ConfigError(f"{where} holds {len(table)} prefixes; the most is {MAX_PATH_CONTEXTS}")
    out = {}
    for prefix, v in sorted(table.items()):
        key = f"{where} {prefix if len(prefix) <= 60 else prefix[:59] + '…'!r}"
        if not prefix:
            raise ConfigError(f'{key}: the prefix is empty; a context describes the documents under a path prefix, e.g. "runbooks/"')
        if len(prefix) > MAX_CONTEXT_PREFIX_CHARS:
            raise ConfigError(f"{key}: the prefix is {len(prefix)} characters long; the most is {MAX_CONTEXT_PREFIX_CHARS}")
        if not isinstance(v, str):
            dotted = " (quote a prefix that holds a dot: \"docs/v1.2/\" = ...)" if isinstance(v, dict) else ""
            raise ConfigError(f'{key}: must be a one-line description (a string), e.g. "runbooks/" = "Lab runbooks"{dotted}')
        v = v.strip()
        if not v or "\n" in v or "\r" in v:
            raise ConfigError(f"{key}: must be one line of text, not {'empty' if not v else 'several lines'}")
        if len(v) > MAX_CONTEXT_CHARS:
            raise ConfigError(f"{key}: the description is {len(v)} characters long; the most is {MAX_CONTEXT_CHARS}")
        out[prefix] = v
    return out
