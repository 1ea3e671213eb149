"""`horizontal-fuse`: independent head-costing ops at the same depth become one op.

Every standalone `tw.linear` and every `tw.attn` costs at least one attention head, however
narrow it is, so k scalar affine ops at the same depth cost k heads. This pass merges them:

* **Linears.** Standalone linears that sit in the same critical-path slot become one linear
  over `concat` of their (distinct) inputs with a block matrix (block-diagonal when the inputs
  are distinct; ops reading the same input share its rows), and every original result is
  re-read through a free `tw.slice` view. A group's input width is capped at `d-head`, so it
  costs one head: k scalar ops cost ceil(k / min(d-head, max-group)) heads instead of k.
* **Attention.** `tw.attn` ops reading the same query and key values with identical Wq and Wk
  compute the same softmax weights, so one attention whose Wv and Wo are block-diagonal carries
  all of their values (up to `d-head` bundled value columns per group); outputs are sliced.

Independence. Groups are formed inside one slot of `twdialect.analysis.critical_path`. Two ops
in the same slot have no path between them: along any def-use path slots never decrease (a free
view sits in the slot its operands become ready, every other op runs strictly after its
operands are ready), and linears and attentions themselves run strictly after their operands,
so a linear or attention reachable from another one sits in a strictly later slot. This makes
the reachability check O(1) per pair and the pass linear in the graph size.

Depth. All members of a group share slot s, so each reads only values ready by slot s - 1;
the fused op reads their union and runs in slot s as well, and each slice is ready exactly when
the original result was. The critical path cannot grow (the tests assert it).

Head dims. This project's lowering packs the head work of all linears of a sublayer into shared
heads by value dims, charging a linear min(input width, output width). A group of linears with
distinct inputs and mixed shapes could cost more dims fused than apart (4->1 plus 1->4: 2 dims
apart, 5 fused), so by default (`pooled-heads=true`) a linear joins a group only if the group's
min(inputs, outputs) stays within the sum of its members'. Groups sharing an input gain (16
negates of one x: 1 dim instead of 16); independent same-shape scalars are neutral there and
save heads under a one-head-per-op allocator.

"Standalone" excludes a linear that reads a `tw.relu` or feeds only `tw.relu`s: those belong to
MLP chains that the lowering places in the MLP sublayer, where they cost no head. A writer
feeding an accumulating add (`twdialect.analysis.accumulating_adds`) is left alone: it adds
straight into the add's columns, which a slice cannot. Ops carrying
different `tw.scope`/`tw.iteration` tags, and iteration terminals, are never merged, so the
iteration structure that `sequential-scope` reads survives.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from twdialect.analysis import (
    accumulating_adds,
    adds_into,
    critical_path,
    first_use_before_def,
    sort_block_topologically,
)
from twdialect.dense import dense, shape_of, to_numpy
from twdialect.dialect import (
    ANNOTATION,
    ITERATION,
    SCOPE,
    SCOPE_TERMINAL,
    AttnOp,
    ConcatOp,
    GraphOp,
    LinearOp,
    ReluOp,
    SliceOp,
    VecType,
    int_prop,
    width_of,
)

# Attributes are immutable and value-equal: build each width / offset once (construction
# re-runs their verifiers, which dominated the pass's run time).
_vec = lru_cache(maxsize=None)(VecType)
_offset = lru_cache(maxsize=None)(int_prop)

# Tags copied to the fused ops when every member carries the same value.
_SHARED_TAGS = (ANNOTATION, SCOPE, ITERATION)


@dataclass(frozen=True)
class HorizontalFusePass(ModulePass):
    """Merge same-slot standalone linears (and same-q/k attentions) into one head each.

    Options: `max-group` caps the number of ops in one group (0: no cap beyond `d-head`);
    `d-head` caps a linear group's total input width and an attention group's total value
    width, so each group fits one head; `pooled-heads` (default true) also refuses a linear
    group whose min(input width, output width) exceeds the sum of its members' (the cost of
    head work in a lowering that packs linears into shared heads by value dims, as ours does).
    """

    name = "horizontal-fuse"

    max_group: int = 16
    d_head: int = 16
    pooled_heads: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.d_head < 1:
            raise ValueError(f"horizontal-fuse: d-head must be at least 1, got {self.d_head}")
        if self.max_group < 0:
            raise ValueError(f"horizontal-fuse: max-group must be >= 0, got {self.max_group}")
        for graph in [g for g in op.body.block.ops if isinstance(g, GraphOp)]:
            fuse_graph(graph, self.max_group or self.d_head, self.d_head, self.pooled_heads)


def fuse_graph(graph: GraphOp, max_group: int, d_head: int, pooled: bool = True) -> int:
    """Fuse one graph in place; returns the number of groups formed."""
    slots = critical_path(graph).slots
    linear_groups, attn_groups = _collect_groups(graph, slots, max_group, d_head, pooled)
    for group in linear_groups:
        _fuse_linears(group)
    for group in attn_groups:
        _fuse_attns(group)
    if (linear_groups or attn_groups) and first_use_before_def(graph.block) is not None:
        # The fused op sits where the last member was; consumers of earlier members that came
        # before it move after it (stable Kahn order, deterministic).
        sort_block_topologically(graph.block)
    return len(linear_groups) + len(attn_groups)


# --------------------------------------------------------------------------------------
# Grouping: one block walk, buckets keyed by slot (+ scope tags, + q/k for attention)
# --------------------------------------------------------------------------------------


def _tags(op: Operation) -> tuple[Attribute | None, Attribute | None]:
    return (op.attributes.get(SCOPE), op.attributes.get(ITERATION))


def _is_standalone_linear(op: LinearOp) -> bool:
    if isinstance(op.x.owner, ReluOp):
        return False
    uses = list(op.out.uses)
    return not (uses and all(isinstance(u.operation, ReluOp) for u in uses))


class _Bucket:
    """Greedy packing of the candidates of one bucket, in block order."""

    def __init__(self, max_group: int, d_head: int, pooled: bool = False):
        self.max_group = max_group
        self.d_head = d_head
        self.pooled = pooled
        self.groups: list[list[Operation]] = []
        self._reset()

    def _reset(self) -> None:
        self.current: list[Operation] = []
        self.seen_inputs: set[SSAValue] = set()
        self.width = 0  # distinct input columns (attention: value columns)
        self.out_width = 0
        self.member_dims = 0  # sum over members of min(input width, output width)

    def add(self, op: Operation, inputs: tuple[SSAValue, ...], fixed_cost: int | None = None,
            out_width: int = 0) -> None:
        """Pack `op`, which reads the distinct values `inputs` and writes `out_width` columns.
        Its width cost is `fixed_cost` (attention: its value width) or the width of the inputs
        the group does not read yet."""

        def cost() -> int:
            if fixed_cost is not None:
                return fixed_cost
            return sum(width_of(v) for v in inputs if v not in self.seen_inputs)

        own_dims = min(sum(width_of(v) for v in inputs), out_width)

        def inflates() -> bool:
            # A lowering that pools head work by value dims charges a linear
            # min(inputs, outputs): the group must not cost more than its members did.
            if not self.pooled or fixed_cost is not None:
                return False
            return min(self.width + cost(), self.out_width + out_width) > \
                self.member_dims + own_dims

        if self.current and (len(self.current) >= self.max_group
                             or self.width + cost() > self.d_head or inflates()):
            self._close()
        self.width += cost()
        self.out_width += out_width
        self.member_dims += own_dims
        self.current.append(op)
        self.seen_inputs.update(inputs)

    def _close(self) -> None:
        if len(self.current) >= 2:
            self.groups.append(self.current)
        self._reset()

    def finish(self) -> list[list[Operation]]:
        self._close()
        return self.groups


def _feeds_accumulating_add(op: Operation, accumulating: set[Operation]) -> bool:
    return any(use.operation in accumulating for use in op.results[0].uses)


def _collect_groups(graph: GraphOp, slots: dict[Operation, int], max_group: int, d_head: int,
                    pooled: bool):
    linear_buckets: dict[tuple, _Bucket] = {}
    attn_buckets: dict[tuple, _Bucket] = {}
    # A writer adding straight into an accumulating add's columns makes that add free (and an
    # add into a dying addend needs that addend to be a writer's own result); read through a
    # slice it would not be, and the add would cost a slot: leave those writers.
    accumulating = accumulating_adds(graph)
    accumulating |= {add for add, addend in adds_into(graph, accumulating).items()}
    for op in graph.block.ops:
        if not isinstance(op, (LinearOp, AttnOp)) or SCOPE_TERMINAL in op.attributes \
                or _feeds_accumulating_add(op, accumulating):
            continue
        if isinstance(op, LinearOp):
            if not _is_standalone_linear(op) or width_of(op.x) > d_head:
                continue
            key = (slots[op],) + _tags(op)
            bucket = linear_buckets.setdefault(key, _Bucket(max_group, d_head, pooled))
            bucket.add(op, (op.x,), out_width=width_of(op.out))
        else:
            d_v = shape_of(op.wv)[1]
            if d_v > d_head:
                continue
            # Values are hashable and compare by identity: same q/k *values*, same weights.
            key = (slots[op], op.query, op.key, op.wq, op.wk) + _tags(op)
            bucket = attn_buckets.setdefault(key, _Bucket(max_group, d_head))
            bucket.add(op, (op.value,), d_v)
    linear_groups = [g for b in linear_buckets.values() for g in b.finish()]
    attn_groups = [g for b in attn_buckets.values() for g in b.finish()]
    return linear_groups, attn_groups


# --------------------------------------------------------------------------------------
# Rewrites
# --------------------------------------------------------------------------------------


def _copy_shared_tags(members: list[Operation], new_ops: list[Operation]) -> None:
    for tag in _SHARED_TAGS:
        values = [m.attributes.get(tag) for m in members]
        if values[0] is not None and all(v == values[0] for v in values):
            for op in new_ops:
                op.attributes[tag] = values[0]


def _concat_of(values: list[SSAValue]) -> tuple[SSAValue, list[Operation], dict[SSAValue, int]]:
    """One value holding `values` side by side (a concat unless there is only one), and the
    row offset of each value in it."""
    offsets: dict[SSAValue, int] = {}
    at = 0
    for v in values:
        offsets[v] = at
        at += width_of(v)
    if len(values) == 1:
        return values[0], [], offsets
    cat = ConcatOp.create(operands=values, result_types=[_vec(at)])
    return cat.out, [cat], offsets


def _slices_for(fused: SSAValue, members: list[Operation]) -> list[SliceOp]:
    slices = []
    at = 0
    for m in members:
        w = width_of(m.results[0])
        s = SliceOp.create(operands=[fused], result_types=[_vec(w)],
                           properties={"start": _offset(at)})
        if m.results[0].name_hint:
            s.out.name_hint = m.results[0].name_hint
        slices.append(s)
        at += w
    return slices


def _replace_members(members: list[Operation], new_ops: list[Operation],
                     slices: list[SliceOp]) -> None:
    # Insert at the last member: every member's operands are defined before it.
    last = members[-1]
    Rewriter.insert_op(new_ops + slices, InsertPoint.before(last))
    for m, s in zip(members, slices):
        m.results[0].replace_all_uses_with(s.out)
    for m in members:
        Rewriter.erase_op(m)


def _fuse_linears(members: list[Operation]) -> None:
    inputs = list(dict.fromkeys(m.x for m in members))
    x, prefix, offsets = _concat_of(inputs)
    widths = [width_of(m.out) for m in members]
    total_out = sum(widths)
    matrix = np.zeros((width_of(x), total_out))
    bias = np.zeros(total_out)
    has_bias = False
    col = 0
    for m, w in zip(members, widths):
        row = offsets[m.x]
        matrix[row:row + width_of(m.x), col:col + w] = to_numpy(m.weight)
        if m.bias is not None:
            bias[col:col + w] = to_numpy(m.bias)
            has_bias = True
        col += w
    props = {"weight": dense(matrix)}
    if has_bias:
        props["bias"] = dense(bias)
    fused = LinearOp.create(operands=[x], result_types=[_vec(total_out)], properties=props)
    slices = _slices_for(fused.out, members)
    _copy_shared_tags(members, prefix + [fused] + slices)
    _replace_members(members, prefix + [fused], slices)


def _fuse_attns(members: list[Operation]) -> None:
    first = members[0]
    values = list(dict.fromkeys(m.value for m in members))
    v, prefix, offsets = _concat_of(values)
    dvs = [shape_of(m.wv)[1] for m in members]
    outs = [width_of(m.out) for m in members]
    wv = np.zeros((width_of(v), sum(dvs)))
    wo = np.zeros((sum(dvs), sum(outs)))
    col_v = col_o = 0
    for m, dv, o in zip(members, dvs, outs):
        row = offsets[m.value]
        wv[row:row + width_of(m.value), col_v:col_v + dv] = to_numpy(m.wv)
        wo[col_v:col_v + dv, col_o:col_o + o] = to_numpy(m.wo)
        col_v += dv
        col_o += o
    fused = AttnOp.create(operands=[first.query, first.key, v],
                          result_types=[_vec(sum(outs))],
                          properties={"wq": first.wq, "wk": first.wk, "wv": dense(wv),
                                      "wo": dense(wo)})
    slices = _slices_for(fused.out, members)
    _copy_shared_tags(members, prefix + [fused] + slices)
    _replace_members(members, prefix + [fused], slices)


__all__ = ["HorizontalFusePass", "fuse_graph"]
