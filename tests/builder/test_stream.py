"""The build in windows with scratch files beside the artifact (builder/store.py, builder/stream.py)."""

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kb.builder import ingest, stream
from kb.builder.ingest import Document, read_corpus
from kb.builder.postings import PostingsSpill
from kb.builder.store import DocumentStore
from kb.formats.artifact import Scratch

from corpora import SAMPLE, build_hash


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_build_in_many_small_windows_writes_the_same_bytes_as_in_one(tmp_path, monkeypatch):
    build_hash(SAMPLE, tmp_path / "one.kb")
    monkeypatch.setattr(stream, "WINDOW_BYTES", 1500)  # a document or two per window
    assert len(stream.windows(np.full(17, 1000))) == 17
    build_hash(SAMPLE, tmp_path / "many.kb", jobs=2)
    assert sha(tmp_path / "one.kb") == sha(tmp_path / "many.kb")
    assert leftovers(tmp_path) == []


def test_windows_cut_between_documents_and_hold_at_least_one():
    assert stream.windows(np.array([5, 5, 5, 20, 1, 1]), 10) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert stream.windows(np.array([], dtype=np.int64), 10) == []


@pytest.mark.parametrize("memory", [None, 0, 60])  # all kept; none kept; kept until past 60 bytes
def test_the_store_gives_documents_back_whole_in_path_then_id_order(tmp_path, memory):
    docs = [
        Document("b", "z.md", "markdown", "Zed", "text of z\n", 3, ("t1", "t2"), "live", "about z"),
        Document("2", "a.jsonl#2", "jsonl", "Two", "two", 1, (), None, "", 7),
        Document("1", "a.jsonl#2", "jsonl", "One", "ünïcode", 1, (), "draft", "", 6),
    ]
    with Scratch(tmp_path / "x.kb") as s:
        store = DocumentStore(s, memory=memory)
        for d in docs:
            store.append(d)
        store.seal()
        assert (store._docs is not None) == (memory is None)
        assert list(store) == [docs[2], docs[1], docs[0]]
        assert int(store.text_sizes().sum()) == os.path.getsize(s.path)
        store.close()
    assert leftovers(tmp_path) == []


def test_json_lines_are_streamed_across_read_blocks(tmp_path, monkeypatch):
    lines = [json.dumps({"id": str(i), "title": f"T{i}", "text": "word " * i + "é"}) for i in range(40)]
    p = tmp_path / "c.jsonl"
    p.write_bytes(("\ufeff" + "\n".join(lines[:20]) + "\n\n" + "\n".join(lines[20:])).encode("utf-8"))
    whole = read_corpus([], jsonl=[p])
    monkeypatch.setattr(ingest, "READ_BLOCK", 7)  # lines and characters split across blocks
    small = read_corpus([], jsonl=[p])
    assert small.documents == whole.documents and len(whole.documents) == 40 and whole.records == 40
    assert [d.record for d in whole.documents] == list(range(40))
    assert small.sources == whole.sources and whole.sources[0].sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
    data = b'{"id": 1, "text": "ok"}\n{"id": 2, "text": "caf\xe9"}\n'
    p.write_bytes(data)
    bad = data.index(0xE9)
    with pytest.raises(ingest.InputError, match=rf"^{p}: JSON Lines file is not UTF-8 \(byte {bad}\)$"):
        read_corpus([], jsonl=[p])


def test_a_failed_build_removes_its_scratch_files_and_keeps_the_old_artifact(tmp_path, monkeypatch):
    out = tmp_path / "s.kb"
    build_hash(SAMPLE, out)
    before = sha(out)

    def fail(*a, **k):
        assert len(leftovers(tmp_path)) >= 4  # documents, text records, compressed text, spilled postings
        raise RuntimeError("postings stage failed")

    monkeypatch.setattr(PostingsSpill, "finish", fail)
    with pytest.raises(RuntimeError, match="postings stage failed"):
        build_hash(SAMPLE, out)
    assert leftovers(tmp_path) == [] and sha(out) == before


