"""What lives in which section of a kb artifact, and the two encodings sections share.

Section names, numeric dtypes and the blob-table encoding are defined once here. The container
(header, table, footer, crc) is formats/artifact.py; the prose and byte diagrams are SPEC.md.

Blob table (used for terms, postings, paths, tag and status bitmaps, text blocks, model files):

    count(u32) reserved(u32) offsets(u64 x count+1) data(bytes)

``offsets`` are relative to the start of ``data``, non-decreasing, ``offsets[0] == 0`` and
``offsets[count] == len(data)``; item i is ``data[offsets[i]:offsets[i+1]]``.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from .analyzer import STOP_MARK

# Section names (ASCII, at most 32 bytes).
META = "meta"  # raw msgpack map: counts, analyzer, bm25, models, tags, statuses, config
MANIFEST = "manifest"  # zstd msgpack: source files, skipped files
CHUNKS = "chunks"  # raw CHUNK_DTYPE table, one row per chunk
CHUNK_LENGTHS = "chunks.length"  # raw f32 weighted BM25 length per chunk
DOC_PATHS = "docs.paths"  # blob table of UTF-8 paths, sorted, one per document
DOC_FIRST_CHUNK = "docs.first_chunk"  # raw u32 x (docs + 1): chunks of doc d are [f[d], f[d+1])
CHUNK_KEYS = "chunks.key"  # optional: raw KEY_BYTES per chunk, its stable key (``chunk_key``), shown as hex
TERM_HASHES = "terms.hash"  # raw u64, sorted ascending (ties broken by term bytes)
TERM_STRINGS = "terms.strings"  # blob table of UTF-8 terms, same order as terms.hash
TERM_SURFACES = "terms.surfaces"  # optional: blob table, same order: the words of the corpus each term stands for (``pack_surfaces``)
TERM_DOC_DF = "terms.doc_df"  # raw u32 per term: documents holding it (format 2; BM25's df, N = documents)
TERM_DOC_N = "terms.doc_n"  # format 4, several languages: raw u32 per term: BM25's N for it (its main language's documents)
POSTINGS = "postings"  # formats 1-2: blob table of portable roaring bitmaps of chunk ids, one per term
POSTING_TF_OFFSETS = "postings.tf_offsets"  # formats 1-2: raw u64 x (terms + 1) into postings.tf
POSTING_TF = "postings.tf"  # formats 1-2: raw f32 weighted term frequencies, in chunk-id order per term
# Format 3: impact postings (formats/bm25.py). Term t's postings are items offsets[t]..offsets[t+1]
# of the ids and impacts sections: chunk ids ascending, each with its u8 impact; the same per
# document for the document score.
POSTING_OFFSETS = "postings.offsets"  # raw u64 x (terms + 1) into postings.ids / postings.impacts
POSTING_IDS = "postings.ids"  # raw u32 chunk ids
POSTING_IMPACTS = "postings.impacts"  # raw u8 chunk impacts
DOC_POSTING_OFFSETS = "postings.doc_offsets"  # raw u64 x (terms + 1) into postings.doc_ids / .doc_impacts
DOC_POSTING_IDS = "postings.doc_ids"  # raw u32 document ids
DOC_POSTING_IMPACTS = "postings.doc_impacts"  # raw u8 document impacts
TAG_BITMAPS = "tags.bitmaps"  # blob table of roaring bitmaps, order of meta["tags"]["names"]
STATUS_BITMAPS = "status.bitmaps"  # blob table of roaring bitmaps, order of meta["statuses"]
TEXT_DICT = "text.dict"  # raw zstd dictionary for text.blocks
TEXT_BLOCKS = "text.blocks"  # blob table of zstd(msgpack list of chunk records), TEXT_BLOCK chunks each
DOC_SOURCES = "docs.source"  # blob table of zstd(UTF-8 source text), one per document, with text.dict (optional)
VECTORS = "vectors.hnsw"  # raw usearch index (Index.save bytes), keys = chunk ids
VECTOR_INPUTS = "vectors.inputs"  # optional: raw INPUT_BYTES per chunk, BLAKE2b of the text its vectors were embedded from (kb-build's reuse)
VECTOR_ROWS = "vectors.rows"  # optional: raw u32 per chunk id, the matrix row of its vector, when the graph's nodes are not in key order
MODEL_EMBED = "model.embed"  # blob table: kb_model.json first, then (name, bytes) pairs
MODEL_RERANK = "model.rerank"  # same encoding, the cross-encoder
MODEL_QUERY = "model.query"  # optional: the query encoder's directory into model.embed, and the tokenizer's vocabulary pages (formats/query_model.py)
# Format 5: the English leg, a second dense leg beside a multilingual one (meta.embedder_en is its
# card): the same three sections for the model that queries in alphabetic scripts are embedded
# by (SPEC.md "The English leg"), over every chunk.
VECTORS_EN = "vectors.en.hnsw"
VECTOR_ROWS_EN = "vectors.en.rows"
MODEL_EMBED_EN = "model.embed.en"
MODEL_QUERY_EN = "model.query.en"

TEXT_BLOCK = 4  # chunks per compressed text block: a result shown decodes its block (16: 2.3x the time
# per result on SciFact, 4: 6% more text bytes; bench/RESULTS.md "lexical-speed"); readers use meta.text_block

KEY_BYTES = 8  # a chunk key: BLAKE2b-64 of its document's path, its text and its occurrence of that text there
INPUT_BYTES = 16  # a vectors.inputs digest: BLAKE2b-128 of the text the embedding models read


def chunk_key(path: str, text: str, occurrence: int) -> bytes:
    """A chunk's stable key: the same as long as its document's path and its own text are (the
    ``occurrence``-th chunk of that text in the document, from 0). Unlike a chunk id, it does not
    shift when other documents or chunks come and go."""
    return hashlib.blake2b(f"{path}\0{text}\0{occurrence}".encode("utf-8"), digest_size=KEY_BYTES).digest()


def input_digest(text: str) -> bytes:
    """The ``vectors.inputs`` digest of a text an embedding model reads."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=INPUT_BYTES).digest()


