"""Edge cases, costs and argument errors of the arithmetic ops."""

import numpy as np
import pytest

from test_library_helpers import both, build, costs
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.library import LibraryError


def col(*xs):
    return np.asarray(xs, dtype=np.float64).reshape(-1, 1)


def test_floor_int_ramp_edges_and_clamping():
    m = build(lambda: tw.floor_int(tw.input("x", 1, (-30, 30)), -3.5, 4.2, ramp=0.25))
    xs = col(-3.5, -3.0, -1.25, -1.0, -0.5, 0.0, 0.75, 1.0, 3.999 - 0.25, 4.0, 4.2, -9.0, 9.0)
    want = col(-4, -3, -2, -1, -1, 0, 0, 1, 3, 4, 4, -4, 4)
    np.testing.assert_array_equal(both(m, {"x": xs}), want)


def test_floor_int_inside_a_ramp_interpolates():
    m = build(lambda: tw.floor_int(tw.input("x", 1, (0, 5)), 0, 5, ramp=0.5))
    np.testing.assert_allclose(evaluate(m, {"x": col(1.75)})["y"], col(1.5))


def test_ceil_int_ramp_edges():
    m = build(lambda: tw.ceil_int(tw.input("x", 1, (-5, 5)), -5, 5, ramp=0.5))
    xs = col(-5, -4.5, -4.0, -0.5, 0.0, 0.5, 1.0, 1.5, 4.0, 4.75, 5.0)
    want = col(-5, -4, -4, 0, 0, 1, 1, 2, 4, 5, 5)
    np.testing.assert_array_equal(both(m, {"x": xs}), want)


def test_floor_int_without_integers_in_range_is_constant():
    m = build(lambda: tw.floor_int(tw.input("x", 1, (0.2, 0.8)), 0.2, 0.8))
    np.testing.assert_array_equal(both(m, {"x": col(0.2, 0.5, 0.8)}), col(0, 0, 0))


def test_floor_int_integers_bit_exact_over_a_wide_range():
    # (declared integer: over real x in +-1000 float32 could not keep the staircase's hinge
    # sums within 1e-4, and decompose refuses it)
    m = build(lambda: tw.floor_int(tw.input("x", 1, (-1000, 1000), integer=True), -1000, 1000))
    xs = col(*np.arange(-1000, 1001, 7))
    np.testing.assert_array_equal(both(m, {"x": xs}, atol=0), xs)


def test_cond_gate_tolerates_noise_down_to_half():
    m = build(lambda: tw.cond_gate(tw.input("c", 1, (-1, 1)), tw.input("x", 2, (-3, 3)), max_abs=3))
    c = col(1, 0.5, -0.5, -1, 0.7, -0.9)
    x = np.tile([[3.0, -3.0]], (6, 1))
    want = np.where(c > 0, x, 0.0)
    np.testing.assert_allclose(both(m, {"c": c, "x": x}), want, atol=1e-6)


def test_cond_gate_per_component_conditions():
    m = build(lambda: tw.cond_gate(tw.input("c", 2, (-1, 1)), tw.input("x", 2, (-3, 3)), max_abs=3))
    c = np.array([[1.0, -1.0], [-1.0, 1.0]])
    x = np.array([[2.0, 2.0], [-1.5, -1.5]])
    np.testing.assert_allclose(both(m, {"c": c, "x": x}), [[2, 0], [0, -1.5]], atol=1e-6)


def test_cond_gate_cost_is_one_chain_n_plus_one_neurons():
    m = build(lambda: tw.cond_gate(tw.input("c", 1, (-1, 1)), tw.input("x", 5, (-3, 3)), max_abs=3))
    assert costs(m) == (1, 6, 0)


def test_switch_none_true_gives_zero():
    m = build(lambda: tw.switch([tw.input("a", 1, (-1, 1)), tw.input("b", 1, (-1, 1))],
                                [tw.literal([5.0]), tw.literal([-7.0])], max_abs=7))
    out = both(m, {"a": col(-1, 1, -1), "b": col(-1, -1, 1)})
    np.testing.assert_allclose(out, col(0, 5, -7), atol=1e-5)


def test_abs_min_max_exact_at_ties_and_zero():
    m = build(lambda: tw.concat(tw.abs(tw.input("a", 1, (-9, 9))),
                                tw.min(tw.input("b", 1, (-9, 9)), tw.input("c", 1, (-9, 9))),
                                tw.max(tw.input("d", 1, (-9, 9)), tw.input("e", 1, (-9, 9)))))
    z = {"a": col(0, -2.5), "b": col(1, -3), "c": col(1, 4), "d": col(-2, 7), "e": col(-2, 7.5)}
    np.testing.assert_allclose(both(m, z), [[0, 1, -2], [2.5, -3, 7.5]], atol=1e-6)


def test_abs_min_max_costs():
    assert costs(build(lambda: tw.abs(tw.input("x", 3, (-1, 1))))) == (1, 6, 0)
    assert costs(build(lambda: tw.min(tw.input("a", 2, (-1, 1)), tw.input("b", 2, (-1, 1))))) \
        == (1, 6, 0)


@pytest.mark.parametrize("variant,layers", [("shallow", 1), ("deep", 2)])
def test_signed_multiply_exact_at_extremes_and_costs(variant, layers):
    m = build(lambda: tw.signed_multiply(tw.input("a", 1, (-9, 9)), tw.input("b", 1, (-4, 4)),
                                         9, 4, variant=variant))
    a = col(-9, -9, 9, 9, 0, 3)
    b = col(-4, 4, -4, 4, 4, 0)
    np.testing.assert_array_equal(both(m, {"a": a, "b": b}, atol=0), a * b)
    depth, neurons, _ = costs(m)
    assert depth == layers
    assert neurons == (4 * 13 if variant == "shallow" else 4 + 2 * 13)


