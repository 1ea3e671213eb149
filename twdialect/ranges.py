"""Value-range analysis: a sound per-component box [lo, hi] for every SSA value of a graph.

`value_ranges(graph)` walks the graph's block once (O(ops), each op costing about as much as
evaluating it on one position) and returns `{value: (lo, hi)}` with `lo`, `hi` float64 arrays
of the value's width. Soundness contract: for any inputs inside their declared `#tw.range`,
token ids inside the embedding table, and sequence lengths up to each `tw.pos_encoding`'s
`max_len` (and each `tw.pos_table`'s rows), the oracle's value (`twdialect.interp`) at every position lies inside the box.

Library ops are bounded by their *ideal* meaning (the oracle's), which also bounds their
decomposition where its contract holds (`twdialect/contracts.py`); compare's ramp zone stays
inside [-1, 1] too.

Every arithmetic op (linear, add, mlp, attn) widens its box outward by a tiny padding that
covers float64 rounding of the oracle's own arithmetic, so the boxes hold without tolerance.

Both analyses here are tables of per-op rules (`RANGES`, `INTEGRALITY`: `OpRules` of
`twdialect.interp`) applied by the shared walk (`walk_graph`, `walk_to`).
"""

from __future__ import annotations

from twdialect.errors import TwError
import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from twdialect.dense import to_numpy
from twdialect.dialect import (
    HARD,
    HARD_INTEGER_GAP,
    AddOp,
    AfterOp,
    AttnOp,
    ClampOp,
    CompareOp,
    ConcatOp,
    EmbeddingOp,
    GraphOp,
    InputOp,
    LinearOp,
    LiteralOp,
    MlpOp,
    SWISH,
    mlp_activation,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    PosEncodingOp,
    PosTableOp,
    ReluOp,
    SelectOp,
    SliceOp,
    describe,
    width_of,
)
from twdialect.interp import OpRules, find_graph, pwl_1d, walk_graph, walk_to

Box = tuple[np.ndarray, np.ndarray]

# Relative padding per arithmetic op: far above float64 rounding (~1e-16 per term), far
# below anything a consumer of the bounds cares about.
_ROUNDING_PAD = 1e-12


class RangeError(TwError):
    """A value range that cannot be computed (for example a non-finite bound)."""

    def __init__(self, message: str, op: Operation | None = None):
        super().__init__(message)
        self.op = op


def _pad(lo: np.ndarray, hi: np.ndarray, scale: np.ndarray) -> Box:
    """Widen [lo, hi] by a rounding allowance proportional to `scale` (sum of |terms|)."""
    pad = _ROUNDING_PAD * (1.0 + scale)
    return lo - pad, hi + pad


def affine_box(lo: np.ndarray, hi: np.ndarray, weight: np.ndarray,
               bias: np.ndarray | None = None) -> Box:
    """Interval image of x @ weight + bias for x in the box [lo, hi] (exact for a box)."""
    pos = np.maximum(weight, 0.0)
    neg = np.minimum(weight, 0.0)
    out_lo = lo @ pos + hi @ neg
    out_hi = hi @ pos + lo @ neg
    mag = np.maximum(np.abs(lo), np.abs(hi)) @ np.abs(weight)
    if bias is not None:
        out_lo = out_lo + bias
        out_hi = out_hi + bias
        mag = mag + np.abs(bias)
    return _pad(out_lo, out_hi, mag)


def _prop(op: Operation, name: str) -> np.ndarray:
    return to_numpy(op.properties[name])


def _opt_prop(op: Operation, name: str) -> np.ndarray | None:
    a = op.properties.get(name)
    return None if a is None else to_numpy(a)


def pos_encoding_box(width: int, max_len: int) -> Box:
    """Column 0 is the index i in [0, max_len - 1], column 1 is i*i, the rest sin/cos."""
    last = float(max_len - 1)
    lo = np.full(width, -1.0)
    hi = np.full(width, 1.0)
    lo[0], hi[0] = 0.0, last
    if width >= 2:
        lo[1], hi[1] = 0.0, last * last
    return lo, hi


def _pwl_1d_box(x_lo: float, x_hi: float, bp: np.ndarray, values: np.ndarray) -> Box:
    """The interpolant's extremes over [x_lo, x_hi] are at the ends or at breakpoints inside."""
    inner = bp[(bp > x_lo) & (bp < x_hi)]
    xs = np.concatenate([[x_lo, x_hi], inner])
    v = pwl_1d(xs, bp, values)
    return v.min(axis=0), v.max(axis=0)


