"""The scheduler: place every task in a sublayer slot, give every group its residual columns.

`schedule` first asks `lowering/fit.py` which graph to place (`fitting`): the graph where the
width fits it (its free columns hold the peak of the best order found), else what stands in
for it (a copy with cheap values recomputed, `lowering/rematerialize.py`; the graph as
written), else the refusal (the peak, what is live there, the proven lower bound, the
smallest d that fits: `lowering/refusal.py`). From there it places that one fixed graph.

Then placement, a greedy list scheduler over slots (2L = attention of layer L, 2L+1 = its MLP;
the slot, placement and free-add rules are `twdialect.analysis`'s, the ones the floor uses), in
the seed's spirit: small, no hidden state, every decision local. `Scheduler.run` is the loop:
each slot opens a `Sublayer` (its heads/neurons budget), offers it the ready tasks
(`Readiness`), places those whose columns (`Columns`, `Lifetimes`) and admission allow, cancels
dead groups ahead under pressure, and closes it.

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
* Columns: a group takes columns when its first writer runs and dies after its last reader.
  A writer may take the columns of the operands it reads last, and dead columns are
  reclaimed lazily, only when a writer needs room: a cancel in the same sublayer (attention:
  V=I, O=-I dims; MLP: two neurons per column) zeroes them while the writer fills them (both
  land in the same residual add), unless the dead value is loud enough to cost the new one its
  low bits (value ranges, `SAME_SUBLAYER_RATIO`): such columns are refilled only after a
  cancel a sublayer ahead. Under pressure, dead groups are cancelled ahead with the
  heads/neurons a sublayer has left.
* Admission, plain: new work (a task that retires no computed operand, e.g. the first step of
  another loop iteration) may not take the last columns that work in flight may need next
  (`Admission`; the light reserve, then the full one). This pass runs first: where room is
  ample it reaches the floor fastest.
* Waits: each time a ready task is turned away, the scheduler records why (`WAIT_REASONS`:
  heads, neurons, columns, the gate or the reserve; `Schedule.waited`), so the compile report
  can say why an op sits after its earliest layer.
* Admission, gated: where the plain pass stalls or ends above the floor, the `OrderGate` lets
  work run ahead of the best order only while that order can still finish within the width
  (so the schedule cannot stall), and virtual deadlines spread the order over a number of
  floors that `_gated` searches (`OrderGate.deadlines`: earlier work in the order is due
  first, new work waits while the residual is full). The fewest layers win.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from dataclasses import dataclass, field

import numpy as np

from tw_lowering.layer import heads_needed
from tw_lowering.machine import GeometryError, Machine
from tw_lowering.pressure import (
    SAME_SUBLAYER_RATIO,  # noqa: F401 (re-exported)
    GroupRanges,
    LiveModel,
    OrderPressure,
)
from tw_lowering.progress import report
from tw_lowering.fit import (  # noqa: F401 (check_fits, Pressure: re-exported)
    Pressure,
    ResidualStall,
    check_fits,
    fitting,
)
from tw_lowering.refusal import smallest_fitting_d  # noqa: F401 (re-exported)
from tw_lowering.rules import Cost, cancel_cost, task_cost
from tw_lowering.tasks import POS_GROUP, Task, TaskGraph
from twdialect.analysis import (
    ATTN,
    runs_in,
    EITHER,
    MLP,
    is_attention_slot,
    latest_slot,
    layer_of,
    layers_through,
)
from twdialect.dialect import describe

PRESSURE = 0.25  # below this share of free (or reclaimable) columns, free columns first
LEAD_SHARE = 3  # an order-gated task may start a third of the floor (at least 2 sublayers)
# before its virtual deadline
UNGATED_LAYERS = 2  # floors' worth of layers past which the plain greedy schedule gives way
MIN_SPREAD = 0.25  # the smallest spread (floors' worth of sublayers) the gated search tries
FIRST_SPREAD = 2.0  # where it starts when no greedy schedule is known
PACE = 0.15  # a trial this far behind a better one (a share of the tasks) is given up
CONGESTED = 2.5  # a trial this far above (1 + spread) floors congested the residual

# Why a ready task waited for a later sublayer (`Scheduler.waited`, `Schedule.waited`): the
# resource that was short when the scheduler last turned it away. The compile report
# (`lowering/report.py`) explains an op placed after its earliest layer with these.
WAIT_REASONS = {
    "heads": "the attention sublayer's heads were all taken",
    "neurons": "the MLP sublayer's neurons were all taken",
    "columns": "the residual had too few free or dead columns for its result",
    "reuse": "the dead columns it could reuse were not clean yet (a loud dead value is "
             "cancelled a sublayer ahead)",
    "cancels": "the sublayer had no heads or neurons left for the cancels that free its "
               "columns",
    "gate": "the order gate held it back (running it ahead of the best order would "
            "overflow the residual later)",
    "reserve": "the admission reserve kept the last free columns for work in flight",
}


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
    placed_by_slot: list[int] = field(default_factory=list)  # tasks placed through each slot
    note: str = ""  # where the graph scheduled stands in for another (`Pressure.alternatives`)
    # task id -> (slot, WAIT_REASONS key): the last sublayer that turned the ready task away,
    # and why (tasks never turned away are absent)
    waited: dict[int, tuple[int, str]] = field(default_factory=dict)
    # the value ranges the placement read (`pressure.GroupRanges`; the report shows them)
    ranges: GroupRanges | None = None


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


def schedule(tg: TaskGraph, machine: Machine, max_stall: int = 8, suggest: bool = True,
             pressure: Pressure | None = None) -> Schedule:
    """Place every task, or refuse the width naming what binds and the smallest d that fits.

    Which graph is placed is `lowering/fit.py`'s answer (`fitting`): the graph where its ops
    fit the layers and its free columns hold the peak of the best order found, else one that
    may stand in for it (`Pressure.alternatives`: the same graph with cheap values
    recomputed, the graph as written before the pipeline; the schedule then says which,
    `Schedule.note`), else the refusal. From there the order-gated scheduler cannot stall on
    that one fixed graph. The plain greedy scheduler is tried first (it is as shallow as the
    critical path allows when room is ample); where it stalls or ends above its floor, the
    order-gated one runs too, and the fewest layers win. (`pressure`: the graph's, shared by
    the calls of a depth/width sweep.)"""
    pressure, note = fitting(pressure or Pressure(tg), machine, suggest)
    tg = pressure.tg  # (from here on, one fixed graph)
    setup = Setup(tg, machine, pressure.model)
    sched = _ungated(tg, machine, max_stall, setup, UNGATED_LAYERS * max(setup.floor, 1) + 2)
    if sched is None or sched.n_layers > sched.floor:
        sched = _gated(tg, machine, max_stall, pressure.choice.best(machine), setup, sched)
    sched.note = sched.note or note
    return sched


def _gated(tg: TaskGraph, machine: Machine, max_stall: int, best: OrderPressure,
           setup: Setup, known: Schedule | None) -> Schedule:
    """The order-gated scheduler at a few spreads (`OrderGate.deadlines`), the fewest layers
    kept (`known`, the plain greedy schedule if any, to beat).

    A spread too small for the width congests the residual (every trial still completes, but
    late); past that, a schedule takes about (1 + spread) floors. So the search starts at the
    spread a known schedule leaves room for (else at `FIRST_SPREAD`), doubles it while the
    trials congest (a trial is given up once it passes `CONGESTED` (1 + spread) floors),
    halves it while the layers fall, and last tries the midpoint between the best spread and
    the next smaller one tried; a trial is given up once it passes the best so far."""
    floor = max(setup.floor, 1)
    best_sched, best_spread = known, None
    tried: dict[float, int | None] = {}

    def pace() -> list[int] | None:
        return best_sched.placed_by_slot if best_sched is not None and PACE else None

    def trial(spread: float, max_layers: int = 1 << 40) -> bool:
        """Whether the trial at `spread` beat the best so far (within `max_layers`)."""
        nonlocal best_sched, best_spread
        if best_sched is not None:
            max_layers = min(max_layers, best_sched.n_layers - 1)
        try:
            got = Scheduler(tg, machine, max_stall, gate=best, spread=spread, setup=setup,
                            give_up_after=2 * max_layers - 1, pace=pace()).run()
        except Abandoned:
            got = None
        tried[spread] = got.n_layers if got is not None else None
        if got is not None and (best_sched is None or got.n_layers < best_sched.n_layers):
            best_sched, best_spread = got, spread
            return True
        return False

    spread = FIRST_SPREAD if known is None else \
        min(max((known.n_layers / floor - 1) / 2, MIN_SPREAD), FIRST_SPREAD)
    while not trial(spread, int(CONGESTED * (1 + spread) * floor) + 1):
        if best_sched is not None and (1 + 2 * spread) * floor >= best_sched.n_layers:
            break  # wider spreads take longer than the best already found
        spread *= 2
    spread = (best_spread if best_spread is not None else spread) / 2
    while spread >= MIN_SPREAD and spread not in tried and trial(spread):
        spread /= 2
    if best_sched is None:  # every spread congested: the widest tried, to the end
        trial(max(tried))
    if best_spread is not None and best_spread < MIN_SPREAD * 2:
        trial(0.0)  # no spread at all: the plain virtual deadlines
    elif best_spread is not None:
        below = max([sp for sp in tried if sp < best_spread], default=best_spread / 2)
        mid = (best_spread * below) ** 0.5
        if mid not in tried:
            trial(mid)
    return best_sched


def _ungated(tg: TaskGraph, machine: Machine, max_stall: int, setup: Setup | None = None,
             max_layers: int = 1 << 40) -> Schedule | None:
    """The plain greedy scheduler (see `Admission`): the light admission reserve, then,
    where that stalls or ends above the floor, the full one; the fewer layers, or None where
    both stall or pass `max_layers`."""
    setup = setup or Setup(tg, machine)
    best = None
    for full in (False, True):
        try:
            got = Scheduler(tg, machine, max_stall, full_reserve=full, setup=setup,
                            give_up_after=2 * max_layers - 1).run()
        except (ResidualStall, Abandoned):
            continue
        if got.n_layers <= got.floor:
            return got
        best, max_layers = got, got.n_layers - 1
    return best


class Abandoned(GeometryError):
    """A trial schedule passed the layers of a better one already found."""


# --------------------------------------------------------------------------------------
# The scheduler: one greedy pass over the slots
# --------------------------------------------------------------------------------------


class Setup:
    """What every trial schedule of one graph on one machine shares: the fit check, the
    critical-path floor, each needed task's latest slot (ALAP against the outputs' floor) and
    its price."""

    def __init__(self, tg: TaskGraph, machine: Machine, model: LiveModel | None = None):
        check_fits(tg, machine)
        self.model = model or LiveModel(tg)
        cp = tg.critical_path
        self.floor = cp.n_layers
        # Deadlines count back from the outputs' floor only: ops no output reads must not
        # stretch the horizon (that gave live ops false slack and cost layers).
        self.latest = _latest_slots(tg, self.model.needed, max(cp.last_slot, 0))
        self.costs = [task_cost(tg, t, machine) if self.model.needed[t.tid] else Cost()
                      for t in tg.tasks]


class Scheduler:
    """One greedy pass over the slots at one width (see the module docstring); `run` fills
    sublayer after sublayer until every needed task is placed. All its state is named below:
    `columns` (the residual), `groups` (each group's lifetime), `ready` (which tasks may run),
    `admission` (the column reserve), and the `Sublayer` being filled."""

    def __init__(self, tg: TaskGraph, machine: Machine, max_stall: int = 8,
                 full_reserve: bool = False, gate: OrderPressure | None = None,
                 spread: float = 0.0, model: LiveModel | None = None,
                 give_up_after: int = 1 << 40, setup: Setup | None = None,
                 pace: list[int] | None = None):
        setup = setup or Setup(tg, machine, model)
        self.tg, self.machine = tg, machine
        self.max_stall = max_stall  # sublayers without progress before the width is refused
        self.full_reserve = full_reserve
        self.floor = setup.floor
        self.needed = setup.model.needed
        self.latest = setup.latest
        self.costs = setup.costs
        self.columns = Columns(machine, setup.model.width)
        self.groups = Lifetimes.of(tg, self.needed)
        self.admission = Admission.of(tg, machine, self.needed, full_reserve)
        self.gate = OrderGate(gate, setup.model, machine.free_columns) if gate is not None \
            else None
        # the ready heaps' key: the latest slot; under the gate, a virtual deadline that
        # spreads the order over `spread` floors' worth of sublayers (`OrderGate.deadlines`)
        self.priority = self.latest if self.gate is None else \
            self.gate.deadlines(self.latest, spread * 2 * max(self.floor, 1))
        self.ready = Readiness.of(tg, self.needed)
        self.give_up_after = give_up_after  # a slot past which the schedule is not wanted
        # tasks a better schedule had placed by each slot: falling far behind gives up early
        self.pace = pace
        self.placed_by_slot: list[int] = []
        self.lead = max(2, 2 * self.floor // LEAD_SHARE)  # (see `_candidates`)
        self.ranges = setup.model.ranges
        self.slot = [-1] * len(tg.tasks)  # task id -> its slot
        self.cancels: list[tuple[int, int]] = []  # (slot, group id)
        self.cancel_costs: dict[tuple[int, bool], Cost] = {}
        # task id -> (slot, WAIT_REASONS key): the last time a ready task was turned away
        self.waited: dict[int, tuple[int, str]] = {}
        self.todo = self.n_needed = sum(self.needed)
        self.stall = 0  # sublayers in a row without progress while tasks wait
        self.last_used = -1  # the last slot that placed a task
        self.heads_by_slot: list[int] = []
        self.neurons_by_slot: list[int] = []
        self.live_by_slot: list[int] = []

    def run(self) -> Schedule:
        self._place_sources()
        s = 0
        while self.todo:
            if s > self.give_up_after or self._behind(s):
                raise Abandoned(f"no better than {layer_of(self.give_up_after) + 1} layers")
            sub = self._open_sublayer(s)
            for entry in self._candidates(sub):
                self._try_place(entry, sub)
            # (nothing left to place: no writer will want the columns)
            if self.columns.dirty and self.todo and \
                    (sub.pressure or self.full_reserve or self.gate):
                self._cancel_ahead(sub)
            self._close_sublayer(sub)
            report("schedule", self.n_needed - self.todo, self.n_needed)
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
        self.columns.next_sublayer(s)
        self.ready.release(s, self.tg, self.priority)
        free_share = self.columns.free_or_reclaimable() / self.machine.free_columns
        return Sublayer(s, self.machine, pressure=free_share < PRESSURE)

    def _candidates(self, sub: Sublayer) -> list[tuple[int, int, int]]:
        """The ready tasks this sublayer may take, least slack first; under pressure, those
        that free at least as many columns as they take go first. Under the order gate, the
        order's next task goes first (an either-kind one may take heads), then the others
        by virtual deadline, those due within `lead` sublayers."""
        if self.gate is None:
            cands = self.ready.take(sub.slot)
            if sub.pressure and cands:
                cands.sort(key=lambda e: (self._net_columns(self.tg.tasks[e[2]]) > 0,) + e)
            return cands
        cands = self.ready.take(sub.slot, self.lead)
        front = self.gate.front_task()
        if front is not None and runs_in(self.tg.tasks[front].kind, sub.slot) \
                and all(e[2] != front for e in cands):
            cands += self.ready.take_task(front, self.tg.tasks[front].kind)
        cands.sort(key=lambda e: (e[2] != front,) + e)
        return cands

    def _try_place(self, entry: tuple[int, int, int], sub: Sublayer) -> bool:
        """Place the task if its columns can be had (reclaiming dead ones in this very
        sublayer, or those of the operands it reads last), admission allows it and the
        sublayer has the heads/neurons; otherwise it waits for a later sublayer."""
        t = self.tg.tasks[entry[2]]
        full = "heads" if sub.attention else "neurons"
        if not sub.fits(self.costs[t.tid]):  # the sublayer is full for it, cancels or not
            self._wait(entry, t, sub, False, full)
            return False
        g = t.out_group
        need_cols = self.tg.groups[g].width if self.columns.of_group[g] is None else 0
        dies = self._dies_with(t)
        if need_cols > self.columns.room() + sum(self.columns.widths[rg] for rg in dies):
            self._wait(entry, t, sub, True, "columns")  # not even every dead column would do
            return False
        louder = self.ranges.reuse_bound(g)
        mag = self.ranges.mag
        reclaim = self.columns.reclaim_plan(need_cols, louder,
                                            [rg for rg in dies if mag[rg] <= louder])
        held = None if reclaim is None else self._held_back(t, need_cols, dies)
        if reclaim is None or held:
            self._wait(entry, t, sub, reclaim is None, held or "reuse")
            return False
        cost = self.costs[t.tid]
        for rg in reclaim:
            cost = cost + self._cancel_cost(rg, sub.attention)
        if not sub.fits(cost):
            self._wait(entry, t, sub, bool(reclaim), "cancels" if reclaim else full)
            return False
        sub.take(cost)
        self._commit(t, sub.slot, need_cols, reclaim)
        sub.placed += 1
        return True

    def _wait(self, entry: tuple[int, int, int], t: Task, sub: Sublayer, short: bool,
              why: str) -> None:
        """The task waits for a later sublayer (`why`: a `WAIT_REASONS` key, recorded); when
        it is the gate's next task and columns (or the room to reclaim them here) are short,
        dead groups are cancelled ahead now, before work out of order takes the sublayer's
        heads or neurons."""
        self.ready.put_back(entry, t.kind)
        self.waited[t.tid] = (sub.slot, why)
        if short and self.gate is not None and t.tid == self.gate.front_task() \
                and self.columns.dirty:
            self._cancel_ahead(sub)

    def _held_back(self, t: Task, need_cols: int, dies: list[int]) -> str | None:
        """What holds `t` back ("gate" or "reserve", None: nothing). Under the order gate,
        work may run out of order only while the order can still finish within the width
        (`OrderGate.admits`). Otherwise new work may not take the reserve's last columns,
        unless the schedule has been stuck for a whole layer (then the reserve gives way)."""
        if self.gate is not None:
            if not self.gate.admits(t, need_cols, dies):
                return "gate"
            if self.gate.position(t.tid) == self.gate.front:
                return None
        if need_cols and self.stall < 2 and self.admission.refuses(
                self.columns.free_or_reclaimable() - need_cols) and not self._advances(t):
            return "reserve"
        return None

    def _dies_with(self, t: Task) -> list[int]:
        """The groups `t` is the last to read: placing it lets them die."""
        groups, tg = self.groups, self.tg
        return [rg for rg in t.reads if groups.readers_left[rg] == 1
                and not groups.writers_left[rg] and not tg.groups[rg].is_output
                and self.columns.of_group[rg] is not None]

    def _commit(self, t: Task, s: int, need_cols: int, reclaim: list[int] = ()) -> None:
        """Place `t` in slot `s`: its operands read last die (their columns reusable from this
        very sublayer), the dead groups of its reclaim plan are cancelled here, and its group
        takes the columns they free."""
        g = t.out_group
        self.slot[t.tid] = s
        self.todo -= 1
        self.last_used = s
        for rg in t.reads:
            self.groups.readers_left[rg] -= 1
            self._retire_if_dead(rg, s)
        for rg in reclaim:
            self.columns.cancel_for_reuse(rg)
            self.cancels.append((s, rg))
        if need_cols:
            self.columns.assign(g, need_cols)
            self.groups.live += need_cols
        if self.gate is not None:
            self.gate.placed(t, need_cols)
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
            self.columns.retire(g, self.ranges[g] if self.ranges.loud(g) else None, s)
            groups.live -= grp.width
            if self.gate is not None:
                self.gate.died(g)

    def _cancel_ahead(self, sub: Sublayer) -> None:
        """Under pressure, cancel dead groups ahead of need with what this sublayer has left
        (loud ones first: they cannot be cancelled in the sublayer that reuses them)."""
        for rg in self.columns.dirty_groups():
            cost = self._cancel_cost(rg, sub.attention)
            if not sub.fits(cost):
                continue
            sub.take(cost)
            self.columns.cancel_ahead(rg)
            self.cancels.append((sub.slot, rg))
            sub.placed += 1  # progress: the columns are clean from the next sublayer

    def _cancel_cost(self, g: int, attention: bool) -> Cost:
        key = (g, attention)
        cost = self.cancel_costs.get(key)
        if cost is None:
            cost = self.cancel_costs[key] = cancel_cost(self.ranges.signs(g), attention)
        return cost

    def _behind(self, s: int) -> bool:
        """Whether this schedule has fallen too far behind the pace of a better one (checked
        every few sublayers) to beat it."""
        if self.pace is None or s % 8 or not s or s >= len(self.pace):
            return False
        total = self.pace[-1]
        return self.placed_by_slot[-1] < self.pace[s - 1] - PACE * total

    def _close_sublayer(self, sub: Sublayer) -> None:
        """Record the sublayer's use; count sublayers without progress and give up on the
        width after `max_stall` of them."""
        heads, neurons = sub.usage()
        self.heads_by_slot.append(heads)
        self.neurons_by_slot.append(neurons)
        self.live_by_slot.append(self.groups.live)
        self.placed_by_slot.append(self.n_needed - self.todo)
        if sub.placed or not self.todo:
            self.stall = 0
            return
        self.stall = self.stall + 1 if self.ready.any_ready() else 0
        if self.stall > self.max_stall:
            if self.gate is not None:  # the gate keeps the order's next task placeable
                raise GeometryError(f"scheduler invariant broken: the order-gated schedule "
                                    f"made no progress ({self._stall_error()})")
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
        sched.placed_by_slot = self.placed_by_slot
        sched.waited = self.waited
        sched.ranges = self.ranges
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
    """The residual's columns: clean free ones; dead groups whose columns await a cancel
    (`quiet` and `loud`, oldest death first: a loud one, louder than `SAME_SUBLAYER_RATIO`,
    may be refilled in the sublayer that cancels it only by a value loud enough itself);
    groups dead from a later sublayer (`pending`: written in this very one); and columns
    cancelled in the current sublayer (clean from the next one). `of_group` holds each
    group's columns once it has them."""

    def __init__(self, machine: Machine, widths: list[int]):
        self.widths = widths  # group id -> its width
        self.of_group: list[np.ndarray | None] = [None] * len(widths)
        self.free = list(range(machine.RESERVED, machine.d))
        heapq.heapify(self.free)
        self.quiet: dict[int, None] = {}
        self.loud: list[tuple[float, int]] = []  # (magnitude, group), sorted
        self.pending: list[tuple[int, int, float | None]] = []  # (slot, group, loud magnitude)
        self.dirty_width = 0
        self.cleaning: list[np.ndarray] = []
        self.cleaning_width = 0
        self.slot = -1  # the sublayer being filled

    @property
    def dirty(self) -> bool:
        return bool(self.quiet or self.loud)

    def dirty_groups(self) -> list[int]:
        """Dead groups awaiting a cancel, loud ones first."""
        return [g for _, g in self.loud] + list(self.quiet)

    def assign(self, g: int, n: int) -> None:
        """Give group `g` the `n` lowest free columns."""
        self.of_group[g] = np.array(sorted(heapq.heappop(self.free) for _ in range(n)),
                                    dtype=np.int64)

    def retire(self, g: int, loud: float | None, at: int) -> None:
        """Group `g` is dead from slot `at`: its columns await a cancel (`loud`: its
        magnitude, where it is loud)."""
        self.dirty_width += self.widths[g]
        if at > self.slot:
            self.pending.append((at, g, loud))
        else:
            self._dirty(g, loud)

    def reclaim_plan(self, need: int, louder: float, dying: list[int] = ()) -> list[int] | None:
        """Groups to cancel in this sublayer so `need` clean columns exist: quiet dead ones
        (oldest deaths first), loud ones no louder than `louder`, then `dying` ones (live
        until the task that reads them last runs in this very sublayer); None when they do
        not add up."""
        free = len(self.free)
        if need <= free:
            return []
        if need > free + self.dirty_width and \
                need > free + self.dirty_width + sum(self.widths[g] for g in dying):
            return None
        plan, got = [], free
        loud = itertools.takewhile(lambda e: e[0] <= louder, self.loud)
        for g in itertools.chain(self.quiet, (g for _, g in loud), dying):
            if got >= need:
                break
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
        self.cleaning_width += self.widths[g]

    def next_sublayer(self, s: int) -> None:
        self.slot = s
        for cols in self.cleaning:
            self._give(cols)
        self.cleaning.clear()
        self.cleaning_width = 0
        if self.pending:
            now = [e for e in self.pending if e[0] <= s]
            self.pending = [e for e in self.pending if e[0] > s]
            for _, g, loud in now:
                self._dirty(g, loud)

    def room(self) -> int:
        """Columns a writer could have in this sublayer at most: free or dead."""
        return len(self.free) + self.dirty_width

    def free_or_reclaimable(self) -> int:
        return len(self.free) + self.dirty_width + self.cleaning_width

    def _dirty(self, g: int, loud: float | None) -> None:
        if loud is None:
            self.quiet[g] = None
        else:
            bisect.insort(self.loud, (loud, g))

    def _undirty(self, g: int) -> None:
        if g in self.quiet:
            del self.quiet[g]
        else:
            self.loud.remove(next(e for e in self.loud if e[1] == g))
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

    def take(self, s: int, lead: int | None = None) -> list[tuple[int, int, int]]:
        """The ready tasks slot `s` may run, sorted: attention takes attn tasks and the
        either-kind ones with no slack left (else they run cheaper in the MLP); the MLP
        takes mlp and either-kind tasks. With a `lead`, only tasks whose key (a deadline) is
        at most `lead` sublayers ahead of `s`."""
        if lead is None:
            if is_attention_slot(s):
                cands = _pop_all(self.heaps[ATTN]) + _pop_while(self.heaps[EITHER],
                                                                lambda e: e[0] <= s)
            else:
                cands = _pop_all(self.heaps[MLP]) + _pop_all(self.heaps[EITHER])
        else:
            due = s + lead
            own = self.heaps[ATTN if is_attention_slot(s) else MLP]
            either = s if is_attention_slot(s) else due
            cands = _pop_while(own, lambda e: e[0] <= due) + \
                _pop_while(self.heaps[EITHER], lambda e: e[0] <= either)
        cands.sort()
        return cands

    def put_back(self, entry: tuple[int, int, int], kind: str) -> None:
        heapq.heappush(self.heaps[kind], entry)

    def take_task(self, tid: int, kind: str) -> list[tuple[int, int, int]]:
        """Task `tid`'s entry, taken out of its heap ([] when it is not ready)."""
        heap = self.heaps[kind]
        for i, e in enumerate(heap):
            if e[2] == tid:
                heap[i] = heap[-1]
                heap.pop()
                heapq.heapify(heap)
                return [e]
        return []

    def any_ready(self) -> bool:
        return any(self.heaps.values())

    def any_after(self, s: int) -> bool:
        """Whether some task is ready, or will be after slot `s`."""
        return self.any_ready() or any(k > s for k in self.pending)

    def waiting(self) -> list[tuple[int, int, int]]:
        return sorted(e for h in self.heaps.values() for e in h)


class OrderGate:
    """Pressure-aware admission: the best order found (`lowering/pressure.py`) fits the width
    one task at a time, and work may run out of that order only while the order can still
    finish within the width. So new work waits when the residual is full (the
    sequential-scope idea, found without annotations), runs as wide as room allows
    otherwise, and the schedule cannot stall: the order's next task (`front`) always has its
    columns, the gate never lets work ahead of it take them.

    `level[k]`, per position k of the order: the columns the order needs at its step k (its
    `need`), plus a bound on what the work done out of order adds to the order's live set
    there (a group written ahead of its turn counts until the order's first writer of it; a
    group that died before the order's last reader of it counts negative until then); minus
    infinity once that step has run. Invariant: level <= budget at every step to come."""

    DONE = np.iinfo(np.int64).min // 2

    def __init__(self, pressure: OrderPressure, model: LiveModel, budget: int):
        tg = model.tg
        order = pressure.order
        n = len(order)
        self.order = order
        self.pos = {tid: k for k, tid in enumerate(order)}
        self.level = pressure.need.astype(np.int64)
        self.done = [False] * (n + 1)  # position n: a sentinel the front stops at
        self.front = 0
        self.budget = budget
        self.width = model.width
        self._prefix_max: np.ndarray | None = None  # of level[front:], while nothing changes
        # per group: the order's first write of it (sources: before the start) and the last
        # step that reads or writes it (outputs: past the end)
        self.first = [n] * len(model.width)
        self.last = [-1] * len(model.width)
        for g in model.sources:
            self.first[g] = -1
        for k, tid in enumerate(order):
            t = tg.tasks[tid]
            self.first[t.out_group] = min(self.first[t.out_group], k)
            self.last[t.out_group] = k
            for r in t.reads:
                self.last[r] = k
        for g, grp in enumerate(tg.groups):
            if grp.is_output:
                self.last[g] = n

    def front_task(self) -> int | None:
        return self.order[self.front] if self.front < len(self.order) else None

    def deadlines(self, latest: list[int], span: float) -> list[float]:
        """Virtual deadlines: each task's latest slot, pushed back in proportion to its
        position in the order, the whole order over `span` sublayers. With a span of several
        floors, the order's earlier work (one column of a renderer, one loop iteration) is
        due before its later work, so work in flight finishes before new work starts; with
        0, the plain latest slots."""
        scale = span / max(len(self.order), 1)
        out = [float(s) for s in latest]
        for tid, k in self.pos.items():
            out[tid] += scale * k
        return out

    def position(self, tid: int) -> int:
        return self.pos[tid]

    def admits(self, t: Task, new_cols: int, dies: list[int]) -> bool:
        """Whether `t` may run now: it is the order's next task, or running it ahead keeps
        the level within the budget at every step before the order's own write of its group
        (later steps only lose the columns of the groups it lets die)."""
        f = self.front
        end = self.first[t.out_group]
        if self.pos[t.tid] == f or not new_cols or end <= f:
            return True
        budget = self.budget
        if self._prefix_max is None:
            self._prefix_max = np.maximum.accumulate(self.level[f:])
        if self._prefix_max[end - 1 - f] + new_cols <= budget:
            return True
        credits = [(min(self.last[r], end), self.width[r]) for r in dies if self.last[r] > f]
        if not credits:
            return False
        delta = np.full(end - f, new_cols, np.int64)
        for q, w in credits:
            delta[:q - f] -= w
        return int((self.level[f:end] + delta).max()) <= budget

    def placed(self, t: Task, new_cols: int) -> None:
        p = self.pos[t.tid]
        if p != self.front and new_cols:
            self.level[self.front:self.first[t.out_group]] += new_cols
        self.level[p] = self.DONE
        self.done[p] = True
        while self.done[self.front]:
            self.front += 1
        self._prefix_max = None

    def died(self, g: int) -> None:
        q = self.last[g]
        if q > self.front:
            self.level[self.front:q] -= self.width[g]
            self._prefix_max = None


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
    widest: int = 0  # the widest result of a needed task

    @classmethod
    def of(cls, tg: TaskGraph, machine: Machine, needed: list[bool], full: bool) -> Admission:
        widest = max([tg.groups[t.out_group].width for t in tg.tasks if needed[t.tid]] + [0])
        if full:
            return cls(min(widest, machine.free_columns), machine.free_columns,
                       frozenset(tg.sources), widest)
        return cls(min(widest, machine.free_columns // 2), PRESSURE * machine.free_columns,
                   frozenset(tg.sources), widest)

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
