"""Property tests over the ops' parameter spaces (bounds, ranges, widths, bases), oracle by
default; the compiled-model variants run with --runslow."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_library_helpers import build
from twdialect import evaluate
from twdialect import ops as tw

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(module, inputs, compiled):
    if not compiled:
        return evaluate(module, inputs)["y"]
    from tw_lowering import compile

    return compile(module, d=256, d_head=16, d_hidden=8192).run(inputs)["y"]


def digits_of(x, n, base):
    x = np.asarray(x, dtype=np.int64)
    return np.stack([(x // base ** (n - 1 - k)) % base for k in range(n)], axis=1).astype(float)


def floor_case(data, compiled):
    lo = data.draw(st.floats(-300, 300).map(lambda v: round(v, 2)))
    span = data.draw(st.floats(0.5, 120).map(lambda v: round(v, 2)))
    hi = lo + span
    ramp = data.draw(st.sampled_from([0.1, 0.25, 0.5, 0.9]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    x = rng.uniform(lo, hi, 200)
    # move points out of the ramp zones (k - ramp, k), staying inside [lo, hi]
    frac = x - np.floor(x)
    x = np.where(frac > 1 - ramp, np.floor(x) + 1, x)
    x = np.clip(x, lo, hi)
    frac = x - np.floor(x)
    x = x[(frac <= 1 - ramp) | (frac == 0)].reshape(-1, 1)
    if not x.size:  # the whole range lies in one ramp zone: nothing exact to check
        return
    m = build(lambda: tw.floor_int(tw.input("x", 1, (lo, hi)), lo, hi, ramp))
    # the documented fp32 bound for non-integer x: 5e-8 * N * R / ramp
    bound = 5e-8 * (hi - lo + 1) * max(abs(lo), abs(hi)) / ramp + 1e-5
    np.testing.assert_allclose(run(m, {"x": x}, compiled), np.floor(x), atol=bound)


@FAST
@given(st.data())
def test_floor_int_any_range(data):
    floor_case(data, compiled=False)


@pytest.mark.slow
@SLOW
@given(st.data())
def test_floor_int_any_range_compiled(data):
    floor_case(data, compiled=True)


def multiply_case(data, compiled):
    A = data.draw(st.integers(1, 25))
    B = data.draw(st.integers(1, 25))
    variant = data.draw(st.sampled_from(["shallow", "deep"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    a = rng.integers(-A, A + 1, (100, 1)).astype(float)
    b = rng.integers(-B, B + 1, (100, 1)).astype(float)
    m = build(lambda: tw.signed_multiply(tw.input("a", 1, (-A, A)), tw.input("b", 1, (-B, B)), A, B,
                                         variant=variant))
    np.testing.assert_allclose(run(m, {"a": a, "b": b}, compiled), a * b, atol=1e-4)


@FAST
@given(st.data())
def test_signed_multiply_integers_any_bounds(data):
    multiply_case(data, compiled=False)


@pytest.mark.slow
@SLOW
@given(st.data())
def test_signed_multiply_integers_any_bounds_compiled(data):
    multiply_case(data, compiled=True)


def digits_case(data, compiled):
    base = data.draw(st.integers(2, 16))
    n = data.draw(st.integers(1, 4))
    if base ** (n - 1) > 2000:
        n = 2
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    a = rng.integers(0, base ** n, 150)
    b = np.where(rng.random(150) < 0.3, base ** n - 1 - a, rng.integers(0, base ** n, 150))
    m = build(lambda: tw.concat(
        tw.sum_digits(tw.input("a", n, (0, base - 1)), tw.input("b", n, (0, base - 1)), base=base),
        tw.number_to_digits(tw.input("x", 1, (0, base ** n - 1)), n, base=base)))
    out = run(m, {"a": digits_of(a, n, base), "b": digits_of(b, n, base),
                  "x": a.reshape(-1, 1).astype(float)}, compiled)
    np.testing.assert_allclose(out[:, : n + 1], digits_of(a + b, n + 1, base), atol=1e-4)
    np.testing.assert_allclose(out[:, n + 1:], digits_of(a, n, base), atol=1e-4)


@FAST
@given(st.data())
def test_digit_ops_any_base(data):
    digits_case(data, compiled=False)


@pytest.mark.slow
@SLOW
@given(st.data())
def test_digit_ops_any_base_compiled(data):
    digits_case(data, compiled=True)


def extract_case(data, compiled):
    n = data.draw(st.integers(1, 12))
    w = data.draw(st.integers(1, 4))
    bound = data.draw(st.floats(0.1, 100))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    t = rng.uniform(-bound, bound, (120, n * w))
    idx = rng.integers(-2, n + 2, 120)
    jitter = rng.uniform(-0.24, 0.24, 120)
    m = build(lambda: tw.dynamic_extract(tw.input("t", n * w, (-bound, bound)),
                                         tw.input("i", 1, (-3, n + 3)), n, max_abs=bound))
    out = run(m, {"t": t, "i": (idx + jitter).reshape(-1, 1)}, compiled)
    want = np.zeros((120, w))
    ok = (idx >= 0) & (idx < n)
    want[ok] = t.reshape(120, n, w)[np.arange(120)[ok], idx[ok]]
    # fp32 rounding of gate terms of size ~ 4 bound (2n + 3)
    np.testing.assert_allclose(out, want, atol=1e-6 * bound * (2 * n + 3) * 4 + 1e-6)


@FAST
@given(st.data())
def test_dynamic_extract_any_shape(data):
    extract_case(data, compiled=False)


@pytest.mark.slow
@SLOW
@given(st.data())
def test_dynamic_extract_any_shape_compiled(data):
    extract_case(data, compiled=True)


def bools_case(data, compiled):
    widths = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    n = sum(widths)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    p = data.draw(st.floats(0.05, 0.95))
    x = np.where(rng.random((100, n)) < p, 1.0, -1.0)
    x = x - np.sign(x) * rng.uniform(0, 0.5 / n, x.shape)  # summed noise <= 1/2
    starts = np.cumsum([0] + widths)

    def body():
        vals = [tw.input(f"v{k}", w, (-1, 1)) for k, w in enumerate(widths)]
        return tw.concat(tw.bool_all_true(vals), tw.bool_any_true(vals))

    feeds = {f"v{k}": x[:, starts[k]:starts[k + 1]] for k in range(len(widths))}
    out = run(build(body), feeds, compiled)
    np.testing.assert_allclose(out[:, 0], np.where((x > 0).all(1), 1.0, -1.0), atol=1e-5)
    np.testing.assert_allclose(out[:, 1], np.where((x > 0).any(1), 1.0, -1.0), atol=1e-5)


@FAST
@given(st.data())
def test_bool_reductions_any_widths(data):
    bools_case(data, compiled=False)


@pytest.mark.slow
@SLOW
@given(st.data())
def test_bool_reductions_any_widths_compiled(data):
    bools_case(data, compiled=True)