def _grid_span(lo: float, hi: float, grid: np.ndarray) -> tuple[int, int]:
    """Indices [first, last] of the grid vertices whose cells meet [lo, hi] (clamped)."""
    lo = min(max(lo, grid[0]), grid[-1])
    hi = min(max(hi, grid[0]), grid[-1])
    first = max(0, int(np.searchsorted(grid, lo, side="right")) - 1)
    last = min(len(grid) - 1, int(np.searchsorted(grid, hi, side="left")))
    return first, max(first, last)


def _pwl_2d_box(x: Box, y: Box, xs: np.ndarray, ys: np.ndarray, table: np.ndarray) -> Box:
    """On each cell the interpolant is a convex combination of the cell's vertices."""
    i0, i1 = _grid_span(float(x[0][0]), float(x[1][0]), xs)
    j0, j1 = _grid_span(float(y[0][0]), float(y[1][0]), ys)
    sub = table[i0:i1 + 1, j0:j1 + 1].reshape(-1, table.shape[2])
    return sub.min(axis=0), sub.max(axis=0)


RANGES = OpRules("value ranges", lambda op: RangeError(
    f"{describe(op)}: no value-range rule for this op", op))


def op_box(op: Operation, boxes: list[Box]) -> Box:
    """The output box of one op given its operands' boxes."""
    return RANGES(op, boxes)


@RANGES.rule(InputOp)
def _input_box(op: InputOp, boxes: list[Box]) -> Box:
    lo, hi = op.range.bounds
    w = width_of(op.out)
    return np.full(w, lo), np.full(w, hi)


@RANGES.rule(EmbeddingOp)
def _embedding_box(op: EmbeddingOp, boxes: list[Box]) -> Box:
    t = _prop(op, "table")
    return t.min(axis=0), t.max(axis=0)


@RANGES.rule(PosEncodingOp)
def _positions_box(op: PosEncodingOp, boxes: list[Box]) -> Box:
    return pos_encoding_box(width_of(op.out), op.max_len.value.data)


@RANGES.rule(PosTableOp)
def _position_table_box(op: PosTableOp, boxes: list[Box]) -> Box:
    t = _prop(op, "table")  # every row a run can read: per-column min and max
    return t.min(axis=0), t.max(axis=0)


@RANGES.rule(LiteralOp)
def _literal_box(op: LiteralOp, boxes: list[Box]) -> Box:
    v = _prop(op, "value")
    return v.copy(), v.copy()


@RANGES.rule(LinearOp)
def _linear_box(op: LinearOp, boxes: list[Box]) -> Box:
    (lo, hi), = boxes
    return affine_box(lo, hi, _prop(op, "weight"), _opt_prop(op, "bias"))


@RANGES.rule(ReluOp)
def _relu_box(op: ReluOp, boxes: list[Box]) -> Box:
    (lo, hi), = boxes
    return np.maximum(lo, 0.0), np.maximum(hi, 0.0)


@RANGES.rule(AddOp)
def _add_box(op: AddOp, boxes: list[Box]) -> Box:
    (alo, ahi), (blo, bhi) = boxes
    return _pad(alo + blo, ahi + bhi, np.maximum(np.abs(alo), np.abs(ahi))
                + np.maximum(np.abs(blo), np.abs(bhi)))


@RANGES.rule(ConcatOp)
def _concat_box(op: ConcatOp, boxes: list[Box]) -> Box:
    return np.concatenate([b[0] for b in boxes]), np.concatenate([b[1] for b in boxes])


@RANGES.rule(SliceOp)
def _slice_box(op: SliceOp, boxes: list[Box]) -> Box:
    (lo, hi), = boxes
    s = op.start.value.data
    e = s + width_of(op.out)
    return lo[s:e].copy(), hi[s:e].copy()


@RANGES.rule(AfterOp)
def _after_box(op: AfterOp, boxes: list[Box]) -> Box:
    return boxes[0][0].copy(), boxes[0][1].copy()


