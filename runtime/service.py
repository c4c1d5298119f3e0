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

import os
import threading
import time
import re
from dataclasses import dataclass

from kb.common.errors import UsageError
from kb.common.options import DEFAULT_DOC_CHUNKS, MAX_GLOB_MATCHES, resolve, stored_search

from .requests import GetRequest, RequestError, SearchRequest
from .search import Query

RELOAD_POLL_S = 1.0  # how often kb serve and kb mcp stat their artifact files for a change
PATH_CUTOFF = 0.7  # difflib similarity of a path suggested for an unknown one ('nope.md' and 'notes/glossary.md' are 0.5)
CHUNK_KEY = re.compile(r"[0-9a-f]{16}")  # a chunk_key as results show it (formats/layout.py chunk_key)
LINE_RANGES = (re.compile(r"(.+):(\d{1,12}):(\d{1,12})"), re.compile(r"(.+):(\d{1,12})"))  # PATH:FROM:COUNT, then PATH:FROM


@dataclass(frozen=True)
class _Read:
    """What one get target reads: a chunk (with neighbours), a document's chunks, or lines."""

    kind: str  # chunk | document | lines
    at: int  # the chunk id, or the document index
    lines: tuple[int, int] | None = None  # lines: the first and last, 1-based

    def name(self, ix) -> str:
        return f"chunk {self.at}" if self.kind == "chunk" else ix.doc_path(self.at)


def too_large(what: str, n: int, limit: int, name: str = "max_bytes") -> str:
    """Why one get target is refused: its text is over the budget."""
    return f"{what} is {n:,} bytes of text, more than {name} {limit:,}; read part of it (PATH:FROM:COUNT) or raise {name}"


def _unclosed_bracket(pattern: str) -> bool:
    """Whether a [ in ``pattern`` has no closing ] (fnmatch would quietly match a literal [)."""
    i = 0
    while (i := pattern.find("[", i)) >= 0:
        j = i + 1
        j += pattern[j : j + 1] == "!"
        j += pattern[j : j + 1] == "]"  # a ] first in the set is a member
        i = pattern.find("]", j)
        if i < 0:
            return True
    return False


