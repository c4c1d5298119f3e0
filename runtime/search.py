"""Hybrid search: filters -> legs -> RRF fusion -> optional rerank -> results.

One linear pipeline, no fallbacks that change meaning: an empty result is an empty result.

- Filters (status, tag, path prefix) become one boolean mask over chunk ids *before* any leg
  ranks (runtime/filters.py), so every leg draws its candidates from the allowed set only.
- Legs (runtime/legs.py): BM25 and dense for the query (weights 1 - semantic_weight and
  semantic_weight), the same two for each ``--rewrite`` (scaled by rewrite_weight), and a tag
  leg for ``--entity`` values.
- Fusion: weighted RRF (runtime/fusion.py). Rerank (runtime/rerank.py): the top ``rerank_top``
  fused candidates are rescored by the cross-encoder and blended; the rest keep their order.

The ranking knobs arrive as one resolved ``SearchOptions`` (kb.common.options); a Searcher holds
the open index and the loaded models and is shared by every query (and thread) of a process.
"""

from __future__ import annotations

import os
import re
import threading
import time
from contextlib import contextmanager
from functools import lru_cache

import numpy as np

from kb.common.errors import UsageError
from kb.common.options import GROUPS, MODES, MODEL_DEFAULTS, Query, SearchOptions, resolve, stored_search

from . import legs as legs_
from .bm25 import analyzer_of, query_stopwords, query_terms, query_words
from .filters import allowed_mask, syntax_mask
from .confidence import FEATURES, MONOTONE_DEPTH, backend_of, feature_rows, low_confidence_floor, predict
from .fusion import COS_STRONG, FusionParams, Fused, Leg, adapt_weights, fuse_rrf, length_weight, minilm_cosine
from .cosines import cosines_of
from .index import members_of
from .rerank import rerank
from .query_syntax import FIELDS, TYPES, parse
from .results import Candidate, Explain, MoreSection, Notice, PathContext, Response, Result
from .snippets import snippet, surface_hits

LEG_DEPTH = 50  # candidates each leg contributes to fusion (at least top_k)
OTHER_STOPWORDS = 2  # another language's stopwords that take a query from the English leg (english_query)
LEG_THREADS = 8  # dense legs running beside BM25 legs at once, across a process's searches (kb serve's slots)
BM25_ALONE_DEPTH = 10  # a lone BM25 leg (--mode bm25) ranks top_k, and at least the 10 its confidence features read
# Scripts an embedding model was trained on, by model name. A dense leg on a script the model
# never saw ranks noise (bench/notes/2026-11-30-e5-multilingual.md) and drags hybrid below
# BM25 alone, so such queries skip the dense legs, with a notice.
EMBEDDER_SCRIPTS = {"all-MiniLM-L6-v2": ("latin",)}


class SearchError(UsageError):
    """Bad search input (exit 2)."""


