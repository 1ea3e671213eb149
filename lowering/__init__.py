"""Lowering: schedule a tw graph onto transformer layers and materialize PyTorch weights.

    from tw_lowering import compile
    ct = compile(module, d=256, d_head=16, d_hidden=1024)
    ct.run({"x": xs})            # same contract as twdialect.evaluate
    ct.stats.n_layers, ct.stats.floor
"""

from __future__ import annotations

import dataclasses
import itertools
import time

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tw_lowering.machine import GeometryError, Machine
# (`report` is the compile report module, tw_lowering.report: progress reports go by another
# name, or importing that module would rebind this one)
from tw_lowering.progress import check_progress, reporting
from tw_lowering.progress import report as report_progress
from tw_lowering.tasks import LoweringError
from twdialect import ArgumentError
from twdialect.dialect import GraphOp
from twdialect.ops import gc_paused


def prepare(module, pipeline: str | tuple | None = None, after_each=None,
            dtype: str = "float32"):
    """A lowered-ready copy of `module` (a ModuleOp, or one tw.graph): the pipeline (see
    `check_pipeline`) applied, then `decompose` where library ops remain. A lone GraphOp is
    copied into a module of its own first (the passes rewrite the graphs of a module: on a bare
    graph `decompose` did nothing). `after_each(pass, module)`: called after every pass run
    (`run_pipeline`'s hook). `dtype`: what the model will compute in; every pass with a
    `dtype` option (decompose, fuse-select-trees, fuse-linears) then bounds that dtype's
    rounding."""
    from tw_passes import needs_decompose, run_pipeline
    from tw_passes.decompose import DecomposePass

    check_module("prepare", module)
    passes = check_pipeline("prepare", pipeline)
    dtype = np.dtype(dtype).name
    if dtype != "float32":
        passes = tuple(dataclasses.replace(p, dtype=dtype)  # (the passes with that option)
                       if "dtype" in {f.name for f in dataclasses.fields(p)} else p
                       for p in passes)
    if not passes and not needs_decompose(module):
        return module  # the lowering only reads the graph: no copy needed
    module = ModuleOp([module.clone()]) if isinstance(module, GraphOp) else module.clone()
    from tw_lowering.index_heads import annotate

    annotate(module)  # (each head's lookup, planned on the graph as written)
    run_pipeline(module, passes, after_each)
    if needs_decompose(module):
        run_pipeline(module, (DecomposePass(dtype=dtype),), after_each)
    return module


def check_module(fn: str, module) -> None:
    """`module` is what the lowering reads: a ModuleOp or one tw.graph (a GraphOp)."""
    if not isinstance(module, (ModuleOp, GraphOp)):
        raise ArgumentError(f"{fn}: module must be a ModuleOp or a tw GraphOp (from "
                            f"parse_module or tw.Graph), got {type(module).__name__}")


def check_pipeline(fn: str, pipeline) -> tuple:
    """`pipeline` as the passes to run, checked before any work: "none" (or None, or "")
    for none, "default" for DEFAULT_PIPELINE, a spec string such as "canonicalize,cse", or a
    tuple of pass objects. A bad one is a PipelineError naming `fn`, or the pass or option."""
    from tw_passes import PipelineError, pipeline_passes

    if pipeline is None or (isinstance(pipeline, str) and pipeline.strip() == "none"):
        return ()
    if not isinstance(pipeline, (str, tuple, list)):
        raise PipelineError(f"{fn}: pipeline must be a string such as \"default\" or "
                            f"\"canonicalize,cse\", a tuple of passes, or None, got "
                            f"{type(pipeline).__name__}")
    if isinstance(pipeline, str) and pipeline.strip() == "default":
        from tw_passes.optimize import DEFAULT_PIPELINE

        return DEFAULT_PIPELINE
    return pipeline_passes(pipeline)


