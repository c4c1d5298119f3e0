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

NON_EMBEDDING = ("read", "language", "chunk", "analyze", "postings")


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


def bm25s_index(jsonl: Path, stem: bool = False) -> dict:
    """bm25s read + tokenize + index; ``stem``: with PyStemmer's English stemmer and bm25s's
    English stopwords (the configuration kb's BM25 is compared with in bench/notes/2026-12-01-lexical-bm25.md)."""
    import bm25s

    t0 = time.perf_counter()
    docs = [json.loads(x) for x in jsonl.read_text(encoding="utf-8").splitlines() if x.strip()]
    texts = [(d.get("title", "") + " " + d["text"]).strip() for d in docs]
    t1 = time.perf_counter()
    if stem:
        import Stemmer

        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english").stemWords, show_progress=False)
    else:
        tokens = bm25s.tokenize(texts, stopwords=None, show_progress=False)
    t2 = time.perf_counter()
    model = bm25s.BM25(method="lucene")
    model.index(tokens, show_progress=False)
    t3 = time.perf_counter()
    return {"read": t1 - t0, "tokenize": t2 - t1, "index": t3 - t2, "total": t3 - t0, "docs": len(docs)}


def kb_non_embedding(jsonl: Path, out: Path, jobs: int | None = None) -> dict:
    """kb-build's own read -> chunk -> analyze -> postings on SciFact: a real build() with no
    embedder and no reranker, timed by its stage clock (the tags, text and write stages that
    follow are not counted)."""
    from dataclasses import replace

    from kb.builder.build import build
    from kb.builder.config import BuildConfig

    rep = build([], out, replace(BuildConfig(), embedding_model="none", reranker="none"), jsonl=[jsonl], jobs=jobs)
    d = {s: rep.seconds[s] for s in NON_EMBEDDING}
    return d | {"total": sum(d.values()), "chunks": rep.chunks, "terms": rep.terms}


def _medians(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], float)} | {
        k: runs[0][k] for k in ("chunks", "terms", "docs") if k in runs[0]
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hugo", type=Path, required=True)
    ap.add_argument("--scifact", type=Path, required=True, help="corpus.jsonl")
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--repeat", type=int, default=3, help="runs of the indexing-speed comparison (median reported)")
    ap.add_argument("--indexing-only", action="store_true", help="only the SciFact indexing-speed comparison (no full builds); prints it, leaves RESULTS.md alone")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    res = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "command": " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])}
    if not a.indexing_only:
        res["hugo"] = kb_build("hugo", a.out / "hugo.kb", roots=[a.hugo])
        res["scifact"] = kb_build("scifact", a.out / "scifact.kb", jsonl=[a.scifact])
    # Interleaved, so that the machine's slow moments fall on all three alike.
    runs = {"kb": [], "kb_1job": [], "bm25s": [], "bm25s_stem": []}
    for _ in range(a.repeat):
        runs["kb"].append(kb_non_embedding(a.scifact, a.out / "scifact-bm25.kb"))
        runs["kb_1job"].append(kb_non_embedding(a.scifact, a.out / "scifact-bm25.kb", jobs=1))
        runs["bm25s"].append(bm25s_index(a.scifact))
        runs["bm25s_stem"].append(bm25s_index(a.scifact, stem=True))
    from kb.builder.shards import default_jobs

    res["indexing"] = {"jobs": default_jobs(), "runs": runs, "median": {k: _medians(v) for k, v in runs.items()}}
    (a.out / "build_bench.json").write_text(json.dumps(res, indent=2))
    if a.indexing_only:
        print(report(res, full=False))
        return
    update_region(a.results, "build", report(res))
    print(report(res))


def report(res: dict, full: bool = True) -> str:
    lines = [f"Machine: {res['machine']}  ", f"Date: {res['date']}  ", f"Command: `{res['command']}`", ""]
    if full:
        lines += _build_tables(res)
    return "\n".join(lines + _indexing_table(res))


def _build_tables(res: dict) -> list[str]:
    lines = []
    lines.append("| corpus | files/docs | chunks | terms | vectors | artifact | " + " | ".join(res["hugo"]["seconds"]) + " | wall |")
    lines.append("|---" * (7 + len(res["hugo"]["seconds"])) + "|")
    for key in ("hugo", "scifact"):
        r = res[key]
        secs = " | ".join(f"{r['seconds'].get(s, 0):.2f}" for s in res["hugo"]["seconds"])
        lines.append(f"| {key} | {r['documents']} | {r['chunks']} | {r['terms']} | {r['vectors']} | {r['artifact_bytes'] / 2**20:.1f} MiB | {secs} | {r['wall_seconds']:.1f} |")
    lines.append("")
    names = list(res["hugo"]["section_bytes"])
    sizes = ", ".join(f"{n} {res['hugo']['section_bytes'].get(n, 0):,} / {res['scifact']['section_bytes'].get(n, 0):,}" for n in names)
    lines.append(f"Bytes per section, hugo / scifact: {sizes}.")
    return lines


def _indexing_table(res: dict) -> list[str]:
    lines = []
    ix = res["indexing"]
    k, k1, b = (ix["median"][x] for x in ("kb", "kb_1job", "bm25s"))
    bst = ix["median"].get("bm25s_stem")
    n = len(ix["runs"]["kb"])

    def kb_row(label, m):
        return (
            f"| {label} | {m['total']:.3f} | {b['total'] / m['total']:.2f} | read {m['read']:.3f}, language {m.get('language', 0):.3f}, chunk {m['chunk']:.3f}, "
            f"analyze {m['analyze']:.3f}, postings {m['postings']:.3f} ({m['chunks']} chunks, {m['terms']} terms) |"
        )

    lines += [
        "",
        f"Indexing speed on SciFact ({b['docs']} docs), medians of {n} interleaved runs in one process (kb: a real",
        "build() with no embedder and no reranker, its stage clock; chunk and analyze run in forked workers):",
        "",
        "| | seconds | bm25s / kb (above 1: kb faster) | stages |",
        "|---|---|---|---|",
        kb_row(f"kb, {ix['jobs']} jobs (the default here: one per core)", k),
        kb_row("kb, 1 job (`-j 1`)", k1),
        f"| bm25s read+tokenize+index | {b['total']:.3f} | 1.00 | read {b['read']:.3f}, tokenize {b['tokenize']:.3f}, index {b['index']:.3f} |",
    ]
    if bst:
        lines.append(
            f"| bm25s + English stemmer + stopwords | {bst['total']:.3f} | {b['total'] / bst['total']:.2f} | read {bst['read']:.3f}, tokenize {bst['tokenize']:.3f}, index {bst['index']:.3f} |"
        )
    lines += ["", f"Per round (the {n} rounds ran kb and bm25s one after the other), bm25s's time / kb's ({ix['jobs']} jobs); above 1: kb faster:", ""]
    lines += ["| against | median | min | max |", "|---|---|---|---|"]
    for key, label in (("bm25s", "bm25s"), ("bm25s_stem", "bm25s + English stemmer + stopwords")):
        if ix["runs"].get(key):
            r = paired(ix["runs"][key], ix["runs"]["kb"])
            lines.append(f"| {label} | {statistics.median(r):.2f} | {min(r):.2f} | {max(r):.2f} |")
    return lines


def paired(theirs: list[dict], ours: list[dict]) -> list[float]:
    """Each round's ratio of total times, theirs / ours."""
    return [t["total"] / o["total"] for t, o in zip(theirs, ours)]


if __name__ == "__main__":
    main()
