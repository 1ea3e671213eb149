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

Conditions: inner selects and compares must have no uses outside the tree (they disappear)
and must not be x or y (a compare of an inner select, a compare read as a branch: the table
reads x and y); the grid has at most `max-breakpoints` lines per axis; the replacement must
not sit in a later critical-path slot than the root did. Leaves that become dead are erased.

Cost. A candidate root costs its walk, which stops at the first rejection it can see (a third
variable, too many compare lines, an inner value read outside the tree), so the inner selects
of a chain rejected for those reasons do not each walk the whole chain. The whole-graph
analyses run once and only on need: the critical path once a tree matches, the value ranges
once a tree has an affine leaf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from xdsl.context import Context
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from tw_passes import PassOptionError
from tw_passes.graph_pass import GraphPass
from twdialect.analysis import MLP, CriticalPath, critical_path, earliest_slot
from twdialect.dense import to_numpy
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
    width_of,
)
from twdialect.interp import pwl_1d
from twdialect.ranges import RangeError, value_ranges


@dataclass(frozen=True)
class SelectTreeToPwl2dPass(GraphPass):
    """Rewrite each maximal eligible select tree into one piecewise-linear table op.

    Option `max-breakpoints`: most grid lines per axis (the table has at most its square
    entries per output column)."""

    name = "select-tree-to-pwl2d"

    max_breakpoints: int = 64

    def check_options(self) -> None:
        if self.max_breakpoints < 2:
            raise PassOptionError("select-tree-to-pwl2d: max-breakpoints must be at least 2, got "
                                  f"{self.max_breakpoints}")

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> int:
        """Rewrite every eligible tree in `graph`, roots first; returns how many were
        rewritten."""
        max_bp = self.max_breakpoints
        ops = list(graph.block.ops)
        analyses = _Analyses(graph)
        count = 0
        # Reverse block order visits a tree's root before its inner selects; trees rewritten
        # later lie earlier in the block and cannot read a rewritten root, so the critical path
        # and the ranges of their variables stay those of the graph as found.
        for root in reversed(ops):
            if not isinstance(root, SelectOp) or root.parent is None:  # None: erased with a tree
                continue
            try:
                tree = _match(root, max_bp)
                if _deepens(tree, analyses.critical_path):
                    continue
                new = _replacement(tree, analyses, max_bp)
            except _Reject:
                continue
            _rewrite(tree, new, graph.block)
            count += 1
        return count


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
    # Found once while matching: each compare's variable and decision line b_hi, and each
    # variable's compare grid lines (b_lo, b_hi of its compares, in compare order).
    decisions: dict[CompareOp, tuple[SSAValue, float]] = field(default_factory=dict)
    lines: dict[SSAValue, list[float]] = field(default_factory=dict)
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


def _classify_leaf(value: SSAValue, forms, variables: list[SSAValue]) -> _Leaf:
    """`forms` is `_affine_forms(value, width)` (None for literals and tables)."""
    owner = value.owner
    if isinstance(owner, LiteralOp):
        return _Leaf("const", value, (), (to_numpy(owner.value),))
    if isinstance(owner, PiecewiseLinearOp):
        return _Leaf("pwl", value, (owner.x,),
                     (to_numpy(owner.breakpoints), to_numpy(owner.values)))
    chain, pair = forms
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


def _match(root: SelectOp, max_bp: int) -> _Tree:
    """The tree under `root`, or `_Reject`. A rejection that the walk can already see (a
    third variable, more compare lines than `max_bp`, an inner value read outside the tree)
    is raised at once: in a tall chain every inner select is tried as a root in turn, and each
    try must stop early for the chain to cost linear time, not quadratic."""
    tree = _Tree(root)
    members: set[Operation] = set()
    users: list[Operation] = []  # readers of inner selects and compares: must be members
    leaf_values: dict[SSAValue, None] = {}  # an insertion-ordered set
    distinct: dict[SSAValue, set[float]] = {}  # each variable's distinct compare lines
    stack = [root]
    while stack:
        sel = stack.pop()
        if sel in members:
            continue  # shared sub-tree
        members.add(sel)
        tree.selects.append(sel)
        if sel is not root:
            _collect_users(sel, users)
        # Unpacking `operands` is several times cheaper than xDSL's named accessors.
        cond, if_true, if_false = sel.operands
        cmp_op = cond.owner
        if not isinstance(cmp_op, CompareOp):
            raise _Reject("condition is not a compare of a scalar")
        if cmp_op not in members:
            members.add(cmp_op)
            _add_compare(tree, cmp_op, distinct, max_bp)
            _collect_users(cmp_op, users)
        for branch in (if_true, if_false):
            if isinstance(branch.owner, SelectOp):
                stack.append(branch.owner)
            else:
                leaf_values[branch] = None  # a repeated leaf keeps its first place
    # Intermediate values must be private to the tree: they are erased.
    if any(user not in members for user in users):
        raise _Reject("an intermediate select/compare has a use outside the tree")
    _add_leaves(tree, list(leaf_values))
    # The table reads the variables, and every member is erased: a variable defined by a member
    # (a compare of an inner select, a compare used as a branch) would be read after erasure.
    # Such a tree is not a function of two free scalars anyway; its inner selects are tried as
    # roots of their own trees.
    if any(v.owner in members for v in tree.variables):
        raise _Reject("a scalar variable is defined inside the tree")
    return tree


