"""`fuse-select-trees`: a tree of selects becomes one MLP chain instead of one per level.

`decompose` lowers each `tw.select` to its own MLP chain, so a chain of k selects, each choosing
between a value and the select below it (a priority multiplexer, a machine's "which write
wins"), costs k MLP chains on the critical path. Under select's contract (its condition is +1
or -1) every value of the tree is one of its leaves, the one whose path of conditions holds,
and a path is an AND of conditions: one ReLU layer computes all of them at once.

Only selects whose condition is exactly +1 or -1 at every run take part (`_Signs`: a compare
of a value no lattice point of which falls in its ramp zone, or an integer-lattice value whose
points in range are all +/-1, as a firebrand frontend's 2c - 1): there decompose's select is
exact too, so the pass changes no value at all. For a root select whose branches are such
selects, the tree is collected down to
`max-leaves` leaves (a branch that would exceed it stays a leaf). A leaf v reached by literals
l_1..l_n (l = (1 + c) / 2 for a true branch, (1 - c) / 2 for a false one: 1 when it holds, 0
when not) is read by, per component,

    h = relu(v - o - K (n - sum_i l_i)),   g = relu(1 - (n - sum_i l_i)),   out += h + o g,

with o = floor(lo), the integer at or below v's range, and K the power of two with
K (1 - SELECT_COND_TOLERANCE / 2) >= hi - o (so the biases -o - K n / 2 are exact): on the leaf's
path h = v - o and g = 1, anywhere else both are 0 (exactly, for conditions +/-1), so the
sum over leaves is the selected leaf. A constant leaf needs only g. A path on which one
condition appears with both polarities never holds and is dropped; a repeated literal counts
once. Cost: one MLP chain of (width + 1) neurons per leaf (the gate only where some offset is
non-zero) instead of one chain per level.

Precision: the chain's float32 rounding over the operands' value ranges
(`twdialect.f32_error.mlp_error_bound`, integers where `integer_components` says so) must stay
within `tolerance` relative to max(1, |output|), as `decompose` demands of a select; a tree that
does not (or whose leaves have unbounded ranges, or ranges beyond SELECT_MAX_MAGNITUDE) is left
to `decompose`, select by select. `dtype` "float64" bounds float64's rounding instead
(`compile(dtype=)` sets it, as for `decompose`).

Inner selects left without uses are erased; the leaves and conditions are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from tw_passes import PassOptionError
from tw_passes.graph_pass import GraphPass
from twdialect.contracts import (DEFAULT_TOLERANCE, SELECT_COND_TOLERANCE, SELECT_MAX_MAGNITUDE,
                                 ContractError, compare_params, f32)
from twdialect.dense import to_numpy
from twdialect.dialect import CompareOp, ConcatOp, GraphOp, LinearOp, MlpOp, SelectOp, width_of
from twdialect.f32_error import mlp_error_bound, mlp_exact
from twdialect.ranges import integer_components, value_ranges

MAX_LEAVES = 64
# A literal that holds is 1, one that fails is 0; within the select contract's tolerance of
# +/-1 a failing literal is still at least this (so K times it clears the leaf's range).
_FAILED_AT_LEAST = 1.0 - SELECT_COND_TOLERANCE / 2

Literal = tuple[SSAValue, bool]  # (condition, True: the condition's true branch)


@dataclass(frozen=True)
class FuseSelectTrees(GraphPass):
    """Fuse trees of `tw.select` into one MLP chain each (see the module doc)."""

    name = "fuse-select-trees"

    max_leaves: int = MAX_LEAVES
    tolerance: float = DEFAULT_TOLERANCE
    dtype: str = "float32"

    def check_options(self) -> None:
        from tw_passes.decompose import check_rounding_options

        if self.max_leaves < 2:
            raise PassOptionError(f"fuse-select-trees: max-leaves must be at least 2, got "
                                  f"{self.max_leaves}")
        check_rounding_options(self.name, self.tolerance, self.dtype, PassOptionError)

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> int:
        """Fuse every select tree of `graph` of two levels or more; returns how many."""
        from tw_passes.decompose import ROUNDING_SCALE

        if not _has_trees(graph):
            return 0
        done = fuse_select_trees(graph, value_ranges(graph, strict=False),
                                 integer_components(graph), self.max_leaves,
                                 self.tolerance / ROUNDING_SCALE[self.dtype])
        return len(done)


def _has_trees(graph: GraphOp) -> bool:
    return any(isinstance(op, SelectOp) and (_child(op.if_true) or _child(op.if_false))
               for op in graph.block.ops)


def fuse_select_trees(graph: GraphOp, ranges: dict, integers: dict,
                      max_leaves: int = MAX_LEAVES, allowed: float = DEFAULT_TOLERANCE
                      ) -> dict[SSAValue, SSAValue]:
    """Fuse the select trees of `graph` in place (the module doc), reading `ranges` and
    `integers` of the graph as it stands; returns each fused select's value -> its chain's
    value (`decompose` carries a tree's ranges over to its chain: the chain's own interval
    box is far wider than the hull of its leaves). `allowed`: the float32-scale rounding
    bound a chain may reach, relative to max(1, |output|)."""
    if not _has_trees(graph):
        return {}
    selects = [op for op in graph.block.ops
               if isinstance(op, SelectOp) and width_of(op.cond) == 1]
    signs = _Signs(ranges, integers)
    selects = [op for op in selects if signs.exact(op.cond)]
    trees: dict[Operation, list[tuple[SSAValue, tuple[Literal, ...]]]] = {}
    kids: dict[Operation, list[Operation]] = {}  # the child selects a tree absorbed
    for op in selects:  # block order: children first
        trees[op], kids[op] = _collect(op, trees, max_leaves)
    # Build only the trees whose value is read outside a tree that absorbed it (an inner
    # select read by its parent alone is computed by the parent's chain); where a build
    # fails (an unbounded leaf, rounding), the tree stays a select and its absorbed
    # children are built on their own.
    absorbed: dict[Operation, set[Operation]] = {}
    for op, ks in kids.items():
        for k in ks:
            absorbed.setdefault(k, set()).add(op)
    order = {op: i for i, op in enumerate(selects)}
    todo = [op for op in selects
            if any(u.operation not in absorbed.get(op, ()) for u in op.results[0].uses)]
    fused: dict[Operation, tuple] = {}
    while todo:
        op = todo.pop()
        if op in fused or not kids[op]:
            continue
        built = _build(op, trees[op], ranges, integers, allowed)
        if built is not None:
            fused[op] = built
        else:
            todo.extend(kids[op])
    fused = dict(sorted(fused.items(), key=lambda item: order[item[0]]))
    now: dict[SSAValue, SSAValue] = {}  # a fused select's value -> its chain's
    for op, (inputs, w1, b1, w2) in fused.items():
        now[op.results[0]] = _rewrite(op, [now.get(v, v) for v in inputs], w1, b1, w2)
    for op in reversed(selects):
        if op.parent is not None and not op.results[0].uses:
            op.detach()
            op.erase()
    return now


def _child(v: SSAValue) -> bool:
    o = v.owner
    return isinstance(o, SelectOp) and width_of(o.cond) == 1


class _Signs:
    """Which 1-wide conditions are exactly +1 or -1 at every admissible run: then the fused
    chain and decompose's select agree (both exact), so the pass changes no value, not even
    inside a compare's ramp zone. A value is on a lattice offset + step Z when it is an
    integer, or an affine form with commensurate weights over integers; it is a sign when the
    lattice points of its range are all +/-1, or when it is a compare whose operand's lattice
    puts no point in the ramp zone [t - ramp, t] (widened by float32's rounding of t)."""

    MAX_POINTS = 64

    def __init__(self, ranges, integers):
        self.ranges, self.integers = ranges, integers
        self._exact: dict[SSAValue, bool] = {}

    def exact(self, v: SSAValue) -> bool:
        if v not in self._exact:
            self._exact[v] = self._sign(v)
        return self._exact[v]

    def _sign(self, v: SSAValue) -> bool:
        op = v.owner
        if isinstance(op, CompareOp):
            lat = self.lattice(op.x)
            if lat is None:
                return False
            try:  # decompose's encoding: exact outside (min(t, t' - ramp'), max(t, t'))
                p = compare_params(op)
            except ContractError:
                return False
            t = op.threshold.value.data
            a, b = min(t, p.threshold - p.ramp), max(t, p.threshold)
            points = self.points(op.x, lat, a, b)
            return points is not None and not [x for x in points if a < x < b]
        lat = self.lattice(v)
        if lat is None or v not in self.ranges:
            return False
        lo, hi = self.ranges[v]
        points = self.points(v, lat, float(lo[0]), float(hi[0]))
        return points is not None and set(points) <= {-1.0, 1.0}

    def points(self, v: SSAValue, lattice, a: float, b: float) -> list[float] | None:
        """The lattice points of v in [a, b] within v's range (None: too many to list)."""
        offset, step = lattice
        lo, hi = self.ranges[v]
        a, b = max(a, float(lo[0])), min(b, float(hi[0]))
        if not (np.isfinite(a) and np.isfinite(b)):
            return None
        first, last = int(np.ceil((a - offset) / step)), int(np.floor((b - offset) / step))
        if last - first + 1 > self.MAX_POINTS:
            return None
        return [offset + k * step for k in range(first, last + 1)]

    def lattice(self, v: SSAValue) -> tuple[float, float] | None:
        """(offset, step) with v in offset + step Z (1-wide v), or None."""
        if width_of(v) != 1:
            return None
        op = v.owner
        if not isinstance(op, LinearOp):  # (a linear's own lattice is finer: 2c - 1 is odd)
            ints = self.integers.get(v)
            return (0.0, 1.0) if ints is not None and ints[0] else None
        w = to_numpy(op.weight)[:, 0]
        b = 0.0 if op.bias is None else float(to_numpy(op.bias)[0])
        used = np.flatnonzero(w)
        ints = self.integers.get(op.x)
        if ints is None or not ints[used].all():
            own = self.integers.get(v)
            return (0.0, 1.0) if own is not None and own[0] else None
        if not used.size:
            return b, 1.0
        step = float(np.abs(w[used]).min())
        if not np.all(np.abs(w[used] / step - np.round(w[used] / step)) < 1e-9):
            return None
        return b, step


def _collect(op: SelectOp, trees: dict, max_leaves: int):
    """(leaves of `op`'s tree, the child selects it absorbed): each leaf a value and its
    path's literals (contradictory paths dropped, repeated literals once)."""
    out: list[tuple[SSAValue, tuple[Literal, ...]]] = []
    deep: list[Operation] = []
    for branch, polarity in ((op.if_true, True), (op.if_false, False)):
        sub = trees.get(branch.owner) if _child(branch) else None
        room = max_leaves - len(out) - (1 if polarity else 0)  # the false branch's own leaf
        if sub is not None and len(sub) <= room:
            deep.append(branch.owner)
            for value, lits in sub:
                path = _join((op.cond, polarity), lits)
                if path is not None:
                    out.append((value, path))
        else:
            out.append((branch, ((op.cond, polarity),)))
    return out, deep


def _join(lit: Literal, lits: tuple[Literal, ...]) -> tuple[Literal, ...] | None:
    for cond, polarity in lits:
        if cond is lit[0]:
            return lits if polarity == lit[1] else None
    return (lit,) + lits


def _build(op: SelectOp, leaves, ranges, integers, allowed: float):
    """(inputs, w1, b1, w2) of the fused chain, or None where a leaf's range is unbounded or
    too wide, or the float32 bound exceeds `allowed`."""
    n = width_of(op.out)
    inputs: list[SSAValue] = []
    rows: dict[SSAValue, int] = {}

    def row(v: SSAValue) -> int:
        if v not in rows:
            rows[v] = sum(width_of(u) for u in inputs)
            inputs.append(v)
        return rows[v]

    cols_w1: list[np.ndarray] = []
    b1: list[float] = []
    w2: list[np.ndarray] = []
    for value, lits in leaves:
        lo, hi = ranges[value]
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))) or \
                max(np.abs(lo).max(), np.abs(hi).max()) > SELECT_MAX_MAGNITUDE:
            return None
        o = np.floor(lo)  # an integer offset: o and the biases -o - K n / 2 stay exact
        k = _pow2_ceil(np.maximum((hi - o) / _FAILED_AT_LEAST, 1.0))
        # sum of failing parts n - sum l: true literal (1 - c) / 2, false literal (1 + c) / 2
        fail_rows = [(row(c), -0.5 if pol else 0.5) for c, pol in lits]
        fail_const = 0.5 * len(lits)
        entries = []  # (sparse w1 column, bias, w2 row)
        for j in range(n):
            if lo[j] == hi[j]:
                continue  # constant component: the gate carries it
            col = {row(value) + j: 1.0}
            for r, s in fail_rows:
                col[r] = col.get(r, 0.0) - k[j] * s
            out = np.zeros(n)
            out[j] = 1.0
            entries.append((col, -o[j] - k[j] * fail_const, out))
        gate_out = np.where(lo == hi, lo, o)
        if np.any(gate_out != 0):
            col = {}
            for r, s in fail_rows:
                col[r] = col.get(r, 0.0) - s
            entries.append((col, 1.0 - fail_const, gate_out.astype(np.float64)))
        for col, bias, out in entries:
            cols_w1.append(col)
            b1.append(bias)
            w2.append(out)
    width = sum(width_of(u) for u in inputs)
    w1 = np.zeros((width, len(cols_w1)))
    for i, col in enumerate(cols_w1):
        for r, v in col.items():
            w1[r, i] = v
    b1a, w2a = np.array(b1, dtype=np.float64), np.array(w2, dtype=np.float64).reshape(-1, n)
    for a in (w1, b1a, w2a):
        if not np.array_equal(f32(a), a):
            return None  # a cancellation would round: leave the tree to decompose
    lo = np.concatenate([ranges[u][0] for u in inputs])
    hi = np.concatenate([ranges[u][1] for u in inputs])
    ints = np.concatenate([integers.get(u, np.zeros(width_of(u), dtype=bool)) for u in inputs])
    if ints.all() and mlp_exact(w1, b1a, w2a, None, lo, hi, ints):
        return inputs, w1, b1a, w2a  # integer leaves and conditions: no rounding at all
    bound = mlp_error_bound(w1, b1a, w2a, np.zeros(n), lo, hi, ints)
    olo, ohi = ranges[op.out]
    scale = np.maximum(1.0, np.maximum(np.abs(olo), np.abs(ohi)))
    with np.errstate(all="ignore"):
        rel = float(np.nan_to_num(bound / scale, nan=np.inf).max(initial=0.0))
    if rel > allowed:
        return None
    return inputs, w1, b1a, w2a


def _pow2_ceil(x: np.ndarray) -> np.ndarray:
    return np.exp2(np.ceil(np.log2(x)))


def _rewrite(op: SelectOp, inputs: list[SSAValue], w1, b1, w2) -> SSAValue:
    new: list[Operation] = []
    if len(inputs) == 1:
        x = inputs[0]
    else:
        cat = ConcatOp(inputs)
        new.append(cat)
        x = cat.results[0]
    mlp = MlpOp(x, w1 + 0.0, w2 + 0.0, b1=b1 + 0.0 if np.any(b1 != 0) else None)
    new.append(mlp)
    Rewriter.insert_op(new, InsertPoint.before(op))
    if op.results[0].name_hint:
        mlp.results[0].name_hint = op.results[0].name_hint
    op.results[0].replace_all_uses_with(mlp.results[0])
    return mlp.results[0]
