import struct
import zlib

import pytest
from click.testing import CliRunner
from hypothesis import given, strategies as st

from kb.formats import artifact as A
from kb.formats.layout import BlobTable, pack_blobs
from kb.runtime.cli import main as kb


def _write(tmp_path, sections, name="a.kb"):
    p = tmp_path / name
    A.write_artifact(p, sections)
    return p


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz.", min_size=1, max_size=32)


@given(st.dictionaries(names, st.binary(max_size=9000), max_size=6))
def test_sections_round_trip_byte_for_byte(tmp_path_factory, secs):
    p = _write(tmp_path_factory.mktemp("rt"), [A.SectionData(n, d) for n, d in secs.items()])
    with A.Artifact(p) as art:
        art.verify()
        assert {n: bytes(art.section(n)) for n in art.sections} == secs
        assert all(s.offset % A.ALIGNMENT == 0 for s in art.sections.values())


@given(st.dictionaries(names, st.lists(st.binary(max_size=3000), max_size=4), max_size=4), st.integers(1, 5000))
def test_sections_given_as_parts_and_file_ranges_are_written_as_their_bytes(tmp_path_factory, secs, block):
    """A spilled section (in-memory parts and ranges of a scratch file, copied in blocks) is
    written exactly as the same bytes given whole."""
    folder = tmp_path_factory.mktemp("parts")
    with A.Scratch(folder / "a.kb") as scratch:
        parts = {}
        for n, pieces in secs.items():
            parts[n] = []
            for i, piece in enumerate(pieces):
                if i % 2:
                    parts[n].append(piece)
                else:
                    at = scratch.file.tell()
                    scratch.file.write(b"pad" + piece)
                    parts[n].append(A.FileRange(scratch.path, at + 3, len(piece)))
        scratch.file.flush()
        old_block, A.COPY_BLOCK = A.COPY_BLOCK, block
        try:
            split = _write(folder, [A.SectionData(n, tuple(p)) for n, p in parts.items()])
        finally:
            A.COPY_BLOCK = old_block
    whole = _write(folder, [A.SectionData(n, b"".join(p)) for n, p in secs.items()], "b.kb")
    assert split.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["a.kb", "b.kb"]  # the scratch file is gone


@given(st.lists(st.binary(max_size=300), max_size=20))
def test_blob_tables_round_trip(items):
    t = BlobTable(pack_blobs(items))
    assert [bytes(t[i]) for i in range(len(t))] == items


def test_a_blob_table_checks_each_items_offsets_when_the_item_is_taken():
    """Opening reads the head, the first and the last offset; an item's own two offsets are
    checked when it is taken (a million paths open in O(1)), so a table whose offsets go back
    gives its other items and refuses that one."""
    import numpy as np

    raw = bytearray(pack_blobs([b"aa", b"bbb", b"c"]))
    offsets = np.frombuffer(raw, dtype="<u8", count=4, offset=8)
    assert offsets.tolist() == [0, 2, 5, 6]
    raw[8 + 8 * 1 : 8 + 8 * 2] = (7).to_bytes(8, "little")  # item 0 ends past item 1's end
    t = BlobTable(bytes(raw), "section 'x'")
    assert bytes(t[2]) == b"c"
    for i in (0, 1):
        with pytest.raises(A.CorruptArtifact, match=r"^corrupt artifact: section 'x' offsets decrease$"):
            t[i]
    short = bytes(pack_blobs([b"aa"]))[:-1]
    with pytest.raises(A.CorruptArtifact, match="offsets do not cover its data"):
        BlobTable(short, "section 'x'")


def test_the_text_codec_reads_what_it_writes_and_refuses_an_implausible_declared_size():
    import zstandard

    from kb.formats.text_codec import TextReader, text_writer, train_dictionary

    records = [f"record {i}: the nightly restic backup of host {i % 7} rotates snapshots; ".encode() * 8 for i in range(300)]
    zdict = train_dictionary(len(records), sum(map(len, records)), records.__getitem__)
    assert zdict  # enough text to train on
    assert TextReader(zdict, "a.kb").decode(text_writer(zdict).compress(records[7]), "text block 7") == records[7]
    bomb = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(4 << 20))  # 4 MiB declared by a few hundred bytes
    with pytest.raises(A.CorruptArtifact) as e:
        TextReader(b"", "a.kb").decode(bomb, "text block 0")
    assert str(e.value) == "a.kb: corrupt artifact: text block 0 does not decode"


def test_header_bytes_are_exactly_as_specified(tmp_path):
    p = _write(tmp_path, [A.SectionData("meta", b"hello")])
    data = p.read_bytes()
    assert len(data) == 4096 + 5 + 16
    head = (
        b"\x89KBA\r\n\x1a\n"  # magic
        + struct.pack("<IIII", 5, 0, 1, 64)  # version, flags, section count, entry size
        + struct.pack("<QQQ", 64, 4117, 0)  # table offset, file length, reserved
        + b"\0" * 12
    )
    assert data[:60] == head
    assert data[60:64] == struct.pack("<I", zlib.crc32(head))
    entry = b"meta".ljust(32, b"\0") + struct.pack("<QQQIHH", 4096, 5, 5, zlib.crc32(b"hello"), 0, 0)
    assert data[64:128] == entry
    assert data[4096:4101] == b"hello"
    assert data[-16:] == struct.pack("<II", zlib.crc32(entry), 1) + b"KBA-END\n"


def test_zstd_sections_decode_lazily(tmp_path):
    import zstandard

    raw = b"chunk text " * 100
    p = _write(tmp_path, [A.SectionData("t", zstandard.ZstdCompressor().compress(raw), A.CODEC_ZSTD, len(raw))])
    with A.Artifact(p) as art:
        assert art.section("t") == raw