def _add_compare(tree: _Tree, cmp_op: CompareOp, distinct: dict[SSAValue, set[float]],
                 max_bp: int) -> None:
    """Record a new compare of the tree: its variable, decision line and grid lines."""
    x = cmp_op.operands[0]
    if width_of(x) != 1:
        raise _Reject("condition is not a compare of a scalar")
    tree.compares.append(cmp_op)
    tree.add_variable(x)
    b_lo, b_hi = _step_points(cmp_op)
    tree.decisions[cmp_op] = (x, b_hi)
    tree.lines.setdefault(x, []).extend((b_lo, b_hi))
    # The variable's axis holds at least these lines, so too many of them reject already.
    seen = distinct.setdefault(x, set())
    seen.update((b_lo, b_hi))
    if len(seen) > max_bp:
        raise _Reject(f"more than max-breakpoints={max_bp} grid lines")


def _collect_users(op: Operation, users: list[Operation]) -> None:
    """Append the readers of inner `op` to `users`; a reader that is neither a select nor a
    compare can never be a member, so it rejects at once."""
    for use in op.results[0].uses:
        if not isinstance(use.operation, (SelectOp, CompareOp)):
            raise _Reject("an intermediate select/compare has a use outside the tree")
        users.append(use.operation)


def _add_leaves(tree: _Tree, leaf_values: list[SSAValue]) -> None:
    # Leaves after compares, so a leaf on a chain of scalar linears through a compared variable
    # is written in that variable (a computed variable is not replaced by its input).
    # Leaves with a fixed form (constants, tables, linears of concat(s1, s2)) first: leaves on
    # a chain of scalar linears can then pick a variable those already introduced.
    width = width_of(tree.root.out)
    forms = {v: _affine_forms(v, width) for v in leaf_values
             if not isinstance(v.owner, (LiteralOp, PiecewiseLinearOp))}

    def flexible(value: SSAValue) -> bool:
        if value not in forms:
            return False  # a literal or a table
        chain, pair = forms[value]
        return pair is None and bool(chain)

    for value in sorted(leaf_values, key=flexible):
        leaf = _classify_leaf(value, forms.get(value), tree.variables)
        for v in leaf.variables:
            tree.add_variable(v)
        tree.leaves[value] = leaf


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


def _grid_lines(points: list[float]) -> np.ndarray:
    """np.unique of the points rounded to f32, in float64. A tree has a handful of points, so
    sorting the distinct Python floats is several times cheaper than np.unique; numpy keeps
    the cases where its own order decides which equal value survives (signed zeros, NaN)."""
    rounded = np.asarray(points, dtype=np.float32).astype(np.float64).tolist()
    distinct = set(rounded)
    if any(p != p for p in distinct) or \
            (0.0 in distinct and len({math.copysign(1.0, p) for p in rounded if p == 0.0}) > 1):
        return np.unique(np.asarray(points, dtype=np.float32)).astype(np.float64)
    return np.array(sorted(distinct), dtype=np.float64)


def _axis(tree: _Tree, var: SSAValue, analyses: _Analyses, max_bp: int) -> np.ndarray:
    points = list(tree.lines.get(var, ()))
    unbounded = False
    for leaf in tree.leaves.values():
        if leaf.kind == "pwl" and leaf.variables[0] is var:
            points.extend(leaf.data[0].tolist())
        elif leaf.kind == "affine" and var in leaf.variables:
            unbounded = True
    if unbounded:
        box = analyses.ranges
        lo, hi = box[var] if box is not None else ([np.inf], [np.inf])
        if not (np.isfinite(lo[0]) and np.isfinite(hi[0])):
            raise _Reject("an affine leaf's variable has no finite value range")
        points.extend([_f32_at_most(lo[0]), _f32_at_least(hi[0])])
    axis = _grid_lines(points)
    if axis.size < 2:
        axis = np.array([axis[0], float(np.nextafter(np.float32(axis[0]), np.float32(np.inf)))])
    if axis.size > max_bp:
        raise _Reject(f"{axis.size} grid lines exceed max-breakpoints={max_bp}")
    return axis


def _leaf_value(leaf: _Leaf, coords: dict[SSAValue, np.ndarray], width: int) -> np.ndarray:
    """The leaf at the grid vertices: (n, width), or (1, width) for a constant (np.where
    broadcasts it)."""
    if leaf.kind == "const":
        return leaf.data[0].reshape(1, width)
    if leaf.kind == "pwl":
        return pwl_1d(coords[leaf.variables[0]], *leaf.data)
    w, b = leaf.data
    return np.stack([coords[v] for v in leaf.variables], axis=1) @ w + b


