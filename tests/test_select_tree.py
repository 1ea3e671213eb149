"""select-tree-to-pwl2d: select/compare trees over <= 2 scalars become one piecewise-linear op
that agrees with the oracle everywhere outside the compare ramp zones."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tw_passes import run_pipeline
from twdialect import evaluate, ops as tw, print_module
from twdialect.analysis import critical_path, first_use_before_def
from twdialect.dialect import (
    SCOPE_TERMINAL,
    CompareOp,
    LinearOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    SelectOp,
)
from twdialect.interp import find_graph

X_RANGE, Y_RANGE = (-4.0, 4.0), (-3.0, 3.0)


def count(module, cls) -> int:
    return sum(isinstance(op, cls) for op in find_graph(module).block.ops)


def last_slot(module) -> int:
    return max(critical_path(find_graph(module)).slots.values())


class Thresholds:
    """Records every compare built, to know the ramp zones of each input."""

    def __init__(self):
        self.zones: dict[str, list[tuple[float, float]]] = {"x": [], "y": []}

    def compare(self, name: str, v, t: float, ramp: float = 0.1):
        self.zones[name].append((t - ramp, t))
        return tw.compare(v, t, ramp)

    def outside(self, points: dict[str, np.ndarray]) -> np.ndarray:
        ok = np.ones(next(iter(points.values())).shape[0], bool)
        for name, zones in self.zones.items():
            for lo, hi in zones:
                ok &= ~((points[name] > lo) & (points[name] < hi))
        return ok


def sample_points(th: Thresholds, n: int, seed: int) -> dict[str, np.ndarray]:
    """Uniform points plus every threshold and ramp start exactly (the step edges)."""
    rng = np.random.default_rng(seed)
    pts = {"x": rng.uniform(*X_RANGE, n), "y": rng.uniform(*Y_RANGE, n)}
    for name, rng_ in (("x", X_RANGE), ("y", Y_RANGE)):
        edges = [e for zone in th.zones[name] for e in zone] + list(rng_)
        other = "y" if name == "x" else "x"
        k = len(edges)
        pts[name] = np.concatenate([pts[name], edges])
        pts[other] = np.concatenate([pts[other], rng.uniform(*(Y_RANGE if name == "x" else X_RANGE), k)])
    return pts


def check_contract(module, th: Thresholds, spec: str = "select-tree-to-pwl2d", seed: int = 0):
    pts = sample_points(th, 400, seed)
    inputs = {"x": pts["x"][:, None], "y": pts["y"][:, None]}
    before = evaluate(module, inputs, on_out_of_range="unchecked")  # edges may lie outside
    slot_before = last_slot(module)
    run_pipeline(module, spec)
    module.verify()
    assert first_use_before_def(find_graph(module).block) is None
    after = evaluate(module, inputs, on_out_of_range="unchecked")
    ok = th.outside(pts)
    for name in before:
        np.testing.assert_allclose(after[name][ok], before[name][ok], rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    assert last_slot(module) <= slot_before, "critical path grew"
    return module


def depth4_tree():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        y = tw.input("y", 1, Y_RANGE)
        a = tw.select(th.compare("x", x, -1.0), tw.linear(x, [[2.0]], [1.0]), tw.literal([3.0]))
        b = tw.select(th.compare("y", y, -2.0), tw.piecewise_linear(y, [-1, 0, 1], [0, 2, -1]),
                      tw.literal([-1.0]))
        c = tw.select(th.compare("y", y, 1.0), a, b)
        e = tw.select(th.compare("x", x, 2.5, 0.25), c, tw.literal([7.0]))
        d = tw.select(th.compare("x", x, 0.5), e, tw.linear(tw.concat(x, y), [[1.0], [-0.5]]))
        tw.output("d", d)
    return g.module, th


def test_depth4_tree_on_two_scalars_becomes_one_pwl2d():
    m, th = depth4_tree()
    m = check_contract(m, th)
    assert count(m, PiecewiseLinear2dOp) == 1
    assert count(m, SelectOp) == count(m, CompareOp) == count(m, LinearOp) == 0
    assert critical_path(find_graph(m)).n_layers == 2  # one table: two MLP chains


def test_one_variable_tree_becomes_piecewise_linear():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        tw.input("y", 1, Y_RANGE)
        inner = tw.select(th.compare("x", x, 1.0), tw.literal([1.0, 2.0]),
                          tw.linear(x, [[1.0, -1.0]]))
        tw.output("r", tw.select(th.compare("x", x, -2.0, 0.5), inner, tw.literal([0.0, 5.0])))
    m = check_contract(g.module, th)
    assert count(m, PiecewiseLinearOp) == 1 and count(m, SelectOp) == 0


def test_identity_leaf_and_shared_leaf_with_other_uses():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        tw.input("y", 1, Y_RANGE)
        n = tw.negate(x)
        tw.output("n", n)  # the leaf has another use: it stays
        tw.output("r", tw.select(th.compare("x", x, 0.0), x, n))
    m = check_contract(g.module, th)
    assert count(m, PiecewiseLinearOp) == 1 and count(m, LinearOp) == 1


def test_multi_use_inner_select_blocks_the_tree():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        y = tw.input("y", 1, Y_RANGE)
        inner = tw.select(th.compare("y", y, 0.0), tw.literal([1.0]), tw.literal([2.0]))
        outer = tw.select(th.compare("x", x, 0.0), inner, tw.literal([3.0]))
        tw.output("inner", inner)
        tw.output("outer", outer)
    m = check_contract(g.module, th)
    # The outer tree keeps its select (its inner select is shared); the inner one alone is a
    # one-variable tree and does become a table.
    assert count(m, SelectOp) == 1 and count(m, PiecewiseLinear2dOp) == 0
    assert count(m, PiecewiseLinearOp) == 1


def test_multi_use_compare_blocks_the_tree():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        tw.input("y", 1, Y_RANGE)
        c = th.compare("x", x, 0.0)
        tw.output("c", c)
        tw.output("r", tw.select(c, tw.literal([1.0]), tw.literal([2.0])))
    m = check_contract(g.module, th)
    assert count(m, SelectOp) == 1 and count(m, PiecewiseLinearOp) == 0


def test_product_leaf_is_rejected():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        y = tw.input("y", 1, Y_RANGE)
        xy = tw.piecewise_linear_2d(x, y, [-4, 4], [-3, 3], lambda a, b: a * b)  # not a leaf kind
        tw.output("r", tw.select(th.compare("x", x, 0.0), xy, tw.literal([0.0])))
    m = check_contract(g.module, th)
    assert count(m, SelectOp) == 1


def test_three_variables_are_rejected():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        y = tw.input("y", 1, Y_RANGE)
        z = tw.input("z", 1, (-1.0, 1.0))
        r = tw.select(th.compare("x", x, 0.0), tw.select(th.compare("y", y, 0.0), z,
                                                          tw.literal([1.0])), tw.literal([2.0]))
        tw.output("r", r)
    m = g.module
    pts = sample_points(th, 50, 1)
    inputs = {"x": pts["x"][:, None], "y": pts["y"][:, None],
              "z": np.zeros((pts["x"].size, 1))}
    inputs["z"] = np.random.default_rng(2).uniform(-1, 1, (pts["x"].size, 1))
    before = evaluate(m, inputs)["r"]
    run_pipeline(m, "select-tree-to-pwl2d")
    # The whole tree reads x, y and z: the root stays; its inner (y, z) tree becomes a table.
    assert count(m, SelectOp) == 1 and count(m, PiecewiseLinear2dOp) == 1
    ok = th.outside(pts)
    np.testing.assert_allclose(evaluate(m, inputs)["r"][ok], before[ok], atol=1e-5)


def test_ramp_below_f32_resolution_is_rejected():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        tw.input("y", 1, Y_RANGE)
        tw.output("r", tw.select(th.compare("x", x, 3.0, 1e-9), tw.literal([1.0]),
                                 tw.literal([2.0])))
    m = check_contract(g.module, th)
    assert count(m, SelectOp) == 1


def test_too_many_breakpoints_are_rejected():
    m, th = depth4_tree()
    m = check_contract(m, th, "select-tree-to-pwl2d{max-breakpoints=4}")
    assert count(m, PiecewiseLinear2dOp) == 0 and count(m, SelectOp) >= 1


def test_tree_taller_than_the_recursion_limit_becomes_one_table():
    # A chain of selects deeper than Python's recursion limit, on four thresholds (so few grid
    # lines): matched and tabulated without recursion.
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        tw.input("y", 1, Y_RANGE)
        v = tw.literal([0.0])
        for i in range(sys.getrecursionlimit() + 100):
            v = tw.select(th.compare("x", x, (-1.5, -0.5, 0.5, 1.5)[i % 4]),
                          tw.literal([float(i % 7)]), v)
        tw.output("r", v)
    m = check_contract(g.module, th)
    assert count(m, SelectOp) == 0 and count(m, PiecewiseLinearOp) == 1


def test_terminal_mark_moves_to_the_table():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        tw.input("y", 1, Y_RANGE)
        ts = tw.sequential_scope(
            [lambda: tw.select(th.compare("x", x, 0.0), tw.literal([1.0]), tw.literal([2.0]))],
            "loop")
        tw.output("r", ts[0])
    m = check_contract(g.module, th)
    (table,) = [op for op in find_graph(m).block.ops if isinstance(op, PiecewiseLinearOp)]
    assert SCOPE_TERMINAL in table.attributes


def test_late_leaf_variable_does_not_deepen_the_graph():
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        y0 = tw.input("y", 1, Y_RANGE)
        y = tw.mlp(tw.mlp(y0, [[1.0]], None, [[1.0]]), [[1.0]], None, [[1.0]])  # ready late
        tw.output("r", tw.select(th.compare("x", x, 0.0), tw.linear(y, [[1.0]]), tw.literal([2.0])))
    check_contract(g.module, th)  # asserts the floor did not grow, whatever was decided


def test_deterministic_output():
    texts = {print_module(check_contract(*depth4_tree())) for _ in range(2)}
    assert len(texts) == 1


# --------------------------------------------------------------------------------------
# Differential: random trees, the ramp contract
# --------------------------------------------------------------------------------------


def random_tree(seed: int, depth: int, width: int, transformed: bool):
    rng = np.random.default_rng(seed)
    th = Thresholds()
    with tw.Graph("main") as g:
        xi = tw.input("x", 1, X_RANGE)
        yi = tw.input("y", 1, Y_RANGE)
        # Variables may themselves be computed (bounded via the range analysis).
        x = tw.linear(xi, [[0.5]], [0.25]) if transformed else xi
        scale = {"x": 0.5 if transformed else 1.0}

        def var(name):
            return x if name == "x" else yi

        def leaf():
            kind = rng.integers(5 if width == 1 else 4)
            name = "x" if rng.random() < 0.5 else "y"
            if kind == 0:
                return tw.literal(np.round(rng.uniform(-3, 3, width), 2))
            if kind == 1:
                bp = np.sort(np.round(rng.uniform(-3, 3, int(rng.integers(2, 5))), 2))
                bp = np.unique(bp) if np.unique(bp).size >= 2 else np.array([-1.0, 1.0])
                return tw.piecewise_linear(var(name), bp, rng.uniform(-2, 2, (bp.size, width)))
            if kind == 2:
                return tw.linear(var(name), rng.uniform(-2, 2, (1, width)), rng.uniform(-1, 1, width))
            if kind == 3:
                return tw.linear(tw.concat(x, yi), rng.uniform(-2, 2, (2, width)))
            return var(name)

        def node(d):
            if d == 0 or rng.random() < 0.2:
                return leaf()
            name = "x" if rng.random() < 0.5 else "y"
            t = float(np.round(rng.uniform(-2.5, 2.5), 2))
            ramp = float(rng.choice([0.05, 0.1, 0.3]))
            # Zones are recorded on the *input* the test samples: x = 0.5 xi + 0.25.
            c = tw.compare(var(name), t, ramp)
            if name == "x" and transformed:
                # (widened by 1e-9: the step edge in input coordinates is not exact in floats)
                th.zones["x"].append(((t - ramp - 0.25) / 0.5 - 1e-9, (t - 0.25) / 0.5 + 1e-9))
            else:
                th.zones[name].append((t - ramp, t))
            return tw.select(c, node(d - 1), node(d - 1))

        root = node(depth)
        if not isinstance(root.owner, SelectOp):
            root = tw.select(th.compare("y", yi, 0.0), root, leaf())
        tw.output("r", root)
    del scale
    return g.module, th


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000), depth=st.integers(1, 4), width=st.sampled_from([1, 2]),
       transformed=st.booleans())
def test_random_trees_agree_outside_ramp_zones(seed, depth, width, transformed):
    m, th = random_tree(seed, depth, width, transformed)
    m = check_contract(m, th, "select-tree-to-pwl2d{max-breakpoints=256}", seed=seed)
    # Every random tree is eligible: it must have become exactly one table.
    assert count(m, SelectOp) == 0
    assert count(m, PiecewiseLinearOp) + count(m, PiecewiseLinear2dOp) == 1


@pytest.mark.slow
def test_random_tree_sweep():
    for seed in range(400):
        m, th = random_tree(seed, 1 + seed % 5, 1 + seed % 2, seed % 3 == 0)
        check_contract(m, th, seed=seed)


# --------------------------------------------------------------------------------------
# Compiled model
# --------------------------------------------------------------------------------------


def test_compiled_depth4_tree_is_one_table():
    from tw_lowering import compile

    module, th = depth4_tree()
    pts = sample_points(th, 200, 0)
    inputs = {"x": pts["x"][:, None], "y": pts["y"][:, None]}
    ok = th.outside(pts)
    ref = evaluate(module, inputs)["d"]
    ct = compile(module, d=64, d_head=16, pipeline="select-tree-to-pwl2d")
    assert ct.stats.n_layers == 2  # piecewise_linear_2d: two MLP chains
    np.testing.assert_allclose(ct.run(inputs)["d"][ok], ref[ok], atol=1e-4)
    # Without the pass: a compare and four select chains.
    assert critical_path(find_graph(depth4_tree()[0])).n_layers == 5


def test_bad_max_breakpoints_is_reported():
    from twdialect.errors import TwError

    module, _ = depth4_tree()
    with pytest.raises(TwError, match="max-breakpoints must be at least 2, got 1"):
        run_pipeline(module, "select-tree-to-pwl2d{max-breakpoints=1}")


# --------------------------------------------------------------------------------------
# Trees whose scalar variable is one of their own inner values
# --------------------------------------------------------------------------------------


def test_compare_of_an_inner_select_keeps_that_select():
    # Minimized from a fuzz case: the outer compare reads the inner select, which is also both
    # branches of the root. Rewriting the whole tree would make the table read the inner select
    # it erases; the root tree must stay (its inner select alone may become a table).
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        tw.input("y", 1, Y_RANGE)
        inner = tw.select(th.compare("x", x, -0.5), x, tw.literal([1.5]))
        tw.output("r", tw.select(tw.compare(inner, 1.0), inner, inner))
    m = check_contract(g.module, th)  # verifies the module: no erased value is read
    assert count(m, SelectOp) == 1 and count(m, PiecewiseLinearOp) == 1


def test_compare_leaf_of_its_own_tree_is_not_a_variable():
    # A condition that is also a branch: as a leaf it would make the erased compare a variable.
    # The selects above it put the root late enough that the table would not deepen the graph.
    th = Thresholds()
    with tw.Graph("main") as g:
        x = tw.input("x", 1, X_RANGE)
        tw.input("y", 1, Y_RANGE)
        c = th.compare("x", x, 0.5)
        v = tw.select(c, c, tw.literal([-2.0]))
        for t in (1.0, 2.0, 3.0):
            v = tw.select(th.compare("x", x, t), v, tw.literal([t]))
        tw.output("r", v)
    m = check_contract(g.module, th)
    assert count(m, CompareOp) >= 1  # the compare read as a value stays
