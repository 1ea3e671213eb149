"""`select-tree-to-pwl2d`: a tree of selects over compares of two scalars becomes one table.

A depth-k tree of `tw.select` costs a compare chain plus k select chains on the critical path.
When every condition is `tw.compare` of one of at most two scalar values x, y and every leaf is
a function that is linear on each cell of the threshold grid, the whole tree is a
piecewise-linear function of (x, y): one `tw.piecewise_linear_2d` (two MLP chains), or one
`tw.piecewise_linear` (one chain) when only x occurs.

Accepted leaves (each `!tw.vec<N>` like the tree): `tw.literal`; `tw.piecewise_linear` of x or
y; `tw.linear` of x, of y, or of `concat(x, y)` (affine); x or y itself. Products of x and y
are not linear on a triangle, so nothing else is accepted.

Contract. The oracle's compare is a hard step at threshold t; its decomposition is exact
outside the ramp zone (t - ramp, t). For each compare this pass puts grid lines at b_lo and
b_hi, the f32 numbers just inside [t - ramp, t], and decides the compare at a grid vertex g as
g >= b_hi. A point outside every ramp zone lies in a grid cell whose vertices all make the
oracle's decisions, so there the table interpolates the chosen leaf, which is linear on the
cell's triangles (leaf breakpoints are grid lines too): the result equals the oracle up to f32
rounding of the table. Inside a ramp zone the result ramps between the branches, as the
decomposed compare does. Beyond the grid the table is constant, so a tree with an affine leaf
needs the value range of that leaf's variable (`twdialect.ranges`, sound boxes propagated from
the declared `tw.input` ranges); without a finite range it is left alone.

Conditions: inner selects and compares must have no uses outside the tree (they disappear);
the grid has at most `max-breakpoints` lines per axis; the replacement must not sit in a later
critical-path slot than the root did. Leaves that become dead are erased.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from twdialect.analysis import MLP, critical_path, next_slot
from twdialect.dense import dense, to_numpy
from twdialect.dialect import (
    CompareOp,
    ConcatOp,
    GraphOp,
    LinearOp,
    LiteralOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    SelectOp,
    SliceOp,
    VecType,
    width_of,
)
from twdialect.interp import pwl_1d
from twdialect.ranges import RangeError, value_ranges


@dataclass(frozen=True)
class SelectTreeToPwl2dPass(ModulePass):
    """Rewrite each maximal eligible select tree into one piecewise-linear table op.

    Option `max-breakpoints`: most grid lines per axis (the table has at most its square
    entries per output column)."""

    name = "select-tree-to-pwl2d"

    max_breakpoints: int = 64

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.max_breakpoints < 2:
            raise ValueError("select-tree-to-pwl2d: max-breakpoints must be at least 2, got "
                             f"{self.max_breakpoints}")
        for graph in [g for g in op.body.block.ops if isinstance(g, GraphOp)]:
            rewrite_graph(graph, self.max_breakpoints)


# --------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------


class _Reject(Exception):
    """The tree is not eligible (the reason is kept for debugging)."""


@dataclass
class _Leaf:
    kind: str  # "const" | "affine" | "pwl"
    value: SSAValue
    variables: tuple[SSAValue, ...] = ()
    # const: (N,); affine: weight (len(variables), N) and bias (N,); pwl: breakpoints, values
    data: tuple[np.ndarray, ...] = ()


@dataclass
class _Tree:
    root: SelectOp
    selects: list[SelectOp] = field(default_factory=list)
    compares: list[CompareOp] = field(default_factory=list)
    leaves: dict[SSAValue, _Leaf] = field(default_factory=dict)
    variables: list[SSAValue] = field(default_factory=list)

    def add_variable(self, v: SSAValue) -> None:
        if v not in self.variables:
            if len(self.variables) == 2:
                raise _Reject("more than two scalar variables")
            self.variables.append(v)


def _affine_forms(value: SSAValue, width: int):
    """Ways to write `value` as an affine function of one or two scalars, walking down a chain
    of linears: ([(s, W, b)] for each scalar s on the chain, shallowest first;
    ((s1, s2), W, b) if the chain ends in a linear of concat(s1, s2), else None)."""
    chain: list[tuple[SSAValue, np.ndarray, np.ndarray]] = []
    w, b = np.eye(width), np.zeros(width)  # value == current @ w + b
    current = value
    while True:
        if width_of(current) == 1:
            chain.append((current, w, b))
        owner = current.owner
        if not isinstance(owner, LinearOp):
            return chain, None
        m = to_numpy(owner.weight)
        bias = to_numpy(owner.bias) if owner.bias is not None else np.zeros(m.shape[1])
        w, b = m @ w, bias @ w + b
        current = owner.x
        if width_of(current) != 1:
            cat = current.owner
            if isinstance(cat, ConcatOp) and len(cat.ins) == 2 and \
                    all(width_of(v) == 1 for v in cat.ins) and cat.ins[0] is not cat.ins[1]:
                return chain, (tuple(cat.ins), w, b)
            return chain, None


def _classify_leaf(value: SSAValue, width: int, variables: list[SSAValue]) -> _Leaf:
    owner = value.owner
    if isinstance(owner, LiteralOp):
        return _Leaf("const", value, (), (to_numpy(owner.value),))
    if isinstance(owner, PiecewiseLinearOp):
        return _Leaf("pwl", value, (owner.x,),
                     (to_numpy(owner.breakpoints), to_numpy(owner.values)))
    chain, pair = _affine_forms(value, width)
    # Prefer a variable the tree already has; else the deepest form (the same for every leaf
    # on one chain, so such leaves share their variables).
    for base, w, b in chain:
        if base in variables:
            return _Leaf("affine", value, (base,), (w, b))
    if pair is not None:
        return _Leaf("affine", value, pair[0], (pair[1], pair[2]))
    if chain:
        base, w, b = chain[-1]
        return _Leaf("affine", value, (base,), (w, b))
    raise _Reject(f"leaf {owner.name if isinstance(owner, Operation) else 'argument'} "
                  "is not piecewise linear in the tree's scalars")


def _match(root: SelectOp) -> _Tree:
    tree = _Tree(root)
    members: set[Operation] = set()
    width = width_of(root.out)
    leaf_values: list[SSAValue] = []
    stack = [root]
    while stack:
        sel = stack.pop()
        if sel in members:
            continue  # shared sub-tree
        members.add(sel)
        tree.selects.append(sel)
        cmp_op = sel.cond.owner
        if not isinstance(cmp_op, CompareOp) or width_of(cmp_op.x) != 1:
            raise _Reject("condition is not a compare of a scalar")
        if cmp_op not in members:
            members.add(cmp_op)
            tree.compares.append(cmp_op)
            tree.add_variable(cmp_op.x)
        for branch in (sel.if_true, sel.if_false):
            if isinstance(branch.owner, SelectOp):
                stack.append(branch.owner)
            elif branch not in leaf_values:
                leaf_values.append(branch)
    # Leaves after compares, so a leaf on a chain of scalar linears through a compared variable
    # is written in that variable (a computed variable is not replaced by its input).
    # Leaves with a fixed form (constants, tables, linears of concat(s1, s2)) first: leaves on
    # a chain of scalar linears can then pick a variable those already introduced.
    def flexible(value: SSAValue) -> bool:
        if isinstance(value.owner, (LiteralOp, PiecewiseLinearOp)):
            return False
        chain, pair = _affine_forms(value, width)
        return pair is None and bool(chain)

    for value in sorted(leaf_values, key=flexible):
        leaf = _classify_leaf(value, width, tree.variables)
        for v in leaf.variables:
            tree.add_variable(v)
        tree.leaves[value] = leaf
    # Intermediate values must be private to the tree: they are erased.
    for op in tree.selects[1:] + tree.compares:
        for use in op.results[0].uses:
            if use.operation not in members:
                raise _Reject("an intermediate select/compare has a use outside the tree")
    return tree


# --------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------


# Comparisons in float64: numpy 2 would compare a float32 with a Python float in float32.
def _f32_at_most(x: float) -> float:
    f = np.float32(x)
    return float(f) if float(f) <= x else float(np.nextafter(f, np.float32(-np.inf)))


def _f32_at_least(x: float) -> float:
    f = np.float32(x)
    return float(f) if float(f) >= x else float(np.nextafter(f, np.float32(np.inf)))


def _step_points(cmp_op: CompareOp) -> tuple[float, float]:
    """(b_lo, b_hi): f32 grid lines inside [t - ramp, t] reproducing the compare's ramp."""
    t, r = cmp_op.threshold.value.data, cmp_op.ramp.value.data
    b_lo, b_hi = _f32_at_least(t - r), _f32_at_most(t)
    if not b_lo < b_hi:
        raise _Reject("ramp narrower than f32 resolution")
    return b_lo, b_hi


