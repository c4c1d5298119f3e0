"""The query encoder's first forward pass in a fresh process, the way a one-shot `kb search`
pays it, by kernels: kb's compiled kernels (models/_encoder.c, what kb search runs where they
are installed) and the numpy reference (where they are not), each in its own process,
interleaved round by round so that the machine's drift hits both alike.

    python bench/encoder_first_pass.py --art bench/out/hugo.kb --art bench/out/hugo-e5.kb [--rounds 15]

For each artifact and variant (``--variants``, default both): a child process opens the artifact, builds the encoder from its
model.query section (models/query_encoder.py), tokenizes "how to configure taxonomies" and
times ``forward`` once. Prints the median and minimum milliseconds of each (markdown), and
with ``--out FILE`` writes every run's milliseconds as JSON. ``--parts`` also times, inside that
pass, the encoder's steps (all dense layers; numpy's int8 layer, the inputs' quantization, GELU;
all layer norms; the rest is attention, embedding rows and Python) and prints their medians.
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
VARIANTS = {"native": ("native", False), "numpy": ("numpy", False)}


# The steps --parts times inside the pass: (owner, attribute, label). QueryEncoder._dense is a
# whole dense layer (with its GELU), _norm a layer norm with its residual; dense_int8 is numpy's
# int8 layer.
PARTS = (("QueryEncoder", "_dense", "dense layers, all steps"), ("qe", "dense_int8", "  numpy: quantize, int8 products, rescale"),
         ("qe", "quantize_rows", "  numpy: quantize the inputs"), ("qe", "gelu", "  numpy: GELU"),
         ("QueryEncoder", "_norm", "layer norms"))  # fmt: skip


def child(art: str, kernels: str, keep: bool, parts: bool = False) -> dict:
    from kb.models import query_encoder as qe
    from kb.runtime.index import Index

    spent: dict[str, float] = {}
    if parts:
        owners = {"qe": qe, "QueryEncoder": qe.QueryEncoder}
        for who, name, label in PARTS:
            owner = owners.get(who)
            if owner is None:
                continue
            fn = getattr(owner, name)

            def timed(*args, _fn=fn, _label=label, **kw):
                t = time.perf_counter()
                try:
                    return _fn(*args, **kw)
                finally:
                    spent[_label] = spent.get(_label, 0.0) + (time.perf_counter() - t) * 1000

            setattr(owner, name, timed)
    with Index(Path(art)) as ix:
        space = ix.dense
        enc = qe.QueryEncoder(space.query_model, space.card or {}, kernels)
        ids = enc.tokenizer.encode(enc.query_prefix + QUERY)
        t = time.perf_counter()
        enc.forward(ids)
        return {"ms": (time.perf_counter() - t) * 1000, "parts": spent}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--art", action="append", required=True, help="an artifact with a model.query section")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=Path, help="write the runs' milliseconds here as JSON")
    ap.add_argument("--parts", action="store_true", help="also time the encoder's steps inside the pass (a little slower for the wrapping)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--child", nargs=3, metavar=("ART", "KERNELS", "KEEP"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1], a.child[2] == "1", a.parts)))
        return
    variants = [v.strip() for v in a.variants.split(",")]
    if unknown := [v for v in variants if v not in VARIANTS]:
        ap.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    runs = [(art, v) for art in a.art for v in variants]
    got: dict = {r: [] for r in runs}
    parts: dict = {r: {} for r in runs}
    for i in range(a.rounds):
        for art, v in runs[i % len(runs) :] + runs[: i % len(runs)]:
            kernels, keep = VARIANTS[v]
            out = subprocess.run([sys.executable, __file__, "--art", art, "--child", art, kernels, "1" if keep else "0", *(["--parts"] if a.parts else [])],
                                 capture_output=True, text=True, check=True)  # fmt: skip
            r = json.loads(out.stdout)
            got[art, v].append(r["ms"])
            for label, ms in r["parts"].items():
                parts[art, v].setdefault(label, []).append(ms)
    print(f"Machine: {machine()}  \nDate: {time.strftime('%Y-%m-%d %H:%M')}  \nCommand: `python bench/encoder_first_pass.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
    print(f"First forward pass of {QUERY!r} in a fresh process, {a.rounds} interleaved rounds, milliseconds:\n")
    print("| artifact | kernels | median | min |\n|---|---|---:|---:|")
    for (art, v), ms in got.items():
        print(f"| {Path(art).name} | {v} | {statistics.median(ms):.1f} | {min(ms):.1f} |")
    if a.parts:
        print("\nInside the pass, medians in milliseconds:\n")
        print("| step | " + " | ".join(f"{Path(art).name}, {v}" for art, v in runs) + " |\n|---|" + "---:|" * len(runs))
        for _, _, label in PARTS:
            print(f"| {label.strip()} | " + " | ".join(f"{statistics.median(parts[r].get(label, [0.0])):.1f}" for r in runs) + " |")
    if a.out:
        a.out.write_text(json.dumps({"machine": machine(), "query": QUERY, "runs": [{"artifact": art, "kernels": v, "ms": ms, "parts": parts[art, v]} for (art, v), ms in got.items()]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
