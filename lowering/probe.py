"""Probe: run the compiled model beside the oracle and name the first op whose value diverges.

Residual snapshots are taken after every sublayer; each value is read from its columns in the
snapshot right after the sublayer that completed it (before anything can reuse them) and
compared with the oracle's value. Ops are checked in block order, so the first divergence is
where a bug or a contract violation entered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from xdsl.ir import Operation

from tw_lowering.layer import component_rows
from tw_lowering.model import CompiledTransformer
from twdialect.analysis import layer_of, sublayer_name
from twdialect.dialect import describe
from twdialect.interp import evaluate_values


@dataclass
class ProbeReport:
    checked: int  # values compared (the compiled graph's ops, then the outputs)
    first_divergence: str | None  # describe(op) of the first diverging op, or None
    layer: int | None
    sublayer: str | None
    max_error: float  # largest error of the first diverging value (or over all, if none)
    ramps: list[str] = field(default_factory=list)  # inputs inside a compare's ramp (why)

    def __str__(self) -> str:
        ramp = f"; {len(self.ramps)} input(s) inside a compare ramp: {self.ramps[0]}" \
            if self.ramps else ""
        if self.first_divergence is None:
            return (f"no divergence in {self.checked} values (max error "
                    f"{self.max_error:.3g}){ramp}")
        where = f" at layer {self.layer} {self.sublayer}" if self.layer is not None else ""
        return (f"first divergence: {self.first_divergence}{where} (max error "
                f"{self.max_error:.3g}; {self.checked} values checked){ramp}")


def _positions_kwargs(n_positions: int | None) -> dict:
    # Only a graph without inputs needs to be told how many positions to run.
    return {} if n_positions is None else {"n_positions": n_positions}


@torch.no_grad()
def _sublayer_snapshots(ct: CompiledTransformer, inputs, n_positions: int | None = None
                        ) -> list[np.ndarray]:
    x = ct.embed(dict(inputs), **_positions_kwargs(n_positions))[0]
    return [r.cpu().numpy().astype(np.float64) for r in ct.trace(x)[0]]


@dataclass
class Compared:
    """One computed value beside the oracle's: the op, the slot that completed it, its largest
    absolute error over positions and components, and its scale (max(1, |oracle value|)):
    the probe's tolerance is atol * scale."""

    op: Operation
    slot: int
    error: float
    scale: float


def compare_values(ct: CompiledTransformer, module, inputs, graph: str = "main",
                   n_positions: int | None = None) -> Iterator[Compared]:
    """Every computed value of the compiled model beside the oracle's, in block order (see the
    module docstring): what `probe` checks and the compile report tabulates."""
    sched = ct.schedule
    tg = sched.tg
    snaps = _sublayer_snapshots(ct, inputs, n_positions)
    oracle = evaluate_values(module, inputs, graph, **_positions_kwargs(n_positions))
    complete = {}
    for t in tg.tasks:
        s = sched.slot[t.tid]
        if s >= 0:
            complete[t.out_group] = max(complete.get(t.out_group, -1), s)
    for op in tg.ops:
        if not op.results:
            continue
        v = op.results[0]
        refs = tg.refs.get(v)
        if refs is None or v not in oracle:
            continue
        groups = refs.groups()
        if not groups or any(g not in complete for g in groups):
            continue  # sources, literals, or dead code
        if any(tg.groups[g].value is not v for g in groups) and v.owner in tg.writer_ops:
            continue  # an addend of an accumulating add: only the sum is ever in the columns
        s = max(complete[g] for g in groups)
        rows, scale = component_rows(sched.machine, sched.cols, refs)
        got = snaps[s][:, rows] * scale
        want = oracle[v]
        err = float(np.abs(got - want).max()) if want.size else 0.0
        yield Compared(op, s, err, max(1.0, float(np.abs(want).max()) if want.size else 1.0))


def probe(ct: CompiledTransformer, module, inputs, atol: float = 1e-4, graph: str = "main",
          n_positions: int | None = None) -> ProbeReport:
    """Compare every computed value of the compiled model with the oracle (relative atol).

    The ops compared are the compiled graph's (`ct.schedule`: after the passes, which keep
    the oracle's meaning); then every output of `module` (the graph as the user wrote it)
    against the model's. A divergence names the first op, or the output; inputs that fall
    inside a compare's ramp (where the model follows the ramp and the oracle the step:
    `twdialect.contracts`) are listed in `ramps`, the likely reason.

    `inputs` as `twdialect.evaluate` takes them (see `random_graphs.sample_inputs`);
    `n_positions` is needed only by a graph without inputs (it says how many positions)."""
    from twdialect.dialect import OutputOp
    from twdialect.interp import find_graph

    compiled = ct.schedule.tg.graph if ct.schedule is not None else module
    values = evaluate_values(module, inputs, graph, **_positions_kwargs(n_positions))
    ramps = ramp_hits(find_graph(module, graph), values)
    checked, worst = 0, 0.0
    for c in compare_values(ct, compiled, inputs, graph, n_positions):
        checked += 1
        if c.error > atol * c.scale:
            return ProbeReport(checked, describe(c.op), layer_of(c.slot), sublayer_name(c.slot),
                               c.error, ramps)
        worst = max(worst, c.error)
    want = {op.output_name.data: values[op.value] for op in find_graph(module, graph).block.ops
            if isinstance(op, OutputOp)}
    got = ct.run(inputs, **_positions_kwargs(n_positions))
    for name in sorted(want):
        checked += 1
        w, g = np.asarray(want[name], np.float64), np.asarray(got[name], np.float64)
        err = float(np.abs(g - w).max()) if w.size else 0.0
        if err > atol * max(1.0, float(np.abs(w).max()) if w.size else 1.0):
            return ProbeReport(checked, f"output {name!r}", None, None, err, ramps)
        worst = max(worst, err)
    return ProbeReport(checked, None, None, None, worst, ramps)


def ramp_hits(graph, values: dict, limit: int = 8) -> list[str]:
    """Where the oracle's `values` of `graph` hold a library op outside the region its
    decomposition computes exactly (a compare's input inside its ramp, a select's condition
    between -1 and +1): one line per op, its first such position and value (at most
    `limit`). The model there follows the ramp; the oracle, the step."""
    from twdialect.contracts import LIBRARY_OPS, exact_region

    out = []
    for op in graph.block.ops:
        if type(op) not in LIBRARY_OPS or not all(v in values for v in op.operands):
            continue
        args = [values[v] for v in op.operands]
        inside = ~exact_region(op, args)
        if inside.any():
            p = int(np.argmax(inside))
            out.append(f"{describe(op)} at position {p} (input {np.round(args[0][p], 6).tolist()})")
            if len(out) >= limit:
                break
    return out
