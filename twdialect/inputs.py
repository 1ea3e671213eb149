"""The run-time input contract of a graph, in one place for the oracle and a compiled model.

A graph's sources make promises that analyses and the lowering rely on: a `tw.input` holds
finite numbers inside its declared `#tw.range` (integers when declared `integer`), a
`tw.embedding` reads integer token ids in [0, vocab), a `tw.pos_encoding` sees positions below
its `max_len` and a `tw.pos_table` positions it has rows for. A value that breaks a promise gives no answer the compiled model is held to (the
decomposed compare in a select can answer -2 where the oracle says -30), so both the oracle
(`twdialect.interp`) and `CompiledTransformer` (`lowering/model.py`) pass their inputs through
`check_inputs` and refuse the same inputs with the same one-line `EvaluationError`.

`on_out_of_range` says what to do with a value outside its declared range:

* ``"error"`` (the default): refuse, naming the input, position, component, value and range;
* ``"clamp"``: clamp it into the range (to the integers in it for an `integer` input);
* ``"unchecked"``: feed it as it is, and skip the finiteness, integrality and `max_len`
  checks too (not a `tw.pos_table`'s length: rows it does not have cannot be read); the
  compiled model is then no longer promised to match the oracle (a debugging and
  stress-testing aid).

Names, shapes, dtypes (real numbers only: no booleans, complex numbers, strings or objects),
a common number of positions (at least one) and token ids (integers in [0, vocab)) are
checked in every mode: nothing else can be fed at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import math

import numpy as np

from twdialect.errors import TwError, shortened

ON_OUT_OF_RANGE = ("error", "clamp", "unchecked")


class EvaluationError(TwError):
    """Bad inputs for a graph (missing, unknown, wrong shape or dtype, outside the declared
    range, not integer where promised, out of vocabulary, empty)."""


@dataclass(frozen=True)
class InputSpec:
    """One source the caller feeds: a `tw.input` ("input") or a `tw.embedding` ("embedding")."""

    name: str
    kind: str
    width: int  # components per position (1 for a token id)
    lo: float = -np.inf
    hi: float = np.inf
    integer: bool = False
    vocab: int = 0  # embedding table rows

    def expected(self) -> str:
        """What one position of this source must be, for error messages."""
        if self.kind == "embedding":
            return f"token input \"{self.name}\": one id in [0, {self.vocab}) per position"
        kind = "integers" if self.integer else "numbers"
        return (f"input \"{self.name}\": shape (n_positions, {self.width}), {kind} in "
                f"[{_num(self.lo)}, {_num(self.hi)}]")


@dataclass(frozen=True)
class InputContract:
    """Every source a graph reads from its caller, the longest sequence it promises to
    handle (the smallest `tw.pos_encoding` max_len; None without one), and the positions its
    `tw.pos_table`s have rows for (the fewest rows; None without one: a longer sequence is
    refused in every mode, `"unchecked"` included, since those rows do not exist)."""

    specs: tuple[InputSpec, ...]
    max_len: int | None = None
    table_len: int | None = None

    @staticmethod
    def of(graph) -> InputContract:
        """The contract a `tw.graph` declares."""
        from twdialect.dense import shape_of
        from twdialect.dialect import EmbeddingOp, InputOp, PosEncodingOp, PosTableOp, width_of

        specs: list[InputSpec] = []
        max_len = table_len = None
        for op in graph.block.ops:
            if isinstance(op, InputOp):
                lo, hi = op.range.bounds
                specs.append(InputSpec(op.input_name.data, "input", width_of(op.out), lo, hi,
                                       op.integer is not None))
            elif isinstance(op, EmbeddingOp):
                specs.append(InputSpec(op.input_name.data, "embedding", 1,
                                       vocab=shape_of(op.table)[0]))
            elif isinstance(op, PosEncodingOp):
                m = op.max_len.value.data
                max_len = m if max_len is None else min(max_len, m)
            elif isinstance(op, PosTableOp):
                m = shape_of(op.table)[0]
                table_len = m if table_len is None else min(table_len, m)
        return InputContract(tuple(specs), max_len, table_len)

    @property
    def longest(self) -> int | None:
        """The longest sequence the graph takes in "error" mode (None: no limit)."""
        lens = [n for n in (self.max_len, self.table_len) if n is not None]
        return min(lens) if lens else None

    def names(self) -> str:
        return ", ".join(f"\"{s.name}\"" for s in self.specs) or "none"

    def describe(self) -> str:
        return "; ".join(s.expected() for s in self.specs) or "no inputs"


@dataclass
class CheckedInputs:
    """Inputs that keep the contract: {name: float64 (n, width)} for inputs, {name: int64 (n,)}
    token ids for embeddings, all with `n_positions` (>= 1) positions."""

    values: dict[str, np.ndarray]
    n_positions: int


def check_inputs(contract, inputs, on_out_of_range: str = "error",
                 n_positions: int | None = None, start: int = 0) -> CheckedInputs:
    """Check `inputs` ({name: array}) against `contract` (an InputContract or a `tw.graph`) and
    return them converted (see the module docstring for what is checked and for
    `on_out_of_range`). `n_positions` is needed only by a graph without inputs; `start` is the
    absolute position of the first row (a KV-cache step), used by messages and `max_len`.
    Raises EvaluationError with one line naming the input, position and component at fault."""
    if not isinstance(contract, InputContract):
        contract = InputContract.of(contract)
    mode = _check_mode(on_out_of_range)
    if not isinstance(inputs, Mapping):
        raise EvaluationError(f"inputs must be a mapping {{name: array}}, got "
                              f"{type(inputs).__name__} (the graph's inputs: {contract.names()})")
    _check_names(contract, inputs)
    n = _check_n_positions(n_positions)
    n_from = "n_positions"  # what set n, for the message when another input disagrees
    values: dict[str, np.ndarray] = {}
    for spec in contract.specs:
        a = _shaped(spec, _real_array(spec, inputs[spec.name]))
        if n is None:
            n, n_from = a.shape[0], _what(spec)
        elif a.shape[0] != n:
            raise EvaluationError(f"{_what(spec)} has {a.shape[0]} positions, expected {n} "
                                  f"(as {n_from}): every input needs the same number")
        if n == 0:
            raise EvaluationError(f"{_what(spec)} has no positions: a sequence needs at "
                                  "least one")
        values[spec.name] = (_token_ids(spec, a, start) if spec.kind == "embedding"
                             else _promised_values(spec, a, start, mode))
    if n is None:
        raise EvaluationError("the graph has no inputs: pass n_positions (at least 1)")
    if mode != "unchecked" and contract.max_len is not None and start + n > contract.max_len:
        raise EvaluationError(f"position {start + n - 1} is beyond the graph's tw.pos_encoding "
                              f"max_len {contract.max_len} (positions 0..{contract.max_len - 1});"
                              " declare a larger max_len or feed a shorter sequence")
    if contract.table_len is not None and start + n > contract.table_len:
        raise EvaluationError(f"position {start + n - 1} is beyond the graph's tw.pos_table, "
                              f"which has rows for positions 0..{contract.table_len - 1}; give "
                              "the table more rows or feed a shorter sequence")
    return CheckedInputs(values, n)


def check_feedback(contract, returned, position: int, on_out_of_range: str = "error"
                   ) -> CheckedInputs:
    """One position fed back by a `generate` feedback function, checked like any input.

    The feedback must return {name: value} for every input: a (width,) array (a number for a
    width-1 input) or a token id. Anything else is one line saying what it returned and what
    was expected."""
    if not isinstance(contract, InputContract):
        contract = InputContract.of(contract)
    where = f"generate: the feedback for position {position}"
    if not isinstance(returned, Mapping) or (not returned and contract.specs):
        got = "nothing" if returned is None or (isinstance(returned, Mapping) and not returned) \
            else f"a {type(returned).__name__}"
        raise EvaluationError(f"{where} returned {got}; it must return {{name: value}} with "
                              f"one position of every input ({contract.describe()})")
    fast = _fed_plain(contract, returned, position)
    if fast is not None:
        return fast
    try:
        rows = {k: _one_position(contract, k, v) for k, v in returned.items()}
        return check_inputs(contract, rows, on_out_of_range, n_positions=1, start=position)
    except EvaluationError as e:
        raise EvaluationError(f"{where}: {e}") from None


def _fed_plain(contract: InputContract, returned: Mapping, position: int
                ) -> CheckedInputs | None:
    """The common feedback, every input given as valid plain numbers (a token id, a number
    for a width-1 input, a short sequence or array of them), inside the graph's positions,
    checked without numpy's per-call cost (a generate step's own cost is a few tens of
    microseconds); None for anything else, which `check_inputs` checks and names."""
    if len(returned) != len(contract.specs) or (
            contract.max_len is not None and position >= contract.max_len) or (
            contract.table_len is not None and position >= contract.table_len):
        return None
    values = {}
    for spec in contract.specs:
        row = _fed_row(spec, returned.get(spec.name))
        if row is None:
            return None
        values[spec.name] = row
    return CheckedInputs(values, 1)


def _fed_row(spec: InputSpec, v) -> np.ndarray | None:
    """One fed-back position of `spec` that keeps its contract as it is, else None."""
    if spec.kind == "embedding":
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < spec.vocab:
            return None
        return np.array([v], np.int64)
    if isinstance(v, np.ndarray):
        if v.size != spec.width or v.ndim > 2 or v.dtype.kind not in "if":
            return None
        xs = v.reshape(-1).tolist()
    elif isinstance(v, (list, tuple)):
        xs = list(v)
    else:
        xs = [v]
    if len(xs) != spec.width:
        return None
    for x in xs:
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
            return None
        x = float(x)
        if not math.isfinite(x) or not spec.lo <= x <= spec.hi or (
                spec.integer and x != math.floor(x)):
            return None
    return np.array(xs, np.float64).reshape(1, spec.width)


# The most steps one `generate` call takes: each step re-runs the model (a KV-cache step or an
# oracle pass), so a count beyond this is a mistake, not a long request to wait for.
MAX_STEPS = 1 << 16


def check_steps(steps) -> int:
    """`generate`'s step count: a non-negative integer, at most MAX_STEPS."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise EvaluationError(f"generate: steps must be a non-negative integer, got {steps!r}")
    if steps > MAX_STEPS:
        raise EvaluationError(f"generate: steps must be at most {MAX_STEPS}, got {steps} (call "
                              "generate again with the outputs to go further)")
    return int(steps)


