"""Large magnitudes: reclaimed columns never cost the new value its low bits.

A dead value's columns reclaimed by a cancel in the SAME sublayer as the new writer land as
one residual add of (-old + new), rounded at ulp(|old|). The scheduler reads the value ranges
and cancels loud dead values a sublayer ahead instead (`SAME_SUBLAYER_RATIO` in
lowering/schedule.py)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tw_lowering import GeometryError, compile
from tw_lowering.schedule import SAME_SUBLAYER_RATIO
from twdialect import evaluate
from twdialect import ops as tw


def _assert_exact(ct, module, feeds, atol=1e-4):
    got, want = ct.run(feeds), evaluate(module, feeds)
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], atol=atol * scale, rtol=0, err_msg=k)


def _issue_reproducer(big: float = 1e9):
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-1.0, 1.0))
        a = tw.linear(x, np.full((2, 6), big))
        b = tw.linear(a, np.full((6, 6), 1.0 / big))
        c = tw.linear(b, np.eye(6), np.full(6, 0.25))
        tw.output("c", c)
    return g.module


@pytest.mark.parametrize("d", [16, 32])
def test_reproducer_is_exact_where_columns_are_reused(d):
    module = _issue_reproducer()
    ct = compile(module, d=d, d_head=2, d_hidden=64, pipeline="none")
    xs = np.random.default_rng(0).uniform(-1, 1, (5, 2))
    _assert_exact(ct, module, {"x": xs})
    assert ct.stats.n_layers == 2  # cancelling a sublayer ahead costs no layer here


def test_loud_dead_values_are_cancelled_ahead_not_beside_the_writer():
    from tw_lowering.pressure import GroupRanges

    module = _issue_reproducer()
    ct = compile(module, d=16, d_head=2, d_hidden=64)
    sched = ct.schedule
    tg = sched.tg
    mag = GroupRanges(tg)
    for s, g in sched.cancels:
        for t in tg.tasks:
            if sched.slot[t.tid] == s and sched.cols[t.out_group] is not None:
                shared = np.intersect1d(sched.cols[t.out_group], sched.cols[g])
                if mag[g] > SAME_SUBLAYER_RATIO * max(1.0, mag[t.out_group]):
                    # columns of a loud (1e9-scale) value are never refilled in its cancel's
                    # sublayer (a quiet one, the input x, may be: its low bits are safe)
                    assert not len(shared), (s, g, t.op.name)


def _loud_then_quiet(big, kind, width, seed):
    """A loud intermediate dies, then narrow quiet work needs its columns (kind: the writer)."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-1.0, 1.0))
        a = tw.linear(x, rng.uniform(0.5, 1.0, (2, width)) * big)
        b = tw.linear(a, rng.uniform(-1, 1, (width, 3)) / big)  # back to O(1)
        if kind == "relu":
            c = tw.relu(tw.linear(b, np.eye(3), [0.25, -0.5, 0.125]))
        elif kind == "mlp":
            c = tw.mlp(b, rng.uniform(-1, 1, (3, 4)), [0.1] * 4, rng.uniform(-1, 1, (4, width)))
        else:
            c = tw.linear(b, rng.uniform(-1, 1, (3, width)), [0.25] * width)
        tw.output("c", tw.linear(c, np.eye(tw.width(c)), np.full(tw.width(c), 0.5)))
    return g.module


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exp=st.integers(3, 12), kind=st.sampled_from(["relu", "mlp", "linear"]),
       width=st.integers(2, 6), seed=st.integers(0, 1000), d_extra=st.integers(0, 8))
def test_large_magnitude_family_is_exact_under_pressure(exp, kind, width, seed, d_extra):
    module = _loud_then_quiet(10.0 ** exp, kind, width, seed)
    d = 2 * (1 + (2 + width + d_extra + 1) // 2)  # tight: a few columns beyond the inputs
    try:
        ct = compile(module, d=d, d_head=2, d_hidden=64)
    except GeometryError as e:
        assert "smallest d that fits" in str(e)
        return
    xs = np.random.default_rng(seed).uniform(-1, 1, (6, 2))
    _assert_exact(ct, module, {"x": xs})


def test_ratio_keeps_the_error_inside_the_contract():
    # the worst error a permitted same-sublayer reuse can add, relative to max(1, |new|)
    assert 2.0 ** -24 * 2 * SAME_SUBLAYER_RATIO < 1e-5


def test_static_error_estimate_bounds_the_measured_error():
    """`lowering.precision` estimates every output's fp32 error from the value ranges; the
    measured error must stay under it (here on loud graphs and ordinary random ones)."""
    from tw_lowering.precision import estimate_errors, max_relative_output_error
    from twdialect.random_graphs import random_graph, sample_inputs

    cases = [(_loud_then_quiet(10.0 ** e, k, 4, 1), (12, 2, 64), True)
             for e in (3, 9) for k in ("relu", "mlp", "linear")]
    cases += [(random_graph(s, 20, library=False), (96, 8, 256), False) for s in range(8)]
    for module, geo, loud in cases:
        ct = compile(module, *geo)
        _, err = estimate_errors(ct.schedule)
        feeds = sample_inputs(module, 6, 0)
        # the estimate is of the model against the graph it compiled (after the pipeline,
        # whose folds may move the oracle by up to 1e-6 relative: `twdialect.rounding`)
        got, want = ct.run(feeds), evaluate(ct.schedule.tg.graph, feeds)
        for name, v in ct.schedule.tg.outputs:
            bound = max([err[g] for g in ct.schedule.tg.refs[v].groups()] + [0.0])
            assert np.abs(got[name] - want[name]).max() <= bound, name
        if loud:  # 1e9-scale intermediates, yet the outputs keep the contract
            assert max_relative_output_error(ct.schedule) < 1e-4
