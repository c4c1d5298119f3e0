"""The kb artifact container: one file, a header, a section table, aligned sections, a footer.

Encoding (see formats/SPEC.md for the byte-level description and a worked example):

    [header 64 B][section table 64 B x n][pad][section 0][pad][section 1]...[footer 16 B]

Everything is little-endian. Every section starts at a multiple of ALIGNMENT (4 KiB) so raw
sections (numeric tables, postings, the HNSW index) are viewed in place through mmap. The reader
validates, in order: size, start magic, format version, header crc, footer magic, file length,
table bounds and crc, then every section's bounds, alignment and overlaps. A section's own crc32
is checked the first time the section is read (``Artifact.section``) or all at once by
``Artifact.verify()``, so opening a large artifact costs no full-file checksum.

Writer and reader live together here; the builder writes only through ``write_artifact`` and the
runtime reads only through ``Artifact``.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import sys
from contextlib import contextmanager
from array import array
from functools import cached_property
from pathlib import Path
from typing import Iterable, NamedTuple

from kb.common.errors import ArtifactError, UnsupportedVersion

from .checksum import crc32, crc32_many, summer

__all__ = ["Artifact", "ArtifactError", "CorruptArtifact", "FileRange", "NotAnArtifact", "Scratch", "SectionData", "UnsupportedVersion", "write_artifact"]

MAGIC = b"\x89KBA\r\n\x1a\n"
FOOTER_MAGIC = b"KBA-END\n"
FORMAT_VERSION = 5
OLDEST_SUPPORTED_VERSION = 1
ALIGNMENT = 4096

HEADER_SIZE = 64
ENTRY = struct.Struct("<32sQQQIHH")
ENTRY_SIZE = 64
FOOTER = struct.Struct("<II8s")
FOOTER_SIZE = 16
NAME_SIZE = 32

# Page checksums (SPEC.md, "pages.crc32"): sections of at least PAGED_MIN bytes also get a crc32
# per PAGE bytes, so a reader can verify the parts of a large section it reads, as it reads them,
# instead of the whole section at its first use (a second per gigabyte, at every process start).
PAGES = "pages.crc32"
PAGE = 4096
PAGED_MIN = 1 << 20

CODEC_RAW = 0
CODEC_ZSTD = 1
# A zstd section may decode to at most this many times its stored size (or 1 KiB). kb's sections
# compress 2-10x; the bound keeps a forged size from allocating gigabytes before decoding fails.
MAX_ZSTD_RATIO = 1000
CODECS = {CODEC_RAW: "raw", CODEC_ZSTD: "zstd"}
SKIPPABLE_FRAME = struct.Struct("<II")  # zstd's skippable frame: magic 0x184D2A50, then the payload's length


def within_zstd_ratio(frame: bytes, decoded: int) -> bytes:
    """``frame`` (zstd, ``decoded`` bytes when decoded) as the reader accepts it: a frame that
    compresses past MAX_ZSTD_RATIO (a run of one byte does) is followed by a skippable frame of
    zeros, long enough to bring it within the bound; every zstd decoder skips it. So the writer
    never writes what its own reader calls corrupt, and the bound stays."""
    if decoded <= MAX_ZSTD_RATIO * max(len(frame), 1024):
        return frame
    pad = max(0, -(-decoded // MAX_ZSTD_RATIO) - len(frame) - SKIPPABLE_FRAME.size)
    return bytes(frame) + SKIPPABLE_FRAME.pack(0x184D2A50, pad) + bytes(pad)

assert ENTRY.size == ENTRY_SIZE
assert FOOTER.size == FOOTER_SIZE


class NotAnArtifact(ArtifactError):
    """The file is not a kb artifact at all (exit 3)."""


class CorruptArtifact(ArtifactError):
    """The file is an artifact, but damaged or truncated (exit 3)."""


@contextmanager
def labelled(path):
    """A CorruptArtifact raised inside (by a record's own check, which knows no path) is raised
    again with ``path`` in front of its message."""
    try:
        yield
    except CorruptArtifact as e:
        raise CorruptArtifact(f"{path}: {e}") from None


# NamedTuples and a plain class, not frozen dataclasses: start-up cost (bench/startup_records.py).
class Section(NamedTuple):
    """One entry of the section table."""

    name: str
    offset: int
    length: int
    raw_length: int
    crc32: int
    codec: int


class FileRange:
    """``length`` bytes of the file at ``path`` from ``offset``: part of a section too large to hold
    in memory (the builder spills it to a ``Scratch`` file); the writer copies it in blocks. Not a
    tuple: a section's data is a tuple of parts."""

    __slots__ = ("path", "offset", "length")

    def __init__(self, path: str, offset: int, length: int):
        self.path, self.offset, self.length = path, offset, length


class SectionData(NamedTuple):
    """What the writer is given: a name, the stored bytes and how they are encoded. ``data`` is
    bytes-like, or a tuple of bytes-like parts and ``FileRange``s written one after another."""

    name: str
    data: bytes | bytearray | memoryview | tuple
    codec: int = CODEC_RAW
    raw_length: int | None = None

    @property
    def size(self) -> int:
        """The stored length in bytes."""
        return _size(self.data)


COPY_BLOCK = 1 << 20  # a FileRange is read, checksummed and written this many bytes at a time


def _parts(data) -> tuple:
    return data if isinstance(data, tuple) else (data,)


def _size(data) -> int:
    return sum(p.length if isinstance(p, FileRange) else len(p) for p in _parts(data))


def _blocks(data) -> Iterable:
    """The bytes of a section's data in order: in-memory parts whole, file ranges in blocks."""
    for p in _parts(data):
        if not isinstance(p, FileRange):
            yield p
            continue
        with open(p.path, "rb") as f:
            f.seek(p.offset)
            left = p.length
            while left:
                block = f.read(min(COPY_BLOCK, left))
                if not block:
                    raise OSError(f"{p.path} ended {left} bytes before the section it holds")
                left -= len(block)
                yield block


def _crc(data) -> int:
    crc = 0
    for block in _blocks(data):
        crc = crc32(block, crc)
    return crc


def _pad(n: int) -> int:
    return (-n) % ALIGNMENT


# Header layout: magic(8) version(u32) flags(u32) section_count(u32) entry_size(u32)
# table_offset(u64) file_length(u64) reserved(u64) reserved(12) header_crc32(u32) = 64 bytes
_HEADER = struct.Struct("<8sIIIIQQQ12sI")
assert _HEADER.size == HEADER_SIZE


def pack_header(section_count: int, file_length: int, version: int = FORMAT_VERSION) -> bytes:
    body = _HEADER.pack(MAGIC, version, 0, section_count, ENTRY_SIZE, HEADER_SIZE, file_length, 0, b"", 0)
    crc = crc32(body[:-4])
    return body[:-4] + struct.pack("<I", crc)


def unpack_header(buf: bytes | memoryview) -> dict:
    magic, version, flags, count, entry_size, table_offset, file_length, r1, r2, crc = _HEADER.unpack(
        bytes(buf[:HEADER_SIZE])
    )
    return {
        "reserved": bool(r1 or r2.strip(b"\0")),
        "magic": magic,
        "version": version,
        "flags": flags,
        "section_count": count,
        "entry_size": entry_size,
        "table_offset": table_offset,
        "file_length": file_length,
        "crc32": crc,
    }


def pack_entry(s: Section) -> bytes:
    name = s.name.encode("ascii")
    if not name or len(name) > NAME_SIZE:
        raise ValueError(f"section name {s.name!r} must be 1..{NAME_SIZE} ASCII bytes")
    return ENTRY.pack(name, s.offset, s.length, s.raw_length, s.crc32, s.codec, 0)


def unpack_entry(buf: bytes) -> Section:
    name, offset, length, raw_length, crc, codec, _reserved = ENTRY.unpack(buf)
    return Section(name.rstrip(b"\0").decode("ascii", "replace"), offset, length, raw_length, crc, codec)


def layout(sections: list[SectionData], crcs: list[int] | None = None) -> tuple[list[Section], int]:
    """Place sections: table right after the header, each section on a 4 KiB boundary."""
    pos = HEADER_SIZE + ENTRY_SIZE * len(sections)
    placed = []
    for i, sd in enumerate(sections):
        pos += _pad(pos)
        n = _size(sd.data)
        raw = n if sd.raw_length is None else sd.raw_length
        placed.append(Section(sd.name, pos, n, raw, _crc(sd.data) if crcs is None else crcs[i], sd.codec))
        pos += n
    return placed, pos + FOOTER_SIZE


def _checksums(data, paged: bool) -> tuple[int, bytes]:
    """(crc32 of ``data``, and when ``paged`` the crc32 of each PAGE bytes of it as u32s, else b"")."""
    crc, pages, carry = 0, array("I"), b""
    for block in _blocks(data):
        crc = crc32(block, crc)
        if not paged:
            continue
        mv = memoryview(block)
        if carry:
            take = PAGE - len(carry)
            carry += bytes(mv[:take])
            mv = mv[take:]
            if len(carry) < PAGE:
                continue
            pages.append(crc32(carry))
            carry = b""
        whole = len(mv) - len(mv) % PAGE
        page_crc = summer()
        pages.extend(page_crc(mv[o : o + PAGE]) for o in range(0, whole, PAGE))
        carry = bytes(mv[whole:])
    if carry:
        pages.append(crc32(carry))
    return crc, pages.tobytes() if sys.byteorder == "little" else _swapped(pages)


def _swapped(pages: array) -> bytes:
    pages.byteswap()
    return pages.tobytes()


def checksummed(sections: list[SectionData]) -> tuple[list[SectionData], list[int]]:
    """The sections, followed by ``pages.crc32`` when one of them is at least PAGED_MIN bytes,
    and the crc32 of each: every section's bytes are read once here."""
    crcs, pages = [], []
    for sd in sections:
        crc, page_crcs = _checksums(sd.data, _size(sd.data) >= PAGED_MIN)
        crcs.append(crc)
        pages.append(page_crcs)
    if not any(pages):
        return list(sections), crcs
    table = SectionData(PAGES, b"".join(pages))
    return list(sections) + [table], crcs + [crc32(table.data)]


def serialize(sections: list[SectionData], version: int = FORMAT_VERSION) -> Iterable[bytes]:
    """Yield the artifact's bytes in order (header, table, padded sections, footer)."""
    names = [s.name for s in sections]
    if len(set(names)) != len(names):
        raise ValueError("duplicate section names")
    if PAGES in names:
        raise ValueError(f"section {PAGES!r} is written by the writer itself")
    sections, crcs = checksummed(sections)
    placed, total = layout(sections, crcs)
    table = b"".join(pack_entry(s) for s in placed)
    yield pack_header(len(placed), total, version)
    yield table
    pos = HEADER_SIZE + len(table)
    for sd, s in zip(sections, placed):
        yield b"\0" * (s.offset - pos)
        yield from _blocks(sd.data)
        pos = s.offset + s.length
    yield FOOTER.pack(crc32(table), len(placed), FOOTER_MAGIC)


def write_artifact(path: str | os.PathLike, sections: list[SectionData], version: int = FORMAT_VERSION) -> int:
    """Write atomically: a temporary file beside the target, fsync, rename, fsync the folder.

    A failed or killed write leaves whatever was at ``path`` untouched, except for a temporary
    that a killed write cannot delete; the next write of ``path`` removes those. The new file
    keeps the mode of the one it replaces, else gets 0666 less the umask, like any file ``open``
    creates (the kernel applies the umask; the process's umask is never changed). Returns the size.
    ``version``: the header's format version (kb-build writes the current one; tests and tools
    that rewrite an older artifact keep its own).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    return replace_atomically(path, serialize(sections, version))


def replace_atomically(path: Path, parts: Iterable[bytes]) -> int:
    """Write ``parts`` to a new temporary beside ``path`` (created exclusively under a random
    name, so it never follows a link planted there), fsync, rename over ``path``, fsync the
    folder; a failure removes the temporary and leaves ``path`` as it was. Returns the size."""
    fd, tmp = create_temp(path)
    lock_fd = os.dup(fd)  # an exclusive lock held until the rename, or until this process dies:
    size = 0  # it tells remove_stale_temporaries in another build that this temporary is in use
    try:
        _lock(lock_fd)
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
                size += len(part)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, os.stat(path).st_mode & 0o777)
        except FileNotFoundError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    finally:
        os.close(lock_fd)
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # some filesystems refuse fsync on a directory; the rename stands
        pass
    return size


class Scratch:
    """A temporary file beside an artifact being built, for data too large to hold in memory
    (spilled documents, text, the vector index). Named like ``write_artifact``'s temporaries and
    locked while open, so a running build's are left alone; removed on ``close`` (after a success
    or a failure), and a killed build's by the next write of the same artifact
    (``remove_stale_temporaries``). ``file`` is open for reading and writing."""

    def __init__(self, target: str | os.PathLike):
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, self.path = create_temp(target, os.O_RDWR)
        try:
            _lock(fd)
            self.file = os.fdopen(fd, "w+b")
        except BaseException:
            os.close(fd)
            os.unlink(self.path)
            raise

    def close(self) -> None:
        try:
            self.file.close()  # flushes: on a full disk this raises, and the file goes all the same
        finally:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create_temp(path: Path, access: int = os.O_WRONLY) -> tuple[int, str]:
    """A new file ``.NAME.XXXXXXXX.tmp`` beside ``path``, created exclusively with mode 0666 less
    the umask. (tempfile.mkstemp would make it 0600, and reading the umask means setting it.)"""
    import secrets  # the runtime never writes: keep the import off the query path

    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, access | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temporary file beside {path}")


def _temporary_pattern(path: Path):
    """What ``write_artifact``'s temporaries for ``path`` are called: ``.NAME.XXXXXXXX.tmp``, where
    XXXXXXXX is eight random characters (hex from create_temp; tempfile.mkstemp's alphabet
    from kb before 2026-11-30)."""
    import re

    return re.compile(re.escape(f".{path.name}.") + r"[a-z0-9_]{8}" + re.escape(".tmp"))


def _lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; stale temporaries are then left alone
        return
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Delete the temporaries that killed writes of ``path`` left behind: only files named like
    this writer's own (``.NAME.XXXXXXXX.tmp`` beside ``path``) and only those no live process
    holds (a running write keeps an exclusive lock on its temporary). Returns the names removed."""
    try:
        import fcntl
    except ImportError:
        return []
    path = Path(path)
    pattern = _temporary_pattern(path)
    removed = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    for name in sorted(names):
        if not pattern.fullmatch(name):
            continue
        tmp = path.parent / name
        try:
            fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # locked: a write in progress
            continue
        finally:
            os.close(fd)
        try:
            os.unlink(tmp)
            removed.append(name)
        except OSError:
            pass
    return removed


