"""The set file (``.kbset``): several artifacts searched as one (``kb -i SET``), described in SPEC.md.

A small UTF-8 JSON object, written by ``kb set create`` and read by every ``kb`` command that
takes ``-i``:

    {"kb_set": 1, "artifacts": [{"path": "a.kb", "id": "337e78c8d2ec9401", "bytes": 81234,
                                 "sha256": "9f2c..."}, ...]}

``path`` is relative to the set file's folder (POSIX separators), so a folder holding the set and
its artifacts can be moved or copied whole. ``id`` is the artifact's content id (formats/artifact.py
``Artifact.id``: BLAKE2b-64 of the header and section table, which hold every section's crc32),
``bytes`` its file length, ``sha256`` the whole file's digest.

Checking: opening a set compares each member's ``id`` and ``bytes`` with the file on disk, which
costs nothing beyond the open itself (the header and table are read anyway), and the crc32 of each
section is checked when the section is first read, so a member whose bytes changed under the same
table fails as a corrupt artifact on first use. The full ``sha256`` is computed by ``kb set
create`` and checked only by ``kb info --verify``: hashing every member at every query would read
every byte of every artifact, which the mmap design exists to avoid.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import NamedTuple

from kb.common.errors import ArtifactError

from .artifact import open_regular

SET_VERSION = 1
MAX_SET_BYTES = 1 << 20  # a set file larger than this is refused before it is parsed
MAX_MEMBERS = 256  # artifacts in one set
SET_SNIFF = b"{"  # a set file starts (after whitespace) with this; an artifact with its magic
_ID = re.compile(r"[0-9a-f]{16}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class SetFileError(ArtifactError):
    """A set file that cannot be used: malformed, too large, or a member missing or changed (exit 3)."""


class Member(NamedTuple):  # not a frozen dataclass: start-up cost (bench/startup_records.py)
    """One artifact of a set, as the set file records it."""

    path: str  # relative to the set file's folder, POSIX separators
    id: str
    bytes: int
    sha256: str


def is_set_file(path) -> bool:
    """Whether the file at ``path`` is a set file: its first non-blank byte is ``{`` (an artifact
    starts with its magic)."""
    try:
        with open_regular(path) as f:
            return f.read(64).lstrip().startswith(SET_SNIFF)
    except OSError:
        return False


def pack_set(members: list[Member]) -> bytes:
    """The set file's bytes: indented JSON, one member per entry, a newline at the end."""
    doc = {"kb_set": SET_VERSION, "artifacts": [m._asdict() for m in members]}
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def unpack_set(data: bytes, label: str) -> list[Member]:
    """The members of a set file; SetFileError (one line naming ``label``) for anything else."""
    if len(data) > MAX_SET_BYTES:
        raise SetFileError(f"{label}: set file is larger than the {MAX_SET_BYTES:,} bytes a set file may be")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SetFileError(f"{label}: not a kb set file (not UTF-8 JSON: {str(e).splitlines()[0][:120]})") from None
    if not isinstance(doc, dict) or "kb_set" not in doc:
        raise SetFileError(f"{label}: not a kb set file (no \"kb_set\" key); create one with kb set create")
    if doc["kb_set"] != SET_VERSION:
        raise SetFileError(f"{label}: set file version {doc['kb_set']!r} is not supported (this kb reads version {SET_VERSION})")
    items = doc.get("artifacts")
    if not isinstance(items, list) or not items:
        raise SetFileError(f"{label}: set file lists no artifacts")
    if len(items) > MAX_MEMBERS:
        raise SetFileError(f"{label}: set file lists {len(items)} artifacts, more than {MAX_MEMBERS}")
    members = [_member(x, i, label) for i, x in enumerate(items)]
    seen: dict[str, str] = {}
    for m in members:
        if m.id in seen:
            raise SetFileError(f"{label}: artifact {m.id} is listed twice ({seen[m.id]} and {m.path})")
        seen[m.id] = m.path
    return members


def _member(x, i: int, label: str) -> Member:
    ok = (
        isinstance(x, dict)
        and isinstance(x.get("path"), str)
        and _relative(x["path"])
        and isinstance(x.get("id"), str)
        and _ID.fullmatch(x["id"])
        and type(x.get("bytes")) is int
        and x["bytes"] > 0
        and isinstance(x.get("sha256"), str)
        and _SHA256.fullmatch(x["sha256"])
    )
    if not ok:
        raise SetFileError(f"{label}: artifact {i + 1} of the set file needs path (relative), id (16 hex digits), bytes and sha256 (64 hex digits)")
    return Member(x["path"], x["id"], x["bytes"], x["sha256"])


def _relative(p: str) -> bool:
    """A relative POSIX path without NUL (it may climb out with ..: sets beside their shards' folders)."""
    return bool(p) and "\0" not in p and not posixpath.isabs(p) and "\\" not in p and len(p) <= 4096
