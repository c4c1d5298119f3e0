"""Several artifacts searched as one: ``kb search -i a.kb -i b.kb`` or ``-i SET.kbset``.

A ``Collection`` holds the open member Indexes and numbers their chunks one after another (member
k's chunk c is ``offsets[k] + c``, its document d is ``doc_offsets[k] + d``), so fusion, rerank,
confidence and grouping run on one id space as they do for one artifact; each result is mapped
back to its member (``locate``) for its text, path contexts and the ``artifact`` it names.

The legs run per member and merge:

- BM25 as if the corpus were one: N and each term's document frequency are summed over the
  members, so idf is the whole corpus's; the average chunk and document lengths are the whole
  corpus's too, and each member's stored impacts (saturated under its own averages) are
  re-expressed under them (formats/bm25.py ``recover_tf``, then ``tf_component`` and
  ``quantize_impacts`` under the corpus's averages). Built from one corpus split
  into contiguous path ranges, the set gives the single artifact's scores and ranking
  (tests/runtime/test_collection.py).
- Dense: each member's top ``depth`` by cosine, merged by cosine. The members must share their
  embedding model (its card and its packed bytes), else opening the set refuses.
- Tags, statuses, path prefixes, path contexts and stale checks: each member's own.

The first member's ``[search]`` settings, analyzer (for snippets) and reranker serve the set.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

import numpy as np

from kb.common.errors import ArtifactError, KbError, UnsupportedVersion, UsageError
from kb.formats import layout as L
from kb.formats.bm25 import IMPACT_LEVELS, idf_scalar, quantize_impacts, recover_tf, tf_component, tf_step
from kb.formats.artifact import open_regular
from kb.formats.kbset import Member, SetFileError, is_set_file, pack_set, unpack_set

from . import filters, legs
from .bm25 import IMPACT_CACHE, bm25_scores as member_bm25_scores, ceiling_of, doc_stats, document_weight, query_stopwords, query_terms, query_words, top_k
from .fusion import Leg, leg_from_ranking
from .index import Index

SET_MIN_FORMAT = 3  # impacts and document frequencies: what the set's BM25 statistics are made of


class Collection:
    """Open member Indexes searched as one; closing it closes them."""

    def __init__(self, members: list[Index], label: str):
        self.members = members
        self.path = label
        self.offsets = np.cumsum([0] + [m.n_chunks for m in members])
        self.doc_offsets = np.cumsum([0] + [m.n_docs for m in members])
        self.n_chunks, self.n_docs = int(self.offsets[-1]), int(self.doc_offsets[-1])
        self.meta = members[0].meta  # [search] defaults, the embedder's name, the snippet analyzer
        self.leg_cache: dict = {}
        self.version = min(m.version for m in members)
        _check_compatible(members)

    def close(self):
        for m in self.members:
            m.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def artifacts(self) -> list[dict]:
        return [{"id": m.artifact.id, "name": m.name, "path": str(m.path)} for m in self.members]

    # --- one id space --------------------------------------------------------------------------
    def _member(self, cid: int) -> int:
        """The index of the member holding chunk ``cid``."""
        return int(np.searchsorted(self.offsets, cid, side="right")) - 1

    def locate(self, cid: int) -> tuple[Index, int]:
        """(the member holding chunk ``cid``, its id there)."""
        k = self._member(cid)
        return self.members[k], int(cid - self.offsets[k])

    def chunk(self, cid: int):
        m, local = self.locate(cid)
        return m.chunk(local)

    def doc_of(self, cid: int) -> int:
        k = self._member(cid)
        return int(self.doc_offsets[k]) + self.members[k].doc_of(int(cid - self.offsets[k]))

    def vectors_of(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        which = np.searchsorted(self.offsets, ids, side="right") - 1
        out = None
        for k in np.unique(which).tolist():
            rows = np.flatnonzero(which == k)
            vecs = self.members[k].dense.vectors_of(ids[rows] - self.offsets[k])
            out = np.zeros((len(ids), vecs.shape[1]), dtype=np.float32) if out is None else out
            out[rows] = vecs
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)

    def slices(self):
        """(member, its chunk-id range in the set) for each member."""
        return [(m, slice(int(self.offsets[k]), int(self.offsets[k + 1]))) for k, m in enumerate(self.members)]

    # --- what the Searcher asks of an index ----------------------------------------------------
    english = None  # members with an English leg are refused (_check_compatible)

    @property
    def dense(self) -> "Collection":
        """The set's one dense leg: the set itself (its members share the model)."""
        return self

    @property
    def card(self) -> dict | None:
        return self.meta.embedder

    @property
    def name(self) -> str | None:
        return (self.meta.embedder or {}).get("name")

    @property
    def has_vectors(self) -> bool:
        return self.members[0].has_vectors  # all or none (_check_compatible)

    @property
    def vectors(self):
        return self.members[0].dense.vectors  # its dimensions: the shared model's

    @property
    def vector_dims(self) -> int:
        return self.members[0].dense.vector_dims  # the shared model's

    def prefetch_vectors(self) -> None:
        """Each member's vector index opened and checked in the background (DenseSpace.prefetch_vectors)."""
        for m in self.members:
            m.dense.prefetch_vectors()

    @property
    def has_query_model(self) -> bool:
        """kb search's in-place query encoder reads the first member's (the model is shared)."""
        return self.members[0].dense.has_query_model

    @property
    def query_model(self):
        return self.members[0].dense.query_model

    @property
    def has_reranker(self) -> bool:
        return any(m.has_reranker for m in self.members)

    def model_files(self, name: str = L.MODEL_EMBED) -> dict[str, bytes]:
        """A packed model of the first member that has it (the embedder is the same in all)."""
        return next(m for m in self.members if name in m.artifact.sections).model_files(name)

    @cached_property
    def has_statuses(self) -> bool:
        return any(m.has_statuses for m in self.members) or len({s for m in self.members for s in m.meta.statuses}) > 1


