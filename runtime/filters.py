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
        bm = ix.tag_bitmap(t.casefold())
        tag_mask = np.zeros(ix.n_chunks, dtype=bool)
        if len(bm):
            tag_mask[np.frombuffer(bm.to_array(), dtype=np.uint32)] = True
        mask &= tag_mask
    if path:
        a, b = ix.path_range(path)
        window = np.zeros(ix.n_chunks, dtype=bool)
        window[a:b] = True
        mask &= window
    return mask
