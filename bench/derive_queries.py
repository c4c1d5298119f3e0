"""A BEIR set whose queries are one sentence of each original query, for studies of query style on
the same corpus and judgments: ``last`` (LISA's and CISI's requests end in a keyword list, so the
last sentence is a keyword query) or ``first`` (the opening request, a natural sentence); or
``--keywords``: each query's words less kb's English stopwords, punctuation dropped (the same
content words as the original, so kb's length rule gives both the same dense share); or short
keyword queries of the words the corpus has: ``--first-words N``, its first N such words, or
``--rarest-words N``, the N in the fewest documents (which favours BM25 by construction), each in
query order.

    python bench/derive_queries.py ../shared/data/lisa OUT/lisa-kw --sentence last
    python bench/derive_queries.py ../shared/data/cranfield OUT/cranfield-kw --keywords
    python bench/derive_queries.py ../shared/data/scifact OUT/scifact-3 --rarest-words 3

The corpus and qrels are linked, not copied; the new folder is for evaluation only and stays
outside the repository, like the data it comes from.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    ap.add_argument("out", type=Path)
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--sentence", choices=("first", "last"))
    how.add_argument("--keywords", action="store_true", help="the query's words less English stopwords")
    how.add_argument("--first-words", type=int, metavar="N", help="its first N words that the corpus has and are no English stopword")
    how.add_argument("--rarest-words", type=int, metavar="N", help="its N words (the corpus has them, no English stopword) in the fewest documents")
    a = ap.parse_args(argv)
    from kb.formats.stopwords import STOPWORDS

    stop = set(STOPWORDS["en"])
    a.out.mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "qrels"):
        link = a.out / name
        if not link.exists():
            link.symlink_to((a.source / name).resolve())
    df = document_frequency(a.source / "corpus.jsonl") if a.first_words or a.rarest_words else None
    lines = []
    for line in (a.source / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        sentences = [s for s in re.split(r"(?<=[.?!])\s+", q["text"].strip()) if s.strip()] or [""]
        words = [w for w in re.findall(r"\w+", q["text"]) if w.lower() not in stop]
        if a.keywords:
            q["text"] = " ".join(words)
        elif a.first_words or a.rarest_words:
            known = [w for w in dict.fromkeys(w.lower() for w in words if not w.isdigit()) if df[w]]
            keep = set(sorted(known, key=lambda w: df[w])[: a.rarest_words] if a.rarest_words else known[: a.first_words])
            q["text"] = " ".join(w for w in known if w in keep)
        else:
            q["text"] = sentences[0 if a.sentence == "first" else -1]
        lines.append(json.dumps(q, ensure_ascii=False))
    (a.out / "queries.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} queries -> {a.out}", file=sys.stderr)
    return 0


def document_frequency(corpus: Path) -> Counter:
    """Lower-cased word -> the number of documents (title and text) that have it."""
    df: Counter = Counter()
    with corpus.open(encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            df.update(set(re.findall(r"\w+", f"{d.get('title', '')} {d.get('text', '')}".lower())))
    return df


if __name__ == "__main__":
    sys.exit(main())
