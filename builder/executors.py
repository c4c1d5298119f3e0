"""Where kb-build's parallel stages run: here (forked processes, the default) or on a Ray cluster.

Two stages fan out. Chunk + analyze runs over contiguous document shards and returns each
shard's rows and ``Fields`` in shard order; embedding runs over batches of texts and returns each
batch's vectors in batch order. An executor only decides *where* that work runs: the shards and
the batches are cut by builder/build.py, the same way for every executor, and merged there in
the same order, so the artifact does not depend on the executor.

The batches matter for the bytes: CTranslate2's output for a text depends on what it is padded
with (MiniLM int8 vectors of one text differ by up to 0.007 between a batch of 64 and two of 32;
the number of threads changes nothing). A Ray worker therefore
embeds exactly the batches the local build embeds, one Ray Data row per batch, never a batch
Ray recomposed.

Ray is an optional extra (``pip install 'kb-search[distributed]'``) imported only inside
``RayExecutor``; the runtime and the frozen ``kb`` never import this module's Ray half.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from kb.common.errors import KbError, MissingExtra, error_line

from . import shards

# The Ray extra's requirement, as pyproject.toml's [distributed] names it.
RAY_EXTRA = "kb-search[distributed]"


@dataclass(frozen=True)
class EmbedResult:
    vectors: list[np.ndarray]  # one (len(batch), dim) float32 array per batch, in batch order
    truncated: int  # texts longer than the model's window
    nodes: int  # machines that embedded (1 here)


class LocalExecutor:
    """Shards in forked processes on this machine (builder/shards.py), embedding in this process."""

    name = "local"

    def __init__(self, jobs: int | None = None):
        self.jobs = jobs or shards.default_jobs()

    def workers(self) -> int:
        return self.jobs

    def map_shards(self, fn: Callable[[int, int], object], cuts: list[int], docs, doc_langs, job) -> list:
        """``fn(lo, hi)`` per shard; a fork sees ``docs`` without pickling them."""
        try:
            return shards.map_shards(fn, cuts)
        except shards.WorkerDied as e:
            raise KbError(str(e)) from None

    def embed(self, batches: Sequence[list[str]], embedder, progress) -> EmbedResult:
        out, done, total = [], 0, sum(map(len, batches))
        for b in batches:
            out.append(embedder.embed(b))
            done += len(b)
            progress("embed", done, total)
        window = embedder.max_tokens - 2  # [CLS] and [SEP]
        truncated = sum(n > window for b in batches for n in embedder.count_tokens(b))
        return EmbedResult(out, truncated, 1)

    def close(self) -> None:
        pass


class RayExecutor:
    """Shards as Ray tasks (one CPU each) and embedding as a Ray Data ``map_batches`` over a pool
    of actors that each load the CTranslate2 model once: ``num_gpus=1`` and CUDA when the cluster
    has GPUs, one CPU each otherwise. ``address``: a running cluster ("auto", "HOST:PORT",
    "ray://..."); None starts a Ray instance on this machine for the build."""

    name = "ray"

    def __init__(self, address: str | None = None, runtime_env: dict | None = None):
        self.ray = import_ray()
        import logging

        check_reachable(address)
        try:
            self.ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=logging.WARNING, include_dashboard=False)
        except Exception as e:  # ConnectionError, RuntimeError: no cluster there
            raise KbError(f"cannot connect to the Ray cluster at {address or 'a new local instance'}: {error_line(e)}") from None
        resources = self.ray.cluster_resources()
        self.cpus = max(1, int(resources.get("CPU", 1)))
        self.gpus = int(resources.get("GPU", 0))

    def workers(self) -> int:
        return self.cpus

    def map_shards(self, fn, cuts: list[int], docs, doc_langs, job) -> list:
        """Each shard as a task that gets only its own documents and ``job`` (``fn`` is for
        forks; unused here)."""
        task = self.ray.remote(num_cpus=1)(run_shard)
        refs = [task.remote(job, docs[lo:hi], None if doc_langs is None else doc_langs[lo:hi], lo) for lo, hi in zip(cuts, cuts[1:])]
        with self._failures("a chunk and analyze task"):
            return self.ray.get(refs)

    def embed(self, batches: Sequence[list[str]], embedder, progress) -> EmbedResult:
        import logging

        import ray.data

        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # kb-build draws its own
        # Every actor holds its model before the first batch is handed out (else a quick actor
        # can take every batch while the others still load), bounded so that a cluster without
        # room for the pool fails in one line instead of waiting for ever.
        context.wait_for_min_actors_s = ACTOR_START_TIMEOUT_S
        logging.getLogger("ray.data").setLevel(logging.ERROR)  # no per-dataset lines on stderr
        gpu = self.gpus > 0
        actors = max(1, min(self.gpus if gpu else self.cpus, len(batches)))
        resources = {"num_gpus": 1} if gpu else {"num_cpus": 1}
        files = dict(embedder.files())  # shipped with each actor's constructor
        rows = ray.data.from_items([{"batch": i, "texts": list(b)} for i, b in enumerate(batches)])
        embedded = rows.map_batches(
            EmbedActor,
            batch_size=1,  # one row is one whole local batch (see the module docstring)
            batch_format="numpy",
            # One batch at a time per actor: a batch is 1-2 s of work, so queueing more buys
            # nothing, and with more queued, Ray's locality rule piles them on one node's actor.
            compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
            fn_constructor_kwargs={"files": files, "device": "cuda" if gpu else "cpu"},
            **resources,
        )
        vectors: list = [None] * len(batches)
        truncated, nodes, done, total = 0, set(), 0, sum(map(len, batches))
        with self._failures("an embedding actor"):
            for row in embedded.iter_rows():
                i = int(row["batch"])
                vectors[i] = np.frombuffer(row["vectors"], dtype=np.float32).reshape(len(batches[i]), -1)
                truncated += int(row["truncated"])
                nodes.add(str(row["node"]))
                done += len(batches[i])
                progress("embed", done, total)
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            raise KbError(f"the Ray cluster returned no vectors for {len(missing)} of {len(batches)} batches")
        return EmbedResult(vectors, truncated, len(nodes))

    def close(self) -> None:
        self.ray.shutdown()

    @contextmanager
    def _failures(self, what: str):
        """A failure on the cluster as one KbError line: the worker's own exception, not Ray's
        wrapper (whose message holds the remote traceback and terminal colours)."""
        try:
            yield
        except self.ray.exceptions.RayError as e:
            cause = getattr(e, "cause", None) or e
            why = str(cause).strip().splitlines()[-1][:300] if str(cause).strip() else type(cause).__name__
            raise KbError(f"{what} failed on the Ray cluster: {type(cause).__name__}: {why}") from None


# How long kb-build waits for every embedding actor to load its model (a model is a few seconds
# to load; a pool the cluster cannot place times out with one line).
ACTOR_START_TIMEOUT_S = 600

# How long kb-build waits for a HOST:PORT cluster to accept a connection before it gives up
# (ray.init itself retries for minutes, printing a warning every few seconds).
CONNECT_TIMEOUT_S = 10.0


def check_reachable(address: str | None, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail at once, in one line, when a HOST:PORT address does not accept a TCP connection.
    Other forms (None, "auto", "local", "ray://...") are left to ray.init."""
    import socket

    host, sep, port = (address or "").rpartition(":")
    if not sep or not port.isdigit() or "://" in address or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise KbError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}; start it with ray start --head, or check --ray-address") from None


