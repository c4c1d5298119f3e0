"""Fuzz targets and their input generators.

A target is ``fn(data: bytes) -> str``: it feeds one input to kb the way a user's command would
and returns the outcome (``"ok"`` or the exit code kb would give). It raises ``Finding`` when kb
misbehaves: an exception that would reach the user as a traceback or the wrong exit code, a
document the builder would then fail to write, or an HTTP 500.

A generator is ``gen(rng) -> bytes``: seeded, structure-aware mutations of valid inputs. The
artifact mutator reaches past the checksums on purpose: most of its inputs are re-serialized
with correct crc32s (or have their crcs forged), so the reader's checks behind the crcs are the
ones exercised, as an attacker who edits a file would.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import struct
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Finding(Exception):
    """kb misbehaved on an input; the message says how."""


# --- seeds -------------------------------------------------------------------------------------
SEED_CORPUS = {
    "backups.md": "---\ntitle: Backups\ntags: [ops, storage]\nstatus: live-doctrine\ndescription: How backups run.\n---\n# Backups\n\nNightly restic backup to the NAS at 02:00.\n\n## Restore\n\nRun restic restore latest --target /srv.\n",
    "gpu.md": "+++\ntitle = \"GPU nodes\"\ntags = [\"gpu\", \"ops\"]\nstatus = \"derived\"\n+++\n# GPU nodes\n\nThe gpu01 node runs CUDA 12.\n",
    "old.md": "---\nstatus: historical\ntags: storage\n---\n# Old rsync backups\n\nBackups ran with rsync before 2021.\n",
    "notes/glossary.md": "# Glossary\n\n- **NAS**: network attached storage\n- **RPO**: recovery point objective\n",
    "services.json": json.dumps({"services": [{"name": f"svc{i}", "port": 8000 + i, "owner": "ops"} for i in range(12)]}, separators=(",", ":")),
    "rotation.yaml": "rotation:\n  - name: alice\n    weeks: [1, 3]\n  - name: bob\n    weeks: [2, 4]\nbase: &b {pager: true}\nprimary: *b\n",
    "alerts.toml": "[disk]\nthreshold = 90\nchannel = \"#ops\"\n[[rules]]\nname = \"replication lag\"\nminutes = 15\n",
    "gateway.txt": "The gateway forwards port 443 to the reverse proxy.\nWireGuard listens on 51820.\n",
}
SEED_JSONL = [
    {"id": "d1", "title": "Brains", "text": "white matter and grey matter", "tags": ["bio"], "status": "derived"},
    {"_id": 7, "text": "no title here", "path": "db/rows/7"},
    {"id": "d3", "text": "tags as a string", "tags": "a, b c"},
]


def _register_stand_ins() -> None:
    """The seed artifacts use the tests' hash embedder (tests/fakes.py): kb-build and kb need it."""
    try:
        from tests import fakes
    except ImportError:  # under pytest, tests/ itself is on sys.path
        import fakes
    fakes.register()


_register_stand_ins()

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def build_tiny_model_artifact(corpus: Path, out: Path) -> None:
    """The seed corpus embedded by a tiny random CTranslate2 BERT (tests/bert_ref.py), with its
    model.embed and model.query sections."""
    try:
        from tests import bert_ref
    except ImportError:
        import bert_ref
    from kb.builder.build import build
    from kb.builder.embedders import register_embedder
    from kb.models.encoders import CT2Embedder

    files = bert_ref.tiny_embedder(out.parent / "tiny-ct2", bert_ref.rich_wordpiece())
    register_embedder("tiny-ct2", lambda quantization: CT2Embedder(files, device="cpu"))
    build([corpus], out, replace(_seed_config(), embedding_model="tiny-ct2", reranker="none"), jobs=1)


def _tiny_model_seed(corpus: Path, out: Path) -> bytes | None:
    """``build_tiny_model_artifact`` in a child process: CTranslate2's OpenMP threads must not
    exist in a process the fuzz runner forks (a forked worker that uses CTranslate2 again would
    wait forever on a lock one of them held). None without ctranslate2 or safetensors."""
    import subprocess
    import sys

    code = (f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}]\n"
            "from pathlib import Path\n"
            "from tests.fuzz import targets\n"
            f"targets.build_tiny_model_artifact(Path({str(corpus)!r}), Path({str(out)!r}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode:
        if "ModuleNotFoundError" in r.stderr:
            return None
        raise RuntimeError(f"the tiny-model seed did not build: {r.stderr.strip()[-500:]}")
    return out.read_bytes()


def _seed_config():
    """The build settings of the seed artifacts: kb-build's defaults, but with the [vectors]
    settings the seeds were first built with (M 16, vectors added in chunk order at float16), so
    that a recorded finding (an input index of a seed) replays the same bytes after kb-build's
    defaults move. The reader of the graph is the same for every M and add order."""
    from kb.builder.config import BuildConfig, VectorOptions

    return replace(BuildConfig(), vectors=VectorOptions(connectivity=16, add_order="chunks", add_dtype="same"))


