"""`decompose`: library ops -> MLP chains, checked against the oracle within the contracts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tw_passes import run_pipeline
from tw_passes.decompose import DecomposeError, DecomposePass
from twdialect.point_tables import hinge_coefficients
from twdialect import evaluate, make_context, ops as tw, parse_module, print_module
from twdialect.contracts import (
    SELECT_COND_TOLERANCE,
    SELECT_MAX_MAGNITUDE,
    compare_params,
    contract_mask,
    decomposition_cost,
)
from twdialect.dense import to_numpy
from twdialect.dialect import (
    ANNOTATION,
    ITERATION,
    LIBRARY_OPS,
    SCOPE,
    SCOPE_TERMINAL,
    ConcatOp,
    MlpOp,
    OutputOp,
)
from twdialect.interp import find_graph, pwl_2d
from twdialect.random_graphs import random_graph, sample_inputs

ATOL = 1e-4


# These tests check decompose against the oracle in float64; its float32 check (which refuses
# ops whose rounding over the declared ranges exceeds 1e-4) is tested in tests/test_f32_error.py.
FLOAT64 = "decompose{tolerance=1.0e30}"


def decomposed(module):
    """Decompose in place; check the result verifies and holds no library op."""
    run_pipeline(module, FLOAT64)
    module.verify()
    assert not [op for op in module.walk() if isinstance(op, LIBRARY_OPS)]
    return module


def max_error(module, inputs, mask=None) -> float:
    """Largest |oracle before - oracle after decompose| over the masked positions."""
    before = evaluate(module, inputs)
    decomposed(module)
    after = evaluate(module, inputs)
    worst = 0.0
    for name, ref in before.items():
        diff = np.abs(after[name] - ref)
        if mask is not None:
            diff = diff[mask]
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst


def single_op_graph(build, width=1, value_range=(-8.0, 8.0)):
    """A graph with input "x" of `width` and output "y" = build(x)."""
    with tw.Graph() as g:
        x = tw.input("x", width, value_range=value_range)
        tw.output("y", build(x))
    return g.module


def run_both(module, x):
    """(ideal, decomposed) values of output "y" for input column(s) x."""
    x = np.asarray(x, dtype=np.float64)
    feeds = {"x": x.reshape(len(x), -1)}
    ideal = evaluate(module, feeds)["y"]
    decomposed(module)
    return ideal, evaluate(module, feeds)["y"]


def mlps(module):
    return [op for op in find_graph(module).block.ops if isinstance(op, MlpOp)]


# --------------------------------------------------------------------------------------
# Differential tests on random graphs
# --------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 31 - 1), n_ops=st.integers(1, 20), n_pos=st.integers(1, 40))
def test_decompose_matches_oracle_within_contracts(seed, n_ops, n_pos):
    module = random_graph(seed, n_ops, library=True)
    inputs = sample_inputs(module, n_pos, seed=seed + 1)
    mask = contract_mask(module, inputs)
    assert max_error(module, inputs, mask) <= ATOL


def test_random_graphs_mostly_inside_contracts():
    """The mask must not hide everything: most positions of random graphs are compared."""
    kept = total = 0
    for seed in range(40):
        module = random_graph(seed, 15, library=True)
        mask = contract_mask(module, sample_inputs(module, 32, seed))
        kept += int(mask.sum())
        total += mask.size
    assert kept / total > 0.6


def test_library_only_graphs_match_oracle():
    """Graphs made only of library ops (deep chains of them) over several seeds."""
    kinds = ("compare", "select", "clamp", "piecewise_linear", "piecewise_linear_2d", "linear")
    for seed in range(60):
        module = random_graph(seed, 12, library=True, kinds=kinds)
        inputs = sample_inputs(module, 24, seed)
        assert max_error(module, inputs, contract_mask(module, inputs)) <= ATOL


@pytest.mark.slow
def test_decompose_sweep():
    worst = 0.0
    for seed in range(2000):
        module = random_graph(seed, 30, library=True)
        inputs = sample_inputs(module, 48, seed)
        worst = max(worst, max_error(module, inputs, contract_mask(module, inputs)))
    assert worst <= ATOL


def test_contract_mask_is_needed():
    """Inside compare's ramp zone the decomposition differs from the ideal step: the mask
    excludes exactly those positions, and attention spreads the exclusion to later positions."""
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-1.0, 1.0))
        b = tw.compare(x, 0.0, ramp=0.5)
        tw.output("b", b)
        tw.output("mean", tw.attn(x, x, b, [[0.0]], [[0.0]], [[1.0]], [[1.0]]))
    x = np.array([[0.8], [-0.9], [-0.25], [0.6], [0.7]])
    mask = contract_mask(g.module, {"x": x})
    assert mask.tolist() == [True, True, False, False, False]
    before = evaluate(g.module, {"x": x})
    decomposed(g.module)
    after = evaluate(g.module, {"x": x})
    assert abs(after["b"][2, 0] - before["b"][2, 0]) == pytest.approx(1.0)  # mid-ramp: 0 vs -1
    assert np.abs(after["mean"][3:] - before["mean"][3:]).max() > ATOL
    for name in before:
        np.testing.assert_allclose(after[name][mask], before[name][mask], atol=1e-12)


# --------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------


def test_compare_edges_and_ramp():
    t, ramp = 0.5, 0.25  # exact in f32: the encoded threshold and ramp are exactly t and ramp
    module = single_op_graph(lambda x: tw.compare(x, t, ramp))
    x = [-8.0, t - ramp - 1e-9, t - ramp, t - 0.75 * ramp, t - 0.5 * ramp, t - 1e-12, t,
         t + 1e-9, 8.0]
    ideal, dec = run_both(module, x)
    np.testing.assert_array_equal(ideal[:, 0], [-1, -1, -1, -1, -1, -1, 1, 1, 1])
    exact = [0, 1, 2, 6, 7, 8]
    np.testing.assert_allclose(dec[exact, 0], ideal[exact, 0], atol=1e-12)
    # Inside the ramp: the linear ramp from -1 at t - ramp to +1 at t.
    np.testing.assert_allclose(dec[[3, 4, 5], 0], [-0.5, 0.0, 1.0 - 8e-12], atol=1e-9)


def test_compare_cost_and_width():
    module = single_op_graph(lambda x: tw.compare(x, -1.5, 0.1), width=3)
    x = np.array([[-2.0, -1.5, 3.0], [-1.4, -7.0, -1.61]])
    ideal, dec = run_both(module, x)
    np.testing.assert_allclose(dec, ideal, atol=1e-12)
    (mlp,) = mlps(module)
    assert mlp.hidden == 6


def test_compare_unrepresentable_threshold_is_exact_outside_encoded_zone():
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-1.0, 1.0))
        op_value = tw.compare(x, 0.37, 0.1)
        tw.output("y", op_value)
    p = compare_params(op_value.owner)
    assert abs(p.threshold - 0.37) <= 2 ** -24 * (0.37 + 0.1) * 4
    assert 0.1 / 2 < p.ramp <= 0.1  # a power of two: the encoded ramp is narrower
    x = np.array([max(0.37, p.threshold), min(0.37, p.threshold - p.ramp), -1.0, 1.0])
    ideal, dec = run_both(g.module, x)
    np.testing.assert_allclose(dec, ideal, atol=1e-12)


def test_compare_threshold_too_large_for_f32_names_the_op():
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-1.0, 1.0))
        with tw.annotate("huge"):
            tw.output("y", tw.compare(x, 1e7, 1e-3))
    with pytest.raises(DecomposeError, match=r"'tw.compare'.*\[huge\].*2\^23"):
        decomposed(g.module)


# --------------------------------------------------------------------------------------
# select
# --------------------------------------------------------------------------------------


def _select_graph(cond_width, a_range=(-3.0, 5.0), b_range=(-100.0, -50.0), n=2):
    with tw.Graph() as g:
        c = tw.input("c", cond_width, value_range=(-1.0, 1.0))
        a = tw.input("a", n, value_range=a_range)
        b = tw.input("b", n, value_range=b_range)
        tw.output("y", tw.select(c, a, b))
    return g.module


@pytest.mark.parametrize("cond_width", [1, 2])
def test_select_exact_at_plus_minus_one(cond_width):
    module = _select_graph(cond_width)
    rng = np.random.default_rng(0)
    n = 64
    feeds = {"c": rng.choice([-1.0, 1.0], (n, cond_width)),
             "a": np.concatenate([[[-3.0, 5.0], [5.0, -3.0]], rng.uniform(-3, 5, (n - 2, 2))]),
             "b": np.concatenate([[[-100.0, -50.0], [-50.0, -100.0]],
                                  rng.uniform(-100, -50, (n - 2, 2))])}
    ideal = evaluate(module, feeds)["y"]
    decomposed(module)
    np.testing.assert_allclose(evaluate(module, feeds)["y"], ideal, atol=1e-12)
    (mlp,) = mlps(module)
    cost = decomposition_cost_of(cond_width, 2)
    assert mlp.hidden <= cost


def decomposition_cost_of(cond_width, n):
    with tw.Graph() as g:
        c = tw.input("c", cond_width, value_range=(-1.0, 1.0))
        a = tw.input("a", n, value_range=(0.0, 1.0))
        tw.output("y", tw.select(c, a, a))
    op = next(op for op in find_graph(g.module).block.ops if isinstance(op, LIBRARY_OPS))
    return decomposition_cost(op).neurons


def test_select_condition_within_tolerance_suppresses_losing_branch():
    """c within the tolerance of -1: the result is b up to |c + 1| (K + |o_b|/2) and the
    a branch contributes nothing, however large a is inside its range."""
    module = _select_graph(1, a_range=(-3.0, 5.0), b_range=(-3.0, 5.0))
    delta = SELECT_COND_TOLERANCE * 0.999
    c = np.array([[-1.0 + delta], [-1.0 - delta], [1.0 - delta], [1.0 + delta]])
    a = np.array([[5.0, -3.0], [5.0, 5.0], [1.0, 2.0], [-3.0, 5.0]])
    b = np.array([[-3.0, 5.0], [4.0, -2.0], [5.0, 5.0], [0.0, -3.0]])
    decomposed(module)
    # c strays past [-1, 1] on purpose (the tolerance is the point): unchecked inputs.
    got = evaluate(module, {"c": c, "a": a, "b": b}, on_out_of_range="unchecked")["y"]
    want = np.where(c > 0, a, b)
    k = 8.0  # smallest power of two with K (2 - tolerance) >= 8 (range width; o = lo)
    assert np.all(np.abs(got - want) <= delta * k + 1e-12)
    # With the a branch changed arbitrarily, the c ~ -1 rows do not move.
    got2 = evaluate(module, {"c": c, "a": -a + 2.0, "b": b}, on_out_of_range="unchecked")["y"]
    np.testing.assert_array_equal(got2[:2], got[:2])


def test_select_same_value_both_branches_and_range_edges():
    with tw.Graph() as g:
        c = tw.compare(tw.input("x", 1, value_range=(-1.0, 1.0)), 0.0)
        a = tw.input("a", 3, value_range=(-0.5, 0.5))
        tw.output("y", tw.select(c, a, a))
    feeds = {"x": np.array([[1.0], [-1.0], [0.5]]),
             "a": np.array([[-0.5, 0.5, 0.0], [0.5, -0.5, 0.25], [0.1, 0.2, 0.3]])}
    ideal = evaluate(g.module, feeds)["y"]
    decomposed(g.module)
    np.testing.assert_allclose(evaluate(g.module, feeds)["y"], ideal, atol=1e-12)


def test_select_unbounded_range_names_the_op():
    with tw.Graph() as g:
        c = tw.input("c", 1, value_range=(-1.0, 1.0))
        a = tw.input("a", 1, value_range=(-1.0, 1.0))
        big = tw.input("b", 1, value_range=(-1e300, 1e300))
        huge = tw.linear(big, [[1e30]])
        with tw.annotate("pick"):
            tw.output("y", tw.select(c, a, huge))
    with pytest.raises(DecomposeError, match=r"'tw.select'.*\[pick\].*unbounded"):
        decomposed(g.module)


def test_select_absurd_range_names_the_op():
    module = _select_graph(1, b_range=(-4.0 * SELECT_MAX_MAGNITUDE, 0.0))
    with pytest.raises(DecomposeError, match=r"'tw.select'.*false branch.*exceeds"):
        decomposed(module)


def test_select_error_through_tw_opt(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    text = print_module(_select_graph(1, a_range=(-1e7, 1e7)))
    path = tmp_path / "big.mlir"
    path.write_text(text)
    tool = Path(sys.executable).parent / "tw-opt"
    proc = subprocess.run([str(tool), str(path), "-p", "decompose"], capture_output=True,
                          text=True)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'tw.select'" in lines[0] and "true branch" in lines[0]


# --------------------------------------------------------------------------------------
# clamp
# --------------------------------------------------------------------------------------


def test_clamp_exact():
    module = single_op_graph(lambda x: tw.clamp(x, -1.25, 2.5), width=2)
    x = np.array([[-8.0, -1.25], [-1.2500001, 0.0], [2.5, 2.5000001], [8.0, 1.0]])
    ideal, dec = run_both(module, x)
    np.testing.assert_allclose(dec, ideal, atol=1e-12)
    assert mlps(module)[0].hidden == 4


def test_clamp_degenerate_interval():
    module = single_op_graph(lambda x: tw.clamp(x, 0.75, 0.75))
    ideal, dec = run_both(module, [-3.0, 0.75, 4.0])
    np.testing.assert_allclose(dec, ideal, atol=1e-12)


# --------------------------------------------------------------------------------------
# piecewise_linear
# --------------------------------------------------------------------------------------


def test_pwl_breakpoints_between_and_far_outside():
    bp = [-2.0, -0.5, 0.25, 1.0, 3.0]
    values = [[1.0, 0.0], [-1.0, 2.0], [0.5, 2.0], [0.5, -4.0], [2.0, 1.0]]
    module = single_op_graph(lambda x: tw.piecewise_linear(x, bp, values),
                             value_range=(-1e4, 1e4))
    x = np.concatenate([bp, [-1e4, -2.5, -1.0, 0.0, 0.6, 2.0, 3.5, 1e4],
                        np.linspace(-3, 4, 71)])
    ideal, dec = run_both(module, x)
    np.testing.assert_allclose(dec, ideal, atol=1e-6)
    assert mlps(module)[0].hidden <= len(bp) + 1


def test_pwl_steep_segments_keep_flat_tail():
    """Very different slopes (the tail's flattening coefficient is not exact in f32): the
    right tail is still flat far away."""
    bp = np.array([-2.97, -2.61, 1.98, 1.99, 2.0])
    values = np.array([[-0.803], [1.13], [1.531], [-1.9], [1.7]])
    bp32 = bp.astype(np.float32).astype(np.float64)
    v32 = values.astype(np.float32).astype(np.float64)
    coef, tail = hinge_coefficients(bp32, v32)
    assert abs(coef.sum() + tail.sum()) <= 1e-12 * np.abs(coef).sum()
    module = single_op_graph(lambda x: tw.piecewise_linear(x, bp, values),
                             value_range=(-1e5, 1e5))
    ideal, dec = run_both(module, [1e5, 300.0, 2.0, 1.985, 0.0, -1e5])
    np.testing.assert_allclose(dec, ideal, atol=1e-5)


def test_pwl_collinear_and_constant():
    module = single_op_graph(lambda x: tw.piecewise_linear(x, [0.0, 1.0, 2.0, 3.0],
                                                           [0.0, 1.0, 2.0, 3.0]))
    ideal, dec = run_both(module, np.linspace(-2, 5, 29))
    np.testing.assert_allclose(dec, ideal, atol=1e-12)
    assert mlps(module)[0].hidden == 2  # the slope changes only at the two ends
    module = single_op_graph(lambda x: tw.piecewise_linear(x, [0.0, 1.0], [1.5, 1.5]))
    ideal, dec = run_both(module, [-1.0, 0.5, 8.0])
    np.testing.assert_allclose(dec, ideal, atol=1e-12)


# --------------------------------------------------------------------------------------
# piecewise_linear_2d
# --------------------------------------------------------------------------------------


def _strip_form(x, y, xs, ys, table):
    """The identity decompose relies on, evaluated directly in float64."""
    r = np.clip((x[:, None] - xs[:-1]) / np.diff(xs), 0, 1)
    s = np.clip((y[:, None] - ys[:-1]) / np.diff(ys), 0, 1)
    a = table[1:, 0] - table[:-1, 0]
    b = table[0, 1:] - table[0, :-1]
    c = table[1:, 1:] - table[1:, :-1] - table[:-1, 1:] + table[:-1, :-1]
    mins = np.minimum(r[:, :, None], s[:, None, :])
    return (table[0, 0] + r @ a + s @ b + np.einsum("nij,ijo->no", mins, c))


def test_pwl2d_strip_identity_matches_oracle():
    """f = T00 + sum a_i r_i + sum b_j s_j + sum c_ij min(r_i, s_j) equals the triangulated
    interpolant (checked before relying on it), on random grids and tables."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        n1, n2, out = rng.integers(2, 6), rng.integers(2, 6), rng.integers(1, 3)
        xs = np.sort(rng.choice(np.linspace(-3, 3, 61), n1, replace=False))
        ys = np.sort(rng.choice(np.linspace(-2, 2, 41), n2, replace=False))
        table = rng.normal(size=(n1, n2, out))
        x = rng.uniform(-4, 4, 400)
        y = rng.uniform(-3, 3, 400)
        np.testing.assert_allclose(_strip_form(x, y, xs, ys, table),
                                   pwl_2d(x, y, xs, ys, table), atol=1e-12)


def test_pwl2d_corners_cells_diagonals_and_outside():
    xs, ys = [-1.0, 0.0, 2.0], [0.0, 0.5, 1.0, 3.0]
    rng = np.random.default_rng(1)
    table = np.round(rng.uniform(-2, 2, (3, 4, 2)), 3)
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-5.0, 5.0))
        y = tw.input("y", 1, value_range=(-5.0, 5.0))
        tw.output("z", tw.piecewise_linear_2d(x, y, xs, ys, table))
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    corners = np.stack([gx.ravel(), gy.ravel()], 1)
    diag = np.array([[-0.5, 0.25], [1.0, 0.75], [0.5, 2.0]])  # on the cells' diagonals
    outside = np.array([[-9.0, -9.0], [-9.0, 0.7], [-9.0, 9.0], [0.3, 9.0], [9.0, 9.0],
                        [9.0, 1.1], [9.0, -9.0], [0.3, -9.0]])
    interior = rng.uniform([-1, 0], [2, 3], (200, 2))
    pts = np.concatenate([corners, diag, outside, interior])
    feeds = {"x": pts[:, :1], "y": pts[:, 1:]}
    ideal = evaluate(g.module, feeds, on_out_of_range="unchecked")["z"]  # `outside` on purpose
    decomposed(g.module)
    np.testing.assert_allclose(evaluate(g.module, feeds, on_out_of_range="unchecked")["z"],
                               ideal, atol=1e-6)
    first, second = mlps(g.module)
    assert second.x is first.out  # two chained MLPs
    assert first.hidden == 2 * (3 - 1) + 2 * (4 - 1)
    assert second.hidden <= 3 * 4 - 1


