"""Recovering tf' from format 3 impacts (formats/bm25.py ``recover_tf``), which lets a set of
artifacts rescore its members' postings under the whole corpus's average lengths."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb.formats.bm25 import quantize_impacts, recover_tf, tf_component, tf_step


@pytest.mark.parametrize("title, section, step", [(2.0, 1.5, 0.5), (0.0, 0.0, 1.0), (1.25, 0.0, 0.25), (3.0, 2.0, 1.0), (0.3, 1.0, None)])
def test_tf_step_is_the_spacing_of_the_weighted_term_frequencies(title, section, step):
    assert tf_step(title, section) == step


lattice = st.tuples(st.integers(0, 40), st.integers(0, 4), st.integers(0, 4)).filter(lambda t: sum(t) > 0).map(lambda t: t[0] + 2.0 * t[1] + 1.5 * t[2])
k1s = st.floats(0.5, 2.0)
bs = st.floats(0.05, 1.0)
avgs = st.floats(5.0, 500.0)


@given(tf=lattice, extra=st.floats(0.0, 400.0), avg=avgs, k1=k1s, b=bs)
def test_the_recovered_tf_gives_back_the_stored_byte(tf, extra, avg, k1, b):
    length = np.array([tf + extra])
    stored = quantize_impacts(tf_component(np.array([tf]), length, avg, k1, b))
    got = recover_tf(stored, length, avg, k1, b, step=0.5)
    assert np.array_equal(quantize_impacts(tf_component(got, length, avg, k1, b)), stored)


@given(tf=lattice, extra=st.floats(0.0, 400.0), avg=avgs, other=avgs, k1=k1s, b=bs)
def test_a_byte_whose_interval_holds_one_tf_gives_it_back_exactly_and_rescores_as_a_build_would(tf, extra, avg, other, k1, b):
    length = np.array([tf + extra])

    def byte(x, a):
        return quantize_impacts(tf_component(np.array([x]), length, a, k1, b))[0]

    stored = byte(tf, avg)
    got = recover_tf(np.array([stored]), length, avg, k1, b, step=0.5)[0]
    if byte(tf - 0.5, avg) != stored and byte(tf + 0.5, avg) != stored:  # no other tf' on the grid shares the byte
        assert got == tf
        assert quantize_impacts(tf_component(np.array([got]), length, other, k1, b))[0] == byte(tf, other)


def test_a_guess_that_gives_the_stored_byte_wins_over_the_grid():
    length, avg, k1, b = np.array([900.0]), 100.0, 1.2, 0.75
    tf = np.array([37.5])
    stored = quantize_impacts(tf_component(tf, length, avg, k1, b))
    assert recover_tf(stored, length, avg, k1, b, step=0.5, guess=tf)[0] == 37.5
