"""kb-build --executor ray against the local build: same sha256, and chunks embedded per second
per CPU worker.

    python bench/ray_build.py --ray-address 127.0.0.1:26379 --workers 2 \\
        --sample examples/kb-sample --scifact ../shared/data/scifact/corpus.jsonl --out bench/out

The cluster is started beforehand (its commands go into the region), with ``--workers`` CPUs
in all, one embedding actor per CPU. For each corpus: the local build (``kb-build``, default
executor: forked chunk/analyze, one embedder with one thread per core) and the Ray build
(``--executor ray --ray-address``), both through the CLI with ``--json``, default model
(all-MiniLM-L6-v2 int8 on CPU) and reranker; then both files' sha256. Throughput is the
build's chunks over its embed stage's seconds; per worker, divided by the workers (the local
build's single embedder uses every core, so it counts as one worker per core).

Writes the "ray" region of bench/notes/2026-11-30-ray-build.md and OUT/ray_build.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402

from kb.models.convert import sha256_file  # noqa: E402

KB_BUILD = str(Path(sys.executable).with_name("kb-build"))


def run_build(inputs: list[str], out: Path, extra: list[str]) -> dict:
    t = time.perf_counter()
    done = subprocess.run([KB_BUILD, *inputs, "-o", str(out), "--json", "-q", *extra], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"kb-build {' '.join(extra)} failed:\n{done.stderr[-3000:]}")
    rep = json.loads(done.stdout)
    return {"wall": wall, "chunks": rep["chunks"], "embed": rep["seconds"]["embed"], "nodes": rep["embed_nodes"], "sha256": sha256_file(out), "load": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ray-address", required=True)
    ap.add_argument("--workers", type=int, required=True, help="CPUs of the Ray cluster (one embedding actor each)")
    ap.add_argument("--sample", type=Path, required=True)
    ap.add_argument("--scifact", type=Path, required=True, help="SciFact corpus.jsonl")
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--cluster", default="", help="how the cluster was started (goes into the region)")
    ap.add_argument("--fresh", action="store_true", help="forget the runs kept in OUT/ray_build.json (default: this run is added to them)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    kept = a.out / "ray_build.json"
    runs = [] if a.fresh or not kept.exists() else json.loads(kept.read_text())
    corpora = {"sample": [str(a.sample)], "scifact": ["--jsonl", str(a.scifact)]}
    run = {"machine": machine(), "cluster": a.cluster, "cores": os.cpu_count() or 1, "workers": a.workers, "corpora": {}}
    for name, inputs in corpora.items():
        local = run_build(inputs, a.out / f"{name}-local.kb", [])
        ray = run_build(inputs, a.out / f"{name}-ray.kb", ["--executor", "ray", "--ray-address", a.ray_address])
        run["corpora"][name] = {"local": local, "ray": ray}
        print(name, json.dumps(run["corpora"][name]), flush=True)
    runs.append(run)
    kept.write_text(json.dumps(runs, indent=2))
    command = f"python bench/ray_build.py --ray-address {a.ray_address} --workers {a.workers} --sample {a.sample} --scifact {a.scifact} --out {a.out}"
    update_region(Path(__file__).resolve().parent / "notes" / "2026-11-30-ray-build.md", "ray", region(runs, command))


def region(runs: list[dict], command: str) -> str:
    lines = [
        "## kb-build --executor ray (issue 19)",
        "",
        "Date: 2026-11-30  ",
        f"Command: `{command}` (each run adds a table; `--fresh` starts over)",
        "",
        "Both builds through the CLI with the default model (all-MiniLM-L6-v2, int8 CTranslate2 on CPU) and reranker. "
        "chunks/s = chunks / the embed stage's seconds; the local build's one embedder uses a thread per core, so it counts "
        "as one worker per core; the Ray build has one actor per CPU of the cluster, one thread each. The machine is shared "
        "with 3 other sessions' work: the load averages (theirs and ours) move the rates by 2x between runs. The sample's "
        "132 chunks are too few for a rate: its Ray embed time is mostly the two actors starting and loading the model.",
    ]
    for k, run in enumerate(runs, 1):
        lines += ["", f"Run {k}. Machine: {run['machine']}  ", f"Cluster: {run['cluster']}", ""]
        lines += [
            "| corpus | build | chunks | embed s | chunks/s | workers | chunks/s per CPU worker | embed nodes | wall s | load avg (1 min) after | sha256 |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, r in run["corpora"].items():
            for kind, workers in (("local", run["cores"]), ("ray", run["workers"])):
                x = r[kind]
                rate = x["chunks"] / x["embed"]
                lines.append(
                    f"| {name} | {kind} | {x['chunks']} | {x['embed']:.1f} | {rate:.1f} | {workers} | {rate / workers:.1f} | {x['nodes']} | {x['wall']:.1f} | {x['load'][0]:.2f} | `{x['sha256'][:16]}` |"
                )
            same = r["local"]["sha256"] == r["ray"]["sha256"]
            lines.append(f"| {name} | same sha256 | | | | | | | | | **{'yes' if same else 'NO'}** |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