KILLED_BUILD = """
import sys, time
sys.path.insert(0, {tests!r})
from pathlib import Path
import corpora
from kb.builder.postings import PostingsSpill
def slow(*a, **k):
    print("spilled", flush=True)
    time.sleep(60)
PostingsSpill.finish = slow
corpora.build_hash(Path({corpus!r}), Path({out!r}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="flock and SIGKILL as on Linux")
def test_the_next_build_removes_the_scratch_files_of_a_killed_one(tmp_path):
    out = tmp_path / "s.kb"
    code = KILLED_BUILD.format(tests=str(Path(__file__).resolve().parent.parent), corpus=str(SAMPLE), out=str(out))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "spilled\n"
        stale = leftovers(tmp_path)
        assert len(stale) >= 3
        build_hash(SAMPLE, tmp_path / "other.kb")  # another artifact's build leaves them alone,
        assert set(stale) <= set(leftovers(tmp_path))
        build_hash(SAMPLE, out)  # and a build of the same one, while they are held, too
        assert set(stale) <= set(leftovers(tmp_path))
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    assert set(stale) <= set(leftovers(tmp_path))  # a kill leaves them behind
    build_hash(SAMPLE, out)
    assert leftovers(tmp_path) == []


def test_more_hnsw_threads_build_the_same_chunks_and_are_not_stored(tmp_path):
    from dataclasses import replace

    from kb.builder.build import build
    from kb.builder.config import BuildConfig
    from kb.runtime.index import Index

    cfg = replace(BuildConfig(), embedding_model="hash", reranker="none")
    build([SAMPLE], tmp_path / "one.kb", cfg)
    build([SAMPLE], tmp_path / "two.kb", replace(cfg, vectors=replace(cfg.vectors, threads=2)))
    with Index(tmp_path / "one.kb") as a, Index(tmp_path / "two.kb") as b:
        assert "threads" not in b.meta.vectors and a.meta.vectors == b.meta.vectors
        ids = np.arange(a.n_chunks)
        np.testing.assert_array_equal(a.dense.vectors_of(ids), b.dense.vectors_of(ids))  # by key, whichever slot each got


def test_the_graph_stage_reports_its_progress_and_leaves_no_spill(tmp_path):
    """The vectors are added at the end of the build (builder/stream.py VectorIndex): the stage
    reports the vectors added, up to all of them, and its spill file is gone afterwards."""
    from dataclasses import replace

    from kb.builder.build import build
    from kb.builder.config import BuildConfig

    heard = []
    rep = build([SAMPLE], tmp_path / "a.kb", replace(BuildConfig(), embedding_model="hash", reranker="none"), progress=lambda *a: heard.append(a))
    graph = [a for a in heard if a[0] == "graph"]
    assert graph and graph[-1] == ("graph", rep.chunks, rep.chunks)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.kb"]


FULL_DISK_BUILD = """
import sys
sys.path.insert(0, {tests!r})
import fakes
fakes.register()
from kb.builder.cli import main
main(sys.argv[1:], prog_name="kb-build")
"""


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and EFBIG as on Linux")
@pytest.mark.parametrize("limit_kib", [20, 50, 200])
def test_a_build_that_fills_the_disk_leaves_no_temporary_and_the_old_artifact(tmp_path, limit_kib):
    """Issue 50 E: ``ulimit -f 50`` (a write past it fails with EFBIG, as ENOSPC on a full disk);
    Scratch.close raised on its flush before it unlinked."""
    import resource
    import shutil

    from corpora import GOLDEN

    out = tmp_path / "out.kb"
    shutil.copyfile(GOLDEN / "tiny-v3.kb", out)
    code = FULL_DISK_BUILD.format(tests=str(Path(__file__).resolve().parent.parent))
    limit = limit_kib * 1024
    r = subprocess.run([sys.executable, "-c", code, "--embedder", "hash", "--no-reranker", "-o", str(out), str(SAMPLE)], capture_output=True, text=True,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert (r.returncode, r.stderr) == (1, f"kb-build: error: build failed, {out} left as it was: [Errno 27] File too large\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.kb"] and out.read_bytes() == (GOLDEN / "tiny-v3.kb").read_bytes()
