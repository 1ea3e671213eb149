"""Shared machinery of the ops library: errors that name the op, an MLP-chain builder, the
registry of exported ops (the docs generator and the tests walk it)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from xdsl.ir import SSAValue

from twdialect import ops as tw
from twdialect.dialect import PosEncodingOp, width_of


class LibraryError(tw.BuilderError):
    """A library op was called with arguments outside its contract (the message names the op)."""


def fail(op: str, message: str):
    raise LibraryError(f"tw.{op}: {message}")


# name -> (category, function), in definition order: the public surface of the library.
REGISTRY: dict[str, tuple[str, Callable]] = {}


def library_op(category: str):
    """Register a builder function as an exported library op of `category`."""

    def register(fn: Callable) -> Callable:
        REGISTRY[fn.__name__] = (category, fn)
        return fn

    return register


def _as_library_error(check: Callable) -> Callable:
    """The builder's argument check `check`, raising LibraryError (what library callers catch)."""

    @functools.wraps(check)
    def checked(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except LibraryError:
            raise
        except tw.BuilderError as e:
            raise LibraryError(str(e)) from None

    return checked


# The builder's checks (twdialect/ops.py): a tw value of the open graph, a list of them, a
# finite float32 number, a whole number, a (lo, hi) pair, an array of finite numbers.
check_value = _as_library_error(tw.check_value)
check_values = _as_library_error(tw.check_values)
check_int = _as_library_error(tw.check_int)
check_pair = _as_library_error(tw.check_pair)
check_array = _as_library_error(tw.check_array)
check_choice = _as_library_error(tw.check_choice)


def check_bound(op: str, value, name: str, positive: bool = True) -> float:
    return _as_library_error(tw.check_number)(op, value, name, positive)


def check_range(op: str, lo, hi) -> tuple[float, float]:
    """The arguments `lo` < `hi`, both finite numbers."""
    lo = check_bound(op, lo, "lo", positive=False)
    hi = check_bound(op, hi, "hi", positive=False)
    if not lo < hi:
        fail(op, f"lo must be below hi, got lo={lo}, hi={hi}")
    return lo, hi


class MlpChain:
    """Collects the neurons of one `tw.mlp` (one MLP sublayer) reading a fixed input vector.

    Each neuron is relu(w_in . x + b) with output weights w_out; `out_bias` is b2. Building
    custom one-layer functions this way keeps every library op a single chain where the
    math allows (a linear pre-map of the input folds into W1 for free)."""

    def __init__(self, n_in: int, n_out: int):
        self.n_in, self.n_out = n_in, n_out
        self.w1: list[np.ndarray] = []
        self.b1: list[float] = []
        self.w2: list[np.ndarray] = []
        self.out_bias = np.zeros(n_out)

    def neuron(self, w_in, bias: float, w_out) -> None:
        self.w1.append(np.asarray(w_in, dtype=np.float64).reshape(self.n_in))
        self.b1.append(float(bias))
        self.w2.append(np.asarray(w_out, dtype=np.float64).reshape(self.n_out))

    def unit_in(self, i: int) -> np.ndarray:
        e = np.zeros(self.n_in)
        e[i] = 1.0
        return e

    def unit_out(self, j: int, scale: float = 1.0) -> np.ndarray:
        e = np.zeros(self.n_out)
        e[j] = scale
        return e

    def passthrough(self, w_in, w_out, nonnegative: bool = False) -> None:
        """Add (w_in . x) * w_out exactly: one neuron if the form is never negative, else a
        +/- pair (relu(f) - relu(-f) = f)."""
        w_in = np.asarray(w_in, dtype=np.float64)
        w_out = np.asarray(w_out, dtype=np.float64)
        self.neuron(w_in, 0.0, w_out)
        if not nonnegative:
            self.neuron(-w_in, 0.0, -w_out)

    def gate(self, w_val, val_bias: float, w_cond, cond_bias: float, bound: float,
             w_out, shared: dict | None = None) -> None:
        """Add [c > 0] * v * w_out with v = w_val.x + val_bias (|v| <= bound) and
        c = w_cond.x + cond_bias, exactly whenever |c| >= bound / gain.

        relu(v + K c) - K relu(c) with K = 2 * bound: c >= 1/2 gives v, c <= -1/2 gives 0. The
        K relu(c) neuron depends only on the condition, so callers gating many components on
        one condition pass `shared` (a dict) to emit it once per distinct condition."""
        gain = 2.0 * bound
        w_out = np.asarray(w_out, dtype=np.float64)
        self.neuron(np.asarray(w_val) + gain * np.asarray(w_cond), val_bias + gain * cond_bias, w_out)
        key = (tuple(np.asarray(w_cond, dtype=np.float64).tolist()), float(cond_bias))
        if shared is None:
            self.neuron(w_cond, cond_bias, -gain * w_out)
        else:
            acc = shared.get(key)
            if acc is None:
                shared[key] = acc = [len(self.w1), np.zeros(self.n_out)]
                self.neuron(w_cond, cond_bias, np.zeros(self.n_out))
            # Accumulate the shared neuron's output weights (gain may differ per caller).
            self.w2[acc[0]] = self.w2[acc[0]] - gain * w_out

    @property
    def hidden(self) -> int:
        return len(self.w1)

    def emit(self, x: SSAValue) -> SSAValue:
        if not self.w1:
            # Nothing input-dependent: the output is the constant bias.
            return tw.literal(self.out_bias)
        w1 = np.stack(self.w1, axis=1)
        w2 = np.stack(self.w2, axis=0)
        b2 = self.out_bias if np.any(self.out_bias) else None
        return tw.mlp(x, w1, np.asarray(self.b1), w2, b2)


def pos_max_len(op: str, pos: SSAValue) -> int:
    """The max_len of a `tw.pos_encoding` value (attention ops size their gains from it)."""
    check_value(op, pos, "pos")
    owner = pos.owner
    if not isinstance(owner, PosEncodingOp):
        fail(op, "pos must be the value of tw.pos_encoding (columns [i, i*i, ...])")
    if width_of(pos) < 2:
        fail(op, f"pos must be at least 2 wide ([i, i*i]), got {width_of(pos)}")
    return owner.max_len.value.data


def ones_literal() -> SSAValue:
    return tw.literal([1.0])


def value_box(op: str, v: SSAValue) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of `v` from the value-range analysis (`twdialect.ranges.box_of`) of the graph
    being built, cached on the open graph (`Graph.value_boxes`): repeated calls cost O(new ops)."""
    from twdialect.ranges import RangeError, box_of

    try:
        return box_of(v, tw._current(op).value_boxes)
    except RangeError as e:
        fail(op, f"cannot bound an operand ({e}); pass max_abs")


def inferred_max_abs(op: str, values) -> float:
    """max |component| over `values`, from the value-range analysis (`value_box`): what
    gating ops use when the caller passes no bound."""
    bound = 0.0
    for v in values:
        lo, hi = value_box(op, v)
        bound = max(bound, float(np.max(np.abs(lo))), float(np.max(np.abs(hi))))
    if not np.isfinite(bound) or bound > 1e7:
        fail(op, f"the value-range analysis bounds the gated values by {bound:g}, too loose "
             "for exact gating in fp32; pass a tighter max_abs")
    return bound if bound > 0 else 1.0


def check_float32(op: str, chain: MlpChain, boxes_first: list, boxes_rest: list,
                  scale: float, operand: str, tolerance: float = 1e-4,
                  integer_first: bool = False, nominal_first: list | None = None) -> None:
    """Refuse (at the call) a chain whose float32 rounding over its operands' value ranges
    (`twdialect.f32_error.mlp_error_bound`) can exceed `tolerance * max(1, scale)`: the
    first boxes belong to `operand`, the one whose declared range is to blame (integers
    when `integer_first`). With `nominal_first` (the range the op's documented contract
    assumes for it), only a range that at least doubles the nominal bound is refused."""
    if not chain.w1:
        return
    err = _chain_error(op, chain, boxes_first + boxes_rest, boxes_first, integer_first, operand)
    allowed = tolerance * max(1.0, scale)
    if nominal_first is not None:
        allowed = max(allowed, 2.0 * _chain_error(op, chain, nominal_first + boxes_rest,
                                                  nominal_first, integer_first, operand))
    if not err <= allowed:
        first = boxes_first[0]
        fail(op, f"float32 rounding can reach {err:.3g} (allowed {allowed:.3g}) with {operand} "
             f"in [{float(np.min(first[0])):.6g}, {float(np.max(first[1])):.6g}]: declare a "
             f"narrower range for {operand} (or bound it with tw.clamp)")


def _chain_error(op, chain, boxes, boxes_first, integer_first, operand) -> float:
    from twdialect.f32_error import mlp_error_bound

    lo = np.concatenate([np.asarray(b[0], np.float64).reshape(-1) for b in boxes])
    hi = np.concatenate([np.asarray(b[1], np.float64).reshape(-1) for b in boxes])
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        fail(op, f"{operand} has an unbounded value range; bound it with tw.clamp")
    f32 = (lambda a: np.asarray(a, np.float32).astype(np.float64))
    w1, w2 = f32(np.stack(chain.w1, axis=1)), f32(np.stack(chain.w2, axis=0))
    with np.errstate(all="ignore"):
        n_first = sum(np.asarray(b[0]).size for b in boxes_first)
        ints = np.arange(lo.size) < n_first if integer_first else None
        return float(np.max(mlp_error_bound(w1, f32(chain.b1), w2, f32(chain.out_bias), lo, hi,
                                            ints)))
