"""Validation of the ``vectors.hnsw`` section (a usearch 2.x ``Index.save()`` image) before usearch
is allowed to search it.

usearch restores a saved index as a view and then trusts it: a neighbour slot past the end of
the graph, or a node level larger than its tape, makes a search read out of bounds and kill the
process. A crc32 only proves the bytes are the ones the table names, and anyone who edits a
file can forge it. So, as safetensors does with its header, every size, offset and slot is checked
here first (in numpy; it reads the whole graph, so kb checks it in a background thread while a
search starts, runtime/index.py). The layout, all little-endian:

    matrix:  rows(u32) cols(u32)  rows x cols bytes     (cols = bytes per vector)
    head:    "usearch"(7) major(u16) minor(u16) patch(u16) metric(u8) scalar(u8) key(u8)
             slot(u8) count_present(u64) count_deleted(u64) dimensions(u64) multi(u8)  = 64 bytes
    graph:   size(u64) connectivity(u64) connectivity_base(u64) max_level(u64) entry_slot(u64)
             levels(i16 x size)
             per node: key(u64) level(i16) then, for level 0, count(u32) + connectivity_base
             slots(u32), and for each level 1..level, count(u32) + connectivity slots(u32)
"""

from __future__ import annotations

import struct
from functools import cached_property
from typing import NamedTuple

import numpy as np

MAGIC = b"usearch"
MAJOR = 2
_MATRIX = struct.Struct("<II")
_HEAD = struct.Struct("<7sHHHBBBBQQQB")  # 48 bytes used of the 64
HEAD_SIZE = 64
_GRAPH = struct.Struct("<QQQQQ")
KEY_U64, SLOT_U32 = 14, 15
METRIC_COS = ord("c")  # usearch metric_kind_t: kb builds every index with cos (a 0, "unknown", has no distance function)
SCALAR_BYTES = {11: 4, 12: 2, 4: 2, 23: 1, 10: 8, 17: 1}  # f32, f16, bf16, i8, f64, u8
SCALAR_KINDS = {"f32": 11, "f16": 12, "bf16": 4, "i8": 23}  # usearch's dtype names -> scalar kinds
MAX_CONNECTIVITY = 4096
MAX_LEVEL = 64
NODE_HEAD = 10  # key(u64) + level(i16)


class BadIndex(ValueError):
    """The bytes are not a usearch index this reader can trust; the message says why."""


# NamedTuples and plain classes, not frozen dataclasses: start-up cost (bench/startup_records.py).
class HnswImage(NamedTuple):
    """What ``check_hnsw`` learned: the vector matrix at the start of the image (``rows`` x
    ``cols`` bytes from byte ``MATRIX_START``), its scalar kind and dimensions, the graph's start,
    and whether node i has key i (vectors added in key order: row i is then key i's vector). When
    not (a graph built by several threads adds nodes in the order they arrive), ``row_of_key[k]``
    is the row of key k's vector: the keys are checked to be a permutation of 0..count-1."""

    rows: int
    cols: int
    dims: int
    scalar: int
    graph_start: int
    keys_in_order: bool
    row_of_key: np.ndarray | None = None


MATRIX_START = _MATRIX.size
NUMPY_SCALARS = {11: "<f4", 12: "<f2"}  # the stored kinds numpy can view in place


def matrix_head(buf) -> tuple[int, int]:
    """(rows, cols) of the vector matrix; BadIndex when the buffer is shorter than its header."""
    if len(buf) < _MATRIX.size:
        raise BadIndex("shorter than its matrix header")
    return _MATRIX.unpack(bytes(buf[: _MATRIX.size]))


