"""The plumbing of the bench scripts of one-shot searches (their figures are in bench/notes/
2026-12-02-scale-million.md and 2026-12-05-one-shot-ratios.md): bench/walk_pages.py walks an artifact's graph and counts the
pages it read, and its other order of the slots is a permutation within each block;
bench/bm25_one_shot.py times the BM25 leg both ways in fresh processes and finds them alike;
bench/startup_records.py counts the records (dataclasses and NamedTuples) a command's imports create;
packaging/oneshot.py's ``phases`` has the entry run the profiler packaging/phases.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from kb.runtime.index import Index

from corpora import TINY, build_hash, load_script


BENCH = Path(__file__).resolve().parents[2] / "bench"
walk_pages = load_script("walk_pages", BENCH / "walk_pages.py")
oneshot = load_script("oneshot", BENCH.parent / "packaging" / "oneshot.py")
bm25_one_shot = load_script("bm25_one_shot", BENCH / "bm25_one_shot.py")


def test_walk_pages_counts_the_pages_a_walk_reads(tmp_path, capsys):
    art = tmp_path / "tiny.kb"
    build_hash(TINY, art)
    with Index(art) as ix:
        q = np.asarray(ix.dense.vector_matrix[:3], np.float32)
    np.savez(tmp_path / "q.npz", vectors=q, texts=np.array(["a", "b", "c"]))
    walk_pages.main(["--artifact", str(art), "--queries", str(tmp_path / "q.npz"), "--count", "3", "--block", "8", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert r["queries"] == 3 and r["rows_read"] >= 1 and r["record_pages"] >= 1
    assert 1 <= r["row_pages_half_width"] <= r["row_pages"] and r["row_pages_halving_in_8"] >= 1


def test_the_halving_order_moves_slots_only_within_their_block():
    m = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float16)
    new = walk_pages.halving_order(m, 16, 3)
    assert sorted(new.tolist()) == list(range(50))
    assert all(new[i] // 16 == i // 16 for i in range(50))


def test_bm25_one_shot_times_both_picks_and_finds_them_alike(tmp_path, capsys):
    art = tmp_path / "tiny.kb"
    build_hash(TINY, art)
    np.savez(tmp_path / "q.npz", texts=np.array(["restore the snapshot", "gateway firewall"]))
    bm25_one_shot.main(["--artifact", str(art), "--queries", str(tmp_path / "q.npz"), "--count", "2", "--rounds", "1", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert set(r) == {"compiled", "numpy"} and all(v["runs"] == 2 and v["median_ms"] >= 0 for v in r.values())


def test_startup_records_counts_the_records_a_fresh_process_creates(tmp_path):
    art = tmp_path / "tiny.kb"
    build_hash(TINY, art)
    out = subprocess.run([sys.executable, str(BENCH / "startup_records.py"), "search", "backups", "-i", str(art), "--mode", "bm25", "--json"],
                         capture_output=True, text=True, check=True).stdout.splitlines()  # fmt: skip
    ms, what = out[-1].split(maxsplit=1)
    assert what.startswith("total, ") and int(what.split()[1]) == len(out) - 1 >= 10 and float(ms) > 0
    assert any(line.endswith("kb.runtime.results.Result  NamedTuple") for line in out)


def test_oneshot_phases_has_the_entry_run_the_profiler_and_the_results_stay(tmp_path):
    """KB_PHASES names packaging/phases.py: runtime/entry.py runs it before the command, with and
    without the start-up tweaks, and its report goes to stderr only."""
    art = tmp_path / "tiny.kb"
    build_hash(TINY, art)
    cmd = [sys.executable, "-m", "kb.runtime.entry", "search", "restore the snapshot", "-i", str(art), "--mode", "bm25", "--no-stale-check", "--json"]
    table = oneshot.phases([("bm25", cmd)], runs=1)
    assert all(f"| {label} |" in table for label in ("import kb.runtime.cli (click)", "open artifact", "Searcher.search (all legs)", "render JSON"))

    def results(**env):
        r = subprocess.run(cmd, capture_output=True, text=True, check=True, env=dict(os.environ, **env))
        return [(h["chunk_id"], h["score"]) for h in json.loads(r.stdout)["results"]], r.stderr.count("kb phases (ms since entry start")

    plain = results()
    assert plain[0] and plain[1] == 0
    for tweaks in ("0", "1"):
        assert results(KB_PHASES=oneshot._PROFILER, KB_NO_TWEAKS=tweaks) == (plain[0], 1)
    # KB_PHASES=1 (its old form) or any path that is not a file: one stderr line, the search runs
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, env=dict(os.environ, KB_PHASES="1"))
    assert [(h["chunk_id"], h["score"]) for h in json.loads(r.stdout)["results"]] == plain[0]
    assert r.stderr == "kb: KB_PHASES=1 is not a file: it takes the path of packaging/phases.py; running without it\n"
