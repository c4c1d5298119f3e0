"""Fusion (runtime/fusion.py) and rerank blending (runtime/rerank.py) against trivial-but-slow
oracles (hypothesis)."""

from hypothesis import example, given, strategies as st

from kb.common.options import SearchOptions
from kb.runtime import fusion as F
from kb.runtime import rerank as R

D = SearchOptions()
DEFAULT = F.FusionParams(D.rrf_k, D.rank1_bonus, D.rank23_bonus)


def fuse_trivial_but_slow(legs, k=D.rrf_k, b1=D.rank1_bonus, b23=D.rank23_bonus):
    chunks = sorted({h.chunk for lg in legs for h in lg.hits})
    scored = []
    for c in chunks:
        s = 0.0
        best = None
        for lg in sorted(legs, key=lambda x: x.name):
            for h in lg.hits:
                if h.chunk == c:
                    s += lg.weight / (k + h.rank)
                    best = h.rank if best is None else min(best, h.rank)
        s += b1 if best == 1 else (b23 if best <= 3 else 0.0)
        scored.append((c, s))
    return sorted(scored, key=lambda x: (-x[1], x[0]))


@st.composite
def legs(draw):
    n = draw(st.integers(0, 5))
    out = []
    for i in range(n):
        chunks = draw(st.lists(st.integers(0, 30), unique=True, max_size=12))
        w = draw(st.floats(0.0, 2.0))
        out.append(F.leg_from_ranking(f"leg{i}", "bm25", w, chunks, [1.0] * len(chunks)))
    return out


@given(legs())
def test_fuse_rrf_matches_the_oracle(ls):
    got = [(f.chunk, f.score) for f in F.fuse_rrf(ls, DEFAULT)]
    want = fuse_trivial_but_slow(ls)
    assert [c for c, _ in got] == [c for c, _ in want]
    assert all(abs(a - b) < 1e-12 for (_, a), (_, b) in zip(got, want))


@given(legs(), st.randoms(use_true_random=False))
def test_the_order_of_legs_does_not_matter(ls, rnd):
    shuffled = list(ls)
    rnd.shuffle(shuffled)
    assert [(f.chunk, f.score) for f in F.fuse_rrf(ls, DEFAULT)] == [(f.chunk, f.score) for f in F.fuse_rrf(shuffled, DEFAULT)]


def test_ties_are_broken_by_chunk_id():
    a = F.leg_from_ranking("a", "bm25", 1.0, [5], [1.0])
    b = F.leg_from_ranking("b", "cosine", 1.0, [3], [1.0])
    assert [f.chunk for f in F.fuse_rrf([a, b], DEFAULT)] == [3, 5]


SEED = F.FusionParams(60, 0.05, 0.02)  # the seeds' (and qmd's) constants


def test_rank_bonus_is_given_once_for_the_best_rank():
    a = F.leg_from_ranking("a", "bm25", 1.0, [1, 2, 3, 4], [1] * 4)
    b = F.leg_from_ranking("b", "cosine", 1.0, [4, 1], [1] * 2)
    by = {f.chunk: f for f in F.fuse_rrf([a, b], SEED)}
    assert by[1].bonus == by[4].bonus == 0.05  # 1 is first in a, 4 first in b
    assert by[2].bonus == by[3].bonus == 0.02
    assert abs(by[1].score - (1 / 61 + 1 / 62 + 0.05)) < 1e-12


@given(legs())
def test_fuse_rrf_matches_the_oracle_with_the_seed_constants(ls):
    got = [(f.chunk, f.score) for f in F.fuse_rrf(ls, SEED)]
    want = fuse_trivial_but_slow(ls, 60, 0.05, 0.02)
    assert [c for c, _ in got] == [c for c, _ in want]
    assert all(abs(a - b) < 1e-12 for (_, a), (_, b) in zip(got, want))


def test_default_constants_are_the_measured_ones():
    assert (D.rrf_k, D.rank1_bonus, D.rank23_bonus, D.semantic_weight) == (10, 0.0, 0.0, None)
    assert (F.SHORT_QUERY_TERMS, F.LONG_QUERY_TERMS, F.SHORT_QUERY_WEIGHT, F.LONG_QUERY_WEIGHT) == (4, 20, 0.8, 0.45)


@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_a_longer_query_never_gets_a_larger_dense_share(a, b):
    short, long_ = sorted((a, b))
    assert F.LONG_QUERY_WEIGHT <= F.length_weight(long_) <= F.length_weight(short) <= F.SHORT_QUERY_WEIGHT


