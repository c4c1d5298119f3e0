"""``kb info``: what an artifact holds, as a dict (for --json) and as text."""

from __future__ import annotations

from kb.common.usage import printable
from kb.formats import layout as L
from kb.formats.artifact import CODECS

# The sections that pack a model: its role in kb info's "packed models", and the card (meta.models key) that names it.
MODEL_SECTIONS = ((L.MODEL_EMBED, "embedder", "embedder"), (L.MODEL_QUERY, "query encoder", "embedder"), (L.MODEL_EMBED_EN, "English embedder", "embedder_en"),
                  (L.MODEL_QUERY_EN, "English query encoder", "embedder_en"), (L.MODEL_RERANK, "reranker", "reranker"))


def describe(ix) -> dict:
    m = ix.meta
    man = ix.manifest()
    return {
        "artifact": str(ix.path),
        "bytes": ix.artifact.size,
        "format_version": ix.artifact.version,
        "kb_version": m.kb_version,
        "counts": m.counts._asdict(),
        "sections": [
            {"name": s.name, "offset": s.offset, "bytes": s.length, "raw_bytes": s.raw_length, "codec": CODECS[s.codec], "crc32": f"{s.crc32:08x}"}
            for s in ix.artifact.sections.values()
        ],
        "models": {"embedder": m.embedder, "reranker": m.reranker} | ({"embedder_en": m.embedder_en} if m.embedder_en is not None else {}),
        "packed_models": packed_models(ix),
        "analyzer": m.analyzer,
        "bm25": m.bm25,
        "vectors": m.vectors,
        "statuses": list(m.statuses),
        "excluded_statuses": list(m.excluded_statuses),
        "tags": m.tag_descriptions,
        "path_contexts": m.path_contexts,
        "search": m.search,
        "search_defaults": search_defaults(m),
        "manifest": {
            "root": man.root,
            "config_file": man.config_file,
            "sources": len(man.sources),
            "source_bytes": sum(s.size for s in man.sources),
            "skipped": len(man.skipped),
            "excluded": man.excluded,
            "jsonl": list(man.jsonl),
        },
    }


def packed_models(ix) -> list[dict]:
    """Each model section the artifact holds: its role, the model's name, and its bytes on disk."""
    cards = {"embedder": ix.meta.embedder, "embedder_en": ix.meta.embedder_en, "reranker": ix.meta.reranker}
    secs = ix.artifact.sections
    return [{"role": role, "name": (cards[card] or {}).get("name"), "section": name, "bytes": secs[name].length} for name, role, card in MODEL_SECTIONS if name in secs]


def search_defaults(meta) -> dict:
    """The options a search of this artifact starts from (kb's defaults, its model's, its own
    [search] table), with how a query's dense share is found when semantic_weight is unset."""
    from kb.common.options import SETTINGS, resolve, stored_search

    from .fusion import KEYWORD_QUERY_WEIGHT, LONG_QUERY_TERMS, LONG_QUERY_WEIGHT, SHORT_QUERY_TERMS, SHORT_QUERY_WEIGHT

    o = resolve(stored_search(meta))
    out = {name: getattr(o, name) for name in SETTINGS}
    if o.semantic_weight is None:
        rule = out["semantic_weight_by_length"] = {"short_terms": SHORT_QUERY_TERMS, "short_weight": SHORT_QUERY_WEIGHT, "long_terms": LONG_QUERY_TERMS, "long_weight": LONG_QUERY_WEIGHT}
        if (meta.analyzer or {}).get("stopwords"):  # a keyword query is one without stopwords: only an analyzer with a list can tell
            rule["keyword_weight"] = KEYWORD_QUERY_WEIGHT
    return out


def _search_line(s: dict) -> str:
    """search: semantic_weight by query length (0.8 up to 4 words, 0.45 from 20, at most 0.5 with no stopword), rrf_k 10, ..."""
    rule = s.get("semantic_weight_by_length")
    keywords = f", at most {rule['keyword_weight']:g} with no stopword" if rule and "keyword_weight" in rule else ""
    share = (f"semantic_weight by query length ({rule['short_weight']:g} up to {rule['short_terms']} words, {rule['long_weight']:g} from {rule['long_terms']}{keywords})" if rule
             else f"semantic_weight {s['semantic_weight']:g}")
    return f"search: {share}, rrf_k {s['rrf_k']:g}, " + ("adaptive fusion" if s["adaptive_fusion"] else "fixed fusion") + (", rerank" if s["rerank"] else ", no rerank")


