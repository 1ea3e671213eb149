"""Digits, numbers and emitted sequences.

Digit vectors list the most significant digit first. All digit arithmetic works on
integer-valued inputs, where each construction is bit-exact in fp32 (every hidden value and
partial sum is an integer below 2**24).
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from twdialect import ops as tw
from twdialect.dialect import width_of
from twdialect.library._util import (
    MlpChain,
    check_bound,
    check_int,
    check_value,
    check_values,
    fail,
    inferred_max_abs,
    library_op,
    pos_max_len,
)
from twdialect.library.attention import attend_most_recent_matching
from twdialect.library.tables import add_index_gates

Value = SSAValue


def _digits(op: str, digits, name: str = "digits") -> Value:
    return tw.concat(check_values(op, digits, name))


# Bases above 2^12 leave no room for a second digit below fp32's exact integers (2^24).
MAX_BASE = 1 << 12


def _check_base(op: str, base) -> int:
    return check_int(op, base, "base", 2, MAX_BASE)


def _exact_digits(base: int, n: int, factor: float = 1.0) -> bool:
    """factor * base^n stays within fp32's exact integers (compared in logs: no overflow)."""
    return math.log2(factor) + n * math.log2(base) <= 24


@library_op("sequence")
def digits_to_number(digits, base: int = 10) -> Value:
    """sum_k d_k base^(n-1-k) of the digits (one value of n components or a list of scalars,
    most significant first). Output 1 wide.

    Contract: exact for integer digits while the number stays below 2**24.
    Cost: one `tw.linear` (folds into a following chain's first matrix).
    """
    x = _digits("digits_to_number", digits)
    b = _check_base("digits_to_number", base)
    n = width_of(x)
    if not _exact_digits(b, n):
        fail("digits_to_number", f"{n} base-{b} digits exceed fp32's exact integers")
    return tw.linear(x, (float(b) ** np.arange(n - 1, -1, -1)).reshape(n, 1))


@library_op("sequence")
def number_to_digits(x: Value, n_digits: int, base: int = 10) -> Value:
    """The n_digits base-`base` digits of an integer x in [0, base^n_digits), most significant
    first (width n_digits).

    One chain of unit steps [x >= m base] for every multiple m base below base^n; digit k is
    floor(x / base^k) - base floor(x / base^(k+1)), a fixed sum of those steps.
    Contract: exact for integer x in range (steps ramp in (t - 1, t)).
    Cost: 1 MLP sublayer, 2 (base^(n-1) - 1) neurons (n_digits <= 5 for base 10).
    """
    check_value("number_to_digits", x, "x", 1)
    n = check_int("number_to_digits", n_digits, "n_digits", 1, 24)
    b = _check_base("number_to_digits", base)
    if (n - 1) * math.log2(b) > math.log2(20000):
        fail("number_to_digits", f"{n} base-{b} digits need {2 * b ** (n - 1)} neurons; too many")
    chain = MlpChain(1, n)
    # floor(x / b^k) = sum over multiples t of b^k of [x >= t]; digit (LSD index k) gets
    # +1 from steps at multiples of b^k and -b from steps at multiples of b^(k+1).
    for m in range(1, b ** (n - 1)):
        t = float(m * b)
        w_out = np.zeros(n)
        for k in range(n):  # LSD index k -> output column n - 1 - k
            if k == 0:
                w_out[n - 1] += -b  # digit 0 = x - b floor(x / b)
            else:
                if m % (b ** (k - 1)) == 0:
                    w_out[n - 1 - k] += 1.0
                if k + 1 < n and m % (b ** k) == 0:
                    w_out[n - 1 - k] -= b
        chain.neuron([1.0], -t + 1.0, w_out)
        chain.neuron([1.0], -t, -w_out)
    # digit 0 also needs x itself (x >= 0: one neuron).
    chain.neuron([1.0], 0.0, chain.unit_out(n - 1))
    return chain.emit(x)


@library_op("sequence")
def digit_to_onehot(digit: Value, base: int = 10) -> Value:
    """The 0/1 one-hot (width base) of an integer digit in [0, base).

    onehot_k = [d >= k] - [d >= k + 1] from unit steps. Contract: exact for integer digits.
    Cost: 1 MLP sublayer, 2 (base - 1) neurons.
    """
    check_value("digit_to_onehot", digit, "digit", 1)
    b = _check_base("digit_to_onehot", base)
    chain = MlpChain(1, b)
    for k in range(1, b):
        w = np.zeros(b)
        w[k] += 1.0
        w[k - 1] -= 1.0
        chain.neuron([1.0], -k + 1.0, w)
        chain.neuron([1.0], -float(k), -w)
    chain.out_bias = chain.unit_out(0)
    return chain.emit(digit)


@library_op("sequence")
def onehot_to_digit(onehot: Value) -> Value:
    """The digit k of a 0/1 one-hot of width base.

    Contract: exact for one-hot inputs (a mix gives the same mix of digits).
    Cost: one `tw.linear` (an attention head, or folded into a following chain).
    """
    check_value("onehot_to_digit", onehot, "onehot")
    n = width_of(onehot)
    return tw.linear(onehot, np.arange(n, dtype=np.float64).reshape(n, 1))


