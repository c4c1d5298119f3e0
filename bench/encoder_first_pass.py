"""The query encoder's first forward pass in a fresh process, the way a one-shot `kb search`
pays it: its packs kept (``keep_packed=True``, what warm processes do) against let go after use
(``False``, what kb search does), each in its own process, interleaved round by round so that
the machine's drift hits both alike.

    python bench/encoder_first_pass.py --art bench/out/hugo.kb --art bench/out/hugo-e5.kb [--rounds 15]

For each artifact and variant: a child process opens the artifact, builds the encoder from its
model.query section (common/query_encoder.py), tokenizes "how to configure taxonomies" and
times ``forward`` once. Prints the median and minimum milliseconds of each (markdown), and
with ``--out FILE`` writes every run's milliseconds as JSON. ``--parts`` also times, inside that
pass, the encoder's steps (numkong's packs and packed products, the inputs' quantization, layer
norms, GELU; the rest is attention, embedding rows and Python) and prints their medians.
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


# The steps --parts times inside the pass: (module attribute, label). dense_int8 holds the
# quantization and the packed products; _packs is numkong's pack of a layer's weight.
PARTS = (("dense_int8", "dense layers (quantize, packed products, rescale)"), ("quantize_rows", "  of which: quantize the inputs"),
         ("dots_packed", "  of which: numkong packed int8 products"), ("_packs", "numkong packs of the weights"),
         ("layer_norm", "layer norms"), ("gelu", "GELU"))  # fmt: skip


def child(art: str, keep: bool, parts: bool = False) -> dict:
    import numkong

    from kb.common import query_encoder as qe
    from kb.runtime.index import Index

    spent: dict[str, float] = {}
    if parts:
        owners = {"dots_packed": numkong, "_packs": qe.QueryEncoder}
        for name, label in PARTS:
            owner = owners.get(name, qe)
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
        enc = qe.QueryEncoder(space.query_model, space.card or {}, keep_packed=keep)
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
    ap.add_argument("--child", nargs=2, metavar=("ART", "KEEP"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1] == "1", a.parts)))
        return
    runs = [(art, v) for art in a.art for v in VARIANTS]
    got: dict = {r: [] for r in runs}
    parts: dict = {r: {} for r in runs}
    for i in range(a.rounds):
        for art, v in runs[i % len(runs) :] + runs[: i % len(runs)]:
            out = subprocess.run([sys.executable, __file__, "--art", art, "--child", art, "1" if VARIANTS[v] else "0", *(["--parts"] if a.parts else [])],
                                 capture_output=True, text=True, check=True)  # fmt: skip
            r = json.loads(out.stdout)
            got[art, v].append(r["ms"])
            for label, ms in r["parts"].items():
                parts[art, v].setdefault(label, []).append(ms)
    print(f"Machine: {machine()}  \nDate: {time.strftime('%Y-%m-%d %H:%M')}  \nCommand: `python bench/encoder_first_pass.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
    print(f"First forward pass of {QUERY!r} in a fresh process, {a.rounds} interleaved rounds, milliseconds:\n")
    print("| artifact | packs | median | min |\n|---|---|---:|---:|")
    for (art, v), ms in got.items():
        print(f"| {Path(art).name} | {v} | {statistics.median(ms):.1f} | {min(ms):.1f} |")
    if a.parts:
        print("\nInside the pass, medians in milliseconds:\n")
        print("| step | " + " | ".join(f"{Path(art).name}, {v}" for art, v in runs) + " |\n|---|" + "---:|" * len(runs))
        for _, label in PARTS:
            print(f"| {label.strip()} | " + " | ".join(f"{statistics.median(parts[r].get(label, [0.0])):.1f}" for r in runs) + " |")
    if a.out:
        a.out.write_text(json.dumps({"machine": machine(), "query": QUERY, "runs": [{"artifact": art, "packs": v, "ms": ms, "parts": parts[art, v]} for (art, v), ms in got.items()]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
