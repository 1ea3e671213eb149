"""`decompose`: lower every library op to primitive MLP chains.

compare, select, clamp and piecewise_linear each become ONE `tw.mlp` (one MLP sublayer);
piecewise_linear_2d becomes two chained `tw.mlp`s. Operands with several values are read
through a free `tw.concat`. The constructions, their costs and their numeric contracts are in
`twdialect/contracts.py` (and docs/decompose.md).

Attributes: every replacement op receives the library op's discardable attributes
(`tw.annotation`, `tw.scope`, `tw.iteration`, ...); `tw.scope_terminal` goes only on the op
that produces the replacement value. The final value keeps the original name hint.

Cost: value ranges (needed by select) are computed once per graph, then one walk over the
block replaces each library op in place: linear in the graph size. A select whose branch
ranges are unbounded or larger than `SELECT_MAX_MAGNITUDE`, or a compare whose ramp cannot be
encoded exactly in f32, fails with a `DecomposeError` naming the op.
"""

from __future__ import annotations

from twdialect.errors import TwError
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from twdialect.contracts import (
    LATTICE_MAX_NEURONS,
    LATTICE_MAX_POINTS,
    SELECT_COND_TOLERANCE,
    SELECT_MAX_MAGNITUDE,
    DEFAULT_TOLERANCE,
    ContractError,
    compare_params,
    f32,
    unit_grid_round,
)
from twdialect.dense import shape_of, to_numpy
from twdialect.dialect import (
    MAX_DENSE_ELEMENTS,
    SCOPE_TERMINAL,
    TOLERANCE,
    LIBRARY_OPS,
    ClampOp,
    CompareOp,
    ConcatOp,
    GraphOp,
    MlpOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    SelectOp,
    describe,
    width_of,
)
from twdialect.interp import pwl_2d
from twdialect.point_tables import hinge_mlp
from twdialect.f32_error import mlp_error_bound, mlp_output_box
from twdialect.ranges import Box, integer_components, value_ranges
from tw_passes.graph_pass import GraphPass


class DecomposeError(TwError):
    """A library op that cannot be decomposed; `op` is the op (tools locate it)."""

    def __init__(self, message: str, op: Operation | None = None):
        super().__init__(message)
        self.op = op


# --------------------------------------------------------------------------------------
# Op construction helpers
# --------------------------------------------------------------------------------------


class _Emitter:
    """Collects the replacement ops of one library op."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []
        # Name-hint suffix of each op's result (the last op takes the library op's name).
        self.suffixes: list[str] = []
        # (input value, w1, b1, w2, b2) of each mlp, in order: what `f32_bound` reads.
        self.mlps: list[tuple] = []

    def discard(self) -> None:
        """Drop the ops of a construction that is not used (they hold uses of its operands)."""
        for op in reversed(self.ops):
            op.drop_all_references()
        self.ops.clear()

    def concat(self, values: list[SSAValue]) -> SSAValue:
        if len(values) == 1:
            return values[0]
        op = ConcatOp(values)
        self.ops.append(op)
        self.suffixes.append("in")
        return op.results[0]

    def mlp(self, x: SSAValue, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray,
            b2: np.ndarray, suffix: str = "h") -> SSAValue:
        # + 0.0 turns -0.0 into 0.0 (no sign noise in printed weights).
        w1, b1, w2, b2 = (np.asarray(a, dtype=np.float64) + 0.0 for a in (w1, b1, w2, b2))
        op = MlpOp(x, w1, w2, b1=b1 if np.any(b1 != 0) else None,
                   b2=b2 if np.any(b2 != 0) else None)
        self.mlps.append((x, w1, b1, w2, b2))
        self.ops.append(op)
        self.suffixes.append(suffix)
        return op.results[0]


# --------------------------------------------------------------------------------------
# The decompositions (contracts: twdialect/contracts.py)
# --------------------------------------------------------------------------------------


def _compare(op: CompareOp, em: _Emitter, down: bool = False) -> SSAValue:
    """-1 + 2 (relu(z + 1) - relu(z)), whose hinges cancel above the threshold, or (`down`)
    1 - 2 (relu(-z) - relu(-z - 1)), the same function cancelling below it."""
    p = compare_params(op)
    n = width_of(op.out)
    w1 = np.zeros((n, 2 * n))
    b1 = np.zeros(2 * n)
    w2 = np.zeros((2 * n, n))
    sign = -1.0 if down else 1.0
    for k in range(n):
        w1[k, 2 * k] = w1[k, 2 * k + 1] = sign * p.w
        if down:
            b1[2 * k], b1[2 * k + 1] = -p.beta, -p.beta - 1.0  # relu(-z), relu(-z - 1)
        else:
            b1[2 * k], b1[2 * k + 1] = p.beta + 1.0, p.beta  # relu(z + 1), relu(z)
        w2[2 * k, k], w2[2 * k + 1, k] = 2.0 * sign, -2.0 * sign
    return em.mlp(op.x, w1, b1, w2, np.full(n, -sign))


def _pow2_ceil(x: np.ndarray) -> np.ndarray:
    return np.exp2(np.ceil(np.log2(x)))


def select_offsets(a: Box, b: Box) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(o_a, K_a, o_b, K_b) per component: offsets below each branch's range, on a grid of
    its own magnitude (so o, o + K and o / 2 are exact in f32), and power-of-two gains with
    K (2 - tolerance) >= hi - o."""
    out = []
    for lo, hi in (a, b):
        mag = np.maximum.reduce([np.abs(lo), np.abs(hi), hi - lo, np.ones_like(lo)])
        step = np.exp2(np.floor(np.log2(mag)) - 20)
        o = np.floor(lo / step) * step
        k = np.maximum(_pow2_ceil(np.maximum((hi - o) / (2 - SELECT_COND_TOLERANCE), step)), step)
        out += [o, k]
    return out[0], out[1], out[2], out[3]