def test_pwl2d_separable_table_drops_cross_neurons():
    xs, ys = [0.0, 1.0, 2.0], [0.0, 1.0, 2.0]
    table = [[a + 2 * b for b in ys] for a in xs]  # f = x + 2y: no cross terms
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-1.0, 3.0))
        y = tw.input("y", 1, value_range=(-1.0, 3.0))
        tw.output("z", tw.piecewise_linear_2d(x, y, xs, ys, table))
    feeds = {"x": np.array([[-1.0], [0.5], [1.7], [3.0]]),
             "y": np.array([[0.2], [1.9], [-1.0], [3.0]])}
    ideal = evaluate(g.module, feeds)["z"]
    decomposed(g.module)
    np.testing.assert_allclose(evaluate(g.module, feeds)["z"], ideal, atol=1e-12)
    assert mlps(g.module)[1].hidden == 4


# --------------------------------------------------------------------------------------
# Structure: one chain per op, attributes, costs, determinism
# --------------------------------------------------------------------------------------


def _annotated_graph():
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-2.0, 2.0))

        def step(i):
            def body():
                with tw.annotate(f"iter{i}"):
                    c = tw.compare(x, 0.1 * i)
                    s = tw.select(c, x, tw.clamp(x, -1.0, 1.0))
                    p = tw.piecewise_linear(s, [-1.0, 0.0, 1.0], [0.0, 1.0, 0.0])
                    return tw.piecewise_linear_2d(p, x, [0.0, 1.0], [-2.0, 0.0, 2.0],
                                                  [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
            return body

        outs = tw.sequential_scope([step(0), step(1)], name="loop")
        tw.output("y", tw.concat(outs))
    return g.module


def test_annotations_scope_and_terminal_preserved():
    module = _annotated_graph()
    before = {(op.attributes[ANNOTATION].data, op.attributes[ITERATION].value.data)
              for op in find_graph(module).block.ops if isinstance(op, LIBRARY_OPS)}
    decomposed(module)
    new_ops = [op for op in find_graph(module).block.ops if isinstance(op, (MlpOp, ConcatOp))
               and ANNOTATION in op.attributes]
    assert {(op.attributes[ANNOTATION].data, op.attributes[ITERATION].value.data)
            for op in new_ops} == before
    assert all(op.attributes[SCOPE].data == "loop" for op in new_ops)
    terminals = [op for op in find_graph(module).block.ops if SCOPE_TERMINAL in op.attributes]
    assert len(terminals) == 2
    for t in terminals:  # the mark sits on the op producing the pwl_2d's replacement value
        assert isinstance(t, MlpOp) and isinstance(t.x.owner, MlpOp)
        assert any(isinstance(u.operation, (OutputOp, ConcatOp)) for u in t.out.uses)


def test_each_library_op_is_one_chain_and_costs_match():
    module = _annotated_graph()
    graph = find_graph(module)
    sublayers: dict[str, int] = {}
    neurons: dict[str, int] = {}
    n_library = 0
    for op in graph.block.ops:
        if isinstance(op, LIBRARY_OPS):
            ann = op.attributes[ANNOTATION].data
            cost = decomposition_cost(op)
            sublayers[ann] = sublayers.get(ann, 0) + cost.mlp_sublayers
            neurons[ann] = neurons.get(ann, 0) + cost.neurons
            n_library += 1
    assert DecomposePass().run_on_graph(make_context(), graph) == n_library
    # Per iteration: compare, select, clamp, piecewise_linear one chain each, pwl_2d two.
    assert sublayers == {"iter0": 6, "iter1": 6}
    for ann in sublayers:
        chains = [m for m in mlps(module) if m.attributes[ANNOTATION].data == ann]
        assert len(chains) == sublayers[ann]
        assert sum(m.hidden for m in chains) <= neurons[ann]


def test_idempotent_deterministic_and_primitives_untouched():
    text_a = print_module(decomposed(_annotated_graph()))
    text_b = print_module(decomposed(_annotated_graph()))
    assert text_a == text_b
    again = parse_module(text_a)
    decomposed(again)
    assert print_module(again) == text_a
    plain = random_graph(5, 20, library=False)
    before = print_module(plain)
    assert print_module(decomposed(plain)) == before


def test_mlp_weights_are_finite_f32():
    module = decomposed(random_graph(11, 25, library=True))
    for op in mlps(module):
        for name in ("w1", "w2"):
            assert np.all(np.isfinite(to_numpy(op.properties[name])))


def test_compiled_transformer_matches_oracle_within_contracts():
    """End to end: the lowering decomposes library ops and runs them on the fp32 machine; on
    positions inside the contracts it agrees with the ideal oracle (fp32 rounding only)."""
    from tw_lowering import compile

    worst = 0.0
    for seed in range(8):
        module = random_graph(seed, 12, library=True)
        inputs = sample_inputs(module, 16, seed)
        ideal = evaluate(module, inputs)
        mask = contract_mask(module, inputs)
        got = compile(module, d=256, d_head=16).run(inputs)
        for name, ref in ideal.items():
            diff = np.abs(np.asarray(got[name], dtype=np.float64) - ref)[mask]
            worst = max(worst, float(diff.max(initial=0.0)))
    assert worst <= 1e-3


# --------------------------------------------------------------------------------------
# Per-op property tests over random parameters
# --------------------------------------------------------------------------------------

_finite = dict(allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(lo_a=st.floats(-1e5, 1e5, **_finite), w_a=st.floats(0, 1e4, **_finite),
       lo_b=st.floats(-1e5, 1e5, **_finite), w_b=st.floats(0, 1e4, **_finite),
       cond_width=st.sampled_from([1, 3]), seed=st.integers(0, 1000))
def test_select_exact_for_any_ranges(lo_a, w_a, lo_b, w_b, cond_width, seed):
    module = _select_graph(cond_width, (lo_a, lo_a + w_a), (lo_b, lo_b + w_b), n=3)
    rng = np.random.default_rng(seed)
    n = 32
    feeds = {"c": rng.choice([-1.0, 1.0], (n, cond_width)),
             "a": rng.uniform(lo_a, lo_a + w_a, (n, 3)),
             "b": rng.uniform(lo_b, lo_b + w_b, (n, 3))}
    feeds["a"][0], feeds["b"][0] = lo_a + w_a, lo_b  # range edges
    ideal = evaluate(module, feeds)["y"]
    decomposed(module)
    scale = 1.0 + max(abs(lo_a), abs(lo_b)) + w_a + w_b
    np.testing.assert_allclose(evaluate(module, feeds)["y"], ideal, rtol=0, atol=1e-12 * scale)


@settings(max_examples=60, deadline=None)
@given(t=st.floats(-100, 100, **_finite), ramp=st.floats(1e-3, 10, **_finite),
       seed=st.integers(0, 1000))
def test_compare_exact_outside_ramp_for_any_parameters(t, ramp, seed):
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-1e3, 1e3))
        tw.output("y", tw.compare(x, t, ramp))
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(t - 3 * ramp, t + 2 * ramp, 200), [t, t - ramp, -1e3, 1e3]])
    feeds = {"x": x[:, None]}
    mask = contract_mask(g.module, feeds, guard=0.0)
    ideal = evaluate(g.module, feeds)["y"]
    decomposed(g.module)
    got = evaluate(g.module, feeds)["y"]
    np.testing.assert_allclose(got[mask], ideal[mask], atol=1e-9)
    assert np.all(np.abs(got) <= 1.0 + 1e-9)  # inside the ramp: between -1 and +1


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(2, 8), out=st.integers(1, 3))
def test_pwl_within_rounding_bound_for_random_tables(seed, n, out):
    rng = np.random.default_rng(seed)
    bp = np.sort(rng.choice(np.round(np.linspace(-3, 3, 601), 2), n, replace=False))
    values = np.round(rng.uniform(-2, 2, (n, out)), 3)
    module = single_op_graph(lambda x: tw.piecewise_linear(x, bp, values),
                             value_range=(-50.0, 50.0))
    x = np.concatenate([bp, rng.uniform(-4, 4, 300), [-50.0, 50.0]])
    ideal, dec = run_both(module, x)
    bp32 = bp.astype(np.float32).astype(np.float64)
    coef, _ = hinge_coefficients(bp32, values.astype(np.float32).astype(np.float64))
    bound = 2.0 ** -24 * float((np.abs(coef[:-1]) * np.diff(bp32)[:, None]).max()) * 2 + 1e-12
    assert np.abs(dec - ideal).max() <= bound