class Searcher:
    """Holds an open Index and lazily loaded models; safe to reuse for many queries.

    ``one_shot``: the process answers one search and exits (``kb search``). Its query is then
    embedded in place (models/query_encoder.py) instead of by CTranslate2, whose load costs a
    one-shot process more than its search (packaging/README.md); a long-lived process (kb serve,
    kb mcp, kb bench) pays that once and then embeds each query faster with its fused kernels.
    """

    def __init__(self, index, device: str = "auto", compute_type: str = "auto", reranker=None, one_shot: bool = False):
        self.ix = index
        self.ops = ops_of(index)
        self.one_shot = one_shot
        self.device, self.compute_type = device, compute_type
        self._embedders: dict = {}  # per dense leg (its section name): the loaded query embedder
        self._embedder_lock = threading.Lock()  # one embedder per leg, whichever thread asks first
        self._reranker = reranker
        self.defaults = resolve(stored_search(index.meta))  # the artifact's [search] over its model's and kb's defaults
        self.main = index.dense  # the main dense leg (a set's: the set itself, its model shared)
        self.english = index.english  # the English leg (format 5), or None
        if one_shot:  # past EXACT_SCAN_MAX chunks, search the graph without checking all of it first
            for m in members_of(index):
                for space in m.spaces():
                    space.walks = True

    # --- models --------------------------------------------------------------------------------
    @property
    def embedder(self):
        """The main dense leg's query embedder (``embedder_of``)."""
        return self.embedder_of(self.main)

    def embedder_of(self, space):
        """The query embedder of a dense leg (runtime/index.py DenseSpace): for a one-shot search,
        kb's in-place encoder (models/query_encoder.py) when the artifact has its section and no
        CTranslate2 setting was asked for (``--device cuda`` or a ``--compute-type``); else the
        CTranslate2 embedder the passages were embedded with."""
        embedder = self._embedders.get(getattr(space, "section", "main"))
        if embedder is not None:
            return embedder
        with self._embedder_lock:
            embedder = self._embedders.get(getattr(space, "section", "main"))
            if embedder is None:
                embedder = self._load_embedder(space)
                self.set_embedder(space, embedder)
        return embedder

    def _in_place(self, space) -> bool:
        """Whether ``space``'s queries are embedded by kb's in-place encoder (``embedder_of``)."""
        return self.one_shot and space.has_query_model and self.device != "cuda" and self.compute_type == "auto"

    def _load_embedder(self, space):
        """The query embedder ``embedder_of`` loads for ``space``."""
        if self._in_place(space):
            from kb.models.query_encoder import QueryEncoder

            # Its width is the card's dim (QueryEncoder checks), as the vector index's is
            # (DenseSpace.vectors checks): no need to wait for the index here.
            with self._packed_model("embedding model"):
                embedder = QueryEncoder(space.query_model, space.card or {})
        else:
            from kb.models.encoders import load_embedder

            with self._packed_model("embedding model"):
                embedder = load_embedder(space.model_files(), self.device, self.compute_type)
            if self.ix.has_vectors and embedder.dim != space.vector_dims:
                from kb.formats.artifact import CorruptArtifact

                raise CorruptArtifact(f"{self.ix.path}: corrupt artifact: vector index has {space.vector_dims} dimensions, its embedder {embedder.dim}")
        return embedder

    def _prepare_encoder(self, space) -> _Beside | None:
        """For a one-shot search that runs its legs one after the other: a thread that loads
        the in-place encoder and checks its layers while the BM25 leg runs
        (``QueryEncoder.prepare``), so that the forward pass finds them ready. None where there
        is nothing to prepare. Its errors are never read: the dense leg meets them again."""
        if not self._in_place(space) or getattr(space, "section", "main") in self._embedders:
            return None
        return _Beside("kb-prepare-encoder", lambda: self.embedder_of(space).prepare())

    def set_embedder(self, space, embedder) -> None:
        """Embed ``space``'s queries with ``embedder`` (a benchmark's precomputed vectors)."""
        self._embedders[getattr(space, "section", "main")] = embedder

    def space_for(self, text: str):
        """The dense leg a query's text is embedded for: the English leg, when the artifact has
        one and the text is in an alphabetic script and not in another language's words
        (``english_query``); else the main leg."""
        return self.english if self.english is not None and english_query(text) else self.main

    def options_for(self, o: SearchOptions, space) -> SearchOptions:
        """``o`` for a search routed to ``space``: where the main leg's model has defaults of its
        own (kb.common.options MODEL_DEFAULTS), the routed leg's model's defaults replace them,
        unless the request or the artifact's [search] set the key."""
        if space is self.main:
            return o
        routed = resolve(stored_search(self.ix.meta, space.name))
        keys = set(MODEL_DEFAULTS.get(self.main.name, {})) | set(MODEL_DEFAULTS.get(space.name, {}))
        keep = o.given | set(self.ix.meta.search or {})
        return o._replace(**{k: getattr(routed, k) for k in keys - keep})

    def reranker(self):
        """The cross-encoder: given to the Searcher, else the artifact's, else None."""
        if self._reranker is None and self.ix.has_reranker:
            from .cross_encoder import load_reranker

            with self._packed_model("reranker"):
                self._reranker = load_reranker(self.ix.model_files("model.rerank"), self.device, self.compute_type)
        return self._reranker

    @contextmanager
    def _packed_model(self, what: str):
        """A model the artifact packs that does not load or run on the CPU (an unparseable
        tokenizer, a model.bin CTranslate2 refuses, a card whose window cannot hold a query) makes
        the artifact unusable: a corrupt artifact (exit 3), not a failure of this machine. On
        CUDA, which this machine may lack, it stays a model error (exit 1)."""
        from kb.common.errors import ModelError

        try:
            yield
        except ModelError as e:
            if self.device == "cuda":
                raise
            from kb.formats.artifact import CorruptArtifact

            raise CorruptArtifact(f"{self.ix.path}: corrupt artifact: its {what} does not load: {e}") from None

    # --- the pipeline --------------------------------------------------------------------------
    def search(self, q: Query, options: SearchOptions | None = None) -> Response:
        o = options or self.defaults
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        top_k = self._validate(q, o)
        asked = q
        parsed = parse(q.text) if q.text.strip() and not q.literal else None
        notices: list[Notice] = []
        if parsed is not None:
            # the words that rank (the typed parts' too, for routing, snippets and the reranker); the syntax filters below
            q = q._replace(text=" ".join(filter(None, (parsed.text, parsed.lex, parsed.vec))), mode=self._typed_mode(q.mode, parsed))
            asked = asked._replace(mode=q.mode)
            if parsed.unknown:
                names = ", ".join(f"'{f}:'" for f in parsed.unknown)
                notices.append(Notice("unknown_field", f"unknown field {names} searched as words; the fields are {', '.join(f + ':' for f in FIELDS + TYPES)}"))
        space = self.space_for(q.text if q.text.strip() else " ".join(q.rewrites))
        o = self.options_for(o, space)
        use_bm25, use_vectors = self._legs_to_run(q, notices)
        if use_vectors:
            # opened and checked on another thread while this one applies the filters, runs the
            # BM25 leg and embeds the query; space.vectors waits for it (DenseSpace.prefetch_vectors)
            space.prefetch_vectors()
        ops = self.ops
        allowed = ops.allowed_mask(self.ix, q.statuses, q.all_statuses, q.tags, q.path)
        if parsed is not None and parsed.path:  # checked as --path is: a prefix no document has is a usage error
            allowed = allowed & ops.allowed_mask(self.ix, (), True, (), parsed.path)
        if parsed is not None and parsed.filters:
            scoped = ops.syntax_mask(self.ix, parsed, allowed)
            if not scoped.any() and allowed.any() and (parsed.phrases or parsed.title or parsed.section) and not ops.syntax_mask(self.ix, parsed._replace(excluded=()), allowed).any():
                # no chunk in scope holds the phrases (or title:/section: words) as written (not
                # merely excluded): say so, and search the words with the exclusions only,
                # rather than return nothing
                scoped = ops.syntax_mask(self.ix, parsed._replace(phrases=(), title=(), section=()), allowed)
                notices.append(Notice("phrase_not_found", f"no chunk contains {_quoted_requirements(parsed)} as written; these results hold the words in any order"))
            allowed = scoped
        timings["filter"] = _ms(t0)
        if not allowed.any():
            notices.append(self._empty_scope_notice(q))
        legs, qv = self._run_legs(q, parsed, o, space, allowed, top_k, use_bm25, use_vectors, notices, timings) if allowed.any() else ([], None)
        if o.adaptive_fusion and q.mode == "hybrid":
            legs = adapt_weights(legs, space.name)
        candidates = _candidates(fuse_rrf(legs, _fusion(o)), legs)

        fused = candidates
        rerank_info = None
        if o.rerank and q.mode == "hybrid":
            rr = self.reranker()
            if rr is None:
                notices.append(Notice("no_reranker", "no reranker in this artifact (kb-build packs one with --reranker default, or [search] rerank = true in kb.toml); results are in fused order"))
            elif candidates:
                t = time.perf_counter()
                query = q.text or " ".join(q.rewrites)
                candidates, rerank_info = rerank(
                    candidates,
                    lambda batch: [self.ix.chunk(c.chunk).text for c in batch],
                    lambda passages: rr.score(query, passages, passage_tokens=o.rerank_passage_tokens),
                    model=getattr(rr, "name", "reranker"),
                    depth=o.rerank_top,
                    how=o.blend,
                    rerank_weight=o.rerank_weight,
                    budget_ms=q.budget_ms,
                )
                timings["rerank"] = _ms(t)
        candidates = _grouped(self.ix, candidates, q.group, top_k)
        reranked = rerank_info is not None and rerank_info.scored > 0
        backend = backend_of(q.mode, reranked)
        candidates = self._with_confidence(candidates, top_k, legs, qv, space, backend, q.text)
        t = time.perf_counter()
        hit_terms = query_terms(self.ix, " ".join((q.text,) + q.rewrites))  # once, for every snippet
        hit_words: dict = {}  # artifact -> surface_hits, once per artifact that shows a result
        results = tuple(self._result(i + 1, c, q, hit_terms, hit_words) for i, c in enumerate(candidates))
        timings["render"] = _ms(t)
        if allowed.any():
            if candidates and exact_name(self.ix.chunk(candidates[0].chunk), q.text):
                pass  # the query names the top result: never "low confidence" (where, table of contents)
            elif reranked:  # the notice reads the retrieval's confidence (low_confidence's docstring)
                top = _grouped(self.ix, fused, q.group, top_k)
                notices.extend(low_confidence(self._with_confidence(top, top_k, legs, qv, space, "hybrid", q.text), o, "hybrid", "top fused result"))
            else:
                notices.extend(low_confidence(candidates, o, backend))
            notices.extend(no_match(legs, space.name))
        contexts = self._tag_contexts(candidates, results)
        timings["total"] = _ms(t0)
        return Response(asked, results, tuple(notices), contexts, reranked, timings, rerank_info, parsed).with_min_confidence(q.min_score)

    def _tag_contexts(self, candidates: list[Candidate], results) -> dict[str, str]:
        """Each result tag's description, from the result's own artifact (the first result that
        describes a tag gives its line)."""
        contexts: dict[str, str] = {}
        for c, r in zip(candidates, results):
            descr = self.ix.locate(c.chunk)[0].meta.tag_descriptions
            for t in r.tags:
                if not contexts.get(t):
                    contexts[t] = descr.get(t, "")
        return dict(sorted(contexts.items()))

    def _empty_scope_notice(self, q: Query) -> Notice:
        """The filters are valid but leave no chunk: say which, and what the query finds without them."""
        scope = [f"status {', '.join(q.statuses)}" if q.statuses else ("all statuses" if q.all_statuses else "the default statuses")]
        scope += [f"tag {t}" for t in q.tags] + ([f"path {q.path}"] if q.path else [])
        unfiltered = self.ops.match_count(self.ix, " ".join((q.text,) + q.rewrites))
        return Notice(
            "empty_scope",
            f"No chunk matches the filters together ({'; '.join(scope)}); without them the query's words match {unfiltered} chunk{'' if unfiltered == 1 else 's'}.",
        )

    def _validate(self, q: Query, o: SearchOptions) -> int:
        """Check the inputs; returns the effective top_k."""
        if q.mode not in MODES:
            raise SearchError(f"mode must be one of {', '.join(MODES)}, got {q.mode!r}")
        if not q.text.strip() and not q.entities and not any(r.strip() for r in q.rewrites):
            raise SearchError("give a query (or --entity/--rewrite); to list a scope use kb list")
        top_k = q.top_k if q.top_k is not None else o.default_limit
        if top_k < 1:
            raise SearchError(f"--top-k must be at least 1, got {top_k}")
        if q.group not in GROUPS:
            raise SearchError(f"group must be chunk or doc, got {q.group!r}")
        if q.mode == "vector" and not self.ix.has_vectors:
            raise SearchError("this artifact has no vectors (built with --embedder none); use --mode bm25")
        return top_k

    def _legs_to_run(self, q: Query, notices: list[Notice]) -> tuple[bool, bool]:
        """(BM25 legs?, dense legs?) for this query and artifact, with a notice for what is skipped."""
        use_bm25 = q.mode in ("hybrid", "bm25")
        use_vectors = q.mode in ("hybrid", "vector") and self.ix.has_vectors
        if use_vectors and q.mode == "hybrid" and not self._embedder_covers(" ".join((q.text,) + q.rewrites)):
            use_vectors = False
            name = (self.ix.meta.embedder or {}).get("name")
            notices.append(Notice("dense_skipped", f"the embedding model {name} does not cover this query's script (CJK); hybrid search used BM25 only"))
        return use_bm25, use_vectors

    def _with_confidence(self, candidates: list[Candidate], top_k: int, legs: list[Leg], qv, space, backend: str, text: str) -> list[Candidate]:
        """The first ``top_k`` candidates with their calibrated confidence (runtime/confidence.py,
        computed over at least MONOTONE_DEPTH of them, so that it does not depend on top_k);
        ``qv``: the query's embedding for the dense leg ``space``."""
        from kb.formats.analyzer import has_cjk

        candidates = candidates[: max(top_k, MONOTONE_DEPTH)]
        if not candidates:
            return candidates
        cosines = None
        if qv is not None:
            cosines = cosines_of(space.vectors_of(np.array([c.chunk for c in candidates], dtype=np.int64)), qv).tolist()
        rows = feature_rows(candidates, legs, cosines, space.name, has_cjk(text))
        probs = predict(backend, rows)
        return [c._replace(confidence=p, features=tuple(r)) for c, p, r in zip(candidates[:top_k], probs.tolist(), rows.tolist())]

    def _typed_mode(self, mode: str, parsed) -> str:
        """The legs a query with typed parts (lex:, vec:, hyde:) runs, as a mode: hybrid for both
        kinds, bm25 or vector for one. Under --mode bm25 or vector, a typed part that feeds the
        other leg is a usage error (plain words feed the mode's leg, as always)."""
        if not parsed.typed:
            return mode
        if (parsed.vec or parsed.hyde) and not self.ix.has_vectors:
            raise SearchError("vec: and hyde: feed the dense leg, and this artifact has no vectors (built with --embedder none); use lex: or plain words")
        if mode != "hybrid":
            other = [k + ":" for k in (("vec", "hyde") if mode == "bm25" else ("lex",)) if getattr(parsed, k)]
            if other:
                raise SearchError(f"--mode {mode} does not run the {'dense' if mode == 'bm25' else 'BM25'} leg that {' and '.join(other)} feed{'s' if len(other) == 1 else ''}; leave --mode out")
            return mode
        lexical, dense = parsed.legs_text()
        return "hybrid" if lexical and (dense or parsed.hyde) else "bm25" if lexical else "vector"

    def _run_legs(self, q: Query, parsed, o: SearchOptions, space, allowed, top_k: int, use_bm25: bool, use_vectors: bool, notices: list[Notice], timings: dict) -> tuple[list[Leg], np.ndarray | None]:
        """BM25 and dense legs (over ``space``) for the query (its typed parts: the lex: part the
        BM25 leg's, the vec: part the dense leg's, hyde: a dense leg of its own) and each rewrite,
        then the tag leg for entities; and the query's own embedding (None without a dense leg)."""
        depth = max(LEG_DEPTH, top_k, o.rerank_top)
        if q.mode == "bm25" and not q.rewrites and not q.entities and q.group == "chunk":
            depth = max(top_k, BM25_ALONE_DEPTH)  # one leg: fusion keeps its order, nothing reranks
        # (suffix, the BM25 leg's text, the dense leg's text, scale); None: no such leg
        if parsed is not None and parsed.typed:
            lexical, dense_text = parsed.legs_text()
            texts = [("", lexical, dense_text or parsed.hyde or None, 1.0)] + ([(":hyde", None, parsed.hyde, 1.0)] if parsed.hyde and dense_text else [])
        else:
            texts = [("", q.text, q.text, 1.0)] if q.text.strip() else []
        texts += [(f":rewrite{i + 1}", r, r, o.rewrite_weight) for i, r in enumerate(q.rewrites) if r.strip()]
        fixed = o.semantic_weight if q.mode == "hybrid" else None  # None: each text's own share, by its length
        legs: list[Leg] = []
        qv = None

        def embed(text: str) -> np.ndarray:
            with self._packed_model("embedding model"):  # a packed model that cannot embed the query
                return self.embedder_of(space).embed_query(text)

        def dense(text: str, name: str, weight: float) -> tuple[np.ndarray, Leg, float]:
            t = time.perf_counter()
            v = embed(text)
            return v, self.ops.vector_leg(space, name, v, weight, depth, allowed), _ms(t)

        run_bm25, run_dense = use_bm25 and fixed != 1.0, use_vectors and fixed != 0.0
        # Both legs in a long-lived process: the dense one on a thread beside this one (usearch's
        # search and CTranslate2 let go of the GIL), so a hybrid search costs about its slower leg
        # instead of the sum of both. A one-shot search runs its legs one after the other where its
        # dense leg scans a small artifact's vectors (the in-place encoder and the scan are short,
        # and a leg's thread would only wait for the GIL), and meanwhile loads the encoder and
        # checks its layers on a thread beside the BM25 leg (``_prepare_encoder``: the crc32s let
        # go of the GIL). Where it walks a graph (past EXACT_SCAN_MAX chunks), it embeds the query
        # first (the encoder's layer checks on its helper threads, nothing else running), then
        # runs the BM25 leg on a plain thread beside the walk, which lets go of the GIL and spends
        # its time on the first touches of the pages it reads (bench/notes/2026-12-02-scale-million.md).
        pool = _leg_pool() if run_bm25 and run_dense and not self.one_shot else None
        beside = run_bm25 and run_dense and self.one_shot and getattr(space, "walks_graph", False)
        early = self._prepare_encoder(space) if run_bm25 and run_dense and self.one_shot and not beside and texts else None
        # Each text's legs get its share of ``scale``: the fixed one, or (auto) one set after the
        # legs ran, from its BM25 leg's count of distinct words (fusion.length_weight).
        w_dense, w_lex = (1.0, 1.0) if fixed is None else (fixed, 1.0 - fixed)
        try:
            for suffix, lex_text, dense_text, scale in texts:
                both = run_bm25 and lex_text is not None and run_dense and dense_text is not None
                pending = pool.submit(dense, dense_text, "vector" + suffix, w_dense * scale) if pool is not None and both else None
                if beside and both:
                    t = time.perf_counter()
                    v = embed(dense_text)
                    lexical = _Beside("kb-bm25-leg", self.ops.bm25_leg, self.ix, "bm25" + suffix, lex_text, w_lex * scale, depth, allowed)
                    try:
                        leg = self.ops.vector_leg(space, "vector" + suffix, v, w_dense * scale, depth, allowed)
                    except BaseException:
                        lexical.join()  # never leave it reading the map after the search is over
                        raise
                    ms = _ms(t)
                    legs.append(lexical.result())
                    timings["bm25"] = timings.get("bm25", 0.0) + lexical.ms
                    qv = v if qv is None else qv
                    legs.append(leg)
                    timings["vector"] = timings.get("vector", 0.0) + ms
                    continue
                if run_bm25 and lex_text is not None:
                    t = time.perf_counter()
                    try:
                        legs.append(self.ops.bm25_leg(self.ix, "bm25" + suffix, lex_text, w_lex * scale, depth, allowed))
                    except BaseException:
                        if pending is not None:
                            pending.exception()  # waits: never leave the dense leg reading the map after the search is over
                        raise
                    timings["bm25"] = timings.get("bm25", 0.0) + _ms(t)
                if run_dense and dense_text is not None:
                    v, leg, ms = pending.result() if pending is not None else dense(dense_text, "vector" + suffix, w_dense * scale)
                    qv = v if qv is None else qv
                    legs.append(leg)
                    timings["vector"] = timings.get("vector", 0.0) + ms
        finally:
            if early is not None:
                early.join()  # never leave it reading the map after the search is over
        if fixed is None and q.mode == "hybrid":
            legs = _length_shares(legs, texts, lambda text: (len(set(query_words(self.ix, text))), query_stopwords(self.ix, text)))
        if q.entities:
            tiebreak = {f.chunk: f.score for f in fuse_rrf(legs, _fusion(o))} if legs else {}
            tag = self.ops.tag_leg(self.ix, q.entities, o.tag_weight, depth, allowed, tiebreak)
            if not tag.hits:
                notices.append(Notice("no_tag_match", f"no tag matches the entities {', '.join(q.entities)}"))
            legs.append(tag)
        return legs, qv

    def _embedder_covers(self, text: str) -> bool:
        from kb.formats.analyzer import has_cjk

        name = (self.ix.meta.embedder or {}).get("name")
        scripts = EMBEDDER_SCRIPTS.get(name)
        return scripts is None or "cjk" in scripts or not has_cjk(text)

    def _more_sections(self, chunks: tuple[int, ...] | None) -> tuple[MoreSection, ...] | None:
        if not chunks:
            return None
        recs = [self.ix.chunk(c) for c in chunks]
        return tuple(MoreSection(r.chunk_id, r.section, r.lines) for r in recs)

    def _result(self, rank: int, c: Candidate, q: Query, hit_terms: list[str], hit_words: dict) -> Result:
        member, local = self.ix.locate(c.chunk)
        rec = member.chunk(local)
        if not q.full and "\n" in rec.text and member not in hit_words:  # one line is its own snippet
            hit_words[member] = surface_hits(member, hit_terms)
        explain = None
        if q.explain:
            f = c.fused
            explain = Explain(
                legs={name: {"rank": r, "raw_score": round(s, 6), "rrf": round(part, 6)} for name, (r, s, part) in sorted(f.contributions.items())},
                bonus=f.bonus,
                rrf=round(f.score, 6),
                rerank=c.rerank,
                confidence_features=dict(zip(FEATURES, (round(x, 6) for x in c.features))) if c.features else None,
            )
        return Result(
            rank=rank,
            score=round(float(c.score), 6),
            score_kind=c.score_kind,
            confidence=round(float(c.confidence), 4),
            path=rec.path,
            section=rec.section,
            lines=rec.lines,
            status=rec.status,
            tags=rec.tags,
            path_contexts=tuple(PathContext(p, d) for p, d in member.meta.contexts_of(rec.path)),
            chunk_id=rec.chunk_id,
            chunk_key=rec.chunk_key,
            doc_id=rec.doc_id,
            title=rec.title,
            artifact=member.name,
            artifact_id=member.artifact.id,
            text=rec.text if q.full else None,
            snippet=None if q.full else snippet(rec.text, hit_terms, analyzer_of(self.ix), words=hit_words.get(member)),
            also_matched=c.also_matched,
            more_sections=self._more_sections(c.more_sections),
            explain=explain,
        )


