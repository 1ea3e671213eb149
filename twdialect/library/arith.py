"""Nonlinear arithmetic: gating, rounding, reciprocal, abs/min/max, squares and products.

Every op here is one MLP chain (one MLP sublayer) unless its docstring says otherwise. Costs
count MLP sublayers on the op's critical path, attention heads, and hidden neurons (ReLUs);
library IR ops (`tw.piecewise_linear`, `tw.select`, ...) cost what the `decompose` pass emits
for them, which the measured table in docs/ops.md reports.

Exactness: a ReLU network computes its piecewise-linear function exactly up to fp32 rounding;
where inputs and weights are integers (or halves) with magnitudes below 2**24, every hidden
value and partial sum is an exact fp32 integer, so the result is bit-exact.
"""

from __future__ import annotations

import builtins
import math

import numpy as np
from xdsl.ir import SSAValue

from twdialect import ops as tw
from twdialect.dialect import width_of
from twdialect.library._util import (
    MlpChain,
    check_bound,
    check_choice,
    check_int,
    check_pair,
    check_range,
    check_value,
    check_values,
    fail,
    inferred_max_abs,
    library_op,
)

Value = SSAValue


# --------------------------------------------------------------------------------------
# Gating
# --------------------------------------------------------------------------------------


@library_op("arith")
def cond_gate(cond: Value, x: Value, max_abs: float | None = None) -> Value:
    """x where cond > 0, else 0 (elementwise; cond is a +/-1 boolean, 1 wide or one per component).

    Contract: one `tw.mlp` computing relu(x + K c) - K relu(c) with K = 2 max_abs: exact
    (fp32 rounding of x + K c) whenever |x| <= max_abs and |c| >= 1/2, so boolean noise up to
    0.5 is tolerated; ramp zone |c| < 1/2. Without `max_abs` the bound comes from the
    value-range analysis of x (`twdialect.ranges`).
    Cost: 1 MLP sublayer; n + c neurons (n = width(x), one shared relu(c) per condition
    column c).
    """
    check_value("cond_gate", x, "x")
    n = width_of(x)
    c_w = width_of(check_value("cond_gate", cond, "cond"))
    if c_w not in (1, n):
        fail("cond_gate", f"cond must be 1 or {n} wide, got {c_w}")
    if max_abs is None:
        bound = inferred_max_abs("cond_gate", [x])
    else:
        bound = check_bound("cond_gate", max_abs, "max_abs")
    chain = MlpChain(c_w + n, n)
    shared: dict = {}
    for i in range(n):
        ci = 0 if c_w == 1 else i
        chain.gate(chain.unit_in(c_w + i), 0.0, chain.unit_in(ci), 0.0, bound,
                   chain.unit_out(i), shared)
    return chain.emit(tw.concat(cond, x))


@library_op("arith")
def switch(conds, values, max_abs: float | None = None) -> Value:
    """values[k] where conds[k] > 0; at most one condition may be true (0 when none is).

    conds: +/-1 booleans, each 1 wide; values: equally wide values.
    Contract: one `tw.mlp` summing the gates of `cond_gate`: exact whenever every
    |values[k]| <= max_abs, every |c_k| >= 1/2 and at most one is positive. Without `max_abs`
    the bound comes from the value-range analysis of the values.
    Cost: 1 MLP sublayer, K*(n + 1) neurons for K branches of width n.
    """
    conds = check_values("switch", conds, "conds")
    values = check_values("switch", values, "values")
    if len(conds) != len(values):
        fail("switch", f"conds has {len(conds)} entries but values has {len(values)}: one "
             "condition per value")
    n = width_of(values[0])
    for k, (c, v) in enumerate(zip(conds, values)):
        if width_of(c) != 1:
            fail("switch", f"conds[{k}] must be 1 wide, got {width_of(c)}")
        if width_of(v) != n:
            fail("switch", f"values[{k}] is {width_of(v)} wide, expected {n}")
    if max_abs is None:
        bound = inferred_max_abs("switch", values)
    else:
        bound = check_bound("switch", max_abs, "max_abs")
    k_n = len(conds)
    chain = MlpChain(k_n + k_n * n, n)
    shared: dict = {}
    for k in range(k_n):
        for i in range(n):
            chain.gate(chain.unit_in(k_n + k * n + i), 0.0, chain.unit_in(k), 0.0, bound,
                       chain.unit_out(i), shared)
    return chain.emit(tw.concat(list(conds) + list(values)))


