"""Boolean logic on +/-1 booleans (threshold 0, as `tw.compare` returns) and vector equality.

A boolean is exact at +1 and -1; these ops tolerate noise on their inputs as their docstrings
state and always return exactly +1 or -1 inside their contract.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import SSAValue

from twdialect import ops as tw
from twdialect.dialect import width_of
from twdialect.library._util import (
    MlpChain,
    check_array,
    check_bound,
    check_choice,
    check_value,
    check_values,
    fail,
    library_op,
)

Value = SSAValue


@library_op("logic")
def bool_not(x: Value) -> Value:
    """-x: the negation of +/-1 booleans (any width).

    Contract: exact (a sign flip). Cost: one `tw.linear` (an attention head or an MLP bypass
    pair; fusion passes fold it into a neighbouring linear).
    """
    check_value("bool_not", x, "x")
    return tw.negate(x)


def _count_step(op: str, values, lo_edge: float) -> Value:
    """+1 where sum(all components) >= lo_edge + 1, -1 where <= lo_edge, in one chain."""
    values = check_values(op, values, "values")
    x = tw.concat(values)
    n = width_of(x)
    chain = MlpChain(n, 1)
    ones = np.ones(n)
    # 2 * clamp(s - lo_edge, 0, 1) - 1 with s = sum: relu(s - e) - relu(s - e - 1).
    chain.neuron(ones, -lo_edge, [2.0])
    chain.neuron(ones, -lo_edge - 1.0, [-2.0])
    chain.out_bias = np.array([-1.0])
    return chain.emit(x)


@library_op("logic")
def bool_all_true(values) -> Value:
    """+1 iff every component of every value is true (+1), else -1. Output 1 wide.

    With n components the sum is n when all are true and at most n - 2 otherwise; the step
    sits in (n - 1.5, n - 0.5). Contract: exact when the summed deviation of the inputs from
    +/-1 is at most 1/2 (e.g. each within 0.5/n). Cost: 1 MLP sublayer, 2 neurons (the sum
    folds into the chain's first matrix).
    """
    values = check_values("bool_all_true", values, "values")
    n = sum(width_of(v) for v in values)
    return _count_step("bool_all_true", values, n - 1.5)


@library_op("logic")
def bool_any_true(values) -> Value:
    """+1 iff some component of some value is true (+1), else -1. Output 1 wide.

    The sum is -n when all are false and at least -n + 2 otherwise; the step sits in
    (-n + 0.5, -n + 1.5). Contract and cost as `bool_all_true` (1 MLP sublayer, 2 neurons).
    """
    values = check_values("bool_any_true", values, "values")
    n = sum(width_of(v) for v in values)
    return _count_step("bool_any_true", values, -n + 0.5)


@library_op("logic")
def equals_vector(x: Value, key, mode: str = "dot", gap: float = 1.0) -> Value:
    """+1 where the vector x equals the constant `key`, else -1. Output 1 wide.

    mode "dot" (one-hot, +/-1 or other equal-norm codes): the step of x.key between
    |key|^2 - gap and |key|^2. Contract: exact when x is a code with |x| = |key| and every
    non-matching code has x.key <= |key|^2 - gap (gap 1 for one-hot codes, 2 for +/-1 codes).
    Cost: 1 MLP sublayer, 2 neurons.
    mode "integer" (any integer-valued vectors): chain 1 computes sum_i |x_i - key_i|, chain 2
    steps it between 0 and 1. Contract: exact for integer x. Cost: 2 MLP sublayers,
    2n + 2 neurons.
    """
    check_value("equals_vector", x, "x")
    n = width_of(x)
    k = check_array("equals_vector", key, "key").reshape(-1)
    if k.size != n:
        fail("equals_vector", f"key has {k.size} entries but x is {n} wide")
    check_choice("equals_vector", mode, "mode", ("dot", "integer"))
    if mode == "dot":
        g = check_bound("equals_vector", gap, "gap")
        norm2 = float(k @ k)
        if norm2 == 0:
            fail("equals_vector", "mode 'dot' needs a nonzero key")
        chain = MlpChain(n, 1)
        chain.neuron(k, -(norm2 - g), [2.0 / g])
        chain.neuron(k, -norm2, [-2.0 / g])
        chain.out_bias = np.array([-1.0])
        return chain.emit(x)
    if mode == "integer":
        first = MlpChain(n, 1)
        for i in range(n):
            first.neuron(first.unit_in(i), -k[i], [1.0])
            first.neuron(-first.unit_in(i), k[i], [1.0])
        dist = first.emit(x)
        second = MlpChain(1, 1)
        # +1 at distance 0, -1 from distance 1 on: 1 - 2 * (relu(d) - relu(d - 1)).
        second.neuron([1.0], 0.0, [-2.0])
        second.neuron([1.0], -1.0, [2.0])
        second.out_bias = np.array([1.0])
        return second.emit(dist)
    fail("equals_vector", f"mode must be 'dot' or 'integer', got {mode!r}")