class Service:
    def __init__(self, ix, searcher=None, *, stale_check: bool = False, corpus_root: str | None = None, stale_ttl: float | None = None):
        """``stale_check``: compare the artifact with its corpus (off unless the operator asks:
        the artifact names the root, and a crafted one could name any folder); ``corpus_root``:
        the operator's own root to compare with instead, the only one whose paths a report
        names (without it a report gives counts). Rechecked at most every ``stale_ttl`` seconds."""
        from .search import Searcher

        self.ix = ix
        self.searcher = searcher or Searcher(ix)
        from .index import artifact_record

        self.artifact = artifact_record(ix)  # a list of them for a set
        from .stale import RECHECK_S

        self.stale_check, self.corpus_root = stale_check or corpus_root is not None, corpus_root
        self.stale_ttl = RECHECK_S if stale_ttl is None else stale_ttl
        self._stale: tuple[float, object] | None = None
        self._stale_lock = threading.Lock()
        self._doc_ids: dict[str, int] | None = None
        self._members: list[Service] | None = None  # a set's: one Service per member, for get
        self._doc_ids_lock = threading.Lock()
        self._info: dict | None = None

    def warm(self) -> Service:
        """Create every lazy view and load the models now, once, before requests share them."""
        from .index import members_of

        ix = self.ix
        for m in members_of(ix):
            for name in ("chunks", "lengths", "first_chunk", "doc_paths", "term_hashes", "term_strings", "_text_blocks", "_dctx"):
                getattr(m, name, None)
            for name in ("_impact_postings",) if m.version >= 3 else ("postings", "tf_offsets", "tf"):
                getattr(m, name)
            if m.has_sources:
                getattr(m, "_sources")  # noqa: B009 - a cached property: creating it is the point
            for space in m.spaces() if m.has_vectors else ():
                getattr(space, "vectors")  # noqa: B009 - opened and checked once: the point
        if ix.has_vectors:
            for space in (self.searcher.main, self.searcher.english):
                if space is not None:
                    self.searcher.embedder_of(space)
        self.searcher.reranker()
        if ix.n_chunks:  # first-call costs, not the first client's
            self.searcher.search(Query("warm up", top_k=1, all_statuses=True), resolve(stored_search(ix.meta), {"rerank_top": 1}))
        self.info()
        if self.stale_check:
            self.stale_notices()
        return self

    # --- search --------------------------------------------------------------------------------
    def search(self, req: SearchRequest) -> dict:
        from .output import response_dict

        try:
            options = resolve(stored_search(self.ix.meta), req.options)
            resp = self.searcher.search(req.query, options)
        except UsageError as e:
            raise RequestError("bad_value", str(e)) from None
        return response_dict(resp.with_notices(self.stale_notices()), self.artifact)

    def stale_notices(self) -> list:
        """The stale-index notices (one per stale artifact), rechecked at most every ``stale_ttl`` seconds."""
        if not self.stale_check:
            return []
        with self._stale_lock:
            now = time.monotonic()
            if self._stale is None or now - self._stale[0] > self.stale_ttl:
                from .index import members_of
                from .stale import SEARCH_HASH_BYTES, stale_notices, stale_report

                reports = [stale_report(m.manifest(), self._hash_bytes(SEARCH_HASH_BYTES), self.corpus_root) for m in members_of(self.ix)]
                self._stale = (now, stale_notices(self.ix, reports, paths=self.corpus_root is not None))
            return self._stale[1]

    def _hash_bytes(self, budget: int | None) -> int | None:
        """What a check may hash: nothing under a root only the artifact names (a crafted one
        would make the server answer whether a file of its own holds given bytes)."""
        return budget if self.corpus_root is not None else 0

    # --- get -----------------------------------------------------------------------------------
    def get(self, req: GetRequest) -> dict:
        """One record for a chunk_id, chunk_key, doc_id or path (a path may be PATH:FROM[:COUNT]); for targets
        and a glob (``req.many``), the records that fit in max_bytes, in order, and what was
        omitted. Every target is resolved and checked before anything is read (``_target``, the
        one resolver of kb get, HTTP /get and MCP get), so a bad one fails the whole request. Of a
        set, the member named by ``member``, else the one member that holds every target."""
        if hasattr(self.ix, "members"):
            return self.member_for(req).get(req._replace(member=None))
        if req.member is not None and req.member not in (self.ix.name, self.ix.artifact.id):
            raise RequestError("not_found", f"no artifact {req.member!r} here; this one is {self.ix.name} ({self.ix.artifact.id})", "member")
        if req.many:
            return self._get_many(req)
        if req.chunk_id is not None:
            r = self._chunk(req.chunk_id, "chunk_id")
        elif req.chunk_key is not None:
            r = self._key(req.chunk_key, "chunk_key")
        else:
            field = "path" if req.path is not None else "doc_id"
            r = self._target(req.path if req.path is not None else req.doc_id, field)
        out = self._read(r, req)
        n = text_bytes(out)
        if n > req.max_bytes:
            raise RequestError("too_large", too_large(r.name(self.ix), n, req.max_bytes), "max_bytes")
        out["artifact"] = self.artifact
        return out

    def member_for(self, req: GetRequest) -> Service:
        """The Service of the set's member that ``req`` reads: the one ``member`` names, else the
        only one in which every target resolves."""
        from .index import members_of

        with self._doc_ids_lock:
            if self._members is None:
                self._members = [Service(m, self.searcher, stale_check=False) for m in members_of(self.ix)]
        names = ", ".join(s.ix.name for s in self._members)
        if req.member is not None:
            found = [s for s in self._members if req.member in (s.ix.name, s.ix.artifact.id)]
            if not found:
                raise RequestError("not_found", f"no artifact {req.member!r} in this set; its artifacts: {names}", "member")
            return found[0]
        holders = [s for s in self._members if s._holds(req)]
        if len(holders) == 1:
            return holders[0]
        what = "chunk ids count within each artifact" if req.chunk_id is not None or any(t.isascii() and t.isdigit() for t in req.targets) else f"{len(holders)} artifacts hold it"
        if holders:
            raise RequestError("bad_request", f"{what} of the set: name one with member (kb get --member NAME): {', '.join(s.ix.name for s in holders)} (a search result's artifact)", "member")
        raise RequestError("not_found", f"no artifact of the set ({names}) holds every target; read each from its own (member, kb get --member NAME)", "member")

    def _holds(self, req: GetRequest) -> bool:
        """Whether every target of ``req`` resolves in this artifact (not_found: no; any other
        refusal is this artifact's answer, so yes)."""
        try:
            if req.chunk_id is not None:
                self._chunk(req.chunk_id, "chunk_id")
            if req.chunk_key is not None:
                self._key(req.chunk_key, "chunk_key")
            for t in req.targets or [v for v in (req.path, req.doc_id) if v is not None]:
                self._target(t, "targets" if req.targets else "path", suggest=False)
            if req.glob is not None:
                self._glob(req.glob)
        except RequestError as e:
            return e.code != "not_found"
        return True

    def _get_many(self, req: GetRequest) -> dict:
        reads = [(t, self._target(t)) for t in req.targets]
        if req.glob is not None:
            reads += [(self.ix.doc_path(d), _Read("document", d)) for d in self._glob(req.glob)]
        items, omitted, used = [], [], 0
        for target, r in reads:
            rec = self._read(r, req)
            n = text_bytes(rec)
            if used + n > req.max_bytes:
                omitted.append({"target": target, "bytes": n, "reason": f"more than the {req.max_bytes - used:,} bytes left of max_bytes {req.max_bytes:,}"})
                continue
            used += n
            items.append({"target": target, **rec})
        return {"items": items, "omitted": omitted, "bytes": used, "max_bytes": req.max_bytes, "artifact": self.artifact}

    def _read(self, r: _Read, req: GetRequest) -> dict:
        if r.kind == "chunk":
            return get_chunk(self.ix, r.at, req.context)
        if r.kind == "document":
            return get_document(self.ix, r.at, req.max_chunks)
        return get_lines(self.ix, r.at, *r.lines)

    def _chunk(self, cid: int, field: str) -> _Read:
        if not 0 <= cid < self.ix.n_chunks:
            raise RequestError("not_found", f"no chunk {cid}; this artifact has chunk ids 0..{self.ix.n_chunks - 1}", field)
        return _Read("chunk", cid)

    def _key(self, key: str, field: str) -> _Read:
        cid = self.ix.chunk_of_key(key) if CHUNK_KEY.fullmatch(key) else None
        if cid is not None:
            return _Read("chunk", cid)
        if not self.ix.has_keys:
            raise RequestError("not_found", f"no chunk with key {key!r}: this artifact has no chunk keys (built before them); rebuild it with kb-build", field)
        why = "a key is 16 hex digits" if not CHUNK_KEY.fullmatch(key) else "a chunk's key changes when its text or its document's path does; search again"
        raise RequestError("not_found", f"no chunk with key {key!r} ({why})", field)

    def _target(self, target: str, field: str = "targets", suggest: bool = True) -> _Read:
        """What a target names: a chunk key or id (a ``targets`` entry only), a document (path,
        then doc_id), or PATH:FROM[:COUNT]; not found: the closest paths (``suggest``) named."""
        if field == "targets" and CHUNK_KEY.fullmatch(target) and (self.ix.chunk_of_key(target) is not None or self._doc(target) is None):
            return self._key(target, field)
        if field == "targets" and target.isascii() and target.isdigit():
            return self._chunk(int(target), field)
        d = self._doc(target)
        if d is not None:
            return _Read("document", d)
        ranges = [m for rx in LINE_RANGES if (m := rx.fullmatch(target))]
        for m in ranges:
            if (d := self._doc(m[1])) is not None:
                return self._line_range(target, d, int(m[2]), int(m[3]) if m.re.groups == 3 else None, field)
        named = "path or doc_id" if field == "targets" else field
        closest = self._closest_path(ranges[0][1] if ranges else target) if suggest else ""
        raise RequestError("not_found", f"no document with {named} {target!r}{closest}", field)

    def _doc(self, name: str) -> int | None:
        d = self.ix.doc_by_path(name)
        return d if d is not None else self._doc_by_id(name)

    def _line_range(self, target: str, d: int, first: int, count: int | None, field: str = "targets") -> _Read:
        ix = self.ix
        if not ix.has_sources:
            raise RequestError("bad_request", f"this artifact was built without its documents' source lines (before kb get took line ranges); rebuild it with kb-build to read {target!r}", field)
        if first < 1:
            raise RequestError("bad_value", f"{target!r}: lines are numbered from 1, not {first}", field)
        if count is not None and count < 1:
            raise RequestError("bad_value", f"{target!r}: COUNT must be at least 1, got {count}", field)
        n = len(ix.source_lines(d))
        if first > n:
            raise RequestError("bad_value", f"{target!r} starts past the end: {ix.doc_path(d)} has {n} line{'' if n == 1 else 's'}", field)
        return _Read("lines", d, (first, n if count is None else min(n, first + count - 1)))

    def _glob(self, pattern: str) -> list[int]:
        """The documents whose path matches ``pattern`` (fnmatch, as kb-build --include), in path order."""
        import fnmatch
        import re

        if not pattern:
            raise RequestError("bad_value", "glob is empty; give a pattern such as 'runbooks/*.md'", "glob")
        if _unclosed_bracket(pattern):
            raise RequestError("bad_value", f"glob {pattern!r} has a [ that is never closed (to match [ itself, write [[])", "glob")
        rx = re.compile(fnmatch.translate(pattern))
        found = [d for d in range(self.ix.n_docs) if rx.match(self.ix.doc_path(d))]
        if not found:
            raise RequestError("not_found", f"no document path matches glob {pattern!r}", "glob")
        if len(found) > MAX_GLOB_MATCHES:
            raise RequestError("bad_value", f"glob {pattern!r} matches {len(found):,} documents; the most is {MAX_GLOB_MATCHES:,}: narrow it", "glob")
        return found

    def _closest_path(self, value: str) -> str:
        from .filters import closest

        return closest(value, (self.ix.doc_path(d) for d in range(self.ix.n_docs)), cutoff=PATH_CUTOFF)

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
            from .index import members_of
            from .info import describe

            infos = [describe(m) for m in members_of(self.ix)]
            self._info = {"artifacts": infos} if hasattr(self.ix, "members") else infos[0]
        return self._info

    def status(self) -> dict:
        """``kb status --json`` (the files that changed, were added or removed since the build, and
        ``fresh``) with the artifact's counts and models: when the operator turned the stale check
        on, and with paths only under the operator's corpus root (else ``differences``, counts);
        otherwise ``checked`` false and ``fresh`` null."""
        from .index import artifact_record, members_of
        from .stale import differences, status_report

        out = []
        for ix in members_of(self.ix):
            m = ix.meta
            if not self.stale_check:
                rep = {"checked": False, "fresh": None, "reason": "this server does not compare the artifact with its corpus (kb serve/mcp --stale-check turns it on)"}
            else:
                rep = status_report(ix.manifest(), self.corpus_root, self._hash_bytes(None))
                rep = {"checked": True, **rep, "differences": differences(rep)}
                if self.corpus_root is None:  # the root the artifact names: counts, never its paths
                    rep = {k: v for k, v in rep.items() if k not in ("root", "changed", "added", "removed", "touched")}
            out.append({**rep, "counts": m.counts._asdict(), "models": {"embedder": m.embedder, "reranker": m.reranker}, "artifact": artifact_record(ix)})
        fresh = None if not self.stale_check else all(s["fresh"] for s in out)
        return {"fresh": fresh, "artifacts": out} if hasattr(self.ix, "members") else out[0]

    def health(self) -> dict:
        return {"status": "ok", "artifact": self.artifact, "chunks": self.ix.n_chunks, "documents": self.ix.n_docs}