def build_seed_artifacts(folder: Path) -> list[bytes]:
    """Artifacts of the seed corpus in the current format: with (hash) vectors, BM25 only; the
    golden artifacts of the older formats (their readers are fuzzed too); then (when ctranslate2
    and safetensors are installed) the seed corpus with a tiny real model and its model.query
    section; a format 4 artifact (the seed corpus with two German pages); and a format 5 one (the
    same, with an English leg beside a main one, and vectors.rows)."""
    from kb.builder.build import build

    corpus = folder / "corpus"
    for name, text in SEED_CORPUS.items():
        p = corpus / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    out = []
    for embedder in ("hash", "none"):
        path = folder / f"seed-{embedder}.kb"
        build([corpus], path, replace(_seed_config(), embedding_model=embedder, reranker="none"), jobs=1)
        out.append(path.read_bytes())
    old = [(GOLDEN / f"tiny-v{v}.kb").read_bytes() for v in (1, 2)]
    tiny = _tiny_model_seed(corpus, folder / "seed-tiny-ct2.kb")
    built = out + old + ([tiny] if tiny is not None else []) + [_format_4_seed(corpus, folder / "seed-v4.kb"), _format_5_seed(corpus, folder / "seed-v5.kb")]
    return [_as_first_built(b) for b in built]


def _as_first_built(seed: bytes) -> bytes:
    """A seed without the sections kb-build added after the recorded findings (chunks.key and
    vectors.inputs, 2026-12-06: optional, so every reader reads the seed as before), so that a
    finding's input index replays the same bytes; tests/formats/test_hostile_artifact.py forges
    those sections itself."""
    from kb.formats import layout as L
    from kb.formats.artifact import serialize

    version, sections = _sections_of(seed)
    kept = [s for s in sections if s.name not in (L.CHUNK_KEYS, L.VECTOR_INPUTS)]
    return seed if len(kept) == len(sections) else b"".join(serialize(kept, version=version))


GERMAN = {  # with the seed corpus: two languages, so format 4's statistics per language
    "de/sicherung.md": "---\ntitle: Sicherung\ntags: [ops]\n---\n# Sicherung\n\nDie Sicherung läuft jede Nacht mit restic auf das NAS, und sie wird jeden Morgen geprüft.\n",
    "de/wiederherstellung.md": "# Wiederherstellung\n\nMan stellt die Dateien mit restic wieder her, wenn der Server nicht mehr startet und die Daten fehlen.\n",
}


def _format_4_seed(corpus: Path, out: Path) -> bytes:
    """The seed corpus with two German pages, built with statistics per language for languages
    of any size (kb-build keeps them from 50 documents: builder/postings.py STATS_MIN_DOCS)."""
    from kb.builder import postings
    from kb.builder.build import build

    for name, text in GERMAN.items():
        p = corpus / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    saved, postings.STATS_MIN_DOCS = postings.STATS_MIN_DOCS, 1
    try:
        build([corpus], out, replace(_seed_config(), embedding_model="hash", reranker="none"), jobs=1)
    finally:
        postings.STATS_MIN_DOCS = saved
        for name in GERMAN:
            (corpus / name).unlink()
    return out.read_bytes()


def _format_5_seed(corpus: Path, out: Path) -> bytes:
    """The seed corpus with the two German pages, as "auto" builds a corpus of several languages
    with English in it: a main dense leg and the English leg (stand-ins of 32 and 64 dimensions),
    their graphs built by several threads, with vectors.rows written for both (a graph of a few
    nodes is in key order whatever the threads, so the section is added as the builder writes it)."""
    import numpy as np

    from kb.builder import build as build_module
    from kb.builder import embedders
    from kb.builder.build import build
    from kb.formats import layout as L
    from kb.formats.artifact import SectionData, serialize

    try:
        from tests import fakes
    except ImportError:  # under pytest, tests/ itself is on sys.path
        import fakes

    for name, text in GERMAN.items():
        p = corpus / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    saved = build_module.choose_embedder, build_module.english_leg
    build_module.choose_embedder, build_module.english_leg = (lambda languages: "hash-multi"), (lambda languages, model: "hash")
    embedders.register_embedder("hash-multi", lambda quantization: fakes.HashEmbedder(32, "hash-multi"))  # the main leg's stand-in
    try:
        build([corpus], out, replace(_seed_config(), reranker="none"), jobs=1)
    finally:
        build_module.choose_embedder, build_module.english_leg = saved
        embedders.EMBEDDERS.pop("hash-multi", None)  # kb-build's list of models stays the tests' usual one
        for name in GERMAN:
            (corpus / name).unlink()
    version, sections = _sections_of(out.read_bytes())
    n = len(next(s for s in sections if s.name == L.CHUNKS).data) // L.CHUNK_DTYPE.itemsize
    rows = [SectionData(name, np.arange(n, dtype="<u4").tobytes()) for name in (L.VECTOR_ROWS, L.VECTOR_ROWS_EN) if name not in {s.name for s in sections}]
    out.write_bytes(b"".join(serialize(sections + rows, version=version)))
    return out.read_bytes()


