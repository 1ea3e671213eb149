"""Table lookups and index-driven selection.

Keys and indices are integer-valued; every construction places its ramps between integers, so
integer inputs are exact (bit-exact in fp32 while magnitudes stay below 2**24).
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import SSAValue

from twdialect import ops as tw
from twdialect.dialect import width_of
from twdialect.dialect import InputOp
from twdialect.library._util import (
    MlpChain,
    check_bound,
    check_float32,
    check_int,
    check_value,
    fail,
    inferred_max_abs,
    library_op,
    value_box,
)

Value = SSAValue


def _table_rows(op: str, values, n_rows: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v.reshape(-1, 1)
    if v.ndim != 2 or v.shape[0] != n_rows:
        fail(op, f"values must have {n_rows} rows (one per key), got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        fail(op, "values must be finite")
    return v


@library_op("tables")
def map_to_table(x: Value, keys, values, default=0.0, gap: float = 1.0) -> Value:
    """values[k] where x equals keys[k], else `default` (a value of the output's width).

    Scalar x (keys are integers): a `tw.piecewise_linear` through every integer from
    min(keys) - 1 to max(keys) + 1. Contract: exact for integer x (in fp32, up to the rounding
    of the summed slopes, whose order is the matrix kernel's: a few ulps of the largest value,
    up to 1.1e-5 seen for values in [-5, 5]); outside the keys' span the default. Cost: 1 MLP sublayer, neurons ~ the span of the keys.
    Vector x (keys are equal-norm codes, e.g. one-hot or +/-1 vectors): one neuron per key,
    relu(x.key - |key|^2 + gap) / gap, which is 1 at the key and 0 at any other code whose dot
    with the key is at most |key|^2 - gap. Contract: exact when x is a code of the same norm.
    Cost: 1 MLP sublayer, one neuron per key.
    """
    check_value("map_to_table", x, "x")
    n = width_of(x)
    k = np.asarray(keys, dtype=np.float64)
    if k.ndim == 1 and n > 1:
        k = k.reshape(1, -1)
    k = k.reshape(len(k), -1) if k.ndim > 1 else k.reshape(-1, 1)
    if k.shape[1] != n:
        fail("map_to_table", f"keys must be {n} wide (the width of x), got {k.shape[1]}")
    if k.shape[0] == 0:
        fail("map_to_table", "keys must not be empty")
    v = _table_rows("map_to_table", values, k.shape[0])
    d = np.broadcast_to(np.asarray(default, dtype=np.float64).reshape(-1), (v.shape[1],)).copy()
    if len({tuple(r) for r in k.tolist()}) != k.shape[0]:
        fail("map_to_table", "keys must be distinct")
    if n == 1:
        kk = k[:, 0]
        if not np.all(kk == np.round(kk)):
            fail("map_to_table", "scalar keys must be integers")
        lo, hi = int(kk.min()) - 1, int(kk.max()) + 1
        if hi - lo > 8192:
            fail("map_to_table", f"keys span {hi - lo} integers; too many breakpoints")
        grid = np.arange(lo, hi + 1, dtype=np.float64)
        table = np.tile(d, (grid.size, 1))
        for key, row in zip(kk, v):
            table[int(key) - lo] = row
        return tw.piecewise_linear(x, grid, table)
    g = check_bound("map_to_table", gap, "gap")
    norms = np.einsum("ij,ij->i", k, k)
    if not np.allclose(norms, norms[0], rtol=0, atol=1e-9) or norms[0] == 0:
        fail("map_to_table", "vector keys must all have the same nonzero norm (codes)")
    dots = k @ k.T
    off = dots[~np.eye(len(k), dtype=bool)]
    if off.size and off.max() > norms[0] - g + 1e-9:
        fail("map_to_table", f"two keys are closer than gap {g} (dot {off.max()} vs norm "
             f"{norms[0]}); pass a smaller gap")
    chain = MlpChain(n, v.shape[1])
    for key, row in zip(k, v):
        chain.neuron(key, -(norms[0] - g), (row - d) / g)
    chain.out_bias = d
    return chain.emit(x)


@library_op("tables")
def onehot_lookup(onehot: Value, table, encoding: str = "01") -> Value:
    """table[k] where component k of `onehot` is hot: onehot @ table, one `tw.linear`.

    encoding "01": hot = 1, cold = 0; "pm1": hot = +1, cold = -1 (booleans).
    Contract: exact (a weighted sum) for a one-hot input; a mix gives the same mix of rows.
    Cost: one linear (an attention head, or a bypass pair folded into a following chain).
    """
    check_value("onehot_lookup", onehot, "onehot")
    n = width_of(onehot)
    t = _table_rows("onehot_lookup", table, n)
    if encoding == "01":
        return tw.linear(onehot, t)
    if encoding == "pm1":
        # (x + 1) / 2 @ table = x @ table / 2 + sum(table) / 2
        return tw.linear(onehot, t / 2.0, t.sum(axis=0) / 2.0)
    fail("onehot_lookup", f"encoding must be '01' or 'pm1', got {encoding!r}")


@library_op("tables")
def in_range(lower: Value, upper: Value, n_slots: int) -> Value:
    """Slot mask: component k (0 <= k < n_slots) is +1 iff lower <= k < upper, else -1.

    lower, upper: integer-valued scalars with lower <= upper. Contract: exact for integers
    (each slot's two steps have their ramps in (k - 1, k) and (k, k + 1)).
    Cost: 1 MLP sublayer, 4 neurons per slot.
    """
    check_value("in_range", lower, "lower", 1)
    check_value("in_range", upper, "upper", 1)
    n = check_int("in_range", n_slots, "n_slots", 1)
    chain = MlpChain(2, n)
    lo, up = chain.unit_in(0), chain.unit_in(1)
    for k in range(n):
        # a = [lower <= k] = relu(k - lower + 1) - relu(k - lower);
        # b = [upper >= k + 1] = relu(upper - k) - relu(upper - k - 1).
        # With lower <= upper, a and b are never both false: the slot is 2(a + b) - 3.
        out = chain.unit_out(k, 2.0)
        chain.neuron(-lo, k + 1.0, out)
        chain.neuron(-lo, float(k), -out)
        chain.neuron(up, -float(k), out)
        chain.neuron(up, -float(k) - 1.0, -out)
    chain.out_bias = np.full(n, -3.0)
    return chain.emit(tw.concat(lower, upper))


def add_index_gates(chain: MlpChain, index_form: np.ndarray, entries_cols: list[list[int]],
                    n_out: int, bound: float, shift: float = 0.0) -> None:
    """Telescoping gates: out = sum_k [idx >= k] (v_k - v_{k-1}) over k = 0..n, with
    v_{-1} = v_n = 0, so idx in [0, n) reads v_idx and anything else reads 0.

    idx = index_form . x + shift (a linear form over the chain's input). The condition of
    entry k is c = 2 (idx - k) + 1, so |c| >= 1/2 whenever idx is within 1/4 of an integer;
    the differences v_k - v_{k-1} are bounded by 2 * bound."""
    n = len(entries_cols)
    shared: dict = {}
    cond = 2.0 * np.asarray(index_form, dtype=np.float64)
    for k in range(n + 1):
        cond_bias = 2.0 * (shift - k) + 1.0
        for j in range(n_out):
            w = np.zeros(chain.n_in)
            if k < n:
                w[entries_cols[k][j]] += 1.0
            if k > 0:
                w[entries_cols[k - 1][j]] -= 1.0
            chain.gate(w, 0.0, cond, cond_bias, 2.0 * bound, chain.unit_out(j), shared)


@library_op("tables")
def dynamic_extract(table: Value, index: Value, n_entries: int,
                    max_abs: float | None = None) -> Value:
    """Entry `index` of a per-position table: `table` holds n_entries entries of width w side
    by side (width n_entries * w); returns table[index*w : (index+1)*w], and 0 when index is
    outside [0, n_entries).

    Contract: exact when index is within 1/4 of an integer and |entries| <= max_abs, up to
    fp32 rounding of gate terms of size 4 max_abs (2 |index| + 3) summed over the
    n_entries + 1 gates: about 1e-7 * 4 max_abs (2 n_entries + 3) absolute while index stays
    within the table (bit-exact for integer entries and integer max_abs). An index whose
    declared range reaches far outside the table makes the gates larger: the op is refused
    at the call when that bound (`twdialect.f32_error`) exceeds both 1e-4 * max(1, max_abs)
    and twice its value for an index within a table's length of the table, where
    the index is a declared input (a computed index is not checked: the range analysis bounds
    indices read through attention far too loosely to judge them). One `tw.mlp` of telescoping gates sum_k [index >= k] (v_k - v_{k-1}).
    Without `max_abs` the bound comes from the value-range analysis of the table.
    Cost: 1 MLP sublayer, (n_entries + 1) * (w + 1) neurons.
    """
    check_value("dynamic_extract", table, "table")
    check_value("dynamic_extract", index, "index", 1)
    n = check_int("dynamic_extract", n_entries, "n_entries", 1)
    if max_abs is None:
        bound = inferred_max_abs("dynamic_extract", [table])
    else:
        bound = check_bound("dynamic_extract", max_abs, "max_abs")
    tw_w = width_of(table)
    if tw_w % n:
        fail("dynamic_extract", f"table width {tw_w} is not a multiple of n_entries {n}")
    w = tw_w // n
    chain = MlpChain(1 + tw_w, w)
    cols = [[1 + k * w + j for j in range(w)] for k in range(n)]
    add_index_gates(chain, chain.unit_in(0), cols, w, bound)
    if isinstance(index.owner, InputOp):  # a declared range: hold the op to it
        check_float32("dynamic_extract", chain, [value_box("dynamic_extract", index)],
                      [(np.full(tw_w, -bound), np.full(tw_w, bound))], bound, "index",
                      integer_first=index.owner.integer is not None,
                      nominal_first=[(np.array([-1.0 - n]), np.array([2.0 * n]))])
    return chain.emit(tw.concat(index, table))
