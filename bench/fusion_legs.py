"""Each query's legs, once, for fusion studies: the BM25 and dense legs (depth 100) as kb search
runs them (the query routed to its dense leg, the artifact's options), with every hit's document
key, written to one pickle per set as plain tuples (name, kind, weight, hits as (chunk, rank, score),
ceiling, known, words, stops), so a change to kb's classes does not make the stored legs unreadable.
bench/fusion_study.py fuses them offline.

    python bench/fusion_legs.py --set NAME=beir:FOLDER:SPLIT:ARTIFACT --set NAME=fixture:FIXTURE:ARTIFACT ... --out DIR
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fusion_gap import load  # noqa: E402

DEPTH = 100


def dump(spec: str, out: Path) -> Path:
    from kb.common.options import resolve, stored_search
    from kb.runtime.index import Index
    from kb.runtime.search import Query, Searcher

    name, bset, art = load(spec)
    rows = []
    with Index(art) as ix:
        s = Searcher(ix)
        base = resolve(stored_search(ix.meta))
        allowed = np.ones(ix.n_chunks, dtype=bool)
        for q in bset.queries:
            if not q.text.strip() or not q.relevant:
                continue
            space = s.space_for(q.text)
            o = s.options_for(base, space)
            legs, _ = s._run_legs(Query(q.text, top_k=DEPTH, mode="hybrid", literal=True), None, o, space, allowed, DEPTH, True, True, [], {})
            key = {}
            for leg in legs:
                for h in leg.hits:
                    if h.chunk not in key:
                        key[h.chunk] = ix.doc_path(ix.doc_of(h.chunk)) if bset.key == "path" else ix.chunk(h.chunk).doc_id
            rows.append({"id": q.id, "text": q.text, "relevant": q.relevant, "space": space.name, "legs": [(lg.name, lg.kind, lg.weight, [tuple(h) for h in lg.hits], lg.ceiling, lg.known, lg.words, lg.stops) for lg in legs], "key": key, "fixed_weight": o.semantic_weight, "rrf_k": o.rrf_k})
    path = out / f"{name}.legs.pkl"
    path.write_bytes(pickle.dumps({"set": name, "rows": rows}))
    print(f"{name}: {len(rows)} queries -> {path}", file=sys.stderr)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", required=True, metavar="SPEC")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    for spec in a.set:
        dump(spec, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
