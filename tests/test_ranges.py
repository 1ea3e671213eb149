"""Value-range analysis: per-op rules and soundness against the oracle on random graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twdialect import ops as tw
from twdialect.interp import evaluate_values, find_graph
from twdialect.random_graphs import random_graph, sample_inputs
from twdialect.ranges import RangeError, value_ranges


def _box(v, ranges):
    lo, hi = ranges[v]
    return lo.tolist(), hi.tolist()


def assert_sound(module, inputs):
    """Every oracle value lies inside its range, exactly (no tolerance)."""
    ranges = value_ranges(find_graph(module))
    for value, array in evaluate_values(module, inputs).items():
        lo, hi = ranges[value]
        assert lo.shape == hi.shape == (array.shape[1],)
        assert np.all(lo <= hi)
        below = array < lo
        above = array > hi
        assert not below.any() and not above.any(), (
            f"{value.owner.name}: values [{array.min(0)}, {array.max(0)}] outside "
            f"[{lo}, {hi}]")


# --------------------------------------------------------------------------------------
# Soundness on random graphs
# --------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 31 - 1), n_ops=st.integers(1, 24),
       library=st.booleans(), n_pos=st.integers(1, 48))
def test_ranges_sound_on_random_graphs(seed, n_ops, library, n_pos):
    module = random_graph(seed, n_ops, library=library)
    assert_sound(module, sample_inputs(module, n_pos, seed=seed + 1))


def test_ranges_sound_at_range_corners():
    """Inputs pinned at their declared bounds (where interval boxes are tight) stay inside."""
    for seed in range(40):
        module = random_graph(seed, 16, library=True)
        feeds = sample_inputs(module, 32, seed)
        rng = np.random.default_rng(seed)
        for name, a in feeds.items():
            feeds[name] = np.where(rng.random(a.shape) < 0.5, -4.0, 4.0)
        assert_sound(module, feeds)


@pytest.mark.slow
def test_ranges_sound_sweep():
    for seed in range(3000):
        module = random_graph(seed, 30, library=bool(seed % 2))
        assert_sound(module, sample_inputs(module, 64, seed))


# --------------------------------------------------------------------------------------
# Per-op rules
# --------------------------------------------------------------------------------------


def test_sources_and_literal():
    with tw.Graph() as g:
        x = tw.input("x", 2, value_range=(-3.0, 5.0))
        e = tw.embedding("tok", [[1.0, -2.0], [3.0, 0.5], [-1.0, 0.0]])
        p = tw.pos_encoding(4, max_len=10)
        c = tw.literal([1.5, -2.0])
        tw.output("o", tw.concat(x, e, p, c))
    r = value_ranges(g.op)
    assert _box(x, r) == ([-3.0, -3.0], [5.0, 5.0])
    assert _box(e, r) == ([-1.0, -2.0], [3.0, 0.5])
    assert _box(p, r) == ([0.0, 0.0, -1.0, -1.0], [9.0, 81.0, 1.0, 1.0])
    assert _box(c, r) == ([1.5, -2.0], [1.5, -2.0])


def test_linear_interval_is_tight():
    """x @ W + b over a box: the bound is attained at a corner of the box."""
    w = np.array([[1.0, -2.0], [0.5, 0.25]])
    with tw.Graph() as g:
        x = tw.input("x", 2, value_range=(-1.0, 2.0))
        y = tw.linear(x, w, [0.5, -1.0])
        tw.output("y", y)
    lo, hi = value_ranges(g.op)[y]
    corners = np.array([[a, b] for a in (-1.0, 2.0) for b in (-1.0, 2.0)]) @ w + [0.5, -1.0]
    np.testing.assert_allclose(lo, corners.min(0), atol=1e-9)
    np.testing.assert_allclose(hi, corners.max(0), atol=1e-9)
    assert np.all(lo <= corners.min(0)) and np.all(hi >= corners.max(0))


def test_relu_add_concat_slice_after():
    with tw.Graph() as g:
        x = tw.input("x", 2, value_range=(-1.0, 3.0))
        y = tw.input("y", 2, value_range=(2.0, 4.0))
        r = tw.relu(x)
        s = tw.add(x, y)
        c = tw.concat(x, y)
        sl = tw.slice(c, 1, 2)
        a = tw.after(sl, r)
        tw.output("o", tw.concat(s, a))
    rr = value_ranges(g.op)
    assert _box(r, rr) == ([0.0, 0.0], [3.0, 3.0])
    lo, hi = rr[s]
    np.testing.assert_allclose(lo, [1.0, 1.0], atol=1e-9)
    np.testing.assert_allclose(hi, [7.0, 7.0], atol=1e-9)
    assert _box(sl, rr) == ([-1.0, 2.0], [3.0, 4.0])
    assert _box(a, rr) == _box(sl, rr)


def test_mlp_and_attention_bounds():
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-2.0, 2.0))
        m = tw.mlp(x, [[1.0, -1.0]], [0.0, 0.0], [[1.0], [1.0]])  # |x|
        a = tw.attn(x, x, x, [[3.0]], [[1.0]], [[2.0]], [[-1.0]])  # -2 * (mean of x)
        tw.output("o", tw.concat(m, a))
    r = value_ranges(g.op)
    lo, hi = r[m]
    assert lo[0] == pytest.approx(0.0, abs=1e-9) and hi[0] == pytest.approx(4.0)
    lo, hi = r[a]  # a convex combination of -2 v_j, v_j in [-2, 2]
    assert lo[0] == pytest.approx(-4.0) and hi[0] == pytest.approx(4.0)


def test_library_op_rules():
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-1.0, 1.0))
        pos = tw.add_const(x, 5.0)  # in [4, 6]
        always = tw.compare(pos, 3.0)
        maybe = tw.compare(x, 0.0)
        never = tw.compare(x, 2.0)
        big = tw.multiply_const(x, 10.0)  # [-10, 10]
        sel = tw.select(maybe, x, big)
        sel_true = tw.select(always, x, big)
        cl = tw.clamp(big, -2.0, 3.0)
        pwl = tw.piecewise_linear(x, [-4.0, -0.5, 0.5, 4.0], [[9.0], [1.0], [2.0], [-9.0]])
        p2 = tw.piecewise_linear_2d(x, x, [-3.0, -2.0, 2.0, 3.0], [0.0, 1.0, 5.0],
                                    np.arange(12.0).reshape(4, 3))
        tw.output("o", tw.concat(always, maybe, never, sel, sel_true, cl, pwl, p2))
    r = value_ranges(g.op)
    assert _box(always, r) == ([1.0], [1.0])
    assert _box(maybe, r) == ([-1.0], [1.0])
    assert _box(never, r) == ([-1.0], [-1.0])
    lo, hi = r[sel]
    assert lo[0] == pytest.approx(-10.0) and hi[0] == pytest.approx(10.0)
    assert _box(sel_true, r) == _box(x, r)
    assert _box(cl, r) == ([-2.0], [3.0])
    # Only the breakpoints inside [-1, 1] (values 1, 2) and the ends count.
    lo, hi = r[pwl]
    assert lo[0] == pytest.approx(2.0 - 11.0 / 7.0) and hi[0] == pytest.approx(9.0 - 48.0 / 7.0)
    # x clamped to [-1, 1] meets the cells of xs[1..2]; y = x clamped to [0, 1] meets ys[0..1].
    lo, hi = r[p2]
    assert (lo[0], hi[0]) == (3.0, 7.0)


def test_value_ranges_accepts_a_module():
    module = random_graph(7, 12)
    by_module = value_ranges(module)
    by_graph = value_ranges(find_graph(module))
    assert list(by_module) == list(by_graph)


def test_overflowing_range_names_the_op():
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-1e300, 1e300))
        y = tw.linear(x, [[1e30]])
        tw.output("y", y)
    with pytest.raises(RangeError, match=r"'tw.linear'.*not finite"):
        value_ranges(g.op)
    lo, hi = value_ranges(g.op, strict=False)[y]
    assert lo[0] == -np.inf and hi[0] == np.inf


def _hard_read(hard, scale=1.0):
    """position - 1's token through an attend_to_offset-shaped head; `hard` its claimed gap."""
    with tw.Graph() as g:
        tokens = tw.embedding("tokens", np.arange(5.0)[:, None])
        pos = tw.pos_encoding(32)
        query = tw.concat(tw.slice(pos, 0, 1), tw.literal([1.0]))
        read = tw.attn(query, tw.slice(pos, 0, 2), tokens,
                       np.array([[80.0, 0.0], [-80.0, -40.0]]) * scale, np.eye(2), np.eye(1),
                       [[3.0]], hard=hard)
        tw.output("y", read)
    return g.module, read


