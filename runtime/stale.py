"""Staleness: compare an artifact's manifest with the files under its corpus root.

Cheap first (size and mtime), sha256 only for files whose size or mtime moved, so an untouched
corpus costs one stat per file. JSON Lines sources are compared the same way. A search's check
hashes at most SEARCH_HASH_BYTES of files whose time moved (a checkout or a copy moves every
file's time): past that, a file of the same size is reported "touched" (its time moved, its bytes
not compared) instead of being read; ``kb status`` compares them all.

Bounds, because the root and the paths come from the artifact, which may be crafted: a check
looks at no more than MAX_WALK_FILES files and folders and stops after MAX_WALK_S seconds (the
report then says ``incomplete``); a source path that is absolute or climbs out with ``..`` is
never opened; a file whose real path is outside the root is never hashed (it is "touched" when
its time moved). The servers (``kb serve``, ``kb mcp``) check only when their operator asks
(runtime/service.py), and name paths only under a root the operator gave.

A one-shot ``kb search`` cannot afford the full check on a large corpus (more than the search
itself: bench/notes/2026-12-06-stale-check.md), so it keeps
the last check's report in a small cache file ($KB_CACHE_DIR/stale/ARTIFACT_ID.json) with the
modification times of the folders it walked: a search within RECHECK_S seconds of that check,
while none of those folders changed (a file added, removed or renamed, which an editor's atomic
save does too), reuses it; a file rewritten in place shows at the first check after RECHECK_S.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import stat
import time

from kb.formats.records import CONFIG_NAME

from .results import Notice

SEARCH_HASH_BYTES = 16 << 20  # file bytes a search's stale check may read to compare contents
RECHECK_S = 30.0  # a search reuses the last check's report this long (unless a folder it walked changed)
MAX_WALK_FILES = 200_000  # files and folders one check stats or lists; past it the report is incomplete
MAX_WALK_S = 2.0  # seconds one check may take; past it the report is incomplete
MAX_NOTICE_FILES = 100  # paths one stale notice carries (the message names the first 5)
MAX_CACHE_BYTES = 16 << 20  # a larger cache entry is not read (the search checks in full)
MAX_CACHE_ENTRIES = 64  # artifacts whose last check the cache keeps
KINDS = ("changed", "added", "removed", "touched")


class _Budget:
    """MAX_WALK_FILES and MAX_WALK_S, spent by one check."""

    def __init__(self):
        self.left, self.deadline = MAX_WALK_FILES, time.monotonic() + MAX_WALK_S

    def spend(self, n: int = 1) -> bool:
        """False once the check has looked at too many files or run too long."""
        self.left -= n
        return self.left >= 0 and time.monotonic() < self.deadline


def _clean(path: str) -> bool:
    """A corpus-relative path as kb-build writes it: not absolute, no '..', no NUL."""
    return bool(path) and not path.startswith("/") and "\0" not in path and ".." not in path.split("/")


def check(manifest, hash_bytes: int | None = None, root: str | None = None) -> tuple[dict, dict]:
    """(the report, the modification times of the folders walked and JSON Lines files read)."""
    root = os.fspath(manifest.root if root is None else root)
    rep = {"root": root, "root_exists": os.path.isdir(root), "changed": [], "added": [], "removed": []}
    if hash_bytes is not None:
        rep["touched"] = []
    watched: dict[str, int] = {}
    if not rep["root_exists"]:
        return rep, watched
    budget, real_root = _Budget(), None
    known = {s.path: s for s in manifest.sources}
    for path, src in known.items():
        if not budget.spend():
            rep["incomplete"] = _stopped()
            return rep, {}
        p = os.path.join(root, path)
        try:
            if not _clean(path):
                raise FileNotFoundError(path)  # never a file kb-build read under this root
            st = os.stat(p)
        except OSError:
            rep["removed"].append(path)
            continue
        if manifest.jsonl:
            watched[path] = st.st_mtime_ns
        if st.st_size == src.size and st.st_mtime_ns == src.mtime_ns:
            continue
        real_root = real_root or os.path.realpath(root) + os.sep
        if st.st_size != src.size or not stat.S_ISREG(st.st_mode):  # not a file now (a FIFO would block the read)
            rep["changed"].append(path)
        elif (hash_bytes is not None and st.st_size > hash_bytes) or not os.path.realpath(p).startswith(real_root):
            rep.setdefault("touched", []).append(path)  # not compared: past the budget, or outside the root
        else:
            if hash_bytes is not None:
                hash_bytes -= st.st_size
            digest = _sha256(p)
            if digest is None:
                rep.setdefault("touched", []).append(path)  # unreadable here: not compared
            elif digest != src.sha256:
                rep["changed"].append(path)
    if not manifest.jsonl and not _added(manifest, root, known, rep, watched, budget):
        rep["incomplete"] = _stopped()
        return rep, {}
    return rep, watched


def _stopped() -> str:
    return f"the check stopped after {MAX_WALK_FILES:,} files or {MAX_WALK_S:g} s"


def _added(manifest, root: str, known: dict, rep: dict, watched: dict, budget: _Budget) -> bool:
    """Walk the root for files the build would index that the manifest does not list; False when
    the budget ran out. Plain strings and ``os`` calls, not pathlib: a one-shot ``kb search`` may
    run this over every source file, and pathlib's parsing cost more than the stats
    (bench/notes/2026-12-05-one-shot-ratios.md)."""
    skipped = {p for p, _ in manifest.skipped}
    types = set(manifest.file_types)
    include, exclude = manifest.include, manifest.exclude
    for dirpath, dirnames, filenames in os.walk(root):
        if not budget.spend(1 + len(filenames)):
            return False
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        at = os.path.relpath(dirpath, root).replace(os.sep, "/")
        try:
            watched[at] = os.stat(dirpath).st_mtime_ns
        except OSError:
            pass
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
    return True


def stale_report(manifest, hash_bytes: int | None = None, root: str | None = None) -> dict:
    """Changed, added and removed files of the corpus at ``root`` (default: the manifest's),
    against the manifest (formats/records.py); with ``hash_bytes``, files of an unchanged size
    whose time moved are hashed only while that many bytes have not been read, and "touched"
    past it."""
    return check(manifest, hash_bytes, root)[0]


def _sha256(path: str) -> str | None:
    """The file's sha256, or None when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb", buffering=0) as f:
            while block := f.read(1 << 20):  # a MiB at a time: a large source is not read whole
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def status_report(manifest, root: str | None = None, hash_bytes: int | None = None) -> dict:
    """``stale_report`` and ``fresh``: the corpus root is here and no file differs (kb status, and
    the MCP status tool)."""
    rep = stale_report(manifest, hash_bytes, root)
    rep["fresh"] = rep["root_exists"] and "incomplete" not in rep and not any(rep[k] for k in ("changed", "added", "removed"))
    return rep


def differences(rep: dict) -> dict:
    """How many files of each kind differ: what a server reports where it may not name paths."""
    return {k: len(rep[k]) for k in KINDS if k in rep}


def stale_notice(rep: dict, limit: int = 5, paths: bool = True) -> Notice | None:
    """A search notice for a stale report: naming the changed, added, removed and touched files
    (``paths``), else counting them; None when fresh."""
    diffs = [f"{k} {p}" for k in KINDS for p in rep.get(k, ())]
    cut = f"; {rep['incomplete']}" if "incomplete" in rep else ""
    if not diffs and not cut:
        return None
    touched = " (touched: its time moved, its bytes were not compared)" if rep.get("touched") else ""
    if paths:
        more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
        return Notice("stale_index", f"Index may be stale: {', '.join(diffs[:limit])}{more}{touched}{cut}; rebuild with kb-build (kb status lists all)", files=tuple(diffs[:MAX_NOTICE_FILES]))
    counts = ", ".join(f"{n} {k}" for k, n in differences(rep).items() if n)
    return Notice("stale_index", f"Index may be stale: files differ from the build ({counts or 'not every file compared'}){touched}{cut}; rebuild with kb-build")


def stale_notices(ix, reports=None, paths: bool = True) -> list[Notice]:
    """``stale_notice`` of each artifact behind ``ix`` (a set: each member's, naming it), from
    ``reports`` (one per member; default: each one's ``cached_report``)."""
    members = getattr(ix, "members", None) or [ix]
    out = []
    for m, rep in zip(members, reports or [cached_report(m) for m in members]):
        n = stale_notice(rep, paths=paths)
        if n is not None:
            out.append(n._replace(message=f"{m.name}: {n.message}") if len(members) > 1 else n)
    return out


# --- the one-shot search's cache of its last check ---------------------------------------------
def cache_dir() -> str:
    from kb.common import cache_root

    return os.path.join(cache_root(), "stale")


def _cache_file(ix) -> str:
    return os.path.join(cache_dir(), f"{ix.artifact.id}.json")


def _prune(folder: str) -> None:
    """Keep the MAX_CACHE_ENTRIES newest entries (each rebuild of an artifact gives it a new id)."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.stat().st_mtime_ns, reverse=True)
        for e in entries[MAX_CACHE_ENTRIES:]:
            os.unlink(e.path)
    except OSError:
        pass


def cached_report(ix) -> dict:
    """A search's stale report of ``ix``: the cache entry of its last check, when that is younger
    than RECHECK_S and no folder it walked has a new modification time; else a new check, cached
    (a cache that cannot be read or written only costs the full check)."""
    path = _cache_file(ix)
    try:
        with open(path, "rb") as f:
            entry = json.loads(f.read(MAX_CACHE_BYTES))
        if 0 <= time.time() - entry["at"] < RECHECK_S and all(os.stat(os.path.join(entry["root"], d)).st_mtime_ns == t for d, t in entry["watched"].items()):
            return entry["report"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    started = time.time()
    rep, watched = check(ix.manifest(), SEARCH_HASH_BYTES)
    _store(path, {"at": started, "root": rep["root"], "watched": watched, "report": rep})
    _prune(os.path.dirname(path))
    return rep


def _store(path: str, entry: dict) -> None:
    """Write a cache entry through an exclusive, randomly named temporary beside it (never a link
    planted in the cache folder), renamed into place; one that cannot be written is dropped."""
    from pathlib import Path

    from kb.formats.artifact import create_temp

    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = create_temp(Path(path))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry, f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def forget(ix) -> None:
    """Drop ``ix``'s cache entry (the next search checks in full)."""
    try:
        os.unlink(_cache_file(ix))
    except OSError:
        pass