# --------------------------------------------------------------------------------------
# Rounding
# --------------------------------------------------------------------------------------


def _staircase(op: str, x: Value, lo: float, hi: float, ramp: float, ceil: bool) -> Value:
    check_value(op, x, "x", 1)
    lo, hi = check_range(op, lo, hi)
    ramp = check_bound(op, ramp, "ramp")
    if ramp >= 1.0:
        fail(op, f"ramp must be below 1 (the ramps sit between integers), got {ramp}")
    if hi - lo > 4096:
        fail(op, f"range [{lo}, {hi}] spans more than 4096 integers (neuron count and fp32 "
             "partial sums grow with it); split the range")
    if not ceil:
        steps = np.arange(math.floor(lo) + 1, math.floor(hi) + 1, dtype=np.float64)
        base = math.floor(lo)
        # floor steps up just as x reaches k: the ramp sits below each integer.
        points = [(k - ramp, k) for k in steps]
    else:
        steps = np.arange(math.ceil(lo), math.ceil(hi), dtype=np.float64)
        base = math.ceil(lo)
        # ceil steps up just after x passes k: the ramp sits above each integer.
        points = [(k, k + ramp) for k in steps]
    if steps.size == 0:
        return tw.literal([float(base)])  # no integer inside the range: a constant
    bp = [builtins.min(lo, points[0][0]) - 1.0]
    vals = [float(base)]
    level = float(base)
    for a, b in points:
        bp += [a, b]
        vals += [level, level + 1.0]
        level += 1.0
    return tw.piecewise_linear(x, bp, vals)


@library_op("arith")
def floor_int(x: Value, lo: float, hi: float, ramp: float = 0.5) -> Value:
    """floor(x) for a scalar x in [lo, hi].

    Contract: a staircase `tw.piecewise_linear` that is exact outside the ramp zones
    (k - ramp, k) below each integer k in (lo, hi]; inside a zone it interpolates linearly
    between k-1 and k. Integer inputs are never in a zone (exact). x below lo or above hi gives
    floor(lo) / floor(hi). The span hi - lo is limited to 4096 integers.
    fp32: for non-integer x the decomposed staircase's hidden values x - k round, so the
    result may be off by up to about 5e-8 * N * R / ramp (N integers in range, R = max |x|;
    an empirical bound from compiled sweeps, worst seen 2.6e-8 * N * R / ramp);
    power-of-two ramps (0.5, 0.25) keep those roundings exact for moderate |x| (measured 0 on
    [0, 1000] with ramp 0.5, 1.6e-3 on [0, 100] with ramp 0.1).
    Cost: 1 MLP sublayer; about 2 neurons per integer in (lo, hi] (the decomposition of
    piecewise_linear: one per breakpoint).
    """
    return _staircase("floor_int", x, lo, hi, ramp, ceil=False)


@library_op("arith")
def ceil_int(x: Value, lo: float, hi: float, ramp: float = 0.5) -> Value:
    """ceil(x) for a scalar x in [lo, hi].

    Contract: exact outside the ramp zones (k, k + ramp) above each integer k in [lo, hi);
    integer inputs are exact. fp32 rounding and costs as `floor_int`.
    """
    return _staircase("ceil_int", x, lo, hi, ramp, ceil=True)


# --------------------------------------------------------------------------------------
# Reciprocal
# --------------------------------------------------------------------------------------