CHUNK_DTYPE = np.dtype(
    [
        ("doc", "<u4"),  # document index (into docs.paths)
        ("start_line", "<u4"),  # 1-based, inclusive
        ("end_line", "<u4"),  # 1-based, inclusive
        ("status", "<u2"),  # index into meta["statuses"]
        ("flags", "<u2"),  # reserved, 0
    ]
)

# The element types of the raw numeric sections (and of blob-table offsets), named once.
OFFSET_DTYPE = np.dtype("<u8")  # postings.offsets, postings.doc_offsets, postings.tf_offsets, blob-table offsets
ID_DTYPE = np.dtype("<u4")  # postings.ids, postings.doc_ids, docs.first_chunk, terms.doc_df, terms.doc_n, vectors.rows
HASH_DTYPE = np.dtype("<u8")  # terms.hash
WEIGHT_DTYPE = np.dtype("<f4")  # chunks.length, postings.tf
IMPACT_DTYPE = np.dtype("u1")  # postings.impacts, postings.doc_impacts

_BLOB_HEAD = struct.Struct("<II")


def pack_blobs(items: list[bytes]) -> bytes:
    offsets = np.zeros(len(items) + 1, dtype=OFFSET_DTYPE)
    if items:
        np.cumsum([len(b) for b in items], out=offsets[1:])
    return pack_blob_buffer(b"".join(items), offsets)


def pack_blob_buffer(data: bytes | np.ndarray, offsets: np.ndarray) -> bytes:
    """A blob table from its items' bytes back to back and ``count + 1`` offsets into them."""
    return blob_head(offsets) + bytes(data)


def blob_head(offsets: np.ndarray) -> bytes:
    """The bytes of a blob table before its data: count, reserved, the ``count + 1`` offsets."""
    return _BLOB_HEAD.pack(len(offsets) - 1, 0) + np.asarray(offsets, dtype=OFFSET_DTYPE).tobytes()


