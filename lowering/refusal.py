"""What a refused geometry is told: the widths that really fit, and what blocks.

A refusal must tell the truth, because people act on it: the d it names is the smallest
multiple of d_head at which `schedule` succeeds (keeping d_head and d_hidden), and the
d_hidden it names the smallest at which it succeeds keeping d. Both are found by one search
(`least_passing`) over the fit test `Pressure.fits`, which is monotone in either width (wider
layers hold the best order's peak no worse, and more heads and neurons only allow more reuse),
so doubling then bisecting finds the boundary; `tests/test_refusals.py` checks the names
against a scan of every width.

A residual refusal also says *what* blocks. Usually it is live values: every order keeps
more values alive at once than the free columns hold. But a task may refill the columns of
the operands it reads last only where their cancels fit beside it in its sublayer (heads or
neurons, `lowering/rules.py`) and the dead value is quiet enough (`SAME_SUBLAYER_RATIO`);
where some order's live values fit and only those unrefilled dead columns push it over
(`_Walk.live_values_peak`, `dead_columns_at`), the message says so, names the task, and lists
the ways out it measured (a larger d_hidden, a larger d, the default pipeline), cheapest
first by parameters per layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tw_lowering.machine import MAX_DIM, GeometryError, Machine
from tw_lowering.pressure import DeadColumns, dead_columns_at, describe_groups
from tw_lowering.tasks import TaskGraph
from twdialect.analysis import ATTN, MLP
from twdialect.dialect import describe


def least_passing(passes: Callable[[int], bool], lo: int, start: int, step: int,
                  top: int) -> int | None:
    """The least multiple of `step` in (lo, top] where `passes` holds, for a test that is
    monotone (once it holds, it holds above); `lo` is known to fail, `start` is where the
    doubling begins. None where it fails even at `top` (checked first: a hopeless search
    costs one test)."""
    top = top // step * step
    if top <= lo or not passes(top):
        return None
    hi = min(max(start // step * step, lo + step), top)
    while not passes(hi):
        lo, hi = hi, min(2 * hi, top)
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        if passes(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _fits(pressure, machine_at: Callable[[int], Machine],
          alternatives: bool = True) -> Callable[[int], bool]:
    """`pressure.fits` at the machine `machine_at(width)`; a width the Machine itself refuses
    does not fit."""
    def fits(width: int) -> bool:
        try:
            return pressure.fits(machine_at(width), alternatives)
        except GeometryError:
            return False
    return fits


def smallest_fitting_d(tg: TaskGraph, machine: Machine, max_stall: int = 8,
                       known_too_small: int = 0, at=None, pressure=None,
                       alternatives: bool = True) -> int | None:
    """Smallest multiple of d_head at which `schedule` succeeds (None: none up to MAX_DIM).

    A width fits when the graph's ops fit its layers (`check_fits`) and its free columns hold
    the best order's peak; both only get easier as d grows, so a bisection finds the
    boundary. `known_too_small`: a width already refused. `at(d)`: the machine tried at
    width d (default: `machine` at width d, its d_hidden kept, as a refusal's hint states it;
    a depth/width sweep scales d_hidden with d instead). `alternatives` False: the width at
    which the graph itself fits, none of its stand-ins (`Pressure.alternatives`). (`max_stall`
    is accepted for old callers: the answer does not depend on it.)"""
    from tw_lowering.fit import Pressure

    at = at or (lambda d: dataclasses.replace(machine, d=d))
    pressure = pressure or Pressure(tg)
    model = pressure.model
    need = max([model.width[g] for g in range(len(model.width))
                if model.writers[g] or g in model.sources] + [1])
    step = machine.d_head
    lo = max(need + machine.RESERVED - 1, machine.RESERVED, known_too_small) // step * step
    return least_passing(_fits(pressure, at, alternatives), lo, machine.d, step, MAX_DIM)


def smallest_fitting_d_hidden(pressure, machine: Machine) -> int | None:
    """Smallest d_hidden at which `schedule` succeeds at this very d and d_head (None: no
    d_hidden up to 4 * MAX_DIM)."""
    at = (lambda h: dataclasses.replace(machine, d_hidden=h))
    return least_passing(_fits(pressure, at), machine.d_hidden, 2 * machine.d_hidden, 1,
                         4 * MAX_DIM)


@dataclasses.dataclass(frozen=True)
class FittingWidths:
    """The widths around a refused `machine` that really fit: the smallest d (its d_head and
    d_hidden kept) and the smallest d_hidden (its d and d_head kept); None where none does."""

    machine: Machine
    d: int | None
    d_hidden: int | None

    @classmethod
    def of(cls, pressure, machine: Machine) -> FittingWidths:
        return cls(machine, smallest_fitting_d(pressure.tg, machine, pressure=pressure),
                   smallest_fitting_d_hidden(pressure, machine))

    def hint(self) -> str:
        """'; smallest d that fits (d_head=.., d_hidden=..): N' (or that none does), then the
        smallest d_hidden that fits at this d, where a larger one would do."""
        m = self.machine
        text = (f"; smallest d that fits (d_head={m.d_head}, d_hidden={m.d_hidden}): {self.d}"
                if self.d else "; no d up to MAX_DIM fits with this d_head and d_hidden")
        if self.d_hidden:
            text += f"; smallest d_hidden that fits at d={m.d}: {self.d_hidden}"
        return text


# --------------------------------------------------------------------------------------
# The text
# --------------------------------------------------------------------------------------


def structural_refusal(error: GeometryError, pressure, machine: Machine) -> GeometryError:
    """An op too wide for this geometry (`check_fits`), its message followed by the widths
    that really fit (an op's own need is a lower bound: the residual may need more)."""
    return type(error)(f"{error}{FittingWidths.of(pressure, machine).hint()}")


def dead_columns_text(pressure, fitting: FittingWidths) -> str:
    """'; dead columns block, not live values: ...' and the ways out, cheapest first, where
    some order's live values fit the free columns but no order's peak does; '' otherwise."""
    machine = fitting.machine
    w = pressure.choice.least_live_values(machine)
    live_values = w.live_values_peak()
    if live_values > machine.free_columns:
        return ""
    dead = dead_columns_at(pressure.model, machine, w)
    return (f"; dead columns block, not live values: an order whose live values need "
            f"{live_values} columns exists, but {_where_dead(pressure.tg, dead, machine)}"
            f"{_ways_out(pressure, fitting)}")


def _where_dead(tg: TaskGraph, dead: DeadColumns, machine: Machine) -> str:
    t = tg.tasks[dead.at]
    why = []
    if dead.loud:
        why.append(f"{describe_groups(tg, dead.loud)} too loud to cancel in the sublayer "
                   f"that refills them")
    if dead.short:
        why.append(f"the cancels of {dead.short} of them do not fit beside it in "
                   f"{_room(t.kind, machine)}")
    return (f"{describe(t.op)} writes {dead.new} new columns as the operands it reads last "
            f"({describe_groups(tg, dead.groups)}) die, and may refill only {dead.reused} of "
            f"theirs ({'; '.join(why)})")


def _room(kind: str, machine: Machine) -> str:
    """The sublayer resources a task of `kind` and its cancels share."""
    heads = f"{machine.n_heads} heads of d_head={machine.d_head}"
    neurons = f"d_hidden={machine.d_hidden} neurons"
    return heads if kind == ATTN else neurons if kind == MLP else f"{heads} or {neurons}"


def _ways_out(pressure, fitting: FittingWidths) -> str:
    """The ways out measured at this geometry, cheapest first by parameters per layer: a
    larger d_hidden at this d, a larger d at this d_hidden, and the default pipeline where
    the compile ran another one and its graph fits as is."""
    machine, options = fitting.machine, []
    if fitting.d_hidden:
        options.append((dataclasses.replace(machine, d_hidden=fitting.d_hidden),
                        f"d_hidden={fitting.d_hidden}"))
    if fitting.d:
        options.append((dataclasses.replace(machine, d=fitting.d), f"d={fitting.d}"))
    if pressure.default_pipeline_fits(machine):
        options.append((machine, 'pipeline="default"'))
    if not options:
        return "; neither a larger d_hidden nor a larger d fits"
    options.sort(key=lambda o: o[0].layer_capacity())
    listed = ", then ".join(f"{text} ({m.layer_capacity():,} parameters a layer)"
                            for m, text in options)
    return f"; ways out, cheapest first: {listed}" if len(options) > 1 else \
        f"; the way out: {listed}"


__all__ = ["least_passing", "smallest_fitting_d", "smallest_fitting_d_hidden", "FittingWidths",
           "structural_refusal", "dead_columns_text"]
