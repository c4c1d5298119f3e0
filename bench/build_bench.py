"""Build benchmark: kb-build stage seconds and section bytes on real corpora, and bm25s's indexing
time on the same SciFact corpus in the same run.

    python bench/build_bench.py --hugo ../shared/data/hugo-docs/content/en \
        --scifact ../shared/data/scifact/corpus.jsonl --out bench/out [--repeat 3]

Writes OUT/build_bench.json and prints a markdown report (machine, date, command, tables).
Non-embedding stages = read + chunk + analyze + postings of a real build() (chunk and analyze
run in forked workers, one per core, as kb-build does; their seconds are the wall time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402

NON_EMBEDDING = ("read", "chunk", "analyze", "postings")


def kb_build(label: str, out: Path, roots=(), jsonl=()):
    from kb.builder.build import build
    from kb.builder.config import BuildConfig

    t = time.perf_counter()
    rep = build([Path(r) for r in roots], out, BuildConfig(), jsonl=[Path(j) for j in jsonl])
    wall = time.perf_counter() - t
    d = asdict(rep)
    d["wall_seconds"] = wall
    d["skipped"] = len(rep.skipped)
    d["label"] = label
    return d


def bm25s_index(jsonl: Path) -> dict:
    import bm25s

    t0 = time.perf_counter()
    docs = [json.loads(x) for x in jsonl.read_text(encoding="utf-8").splitlines() if x.strip()]
    texts = [(d.get("title", "") + " " + d["text"]).strip() for d in docs]
    t1 = time.perf_counter()
    tokens = bm25s.tokenize(texts, stopwords=None, show_progress=False)
    t2 = time.perf_counter()
    model = bm25s.BM25(method="lucene")
    model.index(tokens, show_progress=False)
    t3 = time.perf_counter()
    return {"read": t1 - t0, "tokenize": t2 - t1, "index": t3 - t2, "total": t3 - t0, "docs": len(docs)}


def kb_non_embedding(jsonl: Path, out: Path) -> dict:
    """kb-build's own read -> chunk -> analyze -> postings on SciFact: a real build() with no
    embedder and no reranker, timed by its stage clock (the tags, text and write stages that
    follow are not counted)."""
    from dataclasses import replace

    from kb.builder.build import build
    from kb.builder.config import BuildConfig

    rep = build([], out, replace(BuildConfig(), embedding_model="none", reranker="none"), jsonl=[jsonl])
    d = {s: rep.seconds[s] for s in NON_EMBEDDING}
    return d | {"total": sum(d.values()), "chunks": rep.chunks, "terms": rep.terms}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hugo", type=Path, required=True)
    ap.add_argument("--scifact", type=Path, required=True, help="corpus.jsonl")
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--repeat", type=int, default=3, help="runs of the indexing-speed comparison (median reported)")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    res = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "command": " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])}
    res["hugo"] = kb_build("hugo", a.out / "hugo.kb", roots=[a.hugo])
    res["scifact"] = kb_build("scifact", a.out / "scifact.kb", jsonl=[a.scifact])
    kb_runs = [kb_non_embedding(a.scifact, a.out / "scifact-bm25.kb") for _ in range(a.repeat)]
    ref_runs = [bm25s_index(a.scifact) for _ in range(a.repeat)]
    res["indexing"] = {
        "kb_runs": kb_runs,
        "bm25s_runs": ref_runs,
        "kb_median": statistics.median(r["total"] for r in kb_runs),
        "bm25s_median": statistics.median(r["total"] for r in ref_runs),
    }
    (a.out / "build_bench.json").write_text(json.dumps(res, indent=2))
    update_region(a.results, "build", report(res))
    print(report(res))


def report(res: dict) -> str:
    lines = [f"Machine: {res['machine']}  ", f"Date: {res['date']}  ", f"Command: `{res['command']}`", ""]
    lines.append("| corpus | files/docs | chunks | terms | vectors | artifact | " + " | ".join(res["hugo"]["seconds"]) + " | wall |")
    lines.append("|---" * (7 + len(res["hugo"]["seconds"])) + "|")
    for key in ("hugo", "scifact"):
        r = res[key]
        secs = " | ".join(f"{r['seconds'].get(s, 0):.2f}" for s in res["hugo"]["seconds"])
        lines.append(f"| {key} | {r['documents']} | {r['chunks']} | {r['terms']} | {r['vectors']} | {r['artifact_bytes'] / 2**20:.1f} MiB | {secs} | {r['wall_seconds']:.1f} |")
    lines.append("")
    lines.append("Bytes per section:")
    lines.append("")
    names = list(res["hugo"]["section_bytes"])
    lines.append("| section | " + " | ".join(("hugo", "scifact")) + " |")
    lines.append("|---|---|---|")
    for n in names:
        lines.append(f"| {n} | {res['hugo']['section_bytes'].get(n, 0):,} | {res['scifact']['section_bytes'].get(n, 0):,} |")
    ix = res["indexing"]
    k = ix["kb_runs"][0]
    b = ix["bm25s_runs"][0]
    lines += [
        "",
        f"Indexing speed on SciFact ({b['docs']} docs), median of {len(ix['kb_runs'])} runs in the same process:",
        "",
        "| | seconds | detail (first run) |",
        "|---|---|---|",
        f"| kb read+chunk+analyze+postings | {ix['kb_median']:.2f} | read {k['read']:.2f}, chunk {k['chunk']:.2f}, analyze {k['analyze']:.2f}, postings {k['postings']:.2f} ({k['chunks']} chunks, {k['terms']} terms) |",
        f"| bm25s read+tokenize+index | {ix['bm25s_median']:.2f} | read {b['read']:.2f}, tokenize {b['tokenize']:.2f}, index {b['index']:.2f} |",
        f"| ratio bm25s / kb | {ix['bm25s_median'] / ix['kb_median']:.2f} | above 1 means kb is faster |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