# --- generic byte mutations ----------------------------------------------------------------------
INTERESTING_INTS = [0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 4095, 4096, 65535, 65536,
                    2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]


def mutate_bytes(rng: random.Random, data: bytes, tokens: list[bytes] = (), others: list[bytes] = (), rounds: int | None = None) -> bytes:
    """A few byte-level edits: bit flips, interesting bytes and integers, inserted tokens, deleted,
    duplicated and spliced ranges."""
    b = bytearray(data)
    for _ in range(rounds or rng.choice((1, 1, 2, 3, 5, 8))):
        n = len(b)
        op = rng.randrange(9)
        i = rng.randrange(n + 1) if n else 0
        if op == 0 and n:
            b[min(i, n - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            b[min(i, n - 1)] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, 0x20, 0x0A, 0x22, 0x5C, rng.randrange(256)))
        elif op == 2 and n >= 8:
            j = rng.randrange(n - 7)
            fmt = rng.choice(("<I", "<Q", "<H", ">I"))
            size = struct.calcsize(fmt)
            b[j : j + size] = struct.pack(fmt, rng.choice(INTERESTING_INTS) % (1 << (8 * size)))
        elif op == 3 and tokens:
            b[i:i] = rng.choice(tokens)
        elif op == 4 and n:
            j = rng.randrange(i, min(n, i + rng.choice((1, 4, 64, 1024))) + 1)
            del b[i:j]
        elif op == 5 and n:
            j = rng.randrange(i, min(n, i + rng.choice((1, 8, 64, 512))) + 1)
            b[i:i] = b[i:j] * rng.choice((1, 2, 16))
        elif op == 6 and others:
            o = rng.choice(others)
            if o:
                a = rng.randrange(len(o))
                b[i:i] = o[a : a + rng.choice((4, 32, 256))]
        elif op == 7 and n:
            del b[i:]  # truncate
        else:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 2, 4, 16))))
    return bytes(b)


# --- the artifact reader -------------------------------------------------------------------------
def _sections_of(buf: bytes):
    """(format version, sections) of a seed."""
    from kb.formats.artifact import SectionData, validate

    version, secs = validate(memoryview(buf), "seed")
    return version, [SectionData(s.name, buf[s.offset : s.offset + s.length], s.codec, s.raw_length) for s in secs.values()]


_META_VALUES = [None, True, 0, 1, -1, 2**31, 2**64 - 1, -(2**63), 1e308, float("nan"), float("inf"), 0.5, "", "x", "ops",
                "a" * 300, [], [1, 2], ["ops", "storage"], [None], {}, {"a": 1}, {"names": 3}, b"\xff\x00"]


def _mutate_tree(rng: random.Random, obj, depth: int = 0):
    """A msgpack-able value with one part replaced, dropped or retyped."""
    if isinstance(obj, dict) and obj and depth < 6 and rng.random() < 0.7:
        k = rng.choice(list(obj))
        out = dict(obj)
        r = rng.random()
        if r < 0.15:
            del out[k]
        else:
            out[k] = _mutate_tree(rng, obj[k], depth + 1)
        return out
    if isinstance(obj, list) and obj and depth < 6 and rng.random() < 0.7:
        out = list(obj)
        i = rng.randrange(len(out))
        r = rng.random()
        if r < 0.15:
            del out[i]
        elif r < 0.3:
            out.append(rng.choice(out))
        else:
            out[i] = _mutate_tree(rng, out[i], depth + 1)
        return out
    return rng.choice(_META_VALUES)


def _encode_with(codec: int, raw: bytes):
    import zstandard

    from kb.formats.artifact import CODEC_ZSTD

    return (zstandard.ZstdCompressor(level=1).compress(raw), len(raw)) if codec == CODEC_ZSTD else (raw, len(raw))


def _decoded(sd) -> bytes:
    import zstandard

    from kb.formats.artifact import CODEC_ZSTD

    return zstandard.ZstdDecompressor().decompress(sd.data, max_output_size=sd.raw_length) if sd.codec == CODEC_ZSTD else bytes(sd.data)


