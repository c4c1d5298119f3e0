"""The stale check's cost on a generated corpus of 10,000 files (issue 49, item 5).

Writes FILES small markdown files into a temporary folder (DIRS folders of equal size, seeded
text), builds a BM25-only artifact of them (``kb-build --embedder none``: cheap, and the stale
check does not depend on the embedder), then in one run, alternating, times:

- ``stale_notices(ix)`` in-process, as a one-shot ``kb search`` calls it (cold: no cache entry,
  so the full size+mtime scan and the folder walk; warm: the cache entry of the last full check);
- the whole ``kb search QUERY --mode bm25 --json`` as a subprocess, with the check and with
  ``--no-stale-check``.

    python bench/stale_check.py [--files 10000] [--rounds 15] [--json OUT.json]

Prints a markdown table (medians and p90 in ms) naming the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = "backup restore snapshot disk quota gateway firewall rotation oncall runbook incident storage cluster replica network".split()


def make_corpus(root: Path, files: int, dirs: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    per = -(-files // dirs)
    for i in range(files):
        d = root / f"d{i // per:03d}"
        d.mkdir(exist_ok=True)
        body = " ".join(rng.choice(WORDS) for _ in range(40))
        (d / f"note{i:05d}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def timed(fn, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def summary(ms: list[float]) -> dict:
    ms = sorted(ms)
    return {"median": round(statistics.median(ms), 2), "p90": round(ms[int(0.9 * (len(ms) - 1))], 2), "runs": len(ms)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", dest="json_out")
    a = ap.parse_args()

    from kb.runtime import stale
    from kb.runtime.index import Index

    with tempfile.TemporaryDirectory(prefix="kb-stale-") as tmp:
        corpus, art, cache = Path(tmp) / "corpus", Path(tmp) / "c.kb", Path(tmp) / "cache"
        corpus.mkdir()
        make_corpus(corpus, a.files, a.dirs)
        env = {**os.environ, "KB_CACHE_DIR": str(cache)}
        subprocess.run([sys.executable, "-c", "from kb.builder.cli import main; main()", str(corpus), "-o", str(art), "--embedder", "none", "-q"], check=True, env=env)
        os.environ["KB_CACHE_DIR"] = str(cache)
        ix = Index(art)
        man = ix.manifest()
        res: dict = {"files": a.files, "dirs": a.dirs, "machine": f"{cpu_model()}, {os.cpu_count()} cores", "ms": {}}

        def cold():
            stale.forget(ix)
            assert not stale.stale_notices(ix)

        res["ms"]["full scan (stat each file, walk each folder)"] = summary(timed(lambda: stale.stale_report(man), a.rounds))
        res["ms"]["stale_notices, no cache entry"] = summary(timed(cold, a.rounds))
        stale.stale_notices(ix)
        res["ms"]["stale_notices, cache entry fresh"] = summary(timed(lambda: stale.stale_notices(ix), a.rounds))
        cmd = [sys.executable, "-m", "kb.runtime.cli", "search", "backup restore", "-i", str(art), "--mode", "bm25", "--json"]
        runs: dict[str, list[float]] = {"kb search (stale check)": [], "kb search --no-stale-check": []}
        for _ in range(a.rounds):  # alternating, so load on the machine falls on both alike
            for name, extra in (("kb search (stale check)", []), ("kb search --no-stale-check", ["--no-stale-check"])):
                t = time.perf_counter()
                subprocess.run(cmd + extra, check=True, env=env, capture_output=True)
                runs[name].append((time.perf_counter() - t) * 1000)
        for name, ms in runs.items():
            res["ms"][name] = summary(ms)
        ix.close()
    lines = [f"stale check, {a.files:,} files in {a.dirs} folders, {res['machine']}, {a.rounds} rounds", "", "| what | median ms | p90 ms |", "|---|---|---|"]
    lines += [f"| {k} | {v['median']} | {v['p90']} |" for k, v in res["ms"].items()]
    print("\n".join(lines))
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
