"""kb bench's quality, calibration and notice figures per set and backend, before and after issue
48's confidence changes, in one process over one open artifact (half the cost of two kb bench runs,
and the same searches):

    python bench/trust_bench.py --set hugo=bench/out/hugo.kb:../shared/fixtures/hugo-docs.json \\
        --set lisa=bench/out/lisa.kb:../shared/data/lisa:test [--backends bm25,vector,hybrid] --out DIR

"before" is this code with the issue's two confidence changes undone: the confidences as the
per-result model gives them (runtime/confidence.py ``monotone`` made the identity) and the
low-confidence notice given whatever the top result's name (runtime/search.py ``exact_name`` made
false). Everything else a kb bench figure reads is unchanged by the issue: kb bench groups by
document (so --group diverse does not apply), takes queries literally (no syntax, no typed parts),
and the dev sets' artifacts keep the analyzer they were built with. On the sets measured with both,
"before" gave kb bench's figures of the code before the issue exactly (bench/notes/2026-12-06-trust.md).
Writes DIR/NAME.json ({"before": ..., "after": ...}, each run_bench's "backends") and prints a
markdown table; quality only (``timed=False``: no top-k latency call).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def load(spec: str):
    """NAME=ARTIFACT:FIXTURE.json or NAME=ARTIFACT:BEIR_FOLDER:SPLIT -> (name, artifact, BenchSet)."""
    from kb.runtime.bench import load_beir, load_fixture

    name, _, rest = spec.partition("=")
    art, _, source = rest.partition(":")
    if source.endswith(".json"):
        bset = load_fixture(Path(source))
    else:
        folder, _, split = source.rpartition(":")
        bset = load_beir(Path(folder), split)
    return name, art, bset


def run(art: str, bset, backends: list[str] | None) -> dict:
    from kb.runtime import confidence, search
    from kb.runtime.bench import run_bench
    from kb.runtime.index import Index

    out = {}
    monotone, exact_name = confidence.monotone, search.exact_name
    with Index(art) as ix:
        searcher = search.Searcher(ix)
        for variant in ("before", "after"):
            confidence.monotone = (lambda p: p) if variant == "before" else monotone
            search.exact_name = (lambda rec, text: False) if variant == "before" else exact_name
            try:
                out[variant] = run_bench(searcher, bset, 10, backends, timed=False)["backends"]
            finally:
                confidence.monotone, search.exact_name = monotone, exact_name
    return out


def table(results: dict) -> str:
    sets = list(results)
    backends = list(dict.fromkeys(b for r in results.values() for b in r["after"]))
    lines = ["| backend | " + " | ".join(sets) + " |", "|---" * (len(sets) + 1) + "|"]
    for b in backends:
        cells = []
        for s in sets:
            before, after = results[s]["before"].get(b), results[s]["after"].get(b)
            cells.append("-" if before is None else f"{before['calibration']['ece']:.3f} → {after['calibration']['ece']:.3f}")
        lines.append(f"| {b} ECE | " + " | ".join(cells) + " |")
    for b in backends:
        cells = []
        for s in sets:
            before, after = results[s]["before"].get(b), results[s]["after"].get(b)
            if before is None:
                cells.append("-")
                continue
            same = all(before[m] == after[m] for m in ("ndcg@10", "mrr@10", "p@10", "recall@10", "recall@100", "hit@10"))
            lc = lambda r: f"{r['low_confidence']['negatives_flagged']} / {r['low_confidence']['positives_flagged']}"  # noqa: E731
            cells.append(f"{after['ndcg@10']:.4f}{'' if same else ' (changed)'}; {lc(before)} → {lc(after)}")
        lines.append(f"| {b} nDCG@10; low-confidence neg / pos | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", required=True, help="NAME=ARTIFACT:FIXTURE.json or NAME=ARTIFACT:BEIR_FOLDER:SPLIT")
    ap.add_argument("--backends", help="comma-separated (default: kb bench's: all that the artifact has)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for spec in a.set:
        name, art, bset = load(spec)
        t = time.time()
        results[name] = run(art, bset, a.backends.split(",") if a.backends else None)
        (a.out / f"{name}.json").write_text(json.dumps(results[name], indent=1))
        print(f"{name}: {len(bset.queries)} queries, {time.time() - t:.0f} s", flush=True)
    print(table(results))


if __name__ == "__main__":
    main()