def _select(op: SelectOp, em: _Emitter, ranges: dict[SSAValue, Box]) -> SSAValue:
    n = width_of(op.out)
    c_w = width_of(op.cond)
    boxes = []
    for name, v in (("true", op.if_true), ("false", op.if_false)):
        lo, hi = ranges[v]
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise DecomposeError(f"{describe(op)}: the {name} branch has an unbounded value "
                                 "range; select needs finite ranges (bound it with tw.clamp)", op)
        m = float(max(np.abs(lo).max(), np.abs(hi).max()))
        if m > SELECT_MAX_MAGNITUDE:
            raise DecomposeError(f"{describe(op)}: the {name} branch's value range "
                                 f"[{lo.min():.6g}, {hi.max():.6g}] exceeds +/-"
                                 f"{SELECT_MAX_MAGNITUDE:.6g}; select's offsets would lose "
                                 "f32 precision (bound it with tw.clamp)", op)
        boxes.append((lo, hi))
    o_a, k_a, o_b, k_b = select_offsets(boxes[0], boxes[1])
    # The cancellations below rely on these being exact f32 weights (select_offsets' grid).
    for arr in (o_a, o_b, o_a + k_a, o_b + k_b, o_a / 2, o_b / 2):
        if not np.array_equal(f32(arr), arr):
            raise DecomposeError(f"{describe(op)}: internal error: select offsets are not "
                                 "exact in f32", op)

    # Input columns: c at [0, c_w), a at [c_w, c_w + n), b at [c_w + n, c_w + 2n).
    # Gates g_a = relu(c + 1) (2 when c = +1, else 0) carry o_a / 2 and g_b = relu(1 - c)
    # carry o_b / 2, so the selected branch is rebuilt from its own offset only: the other
    # branch's range never enters the sum (its offset could be far larger than the answer).
    gates = []  # (condition row, +1 for g_a / -1 for g_b, {component: coefficient})
    for sign, offset in ((1.0, o_a), (-1.0, o_b)):
        if c_w == 1:
            if np.any(offset != 0):
                gates.append((0, sign, {k: offset[k] / 2 for k in range(n) if offset[k] != 0}))
        else:
            gates += [(k, sign, {k: offset[k] / 2}) for k in range(n) if offset[k] != 0]
    hidden = 2 * n + len(gates)
    w1 = np.zeros((c_w + 2 * n, hidden))
    b1 = np.zeros(hidden)
    w2 = np.zeros((hidden, n))
    for k in range(n):
        c_row = 0 if c_w == 1 else k
        w1[c_w + k, 2 * k] = 1.0  # h_a = relu(a - o_a + K_a (c - 1))
        w1[c_row, 2 * k] = k_a[k]
        b1[2 * k] = -(o_a[k] + k_a[k])
        w1[c_w + n + k, 2 * k + 1] = 1.0  # h_b = relu(b - o_b - K_b (c + 1))
        w1[c_row, 2 * k + 1] = -k_b[k]
        b1[2 * k + 1] = -(o_b[k] + k_b[k])
        w2[2 * k, k] = w2[2 * k + 1, k] = 1.0
    for g, (row, sign, coefficients) in enumerate(gates):
        col = 2 * n + g
        w1[row, col] = sign
        b1[col] = 1.0
        for k, coefficient in coefficients.items():
            w2[col, k] = coefficient
    x = em.concat([op.cond, op.if_true, op.if_false])
    return em.mlp(x, w1, b1, w2, np.zeros(n))


