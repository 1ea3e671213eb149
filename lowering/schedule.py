"""The scheduler: place every task in a sublayer slot, give every group its residual columns.

A greedy list scheduler over slots (2L = attention of layer L, 2L+1 = its MLP), in the seed's
spirit: small, no hidden state, every decision local.

* Readiness: a task may run in slot s once every group it waits on is complete before s.
* Priority: least slack first: the latest slot a task can take without pushing the graph past
  its critical-path floor (ALAP), then block order. Under residual pressure (under a quarter of
  the columns free or reclaimable) tasks that free more columns than they take go first.
* Routing: attention tasks take heads; MLP tasks take neurons; a linear or add (either) runs
  in the MLP as a bypass pair (cheap neurons) unless it has no slack left, then as head work.
  All position-local head work of a sublayer (linears, adds, cancels) shares heads: each needs
  min(inputs, outputs) value dims, packed d_head to a head.
* Costs: every task's heads/dims/neurons come from its op kind's rule (`lowering/rules.py`),
  the table the weight writer writes from.
* Columns: a group takes columns when its first writer runs and dies after its last reader;
  dead columns are reclaimed lazily, only when a writer needs room: a cancel in the same
  sublayer (attention: V=I, O=-I dims; MLP: two neurons per column) zeroes them while the
  writer fills them (both land in the same residual add), unless the dead value is loud
  enough to cost the new one its low bits (value ranges, `SAME_SUBLAYER_RATIO`): then the
  cancel runs a sublayer ahead. Under pressure, dead groups are cancelled ahead with the
  heads/neurons a sublayer has left.
* Admission: new work (a task that retires no computed operand, e.g. the first step of another
  loop iteration) may not take the last columns that work in flight may need next; a schedule
  that still stalls is retried once with the full reserve, then at the 48 nearest narrower widths (a
  narrower machine admits less at once and may fit), before the width is declared too small:
  feasibility is monotone in d.
* Repair: a schedule that ends above its floor tries a few stricter variants (full reserve,
  one or two heads' worth of columns less); the fewest layers win.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from lowering.machine import GeometryError, Machine
from lowering.rules import Cost, cancel_cost, task_cost
from lowering.tasks import POS_GROUP, Task, TaskGraph
from twdialect.analysis import ATTN, EITHER, MLP, critical_path
from twdialect.dense import shape_of
from twdialect.dialect import AttnOp, describe

PRESSURE = 0.25  # below this share of free (or reclaimable) columns, free columns first
# A cancel in the same sublayer as the writer that reuses the columns lands as one residual
# add of (-old + new), rounded at ulp(|old|): the new value keeps its low bits only while
# |old| <= SAME_SUBLAYER_RATIO * max(1, |new|) (error <= 2^-24 * 64 ~ 4e-6 of the new scale).
# Louder dead values are cancelled a sublayer ahead (exact: old + (-old) == 0).
SAME_SUBLAYER_RATIO = 64.0


@dataclass
class Schedule:
    machine: Machine
    tg: TaskGraph
    slot: list[int]  # task id -> slot (-1: dead code, never placed)
    cols: list[np.ndarray | None]  # group id -> its residual columns
    died: list[int]  # group id -> slot from which its columns were reusable (inf: never)
    cancels: list[tuple[int, int]]  # (slot, group id): cancel emitted in that slot
    n_layers: int
    floor: int
    attn_heads: list[int] = field(default_factory=list)  # per layer, heads used
    neurons: list[int] = field(default_factory=list)  # per layer, MLP neurons used
    occupancy: list[int] = field(default_factory=list)  # per layer, live columns (max)
    # group id -> per column +1 (>= 0), -1 (<= 0), 0 (either): a one-signed column's MLP
    # cancel is one neuron (-relu(x), or relu(-x)), an unsigned one's two
    cancel_signs: dict[int, np.ndarray] = field(default_factory=dict)


def check_fits(tg: TaskGraph, machine: Machine) -> None:
    """Structural checks: an op too wide for any layer of this geometry."""
    for t in tg.tasks:
        op = t.op
        cost = task_cost(tg, t, machine)
        if isinstance(op, AttnOp):
            d_qk = shape_of(op.wq)[1]
            if d_qk > machine.d_head:
                raise GeometryError(f"{describe(op)}: query/key width {d_qk} exceeds d_head="
                                    f"{machine.d_head}; smallest d_head that fits: {d_qk}")
            if cost.heads > machine.n_heads:
                raise GeometryError(f"{describe(op)}: needs {cost.heads} heads, a layer has "
                                    f"{machine.n_heads}; smallest d that fits: "
                                    f"{cost.heads * machine.d_head}")
        if t.kind == MLP and cost.neurons > machine.d_hidden:
            raise GeometryError(f"{describe(op)}: needs {cost.neurons} MLP neurons, d_hidden="
                                f"{machine.d_hidden}; smallest d_hidden that fits: {cost.neurons}")
        if t.kind == EITHER and cost.dims > machine.n_heads * machine.d_head \
                and cost.neurons > machine.d_hidden:
            raise GeometryError(f"{describe(op)}: a {cost.dims}-dim linear fits neither the heads "
                                f"of a layer ({machine.n_heads * machine.d_head} dims) nor its "
                                f"MLP ({machine.d_hidden} neurons, needs {cost.neurons})")
        width = tg.groups[t.out_group].width
        if width > machine.free_columns:
            raise GeometryError(f"{describe(op)}: its {width}-wide result exceeds the residual "
                                f"width ({machine.free_columns} free of d={machine.d})")
    src = sum(tg.groups[g].width for g in tg.sources)
    if src > machine.free_columns:
        fit = -(-(src + machine.RESERVED) // machine.d_head) * machine.d_head
        raise GeometryError(f"residual width binds: the inputs alone need {src} columns, "
                            f"d={machine.d} leaves {machine.free_columns}; smallest d that "
                            f"fits them: {fit}")


def _needed_tasks(tg: TaskGraph) -> list[bool]:
    """Tasks whose result reaches an output (reads or ordering edges); the rest is dead code."""
    needed_groups = [g.is_output for g in tg.groups]
    needed = [False] * len(tg.tasks)
    for t in reversed(tg.tasks):
        if needed_groups[t.out_group]:
            needed[t.tid] = True
            for g in t.waits:
                needed_groups[g] = True
    return needed


def _latest_slots(tg: TaskGraph, needed: list[bool], last_slot: int) -> list[int]:
    """ALAP: the latest slot of each task that keeps every output ready by `last_slot`."""
    deadline = [last_slot + 1 if g.is_output else 1 << 40 for g in tg.groups]
    latest = [0] * len(tg.tasks)
    for t in reversed(tg.tasks):
        if not needed[t.tid]:
            continue
        s = deadline[t.out_group] - 1
        if t.kind == ATTN and s % 2:
            s -= 1
        elif t.kind == MLP and s % 2 == 0:
            s -= 1
        latest[t.tid] = s
        for g in t.waits:
            deadline[g] = min(deadline[g], s)
    return latest


class _Columns:
    """Residual columns: clean free columns, dead groups whose columns await a cancel, and
    columns cancelled in the current sublayer (clean from the next one)."""

    def __init__(self, machine: Machine):
        self.free = list(range(machine.RESERVED, machine.d))
        heapq.heapify(self.free)
        self.dirty: deque[int] = deque()
        self.dirty_width = 0
        self.cleaning: list[np.ndarray] = []

    def take(self, n: int) -> np.ndarray:
        return np.array(sorted(heapq.heappop(self.free) for _ in range(n)), dtype=np.int64)

    def give(self, cols: np.ndarray) -> None:
        for c in cols.tolist():
            heapq.heappush(self.free, c)

    def next_sublayer(self) -> None:
        for cols in self.cleaning:
            self.give(cols)
        self.cleaning.clear()

    def free_or_reclaimable(self) -> int:
        return len(self.free) + self.dirty_width + sum(len(c) for c in self.cleaning)


class GroupRanges:
    """What the value ranges say of each group, computed on first use (only schedules that
    reuse columns need it): the largest |value| its columns can hold, and each column's sign
    when the range keeps to one side of zero (+1: >= 0, -1: <= 0, 0: either)."""

    def __init__(self, tg: TaskGraph):
        self.tg = tg
        self.mag: list[float] | None = None
        self._signs: list[np.ndarray] | None = None

    def __getitem__(self, g: int) -> float:
        if self.mag is None:
            self._compute()
        return self.mag[g]

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
            ranges = value_ranges(tg.graph, strict=False)
        except RangeError:  # an op without a range rule: assume the worst
            self.mag, self._signs = [math.inf] * len(tg.groups), unknown
            return

        def maxabs(v) -> float:
            lo, hi = ranges.get(v, (None, None))
            if lo is None or not len(lo):
                return 0.0 if lo is not None else math.inf
            return float(max(np.abs(lo).max(), np.abs(hi).max()))

        self.mag = [maxabs(g.value) for g in tg.groups]
        for t in tg.tasks:  # partial sums of an accumulating group pass through its writers
            self.mag[t.out_group] = max(self.mag[t.out_group], maxabs(t.op.results[0]))
        self._signs = unknown
        for g in tg.groups:
            box = ranges.get(g.value)
            if box is None:
                continue
            lo, hi = box
            if type(g.source) is PosEncodingOp:  # component 0 is the machine's column
                lo, hi = lo[1:], hi[1:]
            self._signs[g.gid] = np.where(lo >= 0, 1, np.where(hi <= 0, -1, 0)).astype(np.int8)

    def loud(self, g: int) -> bool:
        return self[g] > SAME_SUBLAYER_RATIO

    def may_reuse(self, old: int, new: int) -> bool:
        """Whether `new` may take dead `old`'s columns in the sublayer that cancels them."""
        return self[old] <= SAME_SUBLAYER_RATIO * max(1.0, self[new])


