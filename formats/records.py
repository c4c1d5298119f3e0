"""What is inside the sections that hold records: one immutable type and one pack/unpack pair each.

    meta          Meta (msgpack map)                       pack_meta / unpack_meta
    manifest      Manifest (zstd msgpack map)              manifest_section / unpack_manifest
    text.blocks   ChunkRecord lists (zstd msgpack arrays)  pack_chunk_record, pack_text_block / unpack_text_block
    docs.source   a document's source text (zstd UTF-8)    pack_source / unpack_source, text_lines
    model.*       model files + ModelCard (kb_model.json)  pack_model_files / unpack_model_files, ModelCard

The builder writes these sections only through the pack side and the runtime reads them only
through the unpack side; nothing else knows a record's layout. SPEC.md describes every field.
Unpacking validates types before anything is trusted: a malformed record is CorruptArtifact.
The types are NamedTuples, not frozen dataclasses: start-up cost (bench/startup_records.py).
"""

from __future__ import annotations

import json
from typing import NamedTuple

import msgpack

from kb.common.errors import ModelError

from .artifact import CODEC_ZSTD, CorruptArtifact, SectionData, within_zstd_ratio
from .layout import MANIFEST, BlobTable, pack_blobs

ZSTD_LEVEL = 10


def _corrupt(what: str) -> CorruptArtifact:
    return CorruptArtifact(f"corrupt artifact: {what}")


def _checked(check, value, what: str) -> None:
    """Run a formats/meta.py check, its ShapeError as CorruptArtifact."""
    from .meta import ShapeError

    try:
        check(value)
    except ShapeError as e:
        raise _corrupt(f"{what}: {e}") from None


def _unpack_map(buf, what: str) -> dict:
    try:
        d = msgpack.unpackb(bytes(buf))
    except (ValueError, msgpack.UnpackException) as e:
        raise _corrupt(f"{what} is not msgpack ({e.__class__.__name__})") from None
    if not isinstance(d, dict):
        raise _corrupt(f"{what} is not a map")
    return d


# --- kb_model.json -------------------------------------------------------------------------------
class ModelCard(NamedTuple):
    """kb_model.json: what a packed model is and how to run it (SPEC.md, "Model cards").
    Absent fields are None; fields this kb does not know are kept in ``extra``."""

    kind: str  # "embedder" or "cross-encoder"
    name: str
    dim: int | None = None  # hidden size (embedding dimension)
    max_tokens: int | None = None  # the model's window in tokens
    backend: str | None = None  # absent: ctranslate2
    pooling: str | None = None  # "mean" (embedders) or "cls" (cross-encoders)
    normalize: bool | None = None  # L2-normalise embeddings
    quantization: str | None = None  # weights as stored: int8, float32, ...
    num_labels: int | None = None  # cross-encoders: 1 (a relevance logit) or 2 (not relevant, relevant)
    source_sha256: str | None = None  # sha256 of the weights it was converted from
    extra: dict = {}  # never changed: from_dict gives each card its own

    def to_dict(self) -> dict:
        """The card as a map with sorted keys, absent fields left out (as stored in meta)."""
        d = {k: v for k, v in self._asdict().items() if k != "extra" and v is not None}
        d.update(self.extra)
        return {k: d[k] for k in sorted(d)}

    @classmethod
    def from_dict(cls, d) -> ModelCard:
        """A card from its map; ModelError (one line) when it is not a valid card."""
        if not isinstance(d, dict):
            raise ModelError("kb_model.json is not an object")
        known = set(cls._fields) - {"extra"}
        try:
            card = cls(**{k: v for k, v in d.items() if k in known}, extra={k: v for k, v in d.items() if k not in known})
        except TypeError:
            raise ModelError("kb_model.json lacks kind or name") from None
        checks = {"kind": str, "name": str, "dim": int, "max_tokens": int, "backend": str, "pooling": str, "normalize": bool, "quantization": str, "num_labels": int, "source_sha256": str}
        for k, t in checks.items():
            v = getattr(card, k)
            if v is not None and (not isinstance(v, t) or (t is int and isinstance(v, bool))):
                raise ModelError(f"kb_model.json field {k!r} must be {t.__name__}, got {v!r}")
        return card

    @classmethod
    def from_json(cls, raw: bytes | str) -> ModelCard:
        try:
            d = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise ModelError(f"kb_model.json is not JSON ({e.__class__.__name__})") from None
        return cls.from_dict(d)