def describe_set(paths, artifacts: list[dict], verify: bool) -> dict:
    """``kb info`` of a set: each artifact's ``describe``; with ``verify``, each set file's members
    checked against their recorded sha256 (runtime/collection.py ``verify_set``)."""
    out = {"set": list(paths), "artifacts": artifacts}
    if verify:
        from kb.formats.kbset import is_set_file

        from .collection import verify_set

        out["verified_sets"] = {p: verify_set(p) for p in paths if is_set_file(p)}
    return out


def _bm25_languages(langs) -> list[str]:
    """Format 4's BM25 statistics per language, one line (none for one language)."""
    if not isinstance(langs, list) or not langs:
        return []
    parts = [f"{v.get('code')} {v.get('documents')} documents" + ("" if v.get("own") else " (the corpus's statistics)")
             + (f", mean chunk length {v['avg_length']:.1f}" if isinstance(v.get("avg_length"), (int, float)) else "") for v in langs if isinstance(v, dict)]
    return [printable("bm25 per language: " + "; ".join(parts))]


def render_info(d: dict) -> str:
    c = d["counts"]
    emb = d["models"]["embedder"]
    out = [
        f"{d['artifact']}: kb artifact format {d['format_version']} (built by kb {d['kb_version']}), {d['bytes']:,} bytes",
        f"counts: {c['documents']} documents, {c['chunks']} chunks, {c['terms']} terms, {c['vectors']} vectors",
        "embedder: " + (f"{emb['name']} ({emb.get('quantization', emb.get('backend'))}, dim {emb['dim']})" if emb else "none (BM25 only)")
        + (f"; English leg: {en['name']} ({en.get('quantization', en.get('backend'))}, dim {en.get('dim')}) for queries in alphabetic scripts" if (en := d["models"].get("embedder_en")) else ""),
        "reranker: " + (f"{rr['name']} ({rr.get('quantization')}, {rr.get('max_tokens')}-token pairs)" if (rr := d["models"]["reranker"]) else "none"),
        "analyzer: " + _analyzer_line(d["analyzer"]),
        "bm25: " + ", ".join(f"{k}={v:g}" for k, v in d["bm25"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)),
        *_bm25_languages(d["bm25"].get("languages")),
        _search_line(d["search_defaults"]),
        f"statuses: {', '.join(d['statuses'])} (excluded by default: {', '.join(d['excluded_statuses'])})",
        f"tags: {len(d['tags'])}",
    ]
    out.extend(f"  {t}: {desc}" for t, desc in d["tags"].items())
    out.append(f"path contexts: {len(d['path_contexts'])}")
    out.extend(printable(f"  {p}: {desc}") for p, desc in d["path_contexts"].items())
    models = d.get("packed_models", [])
    out.append(f"packed models: {sum(x['bytes'] for x in models):,} bytes" if models else "packed models: none")
    out.extend(printable(f"  {x['role']}: {x['name']}, {x['bytes']:,} bytes ({x['section']})") for x in models)
    man = d["manifest"]
    out.append(f"manifest: root {man['root']}, {man['sources']} sources ({man['source_bytes']:,} bytes), {man['skipped']} skipped, {man['excluded']} excluded")
    if "verified" in d:
        out.append(f"verified: crc32 of all {d['verified']['sections']} sections ok")
    out.append("sections:")
    out.extend(f"  {s['name']:<22} {s['bytes']:>12,} B  {s['codec']:<4} at {s['offset']}" for s in d["sections"])
    return "\n".join(out)


def _analyzer_line(a: dict) -> str:
    """kb-unicode-3 (en 5183 documents: english stemmer, 153 stopwords; PyStemmer 3.1.0)."""
    head = f"{a.get('name')}-{a.get('version')}"
    if a.get("version") == 1:
        return f"{head} (cjk_bigrams={a.get('cjk_bigrams')}, no stemming, no stopwords)"
    docs, stems, stops = a.get("documents") or {}, a.get("stemmers") or {}, a.get("stopwords") or {}
    langs = [f"{lang} {docs.get(lang, '?')} documents: " + (f"{stems[lang]} stemmer, {len(stops.get(lang, ()))} stopwords" if stems.get(lang) else "bigrams, no stemmer") for lang in a.get("languages") or ()]
    lib = a.get("stemmer_library")
    return f"{head} (" + "; ".join(langs + ([lib] if lib else [])) + ")"