def _info(path):
    return CliRunner().invoke(kb, ["info", "-i", str(path)])


@pytest.fixture
def good(tmp_path, tiny_artifact):
    p = tmp_path / "copy.kb"
    p.write_bytes(tiny_artifact.read_bytes())
    return p


def test_a_good_artifact_opens_and_verifies(good):
    r = CliRunner().invoke(kb, ["info", "-i", str(good), "--verify"])
    assert r.exit_code == 0, r.output
    assert "kb artifact format 3" in r.output


def test_a_foreign_file_is_not_an_artifact(tmp_path):
    p = tmp_path / "notes.kb"
    p.write_bytes(b"PK\x03\x04 this is a zip file" + b"\0" * 200)
    r = _info(p)
    assert r.exit_code == 3
    assert r.stderr == f"kb: error: {p}: not a kb artifact (bad magic)\n"


def test_an_empty_file_is_not_an_artifact(tmp_path):
    p = tmp_path / "empty.kb"
    p.write_bytes(b"")
    r = _info(p)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {p}: empty file, not a kb artifact\n")


def test_a_truncated_artifact_is_rejected(good):
    data = good.read_bytes()
    good.write_bytes(data[: len(data) - 1000])
    r = _info(good)
    assert r.exit_code == 3
    assert r.stderr == f"kb: error: {good}: corrupt or truncated artifact: header says {len(data)} bytes, file has {len(data) - 1000}\n"


def test_an_artifact_cut_inside_its_header_is_rejected(good):
    good.write_bytes(good.read_bytes()[:40])
    r = _info(good)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {good}: corrupt or truncated artifact: 40 bytes is shorter than header and footer\n")


def test_a_bit_flip_in_the_header_is_caught(good):
    data = bytearray(good.read_bytes())
    data[40] ^= 0x01  # inside the file-length field
    good.write_bytes(bytes(data))
    r = _info(good)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {good}: corrupt artifact: header crc mismatch\n")


def test_a_bit_flip_in_the_section_table_is_caught(good):
    data = bytearray(good.read_bytes())
    data[64 + 40] ^= 0x10
    good.write_bytes(bytes(data))
    r = _info(good)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {good}: corrupt artifact: section table crc mismatch\n")


def test_a_bit_flip_inside_a_section_is_caught_by_its_crc(good):
    with A.Artifact(good) as art:
        s = art.sections["postings.ids"]
    data = bytearray(good.read_bytes())
    data[s.offset + s.length // 2] ^= 0x04
    good.write_bytes(bytes(data))
    r = CliRunner().invoke(kb, ["info", "-i", str(good), "--verify"])
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {good}: corrupt artifact: crc mismatch in section 'postings.ids'\n")


def _with_version(path, version):
    data = bytearray(path.read_bytes())
    data[8:12] = struct.pack("<I", version)
    data[60:64] = struct.pack("<I", zlib.crc32(bytes(data[:60])))
    path.write_bytes(bytes(data))


def test_a_newer_format_version_is_refused_with_exit_4(good):
    _with_version(good, 99)
    r = _info(good)
    assert (r.exit_code, r.stderr) == (4, f"kb: error: {good}: format too new: version 99, this kb reads 1..5; upgrade kb\n")


def test_an_older_format_version_is_refused_with_exit_4(good):
    _with_version(good, 0)
    r = _info(good)
    assert (r.exit_code, r.stderr) == (4, f"kb: error: {good}: format too old: version 0, this kb reads 1..5; rebuild it with kb-build\n")


def test_a_directory_is_not_an_artifact(tmp_path):
    r = _info(tmp_path)
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {tmp_path}: is a directory, not a kb artifact\n")


def test_overlapping_sections_are_rejected(tmp_path):
    p = _write(tmp_path, [A.SectionData("a", b"x" * 10), A.SectionData("b", b"y" * 10)])
    data = bytearray(p.read_bytes())
    entry_b = 64 + 64
    data[entry_b + 32 : entry_b + 40] = struct.pack("<Q", 4096)  # b now starts where a does
    table = bytes(data[64:192])
    data[-16:-12] = struct.pack("<I", zlib.crc32(table))
    p.write_bytes(bytes(data))
    with pytest.raises(A.CorruptArtifact, match="section 'b' overlaps its predecessor"):
        A.Artifact(p)


def test_a_failed_write_leaves_the_old_artifact_untouched(tmp_path, monkeypatch):
    p = _write(tmp_path, [A.SectionData("meta", b"old")])
    before = p.read_bytes()

    def half_then_fail(sections, version):
        yield b"\x89KBA\r\n\x1a\n" + b"\0" * 5000
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(A, "serialize", half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        A.write_artifact(p, [A.SectionData("meta", b"new")])
    assert p.read_bytes() == before
    assert [x.name for x in tmp_path.iterdir()] == ["a.kb"]


def test_a_frame_that_compresses_past_the_readers_ratio_is_padded_to_within_it():
    """Issue 50 H: the writer's frames and the reader's bound agree (formats/artifact.py)."""
    import zstandard

    from kb.formats.artifact import MAX_ZSTD_RATIO, within_zstd_ratio
    from kb.formats.text_codec import TextReader, text_writer

    for raw in (b"a" * 5_000_000, b"ab" * 100, b""):
        frame = within_zstd_ratio(text_writer(b"").compress(raw), len(raw))
        assert len(raw) <= MAX_ZSTD_RATIO * max(len(frame), 1024)
        assert TextReader(b"", "x.kb").decode(frame, "a block") == raw == zstandard.ZstdDecompressor().decompress(frame)
    small = text_writer(b"").compress(b"ab" * 100)
    assert within_zstd_ratio(small, 200) is small  # within the bound: the frame as it was