def _mutate_section(rng: random.Random, sd, sections):
    """One section's content changed at the level it is read: msgpack values for meta and the
    manifest, records inside text blocks, items of blob tables, rows of numeric tables, or bytes."""
    import msgpack

    from kb.formats import layout as L
    from kb.formats.artifact import SectionData

    try:
        raw = _decoded(sd)
    except Exception:  # noqa: BLE001 - an earlier round already broke it: keep its bytes
        raw = bytes(sd.data)
    r = rng.random()
    try:
        if sd.name in (L.META, L.MANIFEST) and r < 0.8:
            raw = msgpack.packb(_mutate_tree(rng, msgpack.unpackb(raw)), use_bin_type=True)
        elif sd.name == L.TEXT_BLOCKS and r < 0.6:
            raw = _mutate_text_blocks(rng, raw, sections)
        elif sd.name in (L.DOC_PATHS, L.TERM_STRINGS, L.POSTINGS, L.TAG_BITMAPS, L.STATUS_BITMAPS, L.DOC_SOURCES) and r < 0.5:
            items = [bytes(x) for x in L.BlobTable(raw)]
            if items:
                i = rng.randrange(len(items))
                items[i] = mutate_bytes(rng, items[i], others=items) if rng.random() < 0.8 else b""
                if rng.random() < 0.2:
                    del items[rng.randrange(len(items))]
            raw = L.pack_blobs(items)
        else:
            raw = mutate_bytes(rng, raw, others=[bytes(s.data) for s in sections])
    except Exception:  # noqa: BLE001 - not decodable (an earlier round): mutate its bytes instead
        raw = mutate_bytes(rng, raw)
    data, n = _encode_with(sd.codec, raw)
    return SectionData(sd.name, data, sd.codec, n if rng.random() < 0.95 else rng.choice(INTERESTING_INTS))


def _mutate_text_blocks(rng, raw: bytes, sections) -> bytes:
    import msgpack
    import zstandard

    from kb.formats import layout as L

    zdict = next((bytes(s.data) for s in sections if s.name == L.TEXT_DICT), b"")
    d = zstandard.ZstdCompressionDict(zdict) if zdict else None
    items = [bytes(x) for x in L.BlobTable(raw)]
    if not items:
        return raw
    i = rng.randrange(len(items))
    dctx = zstandard.ZstdDecompressor(dict_data=d) if d else zstandard.ZstdDecompressor()
    block = msgpack.unpackb(dctx.decompress(items[i]))
    packed = msgpack.packb(_mutate_tree(rng, block), use_bin_type=True)
    cctx = zstandard.ZstdCompressor(level=1, dict_data=d) if d else zstandard.ZstdCompressor(level=1)
    items[i] = cctx.compress(packed)
    return L.pack_blobs(items)


def mutate_artifact(rng: random.Random, seeds: list[bytes]) -> bytes:
    from kb.formats import artifact as A

    seed = rng.choice(seeds)
    kind = rng.randrange(10)
    if kind == 0:  # bytes anywhere, checksums left as they are
        return mutate_bytes(rng, seed)
    version, sections = _sections_of(seed)
    if kind <= 5:  # one or two sections' content, re-serialized with correct checksums
        for _ in range(rng.choice((1, 1, 2))):
            i = rng.randrange(len(sections))
            sections[i] = _mutate_section(rng, sections[i], sections)
        return b"".join(A.serialize(sections, version))
    if kind == 6:  # sections renamed, dropped, duplicated in content or reordered
        i = rng.randrange(len(sections))
        op = rng.randrange(4)
        if op == 0:
            name = rng.choice([s.name for s in sections] + ["vectors.hnsx", "x", "meta2", "model.rerank"])
            if name not in {s.name for s in sections}:
                sections[i] = sections[i]._replace(name=name)
        elif op == 1:
            del sections[i]
        elif op == 2:
            j = rng.randrange(len(sections))
            sections[i] = sections[j]._replace(name=sections[i].name)
        else:
            rng.shuffle(sections)
        return b"".join(A.serialize(sections, version)) if sections else seed[:64]
    buf = bytearray(b"".join(A.serialize(sections, version)))
    count = len(sections)
    table_end = A.HEADER_SIZE + A.ENTRY_SIZE * count
    if kind == 7:  # a section table entry's fields, table crc forged
        i = rng.randrange(count)
        off = A.HEADER_SIZE + i * A.ENTRY_SIZE
        entry = list(A.ENTRY.unpack(bytes(buf[off : off + A.ENTRY_SIZE])))
        f = rng.randrange(7)
        if f == 0:
            entry[0] = rng.choice([b"vectors.hnsx", b"meta", b"", b"\xff" * 32, entry[0][:-1] + b"\x00\x01"])
        else:
            bits = {1: 64, 2: 64, 3: 64, 4: 32, 5: 16, 6: 16}[f]
            entry[f] = rng.choice(INTERESTING_INTS + [entry[f] + 1, max(entry[f] - 1, 0), entry[f] + 4096]) % (1 << bits)
        buf[off : off + A.ENTRY_SIZE] = A.ENTRY.pack(*entry)
        _forge_table_crc(buf, table_end)
    elif kind == 8:  # header fields, header crc forged
        fields = list(A._HEADER.unpack(bytes(buf[: A.HEADER_SIZE])))
        f = rng.choice((1, 2, 3, 4, 5, 6, 7))
        widths = {1: 32, 2: 32, 3: 32, 4: 32, 5: 64, 6: 64, 7: 64}
        fields[f] = rng.choice(INTERESTING_INTS + [fields[f] + 1, max(fields[f] - 1, 0)]) % (1 << widths[f])
        if rng.random() < 0.5:
            fields[8] = bytes(rng.randrange(256) for _ in range(12))
        body = A._HEADER.pack(*fields)
        buf[: A.HEADER_SIZE] = body[:-4] + struct.pack("<I", zlib.crc32(body[:-4]))
    else:  # truncated or extended, with the length in the header forged to match (or not)
        if rng.random() < 0.5:
            del buf[rng.randrange(len(buf)) :]
        else:
            buf += bytes(rng.choice((1, 16, 4096, 8192)))
        if rng.random() < 0.7 and len(buf) >= A.HEADER_SIZE:
            fields = list(A._HEADER.unpack(bytes(buf[: A.HEADER_SIZE])))
            fields[6] = len(buf)
            body = A._HEADER.pack(*fields)
            buf[: A.HEADER_SIZE] = body[:-4] + struct.pack("<I", zlib.crc32(body[:-4]))
    return bytes(buf)