def english_query(text: str) -> bool:
    """Whether a query is for the English leg: no CJK character, and no other language has at
    least ``OTHER_STOPWORDS`` of its stopwords (formats/stopwords.py) in it and more than
    English has. A query with none ("restic backup") or one word another language shares by
    chance (Italian "per" in "partialCached variant key per section") is taken as English;
    "wie sichere ich die Datenbank" goes to the multilingual leg."""
    from kb.formats.analyzer import Analyzer, has_cjk

    if has_cjk(text):
        return False
    words = set(Analyzer().words(text))
    counts = {lang: len(words & stop) for lang, stop in _stop_sets().items()}
    return all(n <= counts["en"] or n < OTHER_STOPWORDS for n in counts.values())


@lru_cache(maxsize=1)
def _stop_sets() -> dict[str, frozenset]:
    from kb.formats.stopwords import STOPWORDS

    return {lang: frozenset(words) for lang, words in STOPWORDS.items()}


def _quoted_requirements(parsed) -> str:
    """The phrases and title:/section: scopes of a query, as the user wrote them."""
    parts = [f'"{p}"' for p in parsed.phrases] + [f'{k}:"{v}"' if " " in v else f"{k}:{v}" for k, vs in (("title", parsed.title), ("section", parsed.section)) for v in vs]
    return ", ".join(parts)