def check_generate(steps, feedback) -> int:
    """`generate`'s own arguments (oracle and compiled model alike), checked before any work:
    the step count (`check_steps`) and the feedback function (`check_feedback_function`).
    Returns the step count as an int."""
    steps = check_steps(steps)
    check_feedback_function(feedback)
    return steps


def check_feedback_function(feedback) -> None:
    """`generate`'s feedback must be callable with one argument, the last outputs: anything
    else would fail only at the first step, as Python's TypeError about the call (a dict of
    inputs passed where the function goes, `lambda: ...`). Checked even for `steps=0`, where
    it is never called: the call is wrong either way. A callable whose signature Python
    cannot read (some builtins) is taken on trust; an exception raised inside the feedback
    is the caller's own and passes through unchanged."""
    if not callable(feedback):
        hint = " (a mapping of inputs: wrap it, lambda outputs: {...})" \
            if isinstance(feedback, Mapping) else ""
        raise EvaluationError("generate: feedback must be a function of the last outputs, "
                              f"feedback(outputs) -> {{name: value}}, got "
                              f"{type(feedback).__name__} {shortened(repr(feedback))}{hint}")
    import inspect

    try:
        signature = inspect.signature(feedback)
    except (TypeError, ValueError):  # (no signature to read: trust it)
        return
    try:
        signature.bind({})
    except TypeError as e:
        name = getattr(feedback, "__name__", type(feedback).__name__)
        raise EvaluationError(f"generate: feedback must take one argument, the last outputs, "
                              f"but {name}{signature} cannot be called so ({e})") from None


