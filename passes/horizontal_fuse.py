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

import heapq
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.ir import Block, Operation, SSAValue

from tw_passes import PassOptionError
from tw_passes.graph_pass import GraphPass
from twdialect.analysis import critical_path, is_free_add
from twdialect.dense import shape_of, to_numpy
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
    width_of,
    attn_mask,
    attn_rope,
    rope_kwargs,
)

# Tags copied to the fused ops when every member carries the same value.
_SHARED_TAGS = (ANNOTATION, SCOPE, ITERATION)


@dataclass(frozen=True)
class HorizontalFusePass(GraphPass):
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

    def check_options(self) -> None:
        if self.d_head < 1:
            raise PassOptionError(f"horizontal-fuse: d-head must be at least 1, got {self.d_head}")
        if self.max_group < 0:
            raise PassOptionError(f"horizontal-fuse: max-group must be >= 0, got {self.max_group}")

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> int:
        """Fuse one graph in place; returns the number of groups formed."""
        slots = critical_path(graph).slots
        linear_groups, attn_groups = _collect_groups(graph, slots, self.max_group or self.d_head,
                                                     self.d_head, self.pooled_heads)
        # The new ops and the readers of replaced results: the only ops that can end up reading
        # a value defined below them (by id; the dict keeps them alive).
        touched: dict[int, Operation] = {}
        for group in linear_groups:
            _fuse_linears(group, touched)
        for group in attn_groups:
            _fuse_attns(group, touched)
        if touched:
            # The fused op sits where the last member was; consumers of earlier members that
            # came before it move after it (stable Kahn order, deterministic).
            _restore_def_before_use(graph.block, touched)
        return len(linear_groups) + len(attn_groups)


# --------------------------------------------------------------------------------------
# Grouping: one block walk, buckets keyed by slot (+ scope tags, + q/k for attention)
# --------------------------------------------------------------------------------------


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

    def add(self, op: Operation, x: SSAValue, in_width: int, out_width: int = 0,
            fixed_cost: int | None = None) -> None:
        """Pack `op`, which reads `x` (`in_width` columns) and writes `out_width` columns. Its
        width cost is `fixed_cost` (attention: its value width) or `in_width` unless the group
        reads `x` already."""
        if fixed_cost is not None:
            cost = fixed_cost
        else:
            cost = 0 if x in self.seen_inputs else in_width
        own_dims = min(in_width, out_width)
        if self.current and (
                len(self.current) >= self.max_group or self.width + cost > self.d_head
                # A lowering that pools head work by value dims charges a linear
                # min(inputs, outputs): the group must not cost more than its members did.
                or (self.pooled and fixed_cost is None
                    and min(self.width + cost, self.out_width + out_width)
                    > self.member_dims + own_dims)):
            self._close()
            if fixed_cost is None:
                cost = in_width
        self.width += cost
        self.out_width += out_width
        self.member_dims += own_dims
        self.current.append(op)
        self.seen_inputs.add(x)

    def _close(self) -> None:
        if len(self.current) >= 2:
            self.groups.append(self.current)
        self._reset()

    def finish(self) -> list[list[Operation]]:
        self._close()
        return self.groups


