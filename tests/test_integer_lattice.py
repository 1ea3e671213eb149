"""Integer-valued operands: the `integer` input promise, the integrality analysis, and the
one-chain lattice form of piecewise_linear_2d that they enable (contracts.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tw_passes.decompose import DecomposePass
from tw_passes.optimize import DEFAULT_PIPELINE

from twdialect.errors import TwError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import UnitAttr

from tw_lowering import compile
from tw_passes import run_pipeline
from twdialect import evaluate, ops as tw, parse_module, print_module
from twdialect.dense import to_numpy
from twdialect.dialect import InputOp, MlpOp, TwVerifyException
from twdialect.interp import EvaluationError, evaluate_values, find_graph
from twdialect.random_graphs import random_graph, sample_inputs, select_tree_depth4
from twdialect.ranges import integer_components


def mlps(module):
    return [op for op in find_graph(module).block.ops if isinstance(op, MlpOp)]


# --------------------------------------------------------------------------------------
# The promise: tw.input ... integer
# --------------------------------------------------------------------------------------


def test_integer_input_round_trips_and_is_checked_by_the_oracle():
    with tw.Graph() as g:
        x = tw.input("x", 1, (0, 9), integer=True)
        tw.output("y", x)
    text = print_module(g.module)
    assert 'tw.input "x" <0.0, 9.0> integer : !tw.vec<1>' in text
    assert print_module(parse_module(text)) == text
    assert evaluate(g.module, {"x": np.array([[3.0], [7.0]])})["y"].tolist() == [[3.0], [7.0]]
    with pytest.raises(EvaluationError, match='"x" is declared integer'):
        evaluate(g.module, {"x": np.array([[3.5]])})


def test_integer_input_needs_an_integer_in_its_range():
    with pytest.raises(TwError, match="holds no integer"):
        with tw.Graph():
            tw.output("y", tw.input("x", 1, (0.2, 0.8), integer=True))


# --------------------------------------------------------------------------------------
# The analysis
# --------------------------------------------------------------------------------------


def test_integer_components_rules():
    with tw.Graph() as g:
        x = tw.input("x", 1, (0, 9), integer=True)
        f = tw.input("f", 1, (0, 9))
        e = tw.embedding("t", np.array([[0.0, 1.5], [2.0, 3.0]]))
        cat = tw.concat(x, e)
        whole = tw.linear(cat, [[2.0], [1.0], [0.0]], [1.0])
        half = tw.linear(cat, [[0.5], [0.0], [0.0]])
        reads_frac = tw.linear(cat, [[1.0], [0.0], [1.0]])
        mixed = tw.add(x, f)
        sel = tw.select(tw.compare(f, 2.0), x, whole)
        clamped = tw.clamp(x, 0.5, 3.0)
        for i, v in enumerate((whole, half, reads_frac, mixed, sel, clamped)):
            tw.output(f"o{i}", v)
    known = integer_components(g.module)
    assert known[cat].tolist() == [True, True, False]
    assert known[whole].tolist() == [True]
    assert known[half].tolist() == [False]
    assert known[reads_frac].tolist() == [False]
    assert known[mixed].tolist() == [False]
    assert known[sel].tolist() == [True]
    assert known[clamped].tolist() == [False]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 31 - 1), n_ops=st.integers(1, 25))
def test_integer_components_are_sound_on_random_graphs(seed, n_ops):
    """Declare every input integer, feed integers: every component the analysis calls integer
    is an integer in the oracle's evaluation."""
    module = random_graph(seed, n_ops, library=True)
    graph = find_graph(module)
    for op in graph.block.ops:
        if isinstance(op, InputOp):
            op.properties["integer"] = UnitAttr()
    inputs = {k: np.round(v) for k, v in sample_inputs(module, 12, seed=seed).items()}
    known = integer_components(module)
    values = evaluate_values(module, inputs)
    for v, flags in known.items():
        got = values[v][:, flags]
        assert np.all(got == np.round(got)), v


# --------------------------------------------------------------------------------------
# The lattice form of piecewise_linear_2d
# --------------------------------------------------------------------------------------


def table_graph(xr, yr, xs, ys, table, integer=True):
    with tw.Graph() as g:
        x = tw.input("x", 1, xr, integer=integer)
        y = tw.input("y", 1, yr, integer=integer)
        tw.output("z", tw.piecewise_linear_2d(x, y, xs, ys, table))
    return g.module


