"""kb serve under hostile clients on 127.0.0.1 (issue 14): trickling connections and bursts,
against a real ``kb serve`` process with its default limits.

    python bench/serve_hostile.py [--artifact tests/golden/tiny-v1.kb] [--json OUT.json]

1. 64 connections each send one byte of a request every second (a slowloris) while 20 /health
   and 20 /search requests are made: how many answer, how fast.
2. 200 connections opened at once, each sending one /search: answers by status, resets.
3. The same burst against ``--max-connections 20``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def serving(artifact: Path, *args: str):
    """The port of a `kb serve` of ``artifact`` with ``args``, stopped on the way out."""
    cmd = [sys.executable, "-m", "kb.runtime.serve_cli", "serve", "-i", str(artifact), "--port", "0", "--no-stale-check", *args]
    proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    line = proc.stderr.readline().decode()
    if "listening on http://127.0.0.1:" not in line:
        proc.kill()
        raise SystemExit(f"kb serve did not start: {line!r}")
    try:
        yield int(line.rsplit(":", 1)[1])
    finally:
        proc.terminate()
        proc.wait(10)


def request(port: int, raw: bytes, timeout: float = 30.0):
    """(status or error name, seconds) of one request on its own connection."""
    t = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(raw)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else "no status line"
    except Exception as e:  # noqa: BLE001 - counted
        status = type(e).__name__
    return status, time.perf_counter() - t


def get(port: int, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()


def trickle(port: int, n: int = 64, every: float = 1.0, requests: int = 20) -> dict:
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]
    stop = threading.Event()
    payload = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100

    def run():
        i = 0
        while not stop.wait(every):
            for s in socks:
                try:
                    s.send(payload[i : i + 1])
                except OSError:
                    pass
            i += 1

    th = threading.Thread(target=run, daemon=True)
    th.start()
    time.sleep(2 * every)
    out = {}
    for name, path in (("health", "/health"), ("search", "/search?query=backup")):
        got = [request(port, get(port, path)) for _ in range(requests)]
        out[name] = {"answers": dict(Counter(str(s) for s, _ in got)), "p50_ms": round(1000 * statistics.median(t for _, t in got), 1)}
    stop.set()
    th.join()
    for s in socks:
        s.close()
    return out


def burst(port: int, n: int = 200) -> dict:
    raw = b'POST /search HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\nContent-Length: 20\r\nConnection: close\r\n\r\n{"query": "backup"}\n' % port
    barrier = threading.Barrier(n)
    results = [None] * n

    def one(i):
        barrier.wait(30)
        results[i] = request(port, raw)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return {"answers": dict(Counter(str(s) for s, _ in results)), "max_s": round(max(t for _, t in results), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", type=Path, default=REPO / "tests" / "golden" / "tiny-v1.kb")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    report = {}
    with serving(a.artifact) as port:
        report["64 tricklers, defaults"] = trickle(port)
        report["burst of 200, defaults"] = burst(port)
    with serving(a.artifact, "--max-connections", "20") as port:
        report["burst of 200, --max-connections 20"] = burst(port)
    with serving(a.artifact, "--max-connections", "64") as port:
        report["64 tricklers, --max-connections 64"] = trickle(port)
    print(json.dumps(report, indent=2))
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
