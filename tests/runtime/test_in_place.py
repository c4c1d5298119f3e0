"""kb serve and kb mcp while their artifact file changes (issue 50 A; README, "Artifacts that change while kb serve or kb mcp runs"): one
overwritten (``cp other.kb served.kb``) or truncated in place never kills the server, which
answers from the old bytes until the file is a whole artifact again; one replaced by rename is
picked up without a restart."""

import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from kb.runtime.index import Index

from corpora import GOLDEN
from servers import call, mcp_session, serving

OLD, NEW = GOLDEN / "tiny-v1.kb", GOLDEN / "tiny-v3.kb"


def artifact_id(path) -> str:
    with Index(path) as ix:
        return ix.artifact.id


def wait_for(check, seconds=15.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


class Load:
    """Searches and gets in a loop on two threads, recording every status."""

    def __init__(self, port):
        self.port, self.statuses, self.stop = port, [], threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(body,)) for body in ({"query": "backup restore", "top_k": 5}, {"chunk_id": 0, "context": 2})]

    def run(self, body):
        path = "/search" if "query" in body else "/get"
        while not self.stop.is_set():
            self.statuses.append(call(self.port, "POST", path, body)[0])

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


def test_kb_serve_survives_cp_and_truncate_in_place_and_picks_up_a_rename(tmp_path):
    served = tmp_path / "served.kb"
    shutil.copyfile(OLD, served)
    old_id, new_id = artifact_id(OLD), artifact_id(NEW)
    serving_id = lambda port: call(port, "GET", "/health")[2]["artifact"]["id"]  # noqa: E731
    with serving("-i", served, "--no-stale-check") as port, Load(port) as load:
        assert serving_id(port) == old_id
        shutil.copyfile(NEW, served)  # cp other.kb served.kb: overwritten in place
        assert wait_for(lambda: serving_id(port) == new_id)
        for size in (200_000, 40_000, 4096, 0):  # truncate -s SIZE served.kb: longer, then shorter than the file
            os.truncate(served, size)
            time.sleep(1.5)
            assert serving_id(port) == new_id  # the old bytes, never a fault
        tmp = tmp_path / "next.kb"
        shutil.copyfile(OLD, tmp)
        os.replace(tmp, served)  # replaced by rename
        assert wait_for(lambda: serving_id(port) == old_id)
        n = len(load.statuses)
    assert n > 20 and set(load.statuses) == {200}


def test_kb_serve_says_why_it_keeps_the_old_artifact(tmp_path):
    from servers import start_server

    served = tmp_path / "served.kb"
    shutil.copyfile(NEW, served)
    proc, port = start_server("-i", served, "--no-stale-check")
    try:
        os.truncate(served, 40_000)
        time.sleep(3)
        assert call(port, "POST", "/search", {"query": "backup"})[0] == 200
    finally:
        proc.terminate()
        assert proc.wait(10) == 128 + 15  # SIGTERM
    err = proc.stderr.read().decode().splitlines()
    assert f"kb serve: {served} changed but is not a usable artifact ({served}: corrupt or truncated artifact: header says {NEW.stat().st_size} bytes, file has 40000); still answering from the previous one" in err


def test_kb_mcp_survives_truncate_in_place_and_picks_up_a_rename(tmp_path):
    served = tmp_path / "served.kb"
    shutil.copyfile(NEW, served)
    with mcp_session("-i", served, "--no-stale-check") as c:
        assert c.call("search", {"query": "backup"})["structuredContent"]["artifact"]["id"] == artifact_id(NEW)
        os.truncate(served, 40_000)
        time.sleep(2.5)
        assert not c.call("search", {"query": "backup"})["isError"]
        assert c.call("search", {"query": "backup"})["structuredContent"]["artifact"]["id"] == artifact_id(NEW)
        tmp = tmp_path / "next.kb"
        shutil.copyfile(OLD, tmp)
        os.replace(tmp, served)
        assert wait_for(lambda: c.call("search", {"query": "backup"})["structuredContent"]["artifact"]["id"] == artifact_id(OLD))


def test_kb_serve_mmap_maps_the_file_and_still_picks_up_a_rename(tmp_path):
    """--mmap: for artifacts larger than memory; only a rename is safe then (README)."""
    served = tmp_path / "served.kb"
    shutil.copyfile(NEW, served)
    serving_id = lambda port: call(port, "GET", "/health")[2]["artifact"]["id"]  # noqa: E731
    with serving("-i", served, "--no-stale-check", "--mmap") as port:
        assert serving_id(port) == artifact_id(NEW)
        tmp = tmp_path / "next.kb"
        shutil.copyfile(OLD, tmp)
        os.replace(tmp, served)
        assert wait_for(lambda: serving_id(port) == artifact_id(OLD))
        assert call(port, "POST", "/search", {"query": "backup"})[0] == 200


def test_the_readme_safety_section_states_the_in_place_contract():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    safety = readme.split("\n## Safety\n", 1)[1].split("\n## ", 1)[0]
    for promise in ("never crashes them", "answered from the old bytes", "picked up the same way, without a restart", "With `--mmap`", "replace artifacts by rename"):
        assert promise in " ".join(safety.split()), promise