def lattice_feed(xr, yr):
    gx, gy = np.meshgrid(np.arange(np.ceil(xr[0]), np.floor(xr[1]) + 1),
                         np.arange(np.ceil(yr[0]), np.floor(yr[1]) + 1), indexing="ij")
    return {"x": gx.reshape(-1, 1), "y": gy.reshape(-1, 1)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 31 - 1), x0=st.integers(-6, 3), nx=st.integers(1, 12),
       y0=st.integers(-6, 3), ny=st.integers(1, 12), out=st.integers(1, 3))
def test_lattice_form_is_one_chain_and_exact_on_the_lattice(seed, x0, nx, y0, ny, out):
    rng = np.random.default_rng(seed)
    xr, yr = (x0 - rng.uniform(0, 0.9), x0 + nx - 1 + rng.uniform(0, 0.9)), (y0, y0 + ny - 1)
    # Grid lines anywhere (also off the lattice and outside the ranges).
    xs = np.sort(rng.choice(np.linspace(x0 - 3, x0 + nx + 3, 40), rng.integers(2, 6),
                            replace=False))
    ys = np.sort(rng.choice(np.linspace(y0 - 3, y0 + ny + 3, 40), rng.integers(2, 6),
                            replace=False))
    table = rng.uniform(-5, 5, (xs.size, ys.size, out))
    module = table_graph(xr, yr, xs, ys, table)
    feed = lattice_feed(xr, yr)
    ideal = evaluate(module, feed)["z"]
    # (up to 12 x 12 lattice rows of random reals: the float32 bound of the long hinge sum
    # may pass 1e-4 where the measured error below does not; the float32 check is tested in
    # test_f32_error.py)
    run_pipeline(module, "decompose{tolerance=1.0e30}")
    assert len(mlps(module)) == 1
    after = evaluate(module, feed)["z"]
    assert np.abs(after - ideal).max() <= 1e-5 * (1 + np.abs(ideal).max())
    compiled = compile(module, d=32, d_head=8).run(feed)["z"]
    assert np.abs(compiled - ideal).max() <= 1e-4 * (1 + np.abs(ideal).max())


def test_lattice_form_not_used_without_the_promise_or_when_disabled():
    xs, ys, table = [0.0, 4.0, 9.0], [0.0, 9.0], np.arange(6.0).reshape(3, 2, 1)
    assert len(mlps(run_pipeline(table_graph((0, 9), (0, 9), xs, ys, table, integer=False),
                                 "decompose"))) == 2
    assert len(mlps(run_pipeline(table_graph((0, 9), (0, 9), xs, ys, table),
                                 "decompose{lattice-neurons=0}"))) == 2
    assert len(mlps(run_pipeline(table_graph((0, 9), (0, 9), xs, ys, table),
                                 "decompose"))) == 1


def test_lattice_form_respects_the_neuron_budget_and_picks_the_cheaper_order():
    # f(x, y) = r(x) for y <= 5, then r(x) (1 + (y - 5) / 4), r with a kink at every x:
    # rows along x (t = x + 10 y) need ~10 breakpoints each, rows along y (t = y + 10 x)
    # 3 each (start, the kink at 5, end). The cheaper order is taken.
    rng = np.random.default_rng(0)
    xs = np.arange(10.0)
    table = np.repeat(rng.uniform(-1, 1, (10, 1, 1)), 3, axis=1) * [[[1.0], [1.0], [2.0]]]
    module = table_graph((0, 9), (0, 9), xs, [0.0, 5.0, 9.0], table)
    ideal = evaluate(module, lattice_feed((0, 9), (0, 9)))["z"]
    run_pipeline(module, "decompose")
    (mlp,) = mlps(module)
    assert to_numpy(mlp.w2).shape[0] <= 3 * 10 + 1
    assert np.allclose(evaluate(module, lattice_feed((0, 9), (0, 9)))["z"], ideal, atol=1e-5)
    # A budget below the cheaper order's need falls back to the two-chain form.
    module = table_graph((0, 9), (0, 9), xs, [0.0, 5.0, 9.0], table)
    assert len(mlps(run_pipeline(module, "decompose{lattice-neurons=4}"))) == 2


def test_lattice_needs_f32_exact_integers():
    # x near 2^24: x + stride * y is not exact in f32, so the two-chain form is used.
    big = float(2 ** 24 - 4)
    module = table_graph((big, big + 3), (0, 2), [big, big + 3.0], [0.0, 2.0],
                         np.arange(4.0).reshape(2, 2, 1))
    assert len(mlps(run_pipeline(module, "decompose{tolerance=1.0e30}"))) == 2  # (float64)