def schedule(tg: TaskGraph, machine: Machine, max_stall: int = 8, suggest: bool = True) -> Schedule:
    """Place every task; on a residual-width stall the error names the smallest d that fits.

    Feasibility is monotone in d: a greedy schedule can stall at d although a narrower
    machine fits (it admits more work at once, then runs out of room), so a stall at d is
    retried at the narrower widths (multiples of d_head, the nearest `NARROWER_TRIES`, which
    bounds the time a hopeless width takes to refuse); the first that fits is used as it is
    (its columns and heads exist at d too)."""
    try:
        return _repair(tg, machine, max_stall, _schedule_twice(tg, machine, max_stall))
    except ResidualStall as e:
        narrower = _fit_narrower(tg, machine, max_stall)
        if narrower is not None:
            return narrower
        if not suggest:
            raise
        fit = smallest_fitting_d(tg, dataclasses.replace(machine, d=2 * machine.d), max_stall,
                                 known_too_small=machine.d)
        hint = f"smallest d that fits (d_head={machine.d_head}, d_hidden={machine.d_hidden}): {fit}" \
            if fit else "no d up to 64x the requested one fits (or none found within " \
            f"{SEARCH_BUDGET} trial schedules)"
        raise GeometryError(f"{e}; {hint}") from None


REPAIR_TRIES = 3  # extra schedules tried when the first one ends above the floor (full
# reserve, then REPAIR_TRIES - 1 narrower widths)
NARROWER_TRIES = 48  # narrower widths a stall is retried at (so feasibility is monotone)