# -- the checks, one promise each --------------------------------------------------------------


def _check_mode(on_out_of_range) -> str:
    if not isinstance(on_out_of_range, str) or on_out_of_range not in ON_OUT_OF_RANGE:
        raise EvaluationError(f"on_out_of_range={on_out_of_range!r} is not one of "
                              + ", ".join(f"\"{m}\"" for m in ON_OUT_OF_RANGE))
    return on_out_of_range


def _check_names(contract: InputContract, inputs: Mapping) -> None:
    known = {s.name for s in contract.specs}
    for key in inputs:
        if key not in known:
            raise EvaluationError(f"unknown input {_quote(key)} (the graph's inputs: "
                                  f"{contract.names()})")
    for spec in contract.specs:
        if spec.name not in inputs:
            raise EvaluationError(f"missing {spec.expected()}")


def _check_n_positions(n_positions) -> int | None:
    if n_positions is None:
        return None
    if isinstance(n_positions, bool) or not isinstance(n_positions, (int, np.integer)):
        raise EvaluationError(f"n_positions must be an integer, got {n_positions!r}")
    if n_positions < 1:
        raise EvaluationError(f"n_positions is {n_positions}: a sequence needs at least one "
                              "position")
    return int(n_positions)


def _real_array(spec: InputSpec, value) -> np.ndarray:
    """`value` as a float64 array, refusing anything that is not real numbers."""
    try:
        a = np.asarray(value)
    except (ValueError, TypeError) as e:  # ragged nesting and the like
        raise EvaluationError(f"{_what(spec)} is not an array of numbers "
                              f"({str(e).splitlines()[0]})") from None
    if a.dtype.kind == "O":
        if not all(_is_real(x) for x in a.reshape(-1).tolist()):
            bad = next(x for x in a.reshape(-1).tolist() if not _is_real(x))
            raise EvaluationError(f"{_what(spec)} holds {type(bad).__name__} values, not real "
                                  "numbers")
        a = a.astype(np.float64)
    kinds = {"b": "booleans", "c": "complex numbers", "U": "strings", "S": "bytes",
             "M": "datetimes", "m": "timedeltas", "V": "raw records"}
    if a.dtype.kind in kinds:
        raise EvaluationError(f"{_what(spec)} holds {kinds[a.dtype.kind]} (dtype {a.dtype}), "
                              "not real numbers")
    return a.astype(np.float64)