def compile(module, d: int, d_head: int, d_hidden: int | None = None,  # noqa: A001
            pipeline: str | tuple | None = "default", graph: str = "main", verbose: bool = False,
            on_margin: str = "error", trace_passes: bool = False, progress=None,
            dtype: str = "float32"):
    """Compile graph `graph` of `module` to a CompiledTransformer (a torch.nn.Module).

    `pipeline`: the passes run first, the default pipeline unless told otherwise
    (`passes/optimize.py`); "none" (or None) compiles the graph as written, a spec string
    ("canonicalize,cse") or a tuple of passes runs those (`check_pipeline`).

    An output that declares a margin (`tw.output(..., margin=...)`) is held to it: where its
    static float32 error estimate exceeds the margin, `on_margin="error"` raises a
    PrecisionError naming it, "warn" warns, "ignore" skips the check.

    `module` is a ModuleOp or one GraphOp (then `graph` is not consulted, as in
    `twdialect.evaluate`). `trace_passes=True` records what each pass changed (ops,
    critical-path floor and layers, `stats.PassTrace`) in `ct.stats.passes`, for the compile
    report (`ct.report`): a walk over the graph and a schedule per pass, so it is asked for.

    `progress(stage, done, total)`, if given, hears how the compile goes: stages "passes"
    (passes run), "schedule" (tasks placed in the current trial schedule), "weights" (tasks
    written) and "module" (`lowering/progress.py`; the tools draw it as a terminal bar).

    `dtype`: what every sublayer computes in, "float32" or "float64" (the weights the weight
    writer's float64 sums, unrounded; `docs/runtime.md`); `ct.to(dtype)` changes it later.

    Every argument is checked before any work, each failure a TwError
    naming it: the module's kind, the graph name (one the module holds), the pipeline (a spec
    string, "default", or a tuple of passes: `check_pipeline`), and the geometry (`Machine`:
    whole numbers; `d_hidden=None` is 4 * d)."""
    from twdialect.interp import find_graph

    check_module("compile", module)
    if not isinstance(graph, str):
        raise ArgumentError(f"compile: graph must be the name of a tw.graph (a str), got "
                            f"{type(graph).__name__}")
    if not isinstance(verbose, (bool, np.bool_)):
        raise ArgumentError(f"compile: verbose must be True or False, got {verbose!r}")
    if not isinstance(trace_passes, (bool, np.bool_)):
        raise ArgumentError(f"compile: trace_passes must be True or False, got "
                            f"{trace_passes!r}")
    if not isinstance(on_margin, str) or on_margin not in ("error", "warn", "ignore"):
        raise ArgumentError(f"compile: on_margin must be 'error', 'warn' or 'ignore', got "
                            f"{on_margin!r}")
    check_progress("compile", progress)
    from tw_lowering.materialize import check_dtype

    dtype = check_dtype("compile", dtype)
    pipeline = check_pipeline("compile", pipeline)
    machine = Machine(d=d, d_head=d_head, d_hidden=d_hidden)
    find_graph(module, graph)  # a graph the module lacks is named before the passes run
    with gc_paused(), reporting(progress):
        return _compile(module, machine, pipeline, graph, verbose, on_margin, trace_passes,
                        dtype)


# Inputs declared beyond this magnitude make the compile check every value's range against
# float32's largest number (a value-range pass over the graph: 2.8 s at 10^5 ops, so it is
# skipped where no value can plausibly get there).
HUGE_INPUT = 1e18


def check_float32_magnitudes(graph) -> None:
    """Refuse a graph whose values can leave float32's range (the compiled model would hold inf
    where the oracle, in float64, holds a number): an input declared beyond 3.4e38, or, when
    some input is declared beyond HUGE_INPUT, any value the range analysis bounds beyond it."""
    from twdialect.dialect import FLOAT32_MAX, InputOp, describe
    from twdialect.ranges import RangeError, value_ranges

    widest = 0.0
    for op in graph.block.ops:
        if isinstance(op, InputOp):
            m = max(abs(op.range.lo.value.data), abs(op.range.hi.value.data))
            if m > FLOAT32_MAX:
                raise LoweringError(f"{describe(op)}: its declared range reaches {m:.4g}, beyond "
                                    f"float32's {FLOAT32_MAX:.4g}: the compiled model cannot "
                                    "hold it; declare a narrower range")
            widest = max(widest, m)
    if widest <= HUGE_INPUT:
        return
    try:
        ranges = value_ranges(graph, strict=False)
    except RangeError:
        return
    for v, (lo, hi) in ranges.items():
        m = float(np.max(np.maximum(np.abs(lo), np.abs(hi)), initial=0.0))
        if m > FLOAT32_MAX:
            raise LoweringError(f"{describe(v.owner)}: its value can reach {m:.4g}, beyond "
                                f"float32's {FLOAT32_MAX:.4g}: declare narrower input ranges")