def _repair(tg: TaskGraph, machine: Machine, max_stall: int, sched: Schedule) -> Schedule:
    """A schedule above its floor missed it under residual pressure; greedy admission is not
    monotone in the room it has, so a few stricter variants (the full admission reserve,
    then one and two heads' worth of columns less) often get a layer or more back. The
    fewest layers win; ties keep the first."""
    if sched.n_layers <= sched.floor:
        return sched
    variants = [(machine, True)] + [
        (dataclasses.replace(machine, d=machine.d - k * machine.d_head), False)
        for k in range(1, REPAIR_TRIES) if machine.d - k * machine.d_head > machine.RESERVED]
    for m, full in variants:
        try:
            other = _schedule(tg, m, max_stall, full_reserve=full) if full else \
                _schedule_twice(tg, m, max_stall)
        except GeometryError:
            continue
        if other.n_layers < sched.n_layers:
            other.machine = machine
            sched = other
            if sched.n_layers <= sched.floor:
                break
    return sched


def _fit_narrower(tg: TaskGraph, machine: Machine, max_stall: int) -> Schedule | None:
    """The widest narrower geometry whose schedule fits, re-targeted to `machine`."""
    inputs = sum(tg.groups[g].width for g in tg.sources) + machine.RESERVED
    d = machine.d - machine.d_head
    lowest = max(inputs, machine.RESERVED + 1, machine.d - NARROWER_TRIES * machine.d_head)
    while d >= lowest:
        try:
            sched = _schedule_twice(tg, dataclasses.replace(machine, d=d), max_stall)
        except GeometryError:
            d -= machine.d_head
            continue
        sched.machine = machine
        return sched
    return None


