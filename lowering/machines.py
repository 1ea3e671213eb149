"""firebrand machines compiled by tw: `compile_machine`, firebrand's own entry point, on tw.

    from tw_lowering import compile_machine
    cm = compile_machine(machine)                # a firebrand.ir.Machine
    cm.generate(prefix, max_steps=100)           # firebrand.reference.run's tokens
    cm.stats.layers, cm.compiled                 # the CompiledTransformer

The machine goes through `twdialect.frontends.firebrand.translate` (input "tokens", ids =
value - lower; output "next", the machine's next value at every position), then
`tw_lowering.compile`. `generate` decodes greedily with the compiled model's KV cache
(`lowering.decode.Decoder`), one token a step: round(next at the last position) fed back as
the next token, until the last token is one of the machine's halt values or `max_steps`
steps were taken (firebrand's `reference.run` and `Transformer.generate`).

Geometry left unset: d_head 16, and d the narrowest multiple of it whose schedule reaches the
fewest layers any width reaches (the search tw-rasp's compile makes: `lowering.sweep`),
d_hidden 4 d unless given. max_context left unset: the machine's `context_limit`, else
DEFAULT_CONTEXT.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from twdialect.errors import TwError

DEFAULT_CONTEXT = 256  # max_context for a machine without a context_limit
DEFAULT_D_HEAD = 16


class MachineError(TwError):
    """A firebrand machine tw cannot compile or run as asked (one line, naming why)."""


@dataclass(frozen=True)
class MachineStats:
    """The compiled model's size (from `ct.stats`)."""

    layers: int
    floor: int
    heads: int
    neurons: int
    residual: int  # d: the residual stream's columns
    d_head: int
    d_hidden: int
    params: int  # allocated in the stock layout (`ct.allocated_params()`)

    def as_dict(self) -> dict:
        return asdict(self)


