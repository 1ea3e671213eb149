"""Probe: run the compiled model beside the oracle and name the first op whose value diverges.

Residual snapshots are taken after every sublayer; each value is read from its columns in the
snapshot right after the sublayer that completed it (before anything can reuse them) and
compared with the oracle's value. Ops are checked in block order, so the first divergence is
where a bug or a contract violation entered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

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
    checked: int  # values compared
    first_divergence: str | None  # describe(op) of the first diverging op, or None
    layer: int | None
    sublayer: str | None
    max_error: float  # largest error of the first diverging value (or over all, if none)

    def __str__(self) -> str:
        if self.first_divergence is None:
            return f"no divergence in {self.checked} values (max error {self.max_error:.3g})"
        return (f"first divergence: {self.first_divergence} at layer {self.layer} "
                f"{self.sublayer} (max error {self.max_error:.3g}; {self.checked} values checked)")


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

    `inputs` as `twdialect.evaluate` takes them (see `random_graphs.sample_inputs`);
    `n_positions` is needed only by a graph without inputs (it says how many positions)."""
    checked, worst = 0, 0.0
    for c in compare_values(ct, module, inputs, graph, n_positions):
        checked += 1
        if c.error > atol * c.scale:
            return ProbeReport(checked, describe(c.op), layer_of(c.slot), sublayer_name(c.slot),
                               c.error)
        worst = max(worst, c.error)
    return ProbeReport(checked, None, None, None, worst)