@RANGES.rule(MlpOp)
def _mlp_box(op: MlpOp, boxes: list[Box]) -> Box:
    (lo, hi), = boxes
    hlo, hhi = affine_box(lo, hi, _prop(op, "w1"), _opt_prop(op, "b1"))
    if mlp_activation(op) == SWISH:
        hlo, hhi = swish_box(hlo, hhi)
    else:
        hlo, hhi = np.maximum(hlo, 0.0), np.maximum(hhi, 0.0)
    if "up" in op.properties:  # a gated lane: the product of the two intervals
        ulo, uhi = affine_box(lo, hi, _prop(op, "up"), _opt_prop(op, "ub"))
        hlo, hhi = product_box(hlo, hhi, ulo, uhi)
    return affine_box(hlo, hhi, _prop(op, "w2"), _opt_prop(op, "b2"))


# swish(z) = z sigmoid(z) falls to its minimum at z* (z* = -1 - W(1/e)) and rises after it.
SWISH_ARGMIN = -1.2784645427610738
SWISH_MIN = -0.2784645427610738  # swish(z*) = z* + 1


def swish_box(lo: np.ndarray, hi: np.ndarray) -> Box:
    """Interval image of swish over [lo, hi]: decreasing below z*, increasing above it, so the
    extremes are the end points and, where [lo, hi] holds z*, the minimum SWISH_MIN."""
    from twdialect.interp import swish

    with np.errstate(invalid="ignore", over="ignore"):
        slo, shi = swish(lo), swish(hi)
    slo = np.where(np.isneginf(lo), 0.0, slo)  # swish(-inf) = 0 (the limit)
    shi = np.where(np.isneginf(hi), 0.0, shi)
    out_lo = np.where(lo > SWISH_ARGMIN, slo, np.where(hi < SWISH_ARGMIN, shi, SWISH_MIN))
    out_hi = np.maximum(slo, shi)
    return _pad(out_lo, out_hi, np.maximum(np.abs(lo), np.abs(hi)))


def product_box(alo: np.ndarray, ahi: np.ndarray, blo: np.ndarray, bhi: np.ndarray) -> Box:
    """Interval image of a * b over the boxes (0 * inf, where a bound is 0: 0)."""
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.stack([alo * blo, alo * bhi, ahi * blo, ahi * bhi])
    p = np.where(np.isnan(p), 0.0, p)
    lo, hi = p.min(axis=0), p.max(axis=0)
    return _pad(lo, hi, np.maximum(np.abs(lo), np.abs(hi)))


@RANGES.rule(AttnOp)
def _attn_box(op: AttnOp, boxes: list[Box]) -> Box:
    """Softmax weights are a convex combination over positions (j <= i causal, every j under a
    full mask: the bound is the same hull either way), so each output row lies
    in the hull of the rows (v_j Wv) Wo: bound v Wv, then apply Wo; bound v (Wv Wo) directly as
    well and keep the intersection of the two sound boxes."""
    vlo, vhi = boxes[2]
    wv, wo = _prop(op, "wv"), _prop(op, "wo")
    mlo, mhi = affine_box(vlo, vhi, wv)
    lo1, hi1 = affine_box(mlo, mhi, wo)
    lo2, hi2 = affine_box(vlo, vhi, wv @ wo)
    lo, hi = np.maximum(lo1, lo2), np.minimum(hi1, hi2)
    return _pad(lo, hi, np.maximum(np.abs(lo), np.abs(hi)))


@RANGES.rule(CompareOp)
def _compare_box(op: CompareOp, boxes: list[Box]) -> Box:
    (lo, hi), = boxes
    t = op.threshold.value.data
    return np.where(lo >= t, 1.0, -1.0), np.where(hi >= t, 1.0, -1.0)


@RANGES.rule(SelectOp)
def _select_box(op: SelectOp, boxes: list[Box]) -> Box:
    (clo, chi), (alo, ahi), (blo, bhi) = boxes
    n = alo.size
    clo, chi = np.broadcast_to(clo, n), np.broadcast_to(chi, n)
    true_only, false_only = clo > 0, chi <= 0
    lo = np.where(true_only, alo, np.where(false_only, blo, np.minimum(alo, blo)))
    hi = np.where(true_only, ahi, np.where(false_only, bhi, np.maximum(ahi, bhi)))
    return lo, hi


@RANGES.rule(ClampOp)
def _clamp_box(op: ClampOp, boxes: list[Box]) -> Box:
    (lo, hi), = boxes
    a, b = op.lo.value.data, op.hi.value.data
    return np.clip(lo, a, b), np.clip(hi, a, b)


