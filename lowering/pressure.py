"""Residual pressure: how many columns an order of the tasks needs, the best order found, and
a lower bound that no order beats.

Run one task at a time, in some topological order, and the residual holds exactly the groups
written (or fed in) and still to be read. So an order has a *peak*: the most columns it ever
needs, counted at each step as

    need_k = live before step k + max(0, new columns of task k - columns it may reuse)

where a task reuses the columns of the operands it reads last (they die as it writes): a
cancel in its own sublayer zeroes them while it fills them, which the value ranges must allow
(`may_reuse`: no loud dead value) and which must fit the sublayer beside the task (heads or
neurons, `lowering/rules.py`). Every width whose free columns hold a peak can run that order,
one task a sublayer; the scheduler's order gate (`OrderGate`, `lowering/schedule.py`) runs as
much out of order as the width leaves room for on top of it, so the *minimum width* is the
smallest d whose free columns hold the best peak found (`minimum_width`), and every wider d
fits too (more heads and neurons only allow more reuse: the peak never grows with d).

The best order is the least peak of a few candidate orders (`candidate_orders`): the graph's own
block order (how the user wrote it), a pressure-first list order (finish what is in flight,
free columns first), a deepest-first post-order (Sethi-Ullman's rule: of a task's operands,
compute first the one that needs the most room beyond what it leaves behind), and, for small
graphs, the exact minimum over every order (a search over the sets of tasks done).

`lower_bound` proves what no order beats: the inputs are live together before anything runs,
the outputs at the end, and at a task, every group written before it (by one of its
ancestors) and read after it (by one of its descendants) is live whatever the order. Where the
bound meets the best peak, the minimum is exact and the bound's witness is the cut that forces
it.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from tw_lowering.layer import heads_needed
from tw_lowering.machine import Machine
from tw_lowering.rules import Cost, cancel_cost, task_cost
from tw_lowering.tasks import TaskGraph
from twdialect.analysis import ATTN, MLP

# A cancel in the same sublayer as the writer that reuses the columns lands as one residual
# add of (-old + new), rounded at ulp(|old|): the new value keeps its low bits only while
# |old| <= SAME_SUBLAYER_RATIO * max(1, |new|) (error <= 2^-24 * 64 ~ 4e-6 of the new scale).
# Louder dead values are cancelled a sublayer ahead (exact: old + (-old) == 0).
SAME_SUBLAYER_RATIO = 64.0
EXACT_ORDER_TASKS = 16  # needed tasks up to which the least peak is searched exactly


class GroupRanges:
    """What the value ranges say of each group, computed on first use: the largest |value| its
    columns can hold, and each column's sign when the range keeps to one side of zero (+1:
    >= 0, -1: <= 0, 0: either)."""

    def __init__(self, tg: TaskGraph):
        self.tg = tg
        self._mag: list[float] | None = None
        self._signs: list[np.ndarray] | None = None
        # value -> (lo, hi) per component, as `twdialect.ranges.value_ranges` gave them (None
        # where an op has no range rule): kept for the compile report, which shows them
        self._boxes: dict | None = None

    def __getitem__(self, g: int) -> float:
        if self._mag is None:
            self._compute()
        return self._mag[g]

    @property
    def mag(self) -> list[float]:
        if self._mag is None:
            self._compute()
        return self._mag

    def signs(self, g: int) -> np.ndarray:
        if self._signs is None:
            self._compute()
        return self._signs[g]

    def _compute(self) -> None:
        from twdialect.dialect import PosEncodingOp
        from twdialect.ranges import RangeError, value_ranges

        tg = self.tg
        unknown = [np.zeros(g.width, np.int8) for g in tg.groups]
        try:
            ranges = self._boxes = value_ranges(tg.graph, strict=False)
        except RangeError:  # an op without a range rule: assume the worst
            self._mag, self._signs = [math.inf] * len(tg.groups), unknown
            return

        def maxabs(v) -> float:
            lo, hi = ranges.get(v, (None, None))
            if lo is None or not len(lo):
                return 0.0 if lo is not None else math.inf
            return float(max(np.abs(lo).max(), np.abs(hi).max()))

        mag = self._mag = [maxabs(g.value) for g in tg.groups]
        for t in tg.tasks:  # partial sums of an accumulating group pass through its writers
            mag[t.out_group] = max(mag[t.out_group], maxabs(t.op.results[0]))
        self._signs = unknown
        for g in tg.groups:
            box = ranges.get(g.value)
            if box is None:
                continue
            lo, hi = box
            if type(g.source) is PosEncodingOp:  # component 0 is the machine's column
                lo, hi = lo[1:], hi[1:]
            self._signs[g.gid] = np.where(lo >= 0, 1, np.where(hi <= 0, -1, 0)).astype(np.int8)

    def boxes(self) -> dict | None:
        """value -> (lo, hi) per component (None: some op has no range rule)."""
        if self._mag is None:
            self._compute()
        return self._boxes

    def loud(self, g: int) -> bool:
        return self[g] > SAME_SUBLAYER_RATIO

    def may_reuse(self, old: int, new: int) -> bool:
        """Whether `new` may take dead `old`'s columns in the sublayer that cancels them."""
        return self[old] <= self.reuse_bound(new)

    def reuse_bound(self, new: int) -> float:
        """The loudest dead value whose columns `new` may take in the sublayer that cancels
        them."""
        return SAME_SUBLAYER_RATIO * max(1.0, self[new])