def _collect_groups(graph: GraphOp, slots: dict[Operation, int], max_group: int, d_head: int,
                    pooled: bool):
    linear_buckets: dict[tuple, _Bucket] = {}
    attn_buckets: dict[tuple, _Bucket] = {}
    for op in graph.block.ops:
        kind = type(op)  # exact types: isinstance on xDSL ops is slow
        if kind is not LinearOp and kind is not AttnOp:
            continue
        attrs = op.attributes
        if SCOPE_TERMINAL in attrs:
            continue
        # A writer adding straight into an accumulating add's columns makes that add free
        # (and an add into a dying addend needs that addend to be a writer's own result);
        # read through a slice it would not be, and the add would cost a slot: leave those.
        # A linear feeding only relus belongs to an MLP chain (see the module docstring).
        fast_add = False
        only_relus = True
        uses = 0
        for use in op.results[0].uses:
            user = use.operation
            uses += 1
            if type(user) is not ReluOp:
                only_relus = False
                if is_free_add(user):
                    fast_add = True
                    break
        if fast_add:
            continue
        if kind is LinearOp:
            x = op.operands[0]
            if (uses and only_relus) or type(x.owner) is ReluOp:
                continue
            in_width = width_of(x)
            if in_width > d_head:
                continue
            key = (slots[op], attrs.get(SCOPE), attrs.get(ITERATION))
            bucket = linear_buckets.get(key)
            if bucket is None:
                bucket = linear_buckets[key] = _Bucket(max_group, d_head, pooled)
            bucket.add(op, x, in_width, width_of(op.results[0]))
        else:
            props = op.properties
            d_v = shape_of(props["wv"])[1]
            if d_v > d_head:
                continue
            query, key_value, value = op.operands
            # Values are hashable and compare by identity: same q/k *values*, same weights.
            # (and one mask kind and rotation: a causal and a full head family, or two with
            # different rotary settings, never share a fused op)
            key = (slots[op], query, key_value, props["wq"], props["wk"], attn_mask(op),
                   attn_rope(op),
                   attrs.get(SCOPE), attrs.get(ITERATION))
            bucket = attn_buckets.get(key)
            if bucket is None:
                bucket = attn_buckets[key] = _Bucket(max_group, d_head)
            bucket.add(op, value, width_of(value), fixed_cost=d_v)
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
    cat = ConcatOp(values)
    return cat.results[0], [cat], offsets


def _slices_for(fused: SSAValue, results: list[SSAValue], widths: list[int]) -> list[SliceOp]:
    slices = []
    at = 0
    for r, w in zip(results, widths):
        s = SliceOp(fused, at, w)
        if r.name_hint:
            s.results[0].name_hint = r.name_hint
        slices.append(s)
        at += w
    return slices


def _replace_members(members: list[Operation], results: list[SSAValue],
                     new_ops: list[Operation], slices: list[SliceOp],
                     touched: dict[int, Operation]) -> None:
    # Insert at the last member: every member's operands are defined before it.
    last = members[-1]
    block = last.parent
    assert block is not None
    for op in new_ops + slices:
        block.insert_op_before(op, last)
        touched[id(op)] = op
    for r, s in zip(results, slices):
        for use in r.uses:
            touched[id(use.operation)] = use.operation
        r.replace_all_uses_with(s.results[0])
    for m in members:
        # Erase without `Operation.erase`'s per-result placeholder values: nothing reads the
        # members any more.
        block.detach_op(m)
        m.drop_all_references()


def _fuse_linears(members: list[Operation], touched: dict[int, Operation]) -> None:
    xs = [m.operands[0] for m in members]
    results = [m.results[0] for m in members]
    x, prefix, offsets = _concat_of(list(dict.fromkeys(xs)))
    widths = [width_of(r) for r in results]
    total_out = sum(widths)
    # f32 throughout: the weights are f32 and so is the fused attribute (exact either way).
    matrix = np.zeros((width_of(x), total_out), dtype=np.float32)
    bias = np.zeros(total_out, dtype=np.float32)
    has_bias = False
    col = 0
    for m, xm, w in zip(members, xs, widths):
        props = m.properties
        row = offsets[xm]
        matrix[row:row + width_of(xm), col:col + w] = to_numpy(props["weight"], np.float32)
        b = props.get("bias")
        if b is not None:
            bias[col:col + w] = to_numpy(b, np.float32)
            has_bias = True
        col += w
    fused = LinearOp(x, matrix, bias if has_bias else None)
    slices = _slices_for(fused.results[0], results, widths)
    _copy_shared_tags(members, prefix + [fused] + slices)
    _replace_members(members, results, prefix + [fused], slices, touched)