@pytest.mark.parametrize("hard,integer", [(None, False), (40.0, True), (10.0, False)])
def test_hard_read_is_integer_only_when_claimed_wide(hard, integer):
    from twdialect.ranges import integer_components

    module, read = _hard_read(hard)
    assert bool(integer_components(module)[read][0]) is integer


def test_oracle_refuses_a_false_hard_claim():
    from twdialect.inputs import EvaluationError
    from twdialect.interp import evaluate

    module, _ = _hard_read(40.0)
    y = evaluate(module, {"tokens": np.array([1, 4, 2, 3])})["y"][:, 0]
    assert np.allclose(y, [3, 3, 12, 6])                       # 3 x the previous token
    weak, _ = _hard_read(40.0, scale=0.5)                      # the gap is only 20
    with pytest.raises(EvaluationError, match=r"'tw.attn' in @main: declared tw.hard but query "
                                              r"\d+'s top logit leads the next by 20"):
        evaluate(weak, {"tokens": np.array([1, 4, 2, 3])})
    with pytest.raises(Exception, match="hard"):
        _hard_read(-1.0)
    with tw.Graph():
        x = tw.input("x", 1, (0.0, 1.0))
        with pytest.raises(Exception, match="claim_hard: read must be the value of a tw.attn"):
            tw.claim_hard(x, 30.0)
