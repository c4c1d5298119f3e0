"""Peer retrievers on kb's benchmark sets: bm25s, tantivy and LanceDB (FTS, vector, hybrid RRF).

Benchmark-only: the peer packages are pinned in bench/requirements-bench.txt and are never kb
runtime dependencies. Queries, judgments and metrics come from kb.runtime.bench (load_fixture,
load_beir, query_metrics, _mean), so peers are scored by exactly the code that scores
``kb bench``: document-level P@k, recall@10/@100, MRR@10, graded nDCG@10, hit@10; negatives
(no relevant document) are searched (and timed) but left out of the quality means.

    python bench/peers.py --hugo /work/shared/data/hugo-docs/content/en \
        --fixture /work/shared/fixtures/hugo-docs.json \
        --beir /work/shared/data/scifact:train --beir /work/shared/data/cranfield:test \
        --peers bm25s,tantivy,lancedb --out bench/out/peers.json

Writes one JSON object {set: {peer: {...}}} (plus a "_meta" key: machine, date, command,
versions) and prints markdown tables.

Documents: BEIR sets use corpus.jsonl ``_id`` as the key and title + text as the content;
the markdown set uses the path relative to the corpus folder, whole files, YAML front matter
stripped but its title and description kept (title as the title, description prepended to
the body). Every peer indexes title + body of whole documents (kb indexes chunks).

Timing: index time is wall time in this process (single run); latency is per query, one
query at a time, top 100 (DEPTH), after one untimed warm-up query; qps = queries / sum of
latencies (sequential, one client). The machine may be shared: timings are noisy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import warnings
from datetime import date
from pathlib import Path

import numpy as np

os.environ.setdefault("LANCEDB_LOG", "error")  # lancedb's Rust logger (env_logger): no per-query deprecation notes

from kb.runtime.bench import DEPTH, BenchSet, _mean, load_beir, load_fixture, query_metrics  # noqa: E402

Doc = tuple  # (doc_id, title, text)


# --------------------------------------------------------------------------- corpora


def load_corpus_beir(folder) -> list[Doc]:
    """corpus.jsonl -> [(_id, title, text)]."""
    docs = []
    with open(Path(folder) / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                docs.append((str(d["_id"]), d.get("title") or "", d.get("text") or ""))
    return docs


_FM = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)


def _front_matter(raw: str) -> tuple[dict, str]:
    m = _FM.match(raw)
    if not m:
        return {}, raw
    body = raw[m.end():]
    try:
        import yaml

        meta = yaml.safe_load(m.group(1)) or {}
        if not isinstance(meta, dict):
            meta = {}
    except Exception:  # malformed YAML: fall back to the two lines we need
        meta = {}
        for key in ("title", "description"):
            km = re.search(rf"^{key}:\s*(.*)$", m.group(1), re.M)
            if km:
                meta[key] = km.group(1).strip().strip("'\"")
    return meta, body


def load_corpus_markdown(folder) -> list[Doc]:
    """Whole markdown files -> [(relpath, title, text)]; front matter stripped, its title kept as
    the title (else the file stem) and its description prepended to the text."""
    root = Path(folder)
    docs = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.suffix.lower() not in (".md", ".markdown"):
            continue
        meta, body = _front_matter(p.read_text(encoding="utf-8", errors="replace"))
        title = str(meta.get("title") or p.stem)
        desc = meta.get("description")
        text = (f"{desc}\n\n{body}" if desc else body).strip()
        docs.append((p.relative_to(root).as_posix(), title, text))
    return docs


# --------------------------------------------------------------------------- scoring


def _lat_stats(lat_ms: list[float]) -> dict:
    return {
        "latency_ms": {"p50": round(float(np.percentile(lat_ms, 50)), 3), "p95": round(float(np.percentile(lat_ms, 95)), 3)},
        "qps": round(len(lat_ms) / (sum(lat_ms) / 1000), 1) if sum(lat_ms) else None,
    }


def score_runs(bset: BenchSet, ranked_lists: list[list], k: int) -> dict:
    """Quality means exactly as kb.runtime.bench.run_bench computes them (negatives left out)."""
    rows, per_kind = [], {}
    for q, ranked in zip(bset.queries, ranked_lists):
        if not q.relevant:
            continue
        m = query_metrics(ranked, q.relevant, k)
        rows.append(m)
        per_kind.setdefault(q.kind, []).append(m)
    return {
        **_mean(rows),
        "by_kind": {kd: {**_mean(r), "queries": len(r)} for kd, r in sorted(per_kind.items())} if len(per_kind) > 1 else {},
    }


REPEAT = 1  # timed passes over the queries (--repeat); a query's latency is its median over passes


def _timed_queries(bset: BenchSet, search) -> tuple[list[list], list[float]]:
    """search(text) -> ranked doc keys; one untimed warm-up, then every query timed alone, REPEAT
    passes, per-query median latency (the ranking of the first pass is scored)."""
    if bset.queries:
        search(bset.queries[0].text)
    ranked, passes = [], []
    for rep in range(max(1, REPEAT)):
        lat = []
        for q in bset.queries:
            t = time.perf_counter()
            r = search(q.text)
            lat.append((time.perf_counter() - t) * 1000)
            if rep == 0:
                ranked.append(r)
        passes.append(lat)
    return ranked, [float(x) for x in np.median(np.array(passes), axis=0)]


def _dedupe(ids) -> list:
    seen, out = set(), []
    for d in ids:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _content(doc: Doc) -> str:
    return f"{doc[1]}\n{doc[2]}".strip()


# --------------------------------------------------------------------------- bm25s


def run_bm25s(docs: list[Doc], bset: BenchSet, k: int = 10, stopwords=None) -> dict:
    """bm25s, method="lucene", k1=1.2, b=0.75, its default tokenizer (lowercase, \\w\\w+, no
    stemmer) with ``stopwords`` (None or "en"). Zero-score hits (no query term) are dropped."""
    import bm25s

    ids = [d[0] for d in docs]
    texts = [_content(d) for d in docs]
    t0 = time.perf_counter()
    tokens = bm25s.tokenize(texts, stopwords=stopwords, show_progress=False)
    t1 = time.perf_counter()
    model = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    model.index(tokens, show_progress=False)
    t2 = time.perf_counter()
    depth = min(DEPTH, len(ids))

    def search(text):
        qt = bm25s.tokenize([text], stopwords=stopwords, return_ids=False, show_progress=False)
        if not qt[0]:
            return []
        res, scores = model.retrieve(qt, k=depth, show_progress=False, n_threads=1)
        return [ids[i] for i, s in zip(res[0], scores[0]) if s > 0]

    ranked, lat = _timed_queries(bset, search)
    # batched throughput too: bm25s is built for it (all queries in one retrieve call)
    t3 = time.perf_counter()
    qts = bm25s.tokenize([q.text for q in bset.queries], stopwords=stopwords, return_ids=False, show_progress=False)
    keep = [i for i, t in enumerate(qts) if t]
    if keep:
        model.retrieve([qts[i] for i in keep], k=depth, show_progress=False, n_threads=1)
    batch_s = time.perf_counter() - t3
    return {
        **score_runs(bset, ranked, k),
        "index_s": {"tokenize": round(t1 - t0, 3), "index": round(t2 - t1, 3), "total": round(t2 - t0, 3)},
        **_lat_stats(lat),
        "qps_batched": round(len(bset.queries) / batch_s, 1) if batch_s else None,
        "config": f"method=lucene k1=1.2 b=0.75 stopwords={stopwords} numpy backend, whole docs title+text",
    }


# --------------------------------------------------------------------------- tantivy

_TANTIVY_SPECIAL = re.compile(r"([^\w\s])")
_TANTIVY_OPS = {"AND", "OR", "NOT", "IN", "TO"}


def tantivy_escape(text: str) -> str:
    """Backslash-escape every punctuation character (the query grammar's + - ! ( ) { } [ ] ^ " ~
    * ? : \\ / < > = ' etc.) and lowercase the operator words, so any text parses as a plain OR of
    terms. Note: tantivy's parser turns an escaped multi-token word (``e\\-mail``, ``what\\'s``)
    into a phrase query, as it would for the unescaped word: that is its default behaviour."""
    esc = _TANTIVY_SPECIAL.sub(r"\\\1", text)
    return " ".join(w.lower() if w in _TANTIVY_OPS else w for w in esc.split())


def run_tantivy(docs: list[Doc], bset: BenchSet, k: int = 10, in_ram: bool = True) -> dict:
    """tantivy-py: fields title and body with the default tokenizer (SimpleTokenizer, lowercase,
    no stemming), BM25 (its defaults), query via index.parse_query over [title, body] (OR)."""
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("title", stored=False)
    sb.add_text_field("body", stored=False)
    schema = sb.build()
    tmp = None if in_ram else tempfile.mkdtemp(prefix="peers-tantivy-")
    try:
        t0 = time.perf_counter()
        index = tantivy.Index(schema) if in_ram else tantivy.Index(schema, path=tmp)
        writer = index.writer(heap_size=256_000_000, num_threads=os.cpu_count() or 1)
        for did, title, text in docs:
            writer.add_document(tantivy.Document(id=did, title=title, body=text))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        searcher = index.searcher()
        t1 = time.perf_counter()
        errors = []

        def search(text):
            try:
                q = index.parse_query(tantivy_escape(text), ["title", "body"])
            except ValueError as e:
                errors.append(f"{text!r}: {e}")
                return []
            hits = searcher.search(q, DEPTH).hits
            return [searcher.doc(addr)["id"][0] for _, addr in hits]

        ranked, lat = _timed_queries(bset, search)
        out = {
            **score_runs(bset, ranked, k),
            "index_s": {"total": round(t1 - t0, 3)},
            **_lat_stats(lat),
            "config": f"{'RAM' if in_ram else 'disk'} index, fields title+body, default tokenizer, parse_query OR, BM25 defaults",
        }
        if errors:
            out["parse_errors"] = errors[:5] + ([f"... {len(errors)} in all"] if len(errors) > 5 else [])
        return out
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- LanceDB

_EMBEDDER = None


def default_embedder():
    """kb's default embedder (all-MiniLM-L6-v2, CTranslate2 int8 on CPU), loaded once."""
    global _EMBEDDER
    if _EMBEDDER is None:
        from kb.builder.embedders import default_embedder_files
        from kb.models.encoders import load_embedder

        _EMBEDDER = load_embedder(default_embedder_files(), device="cpu")
    return _EMBEDDER


