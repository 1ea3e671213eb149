"""`sequential-scope`: gate unrolled loop iterations so at most K are in flight at once.

`tw.sequential_scope(factories, name)` tags every op an iteration builds with
`tw.scope = name`, `tw.iteration = i` and marks the op producing its value `tw.scope_terminal`.
Left alone, a greedy scheduler starts every independent iteration at once; when each one holds
a wide intermediate, K iterations in flight pin K x peak columns of the residual stream and the
schedule stalls on a residual-bound plateau (seed guide, sequential_scope section).

This pass makes iteration i wait for iteration i-K's terminal: every *entry op* of iteration i
(an op of the iteration that reads a value defined outside it) reads that value through
`%g = tw.after %x, (%terminal_{i-K})` instead, one gate per (iteration, outside value). The
gate is an ordering-only edge, visible in the IR: `tw.after` is a free view whose value is %x
and which becomes readable only when its dependencies are. Values are unchanged.

Options:
  `batch-size=K`     gate iteration i on iteration i-K (K >= 1; K >= #iterations gates nothing).
  `batch-size=auto`  (default) K = clamp(d // (headroom * peak), 2, #iterations - 1), where `d` is
                     the residual width (option `d`), `headroom` a safety factor (option, default
                     1: the lowering keeps an admission reserve, so in-flight chains cannot
                     deadlock and the seed's factor 4 only costs depth; see docs/passes.md) and `peak` the peak intermediate width of one
                     iteration: the largest total width of the iteration's non-view values alive
                     at once, with lifetimes taken from critical-path slots (a value lives from
                     its own slot to its last reader's, following reads through free views,
                     clipped to the iteration's span). K=1 would serialise the loop and a K near
                     the natural in-flight count lets wide intermediates fill the residual
                     stream, hence the clamp; a loop of fewer than 3 iterations is not gated.
  `d`                residual stream width the auto rule budgets for (default 256).
  `headroom`         divisor of the auto rule (default 1). The rule only sizes K; sweeping K
                     finds the optimum (bench/passes_effect.py records one sweep).

Scopes are told apart by name: two loops built with the same name are reported, not merged.
Running the pass twice adds no second gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from twdialect.analysis import critical_path, first_use_before_def, sort_block_topologically
from twdialect.dialect import (
    ITERATION,
    SCOPE,
    SCOPE_TERMINAL,
    VIEW_OPS,
    AfterOp,
    GraphOp,
    describe,
    width_of,
)
from twdialect.analysis import SOURCE, placement_kind


class SequentialScopeError(ValueError):
    """The scope tags are inconsistent (no terminal, two terminals, a gate cycle...); `op` is
    the op concerned, when there is one (tools locate it)."""

    def __init__(self, message: str, op: Operation | None = None):
        super().__init__(message)
        self.op = op


@dataclass(frozen=True)
class SequentialScopePass(ModulePass):
    """Route each iteration's entry reads through `tw.after` on the terminal K iterations back."""

    name = "sequential-scope"

    batch_size: int | str = "auto"
    d: int = 256
    headroom: int = 1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if isinstance(self.batch_size, str):
            if self.batch_size != "auto":
                raise ValueError(f"sequential-scope: batch-size must be an integer or 'auto', "
                                 f"got {self.batch_size!r}")
            if self.d < 1 or self.headroom < 1:
                raise ValueError(f"sequential-scope: d and headroom must be positive, got "
                                 f"d={self.d} headroom={self.headroom}")
        elif self.batch_size < 1:
            raise ValueError(f"sequential-scope: batch-size must be at least 1, got "
                             f"{self.batch_size}")
        for graph in [g for g in op.body.block.ops if isinstance(g, GraphOp)]:
            gate_graph(graph, self.batch_size, self.d, self.headroom)


@dataclass
class Scope:
    """One loop: its iterations in index order, their ops (block order) and terminals."""

    name: str
    indices: list[int]
    ops: dict[int, list[Operation]]
    terminals: dict[int, SSAValue]


def find_scopes(graph: GraphOp) -> list[Scope]:
    """The tagged loops of `graph`, in order of first appearance. Raises on bad tags."""
    scopes: dict[str, Scope] = {}
    for op in graph.block.ops:
        scope_attr, it_attr = op.attributes.get(SCOPE), op.attributes.get(ITERATION)
        if scope_attr is None and it_attr is None:
            if SCOPE_TERMINAL in op.attributes:
                raise SequentialScopeError(
                    f"{describe(op)}: marked tw.scope_terminal but has no tw.scope/tw.iteration "
                    "(a sequential_scope factory must return a value it built)", op)
            continue
        if not isinstance(scope_attr, StringAttr) or not isinstance(it_attr, IntegerAttr):
            raise SequentialScopeError(f"{describe(op)}: tw.scope must be a string and "
                                       "tw.iteration an integer, both present", op)
        name, it = scope_attr.data, it_attr.value.data
        scope = scopes.setdefault(name, Scope(name, [], {}, {}))
        scope.ops.setdefault(it, []).append(op)
        if SCOPE_TERMINAL in op.attributes:
            if it in scope.terminals:
                raise SequentialScopeError(
                    f"{describe(op)}: scope '{name}' iteration {it} has a second terminal "
                    "(give each sequential_scope loop its own name)", op)
            if not op.results:
                raise SequentialScopeError(f"{describe(op)}: a terminal must produce a value", op)
            scope.terminals[it] = op.results[0]
    for scope in scopes.values():
        scope.indices = sorted(scope.ops)
        for it in scope.indices:
            if it not in scope.terminals:
                raise SequentialScopeError(
                    f"scope '{scope.name}' iteration {it} has no op marked tw.scope_terminal "
                    f"(first op: {describe(scope.ops[it][0])})", scope.ops[it][0])
    return list(scopes.values())