class BlobTable:
    """Read side of ``pack_blobs`` over a memoryview; validates before trusting offsets. The head
    (count, first and last offset) is checked at once; each item's own two offsets when the item
    is taken (verified by ``check`` where given, in order, inside the data), so opening a table of
    a million paths costs what reading one costs (bench/notes/2026-12-02-scale-million.md)."""

    def __init__(self, buf: memoryview | bytes, what: str = "blob table", check=None):
        """``check(start, stop)``, when given, verifies bytes of ``buf`` before they are read
        (page checksums: Artifact.check_range); the head at once, each item when it is taken."""
        from .artifact import CorruptArtifact

        if len(buf) < _BLOB_HEAD.size:
            raise CorruptArtifact(f"corrupt artifact: {what} is shorter than its header")
        if check is not None:
            check(0, _BLOB_HEAD.size)
        count, _ = _BLOB_HEAD.unpack(bytes(buf[: _BLOB_HEAD.size]))
        head = _BLOB_HEAD.size + 8 * (count + 1)
        if head > len(buf):
            raise CorruptArtifact(f"corrupt artifact: {what} offsets run past its end")
        if check is not None:
            check(_BLOB_HEAD.size, _BLOB_HEAD.size + 8)
            check(head - 8, head)
        offsets = np.frombuffer(buf, dtype=OFFSET_DTYPE, count=count + 1, offset=_BLOB_HEAD.size)
        data_len = len(buf) - head
        if offsets[0] != 0 or offsets[-1] != data_len:
            raise CorruptArtifact(f"corrupt artifact: {what} offsets do not cover its data")
        self._buf = buf
        self._head = head
        self._check = check
        self._what = what
        self._data_len = data_len
        self.offsets = offsets  # as stored: ``span`` checks the two an item reads
        self.count = count

    def __len__(self) -> int:
        return self.count

    def span(self, i: int) -> tuple[int, int]:
        """Where item i lies, as [start, end) offsets into the whole table's buffer."""
        if not 0 <= i < self.count:
            raise IndexError(i)
        if self._check is not None:
            at = _BLOB_HEAD.size + 8 * i
            self._check(at, at + 16)
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        if not a <= b <= self._data_len:
            from .artifact import CorruptArtifact

            raise CorruptArtifact(f"corrupt artifact: {self._what} offsets decrease")
        return self._head + a, self._head + b

    def __getitem__(self, i: int) -> memoryview:
        a, b = self.span(i)
        if self._check is not None:
            self._check(a, b)
        return self._buf[a:b]


MAX_SURFACES = 64  # words a terms.surfaces item lists; a term that stands for more is stored as SURFACES_MANY
SURFACES_MANY = b"*"  # not a word character: "more words than MAX_SURFACES", a reader analyzes the text instead


def surface_base(term: str) -> str:
    """The word a term stands for without a stored surface: a stopword term's word, else the term."""
    return term[1:] if term[:1] == STOP_MARK else term


def pack_surfaces(terms: list[str], variants: dict[str, list[str]]) -> bytes:
    """The terms.surfaces blob table: item t lists, in sorted order and separated by one space,
    the words of the corpus that term t stands for (what the analyzer's ``words`` gave, before
    the length limit, stemming and stopwords) other than ``surface_base(t)``: empty when there is
    none (most terms), SURFACES_MANY when there are more than MAX_SURFACES. ``variants``: term ->
    those words, each once."""
    items = []
    for t in terms:
        v = variants.get(t)
        items.append(b"" if not v else SURFACES_MANY if len(v) > MAX_SURFACES else " ".join(sorted(v)).encode("utf-8"))
    return pack_blobs(items)


def unpack_surfaces(item: bytes, term: str) -> tuple[str, ...] | None:
    """The words a terms.surfaces item says ``term`` stands for, ``surface_base(term)`` first;
    None for SURFACES_MANY; ValueError for an item that is not UTF-8 words."""
    if item == SURFACES_MANY:
        return None
    words = item.decode("utf-8").split(" ") if item else []
    if "" in words:
        raise ValueError("an empty word")
    return (surface_base(term), *words)


def term_hash(term: str) -> int:
    """Stable 64-bit term hash (BLAKE2b, 8 bytes, little-endian): the term dictionary's key."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest(), "little")


def term_hashes(terms: list[str]) -> np.ndarray:
    """``term_hash`` of many terms at once, as a little-endian uint64 array."""
    digest = hashlib.blake2b
    return np.frombuffer(b"".join([digest(t.encode("utf-8"), digest_size=8).digest() for t in terms]), dtype=HASH_DTYPE)