def embed_passages(emb, texts: list[str], cache_dir: Path | None = None, batch_size: int = 32) -> tuple[np.ndarray, float, bool]:
    """(vectors, seconds, cached): whole texts truncated at the model window; cached as .npy keyed
    by a hash of the model name/window and every text."""
    h = hashlib.sha256(f"{getattr(emb, 'name', '?')}|{getattr(emb, 'max_tokens', '?')}|{getattr(emb, 'quantization', '?')}".encode())
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    path = Path(cache_dir) / f"emb-{h.hexdigest()[:20]}.npy" if cache_dir else None
    if path and path.exists():
        return np.load(path), 0.0, True
    t = time.perf_counter()
    parts = [np.asarray(emb.embed(texts[i:i + batch_size]), dtype=np.float32) for i in range(0, len(texts), batch_size)]
    vecs = np.concatenate(parts) if parts else np.zeros((0, emb.dim), np.float32)
    secs = time.perf_counter() - t
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vecs)
    return vecs, secs, False


def _dir_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def run_lancedb(docs: list[Doc], bset: BenchSet, k: int = 10, embed=None, cache_dir: Path | None = None,
                modes=("hybrid", "fts", "vector"), keep_dir: Path | None = None) -> dict:
    """LanceDB on a temp folder: one table (id, content = title + body, vector), a native FTS index
    on ``content`` (use_tantivy=False; native FTS takes one field per index) and no ANN index
    (exact flat search, cosine). Hybrid = .vector(q).text(q) with RRFReranker(K=60), limit 100.
    ``embed``: an embedder with embed(texts) / embed_query(text) (default: kb's MiniLM).
    Returns {"lancedb-hybrid": {...}, "lancedb-fts": {...}, "lancedb-vector": {...}}."""
    import lancedb
    import pyarrow as pa
    from lancedb.rerankers import RRFReranker

    emb = embed or default_embedder()
    texts = [_content(d) for d in docs]
    vecs, embed_s, cached = embed_passages(emb, texts, cache_dir)
    ids = [d[0] for d in docs]
    folder = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="peers-lancedb-"))
    try:
        t0 = time.perf_counter()
        db = lancedb.connect(str(folder))
        dim = vecs.shape[1]
        table = pa.table({
            "id": pa.array(ids, pa.string()),
            "content": pa.array(texts, pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), dim),
        })
        tbl = db.create_table("docs", table, mode="overwrite")
        t1 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_fts_index is deprecated for create_index(config=FTS())
            tbl.create_fts_index("content", use_tantivy=False, replace=True)
        t2 = time.perf_counter()
        disk = _dir_bytes(folder)
        rrf = RRFReranker()
        common = {
            "index_s": {
                "embed": round(embed_s, 2) if not cached else None,
                "embed_cached": cached,
                "table": round(t1 - t0, 3),
                "fts_index": round(t2 - t1, 3),
                "table+index": round(t2 - t0, 3),
            },
            "disk_bytes": disk,
            "docs": len(docs),
        }

        def q_fts(text):
            return [r["id"] for r in tbl.search(text, query_type="fts", fts_columns="content").select(["id", "_score"]).limit(DEPTH).to_list()]

        def q_vec(text):
            qv = np.asarray(emb.embed_query(text), dtype=np.float32)
            return [r["id"] for r in tbl.search(qv, vector_column_name="vector").distance_type("cosine")
                    .select(["id", "_distance"]).limit(DEPTH).to_list()]

        def q_hyb(text):
            qv = np.asarray(emb.embed_query(text), dtype=np.float32)
            rows = (tbl.search(query_type="hybrid", vector_column_name="vector", fts_columns="content")
                    .vector(qv).text(text).distance_type("cosine").rerank(rrf).select(["id"]).limit(DEPTH).to_list())
            return _dedupe(r["id"] for r in rows)

        out = {}
        fns = {"hybrid": (q_hyb, "native FTS + flat cosine vector, RRFReranker(K=60), query embedding timed"),
               "fts": (q_fts, "native FTS (simple tokenizer, lowercase, English stemming and stop words, ascii folding)"),
               "vector": (q_vec, "flat (exact) cosine search, no ANN index, query embedding timed")}
        for mode in modes:
            fn, cfg = fns[mode]
            ranked, lat = _timed_queries(bset, fn)
            out[f"lancedb-{mode}"] = {**score_runs(bset, ranked, k), **_lat_stats(lat), **common, "config": cfg}
        return out
    finally:
        if not keep_dir:
            shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------- CLI