def _check_compatible(members: list[Index]) -> None:
    """Members must be format 3 (impact postings), and share their embedding model, or all have none."""
    first = members[0]
    for m in members:
        if m.version < SET_MIN_FORMAT:
            raise UnsupportedVersion(f"{m.path}: format version {m.version} cannot be searched in a set (needs {SET_MIN_FORMAT}); rebuild it with this kb-build")
        if L.TERM_DOC_N in m.artifact.sections:
            raise UnsupportedVersion(f"{m.path} keeps BM25 statistics per language (a corpus in several languages, format 4), which a set cannot combine yet; search it alone")
        if m.english is not None:
            raise UnsupportedVersion(f"{m.path} has a second dense leg for English queries (format 5), which a set cannot combine yet; search it alone")
    for m in members[1:]:
        if m.has_vectors != first.has_vectors:
            with_, without = (first, m) if first.has_vectors else (m, first)
            raise UsageError(f"{without.path} has no vectors but {with_.path} has; artifacts searched together must all have vectors from one embedding model, or none")
        if m.has_vectors and _model_identity(m) != _model_identity(first):
            raise UsageError(
                f"{m.path} was embedded with {_model_name(m)}, {first.path} with {_model_name(first)}; "
                "artifacts searched together must share their embedding model: rebuild them with the same --embedder"
            )


def _model_identity(ix: Index) -> tuple:
    """The embedding model as the artifact records it: its card, and the crc32 of its packed files."""
    card = ix.meta.embedder or {}
    return tuple(sorted((k, repr(v)) for k, v in card.items())), ix.artifact.sections[L.MODEL_EMBED].crc32 if L.MODEL_EMBED in ix.artifact.sections else None


def _model_name(ix: Index) -> str:
    card = ix.meta.embedder or {}
    same_card = f"{card.get('name', '?')} ({card.get('dim', '?')} dimensions"
    return same_card + (f", model files crc32 {ix.artifact.sections[L.MODEL_EMBED].crc32:08x})" if L.MODEL_EMBED in ix.artifact.sections else ")")


# --- opening -----------------------------------------------------------------------------------


def open_paths(paths: list[str], private: bool = False):
    """One Index for one artifact; a Collection for several, or for a set file (whose members may
    be given beside other artifacts). The same artifact twice is a usage error."""
    if len(paths) == 1 and not is_set_file(paths[0]):
        return Index(paths[0], private)
    members: list[Index] = []
    try:
        for p in paths:
            members += open_set(p, private) if is_set_file(p) else [Index(p, private)]
        seen: dict[str, str] = {}
        for m in members:
            if m.artifact.id in seen:
                raise UsageError(f"{m.path} and {seen[m.artifact.id]} are the same artifact (id {m.artifact.id}); give each artifact once")
            seen[m.artifact.id] = str(m.path)
        label = paths[0] if len(paths) == 1 else " + ".join(paths)
        return Collection(members, label)
    except BaseException:
        for m in members:
            m.close()
        raise