def looks_like_artifact(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` starts with the artifact magic (a kb artifact, maybe damaged)."""
    try:
        with open_regular(path) as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def sorted_unique(a):
    """``np.unique(a)`` of a 1-d array, without its cost to a one-shot process: numpy 2 imports
    numpy.ma for np.unique (8-20 ms, once)."""
    import numpy as np

    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


class NotRegularFile(OSError):
    """A path that names a FIFO, a socket or a device, where a file is expected."""

    def __init__(self):
        super().__init__(0, "not a regular file (a FIFO, socket or device)")

    def __str__(self) -> str:
        return self.strerror


def open_regular(path, mode: str = "rb"):
    """``open(path, mode)`` for a regular file only: a FIFO or a device is refused (OSError
    with a strerror) before it is opened, so a read can neither block forever nor never end.
    The open itself is non-blocking, for a path swapped for a FIFO after the check."""
    st = os.stat(path)  # FileNotFoundError as open's
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile()
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def _private_copy(f, size: int, path) -> mmap.mmap:
    """The file's ``size`` bytes in anonymous memory; a file that shrinks while it is read is
    refused (it is being changed: the caller tries again later)."""
    m = mmap.mmap(-1, size)
    view, done = memoryview(m), 0
    try:
        while done < size:
            n = f.readinto(view[done:])
            if not n:
                raise CorruptArtifact(f"{path}: corrupt or truncated artifact: it changed while being read ({done:,} of {size:,} bytes)")
            done += n
    finally:
        view.release()
    return m


class Artifact:
    """A validated, memory-mapped artifact. Sections are memoryview slices of the map.

    Keep the Artifact alive for as long as anything viewed from it (a usearch index restored
    with view=True keeps no reference to the buffer).
    """

    def __init__(self, path: str | os.PathLike, private: bool = False):
        """``private``: read the file into memory of this process's own instead of mapping it,
        so a file changed in place later (``cp``, ``truncate``) cannot fault a reader (kb serve
        and kb mcp; README, "Artifacts that change while kb serve or kb mcp runs"): a mapped page of a truncated file raises SIGBUS."""
        self.path = Path(path)
        try:
            f = open_regular(self.path)
        except FileNotFoundError:
            raise ArtifactError(f"{self.path}: no such artifact; build one with kb-build or pass -i PATH") from None
        except IsADirectoryError:
            raise NotAnArtifact(f"{self.path}: is a directory, not a kb artifact") from None
        except OSError as e:
            raise ArtifactError(f"{self.path}: cannot open: {e.strerror}") from None
        with f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise NotAnArtifact(f"{self.path}: empty file, not a kb artifact")
            self._mmap = _private_copy(f, size, self.path) if private else mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._buf = memoryview(self._mmap)
        self.size = size
        self._checked: set[str] = set()
        self._pages: dict | None = None  # section -> its page crcs, read on first need
        self._pages_ok: dict = {}  # section -> which pages were verified
        try:
            self.version, self.sections = validate(self._buf, str(self.path))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        buf, self._buf = getattr(self, "_buf", None), None
        if buf is not None:
            buf.release()
        m = getattr(self, "_mmap", None)
        if m is not None:
            try:
                m.close()
            except BufferError:  # a view is still exported (e.g. numpy array); the OS frees it later
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @cached_property
    def id(self) -> str:
        """A content id: BLAKE2b-64 of header and section table (which hold every section's crc32);
        computed once (every search result names its artifact)."""
        import hashlib

        end = HEADER_SIZE + ENTRY_SIZE * len(self.sections)
        return hashlib.blake2b(self._buf[:end], digest_size=8).hexdigest()

    def __contains__(self, name: str) -> bool:
        return name in self.sections

    def raw(self, name: str, paged: bool = False) -> memoryview:
        """The stored bytes of a section, crc-checked on first access. ``paged``: the caller
        checks each range before it uses it (``check_range``); the whole section is then not
        read here, unless the artifact has no page checksums for it."""
        s = self.sections.get(name)
        if s is None:
            raise CorruptArtifact(f"{self.path}: corrupt artifact: section {name!r} is missing")
        view = self._buf[s.offset : s.offset + s.length]
        if name not in self._checked and not (paged and self._page_crcs(name) is not None):
            if crc32(view) != s.crc32:
                raise CorruptArtifact(f"{self.path}: corrupt artifact: crc mismatch in section {name!r}")
            self._checked.add(name)
        return view

    def _crcs_to_check(self, name: str):
        """Section ``name``'s page checksums, or None when nothing is left to check by page: the
        section was verified whole already, or it has no page checksums (then it is, now)."""
        if name in self._checked:
            return None
        crcs = self._page_crcs(name)
        if crcs is None:
            self.raw(name)
        return crcs

    def check_range(self, name: str, start: int, stop: int) -> None:
        """Verify bytes [start, stop) of section ``name`` by their page checksums (each page once
        per process); the whole section's crc32 when it has none."""
        import numpy as np

        crcs = self._crcs_to_check(name)
        if crcs is None:
            return
        first, last = start // PAGE, -(-stop // PAGE)
        ok = self._pages_ok[name]
        if last - first == 1:  # most items lie in one page: a scalar test, not an array walk
            if not ok[first]:
                self._check_page(name, first, crcs)
            return
        self._check_many(name, first + np.flatnonzero(~ok[first:last]), crcs)

    def check_pages(self, name: str, starts, stops) -> None:
        """``check_range`` for many ranges at once (rows of a table)."""
        import numpy as np

        crcs = self._crcs_to_check(name)
        if crcs is None:
            return
        starts, stops = np.asarray(starts, dtype=np.int64), np.asarray(stops, dtype=np.int64)
        pages = np.concatenate([starts // PAGE, (np.maximum(stops, starts + 1) - 1) // PAGE])
        ok = self._pages_ok[name]
        self._check_many(name, sorted_unique(pages[~ok[pages]]), crcs)  # nothing to sort once the pages were seen

    def page_table(self, name: str) -> tuple | None:
        """(the crc32 of each page of section ``name``, which of them were verified: a numpy u32
        and a bool array, the second written as pages are verified) for a reader that checks pages
        itself (runtime/graph_walk.py's compiled walk, ``page_mismatch`` for a wrong one); None once
        the whole section is verified, as it is here when it has no page checksums."""
        crcs = self._crcs_to_check(name)
        return None if crcs is None else (crcs, self._pages_ok[name])

    def _check_many(self, name: str, pages, crcs) -> None:
        """``_check_page`` of each of ``pages`` (an integer array): one call sums them all
        (formats/checksum.py ``crc32_many``), then one comparison, so a search that reads
        thousands of pages pays little besides the crc32s."""
        import numpy as np

        pages = np.asarray(pages, dtype=np.int64)
        if not len(pages):
            return
        s = self.sections[name]
        starts = s.offset + pages * PAGE
        got = crc32_many(self._buf, starts, np.minimum(starts + PAGE, s.offset + s.length))
        bad = np.flatnonzero(got != crcs[pages])
        if len(bad):
            raise self.page_mismatch(name, int(pages[bad[0]]))
        self._pages_ok[name][pages] = True

    def _check_page(self, name: str, p: int, crcs) -> None:
        s = self.sections[name]
        lo = s.offset + p * PAGE
        if crc32(self._buf[lo : min(lo + PAGE, s.offset + s.length)]) != crcs[p]:
            raise self.page_mismatch(name, p)
        self._pages_ok[name][p] = True

    def page_mismatch(self, name: str, p: int) -> CorruptArtifact:
        """The error for page ``p`` of section ``name`` when its crc32 is wrong."""
        return CorruptArtifact(f"{self.path}: corrupt artifact: crc mismatch in section {name!r} (page {p})")

    def _page_crcs(self, name: str):
        """The page checksums of ``name`` (a numpy u32 array), or None (no ``pages.crc32``, or the
        section is small)."""
        if PAGES not in self.sections:
            return None
        if self._pages is None:
            import numpy as np

            table = self.section(PAGES)
            pages, at = {}, 0
            for n, s in self.sections.items():
                if s.length >= PAGED_MIN and n != PAGES:
                    count = -(-s.length // PAGE)
                    pages[n] = np.frombuffer(table, dtype="<u4", count=count, offset=at) if at + 4 * count <= len(table) else None
                    at += 4 * count
            if at != len(table):
                raise CorruptArtifact(f"{self.path}: corrupt artifact: section {PAGES!r} does not match the sections it covers")
            self._pages_ok = {n: np.zeros(len(c), dtype=bool) for n, c in pages.items()}
            self._pages = pages
        return self._pages.get(name)

    def unchecked(self, name: str) -> memoryview:
        """The stored bytes of a raw section, without checking its crc32. Only for sections
        read through checksums of their own parts, which check every byte before it is used
        (``model.query`` and the ``model.embed`` it points into: formats/query_model.py)."""
        s = self.sections.get(name)
        if s is None:
            raise CorruptArtifact(f"{self.path}: corrupt artifact: section {name!r} is missing")
        if s.codec != CODEC_RAW:
            raise CorruptArtifact(f"{self.path}: corrupt artifact: section {name!r} must be raw")
        return self._buf[s.offset : s.offset + s.length]

    def section(self, name: str, paged: bool = False) -> memoryview | bytes:
        """A section's decoded bytes: a zero-copy view for raw sections (``paged``: see ``raw``),
        bytes for zstd ones."""
        s = self.sections.get(name)
        view = self.raw(name, paged and s is not None and s.codec == CODEC_RAW)
        if s.codec == CODEC_RAW:
            return view
        import zstandard

        try:  # the frame must declare the size the table gives, and that size must be plausible
            declared = zstandard.frame_content_size(view)
            if declared != s.raw_length or s.raw_length > MAX_ZSTD_RATIO * max(s.length, 1024):
                raise CorruptArtifact(f"{self.path}: corrupt artifact: section {name!r} declares an implausible decoded size")
            out = zstandard.ZstdDecompressor().decompress(view, max_output_size=s.raw_length)
        except zstandard.ZstdError as e:
            raise CorruptArtifact(f"{self.path}: corrupt artifact: section {name!r}: {e}") from None
        if len(out) != s.raw_length:
            raise CorruptArtifact(f"{self.path}: corrupt artifact: section {name!r} decodes to the wrong size")
        return out

    def verify(self) -> None:
        """Check every section's crc32 (what ``kb info --verify`` does)."""
        for name in self.sections:
            self.raw(name)


def validate(buf: memoryview, label: str) -> tuple[int, dict[str, Section]]:
    """Check the container before any offset in it is trusted. Returns (version, sections)."""
    size = len(buf)
    if size < len(MAGIC) or bytes(buf[: len(MAGIC)]) != MAGIC:
        raise NotAnArtifact(f"{label}: not a kb artifact (bad magic)")
    if size < HEADER_SIZE + FOOTER_SIZE:
        raise CorruptArtifact(f"{label}: corrupt or truncated artifact: {size} bytes is shorter than header and footer")
    h = unpack_header(buf)
    if h["version"] < OLDEST_SUPPORTED_VERSION:
        raise UnsupportedVersion(
            f"{label}: format too old: version {h['version']}, this kb reads {OLDEST_SUPPORTED_VERSION}..{FORMAT_VERSION}; rebuild it with kb-build"
        )
    if h["version"] > FORMAT_VERSION:
        raise UnsupportedVersion(
            f"{label}: format too new: version {h['version']}, this kb reads {OLDEST_SUPPORTED_VERSION}..{FORMAT_VERSION}; upgrade kb"
        )
    if crc32(buf[: HEADER_SIZE - 4]) != h["crc32"]:
        raise CorruptArtifact(f"{label}: corrupt artifact: header crc mismatch")
    if h["flags"]:  # no flag is defined yet: a set bit asks for a feature this reader does not have
        raise CorruptArtifact(f"{label}: corrupt artifact: header flags 0x{h['flags']:08x} are not defined in format version {h['version']}")
    if h["reserved"]:
        raise CorruptArtifact(f"{label}: corrupt artifact: reserved header bytes are not zero")
    if h["file_length"] != size:
        raise CorruptArtifact(
            f"{label}: corrupt or truncated artifact: header says {h['file_length']} bytes, file has {size}"
        )
    table_crc, footer_count, footer_magic = FOOTER.unpack(bytes(buf[size - FOOTER_SIZE :]))
    if footer_magic != FOOTER_MAGIC:
        raise CorruptArtifact(f"{label}: corrupt or truncated artifact: bad footer magic")
    count = h["section_count"]
    if h["entry_size"] != ENTRY_SIZE or h["table_offset"] != HEADER_SIZE or footer_count != count:
        raise CorruptArtifact(f"{label}: corrupt artifact: inconsistent section table header")
    table_end = HEADER_SIZE + count * ENTRY_SIZE
    if table_end > size - FOOTER_SIZE:
        raise CorruptArtifact(f"{label}: corrupt artifact: section table runs past the end of the file")
    table = bytes(buf[HEADER_SIZE:table_end])
    if crc32(table) != table_crc:
        raise CorruptArtifact(f"{label}: corrupt artifact: section table crc mismatch")
    sections: dict[str, Section] = {}
    prev_end = table_end
    for i in range(count):
        s = unpack_entry(table[i * ENTRY_SIZE : (i + 1) * ENTRY_SIZE])
        if s.name in sections:
            raise CorruptArtifact(f"{label}: corrupt artifact: duplicate section {s.name!r}")
        if s.codec not in CODECS:
            raise CorruptArtifact(f"{label}: corrupt artifact: section {s.name!r} has unknown codec {s.codec}")
        if s.offset % ALIGNMENT:
            raise CorruptArtifact(f"{label}: corrupt artifact: section {s.name!r} is not 4 KiB aligned")
        if s.offset < prev_end:
            raise CorruptArtifact(f"{label}: corrupt artifact: section {s.name!r} overlaps its predecessor")
        end = s.offset + s.length
        if end > size - FOOTER_SIZE:
            raise CorruptArtifact(f"{label}: corrupt or truncated artifact: section {s.name!r} runs past the end")
        if s.codec == CODEC_RAW and s.raw_length != s.length:
            raise CorruptArtifact(f"{label}: corrupt artifact: raw section {s.name!r} has two lengths")
        sections[s.name] = s
        prev_end = end
    if size - FOOTER_SIZE - prev_end >= ALIGNMENT:
        raise CorruptArtifact(f"{label}: corrupt artifact: unaccounted bytes before the footer")
    return h["version"], sections