def reciprocal_grid(lo: float, hi: float, rel_error: float) -> np.ndarray:
    """Geometric breakpoints on [lo, hi] (0 < lo) whose chords of 1/x stay within rel_error.

    On [a, b] the chord of 1/x is (a + b - x) / (a b); relative to 1/x it is off by
    (a + b - x) x / (a b) - 1, largest at the midpoint: (b - a)^2 / (4 a b) = (q - 1)^2 / (4 q)
    for q = b / a. Solve (q - 1)^2 = 4 e q for the largest admissible ratio."""
    e = rel_error
    q = (1.0 + 2.0 * e) + math.sqrt((1.0 + 2.0 * e) ** 2 - 1.0)
    n = builtins.max(1, math.ceil(math.log(hi / lo) / math.log(q) - 1e-12))
    return lo * (hi / lo) ** (np.arange(n + 1) / n)


@library_op("arith")
def reciprocal(x: Value, lo: float, hi: float, rel_error: float = 1e-3) -> Value:
    """1/x for a scalar x in [lo, hi], where 0 < lo < hi or lo < hi < 0.

    Contract: a `tw.piecewise_linear` through 1/x on a geometric grid; the chord
    over-estimates |1/x| by a relative error of at most `rel_error` (exact at the
    breakpoints, the two ends included); constant 1/lo, 1/hi outside the range. In fp32 the
    decomposed staircase of slopes adds an absolute error of about 4e-7 (hi - lo) / lo^2
    (its largest terms are the slope at the end nearest 0 times the range).
    Cost: 1 MLP sublayer; about ln(hi/lo) / (2 sqrt(rel_error)) + 1 breakpoints (neurons).
    """
    check_value("reciprocal", x, "x", 1)
    lo, hi = check_range("reciprocal", lo, hi)
    rel = check_bound("reciprocal", rel_error, "rel_error")
    if rel >= 1:
        fail("reciprocal", f"rel_error must be below 1, got {rel}")
    if lo <= 0 <= hi:
        fail("reciprocal", f"range [{lo}, {hi}] contains 0 (1/x is unbounded there)")
    if lo > 0:
        bp = reciprocal_grid(lo, hi, rel)
    else:
        bp = -reciprocal_grid(-hi, -lo, rel)[::-1]
    if bp.size > 4096:
        fail("reciprocal", f"{bp.size} breakpoints needed; loosen rel_error or the range")
    return tw.piecewise_linear(x, bp, 1.0 / bp)


# --------------------------------------------------------------------------------------
# abs, min, max
# --------------------------------------------------------------------------------------


@library_op("arith")
def abs(x: Value) -> Value:  # noqa: A001 - torchwright's name
    """|x| elementwise.

    Contract: relu(x) + relu(-x) in one `tw.mlp`: exact for every input.
    Cost: 1 MLP sublayer; 2n neurons.
    """
    check_value("abs", x, "x")
    n = width_of(x)
    chain = MlpChain(n, n)
    for i in range(n):
        chain.neuron(chain.unit_in(i), 0.0, chain.unit_out(i))
        chain.neuron(-chain.unit_in(i), 0.0, chain.unit_out(i))
    return chain.emit(x)


def _min_max(op: str, a: Value, b: Value, sign: float) -> Value:
    check_value(op, a, "a")
    check_value(op, b, "b", width_of(a))
    n = width_of(a)
    chain = MlpChain(2 * n, n)
    for i in range(n):
        ea, eb = chain.unit_in(i), chain.unit_in(n + i)
        chain.passthrough(ea, chain.unit_out(i))
        # min: a - relu(a - b); max: a + relu(b - a).
        chain.neuron(sign * (ea - eb), 0.0, chain.unit_out(i, -sign))
    return chain.emit(tw.concat(a, b))


@library_op("arith")
def min(a: Value, b: Value) -> Value:  # noqa: A001
    """Elementwise min(a, b) = a - relu(a - b).

    Contract: exact for every input (fp32 rounding of a - b).
    Cost: 1 MLP sublayer; 3n neurons (a passes through as a relu pair).
    """
    return _min_max("min", a, b, 1.0)


