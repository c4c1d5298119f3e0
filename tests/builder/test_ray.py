"""kb-build --executor ray on a real Ray cluster of two nodes on this machine: a head and a
second node started as its own process with its own resources (one CPU each). The artifact must
be the same bytes as the local build's, with the real all-MiniLM-L6-v2 (whose vectors depend on
batch padding, so this also checks that the workers embed the local build's batches).

Skips when ray is not installed (pip install 'kb-search[distributed]'; .ci/run installs it in a
separate step) or when the model is neither cached nor downloadable."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray is not installed: pip install 'kb-search[distributed]'")

from corpora import SAMPLE  # noqa: E402
from kb.builder.build import build  # noqa: E402
from kb.builder.config import load_config  # noqa: E402
from kb.common.errors import ModelError  # noqa: E402
from kb.formats.artifact import Artifact  # noqa: E402

RAY = str(Path(sys.executable).with_name("ray"))
# A loopback test cluster: no token authentication (Ray >= 2.5x turns it on and would write a
# token under ~/.ray), no dashboard, no usage report, a small object store.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
NODE_FLAGS = ["--num-cpus", "1", "--object-store-memory", str(100 * 2**20), "--disable-usage-stats"]
START_TIMEOUT_S = 120
SLOW_START_S = 6  # seconds the second node's workers start after the head's (the executor before a3c09c1 then embedded on the head alone)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], env: dict) -> subprocess.Popen:
    """``ray start ...`` in its own session, so teardown can end exactly the daemons it left."""
    p = subprocess.Popen([RAY, "start", *args], env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=START_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError(f"ray start {' '.join(args)} failed:\n{out[-2000:]}")
    return p


def _nodes_up(address: str, env: dict) -> int:
    code = "import ray; ray.init(address=%r, logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))" % address
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    return int(done.stdout.strip() or 0)


@pytest.fixture(scope="module")
def cluster():
    """The address of a running two-node cluster; both nodes' processes are ended afterwards."""
    env = os.environ | RAY_ENV
    temp = tempfile.mkdtemp(prefix="kbray")  # short: Ray's socket paths live under it
    port = _free_port()
    address = f"127.0.0.1:{port}"
    sessions = []
    try:
        sessions.append(_start(["--head", "--port", str(port), "--include-dashboard=false", "--temp-dir", temp, *NODE_FLAGS], env))
        # The second node's workers start SLOW_START_S late (a sitecustomize that sleeps), so the
        # head's actor is ready well before the other: the build must still wait for both and
        # embed on both, however the race between their starts goes.
        slow = Path(temp) / "slow"
        slow.mkdir()
        (slow / "sitecustomize.py").write_text(f"import time\ntime.sleep({SLOW_START_S})\n")
        late = env | {"PYTHONPATH": os.pathsep.join(filter(None, [str(slow), env.get("PYTHONPATH")]))}
        sessions.append(_start(["--address", address, "--resources", '{"kb_second_node": 1}', *NODE_FLAGS], late))
        deadline = time.monotonic() + START_TIMEOUT_S
        while _nodes_up(address, env) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the second Ray node did not join")
            time.sleep(1)
        old = {k: os.environ.get(k) for k in RAY_ENV}
        os.environ.update(RAY_ENV)  # the build below joins from this process
        yield address
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    finally:
        for p in sessions:  # each ray start's daemons kept its session (= process group) id
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def minilm_config():
    from kb.builder.embedders import default_embedder_files

    try:
        default_embedder_files("int8")
    except ModelError as e:
        pytest.skip(f"all-MiniLM-L6-v2 unavailable: {e}")
    return replace(load_config(SAMPLE / "kb.toml"), embedding_model="all-MiniLM-L6-v2", reranker="none")


def _differing_sections(a: Path, b: Path) -> list[str]:
    x, y = Artifact(a), Artifact(b)
    try:
        names = sorted(set(x.sections) | set(y.sections))
        return [n for n in names if n not in x.sections or n not in y.sections or bytes(x.section(n)) != bytes(y.section(n))]
    finally:
        x.close()
        y.close()


