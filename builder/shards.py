"""Run a function over contiguous shards of the documents in forked worker processes.

The chunk and analyze stages are pure Python on each document, so with more than one core they
run over document shards at once: shard 0 in this process, the others in forked children (fork:
a child sees the documents without pickling them; only its result comes back pickled). Off
Linux (macOS system libraries are not fork-safe, Windows cannot fork), with one core, or with
little text, everything runs here. Shards are contiguous and their results come back in order,
so the artifact does not depend on the number of jobs.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import tempfile
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

# Each shard gets at least this much text: below it, forking and pickling cost more than they save.
MIN_SHARD_CHARS = 1_000_000
MAX_JOBS = 8


class WorkerDied(Exception):
    """A worker process failed or was killed; the message is one line."""


def default_jobs() -> int:
    """The cores this process may use (its CPU affinity), at most MAX_JOBS."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_JOBS))


def can_fork() -> bool:
    """Fork workers only on Linux: macOS system libraries are not fork-safe, Windows cannot fork."""
    return sys.platform.startswith("linux")


def bounds(sizes: Sequence[int], jobs: int) -> list[int]:
    """Shard boundaries over ``range(len(sizes))``: at most ``jobs`` shards of about equal total
    size, each at least MIN_SHARD_CHARS (so small inputs stay in one shard). Boundaries strictly
    increase: no shard is empty, even when one document holds most of the text."""
    n, total = len(sizes), sum(sizes)
    k = max(1, min(jobs, total // max(MIN_SHARD_CHARS, 1), n))
    out, acc, i = [0], 0, 0
    for s in range(1, k):
        while i < n and acc + sizes[i] <= total * s // k:
            acc += sizes[i]
            i += 1
        # at least one document after the previous cut, and one left for each shard still to come
        cut = min(max(i, out[-1] + 1), n - (k - s))
        while i < cut:
            acc += sizes[i]
            i += 1
        out.append(cut)
    out.append(n)
    return out


def map_shards(fn: Callable[[int, int], T], cuts: list[int]) -> list[T]:
    """``[fn(lo, hi) for each shard [lo, hi)]``: the first shard here, each other in a forked
    child that writes its pickled result to an in-memory file and exits. (A process
    pool's queues and threads cost ~40 ms more on SciFact: its result thread competes with this
    shard for the GIL.) A child that fails or dies raises WorkerDied here."""
    shards = list(zip(cuts, cuts[1:]))
    if len(shards) == 1 or not can_fork():
        return [fn(lo, hi) for lo, hi in shards]
    children: list[tuple[int, object]] = []
    try:
        for lo, hi in shards[1:]:
            out = _scratch_file()
            pid = os.fork()
            if pid == 0:
                _child(fn, lo, hi, out)  # never returns
            children.append((pid, out))
        results = [fn(*shards[0])]
        while children:
            pid, out = children.pop(0)
            _, status = os.waitpid(pid, 0)
            results.append(_collect(out, status))
        return results
    finally:
        for pid, out in children:  # only after an error here: stop the others
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            out.close()


def _scratch_file():
    """An in-memory file where Linux has memfd_create, else an unnamed temporary file."""
    if hasattr(os, "memfd_create"):
        return os.fdopen(os.memfd_create("kb-build-shard", os.MFD_CLOEXEC), "w+b")
    return tempfile.TemporaryFile()


def _child(fn, lo: int, hi: int, out) -> None:
    # The objects inherited from the parent go to the collector's permanent generation: a
    # collection here would otherwise visit each of them, writing its header and so copying
    # every page of the parent's heap (a SciFact shard ran 40% slower than the same work in the
    # parent; with the freeze, at the parent's speed).
    gc.freeze()
    code = 0
    try:
        try:
            result = (True, fn(lo, hi))
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises
            code, result = 1, (False, f"{type(e).__name__}: {e}")
        out.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
        out.flush()
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffers


def _collect(out, status: int):
    with out:
        out.seek(0)
        data = out.read()
    if not data:
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.waitstatus_to_exitcode(status)}"
        raise WorkerDied(f"a build worker process died ({how})")
    ok, value = pickle.loads(data)
    if not ok:
        raise WorkerDied(f"a build worker process failed: {value}")
    return value
