"""One artifact for a corpus in several languages against one artifact per language (issue 17).

    kb-build ../shared/data/hugo-docs/content/en --jsonl ../shared/data/cmrc2018-zh/corpus.jsonl \
        --jsonl ../shared/data/jsquad-ja/corpus.jsonl -o MIXED.kb
    python bench/mixed_corpus.py --mixed MIXED.kb \
        --set hugo=fixture:../shared/fixtures/hugo-docs.json:HUGO.kb:hugo-docs/content/en/ \
        --set cmrc2018-zh=beir:../shared/data/cmrc2018-zh:dev:CMRC.kb \
        --set jsquad-ja=beir:../shared/data/jsquad-ja:dev:JSQUAD.kb [--limit N]

Each set is measured by kb bench's own code (documents, each artifact's own [search] defaults) on
the mixed artifact and on its single-language one. A fixture's paths are relative to its corpus
folder; in an artifact built from several inputs they start with the folder's path relative to the
inputs' common root, given as the fixture's fourth field. Prints a markdown table; nothing is
written.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

BACKENDS = ["bm25", "vector", "hybrid"]


def load(spec: str):
    from kb.runtime.bench import load_beir, load_fixture

    name, rest = spec.split("=", 1)
    kind, rest = rest.split(":", 1)
    if kind == "fixture":
        fixture, art, prefix = rest.split(":", 2)
        return name, load_fixture(Path(fixture)), Path(art), prefix
    folder, split, art = rest.split(":", 2)
    return name, load_beir(Path(folder), split), Path(art), ""


def bench(art: Path, bset, limit: int) -> dict:
    from kb.runtime.bench import run_bench
    from kb.runtime.index import Index
    from kb.runtime.search import Searcher

    if limit:
        bset = replace(bset, queries=bset.queries[:limit])
    with Index(art) as ix:
        res = run_bench(Searcher(ix), bset, backends=BACKENDS)
        model = (ix.meta.embedder or {}).get("name")
        if ix.meta.embedder_en is not None:  # format 5: queries in alphabetic scripts go to the English leg
            model += f" + English leg {ix.meta.embedder_en.get('name')}"
    return {"model": model, **{b: v["ndcg@10"] for b, v in res["backends"].items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mixed", type=Path, required=True)
    ap.add_argument("--set", action="append", required=True, help="NAME=fixture:FIXTURE:ARTIFACT:PREFIX or NAME=beir:FOLDER:SPLIT:ARTIFACT")
    ap.add_argument("--limit", type=int, default=0, help="only each set's first N queries")
    a = ap.parse_args(argv)
    rows = []
    for spec in a.set:
        name, bset, single, prefix = load(spec)
        alone = bench(single, bset, a.limit)
        moved = replace(bset, queries=[replace(q, relevant={prefix + k: g for k, g in q.relevant.items()}) for q in bset.queries])
        mixed = bench(a.mixed, moved, a.limit)
        rows.append((name, len(bset.queries[: a.limit or None]), alone, mixed))
        print(name, json.dumps({"single": alone, "mixed": mixed}), file=sys.stderr, flush=True)
    print("| set | queries | backend | single-language artifact | mixed artifact | change |")
    print("|---|---|---|---|---|---|")
    for name, n, alone, mixed in rows:
        for b in BACKENDS:
            print(f"| {name} | {n} | {b} ({alone['model'] if b != 'bm25' else 'BM25'} / {mixed['model'] if b != 'bm25' else 'BM25'}) | {alone[b]:.4f} | {mixed[b]:.4f} | {mixed[b] - alone[b]:+.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
