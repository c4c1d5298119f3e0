"""formats/checksum.py: kb's compiled crc32 is zlib's (the reference, and the fallback where it is
not built); crc32_many sums ranges of a buffer."""

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.formats import checksum

try:
    from kb.formats import _crc32 as _kernels
except ImportError:  # an install that could not compile them: tests of the fallbacks still run
    _kernels = None
needs_pclmul = pytest.mark.skipif(_kernels is None or _kernels.crc_kernel() != "pclmul", reason="kb's compiled crc32 folds only on x86 with PCLMULQDQ")


def test_buffers_of_every_kind_are_summed_whole():
    raw = np.random.default_rng(7).integers(0, 256, 3 * 4096 + 17, dtype=np.uint8).tobytes()
    arr = np.frombuffer(raw, dtype=np.int8).reshape(-1, 1)
    fn = checksum.crc32
    assert fn(raw) == fn(memoryview(raw)) == fn(arr) == zlib.crc32(raw)
    assert fn(arr[5:]) == zlib.crc32(raw[5:])
    assert fn(memoryview(raw)[100:5000]) == zlib.crc32(raw[100:5000])
    assert fn(raw, 3) == zlib.crc32(raw, 3)


def test_without_the_compiled_crc32_zlib_sums(monkeypatch):
    monkeypatch.setattr(checksum, "_compiled", False)
    assert checksum.summer() is zlib.crc32


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=20_000), st.integers(0, 2**32 - 1))
def test_the_compiled_crc32_sums_as_zlib(data, start):
    if _kernels is None:
        pytest.skip("kb's compiled kernels are not built")
    assert _kernels.crc32(data, start) == zlib.crc32(data, start)
    assert _kernels.crc32(data) == zlib.crc32(data)


@needs_pclmul
def test_the_fold_covers_every_length_and_alignment():
    raw = np.random.default_rng(3).integers(0, 256, 4096 + 300, dtype=np.uint8).tobytes()
    view = memoryview(raw)
    for lo in range(0, 20):
        for n in (*range(0, 200), 4095, 4096, 4097):
            assert _kernels.crc32(view[lo : lo + n], 0xDEADBEEF) == zlib.crc32(raw[lo : lo + n], 0xDEADBEEF), (lo, n)
    big = bytes(range(256)) * 40_000  # over the size where the GIL is let go
    assert _kernels.crc32(big) == zlib.crc32(big)
    assert _kernels.crc32(b"abc", -1) == zlib.crc32(b"abc", -1) and _kernels.crc32(b"abc", 2**32 + 5) == zlib.crc32(b"abc", 2**32 + 5)


def test_the_process_sums_with_the_compiled_crc32_when_it_folds(monkeypatch):
    monkeypatch.setattr(checksum, "_compiled", None)
    k = checksum._kernels()
    if _kernels is not None and _kernels.crc_kernel() == "pclmul":
        assert k is _kernels and checksum.summer() is _kernels.crc32
    else:
        assert k is None


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "fallback"])
@settings(max_examples=60, deadline=None)
@given(data=st.binary(min_size=1, max_size=9000), cuts=st.lists(st.tuples(st.integers(0, 9000), st.integers(0, 9000)), max_size=12))
def test_crc32_many_sums_each_range(compiled, data, cuts):
    if compiled and checksum._kernels() is None:
        pytest.skip("kb's compiled crc32 does not fold here")
    ranges = [(min(a, b) % (len(data) + 1), max(a, b) % (len(data) + 1)) for a, b in cuts]
    ranges = [(a, max(a, b)) for a, b in ranges]
    starts, stops = np.array([a for a, _ in ranges], dtype=np.int64), np.array([b for _, b in ranges], dtype=np.int64)
    saved = checksum._compiled
    try:
        if not compiled:
            checksum._compiled = False
        got = checksum.crc32_many(memoryview(data), starts, stops)
    finally:
        checksum._compiled = saved
    assert got.dtype == np.uint32 and got.tolist() == [zlib.crc32(data[a:b]) for a, b in ranges]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "fallback"])
def test_crc32_many_refuses_a_range_outside_the_data(compiled, monkeypatch):
    if compiled and checksum._kernels() is None:
        pytest.skip("kb's compiled crc32 does not fold here")
    if not compiled:
        monkeypatch.setattr(checksum, "_compiled", False)
    data = bytes(100)
    for starts, stops in (([0, 90], [10, 101]), ([-1], [3]), ([5], [4])):
        with pytest.raises(ValueError, match="outside the data's 100 bytes"):
            checksum.crc32_many(data, np.array(starts), np.array(stops))
    with pytest.raises(ValueError, match="1-d arrays of one length"):
        checksum.crc32_many(data, np.array([0, 1]), np.array([2]))
    assert checksum.crc32_many(data, np.array([], dtype=np.int64), np.array([], dtype=np.int64)).tolist() == []


@needs_pclmul
def test_the_compiled_crc32_many_checks_its_buffers():
    data = bytes(64)
    out = np.empty(1, np.uint32)
    with pytest.raises(ValueError, match=r"^range 0 \(0:65\) is outside the data's 64 bytes$"):
        _kernels.crc32_many(data, np.array([0]), np.array([65]), out, 1)
    with pytest.raises(ValueError, match=r"^out holds 4 bytes, its shape needs 8$"):
        _kernels.crc32_many(data, np.array([0, 1]), np.array([1, 2]), out, 2)