def needed_tasks(tg: TaskGraph) -> list[bool]:
    """Tasks whose result reaches an output (reads or ordering edges); the rest is dead code."""
    needed_groups = [g.is_output for g in tg.groups]
    needed = [False] * len(tg.tasks)
    for t in reversed(tg.tasks):
        if needed_groups[t.out_group]:
            needed[t.tid] = True
            for g in t.waits:
                needed_groups[g] = True
    return needed


class LiveModel:
    """The machine-independent facts of the live-set count over one task graph: per group its
    width, needed writers and readers, whether it is fed in or read out; per needed task what
    it reads, writes and waits on; the value ranges' reuse rule."""

    def __init__(self, tg: TaskGraph, needed: list[bool] | None = None,
                 ranges: GroupRanges | None = None):
        self.tg = tg
        self.needed = needed_tasks(tg) if needed is None else needed
        self.ranges = GroupRanges(tg) if ranges is None else ranges
        self.tasks = [t.tid for t in tg.tasks if self.needed[t.tid]]
        self.width = [g.width for g in tg.groups]
        self.is_output = [g.is_output for g in tg.groups]
        self.sources = list(tg.sources)
        self.writers = [[w for w in g.writers if self.needed[w]] for g in tg.groups]
        self.readers = [[r for r in g.readers if self.needed[r]] for g in tg.groups]
        self._cancel_neurons: list[int] | None = None
        self.reuse_caps: dict[int, tuple[int, int]] = {}  # d_head -> see `reuse_view`
        self._task_sets: TaskSets | None = None

    @property
    def cancel_neurons(self) -> list[int]:
        """Per group, the MLP neurons that cancel it (`lowering.rules.cancel_cost`)."""
        if self._cancel_neurons is None:
            self._cancel_neurons = [cancel_cost(self.ranges.signs(g), False).neurons
                                    for g in range(len(self.width))]
        return self._cancel_neurons

    @property
    def task_sets(self) -> TaskSets:
        """The machine-independent steps of `exact_order`'s search, made on first use."""
        if self._task_sets is None:
            self._task_sets = TaskSets(self)
        return self._task_sets

    def start(self) -> _LiveState:
        return _LiveState(self)

    # -- the graph's edges between needed tasks, for the orders and the lower bound ---------

    def predecessors(self, tid: int) -> list[int]:
        """Needed tasks `tid` waits on: every writer of every group it waits on."""
        return sorted({w for g in self.tg.tasks[tid].waits for w in self.writers[g]})

    def successors(self) -> list[list[int]]:
        succ: list[list[int]] = [[] for _ in self.tg.tasks]
        for tid in self.tasks:
            for p in self.predecessors(tid):
                succ[p].append(tid)
        return succ


