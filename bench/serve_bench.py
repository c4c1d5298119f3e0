"""Load generator for ``kb serve``: warm requests/second and latency, hybrid without and with rerank.

    kb serve -i hugo.kb --port 8181 &
    python bench/serve_bench.py --url http://127.0.0.1:8181 --queries ../shared/fixtures/hugo-docs.json \
        --concurrency 4 --requests 200 [--max-seconds 60] [--out bench/out/serve_bench.json]

Each of ``--concurrency`` threads keeps one HTTP/1.1 connection (http.client, keep-alive) and
POSTs /search with the fixture's queries, in a seeded shuffled order, until ``--requests``
requests are done or ``--max-seconds`` pass. A warm-up pass (not counted) touches every thread's
connection and the models first. Loopback URLs only. Prints a markdown table naming the machine;
``--out`` also writes the numbers as JSON. Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import random
import sys
import threading
import time
from urllib.parse import urlsplit

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
PHASES = (("hybrid", {"mode": "hybrid", "rerank": False}), ("hybrid+rerank", {"mode": "hybrid", "rerank": True}))


def load_queries(path: str) -> list[str]:
    """Query texts from a fixture ({"queries": [{"query": ...}]}) or a JSON list of strings/objects."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    items = data["queries"] if isinstance(data, dict) else data
    out = [q if isinstance(q, str) else q["query"] for q in items]
    if not out:
        raise SystemExit(f"serve_bench: no queries in {path}")
    return out


def percentile(sorted_ms: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_ms:
        return float("nan")
    k = max(0, min(len(sorted_ms) - 1, math.ceil(p / 100 * len(sorted_ms)) - 1))
    return sorted_ms[k]


class Target:
    def __init__(self, url: str):
        u = urlsplit(url)
        if u.scheme != "http" or u.hostname not in LOOPBACK:
            raise SystemExit(f"serve_bench: only loopback http URLs (127.0.0.1, localhost, [::1]); got {url!r}")
        self.host, self.port = u.hostname, u.port or 80

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def post(conn, body: dict) -> tuple[int, bytes]:
    conn.request("POST", "/search", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def run_phase(target: Target, queries: list[str], extra: dict, top_k: int, concurrency: int, requests: int, max_seconds: float, timeout: float) -> dict:
    """Send ``requests`` searches over ``concurrency`` keep-alive connections; latencies in ms."""
    lock = threading.Lock()
    issued = [0]
    lat: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + max_seconds

    def take() -> int | None:
        with lock:
            if issued[0] >= requests or time.monotonic() > deadline:
                return None
            issued[0] += 1
            return issued[0] - 1

    def worker(conn):
        while (i := take()) is not None:
            body = {"query": queries[i % len(queries)], "top_k": top_k, **extra}
            t = time.perf_counter()
            try:
                status, _ = post(conn, body)
            except (OSError, http.client.HTTPException) as e:
                status = type(e).__name__
                conn.close()
                conn = target.connect(timeout)
            ms = (time.perf_counter() - t) * 1000
            with lock:
                if status == 200:
                    lat.append(ms)
                else:
                    errors[str(status)] = errors.get(str(status), 0) + 1
        conn.close()

    conns = [target.connect(timeout) for _ in range(concurrency)]
    for k, conn in enumerate(conns):  # warm-up: open every connection, run each query shape once
        status, data = post(conn, {"query": queries[k % len(queries)], "top_k": top_k, **extra})
        if status != 200:
            raise SystemExit(f"serve_bench: warm-up request failed with {status}: {data[:300]!r}")
    threads = [threading.Thread(target=worker, args=(c,)) for c in conns]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    return {
        "requests": len(lat),
        "errors": errors,
        "seconds": round(wall, 3),
        "rps": round(len(lat) / wall, 2) if wall > 0 else None,
        "p50_ms": round(percentile(lat, 50), 2),
        "p95_ms": round(percentile(lat, 95), 2),
        "mean_ms": round(sum(lat) / len(lat), 2) if lat else None,
    }


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8181", help="a running kb serve (loopback only)")
    ap.add_argument("--queries", required=True, help="fixture JSON ({'queries': [{'query': ...}]}) or a JSON list")
    ap.add_argument("--concurrency", type=int, default=4, help="client threads, one keep-alive connection each")
    ap.add_argument("--requests", type=int, default=200, help="requests per phase")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="stop a phase after this long even if requests remain")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=60.0, help="client socket timeout, seconds")
    ap.add_argument("--phases", default=",".join(p for p, _ in PHASES), help="comma-separated subset of: " + ", ".join(p for p, _ in PHASES))
    ap.add_argument("--seed", type=int, default=0, help="query order shuffle seed")
    ap.add_argument("--out", help="also write the results here as JSON")
    a = ap.parse_args(argv)
    if a.concurrency < 1 or a.requests < 1:
        ap.error("--concurrency and --requests must be at least 1")

    target = Target(a.url)
    queries = load_queries(a.queries)
    random.Random(a.seed).shuffle(queries)
    conn = target.connect(a.timeout)
    conn.request("GET", "/health")
    r = conn.getresponse()
    health = json.loads(r.read())
    conn.close()
    if r.status != 200:
        raise SystemExit(f"serve_bench: {a.url}/health answered {r.status}: {health}")

    wanted = [p.strip() for p in a.phases.split(",") if p.strip()]
    unknown = set(wanted) - {p for p, _ in PHASES}
    if unknown:
        ap.error(f"unknown phase(s): {', '.join(sorted(unknown))}")
    results = {}
    for name, extra in PHASES:
        if name in wanted:
            results[name] = run_phase(target, queries, extra, a.top_k, a.concurrency, a.requests, a.max_seconds, a.timeout)
            print(f"serve_bench: {name}: {results[name]}", file=sys.stderr)

    report = {
        "machine": machine(),
        "url": a.url,
        "artifact": health.get("artifact"),
        "chunks": health.get("chunks"),
        "queries": len(queries),
        "concurrency": a.concurrency,
        "top_k": a.top_k,
        "phases": results,
    }
    print(f"Machine: {report['machine']}")
    print(f"Artifact: {report['artifact']}, {report['chunks']} chunks; {len(queries)} queries, concurrency {a.concurrency}, top_k {a.top_k}, warm (after one request per connection)\n")
    print("| phase | requests | errors | req/s | p50 ms | p95 ms | mean ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        errs = sum(r["errors"].values())
        print(f"| {name} | {r['requests']} | {errs} | {r['rps']} | {r['p50_ms']} | {r['p95_ms']} | {r['mean_ms']} |")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
