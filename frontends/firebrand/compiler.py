"""firebrand machines compiled by tw: `compile_machine`, firebrand's own entry point, on tw
(the machines importer's driver; `tw_frontends.firebrand.translator` is the translation, and
`tw_lowering.machines.CompiledMachine` what runs the result).

    from tw_frontends.firebrand import compile_machine
    cm = compile_machine(machine)                # a firebrand.ir.Machine
    cm.generate(prefix, max_steps=100)           # firebrand.reference.run's tokens

Geometry left unset: d_head 16, and d the narrowest multiple of it whose schedule reaches the
fewest layers any width reaches (the search tw-rasp's compile makes: `lowering.sweep`),
d_hidden 4 d unless given. max_context left unset: the machine's `context_limit`, else
DEFAULT_CONTEXT.
"""

from __future__ import annotations

import time

from tw_lowering.machines import (DEFAULT_CONTEXT, DEFAULT_D_HEAD, CompiledMachine,
                                  MachineError, _whole)


def as_machine(obj, transition=None):
    """The `firebrand.ir.Machine` of what firebrand users hold: a Machine itself; a
    `SequenceMachine` (its `lower_machine()`); an `@program` function (its SequenceMachine's);
    a `RecordMachine` with its `transition` (`lower_machine(transition)`); a machine spec
    with a `machine()` method (RV32Spec, LifeSpec, ...). Anything else is a MachineError."""
    try:
        from firebrand.ir import Machine
        from firebrand.machine import RecordMachine
        from firebrand.program import Program
        from firebrand.sequence import SequenceMachine
    except ImportError:
        raise MachineError("compile_machine needs firebrand (pip install firebrand)") from None
    if transition is not None and not isinstance(obj, RecordMachine):
        raise MachineError("compile_machine: transition= goes with a firebrand RecordMachine, "
                           f"not a {type(obj).__name__}")
    if isinstance(obj, Program):
        obj = obj.machine
    if isinstance(obj, SequenceMachine):
        obj = obj.lower_machine()
    elif isinstance(obj, RecordMachine):
        if transition is None:
            raise MachineError("compile_machine: a RecordMachine needs its transition "
                               "(compile_machine(protocol, transition=fn))")
        obj = obj.lower_machine(transition)
    elif not isinstance(obj, Machine) and callable(getattr(obj, "machine", None)):
        obj = obj.machine()
    if not isinstance(obj, Machine):
        raise MachineError(f"compile_machine: expected a firebrand Machine, SequenceMachine, "
                           f"RecordMachine, @program function or machine spec, got "
                           f"{type(obj).__name__}")
    return obj


def compile_machine(machine, *, max_context: int | None = None, d: int | None = None,
                    d_head: int | None = None, d_hidden: int | None = None,
                    pipeline="default", dtype=None, transition=None) -> CompiledMachine:
    """Compile a firebrand machine with tw: a `firebrand.ir.Machine` (firebrand's
    `compile_machine`'s input), or a SequenceMachine, an `@program` function, a RecordMachine
    with its `transition`, or a spec with a `machine()` method (`as_machine`).

    `max_context`: the longest sequence (default: the machine's `context_limit`, else
    DEFAULT_CONTEXT; never beyond its context_limit). `d`, `d_head`, `d_hidden`, `pipeline`,
    `dtype`: as `tw_lowering.compile` takes them (dtype unset: float32, or float64 where an
    attention head's scores outgrow float32, `firebrand.needs_float64`); d unset: the narrowest width (a multiple of
    d_head, default 16) whose schedule reaches the fewest layers. A construct tw cannot
    translate is a FirebrandError naming it; every other failure is one TwError line."""
    import tw_lowering.model  # noqa: F401 - torch imported before the clock starts
    from tw_lowering import check_pipeline, compile
    from tw_lowering.materialize import check_dtype
    from tw_frontends.firebrand.translator import needs_float64, translate

    machine = as_machine(machine, transition)
    limit = machine.context_limit
    if max_context is None:
        max_context = limit if limit is not None else DEFAULT_CONTEXT
    max_context = _whole(max_context, "max_context", 1)
    if limit is not None and max_context > limit:
        raise MachineError(f"compile_machine: max_context {max_context} exceeds the machine's "
                           f"context_limit {limit}")
    if max_context < machine.required_prefix:
        raise MachineError(f"compile_machine: max_context {max_context} is shorter than the "
                           f"machine's required prefix of {machine.required_prefix} tokens")
    dh = DEFAULT_D_HEAD if d_head is None else _whole(d_head, "d_head", 1)
    if d is not None:
        d = _whole(d, "d", 1)
    if d_hidden is not None:
        d_hidden = _whole(d_hidden, "d_hidden", 1)
    check_pipeline("compile_machine", pipeline)  # checked before any work
    t0 = time.perf_counter()
    if dtype is None:  # float64 where a head's scores outgrow float32 (needs_float64)
        dtype = "float64" if needs_float64(machine, max_context=max_context) else "float32"
    np_dtype = check_dtype("compile_machine", dtype)
    module = translate(machine, max_context=max_context)
    t1 = time.perf_counter()
    if d is not None:
        ct = compile(module, d=d, d_head=dh, d_hidden=d_hidden, pipeline=pipeline,
                     dtype=np_dtype.name)
    else:
        ct = _narrowest_at_fewest_layers(module, pipeline, dh, d_hidden, np_dtype.name)
    t2 = time.perf_counter()
    return CompiledMachine(machine, ct, max_context,
                           {"translate": t1 - t0, "compile": t2 - t1, "total": t2 - t0})


def _narrowest_at_fewest_layers(module, pipeline, d_head: int, d_hidden: int | None,
                                dtype: str = "float32"):
    """The model at the narrowest d (a multiple of d_head) whose schedule has the fewest
    layers of any width (`sweep.curve` up to the floor, then `width_for`'s bisection)."""
    from tw_lowering.sweep import Sweep, width_for

    sweep = Sweep(module, pipeline, stand_ins=False, dtype=dtype)
    curve = sweep.curve(d_head, d_hidden=d_hidden)
    fewest = min(p.n_layers for p in curve)
    point = width_for(None, d_head, max_layers=fewest, d_hidden=d_hidden, curve=curve,
                      sweep=sweep)
    return sweep.compile(point.d, d_head, d_hidden if d_hidden is not None else point.d_hidden)


__all__ = ["compile_machine", "as_machine"]