def _forge_table_crc(buf: bytearray, table_end: int) -> None:
    from kb.formats import artifact as A

    crc, count, magic = A.FOOTER.unpack(bytes(buf[-A.FOOTER_SIZE :]))
    buf[-A.FOOTER_SIZE :] = A.FOOTER.pack(zlib.crc32(bytes(buf[A.HEADER_SIZE : table_end])), count, magic)


class ArtifactReader:
    """Open an artifact and use it as ``kb info --verify``, ``kb search``, ``kb list`` and
    ``kb serve`` do. Allowed outcomes: success, or the refusal the CLI maps to exit 2, 3 or 4."""

    QUERIES = ({"query": "restic backup restore", "top_k": 5, "tag": ["ops"], "group": "doc"},
               {"query": "backups gpu", "entities": ["storage"], "all_statuses": True, "mode": "bm25", "explain": True},
               {"query": "Sicherung restic backup", "mode": "bm25"})  # the format 4 seed's German and English terms

    def __init__(self, folder: Path):
        self.path = folder / "fuzz.kb"

    def __call__(self, data: bytes) -> str:
        from kb.common.errors import ArtifactError, KbError
        from kb.runtime.requests import RequestError

        self.path.write_bytes(data)
        try:
            self._use()
        except ArtifactError as e:
            _one_line(e)
            if e.exit_code not in (3, 4):
                raise Finding(f"ArtifactError with exit code {e.exit_code}: {e}") from e
            return f"exit {e.exit_code}"
        except KbError as e:
            _one_line(e)
            if e.exit_code not in (2, 3, 4):
                raise Finding(f"exit {e.exit_code}: {e}") from e
            return f"exit {e.exit_code}"
        except RequestError as e:  # kb serve: 400 or 404
            _one_line(e)
            return "exit 2"
        except Exception as e:  # noqa: BLE001 - what the fuzzer is looking for
            raise Finding(f"{type(e).__name__}: {e}") from e
        return "ok"

    def _use(self) -> None:
        import numpy as np

        from kb.runtime.filters import allowed_mask
        from kb.runtime.index import Index
        from kb.runtime.output import render_human, render_json
        from kb.runtime.requests import parse_get, parse_search
        from kb.runtime.search import Query, Searcher
        from kb.runtime.service import Service

        with Index(self.path) as ix:
            ix.artifact.verify()  # kb info --verify
            searcher = Searcher(ix, "cpu", "auto")
            svc = Service(ix, searcher, stale_check=False).warm()  # kb serve's start
            json.dumps(svc.info())
            for q in self.QUERIES:
                svc.search(parse_search(q))
            resp = searcher.search(Query(text="nightly backup", full=True, all_statuses=True))
            render_human(resp), render_json(resp, {"id": ix.artifact.id, "path": str(ix.path)})
            Searcher(ix, "cpu", "auto", one_shot=True).search(Query(text="restic restore <mask> [CLS]", all_statuses=True))  # kb search
            svc.search(parse_search({"query": "die Sicherung läuft jede Nacht"}))  # another language: the main leg of a format 5 artifact
            mask = allowed_mask(ix, all_statuses=True)  # kb list
            for c in np.flatnonzero(mask)[:40].tolist():
                ix.chunk(c)
            if ix.n_chunks:
                svc.get(parse_get({"chunk_id": 0, "context": 2}))
                first = svc.get(parse_get({"chunk_id": ix.n_chunks - 1}))
                path = first["chunks"][0]["path"] if first.get("chunks") else "backups.md"
                svc.get(parse_get({"path": path}))
                if ix.has_sources:  # kb get PATH:FROM:COUNT (older artifacts refuse it: rebuild)
                    svc.get(parse_get({"targets": [f"{path}:2:3", path], "max_bytes": 4096}))
        from kb.runtime import index as index_module

        saved, index_module.EXACT_SCAN_MAX = index_module.EXACT_SCAN_MAX, 0  # a one-shot search past 20,000 chunks: the walk
        try:
            with Index(self.path) as ix:
                Searcher(ix, "cpu", "auto", one_shot=True).search(Query(text="restic restore backup", all_statuses=True))
        finally:
            index_module.EXACT_SCAN_MAX = saved


