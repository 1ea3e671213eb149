"""The scheduler: place every task in a sublayer slot, give every group its residual columns.

A greedy list scheduler over slots (2L = attention of layer L, 2L+1 = its MLP; the slot,
placement and free-add rules are `twdialect.analysis`'s, the ones the floor uses), in the
seed's spirit: small, no hidden state, every decision local. `Scheduler.run` is the loop: each
slot opens a `Sublayer` (its heads/neurons budget), offers it the ready tasks (`Readiness`),
places those whose columns (`Columns`, `Lifetimes`) and `Admission` allow, cancels dead groups
ahead under pressure, and closes it (a run of sublayers without progress is a stall).

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
  enough to cost the new one its low bits (value ranges, `SAME_SUBLAYER_RATIO`): such columns
  are refilled only after a cancel a sublayer ahead. Under pressure, dead groups are cancelled
  ahead with the heads/neurons a sublayer has left.
* Admission: new work (a task that retires no computed operand, e.g. the first step of another
  loop iteration) may not take the last columns that work in flight may need next; a schedule
  that still stalls is retried once with the full reserve, then at the 48 nearest narrower
  widths (a narrower machine admits less at once and may fit), before the width is declared
  too small: feasibility is monotone in d.
* Repair: a schedule that ends above its floor tries a few stricter variants (full reserve,
  one or two heads' worth of columns less); the fewest layers win.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import operator
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from lowering.layer import heads_needed
from lowering.machine import GeometryError, Machine
from lowering.rules import Cost, cancel_cost, task_cost
from lowering.tasks import POS_GROUP, Task, TaskGraph
from twdialect.analysis import (
    ATTN,
    EITHER,
    MLP,
    critical_path,
    is_attention_slot,
    latest_slot,
    layer_of,
    layers_through,
)
from twdialect.dense import shape_of
from twdialect.dialect import describe

PRESSURE = 0.25  # below this share of free (or reclaimable) columns, free columns first
# A cancel in the same sublayer as the writer that reuses the columns lands as one residual
# add of (-old + new), rounded at ulp(|old|): the new value keeps its low bits only while
# |old| <= SAME_SUBLAYER_RATIO * max(1, |new|) (error <= 2^-24 * 64 ~ 4e-6 of the new scale).
# Louder dead values are cancelled a sublayer ahead (exact: old + (-old) == 0).
SAME_SUBLAYER_RATIO = 64.0


@dataclass
class Schedule:
    """Where every task runs and every group lives: what `materialize` writes from."""

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
        if t.kind == ATTN:
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
        s = latest[t.tid] = latest_slot(deadline[t.out_group], t.kind)
        for g in t.waits:
            deadline[g] = min(deadline[g], s)
    return latest


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
            other = Scheduler(tg, m, max_stall, full_reserve=True).run() if full else \
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
                       known_too_small: int = 0, at=None) -> int | None:
    """Smallest multiple of d_head at which `schedule` succeeds (None: none up to 64x d, or
    none found within `SEARCH_BUDGET` schedules).

    A probe asks whether one of the `NARROWER_TRIES` widths at or below its width fits (as
    `schedule` itself retries them); a failed probe rules them out, so the bisection agrees
    with `schedule` however greedy scheduling varies with d, and no width is scheduled twice.
    `known_too_small`: a width `schedule` has already refused (nothing at or below it fits).
    `at(d)`: the machine tried at width d (default: `machine` at width d, its d_hidden kept, as
    a refusal's hint states it; a depth/width sweep scales d_hidden with d instead)."""
    at = at or (lambda d: dataclasses.replace(machine, d=d))
    step = machine.d_head
    tried: dict[int, bool] = {}

    def fits(d: int) -> bool:
        if d not in tried:
            if len(tried) >= SEARCH_BUDGET:
                raise _OutOfBudget
            try:
                _schedule_twice(tg, at(d), max_stall)
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
    """The light admission reserve first; if the residual stalls, the full one (see `Admission`)."""
    try:
        return Scheduler(tg, machine, max_stall).run()
    except ResidualStall:
        return Scheduler(tg, machine, max_stall, full_reserve=True).run()


# --------------------------------------------------------------------------------------
# The scheduler: one greedy pass over the slots
# --------------------------------------------------------------------------------------


class Scheduler:
    """One greedy pass over the slots at one width (see the module docstring); `run` fills
    sublayer after sublayer until every needed task is placed. All its state is named below:
    `columns` (the residual), `groups` (each group's lifetime), `ready` (which tasks may run),
    `admission` (the column reserve), and the `Sublayer` being filled."""

    def __init__(self, tg: TaskGraph, machine: Machine, max_stall: int = 8,
                 full_reserve: bool = False):
        check_fits(tg, machine)
        self.tg, self.machine = tg, machine
        self.max_stall = max_stall  # sublayers without progress before the width is refused
        self.full_reserve = full_reserve
        cp = critical_path(tg.graph)
        self.floor = cp.n_layers
        self.needed = _needed_tasks(tg)
        # Deadlines count back from the outputs' floor only: ops no output reads must not
        # stretch the horizon (that gave live ops false slack and cost layers).
        self.latest = _latest_slots(tg, self.needed, max(cp.last_slot, 0))
        self.costs = [task_cost(tg, t, machine) if self.needed[t.tid] else Cost()
                      for t in tg.tasks]
        self.columns = Columns(machine, [g.width for g in tg.groups])
        self.groups = Lifetimes.of(tg, self.needed)
        self.ready = Readiness.of(tg, self.needed)
        self.admission = Admission.of(tg, machine, self.needed, full_reserve)
        self.ranges = GroupRanges(tg)
        self.slot = [-1] * len(tg.tasks)  # task id -> its slot
        self.cancels: list[tuple[int, int]] = []  # (slot, group id)
        self.todo = sum(self.needed)
        self.stall = 0  # sublayers in a row without progress while tasks wait
        self.last_used = -1  # the last slot that placed a task
        self.heads_by_slot: list[int] = []
        self.neurons_by_slot: list[int] = []
        self.live_by_slot: list[int] = []

    def run(self) -> Schedule:
        self._place_sources()
        s = 0
        while self.todo:
            sub = self._open_sublayer(s)
            for entry in self._candidates(sub):
                self._try_place(entry, sub)
            if self.columns.dirty and (sub.pressure or self.full_reserve):
                self._cancel_ahead(sub)
            self._close_sublayer(sub)
            s += 1
        return self._result()

    # -- the steps of `run` -----------------------------------------------------------

    def _place_sources(self) -> None:
        """Sources take their columns first and are complete before slot 0."""
        tg = self.tg
        for g in tg.sources:
            self.columns.assign(g, tg.groups[g].width)
            self.groups.live += tg.groups[g].width
        for g in tg.sources:
            self.ready.complete(g, -1)
            self._retire_if_dead(g, 0)
        self.ready.start(tg, self.needed)

    def _open_sublayer(self, s: int) -> Sublayer:
        self.columns.next_sublayer()
        self.ready.release(s, self.tg, self.latest)
        free_share = self.columns.free_or_reclaimable() / self.machine.free_columns
        return Sublayer(s, self.machine, pressure=free_share < PRESSURE)

    def _candidates(self, sub: Sublayer) -> list[tuple[int, int, int]]:
        """The ready tasks this sublayer may take, least slack first; under pressure, those
        that free at least as many columns as they take go first."""
        cands = self.ready.take(sub.slot)
        if sub.pressure and cands:
            cands.sort(key=lambda e: (self._net_columns(self.tg.tasks[e[2]]) > 0,) + e)
        return cands

    def _try_place(self, entry: tuple[int, int, int], sub: Sublayer) -> None:
        """Place the task if its columns can be had (reclaiming dead ones in this very
        sublayer), admission allows it and the sublayer has the heads/neurons; otherwise it
        waits for a later sublayer."""
        t = self.tg.tasks[entry[2]]
        g = t.out_group
        need_cols = self.tg.groups[g].width if self.columns.of_group[g] is None else 0
        reclaim = self.columns.reclaim_plan(
            need_cols, lambda old: self.groups.died[old] <= sub.slot
            and self.ranges.may_reuse(old, g))
        if reclaim is None or self._held_back(t, need_cols):
            self.ready.put_back(entry, t.kind)
            return
        cost = sum((cancel_cost(self.ranges.signs(rg), sub.attention) for rg in reclaim),
                   self.costs[t.tid])
        if not sub.fits(cost):
            self.ready.put_back(entry, t.kind)
            return
        sub.take(cost)
        for rg in reclaim:
            self.columns.cancel_for_reuse(rg)
            self.cancels.append((sub.slot, rg))
        self._commit(t, sub.slot, need_cols)
        sub.placed += 1

    def _held_back(self, t: Task, need_cols: int) -> bool:
        """New work may not take the reserve's last columns, unless the schedule has been
        stuck for a whole layer (then the reserve gives way)."""
        return bool(need_cols) and self.stall < 2 and self.admission.refuses(
            self.columns.free_or_reclaimable() - need_cols) and not self._advances(t)

    def _commit(self, t: Task, s: int, need_cols: int) -> None:
        g = t.out_group
        if need_cols:
            self.columns.assign(g, need_cols)
            self.groups.live += need_cols
        self.slot[t.tid] = s
        self.todo -= 1
        self.last_used = s
        for rg in t.reads:
            self.groups.readers_left[rg] -= 1
            self._retire_if_dead(rg, s)
        self.groups.writers_left[g] -= 1
        if self.groups.writers_left[g] == 0:
            self.ready.complete(g, s)
            self._retire_if_dead(g, s + 1)

    def _retire_if_dead(self, g: int, s: int) -> None:
        """A group nothing will read or write again dies: its columns are reusable from `s`
        (they still hold the value until a cancel zeroes them)."""
        groups, grp = self.groups, self.tg.groups[g]
        if groups.readers_left[g] == 0 and groups.writers_left[g] == 0 and not grp.is_output \
                and self.columns.of_group[g] is not None and groups.died[g] > s:
            groups.died[g] = s
            self.columns.retire(g)
            groups.live -= grp.width

    def _cancel_ahead(self, sub: Sublayer) -> None:
        """Under pressure, cancel dead groups ahead of need with what this sublayer has left
        (loud ones first: they cannot be cancelled in the sublayer that reuses them)."""
        for rg in sorted(self.columns.dirty, key=lambda g: not self.ranges.loud(g)):
            if self.groups.died[rg] > sub.slot:  # written in this very sublayer: nothing yet
                continue
            cost = cancel_cost(self.ranges.signs(rg), sub.attention)
            if not sub.fits(cost):
                continue
            sub.take(cost)
            self.columns.cancel_ahead(rg)
            self.cancels.append((sub.slot, rg))
            sub.placed += 1  # progress: the columns are clean from the next sublayer

    def _close_sublayer(self, sub: Sublayer) -> None:
        """Record the sublayer's use; count sublayers without progress and give up on the
        width after `max_stall` of them."""
        heads, neurons = sub.usage()
        self.heads_by_slot.append(heads)
        self.neurons_by_slot.append(neurons)
        self.live_by_slot.append(self.groups.live)
        if sub.placed or not self.todo:
            self.stall = 0
            return
        self.stall = self.stall + 1 if self.ready.any_ready() else 0
        if self.stall > self.max_stall:
            raise self._stall_error()
        if not self.ready.any_after(sub.slot):
            raise GeometryError("scheduler invariant broken: tasks remain but none can "
                                "ever become ready (a cycle through tw.after?)")

    def _result(self) -> Schedule:
        m = self.machine
        n_layers = layers_through(self.last_used)
        sched = Schedule(m, self.tg, self.slot, self.columns.of_group, self.groups.died,
                         self.cancels, n_layers, self.floor,
                         cancel_signs={g: self.ranges.signs(g) for _, g in self.cancels})
        sched.attn_heads = _by_layer(self.heads_by_slot, n_layers, operator.add)
        sched.neurons = _by_layer(self.neurons_by_slot, n_layers, operator.add)
        sched.occupancy = [live + m.RESERVED
                           for live in _by_layer(self.live_by_slot, n_layers, max)]
        return sched

    # -- what the steps ask ------------------------------------------------------------

    def _advances(self, t: Task) -> bool:
        """Whether the task is the last reader of a computed (non-source) operand."""
        tg, readers_left = self.tg, self.groups.readers_left
        return any(g != POS_GROUP and readers_left[g] == 1 and g not in self.admission.sources
                   and not tg.groups[g].is_output for g in t.reads)

    def _net_columns(self, t: Task) -> int:
        """Columns a task takes minus the columns its placement lets die."""
        tg, readers_left = self.tg, self.groups.readers_left
        take = tg.groups[t.out_group].width if self.columns.of_group[t.out_group] is None else 0
        frees = sum(tg.groups[g].width for g in t.reads
                    if readers_left[g] == 1 and not tg.groups[g].is_output and g != POS_GROUP)
        return take - frees

    def _stall_error(self) -> ResidualStall:
        m = self.machine
        waiting = self.ready.waiting()
        t = self.tg.tasks[waiting[0][2]]
        need = self.tg.groups[t.out_group].width
        return ResidualStall(
            f"residual width binds at d={m.d}: {self.groups.live} of {m.free_columns} free "
            f"columns hold live values and {len(waiting)} ready ops cannot get room (next: "
            f"{describe(t.op)} needs {need})")


def _by_layer(per_slot: list[int], n_layers: int, merge) -> list[int]:
    """Per-slot figures merged per layer (both of its sublayers)."""
    out = [0] * n_layers
    for s, value in enumerate(per_slot):
        if layer_of(s) < n_layers:
            out[layer_of(s)] = merge(out[layer_of(s)], value)
    return out


# --------------------------------------------------------------------------------------
# The scheduler's state
# --------------------------------------------------------------------------------------


class Columns:
    """The residual's columns: clean free ones, dead groups whose columns await a cancel
    (`dirty`, oldest death first), and columns cancelled in the current sublayer (clean from
    the next one); `of_group` holds each group's columns once it has them."""

    def __init__(self, machine: Machine, widths: list[int]):
        self.widths = widths  # group id -> its width
        self.of_group: list[np.ndarray | None] = [None] * len(widths)
        self.free = list(range(machine.RESERVED, machine.d))
        heapq.heapify(self.free)
        self.dirty: deque[int] = deque()
        self.dirty_width = 0
        self.cleaning: list[np.ndarray] = []

    def assign(self, g: int, n: int) -> None:
        """Give group `g` the `n` lowest free columns."""
        self.of_group[g] = np.array(sorted(heapq.heappop(self.free) for _ in range(n)),
                                    dtype=np.int64)

    def retire(self, g: int) -> None:
        self.dirty.append(g)
        self.dirty_width += self.widths[g]

    def reclaim_plan(self, need: int, may_reuse) -> list[int] | None:
        """Dead groups to cancel in this sublayer so `need` clean columns exist (oldest deaths
        first, only those `may_reuse` allows); None when they do not add up."""
        if need <= len(self.free):
            return []
        if need > len(self.free) + self.dirty_width:
            return None
        plan, got = [], len(self.free)
        for g in self.dirty:
            if got >= need:
                break
            if may_reuse(g):
                plan.append(g)
                got += self.widths[g]
        return plan if got >= need else None

    def cancel_for_reuse(self, g: int) -> None:
        """Cancelled in the sublayer that refills them: free at once."""
        self._undirty(g)
        self._give(self.of_group[g])

    def cancel_ahead(self, g: int) -> None:
        """Cancelled ahead of need: clean from the next sublayer."""
        self._undirty(g)
        self.cleaning.append(self.of_group[g])

    def next_sublayer(self) -> None:
        for cols in self.cleaning:
            self._give(cols)
        self.cleaning.clear()

    def free_or_reclaimable(self) -> int:
        return len(self.free) + self.dirty_width + sum(len(c) for c in self.cleaning)

    def _undirty(self, g: int) -> None:
        self.dirty.remove(g)
        self.dirty_width -= self.widths[g]

    def _give(self, cols: np.ndarray) -> None:
        for c in cols.tolist():
            heapq.heappush(self.free, c)


@dataclass
class Lifetimes:
    """Per group: the slot it died (its columns reusable from then; never: 1 << 40), and the
    needed writers and readers still to run; `live` counts the columns holding values still
    to be read (dead, unreclaimed ones excluded)."""

    died: list[int]
    writers_left: list[int]
    readers_left: list[int]
    live: int = 0

    @classmethod
    def of(cls, tg: TaskGraph, needed: list[bool]) -> Lifetimes:
        return cls([1 << 40] * len(tg.groups),
                   [sum(1 for w in g.writers if needed[w]) for g in tg.groups],
                   [sum(1 for r in g.readers if needed[r]) for g in tg.groups])


@dataclass
class Readiness:
    """Which tasks may run when. A task is ready from the slot after the last group it waits
    on completes (`pending`: slot -> tasks); ready tasks wait in one heap per placement kind,
    least slack first: (latest slot, block index, task id)."""

    waits_left: list[int]  # task id -> groups it still waits on
    waiters: list[list[int]]  # group id -> needed tasks waiting on it
    pending: dict[int, list[int]] = field(default_factory=dict)
    heaps: dict[str, list[tuple[int, int, int]]] = field(
        default_factory=lambda: {ATTN: [], MLP: [], EITHER: []})

    @classmethod
    def of(cls, tg: TaskGraph, needed: list[bool]) -> Readiness:
        waiters: list[list[int]] = [[] for _ in tg.groups]
        for t in tg.tasks:
            if needed[t.tid]:
                for g in t.waits:
                    waiters[g].append(t.tid)
        return cls([len(t.waits) for t in tg.tasks], waiters)

    def start(self, tg: TaskGraph, needed: list[bool]) -> None:
        """Tasks that wait on nothing are ready from slot 0."""
        for t in tg.tasks:
            if needed[t.tid] and not t.waits:
                self.pending.setdefault(0, []).append(t.tid)

    def complete(self, g: int, s: int) -> None:
        """Group `g`'s last writer ran in slot `s`: its waiters may be ready from s + 1."""
        for tid in self.waiters[g]:
            self.waits_left[tid] -= 1
            if self.waits_left[tid] == 0:
                self.pending.setdefault(s + 1, []).append(tid)

    def release(self, s: int, tg: TaskGraph, latest: list[int]) -> None:
        for tid in self.pending.pop(s, ()):
            t = tg.tasks[tid]
            heapq.heappush(self.heaps[t.kind], (latest[tid], t.index, tid))

    def take(self, s: int) -> list[tuple[int, int, int]]:
        """The ready tasks slot `s` may run, sorted: attention takes attn tasks and the
        either-kind ones with no slack left (else they run cheaper in the MLP); the MLP
        takes mlp and either-kind tasks."""
        if is_attention_slot(s):
            cands = _pop_all(self.heaps[ATTN]) + _pop_while(self.heaps[EITHER],
                                                            lambda e: e[0] <= s)
        else:
            cands = _pop_all(self.heaps[MLP]) + _pop_all(self.heaps[EITHER])
        cands.sort()
        return cands

    def put_back(self, entry: tuple[int, int, int], kind: str) -> None:
        heapq.heappush(self.heaps[kind], entry)

    def any_ready(self) -> bool:
        return any(self.heaps.values())

    def any_after(self, s: int) -> bool:
        """Whether some task is ready, or will be after slot `s`."""
        return self.any_ready() or any(k > s for k in self.pending)

    def waiting(self) -> list[tuple[int, int, int]]:
        return sorted(e for h in self.heaps.values() for e in h)


@dataclass(frozen=True)
class Admission:
    """The admission reserve. A task that starts new work (it retires no computed operand,
    e.g. the first step of another loop iteration) may not eat into the last `reserve`
    columns while fewer than `pressure` are free; a task that advances work in flight (it
    retires a computed operand) may, even when its output is wider than what it retires. So
    in-flight chains keep room for their next steps, and greedy admission of many wide
    chains does not deadlock. The light reserve (half the width at most, only under
    `PRESSURE` free) barely delays work at generous widths; when it still stalls, the full
    reserve (the widest output, anywhere) is tried before the width is declared too small."""

    reserve: int
    pressure: float
    sources: frozenset[int]  # source groups: reading them last does not advance work

    @classmethod
    def of(cls, tg: TaskGraph, machine: Machine, needed: list[bool], full: bool) -> Admission:
        widest = max([tg.groups[t.out_group].width for t in tg.tasks if needed[t.tid]] + [0])
        if full:
            return cls(min(widest, machine.free_columns), machine.free_columns,
                       frozenset(tg.sources))
        return cls(min(widest, machine.free_columns // 2), PRESSURE * machine.free_columns,
                   frozenset(tg.sources))

    def refuses(self, free_after: int) -> bool:
        """Whether new work leaving `free_after` columns free or reclaimable must wait."""
        return free_after < self.reserve and free_after < self.pressure


@dataclass
class Sublayer:
    """The sublayer being filled: its slot, the heads (or neurons) handed out so far, and the
    progress made in it (tasks placed, dead groups cancelled ahead)."""

    slot: int
    machine: Machine
    pressure: bool  # under PRESSURE of the columns were free or reclaimable when it opened
    heads: int = 0  # whole heads of attn ops
    pool: int = 0  # value dims of position-local head work (linears, adds, cancels)
    neurons: int = 0
    placed: int = 0

    @property
    def attention(self) -> bool:
        return is_attention_slot(self.slot)

    def fits(self, cost: Cost) -> bool:
        """Whether `cost` still fits (head work shares heads: `heads_needed`)."""
        m = self.machine
        if self.attention:
            return heads_needed(self.heads + cost.heads, self.pool + cost.dims,
                                m.d_head) <= m.n_heads
        return self.neurons + cost.neurons <= m.d_hidden

    def take(self, cost: Cost) -> None:
        part = cost.in_sublayer(self.attention)
        self.heads += part.heads
        self.pool += part.dims
        self.neurons += part.neurons

    def usage(self) -> tuple[int, int]:
        """(heads, neurons) the sublayer uses."""
        if self.attention:
            return heads_needed(self.heads, self.pool, self.machine.d_head), 0
        return 0, self.neurons


def _pop_all(heap: list) -> list:
    out = heap[:]
    heap.clear()
    return out


def _pop_while(heap: list, pred) -> list:
    out = []
    while heap and pred(heap[0]):
        out.append(heapq.heappop(heap))
    return out