def _length_shares(legs: list[Leg], texts, count_words) -> list[Leg]:
    """The legs of each (suffix, BM25 text, dense text, scale) in ``texts`` weighted by the text's
    own dense share (fusion.length_weight of its distinct words and stopwords: its BM25 leg's
    counts, else ``count_words``'s)."""
    by_name = {lg.name: i for i, lg in enumerate(legs)}
    out = list(legs)
    for suffix, lex_text, dense_text, scale in texts:
        b = by_name.get("bm25" + suffix)
        share = length_weight(*((legs[b].words, legs[b].stops) if b is not None else count_words(lex_text or dense_text)))
        for name, w in (("bm25" + suffix, 1.0 - share), ("vector" + suffix, share)):
            if name in by_name:
                out[by_name[name]] = legs[by_name[name]]._replace(weight=w * scale)
    return out


def _fusion(o: SearchOptions) -> FusionParams:
    return FusionParams(o.rrf_k, o.rank1_bonus, o.rank23_bonus)


def _candidates(fused: list[Fused], legs: list[Leg]) -> list[Candidate]:
    """Fused candidates. With a single BM25 or dense leg the score is that leg's raw score
    (score_kind bm25 or cosine); otherwise it is the RRF score."""
    single = [lg for lg in legs if lg.hits]
    kind = single[0].kind if len(single) == 1 and single[0].kind in ("bm25", "cosine") else "rrf"
    return [Candidate(f.chunk, f.contributions[single[0].name][1] if kind != "rrf" else f.score, kind, f) for f in fused]