class GraphLayout:
    """Where everything of a usearch image lies, from its headers and its levels array alone
    (``graph_layout``): node i's record is bytes ``start_of(i)`` to ``start_of(i) + bytes_of(i)``,
    its level-0 list at ``start_of(i) + NODE_HEAD``, its level-l list (1 <= l <= levels[i]) at
    ``start_of(i) + NODE_HEAD + base_bytes + (l - 1) * upper_bytes``; a list is count(u32) then
    that many slots(u32) of its capacity (``base`` at level 0, ``conn`` above). Only the nodes
    above level 0 (one in ``conn`` or so) are listed, so no array of a million offsets is made
    for a search that visits a few thousand (``starts`` and ``node_bytes`` are every node's,
    computed when asked for)."""

    def __init__(self, image: HnswImage, size: int, conn: int, base: int, max_level: int, entry: int, levels: np.ndarray,
                 levels_at: int, nodes_at: int, upper: np.ndarray, upper_levels: np.ndarray):  # fmt: skip
        self.image = image  # keys_in_order and row_of_key not yet known: True and None here
        self.size, self.conn, self.base, self.max_level, self.entry = size, conn, base, max_level, entry
        self.levels = levels  # int16 per node, viewed in place
        self.levels_at = levels_at  # byte offset of the levels array (2 x size bytes)
        self.nodes_at = nodes_at  # byte offset of node 0's record
        self.upper = upper  # the slots of the nodes above level 0, ascending
        self.upper_levels = upper_levels  # int64: 0, then the running sum of their levels

    @property
    def base_bytes(self) -> int:
        return 4 + 4 * self.base

    @property
    def upper_bytes(self) -> int:
        return 4 + 4 * self.conn

    def list_at(self, level: int) -> int:
        """Where a node's level-``level`` list starts, from the start of its record."""
        return NODE_HEAD + (0 if level == 0 else self.base_bytes + (level - 1) * self.upper_bytes)

    def start_of(self, slots) -> np.ndarray:
        """The byte offset of each of ``slots``' records (int64)."""
        slots = np.asarray(slots, dtype=np.int64)
        before = self.upper_levels[np.searchsorted(self.upper, slots)]  # upper levels of the nodes before each
        return self.nodes_at + slots * (NODE_HEAD + self.base_bytes) + before * self.upper_bytes

    def bytes_of(self, slots) -> np.ndarray:
        """The length of each of ``slots``' records (int64)."""
        return NODE_HEAD + self.base_bytes + self.levels[slots].astype(np.int64) * self.upper_bytes

    @cached_property
    def starts(self) -> np.ndarray:
        return self.start_of(np.arange(self.size, dtype=np.int64))

    @cached_property
    def node_bytes(self) -> np.ndarray:
        return self.bytes_of(np.arange(self.size, dtype=np.int64))


def graph_layout(buf, count: int) -> GraphLayout | HnswImage:
    """The headers and levels of a single-key usearch index of ``count`` vectors, checked (sizes,
    kinds, ranges, the levels against the image's length), without reading any node: enough to
    find every record in O(1) after an O(count) sum over the 2-byte levels. An empty graph's
    HnswImage when ``count`` is 0. BadIndex otherwise."""
    b = np.frombuffer(buf, dtype=np.uint8)
    n = len(b)
    rows, cols = matrix_head(b)
    pos = _MATRIX.size + rows * cols
    graph_start = pos
    if pos + HEAD_SIZE + _GRAPH.size > n:
        raise BadIndex("vector matrix runs past the end")
    magic, major, _minor, _patch, metric, scalar, key, slot, present, deleted, dims, multi = _HEAD.unpack(
        bytes(b[pos : pos + _HEAD.size])
    )
    if magic != MAGIC or major != MAJOR:
        raise BadIndex("not a usearch 2.x index")
    if key != KEY_U64 or slot != SLOT_U32 or multi:
        raise BadIndex("unexpected key or slot kind")
    if metric != METRIC_COS:
        raise BadIndex(f"metric kind {metric}, expected cos")  # usearch would call a null distance function
    if scalar not in SCALAR_BYTES or cols != dims * SCALAR_BYTES[scalar]:
        raise BadIndex("vector width does not match its dimensions")
    if rows != count or present != count or deleted:
        raise BadIndex(f"holds {rows} vectors ({present} present, {deleted} deleted), expected {count}")
    pos += HEAD_SIZE
    size, conn, base, max_level, entry = _GRAPH.unpack(bytes(b[pos : pos + _GRAPH.size]))
    pos += _GRAPH.size
    if size != count:
        raise BadIndex(f"graph has {size} nodes, expected {count}")
    if not (2 <= conn <= MAX_CONNECTIVITY and conn <= base <= 2 * MAX_CONNECTIVITY) or max_level > MAX_LEVEL:
        raise BadIndex("graph parameters out of range")
    image = HnswImage(rows, cols, dims, scalar, graph_start, True)
    if size == 0:
        if pos != n:
            raise BadIndex("bytes after an empty graph")
        return image
    if entry >= size:
        raise BadIndex("entry point outside the graph")
    if pos + 2 * size > n:
        raise BadIndex("node levels run past the end")
    levels = b[pos : pos + 2 * size].view("<i2")
    levels_at = pos
    pos += 2 * size
    if levels.min() < 0 or levels.max() > max_level or levels[entry] != max_level:
        raise BadIndex("node levels out of range")
    upper = np.flatnonzero(levels)
    upper_levels = np.concatenate(([0], np.cumsum(levels[upper], dtype=np.int64)))
    need = size * (NODE_HEAD + 4 + 4 * base) + int(upper_levels[-1]) * (4 + 4 * conn)
    if pos + need != n:
        raise BadIndex(f"graph is {n - pos} bytes, its levels need {need}")
    return GraphLayout(image, size, conn, base, max_level, entry, levels, levels_at, pos, upper, upper_levels)