def test_lattice_too_many_points_keeps_two_chains():
    module = table_graph((0, 999), (0, 999), [0.0, 999.0], [0.0, 999.0],
                         np.arange(4.0).reshape(2, 2, 1))
    assert len(mlps(run_pipeline(module, "decompose"))) == 2


# --------------------------------------------------------------------------------------
# The targeted case: a depth-4 select tree on two integer scalars -> one MLP layer
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("integer, layers", [(True, 1), (False, 2)])
def test_depth4_select_tree_layers(integer, layers):
    feed = lattice_feed((0, 9), (0, 9))
    ideal = evaluate(select_tree_depth4(integer), feed)["d"]
    before = compile(select_tree_depth4(integer), d=64, d_head=16,
                     pipeline="decompose{select-trees=false}")
    assert before.stats.n_layers == 5
    module = run_pipeline(select_tree_depth4(integer), "select-tree-to-pwl2d")
    ct = compile(module, d=64, d_head=16, pipeline="default")
    assert ct.stats.n_layers == layers
    assert np.abs(ct.run(feed)["d"] - ideal).max() <= 1e-4 * (1 + np.abs(ideal).max())
    # decompose's select-tree fusion (the default): on integers (no point in a ramp zone)
    # the compares, then the tree in one chain; real inputs may sit in a ramp zone: left alone
    fused = compile(select_tree_depth4(integer), d=64, d_head=16, pipeline="default")
    assert fused.stats.n_layers == (2 if integer else 5)
    assert np.abs(fused.run(feed)["d"] - ideal).max() <= 1e-4 * (1 + np.abs(ideal).max())


def random_integer_tree(seed: int, depth: int, width: int):
    """A random select tree over compares of two integer inputs x in [-3, 6], y in [0, 7];
    thresholds are integers and ramps below 1, so no integer lies in a ramp zone."""
    rng = np.random.default_rng(seed)
    with tw.Graph() as g:
        x = tw.input("x", 1, (-3, 6), integer=True)
        y = tw.input("y", 1, (0, 7), integer=True)
        var = {"x": x, "y": y}

        def leaf():
            kind, name = rng.integers(4), ("x", "y")[rng.integers(2)]
            if kind == 0:
                return tw.literal(np.round(rng.uniform(-3, 3, width), 2))
            if kind == 1:
                bp = np.unique(np.round(rng.uniform(-4, 8, int(rng.integers(2, 5))), 1))
                bp = bp if bp.size >= 2 else np.array([0.0, 1.0])
                return tw.piecewise_linear(var[name], bp, rng.uniform(-2, 2, (bp.size, width)))
            if kind == 2:
                return tw.linear(var[name], rng.uniform(-2, 2, (1, width)), rng.uniform(-1, 1, width))
            return tw.linear(tw.concat(x, y), rng.uniform(-2, 2, (2, width)))

        def node(d):
            if d == 0:
                return leaf()
            name = ("x", "y")[rng.integers(2)]
            t = float(rng.integers(-2, 7))
            c = tw.compare(var[name], t, float(rng.choice([0.25, 0.5, 0.9])))
            return tw.select(c, node(d - 1), node(d - 1))

        tw.output("r", node(depth))
    return g.module


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000), depth=st.integers(1, 4), width=st.sampled_from([1, 2]))
def test_random_integer_trees_compile_to_one_layer_and_match_everywhere(seed, depth, width):
    """On integers the rewrite is exact everywhere (no point lies in a ramp zone), and the
    table is one MLP layer (its lattice form fits the default neuron budget on this grid)."""
    module = random_integer_tree(seed, depth, width)
    feed = lattice_feed((-3, 6), (0, 7))
    ideal = evaluate(module, feed)["r"]
    run_pipeline(module, "select-tree-to-pwl2d{max-breakpoints=256}")
    assert not [op for op in find_graph(module).block.ops if op.name == "tw.select"]
    # (random real tables: the float32 bound of a long hinge sum may pass 1e-4 where the
    # measured error checked below does not)
    pipeline = (DecomposePass(tolerance=1.0e-3),) + DEFAULT_PIPELINE[1:]
    ct = compile(module, d=64, d_head=16, pipeline=pipeline)
    assert len(mlps(run_pipeline(module, "decompose{tolerance=1.0e-3}"))) == 1  # fit the budget
    assert ct.stats.n_layers == 1
    np.testing.assert_allclose(ct.run(feed)["r"], ideal, atol=1e-4 * (1 + np.abs(ideal).max()))