@RANGES.rule(PiecewiseLinearOp)
def _pwl_box(op: PiecewiseLinearOp, boxes: list[Box]) -> Box:
    (lo, hi), = boxes
    return _pwl_1d_box(float(lo[0]), float(hi[0]), _prop(op, "breakpoints"), _prop(op, "values"))


@RANGES.rule(PiecewiseLinear2dOp)
def _pwl_2d_box_rule(op: PiecewiseLinear2dOp, boxes: list[Box]) -> Box:
    return _pwl_2d_box(boxes[0], boxes[1], _prop(op, "xs"), _prop(op, "ys"), _prop(op, "table"))


def value_ranges(graph: GraphOp | ModuleOp, name: str = "main",
                 strict: bool = True) -> dict[SSAValue, Box]:
    """Sound per-component bounds of every value in `graph` (a GraphOp, or a module holding
    graph `name`). One walk over the block; see the module docstring for the contract.

    A bound that overflows to infinity raises `RangeError` naming the op when `strict`;
    otherwise it is kept as -inf/+inf and consumers that need finite ranges decide."""
    g = find_graph(graph, name) if not isinstance(graph, GraphOp) else graph
    return walk_graph(g, lambda op, boxes: _checked_box(op, boxes, strict))


def _checked_box(op: Operation, boxes: list[Box], strict: bool) -> Box:
    """`op_box` as flat float64 arrays; a non-finite bound raises (`strict`) or is kept as
    -inf/+inf."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below
        lo, hi = op_box(op, boxes)
    lo = np.asarray(lo, dtype=np.float64).reshape(-1)
    hi = np.asarray(hi, dtype=np.float64).reshape(-1)
    if np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)):
        return lo, hi
    if strict:
        raise RangeError(f"{describe(op)}: value range is not finite "
                         f"(lo={lo.tolist()}, hi={hi.tolist()})", op)
    return np.where(np.isnan(lo), -np.inf, lo), np.where(np.isnan(hi), np.inf, hi)


def box_of(value: SSAValue, boxes: dict[SSAValue, Box]) -> Box:
    """The box of `value` in a graph still being built, computing only what the cache `boxes`
    lacks (and keeping it there); bounds may be infinite (no finiteness check). A missing rule
    raises RangeError."""
    return walk_to(value, boxes, _raw_box)


def _raw_box(op: Operation, boxes: list[Box]) -> Box:
    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi = op_box(op, boxes)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


# --------------------------------------------------------------------------------------
# Integrality: which components are integers at every position, for every admissible input
# --------------------------------------------------------------------------------------


def _is_int(a: np.ndarray) -> np.ndarray:
    return np.isfinite(a) & (a == np.round(a))


def _affine_integer(x_int: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """Component j of x @ w + b is an integer if b_j is and every term with w_ij != 0 has an
    integer x_i and an integer w_ij."""
    ok_terms = (w == 0) | (_is_int(w) & x_int[:, None])
    out = ok_terms.all(axis=0)
    return out if b is None else out & _is_int(b)


INTEGRALITY = OpRules("integrality", lambda op: RangeError(
    f"{describe(op)}: no integrality rule for this op", op))


def op_integer(op: Operation, ins: list[np.ndarray]) -> np.ndarray:
    """Per output component: True where the oracle's value is an integer whenever the operands'
    True components are (sound, conservative: False means "not known")."""
    return INTEGRALITY(op, ins)


@INTEGRALITY.rule(InputOp)
def _input_integer(op: InputOp, ins: list[np.ndarray]) -> np.ndarray:
    return np.full(width_of(op.out), op.integer is not None)


@INTEGRALITY.rule(EmbeddingOp)
def _embedding_integer(op: EmbeddingOp, ins: list[np.ndarray]) -> np.ndarray:
    return _is_int(_prop(op, "table")).all(axis=0)


@INTEGRALITY.rule(PosEncodingOp)
def _positions_integer(op: PosEncodingOp, ins: list[np.ndarray]) -> np.ndarray:
    return np.arange(width_of(op.out)) < 2  # i and i*i


@INTEGRALITY.rule(PosTableOp)
def _position_table_integer(op: PosTableOp, ins: list[np.ndarray]) -> np.ndarray:
    return _is_int(_prop(op, "table")).all(axis=0)


@INTEGRALITY.rule(LiteralOp)
def _literal_integer(op: LiteralOp, ins: list[np.ndarray]) -> np.ndarray:
    return _is_int(_prop(op, "value"))


@INTEGRALITY.rule(LinearOp)
def _linear_integer(op: LinearOp, ins: list[np.ndarray]) -> np.ndarray:
    return _affine_integer(ins[0], _prop(op, "weight"), _opt_prop(op, "bias"))


@INTEGRALITY.rule(ReluOp, AfterOp)
def _first_operand_integer(op: ReluOp | AfterOp, ins: list[np.ndarray]) -> np.ndarray:
    return ins[0].copy()


@INTEGRALITY.rule(AddOp)
def _add_integer(op: AddOp, ins: list[np.ndarray]) -> np.ndarray:
    return ins[0] & ins[1]


@INTEGRALITY.rule(ConcatOp)
def _concat_integer(op: ConcatOp, ins: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(ins)


@INTEGRALITY.rule(SliceOp)
def _slice_integer(op: SliceOp, ins: list[np.ndarray]) -> np.ndarray:
    s = op.start.value.data
    return ins[0][s:s + width_of(op.out)].copy()


@INTEGRALITY.rule(MlpOp)
def _mlp_integer(op: MlpOp, ins: list[np.ndarray]) -> np.ndarray:
    hidden = _affine_integer(ins[0], _prop(op, "w1"), _opt_prop(op, "b1"))
    if mlp_activation(op) == SWISH:  # swish of an integer other than 0 is not one
        hidden = np.zeros_like(hidden)
    if "up" in op.properties:  # a product of integers is one
        hidden = hidden & _affine_integer(ins[0], _prop(op, "up"), _opt_prop(op, "ub"))
    return _affine_integer(hidden, _prop(op, "w2"), _opt_prop(op, "b2"))


@INTEGRALITY.rule(CompareOp)
def _compare_integer(op: CompareOp, ins: list[np.ndarray]) -> np.ndarray:
    return np.ones(width_of(op.out), dtype=bool)  # the oracle's compare is -1 or +1


@INTEGRALITY.rule(SelectOp)
def _select_integer(op: SelectOp, ins: list[np.ndarray]) -> np.ndarray:
    return ins[1] & ins[2]


@INTEGRALITY.rule(ClampOp)
def _clamp_integer(op: ClampOp, ins: list[np.ndarray]) -> np.ndarray:
    bounds = _is_int(np.array([op.lo.value.data, op.hi.value.data])).all()
    return ins[0] & bounds


@INTEGRALITY.rule(PiecewiseLinearOp)
def _pwl_integer(op: PiecewiseLinearOp, ins: list[np.ndarray]) -> np.ndarray:
    """Integer at integer x when every breakpoint, value and slope is an integer and the ends
    are flat (they are: the table is constant beyond its breakpoints)."""
    bp, v = _prop(op, "breakpoints"), _prop(op, "values")
    slopes = np.diff(v, axis=0) / np.diff(bp)[:, None] if bp.size > 1 else v[:0]
    ok = bool(ins[0][0]) and _is_int(bp).all()
    return ok & _is_int(v).all(axis=0) & _is_int(slopes).all(axis=0)


@INTEGRALITY.rule(AttnOp)
def _attn_integer(op: AttnOp, ins: list[np.ndarray]) -> np.ndarray:
    """An average is not an integer, but a hard read (`tw.hard` of at least HARD_INTEGER_GAP,
    checked by the oracle) is its one winner's value v Wv Wo, up to a leakage below
    n exp(-gap) of the values: integer where that map is."""
    hard = op.attributes.get(HARD)
    if hard is None or hard.value.data < HARD_INTEGER_GAP:
        return np.zeros(width_of(op.out), dtype=bool)
    vw = _affine_integer(ins[2], _prop(op, "wv"), None)
    return _affine_integer(vw, _prop(op, "wo"), None)


@INTEGRALITY.rule(PiecewiseLinear2dOp)
def _not_known_integer(op: PiecewiseLinear2dOp, ins: list[np.ndarray]) -> np.ndarray:
    return np.zeros(width_of(op.out), dtype=bool)  # 2-d tables interpolate


def integer_components(graph: GraphOp | ModuleOp, name: str = "main") -> dict[SSAValue, np.ndarray]:
    """value -> bool array per component: True where every admissible run gives an integer
    (inputs declared `integer`, integer embedding tables, positions, integer weights...).
    One walk over the block."""
    g = find_graph(graph, name) if not isinstance(graph, GraphOp) else graph
    return walk_graph(g, op_integer)