sys.path.insert(0, str(Path(__file__).resolve().parent))
PEERS = ("bm25s", "tantivy", "lancedb")


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for p in ("bm25s", "tantivy", "lancedb", "pylance", "pyarrow", "numpy", "ctranslate2", "kb-search"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            pass
    return out


def machine() -> str:
    from results_md import machine as _machine

    return _machine()


def run_set(name: str, docs: list[Doc], bset: BenchSet, peers, k: int, cache_dir: Path | None, log) -> dict:
    res = {}
    log(f"[{name}] {len(docs)} docs, {len(bset.queries)} queries ({sum(1 for q in bset.queries if not q.relevant)} negative)")
    if "bm25s" in peers:
        res["bm25s"] = run_bm25s(docs, bset, k, stopwords=None)
        log(f"[{name}] bm25s done")
        res["bm25s+stop-en"] = run_bm25s(docs, bset, k, stopwords="en")
        log(f"[{name}] bm25s+stop-en done")
    if "tantivy" in peers:
        res["tantivy"] = run_tantivy(docs, bset, k)
        log(f"[{name}] tantivy done")
    if "lancedb" in peers:
        log(f"[{name}] lancedb: embedding {len(docs)} documents (cached if seen before)")
        res.update(run_lancedb(docs, bset, k, cache_dir=cache_dir))
        log(f"[{name}] lancedb done")
    for r in res.values():
        r.update({"queries": len(bset.queries), "negatives": sum(1 for q in bset.queries if not q.relevant), "k": k})
    return res


def render(name: str, res: dict) -> str:
    if not res:
        return ""
    any_r = next(iter(res.values()))
    k = any_r["k"]
    cols = ["ndcg@10", "mrr@10", f"p@{k}", "recall@10", "recall@100", "hit@10"]
    lines = [f"### {name}: {any_r['queries']} queries ({any_r['negatives']} negative)", ""]
    lines.append("| peer | " + " | ".join(cols) + " | index s | p50 ms | p95 ms | qps |")
    lines.append("|---" * (len(cols) + 5) + "|")
    for peer, r in res.items():
        ix = r["index_s"]
        if "table+index" in ix:
            idx = f"{ix['table+index']:.2f} (+embed {ix['embed']:.1f})" if ix.get("embed") is not None else f"{ix['table+index']:.2f} (+embed cached)"
        else:
            idx = f"{ix['total']:.2f}"
        vals = " | ".join(f"{r.get(c, 0):.3f}" for c in cols)
        lines.append(f"| {peer} | {vals} | {idx} | {r['latency_ms']['p50']:.2f} | {r['latency_ms']['p95']:.2f} | {r['qps']} |")
    extra = [f"{p}: batched qps {r['qps_batched']}" for p, r in res.items() if r.get("qps_batched")]
    disk = next((r["disk_bytes"] for p, r in res.items() if p.startswith("lancedb")), None)
    if disk is not None:
        extra.append(f"LanceDB folder on disk: {disk / 2**20:.1f} MiB ({disk:,} bytes)")
    if extra:
        lines += ["", "; ".join(extra)]
    kinds = sorted({kd for r in res.values() for kd in r["by_kind"]})
    if kinds:
        lines += ["", "hit@10 / nDCG@10 by query kind:", "", "| peer | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
        for peer, r in res.items():
            cells = [f"{r['by_kind'][kd]['hit@10']:.2f} / {r['by_kind'][kd]['ndcg@10']:.2f} (n={r['by_kind'][kd]['queries']})" if kd in r["by_kind"] else "-" for kd in kinds]
            lines.append(f"| {peer} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hugo", type=Path, help="markdown corpus folder (fixture paths are relative to it)")
    ap.add_argument("--fixture", type=Path, help="query fixture JSON for --hugo")
    ap.add_argument("--beir", action="append", default=[], metavar="FOLDER:SPLIT", help="BEIR folder and qrels split (repeatable)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma list of {', '.join(PEERS)}")
    ap.add_argument("-k", type=int, default=10, help="k of P@k")
    ap.add_argument("--repeat", type=int, default=1, help="timed passes over the queries (per-query median latency)")
    ap.add_argument("--out", type=Path, default=Path("bench/out/peers.json"))
    ap.add_argument("--cache", type=Path, default=None, help="embedding cache folder (default: the --out folder)")
    a = ap.parse_args(argv)

    global REPEAT
    REPEAT = a.repeat
    peers = [p.strip() for p in a.peers.split(",") if p.strip()]
    bad = [p for p in peers if p not in PEERS]
    if bad:
        ap.error(f"unknown peer(s) {bad}; choose from {PEERS}")
    if bool(a.hugo) != bool(a.fixture):
        ap.error("--hugo and --fixture go together")
    cache = a.cache or a.out.parent
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    jobs = []
    if a.hugo:
        jobs.append(("hugo-docs", lambda: load_corpus_markdown(a.hugo), lambda: load_fixture(a.fixture)))
    for spec in a.beir:
        folder, _, split = spec.rpartition(":")
        if not folder:
            ap.error(f"--beir {spec!r}: expected FOLDER:SPLIT")
        jobs.append((f"{Path(folder).name}:{split}", lambda f=folder: load_corpus_beir(f), lambda f=folder, s=split: load_beir(Path(f), s)))

    result = {"_meta": {"machine": machine(), "date": date.today().isoformat(), "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]) if argv is None else " ".join(argv), "versions": versions(), "depth": DEPTH, "latency_passes": a.repeat}}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tables = []
    for name, load_docs, load_set in jobs:
        docs, bset = load_docs(), load_set()
        keys = {d[0] for d in docs}
        missing = sorted({p for q in bset.queries for p in q.relevant if p not in keys})
        if missing:
            log(f"[{name}] warning: {len(missing)} judged documents not in the corpus (e.g. {missing[:3]})")
        result[name] = run_set(name, docs, bset, peers, a.k, cache, log)
        a.out.write_text(json.dumps(result, indent=2))  # after every set: partial results survive
        tables.append(render(name, result[name]))
    print(f"Machine: {result['_meta']['machine']}  \nDate: {result['_meta']['date']}  \nVersions: "
          + ", ".join(f"{k} {v}" for k, v in result["_meta"]["versions"].items()) + "\n")
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
