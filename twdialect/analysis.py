"""Graph analyses: where each op may run, the free adds, topological order, and the
critical-path floor of the cost model.

This module is the one home of three rules every stage shares (passes estimate the floor with
them, the lowering's scheduler and weight writer place and write by them):

* **Slots** number the machine's sublayers in order: slot 2L is layer L's attention sublayer,
  slot 2L+1 its MLP sublayer; graph sources are ready at slot -1 (written before layer 0). An
  op placed in slot s makes its value readable from slot s+1 on, which is the attention -> MLP
  handoff of the seed (an attn op and the MLP chain that reads it share a layer). Ask
  `is_attention_slot`, `layer_of`, `next_slot`, `latest_slot`; never the slot's parity.
* **Placement** per op kind (`PLACEMENT`): attention, MLP, either, free, source or sink.
* **Free adds** (`free_adds`): an add whose addend is the single-use result of a writer op
  lets that writer write straight into the add's columns. With both addends so (or one a
  literal) the add *accumulates*: it is free, its addends' writers share one block of columns.
  Otherwise it adds *into* the dying addend: only the other addend is copied in (head work or
  a bypass pair), and the sum is ready once both are written.

`critical_path` applies them with unlimited capacity: the floor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from xdsl.ir import Block, Operation, SSAValue

from twdialect.dialect import (
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
    OutputOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    PosEncodingOp,
    PosTableOp,
    ReluOp,
    SelectOp,
    SliceOp,
)

ATTN, MLP, EITHER, FREE, SOURCE, SINK = "attn", "mlp", "either", "free", "source", "sink"

# --------------------------------------------------------------------------------------
# Slots
# --------------------------------------------------------------------------------------


def is_attention_slot(slot: int) -> bool:
    """Slot 2L is layer L's attention sublayer, slot 2L+1 its MLP sublayer."""
    return slot % 2 == 0


def layer_of(slot: int) -> int:
    return slot // 2


def sublayer_name(slot: int) -> str:
    """"attn" or "mlp", as placement attributes and reports spell the sublayer."""
    return "attn" if is_attention_slot(slot) else "mlp"


def layers_through(last_slot: int) -> int:
    """Layers a schedule needs whose last work runs in `last_slot` (-1: none)."""
    return layer_of(last_slot) + 1 if last_slot >= 0 else 0


def runs_in(kind: str, slot: int) -> bool:
    """Whether an op of placement `kind` may run in `slot` (only attn and mlp are bound)."""
    if kind == ATTN:
        return is_attention_slot(slot)
    if kind == MLP:
        return not is_attention_slot(slot)
    return True


def next_slot(ready: int, kind: str) -> int:
    """The first slot after `ready` where an op of `kind` can run."""
    s = ready + 1
    return s if runs_in(kind, s) else s + 1


def latest_slot(deadline: int, kind: str) -> int:
    """The last slot before `deadline` where an op of `kind` can run."""
    s = deadline - 1
    return s if runs_in(kind, s) else s - 1


def earliest_slot(ready: int, kind: str, sublayers: int = 1) -> int:
    """The slot of an op of `kind` whose operands are ready at `ready`, with unlimited
    capacity: sources before layer 0, free ops and sinks as soon as their operands, work
    in its next sublayer (an op spanning several MLP sublayers: in its last one)."""
    if kind == SOURCE:
        return -1
    if kind == FREE or kind == SINK:
        return ready
    return next_slot(ready, kind) + 2 * (sublayers - 1)


# --------------------------------------------------------------------------------------
# Placement
# --------------------------------------------------------------------------------------