def test_the_length_weight_meets_its_ends_and_is_log_linear_between():
    assert F.length_weight(0) == F.length_weight(4) == 0.8
    assert F.length_weight(20) == F.length_weight(500) == 0.45
    from kb.common.options import SETTINGS

    assert f"{F.SHORT_QUERY_WEIGHT:g} up to {F.SHORT_QUERY_TERMS}, falling to {F.LONG_QUERY_WEIGHT:g} at {F.LONG_QUERY_TERMS} or more" in SETTINGS["semantic_weight"].doc
    assert round(F.length_weight(8), 3) == 0.649  # twice the short length: log(2) / log(5) of the way down
    assert round(F.length_weight(10), 3) == 0.601


@given(st.integers(0, 10_000), st.integers(1, 50))
@example(1, 1)
@example(10, 2)
def test_a_keyword_query_gets_at_most_an_even_split_and_a_sentence_its_length_share(words, stops):
    assert F.length_weight(words, stops) == F.length_weight(words, None) == F.length_weight(words)
    assert F.length_weight(words, 0) == (min(F.length_weight(words), F.KEYWORD_QUERY_WEIGHT) if words else F.SHORT_QUERY_WEIGHT)


def test_the_keyword_cap_is_an_even_split_and_the_help_says_so():
    assert (F.length_weight(1, 0), F.length_weight(3, 0), F.length_weight(3, 1), F.length_weight(0, 0)) == (0.5, 0.5, 0.8, 0.8)
    assert F.length_weight(25, 0) == F.length_weight(25) == 0.45  # below the cap already
    assert F.KEYWORD_QUERY_WEIGHT == 0.5
    from kb.common.options import SETTINGS

    assert f"at most {F.KEYWORD_QUERY_WEIGHT:g} for a query with no stopword" in SETTINGS["semantic_weight"].doc


probs = st.lists(st.floats(0, 1), min_size=1, max_size=30)


@given(st.data())
def test_position_aware_blend_keeps_the_documented_weights(data):
    ps = data.draw(probs)
    fused = sorted(data.draw(st.lists(st.floats(0, 1), min_size=len(ps), max_size=len(ps))), reverse=True)
    out = R.blend_position_aware(fused, ps)
    norm = R.min_max(fused)
    for i, ((score, w), p, r) in enumerate(zip(out, ps, norm)):
        assert w == (0.75 if i < 3 else 0.60 if i < 10 else 0.40)
        assert abs(score - (w * r + (1 - w) * p)) < 1e-12


def test_position_aware_blend_lets_a_confident_reranker_displace_a_near_tie_at_rank_1():
    out = R.blend_position_aware([0.070, 0.069, 0.020], [0.05, 0.95, 0.5])
    assert out[1][0] > out[0][0]


def test_position_aware_blend_keeps_a_clear_winner():
    out = R.blend_position_aware([0.070, 0.030, 0.020], [0.40, 0.95, 0.5])
    assert out[0][0] > out[1][0]


@given(st.data(), st.floats(0, 1))
def test_sigmoid_blend_is_the_seed_rule(data, rw):
    ps = data.draw(probs)
    fused = data.draw(st.lists(st.floats(0, 1), min_size=len(ps), max_size=len(ps)))
    norm = R.min_max(fused)
    for (score, w), p, r in zip(R.blend_sigmoid(fused, ps, rw), ps, norm):
        assert abs(score - (rw * p + (1 - rw) * r)) < 1e-12 and abs(w - (1 - rw)) < 1e-12


def test_sigmoid_is_stable_at_the_extremes():
    assert R.sigmoid(1000) == 1.0 and R.sigmoid(-1000) == 0.0 and R.sigmoid(0) == 0.5


def test_adaptive_fusion_scales_only_a_weak_dense_leg():
    bm25 = F.Leg("bm25", "bm25", 0.3, (F.LegHit(1, 1, 5.0), F.LegHit(3, 2, 5.0)), ceiling=6.0, known=1.0)  # tied: no lead
    for top_cos, share in ((0.1, F.STRENGTH_FLOOR), (0.2, F.STRENGTH_FLOOR), (0.3, 0.5), (0.4, 1.0), (0.8, 1.0)):
        dense = F.leg_from_ranking("vector", "cosine", 0.7, [2], [top_cos])
        adapted = {lg.name: lg.weight for lg in F.adapt_weights([bm25, dense])}
        assert adapted["bm25"] == 0.3 and abs(adapted["vector"] - 0.7 * share) < 1e-12
    alone = F.leg_from_ranking("vector", "cosine", 0.7, [2], [0.1])
    assert F.adapt_weights([alone]) == [alone]  # one kind of leg: nothing to protect