def _fuse_attns(members: list[Operation], touched: dict[int, Operation]) -> None:
    first = members[0]
    query, key, _ = first.operands
    values = [m.operands[2] for m in members]
    results = [m.results[0] for m in members]
    v, prefix, offsets = _concat_of(list(dict.fromkeys(values)))
    dvs = [shape_of(m.properties["wv"])[1] for m in members]
    outs = [width_of(r) for r in results]
    wv = np.zeros((width_of(v), sum(dvs)), dtype=np.float32)
    wo = np.zeros((sum(dvs), sum(outs)), dtype=np.float32)
    col_v = col_o = 0
    for m, vm, dv, o in zip(members, values, dvs, outs):
        props = m.properties
        row = offsets[vm]
        wv[row:row + width_of(vm), col_v:col_v + dv] = to_numpy(props["wv"], np.float32)
        wo[col_v:col_v + dv, col_o:col_o + o] = to_numpy(props["wo"], np.float32)
        col_v += dv
        col_o += o
    fused = AttnOp(query, key, v, first.wq, first.wk, wv, wo, **rope_kwargs(first))
    slices = _slices_for(fused.results[0], results, outs)
    _copy_shared_tags(members, prefix + [fused] + slices)
    _replace_members(members, results, prefix + [fused], slices, touched)


# --------------------------------------------------------------------------------------
# Order: define before use again
# --------------------------------------------------------------------------------------


def _restore_def_before_use(block: Block, touched: dict[int, Operation]) -> None:
    """Reorder `block` exactly as `twdialect.analysis.sort_block_topologically` would (the
    stable Kahn order: always place the earliest op whose operands are all defined), in one
    walk that inspects operands only where needed and moves only the ops that must move.

    `touched` (by id) must hold every op that may read a value defined below it; all other
    ops read only values defined above them. After fusion that holds for the new ops and the
    readers of replaced results: every other op keeps its operands, and ops never change
    their relative order. An op whose operands are all placed stays where it is; one that
    is not is deferred and, once its last missing operand is placed, goes right behind it
    (deferred ops that become ready together in their old order). Readers of a deferred op
    are inspected too. O(ops) for the walk, O(log) per deferred op."""
    check = dict(touched)  # ops whose operands the walk inspects
    unplaced = set(touched)  # ids of ops not placed yet that an inspected op may read
    waiting: dict[int, list[Operation]] = {}  # id(op) -> deferred ops reading its results
    missing: dict[Operation, int] = {}  # deferred op -> operands not placed yet
    position: dict[Operation, int] = {}  # deferred op -> its old position (the tie-break)
    ready: list[tuple[int, Operation]] = []  # deferred ops now placeable
    moves: list[tuple[Operation, Operation | None]] = []  # (op, the op it goes behind)
    last: Operation | None = None

    def place(key: int) -> None:
        unplaced.discard(key)
        for w in waiting.pop(key, ()):
            missing[w] -= 1
            if not missing[w]:
                heapq.heappush(ready, (position[w], w))

    for i, op in enumerate(block.ops):
        while ready:  # all of them came before `op`
            d = heapq.heappop(ready)[1]
            moves.append((d, last))
            last = d
            place(id(d))
        key = id(op)
        if key not in check:
            last = op
            continue
        n = 0
        for v in op.operands:
            owner = id(v.owner)
            if owner in unplaced:
                waiting.setdefault(owner, []).append(op)
                n += 1
        if n:
            missing[op] = n
            position[op] = i
            unplaced.add(key)
            for r in op.results:
                for use in r.uses:
                    check[id(use.operation)] = use.operation
        else:
            last = op
            place(key)
    while ready:
        d = heapq.heappop(ready)[1]
        moves.append((d, last))
        last = d
        place(id(d))
    if len(moves) != len(missing):
        raise ValueError("the graph has a cycle")
    for d, _ in moves:
        block.detach_op(d)
    for d, behind in moves:
        if behind is None:
            first = block.first_op
            if first is None:
                block.add_op(d)
            else:
                block.insert_op_before(d, first)
        else:
            block.insert_op_after(d, behind)


__all__ = ["HorizontalFusePass"]