def _one_line(e: Exception) -> None:
    if "\n" in str(e) or not str(e):
        raise Finding(f"the error is not one line: {type(e).__name__}: {str(e)!r}") from e


# --- corpus parsers ------------------------------------------------------------------------------
TOKENS = [
    b"---\n", b"+++\n", b"...\n", b"\n", b"\r\n", b"\r", b"\t", b" ", b"#", b"# ", b"## ", b"```", b"~~~", b"- ", b"* ",
    b"[", b"]", b"{", b"}", b"[" * 200, b"{\"a\":" * 150, b"]" * 200, b"}" * 150, b",", b":", b": ", b"\"", b"'", b"\\",
    b"\\u0000", b"\\ud800", b"\\udfff", b"\\uD83D\\uDE00", b"1" * 5000, b"-" + b"9" * 4400, b"1e999", b"NaN", b"Infinity",
    b"&a ", b"*a", b"&a [*a]", b"<<: *a", b"!!python/object:os.system", b"!!binary", b"!!set", b"? ", b"|\n", b">\n",
    b"%YAML 1.1\n", b"%TAG ! tag:x,2000:\n", b"!<tag:yaml.org,2002:int> ", b"0x", b"0o777", b"1_000", b"2024-13-45",
    b"[[a]]\n", b"[a.b.c]\n", b"a = ", b"\"\"\"", b"'''", b"inf", b"nan", b"1979-05-27T07:32:00Z", b"\x00", b"\xff",
    b"\xef\xbb\xbf", b"\xe2\x80\xae", b"\xc0\x80", b"\xed\xa0\x80", "\u00e9\u4e2d\u6587\U0001f600".encode(),
    b"title: ", b"tags: ", b"status: ", b"description: ", b"id", b"_id", b"text", b"title", b"tags", b"path",
]


def _seed_texts() -> dict[str, list[bytes]]:
    by_kind: dict[str, list[bytes]] = {"markdown": [], "json": [], "yaml": [], "toml": [], "text": []}
    ext_kind = {".md": "markdown", ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".txt": "text"}
    for root in (REPO / "examples" / "kb-sample", REPO / "tests" / "data" / "tiny"):
        for p in sorted(root.rglob("*")):
            kind = ext_kind.get(p.suffix)
            if kind and p.is_file() and p.name != "kb.toml":
                by_kind[kind].append(p.read_bytes()[:20000])
    for name, text in SEED_CORPUS.items():
        by_kind[ext_kind[Path(name).suffix]].append(text.encode())
    by_kind["jsonl"] = [json.dumps(r).encode() for r in SEED_JSONL]
    by_kind["front_matter"] = [t for t in by_kind["markdown"] if t.startswith((b"---", b"+++"))]
    return by_kind


_SEEDS: dict[str, list[bytes]] | None = None


def seeds() -> dict[str, list[bytes]]:
    global _SEEDS
    if _SEEDS is None:
        _SEEDS = _seed_texts()
    return _SEEDS


def _nested(rng: random.Random, depth: int, kind: str) -> str:
    """A generated value nested ``depth`` deep, in the syntax of ``kind``."""
    leaf = rng.choice(["1", "\"x\"", "1" * rng.choice((10, 4300, 4301, 5000)), "true", "null" if kind != "toml" else "1", "-0", "1.5e308"])
    if kind == "yaml":
        leaf = rng.choice(["1", "x", "'q'", "1" * rng.choice((10, 5000)), "~", "2024-01-01"])
    opener, closer = rng.choice([("[", "]"), ("{\"a\": ", "}")] if kind == "json" else [("[", "]"), ("{a = ", "}")] if kind == "toml" else [("[", "]"), ("{a: ", "}")])
    return opener * depth + leaf + closer * depth


