"""`rematerialize`: recompute a cheap value next to its later readers instead of keeping it
live across the residual's busiest step (one atomic rewrite: clone a writer op).

The residual holds every value from its writer to its last reader. Where a value is read early
and again much later, and its writer is cheap (a linear, an add, a relu, a small mlp) and reads
only values that are live at the later readers anyway, a copy of the writer placed before the
later readers frees its columns in between at the price of the copy's heads or neurons. The
pass finds the step where the best order (`lowering/pressure.py`) needs the most columns, clones
the writer of the widest value live there that qualifies, and keeps the clone only if that
peak falls; it repeats while the peak falls (`rounds` at most).

Options:
  `max-hidden`  the largest tw.mlp (hidden neurons) worth recomputing (default 32).
  `rounds`      clones tried at most per graph (default 16).
  `d`, `d-head`, `d-hidden`  the machine whose heads and neurons bound what a task may reuse in
                its own sublayer (defaults: 4096, 16, 4 d: room for any reuse).

The graph must hold primitive ops only (run `decompose` first; a graph that the lowering cannot
read is left as it is). Semantics are unchanged: a clone computes the same value.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from tw_passes import PassOptionError
from tw_passes.graph_pass import GraphPass
from twdialect.dialect import VIEW_OPS, AddOp, GraphOp, LinearOp, MlpOp, ReluOp


@dataclass(frozen=True)
class RematerializePass(GraphPass):
    name = "rematerialize"

    max_hidden: int = 32
    rounds: int = 16
    d: int = 4096
    d_head: int = 16
    d_hidden: int = 0

    def check_options(self) -> None:
        from tw_lowering.machine import GeometryError, Machine

        if self.max_hidden < 0 or self.rounds < 0:
            raise PassOptionError(f"rematerialize: max-hidden and rounds must be >= 0, got "
                                  f"{self.max_hidden} and {self.rounds}")
        try:
            Machine(self.d, self.d_head, self.d_hidden or None)
        except GeometryError as e:
            raise PassOptionError(f"rematerialize: {e}") from None

    def machine(self):
        from tw_lowering.machine import Machine

        return Machine(self.d, self.d_head, self.d_hidden or None)

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> int:
        """Clones kept."""
        machine = self.machine()
        kept = 0
        peak = _peak(graph, machine)
        for _ in range(self.rounds if peak is not None else 0):
            clone = _clone_one(graph, machine, self.max_hidden)
            if clone is None:
                break
            new_peak = _peak(graph, machine)
            if new_peak is not None and new_peak < peak:
                peak, kept = new_peak, kept + 1
            else:
                clone.undo()
                break
        return kept


def _peak(graph: GraphOp, machine) -> int | None:
    """The best order's peak, or None for a graph the lowering cannot read."""
    from tw_lowering.pressure import LiveModel, OrderChoice
    from tw_lowering.tasks import LoweringError, TaskGraph

    try:
        return OrderChoice(LiveModel(TaskGraph(graph))).best(machine).peak
    except LoweringError:
        return None


def _cheap(op: Operation, max_hidden: int) -> bool:
    if type(op) in (LinearOp, AddOp, ReluOp):
        return True
    return type(op) is MlpOp and op.w1.type.get_shape()[1] <= max_hidden


@dataclass
class _Clone:
    """A writer cloned for some of its readers, and how to take it back."""

    op: Operation
    redirected: list[tuple[Operation, int, SSAValue]]  # (user, operand index, old value)

    def undo(self) -> None:
        for user, i, old in self.redirected:
            user.operands[i] = old
        Rewriter.erase_op(self.op)


def _clone_one(graph: GraphOp, machine, max_hidden: int) -> _Clone | None:
    """Clone the writer of the widest value that is live at the best order's peak, read both
    before and after it, cheap, and whose own operands stay live up to its later readers."""
    from tw_lowering.pressure import LiveModel, OrderChoice
    from tw_lowering.tasks import TaskGraph

    tg = TaskGraph(graph)
    model = LiveModel(tg)
    best = OrderChoice(model).best(machine)
    for writer, later in candidates(tg, model, best, max_hidden):
        clone = _redirect(graph, writer.op, {tg.tasks[r].op for r in later})
        if clone is not None:
            return clone
    return None


def candidates(tg, model, best, max_hidden: int = 32):
    """(writer task, its later readers) for each value live at `best`'s peak that a clone could
    free there, widest first (see `_clone_one`)."""
    from tw_lowering.fit import _live_at

    k = best.peak_at
    pos = {tid: i for i, tid in enumerate(best.order)}
    last = {}  # group -> the last position reading it
    for i, tid in enumerate(best.order):
        for g in tg.tasks[tid].reads:
            last[g] = i
    sources = set(tg.sources)
    for g in sorted(_live_at(model, best.order, k), key=lambda g: (-tg.groups[g].width, g)):
        grp = tg.groups[g]
        if g in sources or grp.is_output or len(grp.writers) != 1:
            continue
        writer = tg.tasks[grp.writers[0]]
        if grp.value is not writer.op.results[0] or not _cheap(writer.op, max_hidden):
            continue
        later = [r for r in grp.readers if pos.get(r, -1) >= k]
        if not later or len(later) == len(grp.readers):
            continue
        first_later = min(pos[r] for r in later)
        if any(last.get(r, -1) < first_later and not tg.groups[r].is_output
               for r in writer.reads):
            continue  # an operand would live longer for the clone
        yield writer, later


def _redirect(graph: GraphOp, writer: Operation, later: set[Operation]) -> _Clone | None:
    """Clone `writer` before the first of its uses that only `later` tasks depend on, and point
    those uses at the clone (a view used by earlier readers too keeps the original)."""
    value = writer.results[0]
    uses = []
    for use in list(value.uses):
        user = use.operation
        if _only_later(user, later):
            uses.append((user, use.index))
    if not uses:
        return None
    ops = list(graph.block.ops)
    index = {op: i for i, op in enumerate(ops)}
    first = min((user for user, _ in uses), key=lambda op: index[op])
    clone = writer.clone()
    Rewriter.insert_op(clone, InsertPoint.before(first))
    redirected = []
    for user, i in uses:
        redirected.append((user, i, user.operands[i]))
        user.operands[i] = clone.results[0]
    return _Clone(clone, redirected)


def _only_later(user: Operation, later: set[Operation]) -> bool:
    """Whether every task reading through `user` (itself, or through views) is in `later`."""
    if type(user) not in VIEW_OPS:
        return user in later
    return all(_only_later(use.operation, later) for res in user.results for use in res.uses)
