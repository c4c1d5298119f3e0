"""A markdown table of fuzz summaries: ``python -m tests.fuzz.report SUMMARY.json...`` (the
files ``python -m tests.fuzz.run --out`` writes). Runs of one target are added up."""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict


def table(paths: list[str]) -> str:
    runs = defaultdict(list)
    for p in paths:
        s = json.loads(open(p).read())
        runs[s["target"]].append(s)
    lines = [
        "| target | inputs | runs (first input, seed) | inputs/s | crashes | hangs | wrong exit codes / findings | slowest input | peak worker RSS | outcomes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for target, ss in runs.items():
        inputs = sum(s["inputs"] for s in ss)
        seconds = sum(s["seconds"] for s in ss)
        outcomes = Counter()
        for s in ss:
            outcomes.update(s["outcomes"])
        kinds = Counter()
        for s in ss:
            kinds.update(s["by_kind"])
        shown = ", ".join(f"{k} {v:,}" for k, v in outcomes.most_common())
        if len(kinds) > 1:
            shown += "; by parser: " + ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items()))
        starts = "; ".join(f"{s['first_input']:,}, seed {s['seed']}" for s in ss)
        lines.append(
            f"| {target} | {inputs:,} | {len(ss)} ({starts}) "
            f"| {inputs / max(seconds, 1e-9):.0f} | {sum(s['crashes'] for s in ss)} | {sum(s['hangs'] for s in ss)} "
            f"| {sum(s['findings'] for s in ss)} | {max(s['slowest_input_s'] for s in ss):.2f} s "
            f"| {max(s['peak_worker_rss_mib'] for s in ss):.0f} MiB | {shown} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1:]))
