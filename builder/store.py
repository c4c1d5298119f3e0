"""The documents of a build, spilled to a scratch file beside the artifact.

The read stage appends each document as it is parsed; ``seal`` puts them in the artifact's order
(by path, then id); later stages read them back by index, a window at a time. A build thus holds
the text of one window, never the corpus's: in memory there are only two integers per document
(and, until ``seal``, its sort key).

Encoding of the scratch file: one msgpack array per document, back to back, in read order:
``[doc_id, path, kind, title, text, first_line, tags, status, description, record, head]``.

A corpus whose records add up to at most ``memory`` bytes (default: one window,
builder/stream.py ``WINDOW_BYTES``, which the chunk stage holds in memory anyway) is also kept
as its Documents, so the language and chunk stages take them back without reading and decoding
each record again (SciFact: about 10,000 reads and decodes). The file is written all the same,
so the records' sizes, and with them the windows and the artifact, do not depend on it.
"""

from __future__ import annotations

import os
from array import array
from typing import Callable, Iterator

import msgpack
import numpy as np

from kb.formats.artifact import Scratch

from .ingest import Document
from .stream import WINDOW_BYTES


class DocumentStore:
    """A sequence of Documents kept in a ``Scratch`` file; append while reading, then ``seal``."""

    def __init__(self, scratch: Scratch, keep: Callable[[str], bool] | None = None, memory: int | None = None):
        """``keep(path)``: whether a document is stored (a ``--shard`` build keeps its shard's);
        default: all. ``seen`` counts the documents offered, kept or not. ``memory``: the most
        record bytes also kept as Documents (default ``WINDOW_BYTES``; 0: none)."""
        self._file = scratch.file
        self._memory = WINDOW_BYTES if memory is None else memory
        self._docs: list[Document] | None = []  # read order; None once past ``memory``
        self._keep = keep
        self.seen = 0
        self._ends = array("q")  # end offset of each record, in read order
        self._keys: list | None = []
        self._order: np.ndarray | None = None
        self._size = 0
        self._packer = msgpack.Packer()

    def append(self, doc: Document) -> None:
        self.seen += 1
        if self._keep is not None and not self._keep(doc.path):
            return
        rec = self._packer.pack([doc.doc_id, doc.path, doc.kind, doc.title, doc.text, doc.first_line, list(doc.tags), doc.status, doc.description, doc.record, doc.head])
        self._file.write(rec)
        self._size += len(rec)
        self._ends.append(self._size)
        self._keys.append((doc.path, doc.doc_id))
        if self._docs is not None:
            self._docs.append(doc)
            if self._size > self._memory:
                self._docs = None

    def paths(self) -> list[str]:
        """The documents' paths, in read order; only before ``seal``."""
        return [path for path, _ in self._keys]

    def seal(self) -> None:
        """Order the documents by (path, id), as the artifact numbers them; no more appends."""
        keys, self._keys = self._keys, None
        self._order = np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)
        del keys
        self._file.flush()

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i: int) -> Document:
        j = int(self._order[i])
        if self._docs is not None:
            return self._docs[j]
        start = self._ends[j - 1] if j else 0
        # read, not mapped: pages of a map would count in the build's RSS until it ends
        raw = os.pread(self._file.fileno(), self._ends[j] - start, start)
        doc_id, path, kind, title, text, first_line, tags, status, description, record, head = msgpack.unpackb(raw)
        return Document(doc_id, path, kind, title, text, first_line, tuple(tags), status, description, record, head)

    def __iter__(self) -> Iterator[Document]:
        return (self[i] for i in range(len(self)))

    def text_sizes(self) -> np.ndarray:
        """Each document's record size in bytes, in the sealed order (windows are cut on these)."""
        ends = np.frombuffer(self._ends, dtype=np.int64)
        sizes = np.diff(ends, prepend=0)
        return sizes[self._order]

    def close(self) -> None:
        """Nothing to let go: the scratch file is the build's to close."""
