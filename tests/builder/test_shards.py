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
