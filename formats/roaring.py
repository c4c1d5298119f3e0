"""Many roaring bitmaps at once, in the portable serialization, written with numpy.

The builder has one bitmap per term: tens of thousands, mostly tiny. Building each with pyroaring
and serializing it costs about a microsecond of Python apiece; writing them all together as
arrays costs a fraction of that. The bytes are what ``pyroaring.BitMap(values).serialize()``
writes (run containers where pyroaring's run optimisation makes them; tests/test_roaring.py
compares), and the runtime reads them with pyroaring.

Portable format (https://github.com/RoaringBitmap/RoaringFormatSpec), one bitmap of n containers,
each container holding the values that share their high 16 bits:

    without run containers          with run containers
    cookie(u32) = 12346             cookie(u16) = 12347, n - 1 (u16)
    n (u32)                         run flags: (n + 7) // 8 bytes, bit i set if container i is runs
    n x [key(u16), card - 1 (u16)]  n x [key(u16), card - 1 (u16)]
    n x offset(u32)                 n x offset(u32), only when n >= 4
    n x data                        n x data

Offsets count from the bitmap's first byte. Data: an array container (card <= 4096) is its
sorted low 16 bits as u16; a bitmap container is 8192 bytes, bit (low & 7) of byte (low >> 3);
a run container is n_runs (u16) then n_runs x [start(u16), length - 1 (u16)]. A container is
runs when that is smaller: 2 + 4 * n_runs below 2 * card for an array, below 8192 for a bitmap.
"""

from __future__ import annotations

import numpy as np

COOKIE_NO_RUNS = 12346
COOKIE_RUNS = 12347
ARRAY_MAX = 4096  # more values than this in one container make it a bitmap container
BITMAP_BYTES = 8192
NO_OFFSET_THRESHOLD = 4  # bitmaps with runs and fewer containers than this have no offset header
DENSE_BATCH = 256  # bitmap containers flagged at once: 64 KiB of flags each

ARRAY, BITMAP, RUNS = 0, 1, 2


def serialize_many(owner: np.ndarray, values: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Serialize ``count`` bitmaps; bitmap ``i`` holds ``values[owner == i]``.

    ``owner`` must be non-decreasing and ``values`` (uint32) strictly increasing within each
    owner, as a sorted postings list is. Returns the bytes of all bitmaps back to back (uint8)
    and ``count + 1`` offsets into them.
    """
    owner = np.asarray(owner, dtype=np.int64)
    values = np.asarray(values, dtype=np.uint32)
    n = len(values)
    high = (values >> 16).astype(np.int64)
    low = (values & 0xFFFF).astype(np.int64)

    # Containers: runs of equal (owner, high 16 bits). Runs of values: consecutive lows.
    c_new = np.ones(n, dtype=bool)
    c_new[1:] = (owner[1:] != owner[:-1]) | (high[1:] != high[:-1])
    r_new = c_new.copy()
    r_new[1:] |= low[1:] != low[:-1] + 1
    c_first = np.flatnonzero(c_new)
    nc = len(c_first)
    c_of = np.cumsum(c_new) - 1  # value -> container
    c_card = np.bincount(c_of, minlength=nc)
    r_first = np.flatnonzero(r_new)
    c_runs = np.bincount(c_of[r_first], minlength=nc)
    c_owner, c_key = owner[c_first], high[c_first]
    c_kind = np.where(c_card > ARRAY_MAX, BITMAP, ARRAY)
    c_kind[2 + 4 * c_runs < np.where(c_kind == BITMAP, BITMAP_BYTES, 2 * c_card)] = RUNS
    c_bytes = np.choose(c_kind, [2 * c_card, np.full(nc, BITMAP_BYTES), 2 + 4 * c_runs])

    # Per bitmap: containers, whether any is runs, header layout, total size.
    per = np.bincount(c_owner, minlength=count)
    runs = np.bincount(c_owner, weights=c_kind == RUNS, minlength=count) > 0
    flags = np.where(runs, (per + 7) // 8, 0)
    with_offsets = ~runs | (per >= NO_OFFSET_THRESHOLD)
    desc_at = np.where(runs, 4 + flags, 8)  # where the [key, card - 1] pairs start
    head = desc_at + 4 * per + np.where(with_offsets, 4 * per, 0)
    size = head + np.bincount(c_owner, weights=c_bytes, minlength=count).astype(np.int64)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(size, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), dtype=np.uint8)
    start = offsets[:-1]

    # Headers.
    plain = np.flatnonzero(~runs)
    _put(out, start[plain], COOKIE_NO_RUNS, 2)
    _put(out, start[plain] + 4, per[plain], 4)
    with_runs = np.flatnonzero(runs)
    _put(out, start[with_runs], COOKIE_RUNS, 2)
    _put(out, start[with_runs] + 2, per[with_runs] - 1, 2)
    rank = np.arange(nc) - (np.cumsum(per) - per)[c_owner]  # container's index in its bitmap
    base = start[c_owner]
    is_run = c_kind == RUNS
    np.bitwise_or.at(out, base[is_run] + 4 + rank[is_run] // 8, (1 << (rank[is_run] % 8)).astype(np.uint8))
    _put(out, base + desc_at[c_owner] + 4 * rank, c_key, 2)
    _put(out, base + desc_at[c_owner] + 4 * rank + 2, c_card - 1, 2)
    data_before = np.cumsum(c_bytes) - c_bytes
    c_data = head[c_owner] + data_before - data_before[np.arange(nc) - rank]  # from the bitmap's start
    listed = with_offsets[c_owner]
    _put(out, (base + desc_at[c_owner] + 4 * per[c_owner] + 4 * rank)[listed], c_data[listed], 4)
    c_at = base + c_data

    # Array containers: the lows, in order.
    v_kind = c_kind[c_of]
    sel = v_kind == ARRAY
    within = np.arange(n) - c_first[c_of]
    _put(out, c_at[c_of[sel]] + 2 * within[sel], low[sel], 2)
    # Run containers: the count, then [start, length - 1] per run.
    _put(out, c_at[is_run], c_runs[is_run], 2)
    r_sel = v_kind[r_first] == RUNS
    r_len = np.diff(np.append(r_first, n))
    r_c = c_of[r_first]
    r_rank = np.arange(len(r_first)) - (np.cumsum(c_runs) - c_runs)[r_c]
    r_at = c_at[r_c] + 2 + 4 * r_rank
    _put(out, r_at[r_sel], low[r_first][r_sel], 2)
    _put(out, r_at[r_sel] + 2, r_len[r_sel] - 1, 2)
    # Bitmap containers: set bit (low & 7) of byte (low >> 3).
    dense = np.flatnonzero(c_kind == BITMAP)
    for b in range(0, len(dense), DENSE_BATCH):
        batch = dense[b : b + DENSE_BATCH]
        bits = np.zeros((len(batch), 65536), dtype=bool)
        for k, c in enumerate(batch):
            bits[k, low[c_first[c] : c_first[c] + c_card[c]]] = True
        packed = np.packbits(bits, axis=1, bitorder="little")
        for k, c in enumerate(batch):
            out[c_at[c] : c_at[c] + BITMAP_BYTES] = packed[k]
    return out, offsets


def _put(out: np.ndarray, at: np.ndarray, value, width: int) -> None:
    """Write little-endian unsigned integers of ``width`` bytes at byte positions ``at``."""
    value = np.broadcast_to(np.asarray(value, dtype=np.int64), np.shape(at))
    for k in range(width):
        out[at + k] = (value >> (8 * k)) & 0xFF
