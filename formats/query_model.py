"""The ``model.query`` section: what the in-place query encoder reads (SPEC.md, "model.query").

A query needs the embedding model's weights and its tokenizer. ``model.embed`` already holds the
weights, as the CTranslate2 ``model.bin`` that kb-build embeds with (int8, one float32 scale
per row). This optional section adds no second copy of them: it is a directory that points into
``model.embed`` (each tensor's offset, dtype and shape), with a crc32 per group of rows so that
a query verifies exactly the bytes it reads, plus the tokenizer's vocabulary in pages a query
can look pieces up in without reading the other 250,000. Layout, all little-endian:

    Magic(8) "KBQMOD1\\n"   DirLength(u32)   DirCrc(u32): crc32 of the directory
    Directory   msgpack map, DirLength bytes
    Pages       blob table (formats/layout.py) of vocabulary pages

A vocabulary page holds a run of the pieces in UTF-8 byte order, as parallel arrays:

    Count(u32) Reserved(u32) Ids(u32 x n) Scores(f64 x n) Offsets(u32 x n+1, into Data)
    Data(the UTF-8 pieces back to back)

Scores are the tokenizer's own float64 values: Unigram compares sums of them, and a rounded score
can turn a tie the other way.

Byte order keeps every piece that starts with a given string in one run, so a query asks for
a substring and also learns whether any longer piece starts with it (``QueryModel.find``): the
query tokenizer stops extending a substring as soon as none does, and reads the few pages
around its words' prefixes rather than pages all over the vocabulary.

``QueryModel`` checks the header, the directory's crc and then the type, range and bounds of
every directory value against ``model.embed`` before it trusts an offset (formats/meta.py's
approach), and verifies each row group and page the first time it is read. Its section crc in
the artifact's table covers the whole section as usual (``kb info --verify``); a query never
computes it, nor the crc of ``model.embed``, which holds 24 to 121 MB a query mostly does not
read. The writer is ``pack_query_model``; ``ct2_variables`` reads the CTranslate2 file the
directory points into (the builder's side).
"""

from __future__ import annotations

import bisect
import struct
import threading
from typing import NamedTuple

import numpy as np

from .artifact import CorruptArtifact
from .checksum import crc32, crc32_many
from .layout import BlobTable, pack_blobs

MAGIC = b"KBQMOD1\n"
VERSION = 1
_HEAD = struct.Struct("<II")  # directory length, directory crc32
HEAD_SIZE = len(MAGIC) + _HEAD.size
DTYPES = {"int8": np.dtype("i1"), "float32": np.dtype("<f4")}
PAGE_SIZE = 256  # pieces per vocabulary page (~4 KiB: a crc32 and a parse of ~20 microseconds)
ROWS_PER_CRC = 64  # rows of the large tables (word and position embeddings) per crc32
_PAGE_HEAD = struct.Struct("<II")
MAX_DIRECTORY = 1 << 24
# How the passages' int8 pair sums added up (the encoder's "int8_pairs"; absent: "exact"): exactly,
# or cut to int16 as CTranslate2 does on an x86 CPU without int8 dot products.
INT8_PAIRS = ("exact", "saturate")


def _corrupt(why: str, label: str = "", section: str = "model.query") -> CorruptArtifact:
    return CorruptArtifact(f"{label + ': ' if label else ''}corrupt artifact: section {section!r}: {why}")


