"""formats/checksum.py: zlib-ng's crc32 is zlib's, and a process switches to it after FAST_AFTER bytes."""

import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.formats import checksum

zlib_ng = pytest.importorskip("zlib_ng.zlib_ng", reason="zlib-ng is a runtime dependency (pyproject.toml)")


@pytest.fixture
def fresh(monkeypatch):
    """The module as a new process finds it (restored afterwards)."""
    monkeypatch.setattr(checksum, "_summed", 0)
    monkeypatch.setattr(checksum, "_crc", zlib.crc32)
    monkeypatch.setattr(checksum, "_switched", False)
    return checksum


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=20_000), st.integers(0, 2**32 - 1))
def test_zlib_ng_sums_as_zlib(data, start):
    assert zlib_ng.crc32(data, start) == zlib.crc32(data, start)
    assert checksum.crc32(data, start) == zlib.crc32(data, start)


def test_buffers_of_every_kind_are_summed_whole():
    raw = np.random.default_rng(7).integers(0, 256, 3 * 4096 + 17, dtype=np.uint8).tobytes()
    arr = np.frombuffer(raw, dtype=np.int8).reshape(-1, 1)
    for fn in (zlib_ng.crc32, checksum.crc32):
        assert fn(raw) == fn(memoryview(raw)) == fn(arr) == zlib.crc32(raw)
        assert fn(arr[5:]) == zlib.crc32(raw[5:])
        assert fn(memoryview(raw)[100:5000]) == zlib.crc32(raw[100:5000])


def test_a_process_switches_after_fast_after_bytes(fresh):
    small = b"x" * 1000
    assert fresh.summer(len(small)) is zlib.crc32
    assert fresh.crc32(np.zeros(fresh.FAST_AFTER // 2, np.uint8)) == zlib.crc32(bytes(fresh.FAST_AFTER // 2))
    assert fresh._crc is zlib.crc32  # counted by nbytes, not len(): still under the switch
    fresh.crc32(bytes(fresh.FAST_AFTER // 2))
    assert fresh._crc is zlib_ng.crc32
    assert fresh.summer(10) is zlib_ng.crc32
    assert fresh.crc32(small, 3) == zlib.crc32(small, 3)


def test_without_zlib_ng_zlib_sums_throughout(fresh, monkeypatch):
    monkeypatch.setitem(sys.modules, "zlib_ng.zlib_ng", None)  # import raises ImportError
    assert fresh.summer(fresh.FAST_AFTER) is zlib.crc32
    assert fresh._switched and fresh.summer(1) is zlib.crc32
