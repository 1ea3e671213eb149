"""firebrand machines compiled by tw, at run time: `CompiledMachine` (what
`tw_frontends.firebrand.compile_machine`, firebrand's own entry point on tw, returns).

    from tw_frontends.firebrand import compile_machine
    cm = compile_machine(machine)                # a firebrand.ir.Machine
    cm.generate(prefix, max_steps=100)           # firebrand.reference.run's tokens
    cm.stats.layers, cm.compiled                 # the CompiledTransformer

The machine went through `tw_frontends.firebrand.translate` (input "tokens", ids =
value - lower; output "next", the machine's next value at every position), then
`tw_lowering.compile`. `generate` decodes greedily with the compiled model's KV cache
(`lowering.decode.Decoder`), one token a step: round(next at the last position) fed back as
the next token, until the last token is one of the machine's halt values or `max_steps`
steps were taken (firebrand's `reference.run` and `Transformer.generate`).
"""

from __future__ import annotations

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


__all__ = ["CompiledMachine", "MachineStats", "MachineError", "DEFAULT_CONTEXT"]
