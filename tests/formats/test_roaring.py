import numpy as np
from hypothesis import given, settings, strategies as st
from pyroaring import BitMap

from kb.formats.roaring import serialize_many

# Sets that exercise every container kind: small arrays, several high keys, dense bitmaps.
value_sets = st.lists(
    st.one_of(
        st.sets(st.integers(0, 2**32 - 1), max_size=20),
        st.sets(st.integers(0, 200_000), max_size=300),
        st.builds(lambda lo, n, step: set(range(lo, lo + n * step, step)), st.integers(0, 100_000), st.integers(4000, 9000), st.integers(1, 3)),
        st.lists(st.tuples(st.integers(0, 140_000), st.integers(1, 40)), max_size=60).map(lambda runs: {a + i for a, k in runs for i in range(k)}),
        st.builds(lambda lo, gaps: set(range(lo, lo + 70_000)) - set(gaps), st.integers(0, 10), st.lists(st.integers(0, 70_000), max_size=3000)),
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(value_sets)
def test_serialize_many_writes_what_pyroaring_writes(sets):
    owner = np.concatenate([np.full(len(s), i) for i, s in enumerate(sets)] + [np.zeros(0, np.int64)]).astype(np.int64)
    values = np.concatenate([np.array(sorted(s), dtype=np.uint32) for s in sets] + [np.zeros(0, np.uint32)])
    buf, offsets = serialize_many(owner, values, len(sets))
    assert len(offsets) == len(sets) + 1 and offsets[-1] == len(buf)
    for i, s in enumerate(sets):
        got = buf[offsets[i] : offsets[i + 1]].tobytes()
        assert got == BitMap(sorted(s)).serialize()
        assert BitMap.deserialize(got) == BitMap(s)
