"""Where each embedding model's cosines sit for unrelated text, so that adaptive fusion's "weak"
and "strong" dense-leg thresholds mean the same for every model.

    python bench/dense_noise.py --data ../shared/data [--passages 120 --queries 60] [--models all-MiniLM-L6-v2,multilingual-e5-small]

For each dev set, the first ``--queries`` queries and the first ``--passages`` corpus documents
(title + text, cut to 600 characters) are embedded by each model, with its query and passage
prefixes; every query-passage cosine is a background sample (a random passage of a set answers
a given query almost never). Per model: the background's mean and standard deviation, pooled
over the sets. runtime/fusion.py's thresholds for all-MiniLM-L6-v2 (0.2 and 0.4, measured on
the dev sets' hybrid quality) are then expressed as z-scores of MiniLM's background, and each
other model's thresholds are its background mean + the same z-scores x its standard deviation.
No relevance judgment is used. Prints a markdown table and the thresholds; writes the
"dense-noise" region of bench/notes/2026-11-30-e5-multilingual.md unless --no-results.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402

SETS = {"hugo": None, "scifact": "train", "cranfield": "test", "cisi": "test", "cmrc2018-zh": "dev", "jsquad-ja": "dev"}
REFERENCE = "all-MiniLM-L6-v2"
REFERENCE_THRESHOLDS = (0.2, 0.4)  # runtime/fusion.py COS_WEAK, COS_STRONG for the reference model


def sample(data: Path, name: str, passages: int, queries: int) -> tuple[list[str], list[str]]:
    if name == "hugo":
        import peers as P

        docs = P.load_corpus_markdown(data / "hugo-docs" / "content" / "en")[:passages]
        texts = [P._content(d)[:600] for d in docs]
        from kb.runtime.bench import load_fixture

        return texts, [q.text for q in load_fixture(data.parent / "fixtures" / "hugo-docs.json").queries][:queries]
    rows = []
    with open(data / name / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                rows.append((d.get("title", "") + " " + d.get("text", "")).strip()[:600])
            if len(rows) >= passages:
                break
    qs = []
    with open(data / name / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                qs.append(json.loads(line)["text"])
            if len(qs) >= queries:
                break
    return rows, qs


def background(model, texts: list[str], queries: list[str]) -> np.ndarray:
    p = model.embed(texts)
    q = np.stack([model.embed_query(t) for t in queries])
    return (q @ p.T).ravel()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--models", default="all-MiniLM-L6-v2,multilingual-e5-small")
    ap.add_argument("--passages", type=int, default=120)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "notes" / "2026-11-30-e5-multilingual.md")
    ap.add_argument("--no-results", action="store_true")
    a = ap.parse_args(argv)
    from kb.builder.embedders import make_embedder

    samples = {s: sample(a.data, s, a.passages, a.queries) for s in a.sets.split(",")}
    stats = {}
    for name in a.models.split(","):
        model = make_embedder(name)
        per = {s: background(model, t, q) for s, (t, q) in samples.items()}
        pooled = np.concatenate(list(per.values()))
        stats[name] = {"mean": float(pooled.mean()), "std": float(pooled.std()), "sets": {s: (float(v.mean()), float(v.std()), float(np.percentile(v, 99))) for s, v in per.items()}}
    ref = stats[REFERENCE]
    z = [(t - ref["mean"]) / ref["std"] for t in REFERENCE_THRESHOLDS]
    lines = [f"Machine: {machine()}  ", f"Date: {time.strftime('%Y-%m-%d')}  ", f"Command: `python bench/dense_noise.py {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    lines += [f"Background cosines (every query x every passage of a set's sample: {a.queries} queries, {a.passages} passages), mean / std / p99:", ""]
    lines += ["| model | " + " | ".join(samples) + " | pooled mean / std | weak, strong |", "|---|" + "---|" * (len(samples) + 2)]
    out = {}
    for name, st in stats.items():
        weak, strong = (st["mean"] + zi * st["std"] for zi in z)
        out[name] = (round(weak, 3), round(strong, 3))
        cells = " | ".join(f"{m:.3f} / {s:.3f} / {p:.3f}" for m, s, p in st["sets"].values())
        lines.append(f"| {name} | {cells} | {st['mean']:.3f} / {st['std']:.3f} | {out[name][0]}, {out[name][1]} |")
    lines += ["", f"{REFERENCE}'s thresholds {REFERENCE_THRESHOLDS} are z = {z[0]:.2f} and {z[1]:.2f} of its pooled background; the other models' thresholds are the same z-scores of theirs."]
    print("\n".join(lines))
    print(json.dumps(out))
    if not a.no_results:
        update_region(a.results, "dense-noise", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