CARD_FILE = "kb_model.json"


def pack_model_files(files: dict[str, bytes]) -> bytes:
    """A model section: blob table whose item 0 is the msgpack list of file names (kb_model.json
    first, then the rest sorted) and items 1.. those files' bytes."""
    names = [CARD_FILE] + sorted(n for n in files if n != CARD_FILE)
    return pack_blobs([msgpack.packb(names)] + [bytes(files[n]) for n in names])


def _model_names(t: BlobTable, what: str) -> list[str]:
    if len(t) < 1:
        raise _corrupt(f"{what} is empty")
    try:
        names = msgpack.unpackb(bytes(t[0]))
    except (ValueError, msgpack.UnpackException):
        names = None
    if not isinstance(names, list) or len(names) != len(t) - 1 or not all(isinstance(n, str) for n in names) or CARD_FILE not in names:
        raise _corrupt(f"{what} is inconsistent")
    return names


def model_file_span(buf, name: str, what: str) -> tuple[int, int]:
    """Where file ``name`` of a model section lies in the section's bytes: [start, end)."""
    t = BlobTable(buf, what)
    names = _model_names(t, what)
    if name not in names:
        raise _corrupt(f"{what} has no {name}")
    return t.span(names.index(name) + 1)


def unpack_model_files(buf, what: str) -> dict[str, bytes]:
    t = BlobTable(buf, what)
    names = _model_names(t, what)
    files = {n: bytes(t[i + 1]) for i, n in enumerate(names)}
    from .meta import check_model_card

    try:
        card = json.loads(files[CARD_FILE])
    except (ValueError, UnicodeDecodeError):
        raise _corrupt(f"{what}: kb_model.json is not JSON") from None
    _checked(lambda c: check_model_card(c, files), card, what)
    return files


# --- meta ----------------------------------------------------------------------------------------
class Counts(NamedTuple):
    documents: int
    chunks: int
    terms: int
    vectors: int


class Meta(NamedTuple):
    """The ``meta`` section: read at open, small. SPEC.md, "meta"."""

    kb_version: str
    format_version: int
    counts: Counts
    analyzer: dict  # the analyzer's params (formats/analyzer.py)
    bm25: dict  # k1, b, title_weight, section_weight, avg_length
    embedder: dict | None  # the query model's card (ModelCard.to_dict), None: no vectors
    reranker: dict | None  # the cross-encoder's card, None: none packed
    vectors: dict | None  # metric, connectivity, expansion_add, expansion_search, dtype
    tag_names: tuple[str, ...]  # sorted; order of tags.bitmaps
    tag_descriptions: dict  # tag -> one-line context from kb.toml [tags]
    statuses: tuple[str, ...]  # order of status.bitmaps and of the chunk table's status codes
    excluded_statuses: tuple[str, ...]  # left out of searches by default
    search: dict  # kb.toml [search] as given (validated by kb-build)
    text_block: int  # chunks per text block
    source: str  # "files" or "jsonl"
    path_contexts: dict  # path prefix -> one-line context from kb.toml [contexts]; written only when not empty
    embedder_en: dict | None  # format 5: the English leg's card (SPEC.md "The English leg"); written only when there is one

    def contexts_of(self, path: str) -> tuple[tuple[str, str], ...]:
        """(prefix, description) of every path context ``path`` is under, most specific (longest) first."""
        if not self.path_contexts:
            return ()
        return tuple(sorted(((p, d) for p, d in self.path_contexts.items() if path.startswith(p)), key=lambda pd: -len(pd[0])))


def pack_meta(m: Meta) -> bytes:
    optional = {"path_contexts": m.path_contexts} if m.path_contexts else {}
    if m.embedder_en is not None:
        optional["embedder_en"] = m.embedder_en
    return msgpack.packb(
        {
            "kb_version": m.kb_version,
            "format_version": m.format_version,
            "counts": {"documents": m.counts.documents, "chunks": m.counts.chunks, "terms": m.counts.terms, "vectors": m.counts.vectors},
            "analyzer": m.analyzer,
            "bm25": m.bm25,
            "embedder": m.embedder,
            "reranker": m.reranker,
            "vectors": m.vectors,
            "tags": {"names": list(m.tag_names), "descriptions": m.tag_descriptions},
            "statuses": list(m.statuses),
            "excluded_statuses": list(m.excluded_statuses),
            "search": m.search,
            "text_block": m.text_block,
            "source": m.source,
            **optional,
        }
    )


