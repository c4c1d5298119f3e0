"""Snippets with the artifact's terms.surfaces against snippets that analyze every line: the
same text, and the time per snippet, over the results of real queries.

    python bench/snippet_speed.py --art bench/out/hugo-bm25.kb --fixture ../shared/fixtures/hugo-docs.json [--random 300] [--repeat 10]

The queries are the fixture's, plus ``--random`` queries of three terms drawn from the
artifact's vocabulary (seed 0). Each query's top 10 (BM25) chunks are collected first; then
every snippet is made both ways (runtime/snippets.py: ``words=surface_hits(...)``, and without),
their texts compared, and each way timed over all of them, ``--repeat`` passes each, alternating (in process, warm:
the analyzer's memo holds the chunks' words after the first pass). Prints the count of
snippets, how many differ (0 is the claim) and the microseconds per snippet, for all, ASCII and
non-ASCII chunks (markdown); ``--out FILE`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine  # noqa: E402


def main(argv=None):
    from kb.runtime.bench import load_fixture
    from kb.runtime.bm25 import analyzer_of, query_terms, top_bm25
    from kb.runtime.index import Index
    from kb.runtime.snippets import snippet, surface_hits

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--art", type=Path, required=True, help="an artifact kb-build wrote with terms.surfaces")
    ap.add_argument("--fixture", type=Path, required=True)
    ap.add_argument("--random", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", type=Path, help="write the figures here as JSON")
    a = ap.parse_args(argv)
    with Index(a.art) as ix:
        an = analyzer_of(ix)
        texts = [q.text for q in load_fixture(a.fixture).queries if q.text.strip()]
        vocab = [bytes(ix.term_strings[i]).decode() for i in range(ix.n_terms)]
        rng = random.Random(0)
        texts += [" ".join(rng.sample([t for t in vocab if not t.startswith("~")], 3)) for _ in range(a.random)]
        calls = []
        for t in texts:
            terms = query_terms(ix, t)
            words = surface_hits(ix, terms)
            if words is None:
                raise SystemExit(f"{a.art}: no terms.surfaces for {t!r}; rebuild it with this kb-build")
            calls += [(ix.chunk(int(c)).text, terms, words) for c in top_bm25(ix, terms, 10)[0]]
        calls = [c for c in calls if "\n" in c[0]]  # a one-line chunk is its own snippet either way
        differ = sum(snippet(x, t, an) != snippet(x, t, an, words=w) for x, t, w in calls)

        def per_snippet(group) -> tuple[float, float]:
            """Microseconds per snippet (analyzing, with words): passes over the group
            alternate between the two ways, which one goes first changing every repeat."""
            spent = [0.0, 0.0]
            for r in range(a.repeat):
                for use_words in ((False, True) if r % 2 == 0 else (True, False)):
                    start = time.perf_counter()
                    for x, t, w in group:
                        snippet(x, t, an, words=w if use_words else None)
                    spent[use_words] += time.perf_counter() - start
            return tuple(1e6 * s / a.repeat / max(len(group), 1) for s in spent)

        print(f"Machine: {machine()}  \nDate: {time.strftime('%Y-%m-%d %H:%M')}  \nCommand: `python bench/snippet_speed.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
        print(f"{len(texts)} queries, {len(calls)} multi-line snippets, {differ} differ.\n")
        print("| chunks | snippets | analyzing the lines, us | with terms.surfaces, us |\n|---|---:|---:|---:|")
        rows = []
        for name, group in (("all", calls), ("ASCII", [c for c in calls if c[0].isascii()]), ("non-ASCII", [c for c in calls if not c[0].isascii()])):
            old, new = per_snippet(group)
            rows.append({"chunks": name, "snippets": len(group), "analyzing_us": old, "surfaces_us": new})
            print(f"| {name} | {len(group)} | {old:.1f} | {new:.1f} |")
        if a.out:
            a.out.write_text(json.dumps({"machine": machine(), "queries": len(texts), "snippets": len(calls), "differ": differ, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
