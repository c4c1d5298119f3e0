"""One-shot start-up of kb commands, interleaved: every round runs each command once, in a
rotating order, so load that comes and goes on a shared machine hits every command alike (a
sequential benchmark such as hyperfine runs one command's runs back to back).

    python packaging/oneshot.py times  --runs 21 NAME='CMD ...' NAME='CMD ...' ...
    python packaging/oneshot.py phases --runs 7  NAME='CMD ...' ...

``times`` prints the median, min and max wall milliseconds of each command, then the ratio of
every pair asked for with --ratio A/B. ``phases`` runs each command with KB_PHASES=1
(runtime/entry.py) and prints the median of each phase it reports. Commands are split like a
shell would (shlex) and run without one; stdout is discarded. Markdown on stdout.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import time

_PHASE = re.compile(r"^\s+([\d.]+)\s+([\d.]+)\s+(.+)$")


def _commands(specs: list[str]) -> list[tuple[str, list[str]]]:
    out = []
    for s in specs:
        name, _, cmd = s.partition("=")
        out.append((name, shlex.split(cmd)))
    return out


def _run(argv: list[str], env: dict | None = None) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    ms = (time.perf_counter() - t) * 1000
    if r.returncode:
        raise SystemExit(f"oneshot: {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return ms, r.stderr


def times(cmds, runs: int, warmup: int, ratios: list[str]) -> str:
    got: dict[str, list[float]] = {n: [] for n, _ in cmds}
    for r in range(warmup + runs):
        order = cmds[r % len(cmds):] + cmds[: r % len(cmds)]
        for name, argv in order:
            ms, _ = _run(argv)
            if r >= warmup:
                got[name].append(ms)
    med = {n: statistics.median(v) for n, v in got.items()}
    lines = [f"{runs} interleaved rounds ({warmup} warm-up), wall milliseconds:", "",
             "| command | median | min | max |", "|---|---:|---:|---:|"]
    lines += [f"| {n} | {med[n]:.1f} | {min(v):.1f} | {max(v):.1f} |" for n, v in got.items()]
    if ratios:
        lines += ["", "| ratio | of medians |", "|---|---:|"]
        for spec in ratios:
            a, b = spec.split("/")
            lines.append(f"| {a} / {b} | {med[a] / med[b]:.2f} |")
    return "\n".join(lines)


def phases(cmds, runs: int) -> str:
    env = dict(os.environ, KB_PHASES="1")
    per: dict[str, dict[str, list[float]]] = {n: {} for n, _ in cmds}
    total: dict[str, list[float]] = {n: [] for n, _ in cmds}
    for r in range(runs):
        for name, argv in cmds[r % len(cmds):] + cmds[: r % len(cmds)]:
            ms, err = _run(argv, env)
            total[name].append(ms)
            for line in err.splitlines():
                m = _PHASE.match(line)
                if m:
                    per[name].setdefault(m.group(3), []).append(float(m.group(2)))
    lines = []
    for name, _ in cmds:
        lines += [f"{name} (wall median {statistics.median(total[name]):.1f} ms over {runs} runs; phases, median ms):", "",
                  "| phase | ms |", "|---|---:|"]
        lines += [f"| {label} | {statistics.median(v):.1f} |" for label, v in per[name].items()]
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["times", "phases"])
    ap.add_argument("commands", nargs="+", metavar="NAME=CMD")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ratio", action="append", default=[], metavar="A/B")
    a = ap.parse_args(argv)
    cmds = _commands(a.commands)
    print(times(cmds, a.runs, a.warmup, a.ratio) if a.what == "times" else phases(cmds, a.runs))


if __name__ == "__main__":
    main()