class _SingleOps:
    """The legs and filters of one artifact; runtime/collection.py has the same names for a set."""

    allowed_mask = staticmethod(allowed_mask)
    syntax_mask = staticmethod(syntax_mask)
    bm25_leg = staticmethod(legs_.bm25_leg)
    vector_leg = staticmethod(legs_.vector_leg)
    tag_leg = staticmethod(legs_.tag_leg)

    @staticmethod
    def match_count(ix, text: str) -> int:
        from .bm25 import bm25_scores

        return len(bm25_scores(ix, query_terms(ix, text))[0])


def ops_of(index):
    """The legs and filters for ``index``: one artifact's, or a set's (imported only for a set)."""
    if hasattr(index, "members"):
        from . import collection

        return collection
    return _SingleOps


@lru_cache(maxsize=None)
def _leg_pool():
    """The threads that run dense legs beside their searches' BM25 legs (``Searcher._run_legs``):
    one per concurrent search, up to LEG_THREADS; a search past that waits for a free one. A
    forked child gets a pool of its own (``os.register_at_fork`` below): the parent's copy counts
    threads the child does not have, and a search submitted to it would wait forever."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=LEG_THREADS, thread_name_prefix="kb-dense-leg")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_leg_pool.cache_clear)


class _Beside(threading.Thread):
    """``fn(*args)`` on a thread of its own, started at once; ``result()`` waits for it and
    returns its value or raises its exception here (one never asked for is dropped); ``ms``: how
    long it ran. A one-shot search's two helpers (``Searcher._run_legs``: the BM25 leg beside a
    graph walk, the in-place encoder's layer checks beside the BM25 leg), where importing
    concurrent.futures for one task would cost more than the thread saves. A long-lived
    process's dense legs keep ``_leg_pool``'s warm threads: on a fresh thread per search the
    CTranslate2 embedding beside the BM25 leg ran several times slower."""

    def __init__(self, name: str, fn, *args):
        super().__init__(name=name, daemon=True)
        self._call, self._value, self._error, self.ms = (fn, args), None, None, 0.0
        self.start()

    def run(self) -> None:
        t = time.perf_counter()
        try:
            fn, args = self._call
            self._value = fn(*args)
        except BaseException as e:  # re-raised by result(), in the search's thread
            self._error = e
        self.ms = _ms(t)

    def result(self):
        self.join()
        if self._error is not None:
            raise self._error
        return self._value


def _ms(t: float) -> float:
    return round((time.perf_counter() - t) * 1000, 3)


PER_DOCUMENT = 2  # --group diverse: the most chunks of one document a result list shows


def _grouped(ix, candidates: list[Candidate], group: str, top_k: int) -> list[Candidate]:
    """The candidates as ``group`` shows them: ``_diverse``, ``_group_by_doc`` or as they are (chunk)."""
    if group == "doc":
        return _group_by_doc(ix, candidates)
    return _diverse(ix, candidates, top_k) if group == "diverse" else candidates


def _diverse(ix, candidates: list[Candidate], top_k: int) -> list[Candidate]:
    """The candidates in order, skipping any past PER_DOCUMENT of one document. A document's best
    candidate names the chunks of it skipped above the ``top_k``-th shown (``more_sections``, in
    fused order): those the first ``top_k`` would have held but for the limit."""
    kept, skipped, per_doc = [], {}, {}
    for c in candidates:
        d = ix.doc_of(c.chunk)
        if per_doc.get(d, 0) < PER_DOCUMENT:
            kept.append((c, d))
            per_doc[d] = per_doc.get(d, 0) + 1
        elif len(kept) < top_k:
            skipped.setdefault(d, []).append(c.chunk)
    out = []
    for c, d in kept:
        more = skipped.pop(d, None)
        out.append(c._replace(more_sections=tuple(more)) if more else c)
    return out


def _group_by_doc(ix, candidates: list[Candidate]) -> list[Candidate]:
    """The best candidate of each document, in order, counting the document's other matches."""
    first: dict[int, int] = {}
    extra: dict[int, int] = {}
    for i, c in enumerate(candidates):
        d = ix.doc_of(c.chunk)
        if d in first:
            extra[d] += 1
        else:
            first[d], extra[d] = i, 0
    return [candidates[i]._replace(also_matched=extra[d]) for d, i in first.items()]


