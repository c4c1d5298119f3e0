"""A search reads only the chunk-table rows of its results, and the status filter comes from the
statuses' bitmaps: both agree with the whole table, and a forged row is still refused."""

import itertools

import numpy as np
import pytest

from kb.formats import artifact as A
from kb.formats import layout as L
from kb.formats.artifact import CorruptArtifact
from kb.runtime.filters import allowed_mask
from kb.runtime.index import Index

from corpora import SAMPLE, artifact_parts, build_hash, rewrite


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("rows") / "sample.kb"
    build_hash(SAMPLE, out)
    return out


def test_the_status_filter_from_bitmaps_is_the_status_column_s(sample):
    with Index(sample) as ix:
        statuses = ix.meta.statuses
        column = ix.chunks["status"].copy()
        assert len(set(column.tolist())) > 2  # the sample has statuses worth filtering
        for k in range(len(statuses) + 1):
            for chosen in itertools.combinations(statuses, k):
                want = np.isin(column, [statuses.index(s) for s in chosen]) if chosen else ~np.isin(column, [statuses.index(s) for s in ix.meta.excluded_statuses])
                got = allowed_mask(ix, statuses=chosen)
                assert np.array_equal(got, want), chosen
        assert np.array_equal(allowed_mask(ix, all_statuses=True), np.ones(ix.n_chunks, dtype=bool))
        assert ix.has_statuses


def test_a_result_s_row_is_read_alone_and_equals_the_table_s(sample):
    with Index(sample) as ix:
        rows = [ix.chunk_row(c) for c in range(ix.n_chunks)]
        assert "chunks" not in ix.__dict__  # the whole table was never read
        assert rows == [r.item() for r in ix.chunks]
        assert [ix.doc_of(c) for c in range(ix.n_chunks)] == ix.chunks["doc"].tolist()
        with pytest.raises(IndexError):
            ix.chunk_row(ix.n_chunks)


@pytest.mark.parametrize("field", ["doc", "status"])
def test_a_forged_row_is_refused_when_it_is_read(sample, tmp_path, field):
    version, sections = artifact_parts(sample)
    forged = []
    for s in sections:
        if s.name == L.CHUNKS:
            t = np.frombuffer(s.data, dtype=L.CHUNK_DTYPE).copy()
            t[field][3] = 60000
            s = A.SectionData(s.name, t.tobytes(), s.codec, s.raw_length)
        forged.append(s)
    p = tmp_path / "forged.kb"
    rewrite(p, forged, version)
    with Index(p) as ix:
        ix.chunk(2)  # another row reads fine
        with pytest.raises(CorruptArtifact, match="chunk table points past the document or status tables"):
            ix.chunk(3)