def _whole(v, what: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < minimum:
        raise MachineError(f"compile_machine: {what} must be a whole number >= {minimum}, "
                           f"got {v!r}")
    return int(v)


class CompiledMachine:
    """A firebrand machine compiled to a transformer: `generate`, `compiled`, `stats`."""

    def __init__(self, machine, compiled, max_context: int, seconds: dict):
        self.machine = machine
        self.compiled = compiled
        self.max_context = max_context
        self.seconds = seconds
        s = compiled.stats
        self.stats = MachineStats(
            layers=int(s.n_layers), floor=int(s.floor), heads=int(sum(s.heads_per_layer)),
            neurons=int(sum(s.neurons_per_layer)), residual=int(s.d), d_head=int(s.d_head),
            d_hidden=int(s.d_hidden), params=int(s.allocated_params))

    def __repr__(self) -> str:
        m, s = self.machine, self.stats
        return (f"CompiledMachine(alphabet [{m.lower}, {m.upper}], max_context "
                f"{self.max_context}, {s.layers} layers, d={s.residual})")

    def _check_prefix(self, prefix, max_steps) -> list[int]:
        m = self.machine
        if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) \
                or max_steps < 0:
            raise MachineError(f"generate: max_steps must be a whole number >= 0, got "
                               f"{max_steps!r}")
        if isinstance(prefix, (str, bytes)) or not hasattr(prefix, "__iter__"):
            raise MachineError(f"generate: prefix must be a list of integers, got "
                               f"{type(prefix).__name__}")
        tokens = list(prefix)
        for i, t in enumerate(tokens):
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
                raise MachineError(f"generate: prefix token {i} is {t!r}, not an integer")
            if not m.lower <= t <= m.upper:
                raise MachineError(f"generate: prefix token {i} is {int(t)}, outside the "
                                   f"machine's alphabet [{m.lower}, {m.upper}]")
        tokens = [int(t) for t in tokens]
        if len(tokens) < m.required_prefix:
            raise MachineError(f"generate: the prefix has {len(tokens)} tokens; the machine "
                               f"needs at least {m.required_prefix}")
        if len(tokens) > self.max_context:
            raise MachineError(f"generate: the prefix has {len(tokens)} tokens, beyond "
                               f"max_context {self.max_context}")
        return tokens

    def generate(self, prefix, max_steps: int = 100, decoder: str = "auto") -> list[int]:
        """`prefix` and the greedy tokens after it, up to and including a halt value, at most
        `max_steps` of them (firebrand's `reference.run`): no step when the prefix already
        ends in a halt value. `decoder`: as `next_values` takes it. A next value outside [lower, upper], or a run that needs a
        position beyond max_context before it halts, is a MachineError."""
        tokens = self._check_prefix(prefix, max_steps)
        halts = set(self.machine.halt_values)
        if max_steps == 0 or tokens[-1] in halts:
            return tokens
        nexts = self.next_values(tokens, min(self.max_context, len(tokens) + int(max_steps) - 1),
                                 "generate", decoder)
        for step in range(int(max_steps)):
            value = next(nexts)
            tokens.append(value)
            if value in halts or step + 1 == max_steps:
                break
            if len(tokens) > self.max_context:
                raise MachineError(f"generate: after {step + 1} steps the sequence holds "
                                   f"{len(tokens)} tokens, beyond max_context "
                                   f"{self.max_context}, and the machine has not halted "
                                   "(compile with a larger max_context, or take fewer steps)")
        return tokens

    def next_values(self, tokens: list[int], capacity: int, who: str, decoder: str = "auto"):
        """The machine's next value after `tokens`, then after each value it yields, fed
        back, with `capacity` positions at most: the caller stops asking before they are
        used up. A value outside [lower, upper] is a MachineError naming `who`, the step and
        the position. `decoder`: "index" (the compiled index decoder,
        `lowering/fast_decode.py`), "torch" (the KV-cache decoder), or "auto": the index
        decoder where it applies (numba present, a CPU model), else torch; both give the same
        tokens."""
        from tw_lowering.fast_decode import DECODERS, IndexMismatch, torch_reason

        if decoder not in DECODERS:
            raise MachineError(f"{who}: decoder must be 'auto', 'index' or 'torch', got "
                               f"{decoder!r}")
        why = torch_reason(self.compiled, decoder)
        if decoder == "index" and why:
            raise MachineError(f"{who}: the index decoder does not apply: {why}")
        if why:
            self.decoder_used = "torch" if decoder == "torch" else f"torch ({why})"
            yield from self._torch_values(tokens, capacity, who)
            return
        self.decoder_used = "index"
        done = list(tokens)
        try:
            for value in self._index_values(tokens, capacity, who):
                done.append(value)
                yield value
        except IndexMismatch:  # (a key off its plan: torch finishes the run, same tokens)
            self.decoder_used = "index, then torch"
            yield from self._torch_values(done, capacity, who)

    def _index_values(self, tokens: list[int], capacity: int, who: str):
        from tw_lowering.fast_decode import IndexDecoder

        m = self.machine
        dec = IndexDecoder(self.compiled, capacity)
        self.index_decoder = dec
        n = len(tokens)
        ids = np.zeros(capacity + 1, np.int64)
        ids[:n] = np.asarray(tokens, np.int64) - m.lower
        start, chunk = 0, 64
        while start < capacity:
            stop = min(capacity, max(start + chunk, n))
            status, nxt = dec.run_machine(ids, n, start, stop, m.lower, m.upper, m.halt_values)
            for p in range(max(start + 1, n), nxt + 1):
                value = int(ids[p]) + m.lower
                if status == 2 and p == nxt:
                    raise self._outside(who, p - n + 1, p, value)
                yield value
            if status == 1 or stop == capacity:
                return
            start = nxt
            chunk = min(2 * chunk, 1 << 16)

    def _outside(self, who: str, step: int, position: int, value: int) -> MachineError:
        m = self.machine
        return MachineError(f"{who}: step {step} (position {position}): the machine's next "
                            f"value {value} lies outside its alphabet [{m.lower}, {m.upper}]")

    def _torch_values(self, tokens: list[int], capacity: int, who: str):
        from twdialect.inputs import check_feedback, check_inputs

        m, ct = self.machine, self.compiled
        dec = ct.decoder(1, capacity)
        out = dec.prefill([check_inputs(ct.contract, {"tokens": np.array(tokens) - m.lower})])[0]
        start = position = len(tokens)
        while True:
            value = int(round(float(out["next"][-1, 0])))
            if not m.lower <= value <= m.upper:
                raise self._outside(who, position - start + 1, position, value)
            yield value
            position += 1
            out = dec.step([check_feedback(ct.contract, {"tokens": value - m.lower},
                                           int(dec.positions[0]))])[0]


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
    from twdialect.frontends.firebrand import needs_float64, translate

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


__all__ = ["compile_machine", "as_machine", "CompiledMachine", "MachineStats", "MachineError",
           "DEFAULT_CONTEXT"]