@library_op("arith")
def max(a: Value, b: Value) -> Value:  # noqa: A001
    """Elementwise max(a, b) = a + relu(b - a).

    Contract: exact for every input. Cost: 1 MLP sublayer; 3n neurons.
    """
    return _min_max("max", a, b, -1.0)


# --------------------------------------------------------------------------------------
# Squares and products
# --------------------------------------------------------------------------------------


def _square_knots(chain: MlpChain, form: np.ndarray, limit: float, step: float, w_out,
                  two_sided: bool) -> None:
    """Neurons whose weighted sum is the chord interpolant of f^2 at multiples of `step`,
    f = form . x, for |f| <= limit (f >= 0 when not two_sided).

    All terms are non-negative with positive weights, so nothing cancels in fp32:
    f^2 ~= sum_k c_k (relu(f - k h) + relu(-f - k h)), c_0 = h, c_k = 2h."""
    n_knots = builtins.max(1, math.ceil(limit / step - 1e-9))
    w_out = np.asarray(w_out, dtype=np.float64)
    for k in range(n_knots):
        c = step if k == 0 else 2.0 * step
        chain.neuron(form, -k * step, c * w_out)
        if two_sided:
            chain.neuron(-form, -k * step, c * w_out)


@library_op("arith")
def square(x: Value, max_abs: float, step: float = 1.0) -> Value:
    """x*x elementwise for |x| <= max_abs.

    Contract: the chord interpolant through the multiples of `step`: exact where x is a
    multiple of `step` (so exact on integers with step 1), otherwise an over-estimate by at
    most step^2/4. Beyond max_abs it continues linearly (an under-estimate).
    Cost: 1 MLP sublayer; 2*ceil(max_abs/step) neurons per component.
    """
    check_value("square", x, "x")
    bound = check_bound("square", max_abs, "max_abs")
    h = check_bound("square", step, "step")
    n = width_of(x)
    chain = MlpChain(n, n)
    for i in range(n):
        _square_knots(chain, chain.unit_in(i), bound, h, chain.unit_out(i), two_sided=True)
    if chain.hidden > 8192:
        fail("square", f"{chain.hidden} neurons needed; raise step or tighten max_abs")
    return chain.emit(x)


def _check_product_args(op: str, a, b, max_abs_a, max_abs_b, step, variant):
    check_value(op, a, "a")
    check_value(op, b, "b", width_of(a))
    A = check_bound(op, max_abs_a, "max_abs_a")
    B = check_bound(op, max_abs_b, "max_abs_b")
    h = check_bound(op, step, "step")
    check_choice(op, variant, "variant", ("shallow", "deep"))
    return A, B, h


@library_op("arith")
def signed_multiply(a: Value, b: Value, max_abs_a: float, max_abs_b: float, step: float = 1.0,
                    variant: str = "shallow") -> Value:
    """a*b elementwise for |a| <= max_abs_a, |b| <= max_abs_b (quarter squares).

    a*b = ((a+b)^2 - (a-b)^2) / 4 with both squares chord-interpolated at multiples of `step`.
    Contract: exact when a+b and a-b are multiples of `step` (every pair of integers with
    step 1); otherwise |error| <= step^2/16. fp32: the two squares are sums of non-negative
    terms, the final subtraction loses about ulp((max_abs_a + max_abs_b)^2).
    Cost, by variant (M = max_abs_a + max_abs_b, per component):
      shallow: 1 MLP sublayer, 4*ceil(M/step) neurons (squares of the signed sums directly);
      deep:    2 MLP sublayers, 4 + 2*ceil(M/step) neurons (|a+b|, |a-b| first, then squares
               of non-negative inputs: half the neurons for one more layer).
    """
    A, B, h = _check_product_args("signed_multiply", a, b, max_abs_a, max_abs_b, step, variant)
    n = width_of(a)
    M = A + B
    x = tw.concat(a, b)
    if variant == "shallow":
        chain = MlpChain(2 * n, n)
        for i in range(n):
            ea, eb = chain.unit_in(i), chain.unit_in(n + i)
            _square_knots(chain, ea + eb, M, h, chain.unit_out(i, 0.25), two_sided=True)
            _square_knots(chain, ea - eb, M, h, chain.unit_out(i, -0.25), two_sided=True)
        if chain.hidden > 16384:
            fail("signed_multiply", f"{chain.hidden} neurons needed; raise step or tighten bounds")
        return chain.emit(x)
    # deep: chain 1 -> [|a+b|, |a-b|] per component, chain 2 squares non-negative inputs.
    first = MlpChain(2 * n, 2 * n)
    for i in range(n):
        ea, eb = first.unit_in(i), first.unit_in(n + i)
        for j, form in enumerate((ea + eb, ea - eb)):
            first.neuron(form, 0.0, first.unit_out(2 * i + j))
            first.neuron(-form, 0.0, first.unit_out(2 * i + j))
    mags = first.emit(x)
    second = MlpChain(2 * n, n)
    for i in range(n):
        _square_knots(second, second.unit_in(2 * i), M, h, second.unit_out(i, 0.25), False)
        _square_knots(second, second.unit_in(2 * i + 1), M, h, second.unit_out(i, -0.25), False)
    if second.hidden > 16384:
        fail("signed_multiply", f"{second.hidden} neurons needed; raise step or tighten bounds")
    return second.emit(mags)


