"""Does putting phrase quotes around a multi-word keyword query ever lower hit@10? (issue 21)

    kb-build ../shared/data/hugo-docs/content/en -o bench/out/hugo.kb --no-reranker
    python bench/phrase_quotes.py bench/out/hugo.kb ../shared/fixtures/hugo-docs.json [--kind keyword] [--results NOTE.md]

For every fixture query of the kind (default keyword) with two or more words, the query is
searched twice, each with the search pipeline `kb search` runs (top 10, results grouped by
document, every status, the artifact's [search] options): as plain words (``literal``, as `kb
bench` takes fixture queries) and as one phrase, its words wrapped in double quotes (quotes the
query already holds are dropped first, so the phrase is the words in order). A quoted phrase is
required: only chunks holding those words in that order are ranked, by the same words; when no
chunk holds it, kb says so (notice phrase_not_found) and ranks the words in any order. hit@10
(a relevant page among the first 10 documents, runtime/bench.py hit_at) is compared per query
and mode (bm25, and hybrid when the artifact has vectors). A third column asks what hit@10 would
be if a phrase ordered instead of filtering: the documents the quoted query finds (up to
DEPTH), then the plain query's other documents, in their order. Writes the "phrase-quotes"
region of bench/notes/2026-11-30-phrase-quotes.md and prints it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_md import machine, update_region  # noqa: E402

TOP = 10
DEPTH = 100  # documents of each search the phrase-first ordering draws from


def quoted(text: str) -> str:
    """The query as one phrase: its words, inner quotes dropped, in double quotes."""
    return '"' + " ".join(text.replace('"', " ").split()) + '"'


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifact", type=Path)
    ap.add_argument("fixture", type=Path)
    ap.add_argument("--kind", default="keyword", help="fixture query kind to take (default keyword)")
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "notes" / "2026-11-30-phrase-quotes.md")
    a = ap.parse_args(argv)
    from kb.runtime.bench import hit_at, load_fixture
    from kb.runtime.index import Index
    from kb.runtime.search import Query, Searcher

    queries = [q for q in load_fixture(a.fixture).queries if q.kind == a.kind and len(q.text.replace('"', " ").split()) >= 2]
    with Index(a.artifact) as ix:
        secs = ix.artifact.sections
        embedder = (ix.meta.embedder or {}).get("name", "none")
        sizes = f"{a.artifact.name} (embedder {embedder}): {ix.artifact.size:,} bytes, {ix.n_docs:,} documents, {ix.n_chunks:,} chunks" + (
            f"; docs.source (each document's source text, for kb get PATH:FROM:COUNT) {secs['docs.source'].length:,} bytes"
            f" ({100 * secs['docs.source'].length / ix.artifact.size:.1f}%), text.blocks {secs['text.blocks'].length:,} bytes" if ix.has_sources else ""
        )
        searcher = Searcher(ix)
        modes = ["bm25", "hybrid"] if ix.has_vectors else ["bm25"]
        rows, lowered, raised, first_lowered, empty = [], 0, 0, 0, 0
        for q in queries:
            cells = []
            for mode in modes:
                ranked = []
                for text, literal in ((q.text, True), (quoted(q.text), False)):
                    resp = searcher.search(Query(text, top_k=DEPTH, group="doc", all_statuses=True, mode=mode, literal=literal), searcher.defaults)
                    ranked.append([r.path for r in resp.results])
                plain_docs, phrase_docs = ranked
                ordered = phrase_docs + [p for p in plain_docs if p not in set(phrase_docs)]
                plain, phrase, first = (hit_at(r, q.relevant, TOP) for r in (plain_docs, phrase_docs, ordered))
                lowered += phrase < plain
                empty += phrase < plain and not phrase_docs
                raised += phrase > plain
                first_lowered += first < plain
                n = len(phrase_docs)
                cells.append(f"{plain:.0f} → {phrase:.0f} ({n} doc{'' if n == 1 else 's'}); phrase first {first:.0f}")
            rows.append(f"| {q.id} | `{quoted(q.text)}` | " + " | ".join(cells) + " |")
    comparisons = len(queries) * len(modes)
    verdict = "never lowers hit@10" if not lowered else f"lowers hit@10 in {lowered} of {comparisons} query-mode pairs"
    what_if = "would never lower it" if not first_lowered else f"would lower it in {first_lowered}"
    lines = [
        f"Machine: {machine()}  ",
        f"Date: {time.strftime('%Y-%m-%d')}  ",
        f"Command: `python bench/phrase_quotes.py {' '.join(str(x) for x in (argv if argv is not None else sys.argv[1:]))}`",
        f"Artifact: {sizes}",
        "",
        f"{len(queries)} {a.kind} queries of {a.fixture.name} with two or more words, searched as plain words and as one quoted "
        f"phrase (grouped by document, every status, the artifact's [search] options). Cells: hit@10 plain → quoted, how many "
        f"documents the quoted query returned (of at most {DEPTH}), and hit@10 if the phrase ordered instead of filtering "
        f"(its documents first, then the plain query's).",
        "",
        "| query | as a phrase | " + " | ".join(f"{m} hit@10" for m in modes) + " |",
        "|---|---|" + "---|" * len(modes),
        *rows,
        "",
        f"Result: quoting {verdict} ({raised} raised, {comparisons - lowered - raised} unchanged)"
        + (f"; {empty} of the lowered found no document at all" if lowered else "")
        + ". Where no page holds a phrase in that order, kb says so (notice phrase_not_found) and "
        f"ranks the words in any order, which is what keeps hit@10. Phrase first {what_if}.",
    ]
    update_region(a.results, "phrase-quotes", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
