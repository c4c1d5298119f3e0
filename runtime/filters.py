"""Filters: status, tag and path prefix become one boolean mask over chunk ids, before any leg
ranks. Shared by ``kb search`` and ``kb list``."""

from __future__ import annotations

import numpy as np

from kb.common.errors import UsageError
from kb.common.usage import printable


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
    mask = _status_mask(ix, tuple(known.index(s) for s in wanted))
    if tags or path:
        mask = mask.copy()
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
            raise UsageError(f"no document path starts with {path!r}{closest(path, _path_prefixes(ix))}")
        window = np.zeros(ix.n_chunks, dtype=bool)
        window[a:b] = True
        mask &= window
    return mask


def _status_mask(ix, codes: tuple[int, ...]) -> np.ndarray:
    """Chunks whose status is one of ``codes``: computed once per process and set of statuses,
    read-only (callers that narrow it copy it). From the statuses' bitmaps, not the chunk
    table's status column: every chunk is in its own status's bitmap, so the mask is all chunks
    but those of the statuses not wanted (usually few, and at a million chunks the column is a
    16 MB read)."""
    cache = ix.leg_cache.setdefault("status_masks", {})
    mask = cache.get(codes)
    if mask is None:
        statuses = ix.meta.statuses
        unwanted = [statuses[c] for c in range(len(statuses)) if c not in codes]
        mask = np.ones(ix.n_chunks, dtype=bool)
        for status in unwanted:
            mask[np.frombuffer(ix.status_bitmap(status).to_array(), dtype=np.uint32)] = False
        mask.flags.writeable = False
        cache[codes] = mask
    return mask


def check_tag(ix, tag: str) -> None:
    """A tag filter must name a tag the artifact knows (tags are casefolded at build time)."""
    if tag.casefold() not in ix.meta.tag_names:
        raise UsageError(f"unknown tag {tag!r}{closest(tag.casefold(), ix.meta.tag_names)}")


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


def closest(value: str, known, cutoff: float = 0.5) -> str:
    """'; closest: a, b' from ``known``, or '' when nothing is close: the folders ``value`` names
    ('/notes' -> 'notes/'), the paths it is the end of ('disk-full.md' -> 'runbooks/disk-full.md'),
    then difflib's matches of at least ``cutoff``."""
    import difflib

    known = list(known)
    stripped = value.strip("/")
    named = [k for k in known if stripped and ((k.startswith(stripped) and k.endswith("/")) or k.endswith("/" + stripped))]
    near = list(dict.fromkeys(named + difflib.get_close_matches(value, known, n=3, cutoff=cutoff)))[:3]
    return f"; closest: {', '.join(printable(n) for n in near)}" if near else ""  # a path may hold control characters


def syntax_mask(ix, parsed, allowed: np.ndarray) -> np.ndarray:
    """``allowed`` narrowed by a parsed query's phrases, title:/section: scopes and exclusions
    (runtime/query_syntax.py; its path: is checked and applied as --path is, by ``allowed_mask``). Candidates come from the postings of each needle's
    terms; a needle of several words is then verified against the chunk's text, title or section.
    A one-word phrase or exclusion is decided by the postings alone, as the index holds the word
    (title, section, text and, for a document's first chunk, its description)."""
    from .bm25 import analyzer_of
    from .query_syntax import matches

    mask = allowed.copy()
    analyzer = analyzer_of(ix)

    def holding(needle: str) -> np.ndarray:
        """Chunks whose postings hold, for every word of ``needle``, one of the terms the word
        can be (its stem in each of the artifact's languages, or its stopword term): a superset
        of the chunks the needle matches."""
        hold = np.ones(ix.n_chunks, dtype=bool)
        for w in dict.fromkeys(analyzer.words(needle)):
            forms, stop = analyzer.forms(w)
            has = np.zeros(ix.n_chunks, dtype=bool)
            for t in (*forms, stop) if stop is not None else forms:
                tid = ix.term_id(t)
                if tid is not None:
                    has[ix.posting_ids(tid)] = True
            hold &= has
        return hold

    def field(c: int, name: str) -> str:
        """Where a needle of several words is looked for: a phrase in the chunk's section path
        and text, and its document's title on the document's first chunk only (the title heads
        every chunk of it, but none of the others holds the phrase); title: and section:
        scopes in those fields of every chunk."""
        rec = ix.chunk(c)
        if name != "text":
            return rec.title if name == "title" else rec.section
        first = ix.doc_chunks(ix.doc_of(c)).start == c
        return "\n".join((rec.title, rec.section, rec.text) if first else (rec.section, rec.text))

    def one_word(needle: str) -> bool:
        """A needle of one word: the postings (title, section and text) already say which chunks
        hold it, as ``matches`` would over those fields, so no text need be read."""
        return len(analyzer.words(needle)) == 1

    for name, needles in (("text", parsed.phrases), ("title", parsed.title), ("section", parsed.section)):
        for needle in needles:
            if name == "text" and one_word(needle):
                mask &= holding(needle)
                continue
            keep = np.zeros(ix.n_chunks, dtype=bool)
            for c in np.flatnonzero(mask & holding(needle)).tolist():
                keep[c] = matches(analyzer, field(c, name), needle)
            mask &= keep
    for needle in parsed.excluded:
        if one_word(needle):  # "-2" over SciFact: 2,000 chunks read and analysed for nothing
            mask &= ~holding(needle)
            continue
        for c in np.flatnonzero(mask & holding(needle)).tolist():
            rec = ix.chunk(c)
            if matches(analyzer, "\n".join((rec.title, rec.section, rec.text)), needle):
                mask[c] = False
    return mask