def _clamp(op: ClampOp, em: _Emitter, down: bool = False) -> SSAValue:
    """lo + relu(x - lo) - relu(x - hi), whose hinges cancel above hi, or (`down`)
    hi - relu(hi - x) + relu(lo - x), cancelling below lo."""
    n = width_of(op.out)
    lo, hi = float(f32(op.lo.value.data)), float(f32(op.hi.value.data))
    sign = -1.0 if down else 1.0
    w1 = np.zeros((n, 2 * n))
    b1 = np.tile([hi, lo] if down else [-lo, -hi], n)
    w2 = np.zeros((2 * n, n))
    for k in range(n):
        w1[k, 2 * k] = w1[k, 2 * k + 1] = sign
        w2[2 * k, k], w2[2 * k + 1, k] = sign, -sign
    return em.mlp(op.x, w1, b1, w2, np.full(n, hi if down else lo))


def _pwl(op: PiecewiseLinearOp, em: _Emitter, down: bool = False) -> SSAValue:
    """Hinges relu(x - B[k]) from the left end (they cancel right of the last breakpoint), or
    (`down`) relu(B[k] - x) from the right end, the interpolant of -x (cancelling on the left)."""
    bp, values = to_numpy(op.breakpoints), to_numpy(op.values)
    if down:
        return _hinge_mlp(op.x, -np.ones(1), 0.0, -bp[::-1], values[::-1], em)
    return _hinge_mlp(op.x, np.ones(1), 0.0, bp, values, em)


def _hinge_mlp(x: SSAValue, weights: np.ndarray, offset: float, bp: np.ndarray,
               values: np.ndarray, em: _Emitter) -> SSAValue:
    """One MLP chain computing the interpolant through (bp, values) of t = x @ weights - offset
    (`twdialect.point_tables.hinge_mlp`, flat beyond the last point)."""
    return em.mlp(x, *hinge_mlp(bp, values, weights, offset))


def _strip_neurons(grid: np.ndarray, op: Operation, axis: str):
    """Weights and biases of relu(z_i), relu(z_i - 1) per strip, z_i = (v - g_i) / gap_i."""
    gap = np.diff(grid)
    w = f32(1.0 / gap)
    beta = unit_grid_round(-grid[:-1] * w)
    if not np.all(f32(beta - 1.0) == beta - 1.0):
        raise DecomposeError(f"{describe(op)}: {axis} grid offsets are too large relative to "
                             "its spacing for exact f32 strips", op)
    return w, beta


def pwl2d_coefficients(table: np.ndarray):
    """(a (n1-1, O), b (n2-1, O), c (n1-1, n2-1, O)) of the strip form (contracts.py)."""
    a = table[1:, 0] - table[:-1, 0]
    b = table[0, 1:] - table[0, :-1]
    c = table[1:, 1:] - table[1:, :-1] - table[:-1, 1:] + table[:-1, :-1]
    return a, b, c


