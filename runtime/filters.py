"""Filters: status, tag and path prefix become one boolean mask over chunk ids, before any leg
ranks. Shared by ``kb search`` and ``kb list``."""

from __future__ import annotations

import numpy as np

from kb.common.errors import UsageError


def allowed_mask(ix, statuses=(), all_statuses: bool = False, tags=(), path: str | None = None) -> np.ndarray:
    """Chunks with one of ``statuses`` (default: every status but the artifact's excluded ones;
    ``all_statuses``: every one), carrying every tag in ``tags``, under the path prefix ``path``."""
    known = ix.meta.statuses
    if all_statuses:
        wanted = list(known)
    elif statuses:
        unknown = [s for s in statuses if s not in known]
        if unknown:
            raise UsageError(f"unknown status {unknown[0]!r}; this artifact has: {', '.join(known)}")
        wanted = list(statuses)
    else:
        wanted = [s for s in known if s not in ix.meta.excluded_statuses]
    mask = np.zeros(ix.n_chunks, dtype=bool)
    codes = ix.chunks["status"]
    for s in wanted:
        mask |= codes == known.index(s)
    for t in tags:
        check_tag(ix, t)
        bm = ix.tag_bitmap(t.casefold())
        tag_mask = np.zeros(ix.n_chunks, dtype=bool)
        if len(bm):
            tag_mask[np.frombuffer(bm.to_array(), dtype=np.uint32)] = True
        mask &= tag_mask
    if path:
        a, b = ix.path_range(path)
        if a == b and not _any_document_under(ix, path):
            raise UsageError(f"no document path starts with {path!r}{_closest(path, _path_prefixes(ix))}")
        window = np.zeros(ix.n_chunks, dtype=bool)
        window[a:b] = True
        mask &= window
    return mask


def check_tag(ix, tag: str) -> None:
    """A tag filter must name a tag the artifact knows (tags are casefolded at build time)."""
    if tag.casefold() not in ix.meta.tag_names:
        raise UsageError(f"unknown tag {tag!r}{_closest(tag.casefold(), ix.meta.tag_names)}")


def _any_document_under(ix, prefix: str) -> bool:
    d = ix.doc_by_path(prefix)  # a document with no chunks still exists
    return d is not None


def _path_prefixes(ix) -> list[str]:
    """Every document path and every folder above one ("runbooks/"), for suggestions."""
    out = set()
    for d in range(ix.n_docs):
        p = ix.doc_path(d)
        out.add(p)
        parts = p.split("/")[:-1]
        out.update("/".join(parts[: i + 1]) + "/" for i in range(len(parts)))
    return sorted(out)


def _closest(value: str, known) -> str:
    """'; closest: a, b' from ``known``, or '' when nothing is close."""
    import difflib

    known = list(known)
    stripped = value.strip("/")
    folders = [k for k in known if stripped and k.startswith(stripped) and k.endswith("/")]  # '/notes' -> 'notes/'
    near = list(dict.fromkeys(folders + difflib.get_close_matches(value, known, n=3, cutoff=0.5)))[:3]
    return f"; closest: {', '.join(near)}" if near else ""