def encoder_tensors(e: dict) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor the query encoder reads (models/query_encoder.py), as (dtype, shape), for
    encoder parameters ``e``: "embed.*" (word, token-type and position embeddings, their layer
    norm), then per layer i "l{i}.qkv" (fused query/key/value), "l{i}.ao" (attention output),
    "l{i}.fi" and "l{i}.fo" (feed-forward in and out) as int8 weight ".w" (out, in), float32
    per-row scale ".s" and bias ".b", and "l{i}.aln", "l{i}.oln" (the layer norms after
    attention and feed-forward) as gain ".g" and bias ".b"."""
    H, FF, V = e["hidden"], e["intermediate"], e["vocab"]
    out = {"embed.word": ("int8", (V, H)), "embed.word.scale": ("float32", (V,)), "embed.type": ("int8", (2, H)),
           "embed.type.scale": ("float32", (2,)), "embed.pos": ("float32", (e["positions"], H)),
           "embed.ln.g": ("float32", (H,)), "embed.ln.b": ("float32", (H,))}
    for i in range(e["layers"]):
        for n, (rows, cols) in {"qkv": (3 * H, H), "ao": (H, H), "fi": (FF, H), "fo": (H, FF)}.items():
            out[f"l{i}.{n}.w"] = ("int8", (rows, cols))
            out[f"l{i}.{n}.s"] = ("float32", (rows,))
            out[f"l{i}.{n}.b"] = ("float32", (rows,))
        for n in ("aln", "oln"):
            out[f"l{i}.{n}.g"] = ("float32", (H,))
            out[f"l{i}.{n}.b"] = ("float32", (H,))
    return out


# --- CTranslate2's model.bin ----------------------------------------------------------------------
# Binary version 6 as ctranslate2/specs/model_spec.py `_serialize` writes it: u32 version, string
# name, u32 revision, u32 count, then per variable: string name, u8 rank, u32 x rank dims, u8
# dtype (order of ctranslate2's DataType: float32, int8, int16, int32, float16, bfloat16), u32
# byte length, the bytes; then u32 alias count and (alias, target) string pairs. A string is u16
# length including a final NUL, then the UTF-8 bytes and the NUL.
CT2_VERSION = 6
_CT2_DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")


class CT2Variable(NamedTuple):  # NamedTuples, not dataclasses: start-up cost (bench/startup_records.py)
    name: str
    dtype: str  # one of _CT2_DTYPES
    shape: tuple[int, ...]
    offset: int  # of the bytes, from the start of the model.bin buffer
    length: int


def ct2_variables(buf) -> dict[str, CT2Variable]:
    """The variables of a CTranslate2 ``model.bin`` (binary version 6), with where their bytes are.
    Aliases are resolved to their targets. ValueError on anything else."""
    mv = memoryview(buf)
    pos = 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize("<" + fmt)
        if pos + size > len(mv):
            raise ValueError("model.bin is truncated")
        out = struct.unpack_from("<" + fmt, mv, pos)
        pos += size
        return out

    def string() -> str:
        nonlocal pos
        (n,) = take("H")
        if n < 1 or pos + n > len(mv) or mv[pos + n - 1] != 0:
            raise ValueError("model.bin holds a malformed string")
        s = bytes(mv[pos : pos + n - 1]).decode("utf-8")
        pos += n
        return s

    (version,) = take("I")
    if version != CT2_VERSION:
        raise ValueError(f"model.bin binary version {version}, expected {CT2_VERSION}")
    string()
    take("I")
    (count,) = take("I")
    out: dict[str, CT2Variable] = {}
    for _ in range(count):
        name = string()
        (rank,) = take("B")
        shape = take("I" * rank)
        (code,) = take("B")
        (length,) = take("I")
        if code >= len(_CT2_DTYPES) or pos + length > len(mv):
            raise ValueError(f"model.bin variable {name!r} is malformed")
        out[name] = CT2Variable(name, _CT2_DTYPES[code], tuple(shape), pos, length)
        pos += length
    (aliases,) = take("I")
    for _ in range(aliases):
        alias, target = string(), string()
        if target not in out:
            raise ValueError(f"model.bin alias {alias!r} names no variable")
        out[alias] = out[target]
    if pos != len(mv):
        raise ValueError("model.bin has bytes after its aliases")
    return out


# --- writer ---------------------------------------------------------------------------------------
class TensorRef(NamedTuple):
    """Where one tensor of the encoder lies in ``model.embed``, and its row-group checksums."""

    name: str  # the encoder's role name, e.g. "l0.qkv.w" (models/query_encoder.py)
    dtype: str  # "int8" or "float32"
    shape: tuple[int, ...]
    offset: int  # from the start of the model.embed section
    rows_per_crc: int  # 0: one crc32 for the whole tensor

    def nbytes(self) -> int:
        n = DTYPES[self.dtype].itemsize
        for d in self.shape:
            n *= d
        return n


def row_group_crcs(data, ref: TensorRef) -> bytes:
    """crc32 of each group of ``ref.rows_per_crc`` leading rows of ``data`` (the tensor's bytes)."""
    data = memoryview(data)
    if not ref.rows_per_crc:
        return struct.pack("<I", crc32(data))
    step = ref.rows_per_crc * (ref.nbytes() // ref.shape[0])
    return b"".join(struct.pack("<I", crc32(data[a : a + step])) for a in range(0, len(data), step))


def pack_page(pieces: list[tuple[bytes, int, float]]) -> bytes:
    """One vocabulary page from (UTF-8 piece, id, score), already in byte order."""
    n = len(pieces)
    offsets = np.zeros(n + 1, dtype="<u4")
    if n:
        np.cumsum([len(p[0]) for p in pieces], out=offsets[1:])
    return (
        _PAGE_HEAD.pack(n, 0)
        + np.array([p[1] for p in pieces], dtype="<u4").tobytes()
        + np.array([p[2] for p in pieces], dtype="<f8").tobytes()
        + offsets.tobytes()
        + b"".join(p[0] for p in pieces)
    )


def vocabulary_pages(vocab: list[tuple[str, int, float]]) -> tuple[list[bytes], list[bytes]]:
    """Pages of (piece, id, score) in UTF-8 byte order, and each page's first piece."""
    entries = sorted((p.encode("utf-8"), i, float(sc)) for p, i, sc in vocab)
    pages = [entries[a : a + PAGE_SIZE] for a in range(0, len(entries), PAGE_SIZE)]
    return [pack_page(pg) for pg in pages], [pg[0][0] for pg in pages]


def pack_query_model(embed_crc32: int, encoder: dict, tensors: list[tuple[TensorRef, bytes]], tokenizer: dict,
                     vocab: list[tuple[str, int, float]]) -> bytes:
    """The section's bytes. ``tensors``: each reference with its row-group crc32s
    (``row_group_crcs``); ``vocab``: the tokenizer's (piece, id, score) list."""
    import msgpack

    pages, fences = vocabulary_pages(vocab)
    directory = {
        "version": VERSION,
        "embed_crc32": embed_crc32,
        "encoder": encoder,
        "tensors": {r.name: [r.dtype, list(r.shape), r.offset, r.rows_per_crc, crcs] for r, crcs in tensors},
        "tokenizer": tokenizer,
        "pages": {"count": len(pages), "fences": fences,
                  "crcs": np.array([crc32(p) for p in pages], dtype="<u4").tobytes()},
    }
    d = msgpack.packb(directory, use_bin_type=True)
    return MAGIC + _HEAD.pack(len(d), crc32(d)) + d + pack_blobs(pages)


# --- reader ---------------------------------------------------------------------------------------
def _is_int(v, lo: int = 0, hi: int = 1 << 63) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi


class _Tensor(NamedTuple):
    ref: TensorRef
    crcs: np.ndarray  # u32 per row group


class QueryModel:
    """A validated ``model.query`` directory over the ``model.embed`` bytes it describes.

    ``query`` and ``embed``: the two sections' stored bytes (memoryviews of the mmap, unchecked:
    this class verifies what it reads); ``embed_crc32``: the crc32 the section table gives
    ``model.embed``, which the directory must name (a directory made for another model is
    refused). Every view it returns has been checked against its crc32. Thread-safe.
    """

    def __init__(self, query, embed, embed_crc32: int, label: str = ""):
        self.label = label  # the artifact's path, for error messages
        self._query = memoryview(query)
        self._embed = memoryview(embed)
        self._lock = threading.Lock()
        self._verified: set = set()
        self._whole: dict[str, np.ndarray] = {}  # verified whole tensors
        self._pages: dict[int, tuple] = {}
        try:
            d = self._directory()
            if d.get("embed_crc32") != embed_crc32:
                raise _corrupt("it describes another model.embed section (crc32 differs)")
            self.encoder = self._encoder_params(d.get("encoder"))
            self.tokenizer = self._tokenizer_params(d.get("tokenizer"))
            self._tensors = self._tensor_table(d.get("tensors"))
            self._check_encoder()
            self._fences, self._page_crcs, self._page_table = self._page_index(d.get("pages"))
        except CorruptArtifact as e:
            raise CorruptArtifact(f"{label}: {e}" if label else str(e)) from None

    # --- validation -----------------------------------------------------------------------------
    def _directory(self) -> dict:
        import msgpack

        q = self._query
        if len(q) < HEAD_SIZE or bytes(q[: len(MAGIC)]) != MAGIC:
            raise _corrupt("not a query-model section (bad magic)")
        length, crc = _HEAD.unpack(bytes(q[len(MAGIC) : HEAD_SIZE]))
        if length > MAX_DIRECTORY or HEAD_SIZE + length > len(q):
            raise _corrupt("directory runs past the section")
        raw = q[HEAD_SIZE : HEAD_SIZE + length]
        if crc32(raw) != crc:
            raise _corrupt("directory crc mismatch")
        self._dir_end = HEAD_SIZE + length
        try:
            d = msgpack.unpackb(bytes(raw), raw=False, strict_map_key=True)
        except (ValueError, msgpack.UnpackException):
            raise _corrupt("directory is not msgpack") from None
        if not isinstance(d, dict) or d.get("version") != VERSION:
            raise _corrupt(f"directory version {d.get('version') if isinstance(d, dict) else None!r}, this kb reads {VERSION}")
        return d

    @staticmethod
    def _encoder_params(e) -> dict:
        ints = ("layers", "heads", "hidden", "intermediate", "positions", "vocab")
        if not isinstance(e, dict) or not all(_is_int(e.get(k), 1, 1 << 24) for k in ints):
            raise _corrupt("encoder parameters are missing or out of range")
        if not isinstance(e.get("eps"), float) or not 0 < e["eps"] < 1 or e.get("activation") != "gelu":
            raise _corrupt("encoder eps or activation is invalid")
        if e["hidden"] % e["heads"]:
            raise _corrupt("hidden size is not a multiple of the heads")
        if e.setdefault("int8_pairs", "exact") not in INT8_PAIRS:
            raise _corrupt("encoder int8_pairs is invalid")
        return e

    @staticmethod
    def _tokenizer_params(t) -> dict:
        if not isinstance(t, dict) or t.get("model") not in ("wordpiece", "unigram") or not isinstance(t.get("pipeline"), str):
            raise _corrupt("tokenizer parameters are missing")
        specials = t.get("specials")
        if not isinstance(specials, list) or not all(
            isinstance(s, list) and len(s) == 4 and isinstance(s[0], str) and s[0] and _is_int(s[1], 0, 1 << 31)
            and isinstance(s[2], bool) and isinstance(s[3], bool) for s in specials):
            raise _corrupt("tokenizer special tokens are invalid")
        for key in ("bos", "eos", "pieces", "max_piece_chars"):
            if not _is_int(t.get(key), 0, 1 << 31):
                raise _corrupt(f"tokenizer {key} is invalid")
        unk = t.get("unk")
        if not (isinstance(unk, list) and len(unk) == 3 and isinstance(unk[0], str) and _is_int(unk[1], 0, 1 << 31)
                and isinstance(unk[2], float)):
            raise _corrupt("tokenizer unk is invalid")
        if t["model"] == "wordpiece":
            if not isinstance(t.get("prefix"), str) or not _is_int(t.get("max_word_chars"), 1, 1 << 31):
                raise _corrupt("wordpiece prefix or word limit is invalid")
        else:
            floor = t.get("floor")
            if not (isinstance(floor, list) and len(floor) == 2 and isinstance(floor[0], str) and isinstance(floor[1], float)):
                raise _corrupt("unigram floor piece is invalid")
        return t

    def _tensor_table(self, table) -> dict[str, _Tensor]:
        if not isinstance(table, dict):
            raise _corrupt("tensor table is missing")
        out = {}
        for name, v in table.items():
            if not (isinstance(v, list) and len(v) == 5 and v[0] in DTYPES and isinstance(v[1], list) and 1 <= len(v[1]) <= 2
                    and all(_is_int(x, 1, 1 << 31) for x in v[1]) and _is_int(v[2]) and _is_int(v[3], 0, 1 << 31)
                    and isinstance(v[4], bytes)):
                raise _corrupt(f"tensor {name!r} is malformed")
            ref = TensorRef(name, v[0], tuple(v[1]), v[2], v[3])
            if ref.offset + ref.nbytes() > len(self._embed):
                raise _corrupt(f"tensor {name!r} runs past model.embed")
            groups = -(-ref.shape[0] // ref.rows_per_crc) if ref.rows_per_crc else 1
            if len(v[4]) != 4 * groups:
                raise _corrupt(f"tensor {name!r} has {len(v[4]) // 4} checksums for {groups} row groups")
            out[name] = _Tensor(ref, np.frombuffer(v[4], dtype="<u4"))
        return out

    def _check_encoder(self) -> None:
        """The tensors the encoder reads are all there, with the dtypes and shapes its parameters
        imply, and every token id the tokenizer can give has a row of word embeddings."""
        for name, (dtype, shape) in encoder_tensors(self.encoder).items():
            t = self._tensors.get(name)
            if t is None or t.ref.dtype != dtype or t.ref.shape != shape:
                raise _corrupt(f"tensor {name!r} is missing or not {dtype} of shape {shape}")
        t = self.tokenizer
        ids = [t["bos"], t["eos"], t["unk"][1]] + [s[1] for s in t["specials"]]
        if t["pieces"] > self.encoder["vocab"] or max(ids) >= self.encoder["vocab"]:
            raise _corrupt("the tokenizer gives ids past the word embeddings")

    def _page_index(self, pages):
        if not isinstance(pages, dict) or not _is_int(pages.get("count"), 0, 1 << 31):
            raise _corrupt("vocabulary page index is missing")
        n = pages["count"]
        fences, crcs = pages.get("fences"), pages.get("crcs")
        if (not isinstance(fences, list) or not all(isinstance(f, bytes) for f in fences) or not isinstance(crcs, bytes)
                or len(fences) != n or len(crcs) != 4 * n):
            raise _corrupt("vocabulary page index does not match its page count")
        if any(a >= b for a, b in zip(fences, fences[1:])):
            raise _corrupt("vocabulary pages are not in byte order")
        table = BlobTable(self._query[self._dir_end :], "section 'model.query' vocabulary pages")
        if len(table) != n:
            raise _corrupt(f"{len(table)} vocabulary pages, the index names {n}")
        return fences, np.frombuffer(crcs, dtype="<u4"), table

    # --- tensors --------------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self._tensors

    def shape(self, name: str) -> tuple[int, ...]:
        return self._tensor(name).ref.shape

    def _tensor(self, name: str) -> _Tensor:
        t = self._tensors.get(name)
        if t is None:
            raise _corrupt(f"the encoder's tensor {name!r} is missing", self.label)
        return t

    def _view(self, t: _Tensor) -> np.ndarray:
        r = t.ref
        return np.frombuffer(self._embed, dtype=DTYPES[r.dtype], count=r.nbytes() // DTYPES[r.dtype].itemsize, offset=r.offset).reshape(r.shape)

    def _check_groups(self, groups) -> None:
        """Verify row groups ``groups`` ((tensor, group) pairs) not verified yet, in one
        crc32_many call (the GIL let go while it sums); CorruptArtifact names the first that
        does not match."""
        todo = [(t, g) for t, g in groups if (t.ref.name, g) not in self._verified]
        if not todo:
            return
        starts, stops = zip(*(self._group_span(t, g) for t, g in todo))
        got = crc32_many(self._embed, starts, stops)
        for (t, g), crc in zip(todo, got.tolist()):
            if crc != int(t.crcs[g]):
                raise _corrupt(f"crc mismatch in tensor {t.ref.name!r}, rows group {g}", self.label, "model.embed")
        with self._lock:
            self._verified.update((t.ref.name, g) for t, g in todo)

    def tensor(self, name: str) -> np.ndarray:
        """The whole tensor, viewed in place (read-only), its bytes verified."""
        v = self._whole.get(name)
        if v is None:
            self.verify([name])
            v = self._whole[name]
        return v

    def verify(self, names) -> None:
        """Check the crc32s of whole tensors ``names`` (once); CorruptArtifact on the first
        mismatch. One crc32_many call sums all their row groups with the GIL let go, so helper
        threads call it ahead of use without holding up the thread that runs the encoder."""
        self._check_groups((t, g) for t in (self._tensor(n) for n in dict.fromkeys(names) if n not in self._whole) for g in range(len(t.crcs)))
        for n in names:
            if n not in self._whole:
                self._whole[n] = self._view(self._tensor(n))

    def _group_span(self, t: _Tensor, group: int) -> tuple[int, int]:
        """Byte offsets in model.embed of row group ``group`` of ``t``."""
        r = t.ref
        if not r.rows_per_crc:
            return r.offset, r.offset + r.nbytes()
        row = r.nbytes() // r.shape[0]
        lo = r.offset + group * r.rows_per_crc * row
        return lo, min(lo + r.rows_per_crc * row, r.offset + r.nbytes())

    def rows(self, name: str, index) -> np.ndarray:
        """Rows ``index`` of a tensor (a copy), verifying only the row groups they fall in."""
        t = self._tensor(name)
        index = np.asarray(index, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= t.ref.shape[0]):
            raise _corrupt(f"a row of {name!r} outside its {t.ref.shape[0]} rows was asked for", self.label)
        step = t.ref.rows_per_crc
        self._check_groups((t, g) for g in (sorted({i // step for i in index.tolist()}) if step else [0]))  # not np.unique: numpy 2 imports numpy.ma for it (~20 ms)
        return self._view(t)[index]

    # --- vocabulary -----------------------------------------------------------------------------
    def _page(self, p: int) -> tuple[bytes, list[int], np.ndarray, np.ndarray]:
        """Page ``p`` as (its pieces' bytes, their n + 1 bounds, ids, scores), verified the first
        time: its crc32, then the sizes, the bounds, the ids against the vocabulary and the
        scores; its first piece is its fence. Pieces are cut out of the bytes only where a
        lookup bisects (``find``): a query reads a few of each page's 256."""
        page = self._pages.get(p)
        if page is not None:
            return page
        raw = self._page_table[p]
        if crc32(raw) != int(self._page_crcs[p]):
            raise _corrupt(f"crc mismatch in vocabulary page {p}", self.label)
        if len(raw) < _PAGE_HEAD.size:
            raise _corrupt(f"vocabulary page {p} is shorter than its header", self.label)
        n, _ = _PAGE_HEAD.unpack(bytes(raw[: _PAGE_HEAD.size]))
        fixed = _PAGE_HEAD.size + n * 12 + (n + 1) * 4
        if not n or fixed > len(raw):
            raise _corrupt(f"vocabulary page {p} is shorter than its {n} pieces", self.label)
        at = _PAGE_HEAD.size
        ids = np.frombuffer(raw, dtype="<u4", count=n, offset=at)
        scores = np.frombuffer(raw, dtype="<f8", count=n, offset=at + 4 * n)
        offsets = np.frombuffer(raw, dtype="<u4", count=n + 1, offset=at + 12 * n)
        data = bytes(raw[fixed:])
        if (int(offsets[0]) != 0 or int(offsets[-1]) != len(data) or bool((offsets[1:] < offsets[:-1]).any())
                or int(ids.max()) >= self.tokenizer["pieces"] or not np.isfinite(scores).all()):
            raise _corrupt(f"vocabulary page {p} is inconsistent", self.label)
        bounds = offsets.tolist()
        upper = self._fences[p + 1] if p + 1 < len(self._fences) else None
        if data[: bounds[1]] != self._fences[p] or (upper is not None and data[bounds[-2] :] >= upper):
            raise _corrupt(f"vocabulary page {p} is inconsistent", self.label)
        page = (data, bounds, ids, scores)
        self._pages[p] = page
        return page

    def find(self, piece: str) -> tuple[tuple[int, float] | None, bool]:
        """(id, score) of ``piece`` in the tokenizer's vocabulary or None; and whether a longer
        piece starts with it. A page holds its pieces in byte order (``vocabulary_pages``), so
        bisecting it finds a piece; a forged page out of order (with a crc32 to match) could
        only misdirect the search to another id of the vocabulary."""
        key = piece.encode("utf-8")
        fences = self._fences
        p = bisect.bisect_right(fences, key) - 1
        if p < 0:
            return None, bool(fences) and fences[0].startswith(key)
        data, bounds, ids, scores = self._page(p)
        n = len(bounds) - 1

        def at(i: int) -> bytes:
            return data[bounds[i] : bounds[i + 1]]

        i = bisect.bisect_left(range(n), key, key=at)
        entry = None
        if i < n and at(i) == key:
            entry = (int(ids[i]), float(scores[i]))
            i += 1
        after = at(i) if i < n else (fences[p + 1] if p + 1 < len(fences) else b"")
        return entry, after.startswith(key) and after != key