def lattice_form(op: PiecewiseLinear2dOp, ranges: dict[SSAValue, Box],
                 integers: dict[SSAValue, np.ndarray], max_neurons: int = LATTICE_MAX_NEURONS):
    """The one-chain form of a piecewise_linear_2d whose operands are integers in finite ranges
    (contracts.py): (inner, outer, stride, offset, breakpoints, values) describing the 1-d table
    of t = inner + stride * outer - offset, or None when it does not apply or needs more than
    `max_neurons` hinges (the two-chain form is used then)."""
    if max_neurons <= 0 or not (integers.get(op.x, [False])[0] and integers.get(op.y, [False])[0]):
        return None
    spans = []
    for v in (op.x, op.y):
        lo, hi = ranges[v]
        if not (np.isfinite(lo[0]) and np.isfinite(hi[0])):
            return None
        spans.append((int(np.ceil(lo[0])), int(np.floor(hi[0]))))
    (x0, x1), (y0, y1) = spans
    nx, ny = x1 - x0 + 1, y1 - y0 + 1
    if nx < 1 or ny < 1 or nx * ny > LATTICE_MAX_POINTS:
        return None
    xs, ys, table = to_numpy(op.xs), to_numpy(op.ys), to_numpy(op.table)
    gx, gy = np.meshgrid(np.arange(x0, x1 + 1.0), np.arange(y0, y1 + 1.0), indexing="ij")
    grid = pwl_2d(gx.reshape(-1), gy.reshape(-1), xs, ys, table).reshape(nx, ny, -1)
    best = None
    # t runs along the inner operand, one row per value of the outer: try both orders.
    for inner, outer, (i0, i1), (o0, o1), rows in (
            (op.x, op.y, spans[0], spans[1], grid.transpose(1, 0, 2)),
            (op.y, op.x, spans[1], spans[0], grid)):
        seq = rows.reshape(-1, grid.shape[2])  # seq[t]: t = (inner - i0) + n_in (outer - o0)
        n_in = i1 - i0 + 1
        offset = i0 + n_in * o0
        if max(abs(i0), abs(i1)) + n_in * max(abs(o0), abs(o1)) + abs(offset) >= 2 ** 24:
            continue  # the sum would not be exact in f32
        knots = _slope_changes(seq)
        if best is None or knots.size < best[4].size:
            best = (inner, outer, n_in, offset, knots.astype(np.float64), seq[knots])
    return best if best is not None and best[4].size + 1 <= max_neurons else None


def _slope_changes(seq: np.ndarray) -> np.ndarray:
    """Indices t (both ends included) where the sequence's slope changes: the breakpoints of
    the interpolant through (t, seq[t]). Float64 differences below 1e-12 of the table's scale
    are rounding, not slope changes."""
    if seq.shape[0] == 1:
        return np.array([0])
    second = np.abs(np.diff(seq, n=2, axis=0)).max(axis=1) if seq.shape[0] > 2 else np.zeros(0)
    scale = 1e-12 * (1.0 + np.abs(seq).max())
    inner = np.nonzero(second > scale)[0] + 1
    return np.concatenate([[0], inner, [seq.shape[0] - 1]])


def _pwl2d_lattice(op: PiecewiseLinear2dOp, form, em: _Emitter) -> SSAValue:
    inner, outer, stride, offset, bp, values = form
    return _hinge_mlp(em.concat([inner, outer]), np.array([1.0, float(stride)]), float(offset),
                      bp, values, em)