@library_op("arith")
def multiply_integers(a: Value, b: Value, max_value: int, variant: str = "shallow") -> Value:
    """a*b for integer-valued a, b with |a|, |b| <= max_value.

    Contract: exact for integers (bit-exact in fp32: max_value is limited so that
    (2*max_value)^2 < 2**24).

    `signed_multiply` with step 1. Cost: shallow 1 MLP sublayer, 8*max_value neurons per
    component; deep 2 MLP sublayers, 4 + 4*max_value neurons.
    """
    check_value("multiply_integers", a, "a")
    check_value("multiply_integers", b, "b", width_of(a))
    max_value = check_int("multiply_integers", max_value, "max_value", 1)
    if (2 * max_value) ** 2 >= 2 ** 24:
        fail("multiply_integers", f"max_value {max_value} is too large for exact fp32 products")
    check_choice("multiply_integers", variant, "variant", ("shallow", "deep"))
    return signed_multiply(a, b, max_value, max_value, 1.0, variant)


# multiply_2d's grid per axis: decompose builds about (n_a + n_b) x n_a n_b weights, which
# stays below the dialect's MAX_DENSE_ELEMENTS at 256 x 256.
MAX_GRID = 256


@library_op("arith")
def multiply_2d(a: Value, b: Value, a_range: tuple[float, float], b_range: tuple[float, float],
                n_a: int = 17, n_b: int = 17) -> Value:
    """a*b for scalars a in a_range, b in b_range, as a `tw.piecewise_linear_2d` on a uniform
    n_a x n_b grid.

    Contract: exact at grid vertices; on a cell of size ha x hb the triangulated interpolant
    of a*b over-estimates it by at most ha*hb/4; inputs outside the ranges are clamped.
    Cost: 2 MLP sublayers (the decomposition of piecewise_linear_2d), neurons growing with
    n_a + n_b + n_a*n_b; 1 MLP sublayer when a and b are known integers (the lattice form,
    twdialect/contracts.py), e.g. digits: exact products with a grid at every integer.
    """
    check_value("multiply_2d", a, "a", 1)
    check_value("multiply_2d", b, "b", 1)
    alo, ahi = check_pair("multiply_2d", a_range, "a_range", strict=True)
    blo, bhi = check_pair("multiply_2d", b_range, "b_range", strict=True)
    # The grid is a table of n_a * n_b entries: bounded like any weight.
    n_a = check_int("multiply_2d", n_a, "n_a", 2, MAX_GRID)
    n_b = check_int("multiply_2d", n_b, "n_b", 2, MAX_GRID)
    xs = np.linspace(alo, ahi, n_a)
    ys = np.linspace(blo, bhi, n_b)
    return tw.piecewise_linear_2d(a, b, xs, ys, np.outer(xs, ys))