def import_ray():
    """The ray module, or MissingExtra saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401 - the [data] part of the extra
    except ImportError as e:
        raise MissingExtra(f"--executor ray needs {e.name or 'ray'}, which is not installed; pip install '{RAY_EXTRA}'") from None
    return ray


def make_executor(name: str, jobs: int | None = None, address: str | None = None, runtime_env: dict | None = None):
    """The executor called ``name``: "local" (default) or "ray"."""
    if name == "local":
        return LocalExecutor(jobs)
    if name == "ray":
        return RayExecutor(address, runtime_env)
    raise KbError(f"unknown executor {name!r}; use local or ray")


def run_shard(job, docs, doc_langs, first: int):
    """A Ray task: ``job.run`` (builder/build.py's ShardJob) on one shard's documents."""
    return job.run(docs, doc_langs, first)


class EmbedActor:
    """A Ray Data actor holding one embedding model; each call embeds one local batch."""

    def __init__(self, files, device: str):
        import ray

        from kb.models.encoders import load_embedder

        self.embedder = load_embedder(files, device=device, threads=max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
        self.window = self.embedder.max_tokens - 2
        self.node = ray.get_runtime_context().get_node_id()

    def __call__(self, rows: dict) -> dict:
        out = {"batch": [], "vectors": [], "truncated": [], "node": []}
        for i, texts in zip(rows["batch"], rows["texts"]):
            texts = [str(t) for t in texts]
            out["batch"].append(int(i))
            out["vectors"].append(np.ascontiguousarray(self.embedder.embed(texts), dtype=np.float32).tobytes())
            out["truncated"].append(sum(n > self.window for n in self.embedder.count_tokens(texts)))
            out["node"].append(self.node)
        return {"batch": np.array(out["batch"], dtype=np.int64), "vectors": np.array(out["vectors"], dtype=object),
                "truncated": np.array(out["truncated"], dtype=np.int64), "node": np.array(out["node"], dtype=object)}  # fmt: skip