def _pwl2d(op: PiecewiseLinear2dOp, em: _Emitter,
           down: np.ndarray | None = None) -> list[SSAValue]:
    """Two chains (contracts.py). Strip k with `down[k]` is 1 - relu(1 - z) + relu(-z), the
    same clamp(z, 0, 1) with its hinges cancelling left of the strip instead of right."""
    xs, ys, table = to_numpy(op.xs), to_numpy(op.ys), to_numpy(op.table)
    n1, n2, n_out = table.shape
    nx, ny = n1 - 1, n2 - 1
    down = np.zeros(nx + ny, dtype=bool) if down is None else down
    # Chain 1: r_i = relu(z_i) - relu(z_i - 1) over x, s_j likewise over y.
    w1 = np.zeros((2, 2 * (nx + ny)))
    b1 = np.zeros(2 * (nx + ny))
    w2 = np.zeros((2 * (nx + ny), nx + ny))
    for row, grid, first, axis in ((0, xs, 0, "xs"), (1, ys, nx, "ys")):
        w, beta = _strip_neurons(grid, op, axis)
        for i in range(grid.size - 1):
            col, k = 2 * (first + i), first + i
            sign = -1.0 if down[k] else 1.0
            w1[row, col] = w1[row, col + 1] = sign * w[i]
            if down[k]:
                b1[col], b1[col + 1] = 1.0 - beta[i], -beta[i]
            else:
                b1[col], b1[col + 1] = beta[i], beta[i] - 1.0
            w2[col, k], w2[col + 1, k] = sign, -sign
    rs = em.mlp(em.concat([op.x, op.y]), w1, b1, w2, down.astype(np.float64), suffix="strips")
    # Chain 2: f = T00 + sum a_i r_i + sum b_j s_j + sum c_ij (r_i - relu(r_i - s_j)).
    a, b, c = pwl2d_coefficients(table)
    pairs = [(i, j) for i in range(nx) for j in range(ny) if np.any(c[i, j] != 0)]
    hidden = nx + ny + len(pairs)
    w1 = np.zeros((nx + ny, hidden))
    w2 = np.zeros((hidden, n_out))
    for i in range(nx):
        w1[i, i] = 1.0
        w2[i] = a[i] + c[i].sum(axis=0)
    for j in range(ny):
        w1[nx + j, nx + j] = 1.0
        w2[nx + j] = b[j]
    for p, (i, j) in enumerate(pairs):
        w1[i, nx + ny + p], w1[nx + j, nx + ny + p] = 1.0, -1.0
        w2[nx + ny + p] = -c[i, j]
    return em.mlp(rs, w1, np.zeros(hidden), w2, table[0, 0])


# --------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------


def decompose_op(op: Operation, ranges: dict[SSAValue, Box],
                 integers: dict[SSAValue, np.ndarray] | None = None,
                 lattice_neurons: int = LATTICE_MAX_NEURONS,
                 tolerance: float = DEFAULT_TOLERANCE, dtype: str = "float32") -> list[Operation]:
    """The replacement ops of library op `op`; the last one produces its value. Intermediate
    results get name hints `<name>_in` (operand concat) and `<name>_strips` (pwl_2d chain 1).
    `integers` (`twdialect.ranges.integer_components`) enables the one-chain lattice form of
    piecewise_linear_2d on integer operands (at most `lattice_neurons` hinges; 0 disables) and
    lets the float32 check see exact integer arithmetic.

    Of the constructions that compute the op (hinges cancelling above or below), the usual one
    is kept when its float32 rounding over the operands' value ranges is within tolerance, else
    the one whose rounding is smallest; if even that exceeds
    `tolerance * max(1, |output|)` (the output's range), the op is refused, with the range
    that would fit (`contracts.py`, `twdialect/f32_error.py`). `dtype` "float64": the model
    computes in float64, whose rounding is the float32 bound times FLOAT64_BOUND_SCALE."""
    integers = integers or {}
    scale = ROUNDING_SCALE[dtype]
    if (accepted := op.attributes.get(TOLERANCE)) is not None:  # the author's wider contract
        tolerance = max(tolerance, accepted.value.data)
    candidates: list[_Emitter] = []
    bounds: list[float] = []
    try:
        for down in _orientations(op):  # the usual one first: graphs that fit keep their form
            candidates.append(_build(op, ranges, integers, lattice_neurons, down))
            bounds.append(_relative_bound(op, candidates[-1], ranges, integers) * scale)
            if bounds[-1] <= tolerance:
                break
    except (ContractError, DecomposeError) as e:
        for em in candidates:
            em.discard()
        raise DecomposeError(str(e), op) from None
    best = len(bounds) - 1 if bounds[-1] <= tolerance else int(np.argmin(bounds))
    for other in candidates[:best] + candidates[best + 1:]:
        other.discard()  # unused candidates must not leave uses on the operands
    if bounds[best] > tolerance:
        candidates[best].discard()
        raise DecomposeError(_too_wide_message(op, bounds[best], tolerance, ranges, integers,
                                               lattice_neurons, dtype), op)
    em = candidates[best]
    if op.results[0].name_hint:
        for new, suffix in zip(em.ops[:-1], em.suffixes):
            new.results[0].name_hint = f"{op.results[0].name_hint}_{suffix}"
    return em.ops


