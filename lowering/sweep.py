"""The depth/width curve: what a graph costs at each residual width d.

Users pick d from a budget (memory, an export's size, a GPU); the compiler should say what each
choice costs. `width_sweep` prepares the graph and builds its task graph once (a `Sweep`), then
schedules it at a rising series of widths, from the smallest d that fits (`smallest_fitting_d`, the same
search a refusal quotes) up to the first width where the layers reach the critical-path
floor (wider buys nothing), and reports per width: layers, heads, neurons and the parameters
of the stock layout. `pick_width` reads a curve for a target depth or a parameter budget.

Scheduling without writing weights is what makes a sweep cheap: the schedule alone knows the
layers, heads and neurons (`materialize` only checks them).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from tw_lowering.machine import MAX_DIM, GeometryError, Machine

GROWTH = math.sqrt(2.0)  # each width of the default series is about sqrt(2) times the last
MAX_POINTS = 24  # widths a default series may hold


@dataclass(frozen=True)
class WidthPoint:
    d: int
    d_head: int
    d_hidden: int
    n_layers: int
    floor: int
    heads: int  # summed over layers
    neurons: int  # summed over layers
    params: int  # the stock layout's weights and biases (as `ct.allocated_params()` counts)
    seconds: float
    note: str = ""  # where the graph scheduled stands in for the one asked for (`Schedule.note`)

    def as_dict(self) -> dict:
        return asdict(self)


def stock_params(machine: Machine, heads: list[int], neurons: list[int]) -> int:
    """Weights and biases of the stock layout of a schedule: per layer Q, K, V, O over its
    heads with the output bias, and W1, b1, W2, b2 over its neurons."""
    d, dh = machine.d, machine.d_head
    return sum(4 * d * h * dh + d + 2 * d * n + n + d for h, n in zip(heads, neurons))


class Sweep:
    """A graph prepared once (the pipeline, its task graph, its residual pressure) and
    scheduled at any geometry: what `width_sweep` and `width_for` read, so a search over
    widths never runs the pipeline again."""

    def __init__(self, module, pipeline: str | None = None, graph: str = "main",
                 stand_ins: bool = True, dtype: str = "float32"):
        from tw_lowering import check_module, check_pipeline, prepare, pressure_of
        from tw_lowering.tasks import TaskGraph
        from twdialect.interp import find_graph
        from twdialect.ops import gc_paused

        check_module("width_sweep", module)
        with gc_paused():
            passes = check_pipeline("width_sweep", pipeline)
            self.tg = TaskGraph(find_graph(prepare(module, passes, dtype=dtype), graph))
            self.pressure = pressure_of(module, self.tg, passes, graph, dtype)
        self.dtype = np.dtype(dtype)  # what `compile` materializes
        # Machine -> (its WidthPoint, its Schedule), or None where it does not fit: the
        # schedule is deterministic, so a width a search meets twice is scheduled once, and
        # `compile` writes the schedule `point` made
        self._points: dict[Machine, tuple[WidthPoint, object] | None] = {}
        self._costs: dict[int, list[tuple[int | None, int | None]]] = {}  # see `least_params`
        self._smallest: dict[tuple[int, int | None], int | None] = {}  # see `smallest`
        # False: curves start where the graph itself fits, and its stand-ins
        # (`Pressure.alternatives`, built at the first width the graph misses) are tried only
        # where it fits nowhere: a search for the fewest layers seldom needs them
        self.stand_ins = stand_ins

    def compile(self, d: int, d_head: int, d_hidden: int | None = None):
        """The CompiledTransformer at one geometry, from the graph prepared once (what
        `lowering.compile` gives for the same module and pipeline, without the passes)."""
        from tw_lowering import check_float32_magnitudes, lower
        from twdialect.ops import gc_paused

        machine = Machine(d=d, d_head=d_head, d_hidden=d_hidden)
        known = self._points.pop(machine, None)  # (a schedule is written into one model)
        with gc_paused():
            check_float32_magnitudes(self.tg.graph)
            return lower(self.tg, machine, self.pressure,
                         sched=known[1] if known is not None else None, dtype=self.dtype.type)

    def point(self, d: int, d_head: int, d_hidden: int | None = None) -> WidthPoint | None:
        """The schedule at width d (None where it does not fit)."""
        from tw_lowering.schedule import schedule
        from twdialect.ops import gc_paused

        m = Machine(d=d, d_head=d_head, d_hidden=d_hidden)
        if m not in self._points:
            t = time.perf_counter()
            try:
                with gc_paused():
                    s = schedule(self.tg, m, suggest=False, pressure=self.pressure)
            except GeometryError:
                self._points[m] = None
            else:
                self._points[m] = (WidthPoint(
                    d, d_head, m.d_hidden, s.n_layers, s.floor, int(sum(s.attn_heads)),
                    int(sum(s.neurons)), stock_params(m, s.attn_heads, s.neurons),
                    time.perf_counter() - t, s.note), s)
        known = self._points[m]
        return known[0] if known is not None else None

    def fullest_mlp(self, point: WidthPoint) -> int:
        """The neurons of the fullest MLP sublayer of `point`'s schedule (a point this sweep
        made)."""
        known = self._points[Machine(d=point.d, d_head=point.d_head, d_hidden=point.d_hidden)]
        return max(known[1].neurons, default=0)

    def least_params(self, d: int, d_head: int, n_layers: int,
                     d_hidden: int | None = None) -> int:
        """A lower bound on the parameters of any schedule of n_layers layers at this geometry
        (`point(...).params` where its layers are n_layers): each needed task pays its own
        heads or neurons, in the cheaper sublayer it may run in, its pooled head dims a
        d_head-th of a head each; cancels and heads rounded up only add. 0 where the graph
        itself does not fit (a graph that stands in for it is priced otherwise)."""
        from tw_lowering.rules import task_cost
        from twdialect.analysis import ATTN, MLP

        m = Machine(d=d, d_head=d_head, d_hidden=d_hidden)
        if not self.pressure.fits(m, alternatives=False):
            return 0
        if d_head not in self._costs:  # per needed task: (head dims, neurons), None: can't
            needed = [t for t in self.tg.tasks if self.pressure.model.needed[t.tid]]
            self._costs[d_head] = [
                (None if t.kind == MLP else c.heads * d_head + c.dims,
                 None if t.kind == ATTN else c.neurons)
                for t, c in ((t, task_cost(self.tg, t, m)) for t in needed)]
        # a layer's biases: 2 d; a head: 4 d d_head; a neuron: 2 d + 1 (`stock_params`)
        return 2 * d * n_layers + sum(
            min(4 * d * dims if dims is not None else 1 << 62,
                (2 * d + 1) * neurons if neurons is not None else 1 << 62)
            for dims, neurons in self._costs[d_head])

    def smallest(self, d_head: int, d_hidden: int | None = None) -> int:
        """The smallest width that fits (a multiple of d_head; `d_hidden` None: 4 d), where
        a curve starts; a GeometryError where none does. Searched once per geometry."""
        from tw_lowering.schedule import smallest_fitting_d
        from twdialect.ops import gc_paused

        if (d_head, d_hidden) not in self._smallest:
            start = Machine(d=_whole(4 * d_head, d_head), d_head=d_head, d_hidden=d_hidden)
            def search(alternatives: bool) -> int | None:
                return smallest_fitting_d(
                    self.tg, start, at=lambda d: Machine(d=d, d_head=d_head, d_hidden=d_hidden),
                    pressure=self.pressure, alternatives=alternatives,
                    known_too_small=0 if alternatives else self._fails_below(d_head, d_hidden))

            with gc_paused():
                found = search(self.stand_ins)
                self._smallest[d_head, d_hidden] = found if found is not None or \
                    self.stand_ins else search(True)
        smallest = self._smallest[d_head, d_hidden]
        if smallest is None:
            raise GeometryError(f"width_sweep: no width up to {MAX_DIM} fits at d_head={d_head}")
        return smallest

    def _fails_below(self, d_head: int, d_hidden: int | None) -> int:
        """A width known not to fit the graph itself at (d_head, d_hidden), from the searches
        at other MLP widths: below another's smallest width nothing fits there, nor with
        fewer neurons (a fit only gets easier as d_hidden grows); 0 where none tells."""
        def hidden(h: int | None, d: int) -> int:
            return 4 * d if h is None else h
        known = 0
        for (dh, h), smallest in self._smallest.items():
            below = (smallest or MAX_DIM + d_head) - d_head
            if dh == d_head and below > known and hidden(d_hidden, below) <= hidden(h, below):
                known = below
        return known

    def curve(self, d_head: int, widths=None, d_hidden: int | None = None,
              d_max: int | None = None) -> list[WidthPoint]:
        """See `width_sweep`."""
        if widths is not None:
            return [p for d in sorted({_whole(d, d_head) for d in widths})
                    if (p := self.point(d, d_head, d_hidden))]
        smallest = self.smallest(d_head, d_hidden)
        top = d_max or 64 * smallest
        if top < smallest:
            raise GeometryError(f"width_sweep: the smallest d that fits at d_head={d_head} is "
                                f"{smallest}, above d_max={top}")
        out, d = [], smallest
        while d <= top and len(out) < MAX_POINTS:
            p = self.point(d, d_head, d_hidden)
            if p is not None:
                out.append(p)
                if p.n_layers <= p.floor:
                    break
            d = max(d + d_head, _whole(d * GROWTH, d_head))
        return out


def width_sweep(module, d_head: int, widths=None, d_hidden: int | None = None,
                pipeline: str | None = "default", graph: str = "main", d_max: int | None = None,
                ) -> list[WidthPoint]:
    """The curve of `graph` in `module` at head width `d_head`: one WidthPoint per width that
    fits, narrowest first. `widths`: the widths to try (multiples of d_head; those that do
    not fit are left out); default: the smallest that fits, then about GROWTH times wider
    each step, until the layers reach the floor or `d_max` (default 64x the smallest).
    `d_hidden`: the MLP width at every point (default 4 d, as `compile`); `pipeline` as
    `compile` takes it (the default pipeline unless told otherwise). A graph that fits no
    width is a GeometryError naming why."""
    return Sweep(module, pipeline, graph).curve(d_head, widths, d_hidden, d_max)


def pick_width(curve: list[WidthPoint], max_layers: int | None = None,
               max_params: int | None = None) -> WidthPoint | None:
    """The narrowest point of `curve` with at most `max_layers` layers, or else the
    shallowest point within `max_params` parameters (both given: the narrowest meeting both);
    None when no point qualifies."""
    ok = [p for p in curve
          if (max_layers is None or p.n_layers <= max_layers)
          and (max_params is None or p.params <= max_params)]
    if not ok:
        return None
    if max_layers is not None:
        return min(ok, key=lambda p: (p.d, p.n_layers))
    return min(ok, key=lambda p: (p.n_layers, p.params))


def width_for(module, d_head: int, max_layers: int | None = None,
              max_params: int | None = None, d_hidden: int | None = None,
              pipeline: str | None = "default", graph: str = "main",
              curve: list[WidthPoint] | None = None,
              sweep: Sweep | None = None) -> WidthPoint | None:
    """The width to compile `graph` at for a target depth (`max_layers`: the narrowest d whose
    schedule has at most that many layers) or a parameter budget (`max_params`: the shallowest
    point of the curve within it); both: the narrowest meeting both. The curve's points are
    about sqrt(2) apart, so for a depth the gap below the point `pick_width` chose is searched
    too, one d_head at a time by bisection, on `sweep` (the graph prepared once; made here
    where not given). None when no width qualifies."""
    if curve is None:
        sweep = sweep or Sweep(module, pipeline, graph)
        curve = sweep.curve(d_head, d_hidden=d_hidden)
    best = pick_width(curve, max_layers, max_params)
    if best is None or max_layers is None:
        return best
    below = [p.d for p in curve if p.d < best.d]
    lo = max(below) if below else best.d - d_head  # this one is too deep (or does not fit)
    hi = best.d
    while hi - lo > d_head:
        mid = (lo + hi) // 2 // d_head * d_head
        if mid <= lo:
            break
        sweep = sweep or Sweep(module, pipeline, graph)
        p = sweep.point(mid, d_head, d_hidden)
        if p is not None and p.n_layers <= max_layers and \
                (max_params is None or p.params <= max_params):
            hi, best = mid, p
        else:
            lo = mid
    return best


def _whole(d: float, step: int) -> int:
    """d rounded up to a multiple of `step`."""
    return int(math.ceil(d / step)) * step


__all__ = ["Sweep", "WidthPoint", "width_sweep", "pick_width", "width_for", "stock_params"]
