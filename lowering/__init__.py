"""Lowering: schedule a tw graph onto transformer layers and materialize PyTorch weights.

    from lowering import compile
    ct = compile(module, d=256, d_head=16, d_hidden=1024)
    ct.run({"x": xs})            # same contract as twdialect.evaluate
    ct.stats.n_layers, ct.stats.floor
"""

from __future__ import annotations

import contextlib
import gc
import time

from lowering.machine import GeometryError, Machine
from lowering.tasks import LoweringError


def prepare(module, pipeline: str | None = None):
    """A lowered-ready copy of `module`: the pipeline applied, library ops decomposed."""
    from passes import run_pipeline
    from twdialect.dialect import LIBRARY_OPS

    has_library = any(isinstance(op, LIBRARY_OPS) for op in module.walk())
    if not pipeline and not has_library:
        return module  # the lowering only reads the graph: no copy needed
    module = module.clone()
    if pipeline:
        if pipeline == "default":
            from passes.optimize import DEFAULT_PIPELINE

            pipeline = DEFAULT_PIPELINE
        run_pipeline(module, pipeline)
    if any(isinstance(op, LIBRARY_OPS) for op in module.walk()):
        run_pipeline(module, "decompose")
    return module


def compile(module, d: int, d_head: int, d_hidden: int | None = None,  # noqa: A001
            pipeline: str | None = None, graph: str = "main", verbose: bool = False):
    """Compile graph `graph` of `module` to a CompiledTransformer (a torch.nn.Module)."""
    machine = Machine(d=d, d_head=d_head, d_hidden=4 * d if d_hidden is None else d_hidden)
    with _gc_paused():
        return _compile(module, machine, pipeline, graph, verbose)


@contextlib.contextmanager
def _gc_paused():
    """Compiling allocates many long-lived objects and no garbage cycles worth collecting;
    the cyclic GC would otherwise rescan the growing heap (superlinear at 10^5 ops)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _compile(module, machine, pipeline, graph, verbose):
    from lowering.materialize import materialize
    from lowering.model import CompiledTransformer
    from lowering.schedule import schedule
    from lowering.stats import make_stats
    from lowering.tasks import TaskGraph
    from twdialect.interp import find_graph

    seconds = {}
    t0 = time.perf_counter()
    prepared = prepare(module, pipeline)
    g = find_graph(prepared, graph)
    t1 = time.perf_counter()
    seconds["passes"] = t1 - t0
    tg = TaskGraph(g)
    sched = schedule(tg, machine)
    t2 = time.perf_counter()
    seconds["schedule"] = t2 - t1
    weights, sources, outputs = materialize(sched)
    t3 = time.perf_counter()
    seconds["weights"] = t3 - t2
    stats = make_stats(sched, weights, seconds)
    model = CompiledTransformer(machine, weights, sources, outputs, stats, sched)
    seconds["module"] = time.perf_counter() - t3
    stats.seconds = seconds
    if verbose:
        print(stats.report())
    return model


__all__ = ["compile", "prepare", "Machine", "GeometryError", "LoweringError"]