def file_state(path) -> tuple | None:
    """What a change of the file at ``path`` changes: (device, inode, size, mtime); None if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class Reloading:
    """kb serve's and kb mcp's Service over artifact files that may change while they run
    (README, "Artifacts that change while kb serve or kb mcp runs"). ``open_service()`` reads each artifact into the process's own memory
    (formats/artifact.py ``Artifact(private=True)``) and verifies every checksum, so a file
    overwritten or truncated in place never faults a request. A watcher thread stats ``paths``
    every ``poll_s``; once they changed and then stayed the same for one more poll, it opens them
    again and switches to the new Service. Until then, and while the files are not a whole
    artifact (``log`` says why, once per change), requests are answered from the old bytes.
    Attributes are the current Service's; a request keeps the one it started with."""

    def __init__(self, svc: Service, open_service, paths, log, before: dict | None = None, poll_s: float = RELOAD_POLL_S):
        """``svc``: the first Service, opened by ``open_service``; ``before``: the state of some
        of ``paths`` taken before it was opened (a change during that open is then not missed)."""
        self._svc, self._open, self._log = svc, open_service, log
        self._paths = list(dict.fromkeys(str(p) for p in paths))
        self._state = [(before or {}).get(p, file_state(p)) for p in self._paths]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(poll_s,), name="kb-reload", daemon=True)
        self._thread.start()

    def __getattr__(self, name):
        return getattr(self._svc, name)

    def _states(self) -> list:
        return [file_state(p) for p in self._paths]

    def _watch(self, poll_s: float) -> None:
        seen = self._state
        while not self._stop.wait(poll_s):
            now = self._states()
            if now != self._state and now == seen:
                self.reload(now)
            seen = now

    def reload(self, state: list) -> None:
        """Open the files again; switch when they are a whole artifact that did not change while read."""
        try:
            svc = self._open()
        except Exception as e:  # noqa: BLE001 - the watcher outlives any file it is shown
            self._state = state  # not again until the files change again
            from kb.common.usage import printable

            self._log(printable(f"{' + '.join(self._paths)} changed but is not a usable artifact ({e}); still answering from the previous one"))
            return
        if self._states() != state:  # changed while it was read: the next polls try again
            svc.ix.close()
            return
        self._svc, self._state = svc, state  # the old one is freed with the last request that holds it
        self._log(f"reloaded {' + '.join(self._paths)}: {svc.ix.n_chunks} chunks")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._svc.ix.close()