class _LiveState:
    """The residual while tasks run one at a time: readers and writers still to run, which
    groups hold columns, and how many columns are live."""

    def __init__(self, model: LiveModel):
        self.m = model
        self.readers_left = [len(r) for r in model.readers]
        self.writers_left = [len(w) for w in model.writers]
        self.allocated = [False] * len(model.width)
        self.live = 0
        for g in model.sources:
            self.allocated[g] = True
            if self.readers_left[g] or model.is_output[g]:
                self.live += model.width[g]

    def new_columns(self, tid: int) -> int:
        g = self.m.tg.tasks[tid].out_group
        return 0 if self.allocated[g] else self.m.width[g]

    def dying(self, tid: int) -> list[int]:
        """Groups `tid` is the last to read (they die as it runs)."""
        m = self.m
        return [r for r in m.tg.tasks[tid].reads
                if self.readers_left[r] == 1 and not self.writers_left[r] and not m.is_output[r]]

    def run(self, tid: int) -> list[int]:
        """Run `tid`; the groups that died."""
        m = self.m
        t = m.tg.tasks[tid]
        g = t.out_group
        if not self.allocated[g]:
            self.allocated[g] = True
            self.live += m.width[g]
        died = []
        for r in t.reads:
            self.readers_left[r] -= 1
            if self.readers_left[r] == 0 and not self.writers_left[r] and not m.is_output[r]:
                self.live -= m.width[r]
                died.append(r)
        self.writers_left[g] -= 1
        if not self.writers_left[g] and not self.readers_left[g] and not m.is_output[g]:
            self.live -= m.width[g]  # written for its ordering edges only
            died.append(g)
        return died


# --------------------------------------------------------------------------------------
# What one order needs
# --------------------------------------------------------------------------------------


@dataclass
class OrderPressure:
    """One order of the needed tasks and the columns it needs at each step on one machine."""

    order: list[int]  # task ids
    need: np.ndarray  # per position: columns needed while that task runs
    live: np.ndarray  # per position: columns live before it runs
    name: str = ""

    @property
    def peak(self) -> int:
        return int(self.need.max()) if len(self.need) else 0

    @property
    def peak_at(self) -> int:
        """The first position where the peak is reached."""
        return int(np.argmax(self.need)) if len(self.need) else 0


@dataclass
class _Walk:
    """An order walked once, machine-free: live before each step, new columns, the columns of
    the operands its task reads last (`dying`: they die as it writes), and per step the dying
    groups its task may reuse (non-loud, widest first)."""

    order: list[int]
    live: np.ndarray
    new: np.ndarray
    reusable: dict[int, list[int]]  # position -> groups
    dying: np.ndarray

    def live_values_peak(self) -> int:
        """The peak were every task free to refill the columns of the operands it reads last
        (cancels free, however loud): what the live values alone need. Where this fits a
        width and the order's peak does not, dead columns are what blocks."""
        if not len(self.live):
            return 0
        return int((self.live + np.maximum(0, self.new - self.dying)).max())


def walk(model: LiveModel, order: list[int]) -> _Walk:
    n = len(order)
    live, new, dying = (np.zeros(n, np.int64) for _ in range(3))
    reusable: dict[int, list[int]] = {}
    st = model.start()
    tasks, width, mag = model.tg.tasks, model.width, model.ranges.mag
    for k, tid in enumerate(order):
        live[k] = st.live
        new[k] = st.new_columns(tid)
        if new[k]:
            bound = model.ranges.reuse_bound(tasks[tid].out_group)
            last_read = st.dying(tid)
            dying[k] = sum(width[r] for r in last_read)
            quiet = [r for r in last_read if mag[r] <= bound]
            if quiet:
                reusable[k] = sorted(quiet, key=lambda r: (-width[r], r))
        st.run(tid)
    return _Walk(order, live, new, reusable, dying)


def reuse_capacity(model: LiveModel, tid: int, groups: list[int], machine: Machine,
                   cost: Cost | None = None) -> int:
    """Columns of `groups` (dying as `tid` runs) that `tid` may refill in its own sublayer:
    the longest prefix whose cancels (a head dim a column, or `cancel_neurons`) fit beside the
    task in one sublayer of its kind."""
    t = model.tg.tasks[tid]
    cost = task_cost(model.tg, t, machine) if cost is None else cost
    width, neurons = model.width, model.cancel_neurons
    best = 0
    if t.kind != MLP:  # in attention
        dims, cols = cost.dims, 0
        for r in groups:
            dims += width[r]
            if heads_needed(cost.heads, dims, machine.d_head) > machine.n_heads:
                break
            cols += width[r]
        if heads_needed(cost.heads, cost.dims, machine.d_head) <= machine.n_heads:
            best = cols
    if t.kind != ATTN and cost.neurons <= machine.d_hidden:  # in the MLP
        used, cols = cost.neurons, 0
        for r in groups:
            used += neurons[r]
            if used > machine.d_hidden:
                break
            cols += width[r]
        best = max(best, cols)
    return best


