"""Staleness: compare an artifact's manifest with the files under its corpus root.

Cheap first (size and mtime), sha256 only for files whose size or mtime moved, so an untouched
corpus costs one stat per file. JSON Lines sources are compared the same way. A search's check
hashes at most SEARCH_HASH_BYTES of files whose time moved (a checkout or a copy moves every
file's time): past that, a file of the same size is reported "touched" (its time moved, its bytes
not compared) instead of being read; ``kb status`` compares them all.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import stat
from pathlib import Path

from kb.formats.records import CONFIG_NAME

from .results import Notice

SEARCH_HASH_BYTES = 16 << 20  # file bytes a search's stale check may read to compare contents


def stale_report(manifest, hash_bytes: int | None = None) -> dict:
    """Changed, added and removed files of the corpus, against the manifest (formats/records.py);
    with ``hash_bytes``, files of an unchanged size whose time moved are hashed only while that
    many bytes have not been read, and "touched" past it.

    Plain strings and ``os`` calls, not pathlib: a one-shot ``kb search`` runs this over every
    source file, and pathlib's parsing cost more than the stats (about 50 ms of 93 for the 992
    files of the Hugo docs, bench/notes/2026-12-05-one-shot-ratios.md)."""
    root = os.fspath(manifest.root)
    rep = {"root": str(Path(root)), "root_exists": os.path.isdir(root), "changed": [], "added": [], "removed": []}
    if hash_bytes is not None:
        rep["touched"] = []
    if not rep["root_exists"]:
        return rep
    known = {s.path: s for s in manifest.sources}
    skipped = {p for p, _ in manifest.skipped}
    types = set(manifest.file_types)
    for path, src in known.items():
        p = os.path.join(root, path)
        try:
            st = os.stat(p)
        except OSError:
            rep["removed"].append(path)
            continue
        if st.st_size == src.size and st.st_mtime_ns == src.mtime_ns:
            continue
        if st.st_size != src.size or not stat.S_ISREG(st.st_mode):  # not a file now (a FIFO would block the read)
            rep["changed"].append(path)
        elif hash_bytes is not None and st.st_size > hash_bytes:
            rep["touched"].append(path)
        else:
            if hash_bytes is not None:
                hash_bytes -= st.st_size
            if _sha256(p) != src.sha256:
                rep["changed"].append(path)
    include, exclude = manifest.include, manifest.exclude
    if not manifest.jsonl:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            at = os.path.relpath(dirpath, root).replace(os.sep, "/")
            prefix = "" if at == "." else at + "/"
            for f in sorted(filenames):
                if f.startswith(".") or f == CONFIG_NAME or os.path.splitext(f)[1].lower() not in types:
                    continue
                rel = prefix + f
                if include and not any(fnmatch.fnmatch(rel, g) for g in include):
                    continue
                if any(fnmatch.fnmatch(rel, g) for g in exclude):
                    continue
                if rel not in known and rel not in skipped:
                    rep["added"].append(rel)
    return rep


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while block := f.read(1 << 20):  # a MiB at a time: a large source is not read whole
            h.update(block)
    return h.hexdigest()


def status_report(manifest) -> dict:
    """``stale_report`` and ``fresh``: the corpus root is here and no file differs (kb status, and
    the MCP status tool)."""
    rep = stale_report(manifest)
    rep["fresh"] = rep["root_exists"] and not any(rep[k] for k in ("changed", "added", "removed"))
    return rep


def stale_notice(manifest, limit: int = 5) -> Notice | None:
    """A search notice naming the changed, added, removed and touched files, or None when fresh."""
    rep = stale_report(manifest, SEARCH_HASH_BYTES)
    diffs = [f"{k} {p}" for k in ("changed", "added", "removed", "touched") for p in rep[k]]
    if not diffs:
        return None
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    touched = " (touched: its time moved, its bytes were not compared)" if rep["touched"] else ""
    return Notice("stale_index", f"Index may be stale: {', '.join(diffs[:limit])}{more}{touched}; rebuild with kb-build (kb status lists all)", files=tuple(diffs))


def stale_notices(ix) -> list[Notice]:
    """``stale_notice`` of each artifact behind ``ix`` (a set: each member's, naming it)."""
    members = getattr(ix, "members", None) or [ix]
    out = []
    for m in members:
        n = stale_notice(m.manifest())
        if n is not None:
            out.append(n._replace(message=f"{m.path}: {n.message}") if len(members) > 1 else n)
    return out