def test_multiply_integers_exhaustive_small():
    m = build(lambda: tw.multiply_integers(tw.input("a", 1, (-6, 6)), tw.input("b", 1, (-6, 6)), 6))
    a, b = np.meshgrid(np.arange(-6, 7.0), np.arange(-6, 7.0))
    a, b = a.reshape(-1, 1), b.reshape(-1, 1)
    np.testing.assert_array_equal(both(m, {"a": a, "b": b}, atol=0), a * b)


def test_square_grid_exact_and_between_bounded():
    m = build(lambda: tw.square(tw.input("x", 1, (-4, 4)), 4, step=0.5))
    grid = col(*np.arange(-4, 4.01, 0.5))
    np.testing.assert_allclose(both(m, {"x": grid}), grid ** 2, atol=1e-6)
    mid = grid[:-1] + 0.25
    err = evaluate(m, {"x": mid})["y"] - mid ** 2
    np.testing.assert_allclose(err, 0.5 ** 2 / 4 * np.ones_like(err), atol=1e-6)


def test_multiply_2d_vertices_exact_and_clamped_outside():
    m = build(lambda: tw.multiply_2d(tw.input("a", 1, (-9, 9)), tw.input("b", 1, (-9, 9)),
                                     (-2, 2), (-1, 3), n_a=5, n_b=5))
    a = col(-2, -1, 0, 2, 5, -7)
    b = col(-1, 2, 3, 3, 1, 9)
    want = np.clip(a, -2, 2) * np.clip(b, -1, 3)
    np.testing.assert_allclose(both(m, {"a": a, "b": b}), want, atol=1e-5)


def test_reciprocal_ends_exact_and_relative_bound():
    m = build(lambda: tw.reciprocal(tw.input("x", 1, (1, 100)), 1, 100, rel_error=1e-2))
    ends = col(1, 100)
    np.testing.assert_allclose(both(m, {"x": ends}), 1 / ends, rtol=1e-6)
    xs = col(*np.geomspace(1, 100, 997))
    got = evaluate(m, {"x": xs})["y"]
    rel = (got - 1 / xs) * xs
    assert rel.min() >= -1e-6 and rel.max() <= 1e-2  # weights are stored as f32


@pytest.mark.parametrize("call,op", [
    (lambda x: tw.floor_int(x, 5, 1), "floor_int"),
    (lambda x: tw.floor_int(x, 0, 10, ramp=1.0), "floor_int"),
    (lambda x: tw.floor_int(x, 0, 1e6), "floor_int"),
    (lambda x: tw.ceil_int(tw.concat(x, x), 0, 3), "ceil_int"),
    (lambda x: tw.reciprocal(x, -1, 1), "reciprocal"),
    (lambda x: tw.reciprocal(x, 1, 2, rel_error=0), "reciprocal"),
    (lambda x: tw.cond_gate(tw.concat(x, x), tw.concat(x, x, x), max_abs=1), "cond_gate"),
    (lambda x: tw.cond_gate(x, x, max_abs=-1), "cond_gate"),
    (lambda x: tw.switch([x], [x, x]), "switch"),
    (lambda x: tw.switch([tw.concat(x, x)], [x]), "switch"),
    (lambda x: tw.min(x, tw.concat(x, x)), "min"),
    (lambda x: tw.square(x, 0), "square"),
    (lambda x: tw.signed_multiply(x, x, 1, 1, variant="wide"), "signed_multiply"),
    (lambda x: tw.multiply_integers(x, x, 2.5), "multiply_integers"),
    (lambda x: tw.multiply_integers(x, x, 5000), "multiply_integers"),
    (lambda x: tw.multiply_2d(x, x, (1, 0), (0, 1)), "multiply_2d"),
    (lambda x: tw.multiply_2d(x, x, (0, 1), (0, 1), n_a=1), "multiply_2d"),
    (lambda x: tw.abs(np.zeros(3)), "abs"),
])
def test_bad_arguments_name_the_op(call, op):
    with pytest.raises(LibraryError, match=rf"^tw\.{op}: "):
        with tw.Graph("main", verify=False):
            call(tw.input("x", 1, (-1, 1)))


def test_cond_gate_bound_from_ranges_covers_derived_values():
    # x2 = 3 x + 1 spans [-14, 16]: the inferred bound must cover it at the extremes.
    def body():
        x = tw.input("x", 1, (-5, 5))
        y = tw.linear(x, [[3.0]], [1.0])
        c = tw.input("c", 1, (-1, 1))
        return tw.concat(tw.cond_gate(c, y), tw.cond_gate(c, tw.abs(y)))

    m = build(body)
    x = col(-5, 5, -5, 5)
    c = col(1, 1, -1, -1)
    want = np.hstack([np.where(c > 0, 3 * x + 1, 0), np.where(c > 0, np.abs(3 * x + 1), 0)])
    np.testing.assert_allclose(both(m, {"x": x, "c": c}), want, atol=1e-5)


def test_inferred_bound_too_loose_is_an_error_naming_the_op():
    with pytest.raises(LibraryError, match=r"^tw\.switch: .*max_abs"):
        with tw.Graph("main", verify=False):
            tw.switch([tw.input("c", 1, (-1, 1))], [tw.input("x", 1, (-1e9, 1e9))])
