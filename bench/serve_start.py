"""What kb serve's and kb mcp's private copy of the artifact costs at start (issue 50 A): the
Service opened over an mmap of the file (before) against the file read into the process's own
memory and every checksum verified (runtime/service.py ``Reloading``), then warmed as the servers
warm it. Each in a fresh process, alternating, ``--repeat`` times; prints JSON lines and the median.

    python bench/serve_start.py /work/main/bench/out/hugo.kb /work/main/bench/out/cmrc2018-zh.kb --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ONE = """
import json, os, sys, time
from kb.runtime.index import Index
from kb.runtime.search import Searcher
from kb.runtime.service import Service
path, private = sys.argv[1], sys.argv[2] == "1"
t = time.perf_counter()
ix = Index(path, private)
if private:
    ix.artifact.verify()
opened = time.perf_counter() - t
Service(ix, Searcher(ix, "cpu", "auto"), stale_check=False).warm()
warm = time.perf_counter() - t
rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
print(json.dumps({"artifact": os.path.basename(path), "private": private, "open_ms": round(opened * 1000), "open_warm_s": round(warm, 2), "rss_mib": round(rss)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifacts", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    for path in a.artifacts:
        runs = {False: [], True: []}
        for _ in range(a.repeat):
            for private in (False, True):
                out = subprocess.run([sys.executable, "-c", ONE, path, "1" if private else "0"], capture_output=True, text=True, check=True)
                runs[private].append(json.loads(out.stdout))
                print(out.stdout.strip(), flush=True)
        for private, rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs) for k in ("open_ms", "open_warm_s", "rss_mib")}
            print(json.dumps({"artifact": os.path.basename(path), "private": private, "median": med}))


if __name__ == "__main__":
    main()