def _tabulate(tree: _Tree, coords: dict[SSAValue, np.ndarray]) -> np.ndarray:
    """The tree's value at every grid vertex (rows), deciding each compare as g >= b_hi."""
    width = width_of(tree.root.out)
    values = {v: _leaf_value(leaf, coords, width) for v, leaf in tree.leaves.items()}
    decide = {c: (coords[x] >= b_hi)[:, None] for c, (x, b_hi) in tree.decisions.items()}
    # Children before parents, with an explicit stack: a tall tree would pass Python's
    # recursion limit.
    stack = [tree.root]
    while stack:
        sel = stack.pop()
        out = sel.results[0]
        if out in values:
            continue  # a shared sub-tree, already done
        cond, if_true, if_false = sel.operands
        pending = [b.owner for b in (if_true, if_false) if b not in values]
        if pending:
            stack.append(sel)
            stack.extend(pending)
            continue
        values[out] = np.where(decide[cond.owner], values[if_true], values[if_false])
    return values[tree.root.results[0]]


def _replacement(tree: _Tree, analyses: _Analyses, max_bp: int) -> Operation:
    axes = [_axis(tree, v, analyses, max_bp) for v in tree.variables]
    width = width_of(tree.root.results[0])
    if len(axes) == 1:
        xs = axes[0]
        values = _tabulate(tree, {tree.variables[0]: xs})
        return PiecewiseLinearOp(tree.variables[0], xs, values)
    xs, ys = axes
    # The grid's vertices in row-major (x, y) order, as meshgrid(xs, ys, indexing="ij")
    # flattened (np.repeat: meshgrid and np.tile cost more than the rest of a small table).
    coords = {tree.variables[0]: np.repeat(xs, ys.size),
              tree.variables[1]: np.repeat(ys[None, :], xs.size, axis=0).reshape(-1)}
    table = _tabulate(tree, coords).reshape(xs.size, ys.size, width)
    return PiecewiseLinear2dOp(*tree.variables, xs, ys, table)


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


@dataclass
class _Analyses:
    """Whole-graph analyses, each run once and only on first need: a graph without an
    eligible tree pays for neither. The critical path is first needed before any rewrite;
    the ranges of a tree's variables are the same before and after rewrites of later trees
    (see `SelectTreeToPwl2dPass.run_on_graph`)."""

    graph: GraphOp

    @cached_property
    def critical_path(self) -> CriticalPath:
        return critical_path(self.graph)

    @cached_property
    def ranges(self) -> dict | None:
        # Sound boxes from the declared input ranges (infinite where a bound overflows).
        try:
            return value_ranges(self.graph, strict=False)
        except RangeError:
            return None


def _deepens(tree: _Tree, cp: CriticalPath) -> bool:
    """Whether the table would sit in a later slot than the root (a leaf variable is ready
    late). Checked before the table is built: it is the cheaper test."""
    ready = max(cp.ready[v] for v in tree.variables)
    return earliest_slot(ready, MLP, len(tree.variables)) > cp.slots[tree.root]


def _rewrite(tree: _Tree, new: Operation, block: Block) -> None:
    root, out = tree.root, tree.root.results[0]
    new.attributes.update(root.attributes)
    if out.name_hint:
        new.results[0].name_hint = out.name_hint
    Rewriter.insert_op(new, InsertPoint.before(root))
    out.replace_all_uses_with(new.results[0])
    _erase(tree.selects + tree.compares)
    _erase_dead_leaves(tree, block)


def _erase(ops: list[Operation]) -> None:
    """Erase `ops`, whose results are read by none but `ops`, in any order. Cheaper than
    `Rewriter.erase_op`, which builds an ErasedSSAValue per result even when it has no use;
    and no users-first order is needed, as every op drops its operands before the check."""
    for op in ops:
        op.detach()
        op.drop_all_references()
    if any(op.results[0].uses for op in ops):
        raise AssertionError("select-tree-to-pwl2d: an erased op still has a use")


def _erase_dead_leaves(tree: _Tree, block: Block) -> None:
    """Leaf ops that only fed the tree are pure and now dead; so are the linears and concats
    below them that only fed those (walked down)."""
    prunable = (LiteralOp, LinearOp, PiecewiseLinearOp, ConcatOp, SliceOp)
    work = [leaf.value.owner for leaf in tree.leaves.values()]
    while work:
        # Operands are not ops of the block (`parent`) when they are block arguments or when
        # they were erased already.
        work = [op for op in dict.fromkeys(work) if isinstance(op, prunable)
                and op.parent is block and not op.results[0].uses]
        below = [v.owner for op in work for v in op.operands]
        _erase(work)
        work = below


__all__ = ["SelectTreeToPwl2dPass"]