def _orientations(op: Operation) -> tuple[bool, ...]:
    """Which way the hinges may cancel: both ways for the one-input hinge pairs."""
    return (False, True) if isinstance(op, (CompareOp, ClampOp, PiecewiseLinearOp)) else (False,)


def _largest_weight(op: Operation) -> int:
    """Entries of the largest weight matrix the op's decomposition builds (an upper bound)."""
    n = width_of(op.results[0])
    match op:
        case CompareOp() | ClampOp():
            return 2 * n * n
        case SelectOp():
            return (width_of(op.cond) + 2 * n) * 3 * n
        case PiecewiseLinearOp():
            return (shape_of(op.breakpoints)[0] + 1) * max(n, 1)
        case PiecewiseLinear2dOp():
            n1, n2 = shape_of(op.xs)[0], shape_of(op.ys)[0]
            strips = n1 + n2 - 2
            return max(strips * (strips + n1 * n2), (strips + n1 * n2) * n)
    return 0


def _build(op: Operation, ranges: dict[SSAValue, Box], integers: dict[SSAValue, np.ndarray],
           lattice_neurons: int, down: bool) -> _Emitter:
    if (size := _largest_weight(op)) > MAX_DENSE_ELEMENTS:
        raise DecomposeError(f"{describe(op)}: its decomposition needs a weight of {size} "
                             f"entries, above the limit of {MAX_DENSE_ELEMENTS} "
                             "(split the op into narrower ones)", op)
    em = _Emitter()
    match op:
        case CompareOp():
            _compare(op, em, down)
        case SelectOp():
            _select(op, em, ranges)
        case ClampOp():
            _clamp(op, em, down)
        case PiecewiseLinearOp():
            _pwl(op, em, down)
        case PiecewiseLinear2dOp():
            form = lattice_form(op, ranges, integers, lattice_neurons)
            if form is not None:
                _pwl2d_lattice(op, form, em)
            else:
                _pwl2d(op, em, _strips_down(op, ranges))
        case _:
            raise DecomposeError(f"{describe(op)}: not a library op", op)
    return em


def _strips_down(op: PiecewiseLinear2dOp, ranges: dict[SSAValue, Box]) -> np.ndarray:
    """Per strip, whether its hinges should cancel left of it (the operand's range reaches
    further below the strip than above it)."""
    out = []
    for v, grid, axis in ((op.x, to_numpy(op.xs), "xs"), (op.y, to_numpy(op.ys), "ys")):
        w, beta = _strip_neurons(grid, op, axis)
        lo, hi = (float(b[0]) for b in ranges[v])
        above = np.maximum(0.0, hi * w + beta - 1.0)  # z - 1 where both up-hinges fire
        below = np.maximum(0.0, -(lo * w + beta))  # -z where both down-hinges fire
        out.append(below < above)
    return np.concatenate(out)


# The rounding bound of a dtype relative to float32's (f32_error bounds float32): float64's unit
# roundoff is 2^-29 of float32's, and the bound is first order in it; one bit of that is kept
# for the second-order terms.
FLOAT64_BOUND_SCALE = 2.0 ** -28
ROUNDING_SCALE = {"float32": 1.0, "float64": FLOAT64_BOUND_SCALE}


def check_rounding_options(name: str, tolerance, dtype, error: type[Exception]) -> None:
    """The options every pass bounding its rounding takes: a positive `tolerance` and a
    `dtype` of ROUNDING_SCALE."""
    if dtype not in ROUNDING_SCALE:
        raise error(f"{name}: dtype must be one of {', '.join(ROUNDING_SCALE)}, got {dtype!r}")
    if not tolerance > 0:
        raise error(f"{name}: tolerance must be > 0, got {tolerance}")


