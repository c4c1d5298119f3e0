"""Staleness: compare an artifact's manifest with the files under its corpus root.

Cheap first (size and mtime), sha256 only for files whose size or mtime moved, so an untouched
corpus costs one stat per file. JSON Lines sources are compared the same way.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path

from kb.formats.layout import CONFIG_NAME, SOURCE_EXTENSIONS


def stale_report(manifest: dict) -> dict:
    root = Path(manifest["root"])
    rep = {"root": str(root), "root_exists": root.is_dir(), "changed": [], "added": [], "removed": []}
    if not rep["root_exists"]:
        return rep
    known = {s[0]: s for s in manifest["sources"]}
    skipped = {s[0] for s in manifest["skipped"]}
    for path, (_, size, mtime_ns, sha) in known.items():
        p = root / path
        try:
            st = p.stat()
        except OSError:
            rep["removed"].append(path)
            continue
        if st.st_size == size and st.st_mtime_ns == mtime_ns:
            continue
        if st.st_size != size or hashlib.sha256(p.read_bytes()).hexdigest() != sha:
            rep["changed"].append(path)
    include, exclude = manifest.get("include", []), manifest.get("exclude", [])
    if not manifest.get("jsonl"):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in sorted(filenames):
                if f.startswith(".") or f == CONFIG_NAME or Path(f).suffix.lower() not in SOURCE_EXTENSIONS:
                    continue
                rel = (Path(dirpath) / f).relative_to(root).as_posix()
                if include and not any(fnmatch.fnmatch(rel, g) for g in include):
                    continue
                if any(fnmatch.fnmatch(rel, g) for g in exclude):
                    continue
                if rel not in known and rel not in skipped:
                    rep["added"].append(rel)
    return rep


def stale_notice(manifest: dict, limit: int = 5) -> dict | None:
    """A search notice naming the changed, added and removed files, or None when fresh."""
    rep = stale_report(manifest)
    diffs = [f"{k} {p}" for k in ("changed", "added", "removed") for p in rep[k]]
    if not diffs:
        return None
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return {
        "kind": "stale_index",
        "files": diffs,
        "message": f"Index may be stale: {', '.join(diffs[:limit])}{more}; rebuild with kb-build (kb status lists all)",
    }