def read_set(path: str) -> list[Member]:
    """The members a set file lists (bounded read: formats/kbset.py)."""
    from kb.formats.kbset import MAX_SET_BYTES

    try:
        with open_regular(path) as f:
            data = f.read(MAX_SET_BYTES + 1)
    except OSError as e:
        raise ArtifactError(f"{path}: cannot read the set file: {e.strerror}") from None
    return unpack_set(data, path)


def member_path(set_path: str, m: Member) -> Path:
    return Path(set_path).parent / m.path


def open_set(path: str, private: bool = False) -> list[Index]:
    """The member Indexes of a set file, each checked against what the set recorded: present,
    the same length and the same content id (formats/kbset.py says why that is the check)."""
    out: list[Index] = []
    try:
        for m in read_set(path):
            p = member_path(path, m)
            try:
                size = p.stat().st_size if p.is_file() else None
            except OSError as e:  # a name too long, a loop of links: the set file is damaged
                raise SetFileError(f"{path}: member {m.path[:80]!r} cannot be read: {e.strerror}") from None
            if size is None:
                raise SetFileError(f"{path}: member {m.path} (id {m.id}) is missing; put it back or recreate the set with kb set create")
            if size != m.bytes:
                raise SetFileError(f"{path}: member {m.path} changed: {size:,} bytes, the set recorded {m.bytes:,}; recreate the set with kb set create")
            ix = Index(p, private)
            ix.name = m.path  # results name it as the set file does
            out.append(ix)
            if ix.artifact.id != m.id:
                raise SetFileError(f"{path}: member {m.path} changed: id {ix.artifact.id}, the set recorded {m.id}; recreate the set with kb set create")
        return out
    except BaseException:
        for ix in out:
            ix.close()
        raise


def create_set(out: str, artifacts: list[str], force: bool = False) -> list[Member]:
    """Write a set file at ``out`` listing ``artifacts`` (opened and checked as a set first), with
    each one's full sha256; paths relative to ``out``'s folder. An existing ``out`` is replaced
    only when it is a set file (or ``force``), never when it is one of ``artifacts``."""
    from kb.formats.artifact import replace_atomically
    from kb.models.convert import sha256_file

    _check_set_output(out, artifacts, force)
    opened = open_paths(list(artifacts))
    coll = opened if isinstance(opened, Collection) else Collection([opened], str(opened.path))
    try:
        base = Path(out).resolve().parent
        members = []
        for ix in coll.members:
            rel = Path(os.path.relpath(Path(ix.path).resolve(), base)).as_posix()
            members.append(Member(rel, ix.artifact.id, ix.artifact.size, sha256_file(ix.path)))
    finally:
        coll.close()
    try:
        replace_atomically(Path(out), [pack_set(members)])  # a reader never sees half a set file
    except OSError as e:
        raise KbError(f"cannot write {out}: {e.strerror or e}") from None
    return members


def _check_set_output(out: str, artifacts: list[str], force: bool) -> None:
    if not os.path.lexists(out):
        return
    if os.path.exists(out) and any(os.path.samefile(out, a) for a in artifacts):
        raise UsageError(f"{out} is one of the set's own artifacts; kb set create will not replace it: give another OUT")
    if force:
        return
    try:
        read_set(out)
    except ArtifactError:
        raise UsageError(f"{out} exists and is not a kb set file; kb set create will not replace it (pass --force to)") from None


def verify_set(path: str) -> list[dict]:
    """Every member's full sha256 against the set file's (``kb info --verify``)."""
    from kb.models.convert import sha256_file

    out = []
    for m in read_set(path):
        digest = sha256_file(member_path(path, m))
        if digest != m.sha256:
            raise SetFileError(f"{path}: member {m.path} changed: its sha256 is {digest}, the set recorded {m.sha256}; recreate the set with kb set create")
        out.append({"path": m.path, "id": m.id, "sha256": "ok"})
    return out


