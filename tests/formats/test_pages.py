"""Page checksums (``pages.crc32``): a large section's bytes are verified as they are read, a page
at a time, so opening and searching a large artifact does not read whole sections first."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from click.testing import CliRunner

from kb.formats import artifact as A
from kb.formats import layout as L
from kb.runtime.cli import main as kb
from kb.runtime.index import Index

from corpora import SAMPLE, build_hash


@pytest.fixture()
def paged(tmp_path, monkeypatch):
    """The sample corpus built with page checksums on every section of 4 KiB or more."""
    monkeypatch.setattr(A, "PAGED_MIN", A.PAGE)
    out = tmp_path / "paged.kb"
    build_hash(SAMPLE, out)
    return out


def flip(path, name, at):
    """Flip one byte of section ``name`` at offset ``at`` (checksums left as they were)."""
    with A.Artifact(path) as art:
        s = art.sections[name]
    data = bytearray(path.read_bytes())
    data[s.offset + at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_writer_lists_page_checksums_of_large_sections_only(tmp_path):
    big, small = bytes(range(256)) * 4100, b"small"  # 1,049,600 bytes: 257 pages, the last short
    p = tmp_path / "a.kb"
    A.write_artifact(p, [A.SectionData("big", big), A.SectionData("small", small)])
    with A.Artifact(p) as art:
        assert list(art.sections) == ["big", "small", A.PAGES]
        crcs = np.frombuffer(art.section(A.PAGES), dtype="<u4")  # the big section's pages alone
        assert crcs.tolist() == [zlib.crc32(big[i : i + A.PAGE]) for i in range(0, len(big), A.PAGE)]
        art.check_range("big", 5000, 9000)
        assert art._pages_ok["big"][:4].tolist() == [False, True, True, False]
        art.verify()
    A.write_artifact(p, [A.SectionData("small", small)])
    with A.Artifact(p) as art:
        assert list(art.sections) == ["small"]  # nothing large: no page table (and format 2 bytes as before)


def test_a_paged_artifact_searches_and_verifies(paged):
    with Index(paged) as ix:
        assert A.PAGES in ix.artifact.sections
        assert ix.dense.vector_matrix is not None and ix.dense.vector_matrix.dtype == np.float16
        from usearch.index import Index as UIndex

        ids = np.arange(ix.n_chunks)
        with_lookups = UIndex.restore(ix.artifact.section(L.VECTORS), view=True)  # usearch's own reading of the image
        got = np.asarray(with_lookups.get(ids.astype(np.uint64)), dtype=np.float32).reshape(len(ids), -1)
        np.testing.assert_array_equal(ix.dense.vectors_of(ids), got)
    r = CliRunner().invoke(kb, ["search", "restore the backup", "-i", str(paged), "--json", "--no-stale-check"])
    assert r.exit_code == 0, r.output
    assert CliRunner().invoke(kb, ["info", "-i", str(paged), "--verify"]).exit_code == 0


def test_a_flipped_byte_in_a_text_block_is_caught_when_that_block_is_read(paged):
    with Index(paged) as ix:
        blocks = ix._text_blocks
        last = len(blocks) - 1
        at = blocks._head + int(blocks.offsets[last]) + 5
        assert at // A.PAGE > 0  # not on the first page, which the head shares
        page = at // A.PAGE
    flip(paged, L.TEXT_BLOCKS, at)
    with Index(paged) as ix:
        ix.chunk(0)  # a block on a page of its own is still read
        with pytest.raises(A.CorruptArtifact, match=rf"crc mismatch in section 'text.blocks' \(page {page}\)$"):
            ix.chunk(ix.n_chunks - 1)
    r = CliRunner().invoke(kb, ["info", "-i", str(paged), "--verify"])
    assert (r.exit_code, r.stderr) == (3, f"kb: error: {paged}: corrupt artifact: crc mismatch in section 'text.blocks'\n")


def test_a_flipped_byte_in_the_vector_graph_is_caught_before_usearch_reads_it(paged):
    with A.Artifact(paged) as art:
        n = art.sections[L.VECTORS].length
    flip(paged, L.VECTORS, n - 3)  # a neighbour slot of the last node
    with Index(paged) as ix:
        with pytest.raises(A.CorruptArtifact, match=r"crc mismatch in section 'vectors.hnsw' \(page \d+\)$"):
            ix.dense.vectors


def test_a_flipped_byte_in_a_stored_vector_is_caught_when_it_is_read(paged):
    with Index(paged) as ix:
        row = ix.dense.vector_matrix.strides[0]
        mid = 2 * A.PAGE // row + 1  # a row on a page neither the matrix head nor the graph shares
        graph_page = ix.dense._opened_vectors()[2].graph_start // A.PAGE
    assert 0 < (8 + mid * row) // A.PAGE < graph_page
    flip(paged, L.VECTORS, 8 + mid * row + 1)
    with Index(paged) as ix:
        ix.dense.vectors_of(np.array([0]))
        with pytest.raises(A.CorruptArtifact, match=rf"crc mismatch in section 'vectors.hnsw' \(page {(8 + mid * row) // A.PAGE}\)$"):
            ix.dense.vectors_of(np.array([mid]))


@pytest.mark.parametrize("compiled", [True, False])
def test_a_flipped_byte_in_a_stored_vector_is_caught_by_a_one_shot_walk_of_the_graph(paged, monkeypatch, compiled):
    """Past EXACT_SCAN_MAX a one-shot search walks the graph (runtime/graph_walk.py) and checks
    each page it reads: a row its beam scores, on a page of its own; without the compiled walk,
    usearch's opening checks every page first."""
    from kb.runtime import graph_walk
    from kb.runtime import index as index_module
    from kb.runtime.search import Query, Searcher

    monkeypatch.setattr(index_module, "EXACT_SCAN_MAX", 0)
    if not compiled:
        monkeypatch.setattr(graph_walk, "_f16_kernels", lambda: None)
    with Index(paged) as ix:
        row = ix.dense.vector_matrix.strides[0]
        mid = 2 * A.PAGE // row + 1
    flip(paged, L.VECTORS, 8 + mid * row + 1)
    with Index(paged) as ix:
        s = Searcher(ix, one_shot=True)
        walks = compiled and graph_walk._f16_kernels() is not None
        why = rf"crc mismatch in section 'vectors.hnsw' \(page {(8 + mid * row) // A.PAGE}\)$" if walks else "corrupt artifact: (crc mismatch|a stored vector is not finite)"
        with pytest.raises(A.CorruptArtifact, match=why):
            s.search(Query("disk full", mode="vector", all_statuses=True))
        assert (ix.dense._walk is not None) == (compiled and graph_walk._f16_kernels() is not None)