# Where each op kind runs (an add may be free instead: see `free_adds`). attn: the attention
# sublayer; mlp: the MLP sublayer; either: a linear or add runs as head work in attention or
# as a bypass pair relu(z) - relu(-z) in the MLP; free: a literal (a constant written with the
# inputs or as a bias) or a view; library ops count as one MLP chain until `decompose`.
PLACEMENT: dict[type, str] = {
    AttnOp: ATTN,
    MlpOp: MLP, ReluOp: MLP, CompareOp: MLP, SelectOp: MLP, ClampOp: MLP,
    PiecewiseLinearOp: MLP, PiecewiseLinear2dOp: MLP,
    LinearOp: EITHER, AddOp: EITHER,
    LiteralOp: FREE, ConcatOp: FREE, SliceOp: FREE, AfterOp: FREE,
    InputOp: SOURCE, EmbeddingOp: SOURCE, PosEncodingOp: SOURCE, PosTableOp: SOURCE,
    OutputOp: SINK,
}

# MLP sublayers an op spans where it is more than one (piecewise_linear_2d decomposes into
# two chains).
_MLP_SUBLAYERS: dict[type, int] = {PiecewiseLinear2dOp: 2}

# The ops that write residual columns of their own (the lowering has a rule for each).
WRITER_OPS = (LinearOp, AddOp, ReluOp, MlpOp, AttnOp)


def placement_kind(op: Operation) -> str:
    """Which sublayer(s) an op may occupy (`PLACEMENT`)."""
    kind = PLACEMENT.get(type(op))  # exact-type lookup: isinstance on xDSL ops is slow
    if kind is None:
        raise ValueError(f"no placement rule for {op.name}")
    return kind


def mlp_depth(op: Operation) -> int:
    """MLP sublayers an MLP-kind op spans."""
    return _MLP_SUBLAYERS.get(type(op), 1)


# --------------------------------------------------------------------------------------
# Free adds
# --------------------------------------------------------------------------------------


def writes_in_place(v: SSAValue) -> bool:
    """A single-use result of a writer op: its writer may write straight into its reader's
    columns (the one test behind every free add)."""
    return type(v.owner) in WRITER_OPS and v.has_one_use()


def accumulates(v: SSAValue) -> bool:
    """An addend a free add reads without copying: a literal (folded into a writer's bias)
    or a value that `writes_in_place`."""
    return type(v.owner) is LiteralOp or writes_in_place(v)


def _dying_addend(op: Operation) -> SSAValue | None:
    """The addend a free add writes into (the first that `writes_in_place`), or None where
    `op` is no free add (not an add, add(x, x), or no such addend)."""
    if type(op) is not AddOp:
        return None
    lhs, rhs = op.operands
    if lhs is rhs:
        return None
    if writes_in_place(lhs):
        return lhs
    return rhs if writes_in_place(rhs) else None


@dataclass
class FreeAdds:
    """The free adds of a graph (see module docstring)."""

    accumulating: set[Operation]  # both addends accumulate: no op of its own
    into: dict[Operation, SSAValue]  # add -> the dying addend whose columns it takes


def free_adds(graph: GraphOp) -> FreeAdds:
    found = FreeAdds(set(), {})
    for op in graph.block.ops:
        addend = _dying_addend(op)
        if addend is None:
            continue
        other = op.rhs if addend is op.lhs else op.lhs
        if accumulates(other):
            found.accumulating.add(op)
        else:
            found.into[op] = addend
    return found


def accumulating_adds(graph: GraphOp) -> set[Operation]:
    """Adds whose addends' writers add straight into one shared block of columns."""
    return free_adds(graph).accumulating


def adds_into(graph: GraphOp, accumulating: set[Operation] | None = None) -> dict[Operation, SSAValue]:
    """Adds (not accumulating) with one single-use writer addend: add -> that addend.
    (`accumulating` is accepted for old callers; the answer does not depend on it.)"""
    return free_adds(graph).into


def is_free_add(op: Operation) -> bool:
    """Whether `op` is in `accumulating_adds` or `adds_into`, checked on the op alone."""
    return _dying_addend(op) is not None


# --------------------------------------------------------------------------------------
# Order
# --------------------------------------------------------------------------------------


def graph_ops(graph: GraphOp) -> list[Operation]:
    return list(graph.block.ops)