def check_hnsw(buf, count: int, neighbours: bool = True) -> HnswImage:
    """Raise BadIndex unless ``buf`` is a well-formed single-key usearch index of ``count`` vectors
    keyed 0..count-1 whose every neighbour slot points inside the graph. ``neighbours=False``
    checks all but the slots: enough to read the vector matrix and which row holds which key,
    not to hand the graph to usearch."""
    g = graph_layout(buf, count)
    if isinstance(g, HnswImage):
        return g
    b = np.frombuffer(buf, dtype=np.uint8)
    levels, starts, size, base = g.levels, g.starts, g.size, g.base
    head = _rows(b, starts, NODE_HEAD)
    keys = head[:, :8].copy().view("<u8").ravel()
    if np.any(keys >= count) or np.any(head[:, 8:].copy().view("<i2").ravel() != levels):
        raise BadIndex("node keys or levels are inconsistent")
    in_order = bool(np.array_equal(keys, np.arange(count, dtype=np.uint64)))
    row_of_key = None
    if not in_order:
        row_of_key = np.full(count, -1, dtype=np.int64)
        row_of_key[keys.astype(np.int64)] = np.arange(count, dtype=np.int64)
        if np.any(row_of_key < 0):
            raise BadIndex("node keys repeat: not one node per vector")
    del head, keys
    image = HnswImage(g.image.rows, g.image.cols, g.image.dims, g.image.scalar, g.image.graph_start, in_order, row_of_key)
    if not neighbours:
        return image
    _check_neighbours(b, starts + NODE_HEAD, base, size)
    for level in range(1, g.max_level + 1):
        at = np.flatnonzero(levels >= level)
        _check_neighbours(b, starts[at] + g.list_at(level), g.conn, size)
    return image


ROWS_AT_ONCE = 1 << 16  # neighbour lists gathered at a time (8.6 MB for M = 16): bounded scratch memory