def generate_structured(rng: random.Random, kind: str) -> bytes:
    """A generated input aimed at the bounds: deep nesting, huge integers, alias expansion."""
    depth = rng.choice((1, 5, 50, 99, 100, 101, 150, 999, 1001, 5000, 10000))
    if kind == "json":
        return _nested(rng, depth, "json").encode()
    if kind == "jsonl":
        return ('{"id": "x", "text": "t", "tags": ' + _nested(rng, depth, "json") + "}").encode()
    if kind == "toml":
        return ("a = " + _nested(rng, depth, "toml") + "\n").encode()
    if kind == "yaml":
        levels, width = rng.randrange(1, 12), rng.randrange(1, 12)
        lines = ["l0: &l0 [lol]"] + [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
        return ("\n".join(lines) + "\n" + ("x: " + _nested(rng, min(depth, 1200), "yaml") + "\n" if rng.random() < 0.5 else "")).encode()
    if kind in ("markdown", "front_matter"):
        if rng.random() < 0.5:
            fm = "---\n" + generate_structured(rng, "yaml").decode() + "title: *l0\n---\n"
        else:
            fm = "+++\n" + generate_structured(rng, "toml").decode() + "+++\n"
        return (fm + "# T\n\nbody\n").encode()
    return ("word " * rng.choice((1, 1000, 100000)) + "\n").encode()


def generate_parser_input(rng: random.Random, kind: str) -> bytes:
    s = seeds()
    pool = s[kind] or s["markdown"]
    if rng.random() < 0.15:
        data = generate_structured(rng, kind)
        return mutate_bytes(rng, data, TOKENS) if rng.random() < 0.3 else data
    base = rng.choice(pool)
    return mutate_bytes(rng, base, TOKENS, others=pool)


PARSER_KINDS = ("markdown", "front_matter", "json", "jsonl", "yaml", "toml", "text")
_EXT = {"markdown": ".md", "front_matter": ".md", "json": ".json", "yaml": ".yaml", "toml": ".toml", "text": ".txt"}


def parse_corpus_input(kind: str, data: bytes) -> str:
    """Parse (and chunk and analyze) one corpus file or JSON Lines file as kb-build would. Allowed:
    a Document whose every string can be written, or ParseError (the file is skipped)."""
    from kb.builder.chunk import chunk_document, estimate_tokens
    from kb.builder.ingest import ParseError, jsonl_record, parse_file
    from kb.formats.analyzer import Analyzer

    try:
        if kind == "jsonl":
            docs = []
            for line in data.decode("utf-8", "replace").split("\n"):
                if line.strip():
                    try:
                        docs.append(jsonl_record(line, "fuzz.jsonl"))
                    except ParseError as e:
                        _one_line(e)
        else:
            docs = [parse_file(f"dir/fuzz{_EXT[kind]}", _EXT[kind], data)]
        analyzer = Analyzer()
        for doc in docs:
            for v in (doc.doc_id, doc.path, doc.title, doc.text, doc.source, doc.status or "", doc.description, *doc.tags):
                v.encode("utf-8")  # what the final write does with every string
            for chunk in chunk_document(doc, estimate_tokens):
                chunk.text.encode("utf-8")
                analyzer.terms(chunk.text)
    except ParseError as e:
        _one_line(e)
        return "skipped"
    except Finding:
        raise
    except Exception as e:  # noqa: BLE001 - what the fuzzer is looking for
        raise Finding(f"{type(e).__name__}: {str(e)[:300]}") from e
    return "ok"


# --- the HTTP request parser ---------------------------------------------------------------------
HTTP_SEEDS = [
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:8181\r\n\r\n",
    b"GET /search?query=restic+backup&top_k=3&tag=ops&mode=bm25 HTTP/1.1\r\nHost: 127.0.0.1:8181\r\n\r\n",
    b"GET /get?chunk_id=1&context=2 HTTP/1.1\r\nHost: localhost:8181\r\nConnection: close\r\n\r\n",
    b"GET /info HTTP/1.1\r\nHost: 127.0.0.1:8181\r\n\r\n",
    b'POST /search HTTP/1.1\r\nHost: 127.0.0.1:8181\r\nContent-Type: application/json\r\nContent-Length: 58\r\n\r\n{"query": "gpu nodes", "rewrites": ["cuda"], "top_k": 2}\n',
    b'POST /get HTTP/1.1\r\nHost: 127.0.0.1:8181\r\nContent-Type: application/json\r\nContent-Length: 24\r\n\r\n{"path": "backups.md"}\n',
    b'POST /search HTTP/1.1\r\nHost: 127.0.0.1:8181\r\nOrigin: http://127.0.0.1:8181\r\nTransfer-Encoding: chunked\r\n\r\n11\r\n{"query": "nas"}\r\n0\r\n\r\n',
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:8181\r\n\r\nGET /search?query=x HTTP/1.1\r\nHost: 127.0.0.1:8181\r\n\r\n",
]
HTTP_TOKENS = [
    b"\r\n", b"\r\n\r\n", b"\n", b" ", b"HTTP/1.0", b"HTTP/0.9", b"HTTP/2.0", b"Host: evil.example\r\n", b"Host: 127.0.0.1:8181\r\n",
    b"Content-Length: ", b"Content-Length: -1\r\n", b"Content-Length: 99999999999999999999\r\n", b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: gzip\r\n", b"Content-Type: text/plain\r\n", b"Origin: null\r\n", b"Expect: 100-continue\r\n",
    b"Connection: keep-alive\r\n", b"%", b"%ff", b"%00", b"&", b"=", b"?", b"+", b"query=", b"top_k=", b"top_k=0", b"top_k=1e9",
    b"chunk_id=-1", b"chunk_id=99999999999", b"context=", b"tag=", b"{", b"}", b"[", b"]", b"\"", b"null", b"NaN", b"1" * 5000,
    b"[" * 5000, b"\\ud800", b"\xff", b"\x00", b"ffffffffffffffff\r\n", b"0\r\n\r\n", b"DELETE ", b"OPTIONS ", b"HEAD ",
    b'"query": ', b'"top_k": ', b'"mode": "vector"', b'"group": "doc"', b'"rerank": true', b'"budget_ms": 1e308',
]


class _FakeSocket:
    """Just enough of a socket for http.server's handler: reads come from ``data``."""

    def __init__(self, data: bytes):
        self._in = io.BytesIO(data)
        self.out = bytearray()

    def makefile(self, mode, *a, **kw):
        return io.BytesIO()  # the handler reads through recv_into

    def recv_into(self, b) -> int:
        return self._in.readinto(b)

    def settimeout(self, t):
        pass

    def shutdown(self, how):
        pass

    def gettimeout(self):
        return None

    def setsockopt(self, *a):
        pass

    def sendall(self, b):
        self.out += b

    def send(self, b):
        self.out += b
        return len(b)


class HttpRequests:
    """Raw request bytes through kb serve's handler, over a real Service on a seed artifact.
    Allowed: any answer but a 500, and no exception out of the handler."""

    def __init__(self, artifact_path: Path):
        self.artifact_path = artifact_path
        self.pid = None

    def _open(self):
        """The server and its search threads, in this process: a forked worker must not inherit
        a thread pool whose threads stayed in the parent."""
        from kb.runtime.index import Index
        from kb.runtime.search import Searcher
        from kb.runtime.serve import make_server
        from kb.runtime.service import Service

        self.ix = Index(self.artifact_path)
        self.server = make_server(Service(self.ix, Searcher(self.ix, "cpu", "auto"), stale_check=False).warm(), port=0)
        self.server.log = lambda line: None
        self.host = f"127.0.0.1:{self.server.port}".encode()
        self.pid = os.getpid()

    def close(self):
        if self.pid == os.getpid():
            self.server.server_close()
            self.ix.close()

    def __call__(self, data: bytes) -> str:
        from kb.runtime.serve import Handler

        if self.pid != os.getpid():
            self._open()
        data = data.replace(b"127.0.0.1:8181", self.host)
        sock = _FakeSocket(data)
        try:
            Handler(sock, ("127.0.0.1", 40000), self.server)
        except Exception as e:  # noqa: BLE001 - what the fuzzer is looking for
            raise Finding(f"{type(e).__name__} out of the handler: {e}") from e
        statuses = [int(m) for m in _STATUS.findall(bytes(sock.out))]
        if 500 in statuses:
            raise Finding(f"HTTP 500: {bytes(sock.out)[:400]!r}")
        return ",".join(map(str, statuses)) or "no answer"


_STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3}) ", re.M)


