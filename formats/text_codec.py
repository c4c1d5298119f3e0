"""The zstd codec of ``text.blocks`` and ``docs.source``: a writer and a reader.

Each item of those blob tables is one zstd frame that declares its decoded size, compressed at
ZSTD_LEVEL with the ``text.dict`` dictionary (empty: plain zstd). The writer trains the
dictionary on a sample of the records; the reader refuses a frame whose declared size is more
than MAX_ZSTD_RATIO times its own (or 1 KiB) before decoding it, so a forged size cannot
allocate gigabytes; the writer pads a frame that compresses better than that
(formats/artifact.py ``within_zstd_ratio``), so the two agree.
"""

from __future__ import annotations

from .artifact import MAX_ZSTD_RATIO, CorruptArtifact
from .records import ZSTD_LEVEL

DICT_BYTES = 32 * 1024  # at most; a dictionary is about a tenth of the text it is trained on
DICT_MIN_BYTES = 4 * 1024  # below this a dictionary does not pay for its own bytes
DICT_MIN_SAMPLES = 64  # below this, training fails or does not pay
# Fixed COVER parameters (segment size k, d-mer size d): letting zstd search for them cost ~5 s
# on 3.6k Hugo chunks; k=256, d=8 trains in 0.1 s and compresses within 1% of the searched best.
DICT_K, DICT_D = 256, 8
# Train on every n-th record, at most about 100x the dictionary's size (zstd's rule of thumb):
# on SciFact's 8.9 MB of records that trains in 0.11 s instead of 0.32 s, for 0.45% more bytes.
DICT_SAMPLE_FACTOR = 100


def train_dictionary(count: int, total: int, record) -> bytes:
    """``text.dict`` for ``count`` records of ``total`` bytes, ``record(i)`` giving record i's
    bytes; empty where there is too little or too uniform text to train on."""
    import zstandard

    dict_bytes = min(DICT_BYTES, total // 10)
    if count < DICT_MIN_SAMPLES or dict_bytes < DICT_MIN_BYTES:
        return b""
    step = max(1, -(-total // (DICT_SAMPLE_FACTOR * dict_bytes)))
    try:
        samples = [record(i) for i in range(0, count, step)]
        return zstandard.train_dictionary(dict_bytes, samples, k=DICT_K, d=DICT_D, threads=1, level=ZSTD_LEVEL).as_bytes()
    except zstandard.ZstdError:
        return b""  # plain zstd still works


def text_writer(zdict: bytes):
    """The writer: a zstd compressor whose frames declare their size, with ``zdict`` if any."""
    import zstandard

    params = {"level": ZSTD_LEVEL, "write_content_size": True, "write_checksum": False}
    if zdict:
        params["dict_data"] = zstandard.ZstdCompressionDict(zdict)
    return zstandard.ZstdCompressor(**params)


class TextReader:
    """The reader: decodes frames with ``zdict``; ``label`` (the artifact's path) starts its
    errors. One zstd context: callers serialize ``decode``."""

    def __init__(self, zdict: bytes, label: str):
        import zstandard

        self.label = label
        self._dctx = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(zdict)) if zdict else zstandard.ZstdDecompressor()

    def decode(self, frame, what: str) -> bytes:
        """The bytes ``frame`` holds, or CorruptArtifact ("``what`` does not decode")."""
        import zstandard

        try:
            frame = bytes(frame)
            if zstandard.frame_content_size(frame) > MAX_ZSTD_RATIO * max(len(frame), 1024):
                raise zstandard.ZstdError("implausible decoded size")  # a forged size would allocate it
            return self._dctx.decompress(frame)
        except zstandard.ZstdError:
            raise CorruptArtifact(f"{self.label}: corrupt artifact: {what} does not decode") from None