# --- filters -----------------------------------------------------------------------------------


def allowed_mask(coll: Collection, statuses=(), all_statuses: bool = False, tags=(), path: str | None = None) -> np.ndarray:
    """runtime/filters.py ``allowed_mask`` per member, joined: a status, tag or path a member does
    not have leaves none of its chunks; one no member has is the usage error it is for one."""
    known = list(dict.fromkeys(s for m in coll.members for s in m.meta.statuses))
    unknown = [s for s in statuses if s not in known]
    if unknown:
        raise UsageError(f"unknown status {unknown[0]!r}; these artifacts have: {', '.join(known)}")
    parts, errors = [], []
    for m in coll.members:
        own = tuple(s for s in statuses if s in m.meta.statuses)
        try:
            if statuses and not own:
                raise UsageError("no such status here")
            parts.append(filters.allowed_mask(m, own, all_statuses, tags, path))
        except UsageError as e:
            errors.append(e)
            parts.append(np.zeros(m.n_chunks, dtype=bool))
    if len(errors) == len(coll.members):
        raise errors[0]
    return np.concatenate(parts)


def syntax_mask(coll: Collection, parsed, allowed: np.ndarray) -> np.ndarray:
    return np.concatenate([filters.syntax_mask(m, parsed, allowed[s]) for m, s in coll.slices()])


# --- legs --------------------------------------------------------------------------------------


def corpus_stats(coll: Collection) -> dict:
    """The whole corpus's N and average chunk and document lengths, each member's own averages;
    computed from the stored lengths as kb-build computes them for one artifact (the same
    arrays in the same order give the same floats), once per process."""
    hit = coll.leg_cache.get("corpus_stats")
    if hit is None:
        lengths = np.concatenate([m.lengths for m in coll.members])
        doc_len = np.concatenate([doc_stats(m)[1] for m in coll.members])
        hit = coll.leg_cache["corpus_stats"] = {
            "n_docs": coll.n_docs,
            "avg": max(float(lengths.mean()) if len(lengths) else 0.0, 1e-9),
            "doc_avg": max(float(doc_len.mean()) if len(doc_len) else 0.0, 1e-9),
            "own_avg": [max(float(m.meta.bm25["avg_length"]), 1e-9) for m in coll.members],
            "own_doc_avg": [max(doc_stats(m)[2] if m.n_docs else 0.0, 1e-9) for m in coll.members],
        }
    return hit


def corpus_df(coll: Collection, terms) -> dict[str, int]:
    """Each term's document frequency summed over the members."""
    df: dict[str, int] = {}
    for m in coll.members:
        for t in terms:
            tid = m.term_id(t)
            df[t] = df.get(t, 0) + (m.term_df(tid) if tid is not None else 0)
    return df


def _rescored_postings(coll: Collection, k: int, df: dict[str, int]):
    """runtime/bm25.py ``term_postings`` for member ``k``, under the corpus's idf and average
    lengths: each posting's tf' recovered from its stored impact (formats/bm25.py
    ``recover_tf``; a document's from its chunks' where they agree with its byte), saturated
    under the corpus's averages and quantized as kb-build quantizes."""
    m, st = coll.members[k], corpus_stats(coll)
    p = m.meta.bm25
    k1, b = float(p["k1"]), float(p["b"])
    lam = document_weight(m)
    step = tf_step(float(p.get("title_weight", 0.0)), float(p.get("section_weight", 0.0)))
    own, avg, own_doc, doc_avg = st["own_avg"][k], st["avg"], st["own_doc_avg"][k], st["doc_avg"]
    same = k1 == 0 or b == 0 or (own == avg and own_doc == doc_avg)  # the stored bytes are already the corpus's

    cache = coll.leg_cache.setdefault("rescored", {})

    def postings(term: str, tid: int):
        scale = idf_scalar(df[term], st["n_docs"]) / IMPACT_LEVELS
        hit = cache.get((k, tid))
        if hit is not None:  # a member's rescored bytes depend on the term alone while the set is open
            return (hit[0], hit[1], scale, *hit[2:])
        ids, imp = m.impact_posting(tid)
        doc_ids, doc_imp = m.impact_posting(tid, document=True) if lam > 0 else (None, None)
        if same:
            return ids, imp, scale, doc_ids, doc_imp
        length = m.lengths[ids]
        tf = recover_tf(imp, length, own, k1, b, step)
        new = quantize_impacts(tf_component(tf, length, avg, k1, b))
        if lam > 0:
            chunk_doc = m.chunks["doc"][ids]
            starts = np.flatnonzero(np.r_[True, chunk_doc[1:] != chunk_doc[:-1]]) if len(ids) else np.zeros(0, np.int64)
            summed = np.add.reduceat(tf, starts) if len(starts) == len(doc_ids) else None  # chunks ascend, so their documents do
            dlen = doc_stats(m)[1][doc_ids]
            dtf = recover_tf(doc_imp, dlen, own_doc, k1, b, step, guess=summed)
            doc_imp = quantize_impacts(tf_component(dtf, dlen, doc_avg, k1, b))
        if len(cache) >= IMPACT_CACHE:
            cache.clear()
        cache[(k, tid)] = (ids, new, doc_ids, doc_imp)
        return ids, new, scale, doc_ids, doc_imp

    return postings