# --- get: a chunk with its neighbours, or a whole document -----------------------------------
def _chunk_dict(ix, cid: int) -> dict:
    d = ix.chunk(cid)._asdict()
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


def get_lines(ix, d: int, first: int, last: int) -> dict:
    """Lines ``first``..``last`` (1-based, inclusive) of document ``d``'s source, as kb-build read it."""
    lines = ix.source_lines(d)
    return {"document": doc_summary(ix, d), "lines": [first, last], "total_lines": len(lines), "text": "\n".join(lines[first - 1 : last])}


def text_bytes(record: dict) -> int:
    """UTF-8 bytes of the text a get record carries (what max_bytes counts)."""
    chunks = [record["chunk"], *record["previous"], *record["next"]] if "chunk" in record else record.get("chunks", [record])
    return sum(len(c["text"].encode("utf-8")) for c in chunks)


def get_document(ix, d: int, max_chunks: int = DEFAULT_DOC_CHUNKS) -> dict:
    """Document ``d``'s chunks in order (at most ``max_chunks``; ``truncated`` says if more exist)."""
    chunks = ix.doc_chunks(d)
    keep = ("chunk_id", "chunk_key", "section", "lines", "text")
    return {
        "document": doc_summary(ix, d),
        "chunks": [{k: _chunk_dict(ix, c)[k] for k in keep} for c in chunks[:max_chunks]],
        "truncated": len(chunks) > max_chunks,
    }
