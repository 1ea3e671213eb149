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
  `batch-size=auto`  (default) choose K per loop by scheduling: each candidate is applied to a
                     copy of the graph and scheduled with the lowering's own scheduler on the
                     machine `d`/`d-head`/`d-hidden`; the fewest layers wins, ties going to
                     the fewest constraints (ungated first, then the largest K). Candidates:
                     ungated, the rule's K (below), clamp(d // (h * peak)) for h in 1, 2, 4,
                     and 2, 3, 4, 6, 8, 12, 16, 24, ... below #iterations; when a K wins,
                     the midpoints between it and its tried neighbours are scheduled too,
                     until the gaps close (the ladder is coarse). A candidate whose
                     schedule stalls on residual width counts as infinitely bad; if every
                     candidate stalls, K=1 is tried, and if that stalls too the rule's K is
                     kept (the lowering then reports the stall). Gating only adds ordering
                     edges, so it can only help where the greedy scheduler stalls or plateaus;
                     where ungated is as good, auto adds no gate. Loops are searched one at a
                     time in order of first appearance, the loops not yet decided ungated and
                     the ones decided at their choice. A candidate whose critical-path floor
                     already reaches the best layers found is not scheduled (it could at best
                     tie), and once the ungated schedule meets its floor the search stops.
                     Budget: a trial on a graph of N ops costs N * max(1, N / 1000) out of
                     `search-budget` (the scheduler's time per op grows with the graph, about
                     0.1 ms at 10^2 ops, 0.4 ms at 5x10^3, 1 ms at 2x10^4; by default a
                     graph of up to ~1000 ops gets about 20 trials, one past ~4400 ops the
                     rule alone); when it runs out, the loop keeps the best K
                     found so far, and a loop not searched at all (budget spent, or a graph
                     that does not lower on its own: an op wider than the machine) takes the
                     rule's K. A loop already gated (the pass ran before) is left as it is.
                     The rule: K = clamp(d // (headroom * peak), 2, #iterations - 1), where
                     `peak` is the peak intermediate width of one iteration: the largest total
                     width of the iteration's non-view values alive at once, with lifetimes
                     taken from critical-path slots (a value lives from its own slot to its
                     last reader's, following reads through free views, clipped to the
                     iteration's span). K=1 would serialise the loop and a K near the natural
                     in-flight count lets wide intermediates fill the residual stream, hence
                     the clamp; the rule gates no loop of fewer than 3 iterations.
  `d`, `d-head`, `d-hidden`  the machine auto schedules for (defaults 256, 16 and 0 = 4 * d, as
                     `lower-to-transformer`); give the ones you compile with.
  `headroom`         divisor of the rule (default 1; the seed's rule of thumb is 4).
  `search-budget`    op-schedules auto may spend per graph (default 20000, a few seconds;
                     0: the rule alone).

Scopes are told apart by name: two loops built with the same name are reported, not merged.
Running the pass twice adds no second gate. The output depends only on the input and the
options (the scheduler is deterministic), so the same input gives byte-identical IR.
"""

from __future__ import annotations

from twdialect.errors import TwError
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from tw_passes import PassOptionError
from tw_passes.graph_pass import GraphPass, graphs_of
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


class SequentialScopeError(TwError):
    """The scope tags are inconsistent (no terminal, two terminals, a gate cycle...); `op` is
    the op concerned, when there is one (tools locate it)."""

    def __init__(self, message: str, op: Operation | None = None):
        super().__init__(message)
        self.op = op


SEARCH_BUDGET = 20_000  # op-schedules per graph; a few seconds at most
TRIAL_OPS = 1000  # a trial of N ops costs N * max(1, N / TRIAL_OPS) (the scheduler is superlinear)


@dataclass(frozen=True)
class SequentialScopePass(GraphPass):
    """Route each iteration's entry reads through `tw.after` on the terminal K iterations back."""

    name = "sequential-scope"

    batch_size: int | str = "auto"
    d: int = 256
    d_head: int = 16
    d_hidden: int = 0  # 0: 4 * d
    headroom: int = 1
    search_budget: int = SEARCH_BUDGET

    def check_options(self) -> None:
        if not isinstance(self.batch_size, str):
            if self.batch_size < 1:
                raise PassOptionError(f"sequential-scope: batch-size must be at least 1, got "
                                      f"{self.batch_size}")
            return
        if self.batch_size != "auto":
            raise PassOptionError(f"sequential-scope: batch-size must be an integer or 'auto', "
                                  f"got {self.batch_size!r}")
        # Only the automatic choice reads the geometry and the search budget.
        if self.d < 1 or self.headroom < 1 or self.d_head < 1:
            raise PassOptionError(f"sequential-scope: d, d-head and headroom must be positive, "
                                  f"got d={self.d} d-head={self.d_head} headroom={self.headroom}")
        if self.d_hidden < 0 or self.search_budget < 0:
            raise PassOptionError(f"sequential-scope: d-hidden and search-budget must be >= 0, "
                                  f"got d-hidden={self.d_hidden} "
                                  f"search-budget={self.search_budget}")
        if self.search_budget and self.d % self.d_head:
            raise PassOptionError(f"sequential-scope: d={self.d} must be a multiple of "
                                  f"d-head={self.d_head}")

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> dict[str, int]:
        """Gate every scope of `graph`; returns {scope name: K used} (K == 0: not gated)."""
        scopes = find_scopes(graph)
        if not scopes:
            return {}
        if self.batch_size == "auto":
            choices = choose_batch_sizes(graph, self.d, self.headroom, self.d_head,
                                         self.d_hidden, self.search_budget, scopes)
            chosen = {name: c.k for name, c in choices.items()}
        else:
            k = int(self.batch_size)
            chosen = {s.name: k if k < len(s.indices) else 0 for s in scopes}
        _apply(graph, chosen, scopes)
        return chosen


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


def candidate_batch_sizes(n_iterations: int, d: int, peak: int, headroom: int = 1) -> list[int]:
    """What auto tries, in tie-break order: 0 (ungated) first, then K from largest to smallest:
    the rule's K, clamp(d // (h * peak)) for h in 1, 2, 4, and the steps of ratio ~1.5 below
    #iterations: 2, 3, 4, 6, 8, 12, 16, 24, ... (K=1, which serialises, only as the last
    resort; see `choose_batch_sizes`)."""
    if n_iterations < 2:
        return [0]
    ks = {m << i for i in range(n_iterations.bit_length()) for m in (2, 3)
          if (m << i) < n_iterations}
    if n_iterations >= 3:
        ks.add(auto_batch_size(n_iterations, d, peak, headroom))
        ks.update(auto_batch_size(n_iterations, d, peak, h) for h in (1, 2, 4))
    return [0] + sorted(ks, reverse=True)


@dataclass
class Choice:
    """How auto sized one loop: the K chosen, the rule's K, the peak width, the layers of every
    candidate scheduled (None: it stalled) and the floor of every candidate skipped because
    its critical-path floor already reached the best layers found; `searched` is False where
    the rule decided."""

    k: int
    rule_k: int
    peak: int
    n_iterations: int
    layers: dict[int, int | None]
    pruned: dict[int, int]
    searched: bool


def choose_batch_sizes(graph: GraphOp, d: int = 256, headroom: int = 1, d_head: int = 16,
                       d_hidden: int = 0, search_budget: int = SEARCH_BUDGET,
                       scopes: list[Scope] | None = None) -> dict[str, Choice]:
    """Size every loop of `graph` for `batch-size=auto` (see the module docstring); the graph
    is not modified (candidates are scheduled on copies). The search reports the budget it
    has spent as progress (`lowering/progress.py`)."""
    from tw_lowering.progress import report

    scopes = find_scopes(graph) if scopes is None else scopes
    if not scopes:
        return {}
    slots = critical_path(graph).slots
    reads = last_reads(graph, slots)
    n_ops = len(graph.block.ops)
    cost = max(n_ops, n_ops * n_ops // TRIAL_OPS)  # one trial, in op-schedules
    budget = search_budget
    lowers = True  # False once the graph fails for a reason gating cannot fix
    decided: dict[str, int] = {}
    out: dict[str, Choice] = {}
    for scope in scopes:
        n = len(scope.indices)
        peak = peak_width(scope, slots, reads)
        rule_k = auto_batch_size(n, d, peak, headroom) if n >= 3 else 0
        choice = out[scope.name] = Choice(rule_k, rule_k, peak, n, {}, {}, False)
        if _already_gated(scope):
            choice.k = 0  # the pass ran before: add nothing
            continue
        cands = candidate_batch_sizes(n, d, peak, headroom)
        if not lowers or n < 2 or budget < cost:
            decided[scope.name] = choice.k
            continue
        choice.searched = True

        def attempt(k: int, bound: int | None) -> _Trial:
            """Schedule candidate k (spending its cost) and record what came of it."""
            nonlocal budget
            budget -= cost
            trial = _trial(graph, {**decided, scope.name: k}, d, d_head, d_hidden, bound)
            report("sequential-scope search", search_budget - budget, search_budget)
            if trial.layers is None and trial.floor is not None:  # pruned
                choice.pruned[k] = trial.floor
            elif not trial.unlowerable:
                choice.layers[k] = trial.layers
            return trial

        best: int | None = None
        for k in cands + [1]:
            if k == 1 and best is not None:
                break  # K=1 serialises: only when every other candidate stalls
            if budget < cost:
                break  # out of budget: the best so far, or the rule if none scheduled
            bound = None if best is None else choice.layers[best]
            trial = attempt(k, bound)
            if trial.unlowerable:
                lowers = choice.searched = False
                break
            if trial.layers is not None and (bound is None or trial.layers < bound):
                best = k
                if k == 0 and trial.layers == trial.floor:
                    break  # ungated at its floor: gating only adds constraints
        while best and lowers and budget >= cost:
            # Refine between the best K and its tried neighbours (the ladder is coarse).
            # (No trial here is unlowerable: that does not depend on K, and K=0 lowered.)
            tried = set(choice.layers) | set(choice.pruned)
            above = min([k for k in tried if k > best] + [n])
            below = max([k for k in tried if 0 < k < best] + [1])
            probes = [k for k in dict.fromkeys(((best + above) // 2, (below + best) // 2))
                      if k not in tried and 1 < k < n]
            if not probes:
                break
            for k in probes:
                if budget < cost:
                    break
                trial = attempt(k, choice.layers[best] + (1 if k > best else 0))  # larger K may tie
                if trial.layers is not None and (trial.layers, -k) < (choice.layers[best], -best):
                    best = k
        if best is not None:
            choice.k = best
        decided[scope.name] = choice.k
    return out


@dataclass
class _Trial:
    layers: int | None = None  # None: stalled, or pruned (then floor is set)
    floor: int | None = None  # the critical-path floor, when computed
    unlowerable: bool = False


def _trial(graph: GraphOp, ks: dict[str, int], d: int, d_head: int, d_hidden: int,
           bound: int | None) -> _Trial:
    """Schedule `graph` gated per `ks` on a copy. Not scheduled (pruned) when its critical-path
    floor is at least `bound`: it could at best tie, and ties go to the earlier candidate."""
    from tw_lowering import prepare
    from tw_lowering.machine import GeometryError, Machine
    from tw_lowering.fit import ResidualStall
    from tw_lowering.schedule import schedule
    from tw_lowering.tasks import LoweringError, TaskGraph

    copy = graph.clone()
    _apply(copy, ks)
    copy = graphs_of(prepare(ModuleOp([copy])))[0]
    if bound is not None:
        floor = critical_path(copy).n_layers
        if floor >= bound:
            return _Trial(floor=floor)
    try:
        sched = schedule(TaskGraph(copy), Machine(d, d_head, d_hidden or 4 * d), suggest=False)
        return _Trial(sched.n_layers, sched.floor)
    except ResidualStall:
        return _Trial()
    except (GeometryError, LoweringError):
        return _Trial(unlowerable=True)


def _already_gated(scope: Scope) -> bool:
    """Some iteration already reads through a tw.after on a terminal of this scope."""
    terminals = set(scope.terminals.values())
    for it in scope.indices:
        for op in scope.ops[it]:
            for v in op.operands:
                if isinstance(v.owner, AfterOp) and any(t in terminals for t in v.owner.deps):
                    return True
    return False


def _apply(graph: GraphOp, ks: dict[str, int], scopes: list[Scope] | None = None) -> None:
    gates = 0
    for scope in find_scopes(graph) if scopes is None else scopes:
        k = ks.get(scope.name, 0)
        if k:
            gates += _gate_scope(scope, k)
    if gates and first_use_before_def(graph.block) is not None:
        try:
            sort_block_topologically(graph.block)
        except ValueError:
            raise SequentialScopeError(
                f"@{graph.sym_name.data}: gating creates a cycle: an iteration's terminal "
                "depends on a later iteration of the same scope") from None


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
                    after = AfterOp(x, [terminal])
                    Rewriter.insert_op(after, InsertPoint.before(op))
                    gate = gate_of[x] = after.out
                    gates += 1
                op.operands[i] = gate
    return gates


__all__ = ["SequentialScopePass", "SequentialScopeError", "Choice", "auto_batch_size",
           "candidate_batch_sizes", "choose_batch_sizes", "find_scopes", "peak_width"]
