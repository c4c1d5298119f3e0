"""The executor seam and --shard, without Ray: the default executor is the local build, kb-build
imports without ray installed, --executor ray without it is one line and exit 5, and the N shard
artifacts of a corpus hold exactly its documents. (tests/builder/test_ray.py runs a Ray cluster.)"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from corpora import SAMPLE, build_hash
from kb.builder.build import shard_of
from kb.builder.executors import LocalExecutor
from kb.common.errors import EXIT_MISSING_EXTRA
from kb.runtime.index import Index

# A Python that cannot import ray, whether or not this environment has it.
WITHOUT_RAY = "import sys; sys.modules['ray'] = None; "


def _doc_paths(path) -> list[str]:
    with Index(path) as kb:
        return [bytes(kb.doc_paths[d]).decode() for d in range(kb.n_docs)]


def test_kb_builder_imports_without_ray():
    code = WITHOUT_RAY + "import kb.builder.cli, kb.builder.build, kb.builder.executors; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_executor_ray_without_ray_is_one_line_and_exit_5(tmp_path):
    out = tmp_path / "x.kb"
    code = WITHOUT_RAY + "from kb.builder.cli import main; main()"
    args = [sys.executable, "-c", code, str(SAMPLE), "-o", str(out), "--embedder", "none", "--executor", "ray"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_MISSING_EXTRA == 5
    assert done.stderr == (
        "kb-build: error: --executor ray needs ray, which is not installed; "
        "pip install 'kb-search[distributed]'\n"
    )
    assert not out.exists()


def test_ray_address_without_executor_ray_is_a_usage_error(tmp_path):
    from click.testing import CliRunner

    from kb.builder.cli import main

    res = CliRunner().invoke(main, [str(SAMPLE), "-o", str(tmp_path / "x.kb"), "--ray-address", "auto"])
    assert res.exit_code == 2
    assert res.stderr == "kb-build: error: --ray-address needs --executor ray\n"


@pytest.mark.parametrize("value", ["4/4", "1", "-1/3", "a/b", "1/0", "0/"])
def test_a_shard_that_is_not_i_of_n_is_a_usage_error(tmp_path, value):
    from click.testing import CliRunner

    from kb.builder.cli import main

    res = CliRunner().invoke(main, [str(SAMPLE), "-o", str(tmp_path / "x.kb"), "--shard", value])
    assert res.exit_code == 2
    assert res.stderr.startswith("kb-build: error: Invalid value for '--shard': ")


def test_a_cluster_address_that_refuses_connections_fails_at_once_in_one_line():
    import socket

    from kb.builder.executors import check_reachable
    from kb.common.errors import KbError

    with socket.socket() as s:  # a port that was just free and that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(KbError, match=rf"^cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused; start it with ray start --head, or check --ray-address$"):
        check_reachable(f"127.0.0.1:{port}")
    check_reachable(None)  # ray.init decides: a new local instance
    check_reachable("auto")
    check_reachable("ray://head:10001")


def test_the_default_executor_is_local_and_the_same_bytes_as_an_explicit_one(tmp_path):
    a, b = tmp_path / "a.kb", tmp_path / "b.kb"
    rep = build_hash(SAMPLE, a)
    build_hash(SAMPLE, b, executor=LocalExecutor(3))
    assert rep.executor == "local" and rep.embed_nodes == 1
    assert a.read_bytes() == b.read_bytes()


def test_a_documents_shard_depends_on_its_path_alone():
    assert shard_of("runbooks/disk-full.md", 4) == shard_of("runbooks/disk-full.md", 4)
    counts = Counter(shard_of(f"notes/{i}.md", 4) for i in range(4000))
    assert sorted(counts) == [0, 1, 2, 3]
    assert min(counts.values()) > 900  # about a quarter each


def test_the_n_shard_artifacts_hold_exactly_the_documents_of_the_whole(tmp_path):
    whole = tmp_path / "whole.kb"
    rep = build_hash(SAMPLE, whole)
    n = 3
    parts, chunks = [], 0
    for i in range(n):
        out = tmp_path / f"part{i}.kb"
        r = build_hash(SAMPLE, out, shard=(i, n))
        assert r.shard == f"{i}/{n}"
        paths = _doc_paths(out)
        assert paths == sorted(paths) and all(shard_of(p, n) == i for p in paths)
        parts.extend(paths)
        chunks += r.chunks
    assert sorted(parts) == _doc_paths(whole)  # every document once, none twice
    assert chunks == rep.chunks


def test_a_shard_with_no_documents_fails_and_says_so(tmp_path):
    from kb.builder.build import BuildError

    build_hash(SAMPLE, tmp_path / "w.kb")
    paths = _doc_paths(tmp_path / "w.kb")
    n = 64
    empty = next(i for i in range(n) if all(shard_of(p, n) != i for p in paths))
    with pytest.raises(BuildError, match=rf"^shard {empty}/64 holds none of the corpus's {len(paths)} documents; build fewer shards$"):
        build_hash(SAMPLE, tmp_path / "e.kb", shard=(empty, n))


class PicklingExecutor(LocalExecutor):
    """Runs each chunk + analyze shard as a Ray task would: ``run_shard`` on pickled copies of
    the job and the shard's documents, never the forking closure."""

    name = "pickling"

    def __init__(self):
        super().__init__(3)
        self.shards = 0

    def map_shards(self, fn, cuts, docs, doc_langs, job):
        import pickle

        from kb.builder.executors import run_shard

        self.shards += len(cuts) - 1
        return [run_shard(*pickle.loads(pickle.dumps((job, docs[lo:hi], doc_langs[lo:hi], lo)))) for lo, hi in zip(cuts, cuts[1:])]


def test_shards_run_from_the_pickled_job_are_the_same_bytes_as_the_local_build(tmp_path, monkeypatch):
    from kb.builder import shards

    monkeypatch.setattr(shards, "MIN_SHARD_CHARS", 1000)  # several shards of the ~60 kB sample
    executor = PicklingExecutor()
    build_hash(SAMPLE, tmp_path / "a.kb", embedder="none")
    build_hash(SAMPLE, tmp_path / "b.kb", embedder="none", executor=executor)
    assert executor.shards > 1
    assert (tmp_path / "a.kb").read_bytes() == (tmp_path / "b.kb").read_bytes()


def test_a_vectors_build_cuts_each_record_whole_from_the_pickled_job_too(tmp_path):
    import numpy as np
    from dataclasses import replace

    from kb.builder.build import build
    from kb.builder.config import load_config

    from test_vectors import RECORDS, vectors_for, write_corpus

    jsonl = write_corpus(tmp_path)
    npy = tmp_path / "v.npy"
    np.save(npy, vectors_for(RECORDS))
    cfg = replace(load_config(None), embedding_model="hash", reranker="none")
    executor = PicklingExecutor()
    local = build([], tmp_path / "a.kb", cfg, jsonl=[jsonl], vectors=npy)
    build([], tmp_path / "b.kb", cfg, jsonl=[jsonl], vectors=npy, executor=executor)
    assert local.chunks == len(RECORDS) and executor.shards >= 1  # the 400-word record is one chunk
    assert (tmp_path / "a.kb").read_bytes() == (tmp_path / "b.kb").read_bytes()