def unpack_meta(buf) -> Meta:
    """Meta from its msgpack bytes, after ``check_meta`` has checked every field the runtime
    reads (formats/meta.py), so nothing here checks again."""
    from .meta import check_meta

    d = _unpack_map(buf, "meta")
    _checked(check_meta, d, "meta")
    c, tags = d["counts"], d["tags"]
    return Meta(
        kb_version=d["kb_version"],
        format_version=d["format_version"],
        counts=Counts(c["documents"], c["chunks"], c["terms"], c["vectors"]),
        analyzer=d["analyzer"],
        bm25=d["bm25"],
        embedder=d.get("embedder"),
        reranker=d.get("reranker"),
        vectors=d.get("vectors"),
        tag_names=tuple(tags["names"]),
        tag_descriptions=tags["descriptions"],
        statuses=tuple(d["statuses"]),
        excluded_statuses=tuple(d["excluded_statuses"]),
        search=d["search"],
        text_block=d["text_block"],
        source=d["source"],
        path_contexts=d.get("path_contexts", {}),
        embedder_en=d.get("embedder_en"),
    )


def check_optional_sections(m: Meta, names) -> None:
    """Optional sections agree with meta: vectors present exactly when meta counts them (one per
    chunk), with their settings and the embedder that made them; the English leg's (format 5)
    all together, beside the main vectors."""
    if "vectors.hnsw" in names:
        if m.counts.vectors != m.counts.chunks:
            raise _corrupt(f"meta: meta counts {m.counts.vectors} vectors for {m.counts.chunks} chunks")
        if m.vectors is None or "model.embed" not in names:
            raise _corrupt("meta: a vectors section without its settings and embedder")
    elif m.counts.vectors:
        raise _corrupt(f"meta: meta counts {m.counts.vectors} vectors but there is no 'vectors.hnsw' section")
    for query, embed, card in (("model.query", "model.embed", m.embedder), ("model.query.en", "model.embed.en", m.embedder_en)):
        if query in names and (embed not in names or not all(isinstance((card or {}).get(k), int) and not isinstance(card[k], bool) and 0 < card[k] < 1 << 16
                                                             for k in ("dim", "max_tokens"))):
            raise _corrupt("meta: a query-model section without its embedding model's card (dim, max_tokens)")
    for rows, vectors in (("vectors.rows", "vectors.hnsw"), ("vectors.en.rows", "vectors.en.hnsw")):
        if rows in names and vectors not in names:
            raise _corrupt(f"meta: a {rows!r} section without {vectors!r}")
    english = [n for n in ("vectors.en.hnsw", "model.embed.en") if n in names]
    if english or m.embedder_en is not None:
        if len(english) < 2 or m.embedder_en is None or "vectors.hnsw" not in names:
            raise _corrupt("meta: the English leg needs meta.embedder_en, its vectors and model sections, and the main vectors")


# --- manifest ------------------------------------------------------------------------------------
# The extensions kb-build read from folders before it recorded them (artifacts without
# ``file_types``): the policy of that time, so `kb status` of an old artifact looks for the same.
LEGACY_FILE_TYPES = (".json", ".markdown", ".md", ".toml", ".txt", ".yaml", ".yml")
CONFIG_NAME = "kb.toml"  # a corpus's config file: never a source, wherever it is in the corpus


class Source(NamedTuple):
    path: str  # relative to the corpus root, "/"-separated
    size: int
    mtime_ns: int
    sha256: str


class Manifest(NamedTuple):
    """The ``manifest`` section: how the artifact was built (SPEC.md, "manifest")."""

    root: str  # absolute corpus root
    kb_version: str
    config: dict  # the BuildConfig, as a map
    config_file: str | None
    sources: tuple[Source, ...]  # sorted by path
    jsonl: tuple[str, ...]  # JSON Lines file names
    skipped: tuple[tuple[str, str], ...]  # (path, reason)
    excluded: int  # files left out by --include/--exclude
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    models: dict  # {"embedder": card or None, "reranker": card or None}
    analyzer: dict
    file_types: tuple[str, ...] = LEGACY_FILE_TYPES  # extensions read from folders, sorted