def consumers(graph: GraphOp) -> dict[SSAValue, list[Operation]]:
    """value -> ops reading it, in block order (deterministic)."""
    users: dict[SSAValue, list[Operation]] = {}
    for op in graph.block.ops:
        for v in op.operands:
            users.setdefault(v, []).append(op)
    return users


def first_use_before_def(block: Block) -> Operation | None:
    """The first op reading a value that is not defined earlier in `block` (None if ordered)."""
    defined: set[SSAValue] = set(block.args)
    for op in block.ops:
        if any(v not in defined for v in op.operands):
            return op
        defined.update(op.results)
    return None


def topo_order(ops: Iterable[Operation]) -> list[Operation]:
    """Kahn's algorithm over def-use edges among `ops`, ties broken by original order."""
    import heapq

    ops = list(ops)
    index = {op: i for i, op in enumerate(ops)}
    indeg = [0] * len(ops)
    succ: list[list[int]] = [[] for _ in ops]
    for i, op in enumerate(ops):
        for v in op.operands:
            j = index.get(v.owner) if isinstance(v.owner, Operation) else None
            if j is not None:
                indeg[i] += 1
                succ[j].append(i)
    heap = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        i = heapq.heappop(heap)
        out.append(ops[i])
        for k in succ[i]:
            indeg[k] -= 1
            if indeg[k] == 0:
                heapq.heappush(heap, k)
    if len(out) != len(ops):
        raise ValueError("the graph has a cycle")
    return out


def sort_block_topologically(block: Block) -> None:
    """Reorder `block` so every value is defined before use (stable where already ordered)."""
    order = topo_order(block.ops)
    for op in order:
        op.detach()
    block.add_ops(order)


@dataclass
class CriticalPath:
    """The floor: earliest slot of every op with unlimited capacity, and one longest chain."""

    slots: dict[Operation, int]  # op -> slot it runs in (views/sources: when ready)
    ready: dict[SSAValue, int]  # value -> last slot before it can be read
    n_layers: int  # the floor in layers (>= 1 when any op needs a sublayer)
    chain: list[Operation]  # one chain of maximal depth, source to sink
    last_slot: int = -1  # the slot by which every output is ready (dead code does not count)

    @property
    def floor(self) -> int:
        return self.n_layers


def critical_path(graph: GraphOp) -> CriticalPath:
    """Earliest slots under the placement rules; O(ops + edges)."""
    ready: dict[SSAValue, int] = {}
    slots: dict[Operation, int] = {}
    pred: dict[Operation, Operation | None] = {}
    adds = free_adds(graph)
    last = -1
    last_op: Operation | None = None
    for op in graph.block.ops:
        into_addend = adds.into.get(op)
        r, p = _last_ready_operand(op, ready, skip=into_addend)
        kind = FREE if op in adds.accumulating else PLACEMENT[type(op)]
        s = slots[op] = earliest_slot(r, kind, mlp_depth(op))
        pred[op] = p
        if into_addend is not None:  # the sum is ready once the dying addend is written too
            ready_into = ready[into_addend]
            if ready_into > s:
                pred[op] = into_addend.owner
            ready[op.results[0]] = max(s, ready_into)
            continue
        if kind == SINK and r > last:
            last, last_op = r, op
        for res in op.results:
            ready[res] = s
    chain: list[Operation] = []
    op = last_op
    while op is not None:
        chain.append(op)
        op = pred.get(op)
    chain.reverse()
    return CriticalPath(slots, ready, layers_through(last), chain, last)


def _last_ready_operand(op: Operation, ready: dict[SSAValue, int],
                        skip: SSAValue | None) -> tuple[int, Operation | None]:
    """The latest `ready` slot among `op`'s operands (-1: none) and the op defining it."""
    r, p = -1, None
    for v in op.operands:
        if v is skip:
            continue
        rv = ready[v]
        if rv > r:
            r, p = rv, v.owner
    return r, p if isinstance(p, Operation) else None
