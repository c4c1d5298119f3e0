"""The stale check: a one-shot search's cache of its last check (issue 49), and what a crafted
manifest can and cannot make kb or a server do (issue 50 C)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from kb.runtime import stale
from kb.runtime.cli import main as kb
from kb.runtime.index import Index
from kb.runtime.requests import parse_search
from kb.runtime.service import Service

from corpora import TINY, build_hash, crafted_root_artifact


@pytest.fixture
def corpus(tmp_path):
    """TINY copied and built (conftest keeps the stale cache under the session's tmp folder)."""
    c = tmp_path / "c"
    shutil.copytree(TINY, c)
    build_hash(c, tmp_path / "t.kb")
    return c, tmp_path / "t.kb"


def stale_files(out, *args):
    r = CliRunner().invoke(kb, ["search", "backup", "-i", str(out), "--json", *args])
    assert r.exit_code == 0, r.output
    return [n.get("files") for n in json.loads(r.stdout)["notices"] if n["kind"] == "stale_index"]


def test_a_search_reuses_its_last_check_until_a_folder_changes_or_recheck_s_passes(corpus, monkeypatch):
    c, out = corpus
    assert stale_files(out) == []
    checked = []
    real = stale.check
    monkeypatch.setattr(stale, "check", lambda *a, **k: checked.append(1) or real(*a, **k))
    assert stale_files(out) == [] and checked == []  # the cache entry: no scan
    (c / "gateway.txt").write_text("changed in place, same folder\n")
    assert stale_files(out) == [] and checked == []  # within RECHECK_S, its folder's time unchanged: README's trade-off
    (c / "new.md").write_text("# New\n")  # a new file moves its folder's time: checked at once
    assert stale_files(out) == [["changed gateway.txt", "added new.md"]] and checked == [1]
    assert stale_files(out) == [["changed gateway.txt", "added new.md"]] and checked == [1]
    monkeypatch.setattr(stale, "RECHECK_S", 0.0)
    (c / "new.md").unlink()
    os.utime(c, ns=(os.stat(c).st_atime_ns, os.stat(out).st_mtime_ns))  # the folder's time as it was: only RECHECK_S sees it
    assert stale_files(out) == [["changed gateway.txt"]] and checked == [1, 1]
    assert stale_files(out, "--no-stale-check") == [] and checked == [1, 1]


def test_a_cache_entry_that_is_not_json_is_a_full_check(corpus):
    c, out = corpus
    with Index(out) as ix:
        path = stale._cache_file(ix)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("{not json")
    (c / "new.md").write_text("# New\n")
    assert stale_files(out) == [["added new.md"]]


def test_the_cache_keeps_its_newest_entries_only(corpus, tmp_path, monkeypatch):
    _, out = corpus
    monkeypatch.setattr(stale, "cache_dir", lambda: str(tmp_path / "cache"))
    os.makedirs(tmp_path / "cache")
    for i in range(stale.MAX_CACHE_ENTRIES + 6):
        (tmp_path / "cache" / f"{i:016x}.json").write_text("{}")
        os.utime(tmp_path / "cache" / f"{i:016x}.json", ns=(i, i))
    with Index(out) as ix:
        stale.cached_report(ix)
        kept = sorted(p.name for p in (tmp_path / "cache").iterdir())
        assert len(kept) == stale.MAX_CACHE_ENTRIES and f"{ix.artifact.id}.json" in kept and "0000000000000000.json" not in kept


def test_the_readme_states_the_stale_checks_constants():
    from corpora import REPO

    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"at most once every {stale.RECHECK_S:g} s" in readme
    assert f"at most {stale.MAX_WALK_FILES:,} files and folders and {stale.MAX_WALK_S:g} s" in readme
    help_ = " ".join(CliRunner().invoke(kb, ["serve", "--help"]).stdout.split())
    assert f"at most every {stale.RECHECK_S:g} s; at most {stale.MAX_WALK_FILES:,} files and {stale.MAX_WALK_S:g} s a check" in help_


# --- issue 50 C: a crafted manifest naming / ----------------------------------------------------
@pytest.fixture
def crafted(tmp_path, tiny_artifact):
    return crafted_root_artifact(tiny_artifact, tmp_path / "crafted.kb")


def test_a_server_never_walks_the_root_a_crafted_artifact_names_unless_its_operator_asks(crafted, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the stale check ran")

    monkeypatch.setattr(stale, "check", refuse)
    with Index(crafted) as ix:
        svc = Service(ix).warm()  # what kb serve and kb mcp make without --stale-check
        d = svc.search(parse_search({"query": "backup"}))
        assert [n for n in d["notices"] if n["kind"] == "stale_index"] == []
        assert svc.status()["checked"] is False and svc.status()["fresh"] is None and "root" not in svc.status()


def test_a_servers_stale_report_counts_files_walks_bounded_and_hashes_nothing(crafted, monkeypatch):
    hashed = []
    monkeypatch.setattr(stale, "_sha256", lambda p: hashed.append(p))
    monkeypatch.setattr(stale, "MAX_WALK_FILES", 2000)  # a walk of / stops here
    with Index(crafted) as ix:
        svc = Service(ix, stale_check=True)
        d = svc.search(parse_search({"query": "backup"}))
        notice = next(n for n in d["notices"] if n["kind"] == "stale_index")
        assert "files" not in notice and len(json.dumps(d["notices"])) < 400
        assert notice["message"].startswith("Index may be stale: files differ from the build (") and "etc" not in notice["message"]
        assert "the check stopped after 2,000 files or 2 s" in notice["message"]
        status = svc.status()
        assert status["checked"] is True and status["fresh"] is False and not {"root", "changed", "added", "removed", "touched"} & set(status)
        assert status["differences"]["removed"] == 2  # the absolute and the climbing path: never opened
    assert hashed == []  # a file of the crafted size and a moved time is "touched", never read


def test_kb_search_on_a_crafted_artifact_walks_within_its_bounds(crafted, monkeypatch):
    import time

    monkeypatch.setattr(stale, "MAX_WALK_S", 0.2)
    opened = []
    real = stale._sha256
    monkeypatch.setattr(stale, "_sha256", lambda p: opened.append(p) or real(p))
    t = time.monotonic()
    files = stale_files(crafted)
    assert time.monotonic() - t < 5
    assert len(files) == 1 and len(files[0]) <= stale.MAX_NOTICE_FILES
    with Index(crafted) as ix:
        rep = stale.cached_report(ix)  # the search's, from its cache
    assert {"/etc/shadow", "../../etc/group"} <= set(rep["removed"]) and rep["incomplete"] == "the check stopped after 200,000 files or 0.2 s"
    assert all(p.startswith("/") and ".." not in p for p in opened) and "/etc/shadow" not in opened
