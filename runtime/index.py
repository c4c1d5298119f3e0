"""The opened artifact: mmap + validate + lazy views. Nothing is decoded until asked for.

Opening reads the header, section table and the small ``meta`` map, and checks that every
section the format requires is present with a size consistent with the counts in ``meta``.
Each section's crc32 is checked the first time it is read (formats/artifact.py).
"""

from __future__ import annotations

import struct
from functools import cached_property
from typing import NamedTuple

import numpy as np

from kb.formats import layout as L
from kb.formats import records as R
from kb.formats.artifact import CODEC_RAW, Artifact, CorruptArtifact, labelled
from kb.formats.text_codec import TextReader

from .cosines import cosines_of, stored_cosines

_CHUNK_ROW = struct.Struct("<IIIHH")  # a row of L.CHUNK_DTYPE, read alone
assert _CHUNK_ROW.size == L.CHUNK_DTYPE.itemsize
BLOCK_CACHE = 1024  # decoded text blocks kept (meta.text_block chunks each: 4 from kb-build)
TERM_CACHE = 65536  # term -> term id lookups kept
PATH_CACHE = 65536  # document number -> path, decoded once


class StoredChunk(NamedTuple):  # not a frozen dataclass: start-up cost (bench/startup_records.py)
    """A chunk as the artifact holds it: text, document, place in the source file, filters."""

    chunk_id: int
    doc_id: str
    path: str
    title: str
    section: str
    lines: tuple[int, int]  # 1-based, inclusive
    status: str
    tags: tuple[str, ...]
    text: str
    chunk_key: str | None = None  # stable across rebuilds (chunks.key, hex); None: an artifact built before keys


REQUIRED = (
    L.META,
    L.MANIFEST,
    L.CHUNKS,
    L.CHUNK_LENGTHS,
    L.DOC_PATHS,
    L.DOC_FIRST_CHUNK,
    L.TERM_HASHES,
    L.TERM_STRINGS,
    L.STATUS_BITMAPS,
    L.TAG_BITMAPS,
    L.TEXT_DICT,
    L.TEXT_BLOCKS,
)
ROARING_POSTINGS = (L.POSTINGS, L.POSTING_TF_OFFSETS, L.POSTING_TF)  # formats 1-2
IMPACT_POSTINGS = (L.POSTING_OFFSETS, L.POSTING_IDS, L.POSTING_IMPACTS, L.DOC_POSTING_OFFSETS, L.DOC_POSTING_IDS, L.DOC_POSTING_IMPACTS)  # format 3


def required_sections(version: int) -> tuple[str, ...]:
    """Format 1: roaring postings with f32 tf; 2: + document frequencies; 3: impact postings;
    4: the same, with BM25 statistics per language when a corpus has several (``terms.doc_n``
    and meta.bm25.languages, both or neither)."""
    if version >= 3:
        return REQUIRED + (L.TERM_DOC_DF,) + IMPACT_POSTINGS
    return REQUIRED + ROARING_POSTINGS + ((L.TERM_DOC_DF,) if version >= 2 else ())


USEARCH_EXPANSION_SEARCH = 64  # usearch's own default, what a restored index searches with when meta keeps none
POSTING_SECTIONS = ((L.POSTING_OFFSETS, L.POSTING_IDS, L.POSTING_IMPACTS), (L.DOC_POSTING_OFFSETS, L.DOC_POSTING_IDS, L.DOC_POSTING_IMPACTS))  # chunk, document
EXACT_SCAN_MAX = 20_000  # up to this many chunks the dense leg scans every vector (scans_vectors)


def _matrix_view(view, image) -> np.ndarray | None:
    """The stored vectors as a (rows, dims) numpy view, when numpy can view their kind."""
    from kb.formats.hnsw import MATRIX_START, NUMPY_SCALARS

    if image.scalar not in NUMPY_SCALARS:
        return None
    return np.frombuffer(view, dtype=NUMPY_SCALARS[image.scalar], count=image.rows * image.dims, offset=MATRIX_START).reshape(image.rows, image.dims)