def manifest_section(m: Manifest) -> SectionData:
    import zstandard

    raw = msgpack.packb(
        {
            "root": m.root,
            "kb_version": m.kb_version,
            "config": m.config,
            "config_file": m.config_file,
            "sources": [[s.path, s.size, s.mtime_ns, s.sha256] for s in m.sources],
            "jsonl": list(m.jsonl),
            "skipped": [list(s) for s in m.skipped],
            "excluded": m.excluded,
            "include": list(m.include),
            "exclude": list(m.exclude),
            "models": m.models,
            "analyzer": m.analyzer,
            "file_types": list(m.file_types),
        }
    )
    return SectionData(MANIFEST, within_zstd_ratio(zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw), len(raw)), CODEC_ZSTD, len(raw))


def unpack_manifest(buf) -> Manifest:
    from .meta import check_manifest

    d = _unpack_map(buf, "manifest")
    _checked(check_manifest, d, "manifest")
    try:
        sources = tuple(Source(str(p), int(size), int(mtime), str(sha)) for p, size, mtime, sha in d["sources"])
        skipped = tuple((str(p), str(r)) for p, r in d["skipped"])
        return Manifest(
            root=str(d["root"]),
            kb_version=str(d.get("kb_version", "")),
            config=d.get("config") or {},
            config_file=d.get("config_file"),
            sources=sources,
            jsonl=tuple(d.get("jsonl") or ()),
            skipped=skipped,
            excluded=int(d.get("excluded") or 0),
            include=tuple(d.get("include") or ()),
            exclude=tuple(d.get("exclude") or ()),
            models=d.get("models") or {},
            analyzer=d.get("analyzer") or {},
            file_types=tuple(d["file_types"]) if "file_types" in d else LEGACY_FILE_TYPES,
        )
    except (KeyError, TypeError, ValueError):
        raise _corrupt("manifest is malformed") from None


# --- text blocks ---------------------------------------------------------------------------------
class ChunkRecord(NamedTuple):
    """A chunk's text and what a result shows with it, as stored in a text block."""

    text: str
    section: str  # heading path, " > "-joined; "" when none
    title: str  # the document's title
    doc_id: str
    tags: tuple[str, ...]


def pack_chunk_record(r: ChunkRecord) -> bytes:
    """One record: the msgpack array [text, section, title, doc_id, tags]."""
    return msgpack.packb([r.text, r.section, r.title, r.doc_id, list(r.tags)])


def pack_text_block(records: list[bytes]) -> bytes:
    """A block's uncompressed bytes: a msgpack array header, then the packed records as they are."""
    return msgpack.Packer().pack_array_header(len(records)) + b"".join(records)


def unpack_text_block(raw: bytes, what: str, expect: int | None = None) -> list:
    """The records of a text block (``expect`` of them, when given), each as msgpack decoded it:
    ``chunk_record`` checks one when it is used (a search shows a few records of each block)."""
    try:
        items = msgpack.unpackb(raw)
    except (ValueError, msgpack.UnpackException):
        raise _corrupt(f"{what} does not decode") from None
    if not isinstance(items, list) or (expect is not None and len(items) != expect):
        raise _corrupt(f"{what} holds {len(items) if isinstance(items, list) else 'no'} records, expected {expect}")
    return items


def chunk_record(item, what: str) -> ChunkRecord:
    """One record of ``unpack_text_block``'s, checked: [text, section, title, doc_id, [tags]]."""
    if type(item) is list and len(item) == 5:
        text, section, title, doc_id, tags = item
        if type(text) is str and type(section) is str and type(title) is str and type(doc_id) is str and type(tags) is list and all(type(t) is str for t in tags):
            return ChunkRecord(text, section, title, doc_id, tuple(tags))
    raise _corrupt(f"{what} is malformed")


# --- document sources ----------------------------------------------------------------------------
def text_lines(text: str) -> list[str]:
    """The lines that chunks' StartLine and EndLine count (1-based): ``text`` split at each \\n,
    without the empty piece after a final \\n. The chunker and ``kb get PATH:FROM:COUNT`` both
    number lines with it."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def pack_source(text: str) -> bytes:
    """A docs.source item before compression: the document's source text as UTF-8."""
    return text.encode("utf-8")


def unpack_source(raw: bytes, what: str) -> list[str]:
    """The lines of a decompressed docs.source item."""
    try:
        return text_lines(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _corrupt(f"{what} is not UTF-8") from None
