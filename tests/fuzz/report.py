"""A markdown table of fuzz summaries: ``python -m tests.fuzz.report SUMMARY.json...`` (the
files ``python -m tests.fuzz.run --out`` writes), one row per run and a total per target."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def _row(name: str, ss: list[dict]) -> str:
    inputs, seconds = sum(s["inputs"] for s in ss), sum(s["seconds"] for s in ss)
    return (
        f"| {name} | {inputs:,} | {inputs / max(seconds, 1e-9):.0f} | {sum(s['crashes'] for s in ss)} | {sum(s['hangs'] for s in ss)} "
        f"| {sum(s['findings'] for s in ss)} | {max(s['slowest_input_s'] for s in ss):.2f} s | {max(s['peak_worker_rss_mib'] for s in ss):.0f} MiB |"
    )


def table(paths: list[str]) -> str:
    runs = defaultdict(list)
    for p in paths:
        s = json.loads(open(p).read())
        runs[s["target"]].append(s)
    lines = [
        "| run | inputs | inputs/s | crashes | hangs | wrong exit codes / findings | slowest input | peak worker RSS |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for target, ss in runs.items():
        for s in ss:
            lines.append(_row(f"{target}, inputs {s['first_input']:,}.. (seed {s['seed']})", [s]))
        lines.append(_row(f"**{target}, total**", ss))
    return "\n".join(lines)


def outcomes(paths: list[str]) -> str:
    """What the inputs ended in, per target: the outcome counts and the kinds generated."""
    per = defaultdict(lambda: (defaultdict(int), defaultdict(int)))
    for p in paths:
        s = json.loads(open(p).read())
        out, kinds = per[s["target"]]
        for k, v in s["outcomes"].items():
            out[k] += v
        for k, v in s["by_kind"].items():
            kinds[k] += v
    lines = []
    for target, (out, kinds) in per.items():
        shown = ", ".join(f"{k} {v:,}" for k, v in sorted(out.items(), key=lambda kv: -kv[1]))
        by = ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items()))
        lines.append(f"- **{target}**: {shown} (inputs by kind: {by})")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1:]))
    print()
    print(outcomes(sys.argv[1:]))
