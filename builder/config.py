"""kb.toml: the corpus's configuration, read once into one options value (``BuildConfig``).

    [tags]        tag = "one-line context returned with results"
    [statuses]    known = [...], exclude_by_default = [...], default = "live"
    [search]      runtime defaults (default_limit, semantic_weight, rrf_k, ...), stored as given
    [chunking]    max_tokens, overlap_tokens
    [bm25]        k1, b, title_weight, section_weight
    [embedding]   model = "all-MiniLM-L6-v2" | "hash" (tests only), quantization = "int8" | "float32"
    [vectors]     connectivity, expansion_add, expansion_search, dtype = "f16" | "bf16" | "f32"
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from kb.formats.bm25 import BM25Params

from .chunk import ChunkOptions

DEFAULT_STATUSES = ("live-doctrine", "live", "derived", "historical", "superseded")
DEFAULT_EXCLUDED = ("historical", "superseded")
SEARCH_KEYS = {
    "default_limit",
    "semantic_weight",
    "rrf_k",
    "rank1_bonus",
    "rank23_bonus",
    "rewrite_weight",
    "tag_weight",
    "rerank",
    "rerank_top",
    "rerank_weight",
    "blend",
    "low_confidence_floor",
}


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class VectorOptions:
    connectivity: int = 16  # HNSW M
    expansion_add: int = 128  # ef at construction
    expansion_search: int = 64  # ef at query time (stored in the index)
    dtype: str = "f16"


@dataclass(frozen=True)
class BuildConfig:
    tags: dict = field(default_factory=dict)
    statuses: tuple[str, ...] = DEFAULT_STATUSES
    excluded_statuses: tuple[str, ...] = DEFAULT_EXCLUDED
    default_status: str = "live"
    search: dict = field(default_factory=dict)
    chunking: ChunkOptions = ChunkOptions()
    bm25: BM25Params = BM25Params()
    embedding_model: str = "all-MiniLM-L6-v2"
    quantization: str = "int8"
    vectors: VectorOptions = VectorOptions()
    reranker: str = "default"  # "default" (the shipped model), "none", or a model folder
    source: str | None = None  # the kb.toml read, if any

    def to_dict(self) -> dict:
        d = asdict(self)
        d["statuses"] = list(self.statuses)
        d["excluded_statuses"] = list(self.excluded_statuses)
        d.pop("source")
        return d


def _section(data: dict, name: str, cls, path: str):
    raw = data.get(name, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: [{name}] must be a table")
    known = {f.name: f.type for f in fields(cls)}
    unknown = set(raw) - set(known)
    if unknown:
        raise ConfigError(f"{path}: [{name}] has unknown keys: {', '.join(sorted(unknown))}")
    try:
        return cls(**raw)
    except TypeError as e:
        raise ConfigError(f"{path}: [{name}]: {e}") from None


def load_config(path: Path | None) -> BuildConfig:
    if path is None:
        return BuildConfig()
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: malformed kb.toml: {e}") from None
    unknown = set(data) - {"tags", "statuses", "search", "chunking", "bm25", "embedding", "vectors"}
    if unknown:
        raise ConfigError(f"{path}: unknown sections: {', '.join(sorted(unknown))}")
    tags = data.get("tags", {})
    if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        raise ConfigError(f'{path}: [tags] must map tag names to one-line descriptions, e.g. ops = "Runbooks"')
    search = data.get("search", {})
    bad = set(search) - SEARCH_KEYS - {"reranker"}
    if bad:
        raise ConfigError(f"{path}: [search] has unknown keys: {', '.join(sorted(bad))}")
    st = data.get("statuses", {})
    emb = data.get("embedding", {})
    if set(emb) - {"model", "quantization"}:
        raise ConfigError(f"{path}: [embedding] knows only model and quantization")
    quant = emb.get("quantization", "int8")
    if quant not in ("int8", "float32"):
        raise ConfigError(f"{path}: [embedding] quantization must be int8 or float32")
    vec = _section(data, "vectors", VectorOptions, path)
    if vec.dtype not in ("f16", "bf16", "f32"):
        raise ConfigError(f"{path}: [vectors] dtype must be f16, bf16 or f32")
    return BuildConfig(
        tags={k.casefold(): v.strip() for k, v in sorted(tags.items())},
        statuses=tuple(st.get("known", DEFAULT_STATUSES)),
        excluded_statuses=tuple(st.get("exclude_by_default", DEFAULT_EXCLUDED)),
        default_status=st.get("default", "live"),
        search=dict(search),
        chunking=_section(data, "chunking", ChunkOptions, path),
        bm25=_section(data, "bm25", BM25Params, path),
        embedding_model=emb.get("model", "all-MiniLM-L6-v2"),
        quantization=quant,
        vectors=vec,
        source=str(path),
    )
