"""Does a width fit, and what stands in: the one module that answers it.

A width fits a task graph when its ops fit the layers (`check_fits`: an op's heads, neurons,
query/key width and result against the geometry) and its free columns hold the peak of the
best order found (`Pressure`, over `lowering/pressure.py`); then a schedule exists
(`lowering/schedule.py` places that one fixed graph), and every wider width fits too. Where
the graph does not fit, what may stand in for it is tried in order (`Pressure.alternatives`:
a copy with cheap values recomputed next to their later readers,
`lowering/rematerialize.py`; the graph as written, before the pipeline's rewrites), and
`fitting` names the one that does. Else the refusal: the peak, what is live there, the
proven lower bound and its cut, and the smallest widths that fit (`lowering/refusal.py`).
"""

from __future__ import annotations

import numpy as np

from tw_lowering.machine import GeometryError, Machine
from tw_lowering.pressure import (
    LiveModel,
    LowerBound,
    OrderChoice,
    OrderPressure,
    block_order,
    describe_groups,
    lower_bound,
    pressure_of,
    walk,
)
from tw_lowering.refusal import FittingWidths, dead_columns_text, structural_refusal
from tw_lowering.rules import task_cost
from tw_lowering.tasks import TaskGraph
from twdialect.analysis import ATTN, EITHER, MLP
from twdialect.dense import shape_of
from twdialect.dialect import describe

BOUND_CANDIDATES = 8  # tasks a refusal's lower bound is tried at


def check_fits(tg: TaskGraph, machine: Machine) -> None:
    """Structural checks: an op too wide for any layer of this geometry. The message names
    the reason only; `schedule` adds the widths that really fit (`lowering/refusal.py`: an
    op's own need is only a lower bound of those)."""
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
                                    f"{machine.n_heads}")
        if t.kind == MLP and cost.neurons > machine.d_hidden:
            raise GeometryError(f"{describe(op)}: needs {cost.neurons} MLP neurons, d_hidden="
                                f"{machine.d_hidden}")
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
        raise GeometryError(f"residual width binds: the inputs alone need {src} columns, "
                            f"d={machine.d} leaves {machine.free_columns}")


class ResidualStall(GeometryError):
    """No ready op can get residual columns: the width binds."""


def fitting(pressure: Pressure, machine: Machine, suggest: bool = True
            ) -> tuple[Pressure, str]:
    """(the pressure of the graph to place at `machine`, what it is where it stands in for
    the given one, else ""): the graph itself where it fits, else the first of its
    alternatives that does (and, where that one does not itself, its own), else the refusal
    (an op too wide for the geometry, or the width: `Pressure.refusal`)."""
    tg = pressure.tg
    try:
        check_fits(tg, machine)
        best = pressure.best_fitting(machine)
    except GeometryError:
        best, structural = None, True
    else:
        structural = False
    if best is not None:
        return pressure, ""
    for alt in pressure.alternatives():
        if alt.fits(machine):
            chosen, note = fitting(alt, machine, suggest)
            return chosen, note or alt.note
    if structural:
        try:
            check_fits(tg, machine)
        except GeometryError as e:  # an op too wide for this geometry
            raise structural_refusal(e, pressure, machine) if suggest else e
    raise pressure.refusal(machine, suggest)