def peak_width(scope: Scope, slots: dict[Operation, int], last_read: dict[SSAValue, int]) -> int:
    """Largest total width of one iteration's non-view values alive in one slot (max over
    iterations). Lifetimes come from critical-path slots, clipped to the iteration's span."""
    peak = 0
    for it in scope.indices:
        ops = scope.ops[it]
        span = [slots[o] for o in ops]
        lo, hi = min(span), max(span)
        delta: dict[int, int] = {}
        for o in ops:
            if isinstance(o, VIEW_OPS) or not o.results or placement_kind(o) == SOURCE:
                continue
            v = o.results[0]
            start = max(slots[o], lo)
            end = min(max(last_read.get(v, slots[o]), slots[o]), hi)
            delta[start] = delta.get(start, 0) + width_of(v)
            delta[end + 1] = delta.get(end + 1, 0) - width_of(v)
        live = 0
        for s in sorted(delta):
            live += delta[s]
            peak = max(peak, live)
    return peak


def last_reads(graph: GraphOp, slots: dict[Operation, int]) -> dict[SSAValue, int]:
    """value -> slot of its last reader, seen through free views (reverse walk, O(ops))."""
    last: dict[SSAValue, int] = {}
    for op in reversed(list(graph.block.ops)):
        own = last.get(op.results[0], slots[op]) if (op.results and isinstance(op, VIEW_OPS)) \
            else slots[op]
        for v in op.operands:
            if own > last.get(v, -2):
                last[v] = own
    return last


def auto_batch_size(n_iterations: int, d: int, peak: int, headroom: int = 1) -> int:
    """K ~ d / (headroom * peak), clamped to [2, n_iterations - 1] (see the module docstring)."""
    k = d // (headroom * max(peak, 1))
    return max(2, min(n_iterations - 1, k))


def gate_graph(graph: GraphOp, batch_size: int | str, d: int = 256,
               headroom: int = 1) -> dict[str, int]:
    """Gate every scope of `graph`; returns {scope name: K used} (K == 0: not gated)."""
    scopes = find_scopes(graph)
    if not scopes:
        return {}
    chosen: dict[str, int] = {}
    if batch_size == "auto":
        slots = critical_path(graph).slots
        reads = last_reads(graph, slots)
    gates = 0
    for scope in scopes:
        n = len(scope.indices)
        if batch_size == "auto":
            peak = peak_width(scope, slots, reads)
            k = auto_batch_size(n, d, peak, headroom) if n >= 3 else 0
        else:
            k = int(batch_size) if batch_size < n else 0
        chosen[scope.name] = k
        if k:
            gates += _gate_scope(scope, k)
    if gates and first_use_before_def(graph.block) is not None:
        try:
            sort_block_topologically(graph.block)
        except ValueError:
            raise SequentialScopeError(
                f"@{graph.sym_name.data}: gating creates a cycle: an iteration's terminal "
                "depends on a later iteration of the same scope") from None
    return chosen


def _gate_scope(scope: Scope, k: int) -> int:
    gates = 0
    for pos in range(k, len(scope.indices)):
        it = scope.indices[pos]
        terminal = scope.terminals[scope.indices[pos - k]]
        members = set(scope.ops[it])
        gate_of: dict[SSAValue, SSAValue] = {}
        for op in scope.ops[it]:
            for i, x in enumerate(op.operands):
                owner = x.owner
                if owner in members or x is terminal:
                    continue
                if isinstance(owner, AfterOp) and terminal in owner.deps:
                    continue  # already gated (the pass ran before)
                gate = gate_of.get(x)
                if gate is None:
                    after = AfterOp.create(operands=[x, terminal], result_types=[x.type])
                    Rewriter.insert_op(after, InsertPoint.before(op))
                    gate = gate_of[x] = after.out
                    gates += 1
                op.operands[i] = gate
    return gates


__all__ = ["SequentialScopePass", "SequentialScopeError", "auto_batch_size", "find_scopes",
           "gate_graph", "peak_width"]