def _fits(cost: Cost, attention: bool, machine: Machine) -> bool:
    if attention:
        return heads_needed(cost.heads, cost.dims, machine.d_head) <= machine.n_heads
    return cost.neurons <= machine.d_hidden


def pressure_of(model: LiveModel, w: _Walk, machine: Machine, name: str = "") -> OrderPressure:
    need = w.live + w.new
    for k, groups in w.reusable.items():
        reuse = reuse_capacity(model, w.order[k], groups, machine)
        need[k] = w.live[k] + max(0, int(w.new[k]) - reuse)
    return OrderPressure(w.order, need, w.live, name)


# --------------------------------------------------------------------------------------
# Candidate orders
# --------------------------------------------------------------------------------------


def block_order(model: LiveModel) -> list[int]:
    """The order the graph is written in (a topological order: values are defined before use)."""
    return list(model.tasks)


def pressure_first_order(model: LiveModel) -> list[int]:
    """A list order that keeps the live set small: of the ready tasks, first one that frees at
    least as many columns as it takes (most freed first); else continue the most recent work
    (depth first: finish a chain before starting the next), fewest new columns first."""
    tg = model.tg
    st = model.start()
    waits_left = {tid: len({w for g in tg.tasks[tid].waits for w in model.writers[g]})
                  for tid in model.tasks}
    succ = model.successors()
    recency = [0] * len(tg.tasks)  # the step that made a task ready (later: more recent)
    version = [0] * len(tg.tasks)
    heap: list[tuple] = []

    def push(tid: int) -> None:
        version[tid] += 1
        delta = st.new_columns(tid) - sum(model.width[r] for r in st.dying(tid))
        key = (0, delta, 0) if delta <= 0 else (1, -recency[tid], delta)
        heapq.heappush(heap, key + (tg.tasks[tid].index, tid, version[tid]))

    for tid in model.tasks:
        if waits_left[tid] == 0:
            push(tid)
    order: list[int] = []
    done = [False] * len(tg.tasks)
    while heap:
        *_, tid, ver = heapq.heappop(heap)
        if ver != version[tid] or done[tid]:
            continue
        done[tid] = True
        order.append(tid)
        t = tg.tasks[tid]
        st.run(tid)
        step = len(order)
        for r in t.reads:  # a group with one reader left: that reader now frees it
            if st.readers_left[r] == 1:
                for other in model.readers[r]:
                    if not done[other] and waits_left[other] == 0:
                        push(other)
        for s in succ[tid]:
            waits_left[s] -= 1
            if waits_left[s] == 0:
                recency[s] = step
                push(s)
    return order


def deepest_first_order(model: LiveModel) -> list[int]:
    """A post-order from the outputs in which each task computes first the predecessor that
    needs the most room beyond what it leaves live (Sethi-Ullman's rule on a tree; on a DAG an
    estimate, shared work counted once per reader)."""
    tg = model.tg
    width = model.width
    preds = {tid: model.predecessors(tid) for tid in model.tasks}
    est: dict[int, int] = {}
    for tid in model.tasks:  # block order is topological
        kids = sorted(preds[tid], key=lambda p: -(est[p] - width[tg.tasks[p].out_group]))
        preds[tid] = kids
        held, peak = 0, 0
        for p in kids:
            peak = max(peak, held + est[p])
            held += width[tg.tasks[p].out_group]
        est[tid] = max(peak, held + width[tg.tasks[tid].out_group])
    roots = sorted({w for g, grp in enumerate(tg.groups) if grp.is_output for w in model.writers[g]},
                   key=lambda w: (-(est[w] - width[tg.tasks[w].out_group]), tg.tasks[w].index))
    order: list[int] = []
    seen = [False] * len(tg.tasks)
    for root in roots:
        if seen[root]:
            continue
        seen[root] = True
        stack = [(root, iter(preds[root]))]
        while stack:
            tid, kids = stack[-1]
            for p in kids:
                if not seen[p]:
                    seen[p] = True
                    stack.append((p, iter(preds[p])))
                    break
            else:
                stack.pop()
                order.append(tid)
    return order


