"""One-shot start-up of kb commands, interleaved: every round runs each command once, in a
rotating order, so load that comes and goes on a shared machine hits every command alike (a
sequential benchmark such as hyperfine runs one command's runs back to back).

    python packaging/oneshot.py times  --runs 21 NAME='CMD ...' NAME='CMD ...' ...
    python packaging/oneshot.py phases --runs 7  NAME='CMD ...' ...

``times`` prints the median, min and max wall milliseconds of each command and its median CPU
time (user + system of every thread: on a machine other jobs keep busy, wall time measures the
scheduler as much as kb), then the ratios of every pair asked for with --ratio A/B (of the medians, of the minima, and the
median over rounds of the two commands' ratio within a round). ``phases`` runs each command with
KB_PHASES naming packaging/phases.py (the profiler runtime/entry.py runs first) and prints the
median of each phase it reports. Commands are split like a shell would (shlex) and run without
one; stdout is discarded. Markdown on stdout.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import time

_PHASE = re.compile(r"^\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(.+)$")
_PROFILER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "phases.py")


def _commands(specs: list[str]) -> list[tuple[str, list[str]]]:
    out = []
    for s in specs:
        name, _, cmd = s.partition("=")
        out.append((name, shlex.split(cmd)))
    return out


def _run(argv: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall ms, CPU ms of the process and its children: user + system, stderr)."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(p.pid, 0)
    ms = (time.perf_counter() - t) * 1000
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"oneshot: {' '.join(argv)} exited {p.returncode}: {err.strip()[-300:]}")
    return ms, (usage.ru_utime + usage.ru_stime) * 1000, err


def times(cmds, runs: int, warmup: int, ratios: list[str]) -> str:
    got: dict[str, list[float]] = {n: [] for n, _ in cmds}
    cpu: dict[str, list[float]] = {n: [] for n, _ in cmds}
    for r in range(warmup + runs):
        order = cmds[r % len(cmds):] + cmds[: r % len(cmds)]
        for name, argv in order:
            ms, cpu_ms, _ = _run(argv)
            if r >= warmup:
                got[name].append(ms)
                cpu[name].append(cpu_ms)
    med = {n: statistics.median(v) for n, v in got.items()}
    cmed = {n: statistics.median(v) for n, v in cpu.items()}
    lines = [f"{runs} interleaved rounds ({warmup} warm-up), milliseconds (CPU: user + system, all threads):", "",
             "| command | wall median | wall min | wall max | CPU median |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {n} | {med[n]:.1f} | {min(v):.1f} | {max(v):.1f} | {cmed[n]:.1f} |" for n, v in got.items()]
    if ratios:
        # "of rounds": the median over rounds of A's wall time over B's in the same round, which
        # ran within a second of each other; drift of the machine between rounds cancels.
        lines += ["", "| ratio | of wall medians | of wall minima | of CPU medians | of rounds (median) |", "|---|---:|---:|---:|---:|"]
        for spec in ratios:
            a, b = spec.split("/")
            paired = statistics.median(x / y for x, y in zip(got[a], got[b]))
            lines.append(f"| {a} / {b} | {med[a] / med[b]:.2f} | {min(got[a]) / min(got[b]):.2f} | {cmed[a] / cmed[b]:.2f} | {paired:.2f} |")
    return "\n".join(lines)


def _with_phases(argv: list[str]) -> list[str]:
    """``argv`` with KB_PHASES set, also through an ``env -i ...`` prefix (which drops the
    environment it is given)."""
    if os.path.basename(argv[0]) != "env":
        return argv
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 1
    return argv[:i] + ["KB_PHASES=" + _PROFILER] + argv[i:]


def phases(cmds, runs: int) -> str:
    env = dict(os.environ, KB_PHASES=_PROFILER)
    cmds = [(name, _with_phases(argv)) for name, argv in cmds]
    per: dict[str, dict[str, list[tuple[float, float]]]] = {n: {} for n, _ in cmds}
    total: dict[str, list[tuple[float, float]]] = {n: [] for n, _ in cmds}
    for r in range(runs):
        for name, argv in cmds[r % len(cmds):] + cmds[: r % len(cmds)]:
            ms, cpu_ms, err = _run(argv, env)
            total[name].append((ms, cpu_ms))
            for line in err.splitlines():
                m = _PHASE.match(line)
                if m:
                    per[name].setdefault(m.group(4), []).append((float(m.group(2)), float(m.group(3))))
    lines = []
    for name, _ in cmds:
        wall, used = zip(*total[name])
        lines += [f"{name} (over {runs} runs: wall median {statistics.median(wall):.1f} ms, CPU median {statistics.median(used):.1f} ms; phases, medians):", "",
                  "| phase | wall ms | CPU ms |", "|---|---:|---:|"]
        lines += [f"| {label} | {statistics.median(w for w, _ in v):.1f} | {statistics.median(c for _, c in v):.1f} |" for label, v in per[name].items()]
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