def pressure_of(module, tg, pipeline, graph: str = "main", dtype: str = "float32"):
    """The residual pressure of `tg`, the graph `pipeline` made of `module`: where it does not
    fit a width, the graph as written (decompose only) may stand in for it
    (`lowering.fit.Pressure.alternatives`): a pipeline never turns a graph that fits
    into one that is refused. Where `pipeline` is not the default one, a refusal may name the
    default pipeline as a way out (`Pressure.default_pipeline_fits`, run only then)."""
    from tw_lowering.fit import Pressure
    from tw_lowering.tasks import TaskGraph
    from tw_passes.optimize import DEFAULT_PIPELINE
    from twdialect.interp import find_graph

    name = module.sym_name.data if isinstance(module, GraphOp) else graph

    def graph_after(passes):
        return lambda: TaskGraph(find_graph(prepare(module, passes, dtype=dtype), name))

    tuned = None if tuple(pipeline) == DEFAULT_PIPELINE else graph_after(DEFAULT_PIPELINE)
    if not pipeline:
        return Pressure(tg, default_pipeline=tuned)
    return Pressure(tg, as_written=graph_after(None), default_pipeline=tuned)


def _after_each_pass(trace, n_passes: int):
    """What runs after each pass of the compile's pipeline: the compile report's record
    (`trace`, where asked for) and the "passes" stage's progress."""
    done = itertools.count(1)
    total = max(n_passes, 1)

    def after(ran, module) -> None:
        if trace is not None:
            trace.after_pass(ran, module)
        report_progress("passes", min(next(done), total), total)

    return after


def _compile(module, machine, pipeline, graph, verbose, on_margin="error", trace_passes=False,
             dtype=np.float32):
    from tw_lowering.stats import PassTrace
    from tw_lowering.tasks import TaskGraph
    from twdialect.interp import find_graph

    seconds = {}
    t0 = time.perf_counter()
    name = module.sym_name.data if isinstance(module, GraphOp) else graph
    trace = PassTrace(name, machine) if trace_passes else None
    if trace is not None:
        trace.record("input", module)
    from tw_lowering.stats import ramp_zones

    ramps = ramp_zones(find_graph(module, name))
    prepared = prepare(module, pipeline, _after_each_pass(trace, len(pipeline)), dtype)
    report_progress("passes", max(len(pipeline), 1), max(len(pipeline), 1))
    g = find_graph(prepared, name)
    seconds["passes"] = time.perf_counter() - t0
    check_float32_magnitudes(g)
    tg = TaskGraph(g)
    model = lower(tg, machine, pressure_of(module, tg, pipeline, graph, dtype), seconds, on_margin,
                  verbose, trace.steps if trace is not None else [], dtype=dtype)
    model.stats.ramps = ramps
    return model


def lower(tg, machine, pressure=None, seconds=None, on_margin="error", verbose=False,
          passes=(), sched=None, dtype=np.float32):
    """`compile`'s work after the passes: the schedule of a prepared task graph `tg` (with
    its residual `pressure`, `lowering.fit.Pressure`), the weights, the torch module.
    A search that prepared its graph once (`lowering.sweep.Sweep`) compiles the width it
    picks with this, and never runs the pipeline again (`sched`: the schedule of `tg` at
    `machine` it made already, written as is; `dtype`: the model's, np.float32 or
    np.float64)."""
    from tw_lowering.materialize import materialize
    from tw_lowering.model import CompiledTransformer
    from tw_lowering.precision import Estimate, check_margins, check_outputs
    from tw_lowering.schedule import schedule
    from tw_lowering.stats import make_stats

    seconds = dict(seconds or {})
    t1 = time.perf_counter()
    if sched is None:
        sched = schedule(tg, machine, pressure=pressure)
    if on_margin != "ignore":  # (one estimate of every value's error for both checks)
        estimate = Estimate(sched)
        check_margins(sched, on_margin, dtype, estimate)
        check_outputs(sched, on_margin, dtype, estimate)
    t2 = time.perf_counter()
    seconds["schedule"] = t2 - t1
    weights, sources, outputs = materialize(sched, dtype)
    t3 = time.perf_counter()
    seconds["weights"] = t3 - t2
    stats = make_stats(sched, weights, seconds)
    stats.passes = list(passes)
    report_progress("module", 0, 1)
    model = CompiledTransformer(machine, weights, sources, outputs, stats, sched)
    report_progress("module", 1, 1)
    seconds["module"] = time.perf_counter() - t3
    stats.seconds = seconds
    if verbose:
        print(stats.report())
    return model




def __getattr__(name: str):
    """The frontends' drivers under the names callers know (`compile_machine`,
    `compile_rasp_to_model`: tracr's interface), from the floor above (`tw_frontends`),
    imported on first use: nothing in tw_lowering imports a frontend."""
    if name == "compile_machine":
        from tw_frontends.firebrand import compile_machine

        return compile_machine
    if name == "compile_rasp_to_model":
        from tw_frontends.rasp import compile_rasp_to_model

        return compile_rasp_to_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["compile", "compile_machine", "compile_rasp_to_model", "prepare", "lower", "Machine",
           "GeometryError", "LoweringError"]