def exact_order(model: LiveModel, machine: Machine) -> list[int] | None:
    """An order of least peak over every topological order, for graphs of at most
    `EXACT_ORDER_TASKS` needed tasks (None above). The live set depends only on which tasks
    are done, so a least-bottleneck path search over those sets (Dijkstra on the max) is
    exact. The machine counts only through `reuse_capacity` (see `reuse_view`); the rest of
    each step is the model's (`TaskSets`, shared by the searches at every machine)."""
    if len(model.tasks) > EXACT_ORDER_TASKS:
        return None
    sets, tasks, tg = model.task_sets, model.tasks, model.tg
    reuse_of: dict[tuple, int] = {}  # (task, its dying reads) -> columns it may refill

    def reuse(i: int, dying: tuple) -> int:
        got = reuse_of.get((i, dying))
        if got is None:
            tid = tasks[i]
            got = reuse_of[i, dying] = reuse_capacity(
                model, tid, list(dying), machine, task_cost(tg, tg.tasks[tid], machine))
        return got

    best = {0: 0}
    back: dict[int, tuple[int, int]] = {}
    heap = [(0, 0)]
    while heap:
        peak, mask = heapq.heappop(heap)
        if peak > best[mask]:
            continue
        if mask == sets.full:
            order = []
            while mask:
                mask, tid = back[mask]
                order.append(tid)
            return order[::-1]
        base, moves = sets.moves(mask)
        for i, new, dying in moves:
            step = max(peak, base + max(0, new - reuse(i, dying)) if dying else base + new)
            nxt = mask | 1 << i
            if step < best.get(nxt, math.inf):
                best[nxt] = step
                back[nxt] = (mask, tasks[i])
                heapq.heappush(heap, (step, nxt))
    return []  # no needed task


class TaskSets:
    """What `exact_order` reads of a set of needed tasks done (a bit mask over
    `LiveModel.tasks`), whatever the machine: the columns live then, and per task that may run
    next, its new columns and the reusable reads it would be the last to read (`moves`).
    Kept for the first `KEPT` sets asked about, so the searches of a width search (the same
    graph at many machines) compute each set once."""

    KEPT = 1 << 12

    def __init__(self, model: LiveModel):
        self.model = model
        tasks, width = model.tasks, model.width
        self.bit = {tid: 1 << i for i, tid in enumerate(tasks)}
        self.full = (1 << len(tasks)) - 1
        self.pred_mask = [sum(self.bit[p] for p in model.predecessors(tid)) for tid in tasks]
        self.wmask = [sum(self.bit[w] for w in ws) for ws in model.writers]
        self.rmask = [sum(self.bit[r] for r in rs) for rs in model.readers]
        sources = set(model.sources)
        # the groups that hold columns once fed in or written: (group, its width, fed in)
        self.groups = [(g, width[g], g in sources) for g in range(len(width))
                       if g in sources or self.wmask[g]]
        self.reusable = [_reusable_reads(model, tid) for tid in tasks]
        self._moves: dict[int, tuple[int, list[tuple[int, int, tuple]]]] = {}

    def live(self, mask: int) -> int:
        wmask, rmask, is_output = self.wmask, self.rmask, self.model.is_output
        return sum(w for g, w, fed in self.groups
                   if (fed or wmask[g] & mask)
                   and (is_output[g] or rmask[g] & ~mask or wmask[g] & ~mask))

    def moves(self, mask: int) -> tuple[int, list[tuple[int, int, tuple]]]:
        """(live columns, [(task index, new columns, dying reusable reads)]) once `mask` ran."""
        known = self._moves.get(mask)
        if known is not None:
            return known
        model, tasks, tg = self.model, self.model.tasks, self.model.tg
        wmask, rmask = self.wmask, self.rmask
        moves = []
        for i, tid in enumerate(tasks):
            if mask >> i & 1 or self.pred_mask[i] & ~mask:
                continue
            out = tg.tasks[tid].out_group
            if wmask[out] & mask:  # a later writer of a group already holding its columns
                moves.append((i, 0, ()))
                continue
            dying = tuple(r for r in self.reusable[i]
                          if rmask[r] & ~mask == self.bit[tid] and not wmask[r] & ~mask)
            moves.append((i, model.width[out], dying))
        known = (self.live(mask), moves)
        if len(self._moves) < self.KEPT:
            self._moves[mask] = known
        return known


def _reusable_reads(model: LiveModel, tid: int) -> list[int]:
    """The reads whose columns task `tid` may ever refill (not outputs, quiet enough), widest
    first: its dying reads at any step are those of them that die there, in this order."""
    t = model.tg.tasks[tid]
    return sorted((r for r in t.reads if not model.is_output[r]
                   and model.ranges.may_reuse(r, t.out_group)),
                  key=lambda r: (-model.width[r], r))


