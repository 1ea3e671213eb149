"""Graph analyses: use lists, topological order, and the critical-path floor of the cost model.

Sublayer slots number the machine's sublayers in order: slot 2L is layer L's attention
sublayer, slot 2L+1 its MLP sublayer; graph sources are ready at slot -1 (written before
layer 0). An op placed in slot s makes its value readable from slot s+1 on, which is the
attention -> MLP handoff of the seed (an attn op and the MLP chain that reads it share a layer).

Where each op may run (the rules the scheduler follows, with unlimited capacity):
  attn                         attention sublayer (even slot)
  mlp, relu                    MLP sublayer (odd slot)
  linear, add                  either: a head in attention, or a bypass pair in the MLP
  accumulating add             free: both addends are single-use writer outputs (or literals),
                               so their writers add into one shared block of columns
  add into a dying addend      one addend is a single-use writer output: the other addend is
                               copied into its columns (head work or a bypass pair, after the
                               copied addend is ready); the sum is ready when both are written
  literal                      free: a constant written with the inputs or as an MLP bias
  concat, slice, after         free views of their operands
  input, embedding, pos_enc    sources, ready at slot -1
  library ops (pre-decompose)  MLP: compare/select/clamp/piecewise_linear one chain,
                               piecewise_linear_2d two chains
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
    ReluOp,
    SelectOp,
    SliceOp,
)

ATTN, MLP, EITHER, FREE, SOURCE, SINK = "attn", "mlp", "either", "free", "source", "sink"


_KIND_BY_TYPE: dict[type, str] = {
    AttnOp: ATTN,
    MlpOp: MLP, ReluOp: MLP, CompareOp: MLP, SelectOp: MLP, ClampOp: MLP,
    PiecewiseLinearOp: MLP, PiecewiseLinear2dOp: MLP,
    LinearOp: EITHER, AddOp: EITHER,
    LiteralOp: FREE, ConcatOp: FREE, SliceOp: FREE, AfterOp: FREE,
    InputOp: SOURCE, EmbeddingOp: SOURCE, PosEncodingOp: SOURCE,
    OutputOp: SINK,
}


def placement_kind(op: Operation) -> str:
    """Which sublayer(s) an op may occupy (see module docstring)."""
    kind = _KIND_BY_TYPE.get(type(op))  # exact-type lookup: isinstance on xDSL ops is slow
    if kind is None:
        raise ValueError(f"no placement rule for {op.name}")
    return kind


WRITER_OPS = (LinearOp, AddOp, ReluOp, MlpOp, AttnOp)


def accumulating_adds(graph: GraphOp) -> set[Operation]:
    """Adds whose addends' writers can add straight into one shared block of columns.

    An addend qualifies if it is a literal (folded into a writer's bias), or the single-use
    result of a writer op or of another accumulating add. At least one addend must be a
    non-literal, and the two addends must differ (add(x, x) needs a real op)."""
    acc: set[Operation] = set()
    for op in graph.block.ops:
        if type(op) is not AddOp or op.lhs is op.rhs:
            continue
        ok, writers = True, 0
        for v in (op.lhs, op.rhs):
            owner = type(v.owner)
            if owner is LiteralOp:
                continue
            if owner in WRITER_OPS and v.has_one_use():
                writers += 1
            else:
                ok = False
        if ok and writers:
            acc.add(op)
    return acc


def _free_addend(v: SSAValue) -> bool:
    return type(v.owner) in WRITER_OPS and v.has_one_use()


def is_free_add(op: Operation) -> bool:
    """Whether `op` is in `accumulating_adds` or `adds_into`, checked on the op alone (no walk
    over the block). Their union is exactly the adds of two distinct addends at least one of
    which is a single-use writer result: an accumulating add has such an addend, and an add
    with one that is not accumulating adds into it."""
    if type(op) is not AddOp:
        return False
    lhs, rhs = op.operands
    return lhs is not rhs and (_free_addend(lhs) or _free_addend(rhs))


def adds_into(graph: GraphOp, accumulating: set[Operation] | None = None) -> dict[Operation, SSAValue]:
    """Adds (not accumulating) with one single-use writer addend: add -> that addend.

    The add's result takes the addend's columns and the add only copies the other addend in:
    no new columns, and the sum is ready once the copy and the addend's writer have run."""
    if accumulating is None:
        accumulating = accumulating_adds(graph)
    into: dict[Operation, SSAValue] = {}
    for op in graph.block.ops:
        if type(op) is not AddOp or op in accumulating or op.lhs is op.rhs:
            continue
        for v in (op.lhs, op.rhs):
            if _free_addend(v):
                into[op] = v
                break
    return into


def mlp_depth(op: Operation) -> int:
    """MLP sublayers an MLP-kind op spans (piecewise_linear_2d decomposes into two chains)."""
    return 2 if isinstance(op, PiecewiseLinear2dOp) else 1


def next_slot(ready: int, kind: str) -> int:
    """The first slot after `ready` where an op of `kind` can run."""
    s = ready + 1
    if kind == ATTN and s % 2 == 1:
        s += 1
    elif kind == MLP and s % 2 == 0:
        s += 1
    return s


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
    accumulating = accumulating_adds(graph)
    into = adds_into(graph, accumulating)
    last = -1
    last_op: Operation | None = None
    for op in graph.block.ops:
        r, p = -1, None
        into_addend = into.get(op)
        for v in op.operands:
            if v is into_addend:
                continue
            rv = ready[v]
            if rv > r:
                r, p = rv, v.owner
        kind = FREE if op in accumulating else _KIND_BY_TYPE[type(op)]
        if into_addend is not None:
            s = next_slot(r, kind)
            slots[op] = s
            ready_into = ready[into_addend]
            pred[op] = into_addend.owner if ready_into > s else (
                p if isinstance(p, Operation) else None)
            ready[op.results[0]] = max(s, ready_into)
            continue
        if kind in (SOURCE,):
            s = -1
        elif kind == FREE:
            s = r
        elif kind == SINK:
            s = r
            if r > last:
                last, last_op = r, op
        elif kind == MLP:
            s = next_slot(r, MLP) + 2 * (mlp_depth(op) - 1)
        else:
            s = next_slot(r, kind)
        slots[op] = s
        pred[op] = p if isinstance(p, Operation) else None
        for res in op.results:
            ready[res] = s
    chain: list[Operation] = []
    op = last_op
    while op is not None:
        chain.append(op)
        op = pred.get(op)
    chain.reverse()
    n_layers = last // 2 + 1 if last >= 0 else 0
    return CriticalPath(slots, ready, n_layers, chain, last)