def _rows(b: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each of ``starts`` as one row each (a copy): indexing rows of a
    sliding-window view copies each row whole, several times faster than a gather per byte."""
    return np.lib.stride_tricks.sliding_window_view(b, width)[starts]


def _check_neighbours(b: np.ndarray, starts: np.ndarray, capacity: int, size: int) -> None:
    """Each list at ``starts``: count(u32) <= capacity, then that many slots < size."""
    for lo in range(0, len(starts), ROWS_AT_ONCE):
        lists = _rows(b, starts[lo : lo + ROWS_AT_ONCE], 4 + 4 * capacity).view("<u4")
        counts = lists[:, 0]
        if np.any(counts > capacity):
            raise BadIndex("a neighbour list is longer than its capacity")
        slots = lists[:, 1:]
        if np.any(slots >= size) and np.any(slots[np.arange(capacity) < counts[:, None]] >= size):
            raise BadIndex("a neighbour slot points outside the graph")


def permuted(buf, count: int, order: np.ndarray, batch: int = ROWS_AT_ONCE, matrix=None):
    """The bytes (in pieces, to write one after another) of the usearch image ``buf`` with its
    nodes moved to new slots: new slot i holds what slot ``order[i]`` held (its vector row, its
    level and its record, keys unchanged), and every neighbour slot and the entry point are
    renamed to match. The same graph, searched the same way; only where each node lies differs
    (kb-build's ``[vectors] order``: builder/locality.py). ``buf`` must pass ``check_hnsw``
    (every slot is renamed through a table), BadIndex otherwise.

    ``matrix``: (scalar kind, rows) to store other vector rows than the image's: ``rows(old
    slots)`` gives those slots' rows as a 2-D numpy array (their bytes are written as they are),
    and the head names the kind (kb-build builds the graph over int8 copies of the vectors and
    stores them at ``[vectors] dtype``: builder/stream.py)."""
    check_hnsw(buf, count)
    g = graph_layout(buf, count)
    b = np.frombuffer(buf, dtype=np.uint8)
    if isinstance(g, HnswImage):  # an empty graph: nothing to move
        if matrix is not None:
            raise BadIndex("no rows to replace in an empty graph")
        yield bytes(b)
        return
    order = np.asarray(order, dtype=np.int64)
    if len(order) != count or order.min() < 0 or order.max() >= count:
        raise BadIndex("the new order is not a permutation of the slots")
    new_of_old = np.full(count, -1, dtype=np.int64)
    new_of_old[order] = np.arange(count, dtype=np.int64)
    if np.any(new_of_old < 0):
        raise BadIndex("the new order is not a permutation of the slots")
    img = g.image
    head_at = img.graph_start + HEAD_SIZE
    head = bytes(b[img.graph_start : head_at])
    if matrix is None:
        yield bytes(b[:MATRIX_START])
        stored = b[MATRIX_START : img.graph_start].reshape(img.rows, img.cols)
        for lo in range(0, count, batch):
            yield stored[order[lo : lo + batch]].tobytes()
    else:
        scalar, rows = matrix
        if scalar not in SCALAR_BYTES:
            raise BadIndex(f"unknown scalar kind {scalar}")
        cols = img.dims * SCALAR_BYTES[scalar]
        yield _MATRIX.pack(count, cols)
        for lo in range(0, count, batch):
            piece = np.ascontiguousarray(rows(order[lo : lo + batch]))
            if piece.ndim != 2 or len(piece) != len(order[lo : lo + batch]) or piece.shape[1] * piece.itemsize != cols:
                raise BadIndex(f"replacement rows are not {cols} bytes each")
            yield piece.tobytes()
        fields = list(_HEAD.unpack_from(head))
        fields[5] = scalar
        head = _HEAD.pack(*fields) + head[_HEAD.size :]
    yield head
    yield _GRAPH.pack(g.size, g.conn, g.base, g.max_level, int(new_of_old[g.entry]))
    yield g.levels[order].astype("<i2").tobytes()
    # Each list: its count and capacity slots, at these u32 positions past the node head.
    lists = [((g.list_at(level) - NODE_HEAD) // 4, g.base if level == 0 else g.conn) for level in range(g.max_level + 1)]
    for lo in range(0, count, batch):
        olds = order[lo : lo + batch]
        widths = g.node_bytes[olds]
        at = np.concatenate(([0], np.cumsum(widths)))
        out = np.empty(int(at[-1]), dtype=np.uint8)
        for level in np.unique(g.levels[olds]).tolist():
            here = np.flatnonzero(g.levels[olds] == level)
            width = int(widths[here[0]])
            rec = _rows(b, g.starts[olds[here]], width)
            slots = rec[:, NODE_HEAD:].copy().view("<u4")
            for first, capacity in lists[: level + 1]:
                block = slots[:, first + 1 : first + 1 + capacity]
                used = np.arange(capacity) < slots[:, first, None]
                block[used] = new_of_old[block[used]]
            rec[:, NODE_HEAD:] = slots.view(np.uint8)
            out[(at[here][:, None] + np.arange(width)).ravel()] = rec.ravel()
        yield out.tobytes()
