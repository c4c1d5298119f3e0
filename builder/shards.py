"""Run a function over contiguous shards of the documents in forked worker processes.

The chunk and analyze stages are pure Python on each document, so with more than one core they
run over document shards at once: shard 0 in this process, the others in forked children (fork:
a child sees the documents without pickling them; only its result comes back pickled). Where
fork is unavailable (macOS and Windows default to spawn, which would re-import everything) or
there is one core, everything runs here. Shards are contiguous and their results come back in
order, so the artifact does not depend on the number of jobs.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

# Below this much text per extra worker, forking and pickling cost more than they save.
MIN_SHARD_CHARS = 1_000_000
MAX_JOBS = 8

_task: Callable | None = None  # set before the fork, so children inherit it


class WorkerDied(Exception):
    pass


def default_jobs() -> int:
    """The cores this process may use (its CPU affinity), at most MAX_JOBS."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_JOBS))


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods() and multiprocessing.get_start_method(allow_none=True) in (None, "fork")


def bounds(sizes: Sequence[int], jobs: int, min_shard: int = MIN_SHARD_CHARS) -> list[int]:
    """Shard boundaries over ``range(len(sizes))``: at most ``jobs`` shards of about equal total
    size, each at least ``min_shard`` (so small inputs stay in one shard)."""
    total = sum(sizes)
    k = max(1, min(jobs, total // max(min_shard, 1), len(sizes)))
    out, acc, i = [0], 0, 0
    for s in range(1, k):
        target = total * s // k
        while i < len(sizes) and acc + sizes[i] <= target:
            acc += sizes[i]
            i += 1
        out.append(max(i, out[-1]))
    out.append(len(sizes))
    return out


def map_shards(fn: Callable[[int, int], T], cuts: list[int]) -> list[T]:
    """``[fn(lo, hi) for each shard [lo, hi)]``: the first shard here, the rest in forked workers."""
    shards = list(zip(cuts, cuts[1:]))
    if len(shards) == 1 or not can_fork():
        return [fn(lo, hi) for lo, hi in shards]
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _task
    _task = fn
    try:
        with ProcessPoolExecutor(len(shards) - 1, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(_run, lo, hi) for lo, hi in shards[1:]]
            first = fn(*shards[0])
            return [first] + [f.result() for f in futures]
    except BrokenProcessPool as e:
        raise WorkerDied(f"a build worker process died ({e})") from None
    finally:
        _task = None


def _run(lo: int, hi: int):
    return _task(lo, hi)