def test_adaptive_fusion_raises_a_bm25_leg_whose_winner_leads_clearly():
    dense = F.leg_from_ranking("vector", "cosine", 0.5, [9], [0.9])
    for scores, factor in (((10.0, 10.0), 1.0), ((10.0, 5.0), 1 + 0.5 / F.GAP_SCALE), ((10.0, 0.0), 1 + 1 / F.GAP_SCALE), ((10.0,), 1 + 1 / F.GAP_SCALE)):
        bm25 = F.leg_from_ranking("bm25", "bm25", 0.5, range(len(scores)), scores)
        adapted = {lg.name: lg.weight for lg in F.adapt_weights([bm25, dense])}
        assert abs(adapted["bm25"] - 0.5 * factor) < 1e-12 and adapted["vector"] == 0.5


def test_a_weak_dense_leg_does_not_bury_an_exact_lexical_match():
    """The `kb search where` case: BM25 ranks the Where page first, the dense leg ranks other
    pages first with a top cosine of 0.2. Fixed weights bury the page; adaptive ones do not."""
    bm25 = F.Leg("bm25", "bm25", 0.3, tuple(F.LegHit(c, i + 1, 9.0 - i) for i, c in enumerate([100, 101, 102])), ceiling=10.0, known=1.0)
    dense = F.leg_from_ranking("vector", "cosine", 0.7, [1, 2, 3, 4, 5], [0.205, 0.2, 0.19, 0.18, 0.17])
    fixed = [f.chunk for f in F.fuse_rrf([bm25, dense], DEFAULT)][:3]
    adaptive = [f.chunk for f in F.fuse_rrf(F.adapt_weights([bm25, dense]), DEFAULT)][:3]
    assert 100 not in fixed and adaptive == [100, 101, 102]


def test_a_lone_lexical_hit_is_not_buried_by_a_strong_dense_leg():
    """`kb search HUGO_NUMWORKERMULTIPLIER` on the Hugo docs: one page names the variable, so the
    BM25 leg has that one hit; the dense leg (top cosine 0.64) ranks a page without it first and
    the named page 10th. A lone hit has no runner-up, so its lead is the widest there is: it gets
    the clear winner's weight, not the weight of a leg whose winner is tied."""
    bm25 = F.Leg("bm25", "bm25", 0.3, (F.LegHit(7, 1, 2.83),), ceiling=8.1, known=1.0)
    dense = F.leg_from_ranking("vector", "cosine", 0.7, [1, 2, 3, 4, 5, 6, 8, 9, 10, 7], [0.64, 0.58, 0.57, 0.56, 0.56, 0.55, 0.55, 0.54, 0.54, 0.54])
    assert F.strength_factor(bm25) == 1 + 1 / F.GAP_SCALE
    assert F.fuse_rrf(F.adapt_weights([bm25, dense]), DEFAULT)[0].chunk == 7


@given(st.lists(st.floats(0.01, 100.0), min_size=1, max_size=6))
def test_a_bm25_legs_factor_is_its_winners_lead_and_a_missing_runner_up_counts_as_zero(scores):
    """The factor lies in [1, 1 + 1 / GAP_SCALE] and is continuous where the leg runs out of hits:
    a lone hit leads exactly as far as a winner whose runner-up scores 0."""
    scores = sorted(scores, reverse=True)
    leg = F.leg_from_ranking("bm25", "bm25", 1.0, range(len(scores)), scores)
    factor = F.strength_factor(leg)
    assert 1.0 <= factor <= 1 + 1 / F.GAP_SCALE + 1e-12
    lone = F.leg_from_ranking("bm25", "bm25", 1.0, [0], scores[:1])
    zero_second = F.leg_from_ranking("bm25", "bm25", 1.0, [0, 1], [scores[0], 0.0])
    assert F.strength_factor(lone) == F.strength_factor(zero_second) == 1 + 1 / F.GAP_SCALE


def test_another_models_cosines_are_read_on_minilms_scale():
    to_minilm = F.minilm_cosine("multilingual-e5-small")
    weak, strong = F.COSINE_ANCHORS["multilingual-e5-small"]
    assert abs(to_minilm(weak) - F.COS_WEAK) < 1e-12 and abs(to_minilm(strong) - F.COS_STRONG) < 1e-12
    assert F.minilm_cosine("all-MiniLM-L6-v2") is None and F.minilm_cosine(None) is None
    bm25 = F.leg_from_ranking("bm25", "bm25", 0.5, [1], [3.0])
    dense = F.leg_from_ranking("vector", "cosine", 0.5, [2], [0.80])  # an e5 cosine near its noise
    weights = {m: {lg.name: lg.weight for lg in F.adapt_weights([bm25, dense], m)}["vector"] for m in ("multilingual-e5-small", "all-MiniLM-L6-v2")}
    assert weights["all-MiniLM-L6-v2"] == 0.5 and abs(weights["multilingual-e5-small"] - 0.5 * F.strength_factor(F.leg_from_ranking("v", "cosine", 1, [2], [to_minilm(0.80)]))) < 1e-12