def bm25_scores(coll: Collection, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(set chunk ids, scores) of every chunk matching ``text``, as one artifact over the whole
    corpus would score them; each member analyses the text with its own analyzer."""
    per_member = [query_terms(m, text) for m in coll.members]
    df = corpus_df(coll, {t for terms in per_member for t in terms})
    ids, scores = [], []
    for k, (m, terms) in enumerate(zip(coll.members, per_member)):
        i, s = member_bm25_scores(m, terms, _rescored_postings(coll, k, df))
        ids.append(i.astype(np.int64) + coll.offsets[k])
        scores.append(s)
    return np.concatenate(ids), np.concatenate(scores)


def query_ceiling(coll: Collection, words: list[tuple[str, ...]]) -> tuple[float, float]:
    """runtime/bm25.py ``query_ceiling`` with the corpus's idf."""
    df = corpus_df(coll, {t for word in words for t in word})
    n = corpus_stats(coll)["n_docs"]
    ceiling, known = ceiling_of(words, lambda t: idf_scalar(df[t], n) if df[t] > 0 else None)
    return ceiling * (1.0 + document_weight(coll.members[0])), known


def bm25_leg(coll: Collection, name: str, text: str, weight: float, depth: int, allowed: np.ndarray) -> Leg:
    ids, scores = bm25_scores(coll, text)
    if len(ids):
        keep = allowed[ids]
        ids, scores = ids[keep], scores[keep]
    ids, scores = top_k(ids, scores, depth)
    words = query_words(coll.members[0], text)
    ceiling, known = query_ceiling(coll, words)
    return leg_from_ranking(name, "bm25", weight, ids, scores)._replace(ceiling=ceiling, known=known, words=len(set(words)), stops=query_stopwords(coll.members[0], text))


def match_count(coll: Collection, text: str) -> int:
    return len(bm25_scores(coll, text)[0])


def vector_leg(coll: Collection, name: str, query_vector: np.ndarray, weight: float, depth: int, allowed: np.ndarray) -> Leg:
    """Each member's top ``depth`` by cosine, merged by cosine (ties by set chunk id)."""
    ids, sims = [], []
    for m, s in coll.slices():
        i, c = legs.top_vector(m.dense, query_vector, depth, allowed[s])
        ids.append(np.asarray(i, dtype=np.int64) + s.start)
        sims.append(np.asarray(c, dtype=np.float64))
    ids, sims = np.concatenate(ids), np.concatenate(sims)
    order = np.lexsort((ids, -sims))[:depth]
    return leg_from_ranking(name, "cosine", weight, ids[order], sims[order])


def tag_leg(coll: Collection, entities, weight: float, depth: int, allowed: np.ndarray, tiebreak: dict[int, float]) -> Leg:
    """Each member's tag counts, joined, then ranked as for one artifact."""
    counts = [legs.tag_counts(m, entities) for m in coll.members]
    if all(c is None for c in counts):
        return legs.rank_tag_counts(None, weight, depth, allowed, tiebreak)
    joined = np.concatenate([c if c is not None else np.zeros(m.n_chunks, dtype=np.int32) for c, m in zip(counts, coll.members)])
    return legs.rank_tag_counts(joined, weight, depth, allowed, tiebreak)