class ResidualStall(GeometryError):
    """No ready op can get residual columns: the width binds."""


def smallest_fitting_d(tg: TaskGraph, machine: Machine, max_stall: int = 8,
                       known_too_small: int = 0) -> int | None:
    """Smallest multiple of d_head at which `schedule` succeeds (None: none up to 64x d, or
    none found within `SEARCH_BUDGET` schedules).

    A probe asks whether one of the `NARROWER_TRIES` widths at or below its width fits (as
    `schedule` itself retries them); a failed probe rules them out, so the bisection agrees
    with `schedule` however greedy scheduling varies with d, and no width is scheduled twice.
    `known_too_small`: a width `schedule` has already refused (nothing at or below it fits)."""
    step = machine.d_head
    tried: dict[int, bool] = {}

    def fits(d: int) -> bool:
        if d not in tried:
            if len(tried) >= SEARCH_BUDGET:
                raise _OutOfBudget
            try:
                _schedule_twice(tg, dataclasses.replace(machine, d=d), max_stall)
                tried[d] = True
            except GeometryError:
                tried[d] = False
        return tried[d]

    def any_fits(lo: int, hi: int) -> bool:  # one of the widths schedule() tries at hi fits
        return any(fits(d) for d in range(hi, max(lo, hi - NARROWER_TRIES * step), -step))

    inputs = sum(tg.groups[g].width for g in tg.sources) + machine.RESERVED
    lo = max(inputs - 1, machine.RESERVED, known_too_small) // step * step  # nothing <= lo fits
    hi = max(machine.d // step * step, lo + step)
    try:
        while not any_fits(lo, hi):
            if hi > 64 * machine.d:
                return None
            lo, hi = hi, 2 * hi
        while hi - lo > step:
            mid = (lo + hi) // 2 // step * step
            if mid <= lo:
                break
            if any_fits(lo, mid):
                hi = mid
            else:
                lo = mid
    except _OutOfBudget:
        return None
    return hi


SEARCH_BUDGET = 256  # schedules the smallest-d search may run


class _OutOfBudget(Exception):
    pass


def _schedule_twice(tg: TaskGraph, machine: Machine, max_stall: int) -> Schedule:
    """The light admission reserve first; if the residual stalls, the full one (see below)."""
    try:
        return _schedule(tg, machine, max_stall)
    except ResidualStall:
        return _schedule(tg, machine, max_stall, full_reserve=True)


def _schedule(tg: TaskGraph, machine: Machine, max_stall: int = 8,
              full_reserve: bool = False) -> Schedule:
    check_fits(tg, machine)
    cp = critical_path(tg.graph)
    floor = cp.n_layers
    needed = _needed_tasks(tg)
    # Deadlines count back from the outputs' floor only: ops no output reads must not
    # stretch the horizon (that gave live ops false slack and cost layers).
    latest = _latest_slots(tg, needed, max(cp.last_slot, 0))
    costs = [task_cost(tg, t, machine) if needed[t.tid] else Cost() for t in tg.tasks]

    n_groups = len(tg.groups)
    cols: list[np.ndarray | None] = [None] * n_groups
    died = [1 << 40] * n_groups
    writers_left = [sum(1 for w in g.writers if needed[w]) for g in tg.groups]
    readers_left = [sum(1 for r in g.readers if needed[r]) for g in tg.groups]
    waits_left = [len(t.waits) for t in tg.tasks]
    waiters: list[list[int]] = [[] for _ in range(n_groups)]
    for t in tg.tasks:
        if needed[t.tid]:
            for g in t.waits:
                waiters[g].append(t.tid)
    slot = [-1] * len(tg.tasks)
    cancels: list[tuple[int, int]] = []
    columns = _Columns(machine)
    ranges = GroupRanges(tg)
    pending: dict[int, list[int]] = {}

    def complete(g: int, s: int) -> None:
        for tid in waiters[g]:
            waits_left[tid] -= 1
            if waits_left[tid] == 0:
                pending.setdefault(s + 1, []).append(tid)

    live = [0]  # columns holding values still to be read (dead, unreclaimed ones excluded)

    def maybe_die(g: int, s: int) -> None:
        grp = tg.groups[g]
        if readers_left[g] == 0 and writers_left[g] == 0 and not grp.is_output \
                and cols[g] is not None and died[g] > s:
            died[g] = s
            columns.dirty.append(g)
            columns.dirty_width += grp.width
            live[0] -= grp.width

    for g in tg.sources:
        cols[g] = columns.take(tg.groups[g].width)
        live[0] += tg.groups[g].width
    for g in tg.sources:
        complete(g, -1)
        maybe_die(g, 0)
    for t in tg.tasks:
        if needed[t.tid] and not t.waits:
            pending.setdefault(0, []).append(t.tid)

    # Admission reserve: a task that starts new work (it retires no computed operand, e.g.
    # the first step of another loop iteration) may not eat into the last `reserve` columns;
    # a task that advances work in flight (it retires a computed operand) may, even when its
    # output is wider than what it retires. So in-flight chains keep room for their next
    # steps, and greedy admission of many wide chains does not deadlock.
    # The light reserve (half the width at most, only under 25% free) barely delays work at
    # generous widths; when it still stalls, the full reserve (the widest output, anywhere)
    # is tried before the width is declared too small.
    widest = max([tg.groups[t.out_group].width for t in tg.tasks if needed[t.tid]] + [0])
    if full_reserve:
        reserve, pressure = min(widest, machine.free_columns), machine.free_columns
    else:
        reserve = min(widest, machine.free_columns // 2)
        pressure = PRESSURE * machine.free_columns
    source_groups = set(tg.sources)
    heaps: dict[str, list[tuple[int, int, int]]] = {ATTN: [], MLP: [], EITHER: []}
    n_todo = sum(needed)
    s = 0
    stall = 0
    last_used = -1
    occupancy_by_slot: list[int] = []
    usage: list[tuple[int, int]] = []  # per slot: (heads, neurons)
    while n_todo:
        columns.next_sublayer()
        for tid in pending.pop(s, ()):
            t = tg.tasks[tid]
            heapq.heappush(heaps[t.kind], (latest[tid], t.index, tid))
        attention = s % 2 == 0
        if attention:
            cands = _pop_all(heaps[ATTN]) + _pop_while(heaps[EITHER], lambda e: e[0] <= s)
        else:
            cands = _pop_all(heaps[MLP]) + _pop_all(heaps[EITHER])
        cands.sort()
        free_share = columns.free_or_reclaimable() / machine.free_columns
        if free_share < PRESSURE and cands:
            cands.sort(key=lambda e: (_net_columns(tg, tg.tasks[e[2]], cols, readers_left) > 0,) + e)
        heads = pool = neurons = 0
        placed = 0
        for entry in cands:
            tid = entry[2]
            t = tg.tasks[tid]
            cost = costs[tid]
            g = t.out_group
            need_cols = tg.groups[g].width if cols[g] is None else 0
            reclaim = _reclaim_plan(columns, need_cols, tg,
                                    lambda old: died[old] <= s and ranges.may_reuse(old, g))
            free_after = columns.free_or_reclaimable() - need_cols
            if reclaim is None or (
                    need_cols and stall < 2  # stuck for a whole layer: the reserve gives way
                    and free_after < reserve and free_after < pressure
                    and not _advances(tg, t, readers_left, source_groups)):
                heapq.heappush(heaps[t.kind], entry)
                continue
            cc = [cancel_cost(ranges.signs(rg), attention) for rg in reclaim]
            if attention:
                h2 = heads + cost.heads
                p2 = pool + cost.dims + sum(c.dims for c in cc)
                fits = h2 + math.ceil(p2 / machine.d_head) <= machine.n_heads
            else:
                n2 = neurons + cost.neurons + sum(c.neurons for c in cc)
                fits = n2 <= machine.d_hidden
            if not fits:
                heapq.heappush(heaps[t.kind], entry)
                continue
            # Commit.
            if attention:
                heads, pool = h2, p2
            else:
                neurons = n2
            for rg in reclaim:
                columns.dirty.remove(rg)
                columns.dirty_width -= tg.groups[rg].width
                columns.give(cols[rg])
                cancels.append((s, rg))
            if need_cols:
                cols[g] = columns.take(need_cols)
                live[0] += need_cols
            slot[tid] = s
            placed += 1
            n_todo -= 1
            last_used = s
            for rg in t.reads:
                readers_left[rg] -= 1
                maybe_die(rg, s)
            writers_left[g] -= 1
            if writers_left[g] == 0:
                complete(g, s)
                maybe_die(g, s + 1)
        # Under pressure, cancel dead groups ahead of need with what this sublayer has left
        # (loud ones first: they cannot be cancelled in the sublayer that reuses them).
        if columns.dirty and (free_share < PRESSURE or full_reserve):
            for rg in sorted(columns.dirty, key=lambda g: not ranges.loud(g)):
                if died[rg] > s:  # written in this very sublayer: nothing to cancel yet
                    continue
                w = tg.groups[rg].width
                cc = cancel_cost(ranges.signs(rg), attention)
                if attention:
                    p2 = pool + cc.dims
                    if heads + math.ceil(p2 / machine.d_head) > machine.n_heads:
                        continue
                    pool = p2
                else:
                    n2 = neurons + cc.neurons
                    if n2 > machine.d_hidden:
                        continue
                    neurons = n2
                columns.dirty.remove(rg)
                columns.dirty_width -= w
                columns.cleaning.append(cols[rg])
                cancels.append((s, rg))
                placed += 1  # progress: the columns are clean from the next sublayer
        usage.append((heads + math.ceil(pool / machine.d_head) if attention else 0,
                      0 if attention else neurons))
        occupancy_by_slot.append(live[0])
        waiting = any(heaps.values()) or any(k > s for k in pending)
        if placed == 0 and n_todo:
            stall = stall + 1 if any(heaps.values()) else 0
            if stall > max_stall:
                raise _stall_error(tg, machine, heaps, columns, live[0])
            if not waiting:
                raise GeometryError("scheduler invariant broken: tasks remain but none can "
                                    "ever become ready (a cycle through tw.after?)")
        else:
            stall = 0
        s += 1

    n_layers = last_used // 2 + 1 if last_used >= 0 else 0
    sched = Schedule(machine, tg, slot, cols, died, cancels, n_layers, floor,
                     cancel_signs={g: ranges.signs(g) for _, g in cancels})
    for layer in range(n_layers):
        a = usage[2 * layer] if 2 * layer < len(usage) else (0, 0)
        m = usage[2 * layer + 1] if 2 * layer + 1 < len(usage) else (0, 0)
        sched.attn_heads.append(a[0])
        sched.neurons.append(m[1])
        occ = occupancy_by_slot[2 * layer: 2 * layer + 2] or [0]
        sched.occupancy.append(max(occ) + machine.RESERVED)
    return sched


def _pop_all(heap: list) -> list:
    out = heap[:]
    heap.clear()
    return out


def _pop_while(heap: list, pred) -> list:
    out = []
    while heap and pred(heap[0]):
        out.append(heapq.heappop(heap))
    return out


def _reclaim_plan(columns: _Columns, need: int, tg: TaskGraph, may_reuse):
    """Dead groups to cancel in this sublayer so `need` clean columns exist (oldest deaths
    first, only those `may_reuse` allows); None when they do not add up."""
    if need <= len(columns.free):
        return []
    if need > len(columns.free) + columns.dirty_width:
        return None
    plan, got = [], len(columns.free)
    for g in columns.dirty:
        if got >= need:
            break
        if may_reuse(g):
            plan.append(g)
            got += tg.groups[g].width
    return plan if got >= need else None


def _advances(tg: TaskGraph, t: Task, readers_left, source_groups: set[int]) -> bool:
    """Whether the task is the last reader of a computed (non-source) operand."""
    return any(g != POS_GROUP and readers_left[g] == 1 and g not in source_groups
               and not tg.groups[g].is_output for g in t.reads)


def _net_columns(tg: TaskGraph, t: Task, cols, readers_left) -> int:
    """Columns a task takes minus the columns its placement lets die."""
    grp = tg.groups[t.out_group]
    take = grp.width if cols[t.out_group] is None else 0
    frees = sum(tg.groups[g].width for g in t.reads
                if readers_left[g] == 1 and not tg.groups[g].is_output and g != POS_GROUP)
    return take - frees


def _stall_error(tg: TaskGraph, machine: Machine, heaps, columns: _Columns, live: int):
    waiting = sorted(e for h in heaps.values() for e in h)
    t = tg.tasks[waiting[0][2]]
    need = tg.groups[t.out_group].width
    return ResidualStall(
        f"residual width binds at d={machine.d}: {live} of {machine.free_columns} free columns "
        f"hold live values and {len(waiting)} ready ops cannot get room (next: {describe(t.op)} "
        f"needs {need})")
