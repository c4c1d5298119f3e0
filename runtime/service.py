"""The service both servers share: one open Index and Searcher answering search, get, info and
health requests (runtime/requests.py parses them) from many threads.

Thread safety:

- The Index's lazy views (numpy tables, blob tables, the usearch view) are created once by
  ``Service.warm`` before the first request, so no two threads race to create them; after that
  they are read-only. Concurrent usearch ``search``/``get`` on one view were checked to give
  the serial results (8 threads).
- CTranslate2 ``Encoder.forward_batch`` is thread-safe: calls are queued to the model's worker
  pool (``inter_threads``, 1 by default) and run one at a time, so no lock is needed around
  inference; the embedder and reranker are loaded once, in ``warm``.
- A zstandard ``ZstdDecompressor`` must not be used by two threads at once (python-zstandard's
  documented rule); ``Index._block`` holds a lock around its shared decompressor and its
  bounded cache of decoded blocks.
- The search options are resolved per request into a new frozen value; the Searcher is shared.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict

from kb.common.errors import UsageError
from kb.common.options import resolve

from .requests import DEFAULT_DOC_CHUNKS, GetRequest, RequestError, SearchRequest
from .search import Query

STALE_TTL_S = 30.0  # how long a staleness check (one stat per corpus file) is reused


class Service:
    def __init__(self, ix, searcher=None, *, stale_check: bool = True, stale_ttl: float = STALE_TTL_S):
        from .search import Searcher

        self.ix = ix
        self.searcher = searcher or Searcher(ix)
        self.artifact = {"id": ix.artifact.id, "path": str(ix.path)}
        self.stale_check, self.stale_ttl = stale_check, stale_ttl
        self._stale: tuple[float, object] | None = None
        self._stale_lock = threading.Lock()
        self._doc_ids: dict[str, int] | None = None
        self._doc_ids_lock = threading.Lock()
        self._info: dict | None = None

    def warm(self) -> Service:
        """Create every lazy view and load the models now, once, before requests share them."""
        ix = self.ix
        for name in ("chunks", "lengths", "first_chunk", "doc_paths", "term_hashes", "term_strings", "postings", "tf_offsets", "tf", "_text_blocks", "_dctx"):
            getattr(ix, name, None)
        if ix.has_vectors:
            getattr(ix, "vectors")  # noqa: B009 - a cached property: creating it is the point
            getattr(self.searcher, "embedder")  # noqa: B009
        self.searcher.reranker()
        if ix.n_chunks:  # first-call costs, not the first client's
            self.searcher.search(Query("warm up", top_k=1, all_statuses=True), resolve(ix.meta.search, {"rerank_top": 1}))
        self.info()
        if self.stale_check:
            self.stale_notice()
        return self

    # --- search --------------------------------------------------------------------------------
    def search(self, req: SearchRequest) -> dict:
        from .output import response_dict

        try:
            options = resolve(self.ix.meta.search, req.options)
            resp = self.searcher.search(req.query, options)
        except UsageError as e:
            raise RequestError("bad_value", str(e)) from None
        return response_dict(resp.with_notice(self.stale_notice()), self.artifact)

    def stale_notice(self):
        """The stale-index notice, rechecked at most every ``stale_ttl`` seconds."""
        if not self.stale_check:
            return None
        with self._stale_lock:
            now = time.monotonic()
            if self._stale is None or now - self._stale[0] > self.stale_ttl:
                from .stale import stale_notice

                self._stale = (now, stale_notice(self.ix.manifest()))
            return self._stale[1]

    # --- get -----------------------------------------------------------------------------------
    def get(self, req: GetRequest) -> dict:
        ix = self.ix
        if req.chunk_id is not None:
            out = get_chunk(ix, req.chunk_id, req.context)
        else:
            d = ix.doc_by_path(req.path) if req.path is not None else self._doc_by_id(req.doc_id)
            if d is None:
                what, val = ("path", req.path) if req.path is not None else ("doc_id", req.doc_id)
                raise RequestError("not_found", f"no document with {what} {val!r}", what)
            out = get_document(ix, d, req.max_chunks)
        out["artifact"] = self.artifact
        return out

    def _doc_by_id(self, doc_id: str) -> int | None:
        ix = self.ix
        d = ix.doc_by_path(doc_id)  # a file's doc_id is its path: try that first
        if d is not None and doc_summary(ix, d)["doc_id"] == doc_id:
            return d
        with self._doc_ids_lock:  # JSON Lines ids: one pass over the documents, kept
            if self._doc_ids is None:
                self._doc_ids = {}
                for d in range(ix.n_docs):
                    chunks = ix.doc_chunks(d)
                    if chunks:
                        self._doc_ids.setdefault(ix.chunk(chunks[0]).doc_id, d)
            return self._doc_ids.get(doc_id)

    # --- info and health -----------------------------------------------------------------------
    def info(self) -> dict:
        if self._info is None:
            from .info import describe

            self._info = describe(self.ix)
        return self._info

    def health(self) -> dict:
        return {"status": "ok", "artifact": self.artifact, "chunks": self.ix.n_chunks, "documents": self.ix.n_docs}


# --- get: a chunk with its neighbours, or a whole document -----------------------------------
def _chunk_dict(ix, cid: int) -> dict:
    d = asdict(ix.chunk(cid))
    d["lines"], d["tags"] = list(d["lines"]), list(d["tags"])
    return d


def doc_summary(ix, d: int) -> dict:
    chunks = ix.doc_chunks(d)
    path = ix.doc_path(d)
    contexts = [{"prefix": p, "description": c} for p, c in ix.meta.contexts_of(path)]
    if not chunks:
        return {"doc_id": None, "path": path, "title": None, "status": None, "tags": [], "path_contexts": contexts, "n_chunks": 0, "first_chunk_id": chunks.start}
    r = ix.chunk(chunks[0])
    return {"doc_id": r.doc_id, "path": path, "title": r.title, "status": r.status, "tags": list(r.tags), "path_contexts": contexts, "n_chunks": len(chunks), "first_chunk_id": chunks.start}


def get_chunk(ix, chunk_id: int, context: int = 1) -> dict:
    """The chunk (full text) and up to ``context`` chunks before and after it in its document."""
    if not 0 <= chunk_id < ix.n_chunks:
        raise RequestError("not_found", f"no chunk {chunk_id}; this artifact has chunk ids 0..{ix.n_chunks - 1}", "chunk_id")
    d = ix.doc_of(chunk_id)
    chunks = ix.doc_chunks(d)
    return {
        "chunk": _chunk_dict(ix, chunk_id),
        "previous": [_chunk_dict(ix, c) for c in range(max(chunks.start, chunk_id - context), chunk_id)],
        "next": [_chunk_dict(ix, c) for c in range(chunk_id + 1, min(chunks.stop, chunk_id + 1 + context))],
        "document": doc_summary(ix, d),
    }


def get_document(ix, d: int, max_chunks: int = DEFAULT_DOC_CHUNKS) -> dict:
    """Document ``d``'s chunks in order (at most ``max_chunks``; ``truncated`` says if more exist)."""
    chunks = ix.doc_chunks(d)
    keep = ("chunk_id", "section", "lines", "text")
    return {
        "document": doc_summary(ix, d),
        "chunks": [{k: _chunk_dict(ix, c)[k] for k in keep} for c in chunks[:max_chunks]],
        "truncated": len(chunks) > max_chunks,
    }