def _is_real(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _shaped(spec: InputSpec, a: np.ndarray) -> np.ndarray:
    """(n, width) for an input (a (n,) vector is accepted for width 1), (n,) for token ids."""
    if spec.kind == "embedding":
        if a.ndim == 1 or (a.ndim == 2 and a.shape[1] == 1):
            return a.reshape(-1)
        raise EvaluationError(f"{_what(spec)} must hold one id per position, shaped "
                              f"(n_positions,), got {a.shape}")
    if a.ndim == 1 and spec.width == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] != spec.width:
        raise EvaluationError(f"{_what(spec)} must be shaped (n_positions, {spec.width}), "
                              f"got {a.shape}")
    return a


def _token_ids(spec: InputSpec, a: np.ndarray, start: int) -> np.ndarray:
    bad = ~(np.isfinite(a) & (a == np.round(a)) & (a >= 0) & (a < spec.vocab))
    if bad.any():
        i = int(np.argmax(bad))
        raise EvaluationError(f"{_what(spec)} position {start + i} holds {_num(a[i])}, not a "
                              f"token id (an integer in [0, {spec.vocab}))")
    return a.astype(np.int64)


def _promised_values(spec: InputSpec, a: np.ndarray, start: int, mode: str) -> np.ndarray:
    """Finite, integer where declared, inside the declared range (or clamped into it)."""
    if mode == "unchecked":
        return a.copy()
    if (bad := _first_bad(~np.isfinite(a), start)) is not None:
        i, c, more = bad
        raise EvaluationError(f"{_what(spec)} position {i} component {c} holds "
                              f"{_num(a[i - start, c])}, not a finite number{more}")
    if spec.integer and (bad := _first_bad(a != np.round(a), start)) is not None:
        i, c, more = bad
        raise EvaluationError(f"{_what(spec)} is declared integer but position {i} component "
                              f"{c} holds {_num(a[i - start, c])}{more} (inputs are never "
                              "rounded)")
    if mode == "clamp":
        lo, hi = (np.ceil(spec.lo), np.floor(spec.hi)) if spec.integer else (spec.lo, spec.hi)
        return np.clip(a, lo, hi)
    if (bad := _first_bad((a < spec.lo) | (a > spec.hi), start)) is not None:
        i, c, more = bad
        raise EvaluationError(f"{_what(spec)} position {i} component {c} holds "
                              f"{_num(a[i - start, c])}, outside its declared range "
                              f"[{_num(spec.lo)}, {_num(spec.hi)}]{more}; pass "
                              "on_out_of_range=\"clamp\" to clamp inputs into their ranges")
    return a.copy()


def _first_bad(bad: np.ndarray, start: int) -> tuple[int, int, str] | None:
    """(absolute position, component, note on how many others) of the first True in `bad`."""
    if not bad.any():
        return None
    i, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
    more = int(bad.sum()) - 1
    note = f" ({more} other value{'s' if more > 1 else ''} too)" if more else ""
    return start + int(i), int(c), note


# -- generate's feedback -------------------------------------------------------------------


def _one_position(contract: InputContract, name, value) -> np.ndarray:
    """A fed-back value for one position, as a one-position input (shape checked here, the
    rest by check_inputs)."""
    spec = next((s for s in contract.specs if s.name == name), None)
    if spec is None:
        return value  # check_inputs names it as unknown
    a = _real_array(spec, value)
    if spec.kind == "embedding":
        if a.size == 1 and a.ndim <= 2:
            return a.reshape(1)
        raise EvaluationError(f"{_what(spec)} is shaped {a.shape}; expected one token id")
    if a.ndim == 0 and spec.width == 1:
        return a.reshape(1, 1)
    if (a.ndim == 1 and a.shape[0] == spec.width) or a.shape == (1, spec.width):
        return a.reshape(1, spec.width)
    raise EvaluationError(f"{_what(spec)} is shaped {a.shape}; expected one position, shaped "
                          f"({spec.width},)")


# -- message pieces ---------------------------------------------------------------------------


def _what(spec: InputSpec) -> str:
    return f"{'token input' if spec.kind == 'embedding' else 'input'} \"{spec.name}\""


def _quote(key) -> str:
    return f"\"{key}\"" if isinstance(key, str) else repr(key)


def _num(x) -> str:
    """A value as the user would write it (20.0, -8.0, nan, 1e+300)."""
    return repr(float(x))