def _axis(tree: _Tree, var: SSAValue, ranges, max_bp: int) -> np.ndarray:
    points: list[float] = []
    for c in tree.compares:
        if c.x is var:
            points.extend(_step_points(c))
    unbounded = False
    for leaf in tree.leaves.values():
        if leaf.kind == "pwl" and leaf.variables[0] is var:
            points.extend(leaf.data[0].tolist())
        elif leaf.kind == "affine" and var in leaf.variables:
            unbounded = True
    if unbounded:
        box = ranges()
        lo, hi = box[var] if box is not None else ([np.inf], [np.inf])
        if not (np.isfinite(lo[0]) and np.isfinite(hi[0])):
            raise _Reject("an affine leaf's variable has no finite value range")
        points.extend([_f32_at_most(lo[0]), _f32_at_least(hi[0])])
    axis = np.unique(np.asarray(points, dtype=np.float32)).astype(np.float64)
    if axis.size < 2:
        axis = np.array([axis[0], float(np.nextafter(np.float32(axis[0]), np.float32(np.inf)))])
    if axis.size > max_bp:
        raise _Reject(f"{axis.size} grid lines exceed max-breakpoints={max_bp}")
    return axis


def _tabulate(tree: _Tree, coords: dict[SSAValue, np.ndarray]) -> np.ndarray:
    """The tree's value at every grid vertex (rows), deciding each compare as g >= b_hi."""
    n = next(iter(coords.values())).shape[0]
    width = width_of(tree.root.out)
    memo: dict[SSAValue, np.ndarray] = {}

    def leaf_value(leaf: _Leaf) -> np.ndarray:
        if leaf.kind == "const":
            return np.broadcast_to(leaf.data[0], (n, width))
        if leaf.kind == "pwl":
            return pwl_1d(coords[leaf.variables[0]], *leaf.data)
        w, b = leaf.data
        return np.stack([coords[v] for v in leaf.variables], axis=1) @ w + b

    def value(v: SSAValue) -> np.ndarray:
        if v in memo:
            return memo[v]
        sel = v.owner
        if isinstance(sel, SelectOp) and v not in tree.leaves:
            c = sel.cond.owner
            decide = coords[c.x] >= _step_points(c)[1]
            out = np.where(decide[:, None], value(sel.if_true), value(sel.if_false))
        else:
            out = leaf_value(tree.leaves[v])
        memo[v] = out
        return out

    return value(tree.root.out)