class Index:
    def __init__(self, path, private: bool = False):
        import threading
        from collections import OrderedDict

        self._block_lock = threading.Lock()
        self._term_cache: dict[str, int | None] = {}
        self._path_cache: dict[int, str] = {}
        self._term_columns: dict[str, np.ndarray] = {}  # u32-per-term sections, viewed in place
        self.leg_cache: dict = {}  # per-leg memo of decoded data (runtime/bm25.py keeps impacts here)
        self._block_cache: OrderedDict = OrderedDict()
        self.artifact = Artifact(path, private)
        self.path = self.artifact.path
        self.name = str(path)  # what results call it (``artifact``): the path given, or a set file's entry (runtime/collection.py)
        try:
            self._check_structure()
        except BaseException:
            self.artifact.close()
            raise

    def close(self):
        for name in ("dense", "english"):  # only the spaces opened
            space = self.__dict__.pop(name, None)
            if space is not None:
                space.close()
        self.artifact.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _corrupt(self, why: str):
        return CorruptArtifact(f"{self.path}: corrupt artifact: {why}")

    def _check_structure(self):
        secs = self.artifact.sections
        self.version = self.artifact.version
        missing = [n for n in required_sections(self.version) if n not in secs]
        if missing:
            raise self._corrupt(f"missing sections: {', '.join(missing)}")
        with labelled(self.path):
            self.meta = R.unpack_meta(self.artifact.section(L.META))
            R.check_optional_sections(self.meta, secs)
        c = self.meta.counts
        n_chunks, n_docs, n_terms = c.chunks, c.documents, c.terms
        expect = {
            L.CHUNKS: n_chunks * L.CHUNK_DTYPE.itemsize,
            L.CHUNK_LENGTHS: n_chunks * 4,
            L.DOC_FIRST_CHUNK: (n_docs + 1) * 4,
            L.TERM_HASHES: n_terms * 8,
        }
        if self.version >= 2:
            expect[L.TERM_DOC_DF] = n_terms * 4
        langs = self.meta.bm25.get("languages") or []
        if (L.TERM_DOC_N in secs or langs) and not (self.version >= 4 and L.TERM_DOC_N in secs and langs):
            raise self._corrupt("BM25 statistics per language need format 4, meta.bm25.languages and terms.doc_n together")
        if langs:
            expect[L.TERM_DOC_N] = n_terms * 4
        for name, width in ((L.VECTOR_ROWS, 4), (L.VECTOR_ROWS_EN, 4), (L.CHUNK_KEYS, L.KEY_BYTES), (L.VECTOR_INPUTS, L.INPUT_BYTES)):
            if name in secs:
                expect[name] = n_chunks * width
        if self.meta.embedder_en is not None and self.version < 5:
            raise self._corrupt("an English leg needs format 5")
        if self.version >= 3:
            expect[L.POSTING_OFFSETS] = expect[L.DOC_POSTING_OFFSETS] = (n_terms + 1) * 8
            expect[L.POSTING_IMPACTS] = secs[L.POSTING_IDS].length // 4
            expect[L.DOC_POSTING_IMPACTS] = secs[L.DOC_POSTING_IDS].length // 4
            for name in (L.POSTING_IDS, L.DOC_POSTING_IDS):
                if secs[name].length % 4:
                    raise self._corrupt(f"section {name!r} is {secs[name].length} bytes, not a whole number of u32")
        else:
            expect[L.POSTING_TF_OFFSETS] = (n_terms + 1) * 8
        for name, size in expect.items():
            if secs[name].length != size:
                raise self._corrupt(f"section {name!r} is {secs[name].length} bytes, expected {size}")
        self.n_chunks, self.n_docs, self.n_terms = n_chunks, n_docs, n_terms

    # --- numeric tables, viewed in place -------------------------------------------------------
    @cached_property
    def chunks(self) -> np.ndarray:
        return self._checked_rows(np.frombuffer(self.artifact.section(L.CHUNKS), dtype=L.CHUNK_DTYPE))

    def _checked_rows(self, t: np.ndarray) -> np.ndarray:
        """Rows of the chunk table whose documents and statuses exist, or CorruptArtifact."""
        if len(t):
            self._check_row_bounds(int(t["doc"].max()), int(t["status"].max()))
        return t

    def _check_row_bounds(self, doc: int, status: int) -> None:
        """CorruptArtifact unless document ``doc`` and status ``status`` exist (a row's, or the
        largest of many rows')."""
        if doc >= self.n_docs or status >= len(self.meta.statuses):
            raise self._corrupt("chunk table points past the document or status tables")

    def chunk_row(self, cid: int):
        """Row ``cid`` of the chunk table (doc, start_line, end_line, status, flags), its page
        verified and its document and status checked: a search reads the rows of its results
        without the whole table (16 MB at a million chunks, ``chunks``)."""
        if "chunks" in self.__dict__ or self.artifact.sections[L.CHUNKS].codec != CODEC_RAW:
            return self.chunks[cid].item()
        if not 0 <= cid < self.n_chunks:
            raise IndexError(cid)
        width = _CHUNK_ROW.size
        self.artifact.check_range(L.CHUNKS, cid * width, (cid + 1) * width)
        row = _CHUNK_ROW.unpack_from(self._chunk_rows, cid * width)
        self._check_row_bounds(row[0], row[3])
        return row

    @cached_property
    def _chunk_rows(self) -> memoryview:
        return self.artifact.section(L.CHUNKS, paged=True)

    @property
    def has_keys(self) -> bool:
        """Whether the artifact holds chunk keys (an optional section, formats/SPEC.md)."""
        return L.CHUNK_KEYS in self.artifact.sections

    def chunk_key(self, cid: int) -> str | None:
        """Chunk ``cid``'s stable key as 16 hex digits (``chunks.key``, its page verified), or
        None in an artifact built before chunk keys."""
        if L.CHUNK_KEYS not in self.artifact.sections:
            return None
        at = cid * L.KEY_BYTES
        self.artifact.check_range(L.CHUNK_KEYS, at, at + L.KEY_BYTES)
        return bytes(self._chunk_keys[at : at + L.KEY_BYTES]).hex()

    @cached_property
    def _chunk_keys(self) -> memoryview:
        return self.artifact.section(L.CHUNK_KEYS, paged=True)

    def chunk_of_key(self, key: str) -> int | None:
        """The chunk whose key is ``key`` (16 hex digits), or None (none has it, or the artifact
        has no keys). Scans the keys: 8 bytes a chunk, once per lookup."""
        if L.CHUNK_KEYS not in self.artifact.sections:
            return None
        keys = np.frombuffer(self.artifact.section(L.CHUNK_KEYS), dtype="<u8")
        hit = np.flatnonzero(keys == np.frombuffer(bytes.fromhex(key), dtype="<u8")[0])
        return int(hit[0]) if len(hit) else None

    @cached_property
    def has_statuses(self) -> bool:
        """Whether the chunks carry more than one status (else a status says nothing)."""
        return sum(1 for s in self.meta.statuses if len(self.status_bitmap(s))) > 1

    @cached_property
    def lengths(self) -> np.ndarray:
        """Each chunk's weighted BM25 length: finite and not negative (formats 1-2 score with them)."""
        n = np.frombuffer(self.artifact.section(L.CHUNK_LENGTHS), dtype=L.WEIGHT_DTYPE)
        if len(n) and not (np.isfinite(n).all() and n.min() >= 0):
            raise self._corrupt("chunk lengths must be finite and not negative")
        return n

    @cached_property
    def first_chunk(self) -> np.ndarray:
        f = np.frombuffer(self.artifact.section(L.DOC_FIRST_CHUNK), dtype=L.ID_DTYPE)
        if f[0] != 0 or f[-1] != self.n_chunks or np.any(f[1:] < f[:-1]):
            raise self._corrupt("document chunk ranges are inconsistent")
        return f

    @cached_property
    def doc_paths(self) -> L.BlobTable:
        """The paths as stored; ``doc_path`` checks each is UTF-8 as it decodes it (checking all
        at open would cost O(documents))."""
        return self._blobs(L.DOC_PATHS, self.n_docs, paged=True)

    def _blobs(self, name: str, count: int | None = None, paged: bool = False) -> L.BlobTable:
        """A blob-table section; ``paged``: each item's bytes are verified when it is taken (page
        checksums), not the whole section at once (text blocks and paths: O(1) per item)."""
        check = (lambda a, b: self.artifact.check_range(name, a, b)) if paged else None
        t = L.BlobTable(self.artifact.section(name, paged=paged), f"section {name!r}", check)
        if count is not None and len(t) != count:
            raise self._corrupt(f"section {name!r} holds {len(t)} items, expected {count}")
        return t

    # --- term dictionary and postings ----------------------------------------------------------
    @cached_property
    def term_hashes(self) -> np.ndarray:
        return np.frombuffer(self.artifact.section(L.TERM_HASHES), dtype=L.HASH_DTYPE)

    @cached_property
    def doc_df(self) -> np.ndarray:
        """Documents holding each term (format 2), every page verified: ``term_df`` reads one
        term's, verifying only its page (a one-shot search reads a few terms of the vocabulary)."""
        self.artifact.raw(L.TERM_DOC_DF)
        return self._term_column(L.TERM_DOC_DF)

    def term_df(self, tid: int) -> int:
        """Documents holding term ``tid`` (``doc_df``'s item, its page verified)."""
        return self._term_value(L.TERM_DOC_DF, tid)

    @cached_property
    def _has_doc_n(self) -> bool:
        return L.TERM_DOC_N in self.artifact.sections

    def _term_column(self, name: str) -> np.ndarray:
        """A u32-per-term section viewed in place (verified by the caller, page by page)."""
        col = self._term_columns.get(name)
        if col is None:
            col = self._term_columns[name] = np.frombuffer(self.artifact.section(name, paged=True), dtype=L.ID_DTYPE)
        return col

    def _term_value(self, name: str, tid: int) -> int:
        col = self._term_column(name)
        if not 0 <= tid < len(col):
            raise self._corrupt(f"section {name!r} has no term {tid}")
        self.artifact.check_range(name, 4 * tid, 4 * tid + 4)
        return int(col[tid])

    def term_documents(self, tid: int) -> int:
        """BM25's N for term ``tid``: with statistics per language (format 4), the documents of
        the language most of its documents are in (at least its document frequency); else every
        document."""
        if not self._has_doc_n:
            return self.n_docs
        n, df = self._term_value(L.TERM_DOC_N, tid), self.term_df(tid)
        if not df <= n <= self.n_docs:
            raise self._corrupt(f"term {tid}'s documents for BM25 ({n}) lie outside {df}..{self.n_docs}")
        return n

    @cached_property
    def term_strings(self) -> L.BlobTable:
        """Each term's string, page-verified as it is taken (a lookup reads one or two)."""
        return self._blobs(L.TERM_STRINGS, self.n_terms, paged=True)

    @cached_property
    def _term_surfaces(self) -> L.BlobTable | None:
        return self._blobs(L.TERM_SURFACES, self.n_terms, paged=True) if L.TERM_SURFACES in self.artifact.sections else None

    def term_surfaces(self, term: str) -> tuple[str, ...] | None:
        """The words of the corpus that ``term`` stands for (terms.surfaces): () for a term the
        artifact lacks; None when it does not say (no such section, an artifact built before it,
        or more words than it lists), and a caller analyzes the text itself."""
        table = self._term_surfaces
        if table is None:
            return None
        tid = self.term_id(term)
        if tid is None:
            return ()
        try:
            return L.unpack_surfaces(bytes(table[tid]), term)
        except ValueError:
            raise self._corrupt(f"terms.surfaces item {tid} is not UTF-8 words") from None

    @cached_property
    def postings(self) -> L.BlobTable:
        return self._blobs(L.POSTINGS, self.n_terms)

    @cached_property
    def tf_offsets(self) -> np.ndarray:
        o = np.frombuffer(self.artifact.section(L.POSTING_TF_OFFSETS), dtype=L.OFFSET_DTYPE)
        if int(o[0]) != 0 or int(o[-1]) * 4 != self.artifact.sections[L.POSTING_TF].length:  # Python ints: a forged u64 must not wrap
            raise self._corrupt("term-frequency offsets do not cover postings.tf")
        return o

    @cached_property
    def tf(self) -> np.ndarray:
        return np.frombuffer(self.artifact.section(L.POSTING_TF), dtype=L.WEIGHT_DTYPE)

    def term_id(self, term: str) -> int | None:
        cache = self._term_cache
        if term in cache:
            return cache[term]
        tid = self._lookup_term(term)
        if len(cache) >= TERM_CACHE:
            cache.clear()  # a crude bound: warm processes re-fill the common terms at once
        cache[term] = tid
        return tid

    def _lookup_term(self, term: str) -> int | None:
        h = L.term_hash(term)
        hashes = self.term_hashes
        i = int(hashes.searchsorted(np.uint64(h)))  # a Python int would be compared as float64: the whole table cast per lookup
        want = term.encode("utf-8")
        while i < len(hashes) and hashes[i] == h:
            if bytes(self.term_strings[i]) == want:
                return i
            i += 1
        return None

    @cached_property
    def _impact_postings(self) -> tuple[np.ndarray, ...]:
        """(offsets, chunk ids, impacts, doc offsets, doc ids, doc impacts) of a format 3
        artifact, viewed in place and verified page by page as a term's slices are read (a
        one-shot search reads a few terms' postings, not all of them); the offsets' ends are
        checked here."""
        out = []
        art = self.artifact
        for offs, ids, imps in POSTING_SECTIONS:
            o = np.frombuffer(art.section(offs, paged=True), dtype=L.OFFSET_DTYPE)
            i = np.frombuffer(art.section(ids, paged=True), dtype=L.ID_DTYPE)
            art.check_range(offs, 0, 8)
            art.check_range(offs, 8 * (len(o) - 1), 8 * len(o))
            if int(o[0]) != 0 or int(o[-1]) != len(i):
                raise self._corrupt(f"section {offs!r} does not cover {ids!r}")
            out += [o, i, np.frombuffer(art.section(imps, paged=True), dtype=L.IMPACT_DTYPE)]
        return tuple(out)

    def impact_posting(self, tid: int, document: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, u8 impacts) of term ``tid`` (``document``: its document ids and
        document impacts); format 3. The ids are not checked against the tables here: an id
        past them makes the scatter that uses it fail, which runtime/bm25.py reports as corrupt."""
        o, ids, imps = self._impact_postings[3:] if document else self._impact_postings[:3]
        names = POSTING_SECTIONS[document]
        art = self.artifact
        art.check_range(names[0], 8 * tid, 8 * tid + 16)
        a, b = int(o[tid]), int(o[tid + 1])
        if not a <= b <= len(ids):
            raise self._corrupt(f"posting offsets of term {tid} are out of order")
        art.check_range(names[1], 4 * a, 4 * b)
        art.check_range(names[2], a, b)
        return ids[a:b], imps[a:b]

    def posting_ids(self, tid: int) -> np.ndarray:
        """The chunk ids holding term ``tid``, any format."""
        return self.impact_posting(tid)[0] if self.version >= 3 else self.posting(tid)[0]

    def posting(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids as uint32, weighted term frequencies) of term ``tid``; formats 1-2."""
        from pyroaring import BitMap

        try:
            bm = BitMap.deserialize(bytes(self.postings[tid]))
        except (ValueError, IndexError):  # pyroaring: IndexError on a buffer shorter than its header
            raise self._corrupt(f"posting list {tid} is not a valid roaring bitmap") from None
        ids = np.frombuffer(bm.to_array(), dtype=np.uint32) if len(bm) else np.zeros(0, np.uint32)
        a, b = int(self.tf_offsets[tid]), int(self.tf_offsets[tid + 1])
        if b - a != len(ids) or (len(ids) and ids[-1] >= self.n_chunks):
            raise self._corrupt(f"posting list {tid} disagrees with its term frequencies")
        return ids, self.tf[a:b]

    # --- filters -------------------------------------------------------------------------------
    def _bitmap(self, name: str, i: int):
        from pyroaring import BitMap

        try:
            bm = BitMap.deserialize(bytes(self._blobs(name)[i]))
        except (ValueError, IndexError):
            raise self._corrupt(f"bitmap {i} of {name!r} is invalid") from None
        if len(bm) and bm.max() >= self.n_chunks:
            raise self._corrupt(f"bitmap {i} of {name!r} names chunks past the chunk table")
        return bm

    def status_bitmap(self, status: str):
        from pyroaring import BitMap

        names = self.meta.statuses
        return self._bitmap(L.STATUS_BITMAPS, names.index(status)) if status in names else BitMap()

    def tag_bitmap(self, tag: str):
        from pyroaring import BitMap

        names = self.meta.tag_names
        return self._bitmap(L.TAG_BITMAPS, names.index(tag)) if tag in names else BitMap()

    def _first_path_at_or_after(self, want: bytes) -> int:
        """Index of the first document path >= ``want`` (paths are sorted bytewise)."""
        paths = self.doc_paths
        lo, hi = 0, len(paths)
        while lo < hi:
            mid = (lo + hi) // 2
            if bytes(paths[mid]) < want:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def path_range(self, prefix: str) -> tuple[int, int]:
        """Chunk id range [a, b) of documents whose path starts with ``prefix`` (paths are sorted)."""
        paths, want = self.doc_paths, prefix.encode("utf-8")
        lo = end = self._first_path_at_or_after(want)
        while end < len(paths) and bytes(paths[end]).startswith(want):
            end += 1
        return int(self.first_chunk[lo]), int(self.first_chunk[end])

    def doc_by_path(self, path: str) -> int | None:
        """The document index of exactly ``path``, else None."""
        want = path.encode("utf-8")
        d = self._first_path_at_or_after(want)
        return d if d < self.n_docs and bytes(self.doc_paths[d]) == want else None

    def doc_path(self, d: int) -> str:
        cache = self._path_cache  # every result names its document
        path = cache.get(d)
        if path is None:
            try:
                path = bytes(self.doc_paths[d]).decode("utf-8")
            except UnicodeDecodeError:
                raise self._corrupt(f"document path {d} is not UTF-8") from None
            if len(cache) >= PATH_CACHE:
                cache.clear()
            cache[d] = path
        return path

    def doc_chunks(self, d: int) -> range:
        """Chunk ids of document ``d``, in order."""
        return range(int(self.first_chunk[d]), int(self.first_chunk[d + 1]))

    def doc_of(self, cid: int) -> int:
        return int(self.chunk_row(cid)[0])

    def locate(self, cid: int) -> tuple[Index, int]:
        """(the artifact holding chunk ``cid``, its id there): this one (a set has several,
        runtime/collection.py)."""
        return self, cid

    # --- chunk text ----------------------------------------------------------------------------
    @cached_property
    def _text_blocks(self) -> L.BlobTable:
        return self._blobs(L.TEXT_BLOCKS, -(-self.n_chunks // self.meta.text_block), paged=True)

    @cached_property
    def _dctx(self) -> TextReader:
        return TextReader(bytes(self.artifact.section(L.TEXT_DICT)), self.path)

    def chunk(self, cid: int) -> StoredChunk:
        """Chunk ``cid`` with its text and where it comes from."""
        per = self.meta.text_block
        block = self._block(cid // per)
        if cid % per >= len(block):
            raise self._corrupt(f"text block of chunk {cid} is malformed")
        with labelled(self.path):
            rec = R.chunk_record(block[cid % per], f"text block {cid // per}")
        doc, start, end, status = self.chunk_row(cid)[:4]
        return StoredChunk(
            chunk_id=int(cid),
            doc_id=rec.doc_id,
            path=self.doc_path(doc),
            title=rec.title,
            section=rec.section,
            lines=(start, end),
            status=self.meta.statuses[status],
            tags=rec.tags,
            text=rec.text,
            chunk_key=self.chunk_key(cid),
        )

    def _block(self, b: int) -> list:
        """Decoded text block ``b``, from a small LRU cache. Thread-safe: a zstd decompression
        context must not be used by two threads at once (kb serve shares one Index)."""
        with self._block_lock:
            cache = self._block_cache
            if b in cache:
                cache.move_to_end(b)
                return cache[b]
            raw = self._dctx.decode(self._text_blocks[b], f"text block {b}")
            with labelled(self.path):
                per = self.meta.text_block
                block = R.unpack_text_block(raw, f"text block {b}", min(per, self.n_chunks - b * per))
            cache[b] = block
            if len(cache) > BLOCK_CACHE:
                cache.popitem(last=False)
            return block

    # --- document sources ----------------------------------------------------------------------
    @property
    def has_sources(self) -> bool:
        """Whether the artifact holds its documents' source text (docs.source, optional)."""
        return L.DOC_SOURCES in self.artifact.sections

    @cached_property
    def _sources(self) -> L.BlobTable:
        return self._blobs(L.DOC_SOURCES, self.n_docs, paged=True)

    def source_lines(self, d: int) -> list[str]:
        """Document ``d``'s source text as lines: line n (1-based) is the line chunks' ``lines``
        number n. Only when ``has_sources``."""
        what = f"the source of document {d}"
        with self._block_lock:
            raw = self._dctx.decode(self._sources[d], what)
        with labelled(self.path):
            return R.unpack_source(raw, what)

    def manifest(self) -> R.Manifest:
        with labelled(self.path):
            return R.unpack_manifest(self.artifact.section(L.MANIFEST))

    # --- vectors and models --------------------------------------------------------------------
    @cached_property
    def dense(self) -> "DenseSpace":
        """The main dense leg's vectors and query model (``vectors.hnsw``, ``model.embed``,
        ``model.query``; card meta.embedder)."""
        return DenseSpace(self, L.VECTORS, L.MODEL_EMBED, L.MODEL_QUERY, self.meta.embedder)

    @cached_property
    def english(self) -> "DenseSpace | None":
        """The English leg (format 5): a second dense leg, for queries in alphabetic scripts,
        beside a multilingual main one; None when the artifact has none."""
        if self.meta.embedder_en is None:
            return None
        return DenseSpace(self, L.VECTORS_EN, L.MODEL_EMBED_EN, L.MODEL_QUERY_EN, self.meta.embedder_en)

    def spaces(self) -> list:
        return [self.dense] + ([self.english] if self.english is not None else [])

    @property
    def has_vectors(self) -> bool:
        return L.VECTORS in self.artifact.sections

    @property
    def has_reranker(self) -> bool:
        return L.MODEL_RERANK in self.artifact.sections

    def model_files(self, name: str = L.MODEL_EMBED) -> dict[str, bytes]:
        """The files of a packed model (``model.embed`` or ``model.rerank``), copied out."""
        with labelled(self.path):
            return R.unpack_model_files(self.artifact.section(name), f"model section {name!r}")


class DenseSpace:
    """One dense leg's stored vectors (a usearch image, keys = chunk ids, one per chunk) and the
    model that embeds its queries: the main leg (``Index.dense``) or the English leg
    (``Index.english``, format 5). Opened lazily, checked before usearch or numpy trusts it."""

    def __init__(self, ix: Index, section: str, embed_section: str, query_section: str, card: dict | None):
        import threading

        self.artifact, self.path, self.meta, self.n_chunks = ix.artifact, ix.path, ix.meta, ix.n_chunks
        self.section, self.embed_section, self.query_section = section, embed_section, query_section
        self.card = card
        self.name = (card or {}).get("name")
        self._prefetch = None  # the thread of prefetch_vectors
        self._vector_state = None  # (usearch index, matrix view or None, HnswImage) once opened
        self._layout = None  # (matrix view or None, HnswImage) once read
        self._vector_lock = threading.Lock()
        self.rows_section = section.replace(".hnsw", ".rows")  # vectors.rows: the row of each key, when not in key order
        # A one-shot search (Searcher) sets walks: past EXACT_SCAN_MAX it then searches the graph by
        # kb's checked walk (runtime/graph_walk.py), which reads only what it visits, instead of
        # usearch, which needs every slot and page checked first (O(chunks) before a result).
        self.walks = False
        self._walk = None

    def _corrupt(self, why: str):
        return CorruptArtifact(f"{self.path}: corrupt artifact: {why}")

    def close(self) -> None:
        if self._prefetch is not None:
            self._prefetch.join()
        self._vector_state = self._layout = self._walk = None  # views of the map: let them go before it closes
        self.__dict__.pop("query_model", None)

    def model_files(self) -> dict[str, bytes]:
        """The files of the model that embeds this leg's queries, copied out."""
        with labelled(self.path):
            return R.unpack_model_files(self.artifact.section(self.embed_section), f"model section {self.embed_section!r}")

    @property
    def vectors(self):
        """The usearch index over the ``vectors.hnsw`` image, viewed in place once its graph is
        checked slot by slot (formats/hnsw.py) and its bytes by their checksums. The matrix of
        vectors before the graph is verified row by row as ``vectors_of`` reads it."""
        return self._opened_vectors()[0]

    @property
    def scans_vectors(self) -> bool:
        """Whether the dense leg scans every stored vector instead of searching the graph: up to
        EXACT_SCAN_MAX chunks, when numpy can view the vectors. Exact, and a one-shot search then
        neither checks the graph's every slot nor loads usearch (runtime/legs.py top_vector)."""
        return self.n_chunks <= EXACT_SCAN_MAX and self.vector_matrix is not None

    @property
    def vector_matrix(self) -> np.ndarray | None:
        """The stored vectors as a (chunks, dim) numpy view of the image, when numpy can view their
        kind (f16, f32); else None. Row ``vector_rows(ids)`` holds chunk id's vector."""
        return self._vector_layout()[0]

    @property
    def vector_dims(self) -> int:
        return self._vector_layout()[1].dims

    def vector_rows(self, ids: np.ndarray) -> np.ndarray:
        """The rows of ``vector_matrix`` that hold the vectors of chunks ``ids``: the ids
        themselves when the graph's nodes are in key order (one build thread), else through the
        checked permutation of the keys (formats/hnsw.py ``HnswImage.row_of_key``); for the walk,
        which has not read every key, through ``vectors.rows`` (``_walk_rows``)."""
        perm = self._vector_layout()[1].row_of_key
        if self._walk is not None:
            return self._walk_rows(np.asarray(ids, dtype=np.int64))
        return ids if perm is None else perm[ids]

    @property
    def walks_graph(self) -> bool:
        """Whether this leg searches by kb's walk of the graph: a one-shot search (``walks``) past
        EXACT_SCAN_MAX chunks. ``walks`` turns False where the walk is given up for usearch (an
        artifact without ``vectors.rows`` whose graph is not in key order)."""
        return self.walks and self.n_chunks > EXACT_SCAN_MAX

    @property
    def graph(self):
        """What the dense leg searches past EXACT_SCAN_MAX chunks: kb's walk for a one-shot
        search (``walks``), else the usearch index (``vectors``); both answer ``search(q, count)``."""
        self._vector_layout()
        return self._walk if self._walk is not None else self.vectors

    def _walk_rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of keys ``ids`` without reading every key: from ``vectors.rows`` (each row checked
        to be inside the matrix), else the keys' own rows once their nodes are seen to hold them
        (a graph built on one thread). A graph in another order without that section (an artifact
        of a kb-build before it) is opened the long way, once: every node read, usearch's path."""
        art = self.artifact
        if self.rows_section in art.sections:
            art.check_pages(self.rows_section, ids * 4, ids * 4 + 4)
            rows = np.frombuffer(art.section(self.rows_section, paged=True), dtype=L.ID_DTYPE)[ids].astype(np.int64)
            if len(rows) and int(rows.max()) >= self.n_chunks:
                raise self._corrupt(f"section {self.rows_section!r} names a row outside the vectors")
            return rows
        walk = self._walk
        if walk is not None and np.array_equal(walk.keys_of(ids).astype(np.int64), ids):
            return ids
        with self._vector_lock:
            self.walks, self._walk, self._layout = False, None, None
        return self.vector_rows(ids)

    def prefetch_vectors(self) -> None:
        """Open and check the vectors in a background thread, once: what a search will need (the
        matrix and its layout for a scanned artifact, and the crc32s of every row the scan will
        read; the whole graph otherwise) is read in O(chunks), and a one-shot search loads its
        embedder and runs BM25 meanwhile. The accessors wait for it; a failure is raised there,
        in the caller's thread, when it reads the bad bytes itself."""
        import threading

        if self._layout is not None or self._prefetch is not None:
            return

        def run():
            try:
                matrix = self._vector_layout()[0]
                if matrix is not None and self.scans_vectors:  # the scan reads every row: verify them here, off the caller's path
                    from kb.formats.hnsw import MATRIX_START

                    self.artifact.check_range(self.section, MATRIX_START, MATRIX_START + matrix.nbytes)
            except Exception:  # noqa: BLE001 - the caller's own access opens again and raises it
                pass

        self._prefetch = threading.Thread(target=run, name="kb-vectors", daemon=True)
        self._prefetch.start()

    def _vector_layout(self) -> tuple:
        """(matrix view or None, HnswImage): the graph's every slot checked past EXACT_SCAN_MAX
        chunks (that search goes through usearch), all but the slots below it (nothing follows them)."""
        state = self._layout
        if state is None:
            with self._vector_lock:  # one opening, whichever thread comes first; the other waits
                if self._layout is None:
                    walk = self._open_walk() if self.walks_graph else None
                    if walk is not None:
                        self._walk, self._layout = walk
                    elif self.n_chunks > EXACT_SCAN_MAX:
                        self._vector_state = self._open_vectors()
                        self._layout = self._vector_state[1:]
                    else:
                        view, image = self._checked_image(neighbours=False)
                        self._layout = (_matrix_view(view, image), image)
                state = self._layout
        return state

    def _opened_vectors(self) -> tuple:
        state = self._vector_state
        if state is None:
            with self._vector_lock:
                if self._vector_state is None:
                    self._vector_state = self._open_vectors()
                    if self._layout is None:
                        self._layout = self._vector_state[1:]
                state = self._vector_state
        return state

    def _open_walk(self):
        """(GraphWalk, (matrix view, HnswImage)) over the graph, having checked its headers and
        levels only (formats/hnsw.py ``graph_layout``); None where kb's compiled walk does not run
        here or on the stored kind (float16 rows), and usearch searches."""
        from kb.formats.artifact import PAGE
        from kb.formats.hnsw import NODE_HEAD, SCALAR_KINDS, GraphLayout, graph_layout

        from .graph_walk import GraphWalk, Pages, _f16_kernels

        kernels = _f16_kernels()
        if kernels is None:
            return None
        view, g = self._checked(lambda v: graph_layout(v, self.n_chunks), graph_head_only=True)
        if not isinstance(g, GraphLayout) or g.image.scalar != SCALAR_KINDS["f16"]:
            return None
        if max(NODE_HEAD + g.base_bytes + g.max_level * g.upper_bytes, g.image.cols) > PAGE:
            return None  # a record or row over two pages: Artifact.check_pages verifies a range's first and last page
        ef = (self.meta.vectors or {}).get("expansion_search") or USEARCH_EXPANSION_SEARCH
        art = self.artifact
        check = lambda starts, stops: art.check_pages(self.section, starts, stops)  # noqa: E731
        table = art.page_table(self.section)
        pages = Pages.none() if table is None else Pages(*table, lambda p: art.page_mismatch(self.section, p))
        walk = GraphWalk(view, g, _matrix_view(view, g.image), check, ef, kernels, pages, corrupt=self._corrupt)
        return walk, (walk.matrix, g.image)

    def _checked_image(self, neighbours: bool) -> tuple:
        from kb.formats.hnsw import check_hnsw

        # usearch trusts the graph it is given: a bad slot would crash the process
        return self._checked(lambda v: check_hnsw(v, self.n_chunks, neighbours=neighbours), graph_head_only=False)

    def _checked(self, parse, graph_head_only: bool) -> tuple:
        """(view, ``parse(view)``) of the vector section: the crc32s of its matrix head and of
        the graph after the matrix (its headers and levels array only, ``graph_head_only``)
        verified first, a BadIndex made a corrupt artifact, and the image's width checked
        against the card of the model that made the vectors."""
        from kb.formats.hnsw import _GRAPH, HEAD_SIZE, BadIndex, HnswImage, matrix_head

        if self.section not in self.artifact.sections:
            raise self._corrupt("no vector section (built with --embedder none)")
        view = self.artifact.section(self.section, paged=True)
        art = self.artifact
        try:
            art.check_range(self.section, 0, 8)
            rows, cols = matrix_head(view)
            at = min(8 + rows * cols, len(view))
            art.check_range(self.section, at, min(at + HEAD_SIZE + _GRAPH.size + 2 * self.n_chunks, len(view)) if graph_head_only else len(view))
            got = parse(view)
        except BadIndex as e:
            raise self._corrupt(f"vector index: {e}") from None
        image = got if isinstance(got, HnswImage) else got.image
        dim = (self.card or {}).get("dim", image.dims)
        if dim != image.dims:
            raise self._corrupt(f"vector index has {image.dims} dimensions, its embedder {dim}")
        return view, got

    def _open_vectors(self) -> tuple:
        from usearch.index import Index as UIndex

        from kb.formats.hnsw import NUMPY_SCALARS

        view, image = self._checked_image(neighbours=True)
        in_place = image.scalar in NUMPY_SCALARS
        try:
            idx = UIndex.restore(view, view=True, enable_key_lookups=not in_place)
        except Exception as e:  # usearch raises plain RuntimeError/ValueError on bad bytes
            raise self._corrupt(f"vector index does not load: {e}") from None
        if idx is None or len(idx) != self.n_chunks:
            raise self._corrupt("vector index does not match the chunk table")
        ef = (self.meta.vectors or {}).get("expansion_search")
        if ef:  # a usearch image does not keep it: kb.toml [vectors] expansion_search, kept in meta
            idx.expansion_search = ef
        if image.dims != idx.ndim:
            raise self._corrupt(f"vector index has {idx.ndim} dimensions, its header {image.dims}")
        return idx, _matrix_view(view, image), image

    def vectors_of(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of chunks ``ids`` as float32 (len(ids), dim), their bytes verified;
        corrupt when the index lacks one of them (its keys must be the chunk ids)."""
        from kb.formats.hnsw import MATRIX_START

        ids = np.asarray(ids, dtype=np.int64)
        m = self.vector_matrix
        if m is not None:
            rows = self.vector_rows(ids)
            row = m.strides[0]
            self.artifact.check_pages(self.section, MATRIX_START + rows * row, MATRIX_START + (rows + 1) * row)
            return self._finite(m[rows].astype(np.float32))
        got = self.vectors.get(ids.astype(np.uint64))
        try:
            vecs = np.asarray(got, dtype=np.float32).reshape(len(ids), -1)
        except (ValueError, TypeError):
            raise self._corrupt("the vector index lacks the vectors of some chunks") from None
        return self._finite(vecs)

    def _finite(self, vecs: np.ndarray) -> np.ndarray:
        """``vecs``, unless one is not finite (NaN cosines would reach the JSON as NaN)."""
        if not np.isfinite(vecs).all():
            raise self._corrupt("a stored vector is not finite")
        return vecs

    def cosines(self, ids: np.ndarray, qv: np.ndarray) -> np.ndarray:
        """The cosine of ``qv`` with the stored vector of each of ``ids`` (float32, in order),
        their bytes verified, over the rows in their stored kind (``stored_cosines``)."""
        ids = np.asarray(ids, dtype=np.int64)
        m = self.vector_matrix
        if m is None or not len(ids):
            return cosines_of(self.vectors_of(ids), qv)
        self.check_vectors(ids)
        at = self.vector_rows(ids)
        # Every row (a scan of the whole artifact): the matrix in place, then each id's cosine
        # picked; gathering the rows would copy them all into fresh pages first.
        whole = len(at) == len(m)
        sims = stored_cosines(qv, m if whole else m[at])
        if whole:
            sims = sims[at]
        bad = ~np.isfinite(sims)
        if bad.any() and np.isfinite(m[at[bad]]).all():
            sims[bad] = 0.0  # a zero vector: no direction, no similarity
        return self._finite(sims)  # a stored vector that is not finite gives a cosine that is not

    def check_vectors(self, ids: np.ndarray) -> None:
        """Verify the stored bytes of the vectors of ``ids`` (results of an HNSW search, whose
        walk through the graph read vectors kb cannot see)."""
        from kb.formats.hnsw import MATRIX_START

        if self.vector_matrix is not None and len(ids):
            rows = self.vector_rows(np.asarray(ids, dtype=np.int64))
            row = self.vector_matrix.strides[0]
            self.artifact.check_pages(self.section, MATRIX_START + rows * row, MATRIX_START + (rows + 1) * row)

    @property
    def has_query_model(self) -> bool:
        """Whether the artifact carries the in-place query encoder's section (formats/query_model.py)."""
        return self.query_section in self.artifact.sections

    @cached_property
    def query_model(self):
        """The query encoder's validated view of ``model.embed`` and its tokenizer pages. Neither
        section's whole crc32 is computed: the directory's row-group and page checksums verify
        what a query reads."""
        from kb.formats.query_model import QueryModel

        a = self.artifact
        return QueryModel(a.unchecked(self.query_section), a.unchecked(self.embed_section), a.sections[self.embed_section].crc32, str(self.path))


def members_of(ix) -> list[Index]:
    """The artifacts behind ``ix``: itself, or a set's members (runtime/collection.py)."""
    return getattr(ix, "members", None) or [ix]


def artifact_record(ix) -> dict | list[dict]:
    """The top-level ``artifact`` of kb's JSON: ``{id, name, path}``, a list of them for a set."""
    out = [{"id": m.artifact.id, "name": m.name, "path": str(m.path)} for m in members_of(ix)]
    return out if hasattr(ix, "members") else out[0]
