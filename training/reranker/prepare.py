"""Training groups for kb's reranker: derived (query, passage) pairs + hard negatives mined by kb.

Every query here is derived from corpus *documents*; no benchmark query, qrels file or fixture
query is read for training (the Hugo fixture is opened only by the leakage check at the end,
which fails the run if a derived query equals a fixture query).

Sources (per corpus, sampled with a seeded RNG):
  * beir title   (scifact, cranfield, cisi): the document's title -> its first chunk. Cranfield
                 abstracts start with their title: for these queries it is cut from every passage.
  * beir ict     (same corpora, "inverse cloze task"): one 8-40-word sentence of a chunk -> that
                 chunk with the sentence removed (each negative loses one random sentence too).
  * hugo desc    front-matter description -> the page's first chunk of prose.
  * hugo section "<page title>: <heading>" -> the first chunk of that section (generic headings
                 such as "Usage" / "Example" are skipped).
Negatives: kb's own hybrid retrieval (BM25 + MiniLM dense, RRF, no rerank; the candidates the
reranker sees at query time), top 40 chunks for the query, chunks of the positive's document
removed; half from ranks 1-10 and the rest from ranks 11-40, preferring candidates whose length
is within 1.5x of the positive's (otherwise a small model learns "shorter = relevant" first).

Output: one JSON object per line {"src", "query", "pos", "negs": [...], "doc"}, in a fixed order.

    python prepare.py --art-dir ART --data /work/shared/data --out pairs.jsonl [--seed 13]
        [--groups hugo=1000,scifact=800,cranfield=500,cisi=500] [--negatives 4]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

GENERIC_HEADINGS = {
    "usage", "example", "examples", "syntax", "overview", "introduction", "notes", "note",
    "arguments", "options", "parameters", "returns", "methods", "see also", "reference",
    "references", "summary", "default", "defaults", "details", "more", "other", "general",
}
LEN_RATIO = 1.5  # negatives are preferably within 1/1.5 .. 1.5 x the positive's length
SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Za-z0-9(\"'])")


def norm_ws(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def sentences(text: str) -> list[str]:
    return [s.strip() for s in SENT_SPLIT.split(text) if s.strip()]


def load_corpus(path: Path) -> dict[str, dict]:
    docs = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            docs[str(d["_id"])] = {"title": d.get("title") or "", "text": d.get("text") or ""}
    return docs


def front_matter(md: Path) -> dict:
    import yaml

    txt = md.read_text(encoding="utf-8", errors="replace")
    if not txt.startswith("---"):
        return {}
    end = txt.find("\n---", 3)
    if end < 0:
        return {}
    try:
        fm = yaml.safe_load(txt[3:end])
    except Exception:
        return {}
    return fm if isinstance(fm, dict) else {}


class Miner:
    """kb hybrid retrieval over one artifact: candidate chunks for a query."""

    def __init__(self, art: Path):
        from kb.runtime.index import Index
        from kb.runtime.search import Searcher

        self.ix = Index(art)
        self.searcher = Searcher(self.ix, reranker=None)
        self.chunks_of: dict[str, list[int]] = {}
        self.records = [asdict(self.ix.chunk(c)) for c in range(self.ix.n_chunks)]
        for c, r in enumerate(self.records):
            self.chunks_of.setdefault(r["doc_id"], []).append(c)

    def hybrid(self, text: str, k: int = 40) -> list[int]:
        from kb.runtime.search import Query

        resp = self.searcher.search(Query(text, top_k=k, mode="hybrid", all_statuses=True), replace(self.searcher.defaults, rerank=False))
        return [r.chunk_id for r in resp.results]


def pick_negatives(rng: random.Random, ranked: list[int], exclude_doc: str, records, n: int, n_top: int, pos_len: int | None = None) -> list[int]:
    """n negatives from the ranked candidates (n_top from ranks 1-10, the rest from 11-40).

    With pos_len, candidates whose length is within LEN_RATIO of the positive's are preferred,
    so that passage length does not tell the positive apart (a shortcut a small model learns
    long before it learns to match).
    """
    cand = [c for c in ranked if records[c]["doc_id"] != exclude_doc]
    if pos_len:
        lo, hi = pos_len / LEN_RATIO, pos_len * LEN_RATIO
        close = [c for c in cand if lo <= len(records[c]["text"]) <= hi]
        if len(close) >= n:
            cand = close
    top, rest = cand[:10], cand[10:]
    k_top = min(n_top, len(top))
    out = rng.sample(top, k_top)
    pool = rest if len(rest) >= n - k_top else rest + [c for c in top if c not in out]
    out += rng.sample(pool, min(n - k_top, len(pool)))
    return out


def drop_sentence(rng: random.Random, text: str) -> str:
    """The passage without one random sentence (applied to ICT negatives like to the positive)."""
    sents = sentences(text)
    if len(sents) < 2:
        return text
    i = rng.randrange(len(sents))
    return " ".join(sents[:i] + sents[i + 1:])


def beir_groups(name: str, data: Path, miner: Miner, n_groups: int, n_neg: int, rng: random.Random) -> list[dict]:
    corpus = load_corpus(data / name / "corpus.jsonl")
    records = miner.records
    strip_title = name == "cranfield"
    doc_ids = sorted(d for d in miner.chunks_of if d in corpus)
    rng.shuffle(doc_ids)
    n_title = n_groups * 3 // 5
    n_ict = n_groups - n_title
    out: list[dict] = []

    def cut_title(text: str, title: str) -> str:
        t = norm_ws(title)
        s = norm_ws(text)
        return s[len(t):].strip() if t and s.lower().startswith(t.lower()) else text

    # titles -> best chunk of the document
    used = 0
    for d in doc_ids:
        if used >= n_title:
            break
        title = norm_ws(corpus[d]["title"])
        if len(title.split()) < 3:
            continue
        ranked = miner.hybrid(title)
        pos = records[miner.chunks_of[d][0]]["text"]  # the abstract's opening (not the best-ranked chunk: BM25 favours short ones)
        if strip_title:
            pos = cut_title(pos, title)
        if len(pos) < 80:
            continue
        negs = pick_negatives(rng, ranked, d, records, n_neg, n_neg // 2, len(pos))
        neg_texts = [cut_title(records[c]["text"], corpus.get(records[c]["doc_id"], {}).get("title", "")) if strip_title else records[c]["text"] for c in negs]
        if len(neg_texts) < n_neg:
            continue
        out.append({"src": f"{name}:title", "query": title, "pos": pos, "negs": neg_texts, "doc": d})
        used += 1

    # inverse cloze: a sentence -> its chunk without it (documents not used for titles first)
    used = 0
    for d in doc_ids[::-1]:
        if used >= n_ict:
            break
        chunks = miner.chunks_of[d]
        c = chunks[rng.randrange(len(chunks))]
        text = records[c]["text"]
        sents = sentences(text)
        ok = [i for i, s in enumerate(sents) if 8 <= len(s.split()) <= 40]
        if len(sents) < 3 or not ok:
            continue
        i = ok[rng.randrange(len(ok))]
        query = sents[i]
        pos = " ".join(sents[:i] + sents[i + 1:])
        ranked = miner.hybrid(query)
        negs = pick_negatives(rng, ranked, d, records, n_neg, n_neg // 2, len(text))
        if len(negs) < n_neg:
            continue
        out.append({"src": f"{name}:ict", "query": query, "pos": pos, "negs": [drop_sentence(rng, records[x]["text"]) for x in negs], "doc": d})
        used += 1
    return out


def hugo_groups(data: Path, miner: Miner, n_groups: int, n_neg: int, rng: random.Random) -> list[dict]:
    root = data / "hugo-docs" / "content" / "en"
    records = miner.records
    cands: list[tuple[str, str, int]] = []  # (src, query, positive chunk)
    for path in sorted(miner.chunks_of):
        chunks = miner.chunks_of[path]
        fm = front_matter(root / path) if (root / path).is_file() else {}
        title = norm_ws(str(fm.get("title") or records[chunks[0]]["title"] or ""))
        desc = norm_ws(str(fm.get("description") or ""))
        body = [c for c in chunks if len(records[c]["text"]) >= 100]
        if desc and len(desc.split()) >= 4 and body:
            cands.append(("hugo:desc", desc, body[0]))
        seen = set()
        for c in body:
            sec = records[c]["section"]
            if not sec or sec in seen:
                continue
            seen.add(sec)
            head = norm_ws(re.split(r"\s*>\s*", sec)[-1])
            if head.lower() in GENERIC_HEADINGS or len(head) < 4:
                continue
            q = f"{title}: {head}" if title and title.lower() not in head.lower() else head
            cands.append(("hugo:section", q, c))
    rng.shuffle(cands)
    n_desc = n_groups // 2
    by_src = {"hugo:desc": [x for x in cands if x[0] == "hugo:desc"], "hugo:section": [x for x in cands if x[0] == "hugo:section"]}
    take = by_src["hugo:desc"][:n_desc]
    take += by_src["hugo:section"][: n_groups - len(take)]
    out = []
    for src, q, pc in take:
        d = records[pc]["doc_id"]
        ranked = miner.hybrid(q)
        negs = pick_negatives(rng, ranked, d, records, n_neg, n_neg // 2, len(records[pc]["text"]))
        if len(negs) < n_neg:
            continue
        out.append({"src": src, "query": q, "pos": records[pc]["text"], "negs": [records[x]["text"] for x in negs], "doc": d})
    return out


def leakage_check(groups: list[dict], fixture: Path) -> int:
    """Fail if any derived query equals (case/space-insensitively) a Hugo fixture query."""
    if not fixture.is_file():
        return 0
    fx = {norm_ws(q["query"]).lower() for q in json.loads(fixture.read_text(encoding="utf-8"))["queries"]}
    bad = [g["query"] for g in groups if norm_ws(g["query"]).lower() in fx]
    if bad:
        sys.exit(f"leakage: {len(bad)} derived queries equal fixture queries, e.g. {bad[0]!r}")
    return len(fx)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--art-dir", type=Path, required=True, help="folder with hugo.kb scifact.kb cranfield.kb cisi.kb")
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--fixture", type=Path, default=None, help="Hugo fixture, only for the leakage check")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--groups", default="hugo=1000,scifact=800,cranfield=500,cisi=500")
    ap.add_argument("--negatives", type=int, default=4)
    a = ap.parse_args(argv)

    plan = {k: int(v) for k, v in (kv.split("=") for kv in a.groups.split(","))}
    groups: list[dict] = []
    t0 = time.time()
    for name, n in plan.items():
        rng = random.Random(f"{a.seed}:{name}")
        miner = Miner(a.art_dir / f"{name}.kb")
        g = hugo_groups(a.data, miner, n, a.negatives, rng) if name == "hugo" else beir_groups(name, a.data, miner, n, a.negatives, rng)
        miner.ix.close()
        print(f"{name}: {len(g)} groups ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        groups += g
    fixture = a.fixture or a.data.parent / "fixtures" / "hugo-docs.json"
    n_fx = leakage_check(groups, fixture)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        for g in groups:
            f.write(json.dumps(g, ensure_ascii=False, sort_keys=True) + "\n")
    counts: dict[str, int] = {}
    for g in groups:
        counts[g["src"]] = counts.get(g["src"], 0) + 1
    print(json.dumps({"groups": len(groups), "pairs": len(groups) * (1 + a.negatives), "by_source": counts,
                      "leakage_checked_against": n_fx, "seconds": round(time.time() - t0, 1)}), file=sys.stderr)


if __name__ == "__main__":
    main()
