import os
import signal

import pytest

from kb.builder import shards


def test_map_shards_runs_every_shard_in_order_in_forked_children():
    got = shards.map_shards(lambda lo, hi: (lo, hi, os.getpid()), [0, 3, 5, 9])
    assert [(lo, hi) for lo, hi, _ in got] == [(0, 3), (3, 5), (5, 9)]
    assert got[0][2] == os.getpid() and len({pid for *_, pid in got}) == 3


def test_a_failing_worker_is_reported_in_one_line():
    def fn(lo, hi):
        if lo:
            raise ValueError("bad shard")
        return lo

    with pytest.raises(shards.WorkerDied, match=r"^a build worker process failed: ValueError: bad shard$"):
        shards.map_shards(fn, [0, 1, 2])


def test_a_killed_worker_is_reported_and_the_others_are_reaped():
    def fn(lo, hi):
        if lo == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return lo

    with pytest.raises(shards.WorkerDied, match=r"^a build worker process died \(signal 9\)$"):
        shards.map_shards(fn, [0, 1, 2, 3])
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # no child left behind


def test_one_document_holding_most_of_the_text_still_gives_non_empty_shards():
    # issue 14: bounds([2.3e6, 8], 2) was [0, 0, 2], and the empty first shard crashed the build
    assert shards.bounds([2_300_000, 8], 2) == [0, 1, 2]
    assert shards.bounds([5_000_000, 1, 1, 1], 4) == [0, 1, 2, 3, 4]


from hypothesis import given, strategies as st  # noqa: E402


@given(st.lists(st.integers(0, 3_000_000), min_size=1, max_size=40), st.integers(1, 8))
def test_shard_bounds_cover_every_document_once_with_no_empty_shard(sizes, jobs):
    cuts = shards.bounds(sizes, jobs)
    assert cuts[0] == 0 and cuts[-1] == len(sizes)
    assert all(a < b for a, b in zip(cuts, cuts[1:]))
    assert len(cuts) - 1 <= jobs