def _operand_box(x: SSAValue, ranges: dict[SSAValue, Box],
                 integers: dict[SSAValue, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, integer) of an mlp's input: a graph value, or the concat the emitter made."""
    if x in ranges:
        lo, hi = ranges[x]
        return lo, hi, integers.get(x, np.zeros(lo.size, dtype=bool))
    parts = [_operand_box(v, ranges, integers) for v in x.owner.operands]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def emitted_error_bound(em: _Emitter, ranges: dict[SSAValue, Box],
                        integers: dict[SSAValue, np.ndarray]) -> np.ndarray:
    """Per output component, the float32 rounding bound of the emitted chain(s) over the
    operands' value ranges (each chain's error carried into the next)."""
    err = None
    for i, (x, w1, b1, w2, b2) in enumerate(em.mlps):
        w1, b1, w2, b2 = (f32(a) for a in (w1, b1, w2, b2))
        if i == 0:
            lo, hi, ints = _operand_box(x, ranges, integers)
        else:
            ints = np.zeros(lo.size, dtype=bool)
        lo, hi = np.nan_to_num(lo, neginf=-3e38), np.nan_to_num(hi, posinf=3e38)
        new = mlp_error_bound(w1, b1, w2, b2, lo, hi, ints, err)
        if i + 1 < len(em.mlps):  # the next chain's input box
            lo, hi = mlp_output_box(w1, b1, w2, b2, lo, hi)
        err = new
    return err


def _relative_bound(op: Operation, em: _Emitter, ranges: dict[SSAValue, Box],
                    integers: dict[SSAValue, np.ndarray]) -> float:
    """The largest emitted error bound relative to max(1, |output|) over the output's range."""
    lo, hi = ranges[op.results[0]]
    scale = np.maximum(1.0, np.maximum(np.abs(lo), np.abs(hi)))
    with np.errstate(all="ignore"):
        rel = emitted_error_bound(em, ranges, integers) / scale
    return float(np.nan_to_num(rel, nan=np.inf).max())


def _too_wide_message(op: Operation, bound: float, tolerance: float,
                      ranges: dict[SSAValue, Box], integers: dict[SSAValue, np.ndarray],
                      lattice_neurons: int, dtype: str = "float32") -> str:
    """Why `op` is refused and the operand range that would fit (found by bisection)."""
    names = {CompareOp: ("x",), ClampOp: ("x",), PiecewiseLinearOp: ("x",),
             SelectOp: ("if_true", "if_false"), PiecewiseLinear2dOp: ("x", "y")}[type(op)]
    values = [getattr(op, n) for n in names]
    declared = ", ".join(f"{n} in [{ranges[v][0].min():.6g}, {ranges[v][1].max():.6g}]"
                         for n, v in zip(names, values))
    head = (f"{describe(op)}: {dtype} rounding of its hinges can reach {bound:.3g} x max(1, "
            f"|output|) over {declared} (allowed {tolerance:g})")
    fits = _fitting_ranges(op, values, tolerance / ROUNDING_SCALE[dtype], ranges, integers,
                           lattice_neurons)
    where = (", ".join(f"{n} in [{lo:.6g}, {hi:.6g}]" for n, (lo, hi) in zip(names, fits))
             if fits else None)
    advice = f"; it fits with {where}" if where else ""
    return (f"{head}{advice}: declare narrower input ranges (or bound the operand with "
            f"tw.clamp), or accept the error with decompose{{tolerance={_round_up(bound)}}}")


def _round_up(x: float) -> str:
    """`x` rounded up to one significant digit, written as a pass option reads it ("4.0e-04")."""
    if not (np.isfinite(x) and x > 0):
        return "1.0e+30"
    e = np.floor(np.log10(x))
    return f"{np.ceil(x / 10 ** e - 1e-9) * 10 ** e:.1e}"


def _fitting_ranges(op, values, tolerance, ranges, integers, lattice_neurons):
    """The operands' ranges shrunk toward the op's centre, by the largest factor (bisection,
    1e-3 resolution) at which the op fits; None when even a point range does not."""
    centres = [float(np.clip(_centre(op), ranges[v][0].min(), ranges[v][1].max()))
               for v in values]
    declared = [(float(ranges[v][0].min()), float(ranges[v][1].max())) for v in values]

    def shrunk(f):
        return [(c + f * (lo - c), c + f * (hi - c)) for c, (lo, hi) in zip(centres, declared)]

    def fits(f):
        trial = dict(ranges)
        for v, (lo, hi) in zip(values, shrunk(f)):
            w = ranges[v][0].size
            trial[v] = (np.full(w, lo), np.full(w, hi))
        ems = []
        try:
            for d in _orientations(op):
                ems.append(_build(op, trial, integers, lattice_neurons, d))
            return min(_relative_bound(op, em, trial, integers) for em in ems) <= tolerance
        except (ContractError, DecomposeError):
            return False
        finally:
            for em in ems:
                em.discard()

    lo_f, hi_f = 0.0, 1.0
    if not fits(lo_f):
        return None
    for _ in range(40):
        mid = 0.5 * (lo_f + hi_f)
        lo_f, hi_f = (mid, hi_f) if fits(mid) else (lo_f, mid)
        if hi_f - lo_f < 1e-3 * max(lo_f, 1e-300):
            break
    return shrunk(lo_f)


def _centre(op: Operation) -> float:
    """Where the op's interesting part sits (its threshold, clamp interval, breakpoints)."""
    match op:
        case CompareOp():
            return op.threshold.value.data
        case ClampOp():
            return 0.5 * (op.lo.value.data + op.hi.value.data)
        case PiecewiseLinearOp():
            bp = to_numpy(op.breakpoints)
            return 0.5 * (bp[0] + bp[-1])
    return 0.0


def _replace(op: Operation, new_ops: list[Operation], ranges: dict[SSAValue, Box],
             integers: dict[SSAValue, np.ndarray]) -> None:
    """Put `new_ops` in place of library op `op`: its attributes (the scope terminal mark on the
    final op only), its name, and its ranges (later selects of the sweep read them)."""
    result = new_ops[-1].results[0]
    old = op.results[0]
    inherited = {k: v for k, v in op.attributes.items() if k != SCOPE_TERMINAL}
    for new in new_ops:
        new.attributes.update(inherited)
    if SCOPE_TERMINAL in op.attributes:
        new_ops[-1].attributes[SCOPE_TERMINAL] = op.attributes[SCOPE_TERMINAL]
    result.name_hint = old.name_hint
    ranges[result] = ranges[old]
    if old in integers:
        integers[result] = integers[old]
    Rewriter.insert_op(new_ops, InsertPoint.before(op))
    old.replace_all_uses_with(result)
    Rewriter.erase_op(op)


@dataclass(frozen=True)
class DecomposePass(GraphPass):
    """Lower compare/select/clamp/piecewise_linear(_2d) to `tw.mlp` chains (see module doc)."""

    name = "decompose"

    # Most hinge neurons of the one-chain lattice form of piecewise_linear_2d (0: always use
    # the two-chain form).
    lattice_neurons: int = LATTICE_MAX_NEURONS
    # The float32 error a decomposition may reach over the declared ranges, relative to
    # max(1, |output|); a library op whose bound exceeds it is refused.
    tolerance: float = DEFAULT_TOLERANCE
    # What the compiled model computes in ("float32" or "float64": `compile(dtype=)` sets it):
    # the rounding the check bounds.
    dtype: str = "float32"
    # Fuse trees of selects whose conditions are exactly +/-1 into one chain each first
    # (`passes/fuse_select_trees.py`), with the ranges of the graph as written.
    select_trees: bool = True

    def check_options(self) -> None:
        check_rounding_options("decompose", self.tolerance, self.dtype, DecomposeError)
        if self.lattice_neurons < 0:
            raise DecomposeError("decompose: lattice-neurons must be >= 0, got "
                                 f"{self.lattice_neurons}")

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> int:
        """Replace every library op of `graph` in place; returns how many were replaced."""
        library = [op for op in graph.block.ops if isinstance(op, LIBRARY_OPS)]
        if not library:
            return 0
        ranges = value_ranges(graph, strict=False)
        integers = integer_components(graph)
        if self.select_trees:
            from tw_passes.fuse_select_trees import MAX_LEAVES, fuse_select_trees

            fused = fuse_select_trees(graph, ranges, integers, MAX_LEAVES,
                                      self.tolerance / ROUNDING_SCALE[self.dtype])
            for old, new in fused.items():  # the tree's hull, not its chain's looser box
                ranges[new] = ranges[old]
                integers[new] = integers[old]
            if fused:
                library = [op for op in graph.block.ops if isinstance(op, LIBRARY_OPS)]
        for op in library:
            _replace(op, decompose_op(op, ranges, integers, self.lattice_neurons, self.tolerance,
                                      self.dtype), ranges, integers)
        return len(library)