def generate_http(rng: random.Random) -> bytes:
    base = rng.choice(HTTP_SEEDS)
    if rng.random() < 0.2:  # a JSON body generated and mutated, with a matching Content-Length
        body = mutate_bytes(rng, rng.choice([b'{"query": "x", "top_k": 3}', b'{"chunk_id": 0}', b'{"path": "a"}', b"[]", b'{"query": ["a"]}']), HTTP_TOKENS)
        path = rng.choice([b"/search", b"/get"])
        return b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1:8181\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    return mutate_bytes(rng, base, HTTP_TOKENS, others=HTTP_SEEDS)


def json_body_input(data: bytes) -> str:
    """The JSON body parser and the request validators alone (what kb mcp shares with kb serve)."""
    from kb.runtime.requests import RequestError, parse_get, parse_search
    from kb.runtime.serve import parse_json

    try:
        obj = parse_json(data)
        try:
            parse_search(obj)
        except RequestError:
            pass
        parse_get(obj)
    except RequestError as e:
        _one_line(e)
        return "400"
    except Exception as e:  # noqa: BLE001
        raise Finding(f"{type(e).__name__}: {e}") from e
    return "ok"


def scratch_folder() -> Path:
    """Where the artifact target writes its one file: memory-backed when the OS has /dev/shm."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="kb-fuzz-", dir=shm if shm.is_dir() else None))


__all__ = ["Finding", "ArtifactReader", "HttpRequests", "mutate_artifact", "generate_parser_input", "parse_corpus_input",
           "generate_http", "json_body_input", "build_seed_artifacts", "PARSER_KINDS", "scratch_folder"]