@library_op("sequence")
def sum_digits(a, b, base: int = 10) -> Value:
    """Digits of A + B for two n-digit numbers given as digits (most significant first);
    returns n + 1 digits (most significant first).

    The carry into column k is [sum_{j<k} (a_j + b_j) base^j >= base^k] (a threshold of a
    linear form of the inputs), so every carry is known in the same chain:
    out_k = a_k + b_k + c_k - base c_(k+1). Contract: exact for integer digits in [0, base)
    (n <= 6 for base 10: the forms stay below 2**24).
    Cost: 1 MLP sublayer, 3n neurons.
    """
    xa = _digits("sum_digits", a, "a")
    xb = _digits("sum_digits", b, "b")
    n = width_of(xa)
    if width_of(xb) != n:
        fail("sum_digits", f"a has {n} digits but b has {width_of(xb)}")
    bb = _check_base("sum_digits", base)
    if not _exact_digits(bb, n, 2.0):
        fail("sum_digits", f"{n} base-{bb} digits exceed fp32's exact integers")
    chain = MlpChain(2 * n, n + 1)

    def col_in(k):  # LSD column k of a + b as an input form
        return chain.unit_in(n - 1 - k) + chain.unit_in(2 * n - 1 - k)

    def col_out(k, s=1.0):  # LSD column k of the output (n + 1 wide)
        return chain.unit_out(n - k, s)

    for k in range(n):
        chain.neuron(col_in(k), 0.0, col_out(k))  # a_k + b_k >= 0
    for k in range(1, n + 1):
        low = sum(col_in(j) * float(bb) ** j for j in range(k))
        w = col_out(k) if k < n else np.zeros(n + 1)
        w = w + col_out(k - 1, -float(bb))
        if k == n:
            w = w + col_out(n)
        # c_k = relu(low - base^k + 1) - relu(low - base^k), exact for integer forms.
        t = float(bb) ** k
        chain.neuron(low, -t + 1.0, w)
        chain.neuron(low, -t, -w)
    return chain.emit(tw.concat(xa, xb))


@library_op("sequence")
def remove_leading_zeros(digits, blank: float = -1.0) -> Value:
    """The digits (most significant first) with leading zeros replaced by `blank`; the last
    digit is always kept, so 0 reads as a single 0.

    Digit k is a leading zero iff d_0 + ... + d_k = 0 (digits are >= 0): out_k = d_k +
    blank relu(1 - S_k). Contract: exact for integer digits in [0, base).
    Cost: 1 MLP sublayer, 2n - 1 neurons.
    """
    x = _digits("remove_leading_zeros", digits)
    blank = check_bound("remove_leading_zeros", blank, "blank", positive=False)
    n = width_of(x)
    chain = MlpChain(n, n)
    for k in range(n):
        chain.neuron(chain.unit_in(k), 0.0, chain.unit_out(k))
        if k < n - 1:
            prefix = sum(chain.unit_in(j) for j in range(k + 1))
            chain.neuron(-prefix, 1.0, chain.unit_out(k, blank))
    return chain.emit(x)


@library_op("sequence")
def output_sequence(pos: Value, trigger: Value, items: Value, n_items: int,
                    max_abs: float | None = None) -> Value:
    """Emit items one per position after a trigger: at position t + k (t the most recent
    position j <= i with trigger_j = +1) the output is item k of `items` as it was at t, for
    0 <= k < n_items; 0 before any trigger and after the last item.

    items: n_items entries of width w side by side (n_items * w wide), |entries| <= max_abs;
    trigger: a +/-1 boolean; pos: `tw.pos_encoding` (max_len <= 1024). Without `max_abs`
    the bound comes from the value-range analysis of items.
    One `attend_most_recent_matching` head reads [t, trigger_t, items_t]; one `tw.mlp` gates
    item (i - t) with telescoping index gates (`dynamic_extract`), its index pushed negative
    when no trigger was found.
    Contract: for exact booleans, exact up to the attention leakage (< 1e-12 relative) and
    fp32 rounding of gate terms of size ~8 max_abs (max_len + n_items): bit-exact for
    integer-valued items with an integer max_abs (tokens, digits), about 1e-7 times that
    size otherwise.
    Cost: 1 attention head (ceil((2 + n_items w) / d_head)) + 1 MLP sublayer in the same
    layer, (n_items + 1)(w + 1) neurons.
    """
    max_len = pos_max_len("output_sequence", pos)
    check_value("output_sequence", trigger, "trigger", 1)
    check_value("output_sequence", items, "items")
    n = check_int("output_sequence", n_items, "n_items", 1)
    if max_abs is None:
        bound = inferred_max_abs("output_sequence", [items])
    else:
        bound = check_bound("output_sequence", max_abs, "max_abs")
    total = width_of(items)
    if total % n:
        fail("output_sequence", f"items width {total} is not a multiple of n_items {n}")
    w = total // n
    i_col = tw.slice(pos, 0, 1)
    read = attend_most_recent_matching(pos, tw.literal([1.0]), trigger,
                                       tw.concat(i_col, trigger, items), gap=2.0)
    # chain input: [i, t, flag, items...]; index = i - t + M (flag - 1), M > max_len + n.
    chain = MlpChain(1 + 2 + total, w)
    big = float(max_len + n + 1)
    offset_form = np.zeros(chain.n_in)
    offset_form[1] = -1.0
    offset_form[2] = big
    cols = [[3 + k * w + j for j in range(w)] for k in range(n)]
    # idx = i - t + M flag - M: the constant goes into each gate's condition bias.
    add_index_gates(chain, chain.unit_in(0) + offset_form, cols, w, bound, shift=-big)
    return chain.emit(tw.concat(i_col, read))
