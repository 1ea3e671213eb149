"""Edge cases, costs and argument errors of the logic and table ops."""

import itertools

import numpy as np
import pytest

from test_library_helpers import both, build, costs
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.library import LibraryError


def test_bool_all_and_any_exhaustive_with_noise():
    bits = np.array(list(itertools.product([-1.0, 1.0], repeat=4)))
    noise = np.random.default_rng(0).uniform(0.0, 0.12, bits.shape) * -np.sign(bits)  # inward
    x = bits + noise  # each within 0.12 of +/-1: summed deviation <= 0.48
    m_all = build(lambda: tw.bool_all_true([tw.input("x", 4, (-1, 1))]))
    m_any = build(lambda: tw.bool_any_true(tw.input("x", 4, (-1, 1))))
    np.testing.assert_array_equal(both(m_all, {"x": x}, atol=1e-6),
                                  np.where(bits.min(1, keepdims=True) > 0, 1.0, -1.0))
    np.testing.assert_array_equal(both(m_any, {"x": x}, atol=1e-6),
                                  np.where(bits.max(1, keepdims=True) > 0, 1.0, -1.0))
    assert costs(m_all) == (1, 2, 0) and costs(m_any) == (1, 2, 0)


def test_equals_vector_pm1_codes_and_integer_mode():
    codes = np.array(list(itertools.product([-1.0, 1.0], repeat=3)))
    key = codes[5]
    m = build(lambda: tw.equals_vector(tw.input("x", 3, (-1, 1)), key, gap=2.0))
    want = np.where((codes == key).all(1, keepdims=True), 1.0, -1.0)
    np.testing.assert_array_equal(both(m, {"x": codes}, atol=1e-6), want)
    grid = np.array(list(itertools.product(range(-2, 3), repeat=2)), dtype=float)
    m2 = build(lambda: tw.equals_vector(tw.input("x", 2, (-2, 2)), [0, -2], mode="integer"))
    want2 = np.where((grid == [0, -2]).all(1, keepdims=True), 1.0, -1.0)
    np.testing.assert_array_equal(both(m2, {"x": grid}, atol=1e-6), want2)
    assert costs(m2) == (2, 6, 0)


def test_map_to_table_scalar_negative_keys_and_default_vector():
    m = build(lambda: tw.map_to_table(tw.input("x", 1, (-6, 6)), [-4, 0, 3], [[1, 2], [3, 4], [5, 6]],
                                      default=[0, -1]))
    xs = np.arange(-6, 7, dtype=float).reshape(-1, 1)
    want = np.tile([0.0, -1.0], (13, 1))
    for k, row in zip([-4, 0, 3], [[1, 2], [3, 4], [5, 6]]):
        want[k + 6] = row
    np.testing.assert_allclose(both(m, {"x": xs}), want, atol=1e-5)


def test_map_to_table_vector_cost_is_one_neuron_per_key():
    m = build(lambda: tw.map_to_table(tw.input("x", 8, (0, 1)), np.eye(8)[:5], np.arange(5.0)))
    assert costs(m) == (1, 5, 0)


def test_in_range_exhaustive():
    lo, hi = np.meshgrid(np.arange(0, 7.0), np.arange(0, 7.0))
    ok = lo <= hi
    lo, hi = lo[ok].reshape(-1, 1), hi[ok].reshape(-1, 1)
    m = build(lambda: tw.in_range(tw.input("lo", 1, (0, 6)), tw.input("hi", 1, (0, 6)), 6))
    want = np.where((np.arange(6) >= lo) & (np.arange(6) < hi), 1.0, -1.0)
    np.testing.assert_array_equal(both(m, {"lo": lo, "hi": hi}, atol=1e-6), want)
    assert costs(m) == (1, 24, 0)


def test_dynamic_extract_near_integer_index_and_outside():
    m = build(lambda: tw.dynamic_extract(tw.input("t", 3, (-5, 5)), tw.input("i", 1, (-3, 5)), 3,
                                         max_abs=5))
    t = np.tile([[5.0, -5.0, 2.5]], (8, 1))
    idx = np.array([[-1], [0.2], [0.8], [1.24], [2], [2.76], [3], [-0.2]])
    want = np.array([[0], [5], [-5], [-5], [2.5], [0], [0], [5]])
    np.testing.assert_allclose(both(m, {"t": t, "i": idx}), want, atol=1e-5)
    assert costs(m) == (1, 4 * 2, 0)


@pytest.mark.parametrize("call,op", [
    (lambda x: tw.equals_vector(x, [1, 2]), "equals_vector"),
    (lambda x: tw.equals_vector(x, [0.0]), "equals_vector"),
    (lambda x: tw.equals_vector(x, [1.0], mode="fuzzy"), "equals_vector"),
    (lambda x: tw.bool_all_true([]), "bool_all_true"),
    (lambda x: tw.map_to_table(x, [1.5], [1.0]), "map_to_table"),
    (lambda x: tw.map_to_table(x, [1, 1], [1.0, 2.0]), "map_to_table"),
    (lambda x: tw.map_to_table(x, [1, 2], [1.0]), "map_to_table"),
    (lambda x: tw.map_to_table(tw.concat(x, x), [[1, 0], [1, 1]], [1.0, 2.0]), "map_to_table"),
    (lambda x: tw.onehot_lookup(x, [[1.0], [2.0]]), "onehot_lookup"),
    (lambda x: tw.onehot_lookup(x, [[1.0]], encoding="bits"), "onehot_lookup"),
    (lambda x: tw.in_range(x, x, 0), "in_range"),
    (lambda x: tw.dynamic_extract(tw.concat(x, x, x), x, 2, 1.0), "dynamic_extract"),
    (lambda x: tw.dynamic_extract(x, x, 1, 0), "dynamic_extract"),
])
def test_bad_arguments_name_the_op(call, op):
    with pytest.raises(LibraryError, match=rf"^tw\.{op}: "):
        with tw.Graph("main", verify=False):
            call(tw.input("x", 1, (-1, 1)))


def test_onehot_lookup_mix_is_the_same_mix_of_rows():
    m = build(lambda: tw.onehot_lookup(tw.input("x", 2, (0, 1)), [[2.0], [4.0]]))
    np.testing.assert_allclose(evaluate(m, {"x": [[0.5, 0.5]]})["y"], [[3.0]])
