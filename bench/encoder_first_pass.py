"""The query encoder's first forward pass in a fresh process, the way a one-shot `kb search`
pays it: its packs kept (``keep_packed=True``, what warm processes do) against let go after use
(``False``, what kb search does), each in its own process, interleaved round by round so that
the machine's drift hits both alike.

    python bench/encoder_first_pass.py --art bench/out/hugo.kb --art bench/out/hugo-e5.kb [--rounds 15]

For each artifact and variant: a child process opens the artifact, builds the encoder from its
model.query section (common/query_encoder.py), tokenizes "how to configure taxonomies" and
times ``forward`` once. Prints the median and minimum milliseconds of each (markdown), and
with ``--out FILE`` writes every run's milliseconds as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine  # noqa: E402

QUERY = "how to configure taxonomies"
VARIANTS = {"kept": True, "let go": False}


def child(art: str, keep: bool) -> float:
    from kb.common.query_encoder import QueryEncoder
    from kb.runtime.index import Index

    with Index(Path(art)) as ix:
        space = ix.dense
        enc = QueryEncoder(space.query_model, space.card or {}, keep_packed=keep)
        ids = enc.tokenizer.encode(enc.query_prefix + QUERY)
        t = time.perf_counter()
        enc.forward(ids)
        return (time.perf_counter() - t) * 1000


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--art", action="append", required=True, help="an artifact with a model.query section")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=Path, help="write the runs' milliseconds here as JSON")
    ap.add_argument("--child", nargs=2, metavar=("ART", "KEEP"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(f"{child(a.child[0], a.child[1] == '1'):.3f}")
        return
    runs = [(art, v) for art in a.art for v in VARIANTS]
    got: dict = {r: [] for r in runs}
    for i in range(a.rounds):
        for art, v in runs[i % len(runs) :] + runs[: i % len(runs)]:
            out = subprocess.run([sys.executable, __file__, "--art", art, "--child", art, "1" if VARIANTS[v] else "0"], capture_output=True, text=True, check=True)
            got[art, v].append(float(out.stdout.strip()))
    print(f"Machine: {machine()}  \nDate: {time.strftime('%Y-%m-%d %H:%M')}  \nCommand: `python bench/encoder_first_pass.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
    print(f"First forward pass of {QUERY!r} in a fresh process, {a.rounds} interleaved rounds, milliseconds:\n")
    print("| artifact | packs | median | min |\n|---|---|---:|---:|")
    for (art, v), ms in got.items():
        print(f"| {Path(art).name} | {v} | {statistics.median(ms):.1f} | {min(ms):.1f} |")
    if a.out:
        a.out.write_text(json.dumps({"machine": machine(), "query": QUERY, "runs": [{"artifact": art, "packs": v, "ms": ms} for (art, v), ms in got.items()]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
