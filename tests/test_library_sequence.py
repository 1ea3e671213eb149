"""Digits, numbers and emitted sequences: exhaustive checks, costs, argument errors."""

import numpy as np
import pytest

from test_library_helpers import both, build, costs
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.library import LibraryError


def digits_of(x, n, base=10):
    x = np.asarray(x, dtype=np.int64)
    return np.stack([(x // base ** (n - 1 - k)) % base for k in range(n)], axis=1).astype(float)


def test_number_to_digits_all_three_digit_numbers():
    m = build(lambda: tw.number_to_digits(tw.input("x", 1, (0, 999)), 3))
    xs = np.arange(1000.0).reshape(-1, 1)
    np.testing.assert_array_equal(both(m, {"x": xs}, atol=0), digits_of(xs[:, 0], 3))
    assert costs(m) == (1, 2 * 99 + 1, 0)


def test_number_to_digits_base_2_and_roundtrip():
    m = build(lambda: tw.digits_to_number(tw.number_to_digits(tw.input("x", 1, (0, 63)), 6, base=2),
                                          base=2))
    xs = np.arange(64.0).reshape(-1, 1)
    np.testing.assert_array_equal(both(m, {"x": xs}, atol=0), xs)


def test_digit_onehot_roundtrip():
    m = build(lambda: tw.concat(tw.digit_to_onehot(tw.input("d", 1, (0, 9))),
                                tw.onehot_to_digit(tw.digit_to_onehot(tw.input("e", 1, (0, 9))))))
    d = np.arange(10.0).reshape(-1, 1)
    out = both(m, {"d": d, "e": d}, atol=1e-6)
    np.testing.assert_array_equal(out[:, :10], np.eye(10))
    np.testing.assert_array_equal(out[:, 10:], d)


def test_sum_digits_carry_chains_and_cost():
    a = np.array([999, 999, 0, 500, 1, 123, 901])
    b = np.array([999, 1, 0, 500, 999, 877, 99])
    m = build(lambda: tw.sum_digits(tw.input("a", 3, (0, 9)), tw.input("b", 3, (0, 9))))
    out = both(m, {"a": digits_of(a, 3), "b": digits_of(b, 3)}, atol=0)
    np.testing.assert_array_equal(out, digits_of(a + b, 4))
    assert costs(m) == (1, 9, 0)


def test_sum_digits_list_of_scalars_base_2():
    m = build(lambda: tw.sum_digits([tw.input(f"a{k}", 1, (0, 1)) for k in range(4)],
                                    [tw.input(f"b{k}", 1, (0, 1)) for k in range(4)], base=2))
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 16, 50), rng.integers(0, 16, 50)
    da, db = digits_of(a, 4, 2), digits_of(b, 4, 2)
    feeds = {f"a{k}": da[:, k:k + 1] for k in range(4)} | {f"b{k}": db[:, k:k + 1] for k in range(4)}
    np.testing.assert_array_equal(both(m, feeds, atol=0), digits_of(a + b, 5, 2))


@pytest.mark.slow
def test_sum_digits_six_digits_random():
    m = build(lambda: tw.sum_digits(tw.input("a", 6, (0, 9)), tw.input("b", 6, (0, 9))))
    rng = np.random.default_rng(1)
    a = rng.integers(0, 10 ** 6, 4000)
    b = np.where(rng.random(4000) < 0.5, 10 ** 6 - 1 - a, rng.integers(0, 10 ** 6, 4000))
    out = both(m, {"a": digits_of(a, 6), "b": digits_of(b, 6)}, atol=0)
    np.testing.assert_array_equal(out, digits_of(a + b, 7))


def test_remove_leading_zeros_all_four_digit_numbers():
    m = build(lambda: tw.remove_leading_zeros(tw.input("d", 4, (0, 9)), blank=10))
    x = np.arange(10000)
    d = digits_of(x, 4)
    want = d.copy()
    lead = np.cumsum(d, axis=1) == 0
    lead[:, -1] = False
    want[lead] = 10.0
    np.testing.assert_array_equal(evaluate(m, {"d": d})["y"], want)
    sample = np.random.default_rng(0).choice(10000, 300)
    np.testing.assert_array_equal(both(m, {"d": d[sample]}, atol=0), want[sample])
    assert costs(m) == (1, 7, 0)


def test_output_sequence_no_trigger_back_to_back_and_wide_items():
    m = build(lambda: tw.output_sequence(tw.pos_encoding(2, 32), tw.input("t", 1, (-1, 1)),
                                         tw.input("items", 6, (-2, 2)), 3, max_abs=2))
    n = 12
    trig = -np.ones((n, 1))
    trig[[3, 4, 9]] = 1.0
    items = np.random.default_rng(0).integers(-2, 3, (n, 6)).astype(float)
    want = np.zeros((n, 2))
    for i in range(n):
        last = max([t for t in (3, 4, 9) if t <= i], default=None)
        if last is not None and i - last < 3:
            want[i] = items[last, 2 * (i - last): 2 * (i - last) + 2]
    np.testing.assert_allclose(both(m, {"t": trig, "items": items}, atol=1e-5), want, atol=1e-5)
    layers, neurons, heads = costs(m)
    assert (layers, neurons, heads) == (1, 4 * 3, 1)


@pytest.mark.parametrize("call,op", [
    (lambda x: tw.digits_to_number([x] * 9), "digits_to_number"),
    (lambda x: tw.digits_to_number(x, base=1), "digits_to_number"),
    (lambda x: tw.number_to_digits(x, 0), "number_to_digits"),
    (lambda x: tw.number_to_digits(x, 7), "number_to_digits"),
    (lambda x: tw.sum_digits([x, x], [x]), "sum_digits"),
    (lambda x: tw.sum_digits([x] * 8, [x] * 8), "sum_digits"),
    (lambda x: tw.remove_leading_zeros([]), "remove_leading_zeros"),
    (lambda x: tw.output_sequence(x, x, x, 1, 1.0), "output_sequence"),
    (lambda x: tw.output_sequence(tw.pos_encoding(2, 8), x, tw.concat(x, x, x), 2, 1.0),
     "output_sequence"),
])
def test_bad_arguments_name_the_op(call, op):
    with pytest.raises(LibraryError, match=rf"^tw\.{op}: "):
        with tw.Graph("main", verify=False):
            call(tw.input("x", 1, (-1, 1)))