def reuse_view(model: LiveModel, machine: Machine) -> tuple[int, int, int]:
    """(d_head, heads, d_hidden) of `machine` as `reuse_capacity` sees it for the needed tasks:
    heads and neurons capped at the most any task's reuse could ask for (all its reusable reads
    dying at once), past which they never bind. Machines with one view give `exact_order` one
    answer, so a width search runs the search once for all of them (its widths differ mostly
    in heads and neurons that no reuse reaches)."""
    caps = model.reuse_caps.get(machine.d_head)
    if caps is None:
        heads = neurons = 0
        for tid, reads in zip(model.tasks, model.task_sets.reusable):
            t = model.tg.tasks[tid]
            cost = task_cost(model.tg, t, machine)
            if t.kind != MLP:
                heads = max(heads, heads_needed(
                    cost.heads, cost.dims + sum(model.width[r] for r in reads), machine.d_head))
            if t.kind != ATTN:
                neurons = max(neurons, cost.neurons +
                              sum(model.cancel_neurons[r] for r in reads))
        caps = model.reuse_caps[machine.d_head] = (heads, neurons)
    return machine.d_head, min(machine.n_heads, caps[0]), min(machine.d_hidden, caps[1])


def candidate_orders(model: LiveModel) -> dict[str, list[int]]:
    """The heuristic orders whose peaks `OrderChoice` compares (see module docstring)."""
    return {"block": block_order(model), "pressure-first": pressure_first_order(model),
            "deepest-first": deepest_first_order(model)}


class OrderChoice:
    """The candidate orders of one graph, walked once, priced per machine: `best(machine)` is
    the order of least peak there (ties: the first candidate); on a graph small enough for
    `exact_order`, the least peak of all.

    Each candidate's peak can only fall as d grows (more heads and neurons: more reuse), and
    the exact one is the least at every d, so the best peak never grows with d either: the
    widths that hold it are all those from the minimum up."""

    def __init__(self, model: LiveModel):
        self.model = model
        self.walks = {name: walk(model, order) for name, order in candidate_orders(model).items()}
        self.exact = len(model.tasks) <= EXACT_ORDER_TASKS
        self._best: dict[Machine, OrderPressure] = {}
        self._exact: dict[tuple[int, int, int], list[int]] = {}  # `reuse_view` -> its order

    def best(self, machine: Machine) -> OrderPressure:
        if machine not in self._best:
            self._best[machine] = self._find_best(machine)
        return self._best[machine]

    def _find_best(self, machine: Machine) -> OrderPressure:
        best = None
        for name, w in self.walks.items():
            p = pressure_of(self.model, w, machine, name)
            if best is None or p.peak < best.peak:
                best = p
        if self.exact and best.peak > 0:
            view = reuse_view(self.model, machine)
            order = self._exact.get(view)
            if order is None:
                order = self._exact[view] = exact_order(self.model, machine)
            p = pressure_of(self.model, walk(self.model, order), machine, "exact")
            if p.peak < best.peak:
                best = p
        return best

    def least_live_values(self, machine: Machine) -> _Walk:
        """Of the candidate orders and the best one at `machine`, the walk whose live values
        alone need the fewest columns (`_Walk.live_values_peak`)."""
        walks = [*self.walks.values(), walk(self.model, self.best(machine).order)]
        return min(walks, key=_Walk.live_values_peak)


# --------------------------------------------------------------------------------------
# Dead columns: where reuse, not the live values, makes the peak
# --------------------------------------------------------------------------------------


@dataclass
class DeadColumns:
    """Where an order's peak comes from columns that are dead, not from live values: task
    `at` writes `new` columns as the operands it reads last (`groups`) die, but of their
    columns it may refill only `reused`: the `loud` ones are too loud to cancel in the sublayer
    that refills them, and the cancels of the others (`short` columns) do not fit beside it."""

    at: int  # task id
    new: int
    groups: list[int]
    loud: list[int]
    short: int  # quiet dying columns whose cancels do not fit beside the task
    reused: int