def no_match(legs: list[Leg], model: str | None) -> list[Notice]:
    """The ``no_match`` notice, for a query none of whose words the index holds (its BM25 leg
    knows none of its terms) and whose dense leg, if it ran, found nothing close in meaning (a top
    cosine under fusion.COS_STRONG on all-MiniLM-L6-v2's scale: what unrelated text reaches
    against a corpus of thousands of chunks). The results are still returned, as the nearest in
    meaning, beside the low-confidence notice they get: a warning, never a filter."""
    bm25 = next((lg for lg in legs if lg.name == "bm25"), None)
    if bm25 is None or bm25.known is None or bm25.known > 0:
        return []
    dense = next((lg for lg in legs if lg.name == "vector"), None)
    top = dense.strength if dense is not None else 0.0
    to_minilm = minilm_cosine(model)
    if (to_minilm(top) if to_minilm is not None and dense is not None else top) >= COS_STRONG:
        return []
    reason = "no word of the query is in the index" + (f"; the nearest chunk's cosine is {top:.2f}" if dense is not None else "")
    return [Notice("no_match", "No match: nothing holds the query's words or comes close in meaning; the results, if any, are only the nearest. Check the spelling, or whether the topic is documented at all.", reason=reason)]


def _name_key(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def exact_name(rec, text: str) -> bool:
    """Whether a query names a chunk exactly: its words, case and punctuation aside, are the
    document's title, the chunk's own heading, its file name or folder (index.md, _index.md,
    README), or the last part of one of these read as an identifier (``collections.Where``,
    ``runbooks/disk-full.md``, ``TableOfContents``): "where", "table of contents"."""
    want = _name_key(text)
    if not want:
        return False
    stem = rec.path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    generic = stem.casefold() in ("index", "_index", "readme")  # named by its folder, not its file
    names = [rec.title, rec.section.rsplit(" > ", 1)[-1], rec.path.rsplit("/", 2)[-2] if generic and "/" in rec.path else "" if generic else stem]
    return any(want in (_name_key(n), _name_key(re.split(r"[./:]", n)[-1])) for n in names if n)


def low_confidence(candidates: list[Candidate], o: SearchOptions, backend: str, what: str = "top result") -> list[Notice]:
    """Warn (never suppress) when the top result's calibrated confidence is below the backend's
    floor (runtime/confidence.py: fitted so that it fires on at most 10% of the answerable dev
    queries of every dev set; ``low_confidence_floor`` overrides it), or when nothing matched at
    all. A reranked search is judged by its retrieval: the hybrid model's confidence in the top
    fused result, against the hybrid floor (the shipped cross-encoder's probabilities are nearly
    flat, and on the Hugo fixture the reranked top result told negatives apart less well:
    bench/notes/2026-12-02-confidence-model.md)."""
    msg = (
        "Low confidence: no strong match found. Consider a broader query, rebuilding the index "
        "if it is stale, or checking whether the topic is documented at all."
    )
    if not candidates:
        return [Notice("low_confidence", msg, reason="no results")]
    floor = o.low_confidence_floor if o.low_confidence_floor is not None else low_confidence_floor(backend)
    top = candidates[0].confidence
    if top is not None and top < floor:
        return [Notice("low_confidence", msg, reason=f"{what}'s confidence {top:.2f} is below the floor {floor:g}")]
    return []