def test_a_terms_document_frequency_is_read_from_its_own_page_verified(paged):
    """A BM25 search reads the df of its query's terms only (terms.doc_df, page by page): a
    flipped byte on another term's page goes unread, one on the page of a term it reads is
    caught."""
    from kb.runtime.search import Query, Searcher

    with Index(paged) as ix:
        n = ix.n_terms
        tid = ix.term_id("backup")
        assert tid is not None and 4 * n > A.PAGE  # two pages at least
    far = (tid * 4 // A.PAGE + 1) % (-(-4 * n // A.PAGE))  # a page of other terms
    flip(paged, L.TERM_DOC_DF, far * A.PAGE + 1)
    with Index(paged) as ix:
        Searcher(ix, one_shot=True).search(Query("backup", mode="bm25"))
        assert not ix.artifact._pages_ok[L.TERM_DOC_DF][far]
    flip(paged, L.TERM_DOC_DF, far * A.PAGE + 1)  # back
    flip(paged, L.TERM_DOC_DF, 4 * tid)
    with Index(paged) as ix:
        with pytest.raises(A.CorruptArtifact, match=rf"crc mismatch in section 'terms.doc_df' \(page {4 * tid // A.PAGE}\)$"):
            Searcher(ix, one_shot=True).search(Query("backup", mode="bm25"))


def test_a_search_verifies_the_rows_its_scan_reads_on_the_prefetch_thread_and_reports_a_bad_one_itself(paged):
    from kb.runtime.search import Query, Searcher

    with Index(paged) as ix:
        d = ix.dense
        d.prefetch_vectors()
        d._prefetch.join()
        row, n = ix.dense.vector_matrix.strides[0], ix.n_chunks
        assert d.scans_vectors and ix.artifact._pages_ok[L.VECTORS][: (8 + n * row) // A.PAGE].all()
        mid = 2 * A.PAGE // row + 1
    flip(paged, L.VECTORS, 8 + mid * row + 1)
    with Index(paged) as ix:
        with pytest.raises(A.CorruptArtifact, match=rf"crc mismatch in section 'vectors.hnsw' \(page {(8 + mid * row) // A.PAGE}\)$"):
            Searcher(ix, one_shot=True).search(Query("disk full", mode="vector"))


def test_a_page_table_that_does_not_match_its_sections_is_corrupt(paged):
    buf = paged.read_bytes()
    _, secs = A.validate(memoryview(buf), "x")
    sections = [A.SectionData(s.name, buf[s.offset : s.offset + s.length]) for s in secs.values() if s.name != A.PAGES]
    placed, crcs = A.checksummed(sections)
    placed[-1] = A.SectionData(A.PAGES, bytes(placed[-1].data) + b"\0\0\0\0")  # one page too many
    crcs[-1] = zlib.crc32(placed[-1].data)
    entries, total = A.layout(placed, crcs)
    out = bytearray(total)
    table = b"".join(A.pack_entry(s) for s in entries)
    out[: A.HEADER_SIZE + len(table)] = A.pack_header(len(entries), total) + table
    for sd, s in zip(placed, entries):
        out[s.offset : s.offset + s.length] = bytes(sd.data)
    out[-A.FOOTER_SIZE :] = A.FOOTER.pack(zlib.crc32(table), len(entries), A.FOOTER_MAGIC)
    paged.write_bytes(bytes(out))
    with Index(paged) as ix:
        with pytest.raises(A.CorruptArtifact, match=r"section 'pages.crc32' does not match the sections it covers$"):
            ix.chunk(0)