class Pressure:
    """The residual pressure of one task graph (`lowering/pressure.py`), computed as far as a
    question needs: the block order's peak first (usually enough), the other candidate orders
    only when it does not fit."""

    def __init__(self, tg: TaskGraph, rematerialize: bool = True, as_written=None,
                 note: str = "", default_pipeline=None):
        self.tg = tg
        self.model = LiveModel(tg)
        self.note = note  # what this graph is, when it stands in for another
        self._choice: OrderChoice | None = None
        self._block = None
        self._remat: Pressure | None | bool = None if rematerialize else False
        self._as_written = as_written  # () -> the TaskGraph before the pipeline, if one ran
        self._alternatives: list[Pressure] | None = None
        # () -> the TaskGraph the default pipeline makes, where the compile ran another one:
        # not a stand-in (the caller chose the pipeline), only a way out a refusal may name
        self._default_pipeline = default_pipeline
        self._tuned: Pressure | None = None

    def default_pipeline_fits(self, machine: Machine) -> bool:
        """Whether the default pipeline's graph (where one is known) fits `machine`."""
        if self._default_pipeline is None:
            return False
        if self._tuned is None:
            self._tuned = Pressure(self._default_pipeline())
        try:
            return self._tuned.fits(machine)
        except GeometryError:
            return False

    def alternatives(self) -> list[Pressure]:
        """What may stand in for the graph where it does not fit, in order: a copy with
        cheap values recomputed next to their later readers (`rematerialized`), and the graph
        as written, before the pipeline's rewrites (which can widen what is live at once),
        and its own alternatives. Each is made once, whatever the width, so the widths at
        which one of them fits are still those from a minimum up."""
        if self._alternatives is None:
            alts = [self.rematerialized] if self.rematerialized is not None else []
            if self._as_written is not None:
                plain = self._plain = Pressure(
                    self._as_written(), note="compiled as written: the pipeline's graph does "
                                             "not fit")
                alts += [plain] + plain.alternatives()
            self._alternatives = alts
        return self._alternatives

    @property
    def rematerialized(self) -> Pressure | None:
        """The pressure of a copy of the graph with cheap values recomputed next to their
        later readers (`lowering/rematerialize.py`), or None where no clone lowers the peak."""
        if self._remat is None:
            from tw_lowering.rematerialize import RematerializePass, candidates

            remat = RematerializePass()
            best = self.choice.best(remat.machine())
            self._remat = False
            if next(candidates(self.tg, self.model, best, remat.max_hidden), None):
                copy = self.tg.graph.clone()
                kept = remat.run_on_graph(None, copy)
                if kept:
                    self._remat = Pressure(
                        TaskGraph(copy), rematerialize=False,
                        note=f"recomputed {kept} cheap value(s) next to their later readers")
        return self._remat or None

    @property
    def choice(self) -> OrderChoice:
        if self._choice is None:
            self._choice = OrderChoice(self.model)
        return self._choice

    def best_fitting(self, machine: Machine) -> OrderPressure | None:
        """The best order if its peak fits `machine` (the block order when it does), else None."""
        if self._block is None:
            self._block = walk(self.model, block_order(self.model))
        p = pressure_of(self.model, self._block, machine, "block")
        if p.peak <= machine.free_columns:
            return p
        p = self.choice.best(machine)
        return p if p.peak <= machine.free_columns else None

    def lower_bound(self, machine: Machine) -> LowerBound:
        """What no order beats (`pressure.lower_bound`), tried at the tasks where the best
        order needs the most."""
        best = self.choice.best(machine)
        steps = np.argsort(-best.need, kind="stable")[:BOUND_CANDIDATES]
        return lower_bound(self.model, machine, [best.order[k] for k in steps])

    def fits(self, machine: Machine, alternatives: bool = True) -> bool:
        """Whether `schedule` succeeds at `machine`: the ops fit its layers and the best
        order's peak its free columns, for the graph or (`alternatives`) one that may stand
        in for it."""
        try:
            check_fits(self.tg, machine)
            if self.best_fitting(machine) is not None:
                return True
        except GeometryError:
            pass
        return alternatives and any(alt.fits(machine, False) for alt in self.alternatives())

    def refusal(self, machine: Machine, suggest: bool = True) -> ResidualStall:
        """The width binds: the best order's peak, where it is reached and what is live there,
        the lower bound and its cut, and (`suggest`) the widths that really fit and, where
        dead columns rather than live values block, that and the cheapest way out
        (`lowering/refusal.py`)."""
        tg, best = self.tg, self.choice.best(machine)
        at = best.order[best.peak_at]
        live = _live_at(self.model, best.order, best.peak_at)
        bound = self.lower_bound(machine)
        msg = (f"residual width binds at d={machine.d}: {machine.free_columns} free columns, and "
               f"the best order found needs {best.peak} at once (at {describe(tg.tasks[at].op)}, "
               f"live: {describe_groups(tg, live)})")
        if bound.columns >= best.peak:
            msg += f"; no order needs fewer ({_bound_text(tg, bound)})"
        else:
            msg += f"; no order needs fewer than {bound.columns} ({_bound_text(tg, bound)})"
        remat = self.rematerialized
        if remat is not None:
            msg += (f"; recomputing cheap values next to their later readers, "
                    f"{remat.choice.best(machine).peak}")
        if self._as_written is not None:
            self.alternatives()
            msg += (f"; the graph as written, before the pipeline, "
                    f"{self._plain.choice.best(machine).peak}")
        if suggest:
            fitting = FittingWidths.of(self, machine)
            msg += fitting.hint() + dead_columns_text(self, fitting)
        return ResidualStall(msg)


def _bound_text(tg: TaskGraph, bound: LowerBound) -> str:
    if bound.what == "inputs":
        return f"the inputs are live together: {describe_groups(tg, bound.groups)}"
    if bound.what == "outputs":
        return f"the outputs are live together: {describe_groups(tg, bound.groups)}"
    return (f"{bound.columns} columns at {describe(tg.tasks[bound.at].op)} in every order: "
            f"{describe_groups(tg, bound.groups)}")


def _live_at(model: LiveModel, order: list[int], k: int) -> list[int]:
    """Groups live before position `k` of `order`."""
    st = model.start()
    for tid in order[:k]:
        st.run(tid)
    sources = set(model.sources)
    return [g for g in range(len(model.width)) if st.allocated[g] and (
        model.is_output[g] or st.readers_left[g] or st.writers_left[g])
        and (g in sources or model.writers[g])]