def dead_columns_at(model: LiveModel, machine: Machine, w: _Walk) -> DeadColumns:
    """What blocks at the peak of order `w` on `machine`: its task, the operands it reads
    last, which of them are too loud to refill, and how many quiet columns its sublayer
    cannot cancel beside it (`reuse_capacity`)."""
    k = pressure_of(model, w, machine).peak_at
    tid = w.order[k]
    st = model.start()
    for done in w.order[:k]:
        st.run(done)
    last_read = st.dying(tid)
    out = model.tg.tasks[tid].out_group
    loud = [r for r in last_read if not model.ranges.may_reuse(r, out)]
    quiet = w.reusable.get(k, [])
    reused = reuse_capacity(model, tid, quiet, machine) if quiet else 0
    short = sum(model.width[r] for r in quiet) - reused
    return DeadColumns(tid, int(w.new[k]), last_read, loud, short, reused)


# --------------------------------------------------------------------------------------
# What no order beats
# --------------------------------------------------------------------------------------


@dataclass
class LowerBound:
    columns: int
    at: int | None  # the task id whose cut gives the bound (None: the inputs or the outputs)
    groups: list[int]  # the cut: groups live together in every order
    what: str  # "inputs", "outputs" or "task"


def lower_bound(model: LiveModel, machine: Machine, candidates: list[int] = ()) -> LowerBound:
    """The largest of: the inputs (live together before any task runs), the outputs (live
    together at the end), and for each candidate task, the groups that every order keeps live
    while it runs (written by an ancestor, read or written by a descendant or by itself, or
    an output) plus the new columns it cannot take from its own dying operands."""
    tg, width = model.tg, model.width
    src = [g for g in model.sources if model.readers[g] or model.is_output[g]]
    outs = [g for g, grp in enumerate(tg.groups) if grp.is_output and (model.writers[g] or g in src)]
    best = max((LowerBound(sum(width[g] for g in src), None, src, "inputs"),
                LowerBound(sum(width[g] for g in outs), None, outs, "outputs")),
               key=lambda b: b.columns)
    if not candidates:
        return best
    succ = model.successors()
    preds = {tid: model.predecessors(tid) for tid in model.tasks}
    for tid in dict.fromkeys(candidates):
        b = _task_bound(model, machine, tid, preds, succ)
        if b.columns > best.columns:
            best = b
    return best


def _reach(start: int, edges) -> set[int]:
    seen, stack = set(), [start]
    while stack:
        for nxt in edges(stack.pop()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def _task_bound(model: LiveModel, machine: Machine, tid: int, preds, succ) -> LowerBound:
    tg, width = model.tg, model.width
    sources = set(model.sources)
    anc = _reach(tid, lambda t: preds[t])
    desc = _reach(tid, lambda t: succ[t])
    later = desc | {tid}
    t = tg.tasks[tid]
    cut = []
    for g in range(len(tg.groups)):
        written = g in sources or any(w in anc for w in model.writers[g])
        if not written:
            continue
        if model.is_output[g] or any(r in later for r in model.readers[g]) \
                or any(w in later for w in model.writers[g]):
            cut.append(g)
    new = 0 if any(w in anc for w in model.writers[t.out_group]) else width[t.out_group]
    dying = sorted((r for r in t.reads if not model.is_output[r]
                    and not any(x in desc for x in model.readers[r])
                    and not any(x in desc for x in model.writers[r])
                    and model.ranges.may_reuse(r, t.out_group)),
                   key=lambda r: (-width[r], r))
    reuse = reuse_capacity(model, tid, dying, machine) if new and dying else 0
    return LowerBound(sum(width[g] for g in cut) + max(0, new - reuse), tid, cut, "task")


# --------------------------------------------------------------------------------------
# The minimum width
# --------------------------------------------------------------------------------------


def describe_groups(tg: TaskGraph, groups: list[int], limit: int = 4) -> str:
    """'a (w), b (w), ... and N more' for a refusal message: the widest groups first."""
    from twdialect.dialect import describe

    shown = sorted(groups, key=lambda g: (-tg.groups[g].width, g))
    parts = []
    for g in shown[:limit]:
        grp = tg.groups[g]
        owner = grp.value.owner
        parts.append(f"{describe(owner) if owner is not None else 'input'} ({grp.width})")
    more = len(shown) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


__all__ = ["GroupRanges", "SAME_SUBLAYER_RATIO", "LiveModel", "OrderPressure", "OrderChoice",
           "LowerBound", "lower_bound", "needed_tasks", "candidate_orders", "block_order",
           "pressure_first_order", "deepest_first_order", "exact_order", "walk", "pressure_of",
           "reuse_capacity", "describe_groups", "DeadColumns", "dead_columns_at"]