def test_a_ray_build_on_two_nodes_is_the_same_bytes_as_the_local_build(tmp_path, cluster, minilm_config):
    local, on_ray = tmp_path / "local.kb", tmp_path / "ray.kb"
    build([SAMPLE], local, minilm_config)
    args = [str(Path(sys.executable).with_name("kb-build")), str(SAMPLE), "-o", str(on_ray), "--config", str(SAMPLE / "kb.toml"),
            "--embedder", "all-MiniLM-L6-v2", "--no-reranker", "--executor", "ray", "--ray-address", cluster, "--json", "-q"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["executor"] == "ray"
    assert report["embed_nodes"] == 2  # the head and the second node each held a model
    assert _differing_sections(local, on_ray) == []  # vectors first: names what differs
    assert hashlib.sha256(on_ray.read_bytes()).hexdigest() == hashlib.sha256(local.read_bytes()).hexdigest()


def test_a_ray_build_of_many_shards_is_the_same_bytes_as_the_local_build(tmp_path, cluster, minilm_config, monkeypatch):
    """Several chunk + analyze shards (forced small) as Ray tasks merge like the forked ones."""
    from kb.builder import shards
    from kb.builder.executors import RayExecutor

    class CountingRay(RayExecutor):
        def map_shards(self, fn, cuts, *args):
            self.shards = len(cuts) - 1
            return super().map_shards(fn, cuts, *args)

    monkeypatch.setattr(shards, "MIN_SHARD_CHARS", 1000)  # the sample is ~60 kB: a shard per few documents
    local, on_ray = tmp_path / "local.kb", tmp_path / "ray.kb"
    build([SAMPLE], local, minilm_config, jobs=1)
    executor = CountingRay(cluster)
    try:
        rep = build([SAMPLE], on_ray, minilm_config, executor=executor, jobs=8)
    finally:
        executor.close()
    assert rep.executor == "ray" and executor.shards == 8
    assert _differing_sections(local, on_ray) == []


def test_an_embedding_pool_the_cluster_cannot_place_fails_in_one_line(tmp_path, cluster, minilm_config, monkeypatch):
    """Three single-CPU actors on a cluster of two CPUs: kb-build waits ACTOR_START_TIMEOUT_S for
    the pool (shortened here), then fails with one line, not a hang or Ray's traceback."""
    from kb.builder import executors
    from kb.builder.executors import RayExecutor
    from kb.common.errors import KbError

    class ThreeCpus(RayExecutor):
        def embed(self, batches, embedder, progress):
            self.cpus = 3  # one actor more than the cluster can place
            return super().embed(batches, embedder, progress)

    monkeypatch.setattr(executors, "ACTOR_START_TIMEOUT_S", 5)
    executor = ThreeCpus(cluster)
    try:
        with pytest.raises(KbError) as e:
            build([SAMPLE], tmp_path / "out.kb", minilm_config, executor=executor)
    finally:
        executor.close()
    # Ray's own words follow (ray 2.60: "Timed out while starting actors. This may mean that the
    # cluster does not have enough resources for the requested actor pool.")
    assert str(e.value).startswith("an embedding actor failed on the Ray cluster: GetTimeoutError: ") and "\n" not in str(e.value)
    assert not (tmp_path / "out.kb").exists()


def test_a_ray_build_reusing_an_artifact_embeds_only_the_changed_text_and_is_the_same_bytes(tmp_path, cluster, minilm_config):
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLE, corpus)
    build([corpus], tmp_path / "old.kb", minilm_config)
    f = corpus / "runbooks" / "disk-full.md"
    f.write_text(f.read_text() + "\n\n## Afterwards\n\nTell the on-call channel the disk has room again.\n")
    build([corpus], tmp_path / "full.kb", minilm_config)
    args = [str(Path(sys.executable).with_name("kb-build")), str(corpus), "-o", str(tmp_path / "ray.kb"), "--reuse", str(tmp_path / "old.kb"), "--config", str(SAMPLE / "kb.toml"),
            "--embedder", "all-MiniLM-L6-v2", "--no-reranker", "--executor", "ray", "--ray-address", cluster, "--json", "-q"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["reuse_source"] == str(tmp_path / "old.kb") and 0 < report["embedded_chunks"] <= 3 and report["reused_chunks"] > 100
    assert _differing_sections(tmp_path / "full.kb", tmp_path / "ray.kb") == []