def _replacement(tree: _Tree, ranges, max_bp: int) -> Operation:
    axes = [_axis(tree, v, ranges, max_bp) for v in tree.variables]
    width = width_of(tree.root.out)
    if len(axes) == 1:
        xs = axes[0]
        values = _tabulate(tree, {tree.variables[0]: xs})
        return PiecewiseLinearOp.create(
            operands=[tree.variables[0]], result_types=[VecType(width)],
            properties={"breakpoints": dense(xs), "values": dense(values)})
    xs, ys = axes
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    flat = _tabulate(tree, {tree.variables[0]: gx.reshape(-1), tree.variables[1]: gy.reshape(-1)})
    table = flat.reshape(xs.size, ys.size, width)
    return PiecewiseLinear2dOp.create(
        operands=list(tree.variables), result_types=[VecType(width)],
        properties={"xs": dense(xs), "ys": dense(ys), "table": dense(table)})


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def rewrite_graph(graph: GraphOp, max_bp: int = 64) -> int:
    """Rewrite every eligible tree in `graph`, roots first; returns how many were rewritten."""
    ops = list(graph.block.ops)
    index = {op: i for i, op in enumerate(ops)}
    cp = critical_path(graph)
    cached: list = []

    def ranges():
        # Sound boxes from the declared input ranges (infinite where a bound overflows).
        if not cached:
            try:
                cached.append(value_ranges(graph, strict=False))
            except RangeError:
                cached.append(None)
        return cached[0]

    erased: set[Operation] = set()
    count = 0
    # Reverse block order visits a tree's root before its inner selects; trees rewritten later
    # lie earlier in the block and cannot read a rewritten root, so `cp` stays valid for them.
    for root in reversed(ops):
        if not isinstance(root, SelectOp) or root in erased:
            continue
        try:
            tree = _match(root)
            new = _replacement(tree, ranges, max_bp)
        except _Reject:
            continue
        ready = max(cp.ready[v] for v in tree.variables)
        if next_slot(ready, MLP) + 2 * (len(tree.variables) - 1) > cp.slots[root]:
            continue  # would deepen the graph (a leaf variable is ready late)
        new.attributes.update(root.attributes)
        if root.out.name_hint:
            new.results[0].name_hint = root.out.name_hint
        Rewriter.insert_op(new, InsertPoint.before(root))
        root.out.replace_all_uses_with(new.results[0])
        dead = sorted(tree.selects + tree.compares, key=index.__getitem__, reverse=True)
        for op in dead:
            Rewriter.erase_op(op)
            erased.add(op)
        _erase_dead_leaves(tree, index, erased)
        count += 1
    return count


def _erase_dead_leaves(tree: _Tree, index: dict[Operation, int], erased: set) -> None:
    """Leaf ops that only fed the tree are pure and now dead; so are the linears and concats
    below them that only fed those (walked down, latest first)."""
    prunable = (LiteralOp, LinearOp, PiecewiseLinearOp, ConcatOp, SliceOp)
    work = [leaf.value.owner for leaf in tree.leaves.values()]
    while work:
        work = [op for op in dict.fromkeys(work) if isinstance(op, prunable)
                and op not in erased and op in index and not op.results[0].uses]
        work.sort(key=index.__getitem__, reverse=True)
        below = []
        for op in work:
            below.extend(v.owner for v in op.operands)
            Rewriter.erase_op(op)
            erased.add(op)
        work = below


__all__ = ["SelectTreeToPwl2dPass", "rewrite_graph"]
