"""torchwright-style primitive helpers: graphs written node by node, the way users of the
torchwright-style compilers write them.

Every helper appends primitive ops only:

* nonlinear helpers emit one sandwich `tw.linear -> tw.relu -> tw.linear` (the first linear
  reads a concat of the operands, the second one combines the hidden lanes); no `tw.mlp`, no
  library op (`tw.compare`, `tw.select`, ...);
* affine helpers emit one `tw.linear` (sums and differences read a concat), or a `tw.add`;
* attention helpers emit one `tw.attn` each, reading a positional code that is a source of
  the graph (`tw.pos_encoding`, or a `tw.input` the host fills; see `Pos`).

Conventions (as in the torchwright ops library): booleans are +1 / -1 (true / false), a
boolean "01" is 0 / 1; `bound` arguments are bounds on |operand| that the caller promises.

Exactness contracts. The sandwiches are exact in real arithmetic on their contract, and the
contracts are stated on integers: a step at an integer threshold `relu(z + 1) - relu(z)` is
exactly [z >= 0] for every integer z, so integer-valued programs need no ramps. In float32
the results are exact while every intermediate is an integer below 2^24 (select/cond_gate add
and subtract `bound`, so values and bounds should be integers). The attention helpers are
hard reads up to a softmax leakage of about exp(-gain) per competing position (gain 20 by
default, ~2e-9), so an integer read comes back within ~1e-7 of that integer, well inside the
unit margins of the steps that consume it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from twdialect import ops as tw

Value = tw.Value

POSITION_GAIN = 20.0  # logit gap between the addressed position and its neighbours
FLAG_GAIN = 40.0  # logit gap per unit of a +/-1 condition in content heads
RECENCY = 20.0  # logit gap between two consecutive candidate positions (latest wins)


# --------------------------------------------------------------------------------------
# The sandwich: Linear -> ReLU -> Linear
# --------------------------------------------------------------------------------------


class Lanes:
    """Hidden lanes of one Linear -> ReLU -> Linear sandwich over the operands `inputs`.

    `lane(w, b, out)` adds a hidden unit relu(w . x + b) contributing `out` (a vector over
    the outputs) to the result; `emit(bias)` builds the three ops. Identical lanes are merged.
    `var(v, k)` is the coefficient vector selecting component k of operand v."""

    def __init__(self, inputs: Sequence[Value], n_out: int):
        self.inputs = list(inputs)
        self.offsets = []
        n = 0
        for v in self.inputs:
            self.offsets.append(n)
            n += tw.width(v)
        self.width = n
        self.n_out = n_out
        self._index: dict[bytes, int] = {}
        self._w: list[np.ndarray] = []
        self._b: list[float] = []
        self._out: list[np.ndarray] = []

    def var(self, value: Value, component: int = 0) -> np.ndarray:
        for v, off in zip(self.inputs, self.offsets):
            if v is value:
                w = np.zeros(self.width)
                w[off + component] = 1.0
                return w
        raise KeyError("value is not an operand of this sandwich")

    def zero(self) -> np.ndarray:
        return np.zeros(self.width)

    def lane(self, w: np.ndarray, b: float, out) -> None:
        out = np.asarray(out, dtype=np.float64).reshape(-1)
        if out.size == 1 and self.n_out > 1:
            raise ValueError("lane output must name every output component")
        key = np.append(w, b).tobytes()
        h = self._index.get(key)
        if h is None:
            h = self._index[key] = len(self._b)
            self._w.append(np.asarray(w, dtype=np.float64))
            self._b.append(float(b))
            self._out.append(np.zeros(self.n_out))
        self._out[h] = self._out[h] + out

    def emit(self, bias=None) -> Value:
        keep = [h for h in range(len(self._b)) if np.any(self._out[h] != 0.0)]
        if not keep:
            raise ValueError("a sandwich with no live lane")
        w1 = np.stack([self._w[h] for h in keep], axis=1)
        b1 = np.array([self._b[h] for h in keep])
        w2 = np.stack([self._out[h] for h in keep], axis=0)
        return sandwich(tw.concat(self.inputs), w1, b1, w2, bias)


def sandwich(x: Value, w1, b1, w2, b2=None) -> Value:
    """relu(x W1 + b1) W2 + b2 as three primitive ops (tw.linear, tw.relu, tw.linear)."""
    hidden = tw.relu(tw.linear(x, w1, b1))
    return tw.linear(hidden, w2, b2)


def _unit(n: int, k: int) -> np.ndarray:
    e = np.zeros(n)
    e[k] = 1.0
    return e


def _step_lanes(L: Lanes, w: np.ndarray, b: float, out: np.ndarray, ramp: float = 1.0) -> None:
    """out * [w.x + b >= 0], exact for w.x + b integer (ramp 1): relu(z/r + 1) - relu(z/r)."""
    out = np.asarray(out, dtype=np.float64)
    L.lane(w / ramp, b / ramp + 1.0, out)
    L.lane(w / ramp, b / ramp, -out)


# --------------------------------------------------------------------------------------
# Affine glue (one tw.linear each, or one tw.add)
# --------------------------------------------------------------------------------------


def linear(x: Value, matrix, bias=None) -> Value:
    return tw.linear(x, matrix, bias)


def add(a: Value, b: Value) -> Value:
    """a + b (a tw.add node)."""
    return tw.add(a, b)


def negate(x: Value) -> Value:
    """-x."""
    return tw.linear(x, -np.eye(tw.width(x)))


def add_const(x: Value, c) -> Value:
    """x + c."""
    n = tw.width(x)
    return tw.linear(x, np.eye(n), np.broadcast_to(np.asarray(c, dtype=np.float64), (n,)))


def multiply_const(x: Value, c: float) -> Value:
    """c * x."""
    return tw.linear(x, float(c) * np.eye(tw.width(x)))


def add_scaled(a: Value, b: Value, scale_a: float = 1.0, scale_b: float = 1.0,
               const: float = 0.0) -> Value:
    """scale_a * a + scale_b * b + const (one linear over concat(a, b))."""
    n = tw.width(a)
    m = np.vstack([scale_a * np.eye(n), scale_b * np.eye(n)])
    return tw.linear(tw.concat(a, b), m, np.full(n, float(const)) if const else None)


def subtract(a: Value, b: Value) -> Value:
    """a - b."""
    return add_scaled(a, b, 1.0, -1.0)


def sum_nodes(values: Sequence[Value], weights: Sequence[float] | None = None,
              const: float = 0.0) -> Value:
    """sum_k weights[k] * values[k] + const (equal widths; one linear over their concat)."""
    values = list(values)
    n = tw.width(values[0])
    weights = [1.0] * len(values) if weights is None else list(weights)
    m = np.vstack([float(w) * np.eye(n) for w in weights])
    return tw.linear(tw.concat(values), m, np.full(n, float(const)) if const else None)


def dot(values: Sequence[Value], weights: Sequence[float], const: float = 0.0) -> Value:
    """sum_k weights[k] * values[k] + const for 1-wide values."""
    return sum_nodes(values, weights, const)


def to01(b: Value) -> Value:
    """A +/-1 boolean as 0/1: (b + 1) / 2."""
    n = tw.width(b)
    return tw.linear(b, 0.5 * np.eye(n), np.full(n, 0.5))


def from01(b: Value) -> Value:
    """A 0/1 boolean as +/-1: 2 b - 1."""
    n = tw.width(b)
    return tw.linear(b, 2.0 * np.eye(n), np.full(n, -1.0))


def bool_not(b: Value) -> Value:
    """not b for a +/-1 boolean: -b."""
    return negate(b)


# --------------------------------------------------------------------------------------
# Nonlinear helpers: one Linear -> ReLU -> Linear sandwich each
# --------------------------------------------------------------------------------------


def compare(x: Value, threshold: float, true: float = 1.0, false: float = -1.0,
            ramp: float = 1.0) -> Value:
    """Elementwise `true` where x >= threshold else `false`.

    false + (true - false) * (relu((x - t)/ramp + 1) - relu((x - t)/ramp)): exact where
    x >= threshold or x <= threshold - ramp; with ramp 1 that is every integer x against an
    integer threshold. 2 lanes per component."""
    n = tw.width(x)
    L = Lanes([x], n)
    for k in range(n):
        _step_lanes(L, L.var(x, k), -float(threshold), (true - false) * _unit(n, k), ramp)
    return L.emit(np.full(n, float(false)))


def compare_sum(values: Sequence[Value], weights: Sequence[float], threshold: float,
                true: float = 1.0, false: float = -1.0) -> Value:
    """`true` where sum_k weights[k] * values[k] >= threshold else `false` (1-wide values;
    exact when the weighted sum is an integer and the threshold an integer)."""
    L = Lanes(values, 1)
    w = sum(float(c) * L.var(v) for v, c in zip(values, weights))
    _step_lanes(L, w, -float(threshold), [true - false])
    return L.emit([float(false)])


def equals(x: Value, value: float, true: float = 1.0, false: float = -1.0) -> Value:
    """Elementwise `true` where x == value else `false`, exact for integer x and value:
    [x == v] = relu(x - v + 1) - 2 relu(x - v) + relu(x - v - 1). 3 lanes per component."""
    n = tw.width(x)
    L = Lanes([x], n)
    for k in range(n):
        e = (true - false) * _unit(n, k)
        w = L.var(x, k)
        L.lane(w, 1.0 - value, e)
        L.lane(w, -value, -2.0 * e)
        L.lane(w, -value - 1.0, e)
    return L.emit(np.full(n, float(false)))


def in_range(x: Value, lo: float, hi: float, true: float = 1.0, false: float = -1.0) -> Value:
    """`true` where lo <= x <= hi else `false` (1-wide x; exact on integers, lo <= hi
    integers): [x >= lo] - [x >= hi + 1]. 4 lanes."""
    L = Lanes([x], 1)
    w = L.var(x)
    _step_lanes(L, w, -float(lo), [true - false])
    _step_lanes(L, w, -float(hi) - 1.0, [false - true])
    return L.emit([float(false)])


def _bool_fold(bools: Sequence[Value], need: int, true: float, false: float) -> Value:
    """`true` where at least `need` of the +/-1 booleans are true: sum b >= 2 need - n."""
    n = len(bools)
    return compare_sum(bools, [1.0] * n, 2 * need - n, true, false)


def bool_and(a: Value, b: Value) -> Value:
    """a and b for +/-1 booleans: [a + b >= 2] (one sandwich, exact)."""
    return _bool_fold([a, b], 2, 1.0, -1.0)


def bool_or(a: Value, b: Value) -> Value:
    """a or b for +/-1 booleans: [a + b >= 0] (one sandwich, exact)."""
    return _bool_fold([a, b], 1, 1.0, -1.0)


def bool_all_true(bools: Sequence[Value]) -> Value:
    """All of the +/-1 booleans true: one compare on their sum."""
    return _bool_fold(bools, len(bools), 1.0, -1.0)


def bool_any_true(bools: Sequence[Value]) -> Value:
    """Any of the +/-1 booleans true: one compare on their sum."""
    return _bool_fold(bools, 1, 1.0, -1.0)


def select(cond: Value, if_true: Value, if_false: Value, bound: float) -> Value:
    """if_true where cond = +1, if_false where cond = -1 (cond 1 wide, or one per component).

    relu(a + M c) + relu(b - M c) - M with M = bound >= |a|, |b|: for c = +1 the first lane is
    a + M and the second b - M <= 0; for c = -1 the reverse. Exact in real arithmetic for
    c = +/-1 exactly; in float32 exact for integer a, b, M below 2^24. 2 lanes per component."""
    n = tw.width(if_true)
    wc = tw.width(cond)
    L = Lanes([cond, if_true, if_false], n)
    M = float(bound)
    for k in range(n):
        c = L.var(cond, k if wc > 1 else 0)
        L.lane(L.var(if_true, k) + M * c, 0.0, _unit(n, k))
        L.lane(L.var(if_false, k) - M * c, 0.0, _unit(n, k))
    return L.emit(np.full(n, -M))


def cond_gate(cond: Value, x: Value, bound: float) -> Value:
    """x where cond = +1, 0 where cond = -1: relu(x + M c) - M relu((1 + c) / 2)
    (M = bound >= |x|; exact as `select`). 2 lanes per component."""
    n = tw.width(x)
    wc = tw.width(cond)
    L = Lanes([cond, x], n)
    M = float(bound)
    for k in range(n):
        c = L.var(cond, k if wc > 1 else 0)
        L.lane(L.var(x, k) + M * c, 0.0, _unit(n, k))
        L.lane(0.5 * c, 0.5, -M * _unit(n, k))
    return L.emit()


def cond_gate01(flag: Value, x: Value, bound: float) -> Value:
    """x * flag for a 0/1 flag and x in [-bound, bound]:
    relu(x + M (2 f - 1)) - M relu(f). 2 lanes per component."""
    n = tw.width(x)
    L = Lanes([flag, x], n)
    M = float(bound)
    for k in range(n):
        f = L.var(flag, k if tw.width(flag) > 1 else 0)
        L.lane(L.var(x, k) + 2.0 * M * f, -M, _unit(n, k))
        L.lane(f, 0.0, -M * _unit(n, k))
    return L.emit()


def piecewise_linear(x: Value, breakpoints: Sequence[float],
                     fn: Callable[[float], float] | Sequence[float]) -> Value:
    """The linear interpolant of (breakpoints[k], fn(breakpoints[k])), constant outside
    [breakpoints[0], breakpoints[-1]] (1-wide x): f(b_0) + sum_k (s_k - s_{k-1}) relu(x - b_k)
    with s_{-1} = s_last = 0. One lane per breakpoint whose slope changes. Exact at and
    between breakpoints (so on integers when the breakpoints are the integers)."""
    bp = np.asarray(breakpoints, dtype=np.float64)
    ys = np.array([fn(float(b)) for b in bp] if callable(fn) else fn, dtype=np.float64)
    slopes = np.concatenate([[0.0], np.diff(ys) / np.diff(bp), [0.0]])
    L = Lanes([x], 1)
    w = L.var(x)
    for k, b in enumerate(bp):
        ds = slopes[k + 1] - slopes[k]
        if ds != 0.0:
            L.lane(w, -b, [ds])
    if not L._b:  # a constant function: one silent lane keeps the sandwich well-formed
        return sandwich(x, [[0.0]], [0.0], [[0.0]], [ys[0]])
    return L.emit([ys[0]])


def integer_table(x: Value, lo: int, hi: int, fn: Callable[[int], float]) -> Value:
    """fn on the integers lo..hi (x integer-valued; constant fn(lo) / fn(hi) outside):
    a piecewise_linear with breakpoints at the integers (one lane per slope change)."""
    return piecewise_linear(x, np.arange(lo, hi + 1), lambda b: fn(int(b)))


def clamp(x: Value, lo: float, hi: float) -> Value:
    """min(max(x, lo), hi) elementwise: lo + relu(x - lo) - relu(x - hi). Exact."""
    n = tw.width(x)
    L = Lanes([x], n)
    for k in range(n):
        L.lane(L.var(x, k), -lo, _unit(n, k))
        L.lane(L.var(x, k), -hi, -_unit(n, k))
    return L.emit(np.full(n, float(lo)))


def abs_(x: Value) -> Value:
    """|x| elementwise: relu(x) + relu(-x). Exact."""
    n = tw.width(x)
    L = Lanes([x], n)
    for k in range(n):
        L.lane(L.var(x, k), 0.0, _unit(n, k))
        L.lane(-L.var(x, k), 0.0, _unit(n, k))
    return L.emit()


def minimum(a: Value, b: Value) -> Value:
    """min(a, b) elementwise: a - relu(a - b), a passed through as relu(a) - relu(-a). Exact."""
    n = tw.width(a)
    L = Lanes([a, b], n)
    for k in range(n):
        e = _unit(n, k)
        L.lane(L.var(a, k), 0.0, e)
        L.lane(-L.var(a, k), 0.0, -e)
        L.lane(L.var(a, k) - L.var(b, k), 0.0, -e)
    return L.emit()


def maximum(a: Value, b: Value) -> Value:
    """max(a, b) elementwise: b + relu(a - b). Exact."""
    n = tw.width(a)
    L = Lanes([a, b], n)
    for k in range(n):
        e = _unit(n, k)
        L.lane(L.var(b, k), 0.0, e)
        L.lane(-L.var(b, k), 0.0, -e)
        L.lane(L.var(a, k) - L.var(b, k), 0.0, e)
    return L.emit()


def floor_div_const(x: Value, k: int, lo: int, hi: int) -> Value:
    """floor(x / k) for integer x in [lo, hi] and a positive integer k: a staircase
    floor(lo / k) + sum_q [x >= q k] over the multiples q k in (lo, hi]. 2 lanes per step."""
    L = Lanes([x], 1)
    q0 = lo // k
    for q in range(q0 + 1, hi // k + 1):
        _step_lanes(L, L.var(x), -float(q * k), [1.0])
    if not L._b:
        return tw.linear(x, [[0.0]], [float(q0)])
    return L.emit([float(q0)])


def divmod_const(x: Value, k: int, lo: int, hi: int) -> Value:
    """[floor(x / k), x mod k] for integer x in [lo, hi] (one sandwich: the quotient's
    staircase, and x - k * quotient with x passed through as relu(x - lo) + lo)."""
    L = Lanes([x], 2)
    q0 = lo // k
    for q in range(q0 + 1, hi // k + 1):
        _step_lanes(L, L.var(x), -float(q * k), [1.0, -float(k)])
    L.lane(L.var(x), -float(lo), [0.0, 1.0])
    return L.emit([float(q0), float(lo - k * q0)])


def mod_const(x: Value, k: int, lo: int, hi: int) -> Value:
    """x mod k for integer x in [lo, hi] (see divmod_const)."""
    L = Lanes([x], 1)
    q0 = lo // k
    for q in range(q0 + 1, hi // k + 1):
        _step_lanes(L, L.var(x), -float(q * k), [-float(k)])
    L.lane(L.var(x), -float(lo), [1.0])
    return L.emit([float(lo - k * q0)])


def multiply_int(a: Value, b: Value, a_range: tuple[int, int], b_range: tuple[int, int]) -> Value:
    """a * b for integers a in a_range and b in b_range, by quarter squares:
    ab = ((a + b)^2 - (a - b)^2) / 4, each square a piecewise-linear table on the integers
    (one lane per integer of a + b and of a - b). Exact on integers ((a+b)^2 - (a-b)^2 is a
    multiple of 4)."""
    (alo, ahi), (blo, bhi) = a_range, b_range
    L = Lanes([a, b], 1)
    wa, wb = L.var(a), L.var(b)
    for w, lo, hi, sign in ((wa + wb, alo + blo, ahi + bhi, 1.0),
                            (wa - wb, alo - bhi, ahi - blo, -1.0)):
        # s^2/4 on [lo, hi]: start value, slope (2 lo + 1)/4 from lo, +1/2 at every integer after
        L.lane(w, -float(lo), [sign * (2 * lo + 1) / 4.0])
        for z in range(lo + 1, hi):
            L.lane(w, -float(z), [sign * 0.5])
    const = (alo + blo) ** 2 / 4.0 - (alo - bhi) ** 2 / 4.0
    return L.emit([const])


def multiply_int_real(n: Value, x: Value, n_max: int, x_lo: float, x_hi: float) -> Value:
    """n * x for an integer n in [0, n_max] and a real x in [x_lo, x_hi]:
    sum_{r=1..n_max} [n >= r] (x - x_lo) + n x_lo, each term relu((x - x_lo) + W (n - r))
    - relu(W (n - r)) with W = x_hi - x_lo (a gated lane pair). Exact in real arithmetic."""
    L = Lanes([n, x], 1)
    W = float(x_hi - x_lo)
    wn, wx = L.var(n), L.var(x)
    for r in range(1, n_max + 1):
        L.lane(wx + W * wn, -float(x_lo) - W * r, [1.0])
        L.lane(W * wn, -W * r, [-1.0])
    L.lane(wn, 0.0, [float(x_lo)])  # n >= 0: relu(n) = n
    return L.emit()


# --------------------------------------------------------------------------------------
# Positions and attention helpers (one tw.attn each)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pos:
    """A positional code that is a source of the graph.

    kind "quadratic": components (j, j^2) (`tw.pos_encoding(2, max_len)`, or a 2-wide input the
    host fills with the same table); kind "onehot": a `max_len`-wide one-hot of j (an input).
    The helpers read it as keys; a query needs j only (component 0 of the quadratic code)."""

    value: Value
    kind: str
    max_len: int

    @property
    def index(self) -> Value:
        """j itself, 1 wide (quadratic code only: a free slice)."""
        if self.kind != "quadratic":
            raise ValueError("the position index is a component of the quadratic code only")
        return tw.slice(self.value, 0, 1)


def pos_encoding(max_len: int) -> Pos:
    """The machine's position features (j, j^2) as a quadratic code."""
    return Pos(tw.pos_encoding(2, max_len), "quadratic", max_len)


def pos_input(name: str, max_len: int, kind: str = "quadratic") -> Pos:
    """A positional table fed by the host (see `pos_table`)."""
    if kind == "quadratic":
        v = tw.input(name, 2, value_range=(0.0, float((max_len - 1) ** 2)), integer=True)
    elif kind == "onehot":
        v = tw.input(name, max_len, value_range=(0.0, 1.0), integer=True)
    else:
        raise ValueError(f"unknown position code {kind!r}")
    return Pos(v, kind, max_len)


def pos_table(n: int, kind: str, max_len: int) -> np.ndarray:
    """The host-side table for `pos_input`: n positions of the code."""
    j = np.arange(n, dtype=np.float64)
    if kind == "quadratic":
        return np.stack([j, j * j], axis=1)
    return np.eye(max_len)[:n]


def _value_map(value: Value, wv) -> np.ndarray:
    if wv is None:
        return np.eye(tw.width(value))
    return np.asarray(wv, dtype=np.float64).reshape(tw.width(value), -1)


def attend_to_offset(pos: Pos, value: Value, delta: int, wv=None,
                     gain: float = POSITION_GAIN) -> Value:
    """value (times wv) at position i + delta (delta <= 0), at every position i.

    Quadratic code: logits G (2 (i + delta) j - j^2) peak at j = i + delta and beat each
    neighbour by G; where i + delta < 0 it reads position 0. One-hot code: logit G where
    j = i + delta (j = 0 where i + delta < 0), 0 elsewhere."""
    wv = _value_map(value, wv)
    if pos.kind == "quadratic":
        query = tw.concat(tw.literal([1.0]), pos.value)
        wq = np.array([[2.0 * gain * delta, -gain], [2.0 * gain, 0.0], [0.0, 0.0]])
        wk = np.eye(2)
        return tw.attn(query, pos.value, value, wq, wk, wv, np.eye(wv.shape[1]))
    n = pos.max_len
    shift = np.zeros((n, n))
    for i in range(n):
        shift[i, min(max(i + delta, 0), n - 1)] = gain
    return tw.attn(pos.value, pos.value, value, shift, np.eye(n), wv, np.eye(wv.shape[1]))


def get_prev_value(pos: Pos, value: Value, cond: Value, wv=None, gain: float = FLAG_GAIN,
                   recency: float = RECENCY) -> Value:
    """value at the most recent position j <= i where the +/-1 condition is true (the position
    i itself included); where no position is true, value at i itself (quadratic code).

    Logits gain * cond_j + recency * j: a true key beats every false one when
    2 gain > recency * max_len (asserted) and the latest true key beats the one before by
    `recency`."""
    if pos.kind != "quadratic":
        raise ValueError("get_prev_value needs the quadratic code (the recency tilt reads j)")
    if 2.0 * gain <= recency * (pos.max_len + 1):
        gain = recency * (pos.max_len + 1)  # a true key must outweigh any recency
    wv = _value_map(value, wv)
    keys = tw.concat(cond, pos.value)
    wk = np.array([[gain], [recency], [0.0]])
    return tw.attn(tw.literal([1.0]), keys, value, np.ones((1, 1)), wk, wv, np.eye(wv.shape[1]))


def attend_to_position(pos: Pos, value: Value, target: Value | None, offset: float = 0.0,
                       wv=None, gain: float = POSITION_GAIN) -> Value:
    """value at position j = target_i + offset (target 1 wide, integer-valued, or None for the
    absolute position `offset`; clamped to [0, i]): logits G (2 T j - j^2) with
    T = target + offset, one head."""
    if pos.kind != "quadratic":
        raise ValueError("attend_to_position needs the quadratic code")
    wv = _value_map(value, wv)
    if target is None:
        query = tw.literal([1.0])
        wq = np.array([[2.0 * gain * offset, -gain]])
    else:
        query = tw.concat(tw.literal([1.0]), target)
        wq = np.array([[2.0 * gain * offset, -gain], [2.0 * gain, 0.0]])
    return tw.attn(query, pos.value, value, wq, np.eye(2), wv, np.eye(wv.shape[1]))


def attend_mean_where(value: Value, cond: Value, wv=None, gain: float = FLAG_GAIN) -> Value:
    """The mean of value over the positions j <= i where the +/-1 condition is true (the
    plain prefix mean where none is): logits gain * cond_j."""
    wv = _value_map(value, wv)
    return tw.attn(tw.literal([1.0]), cond, value, np.ones((1, 1)), np.array([[gain]]), wv,
                   np.eye(wv.shape[1]))


def attend_mean(value: Value, wv=None) -> Value:
    """The prefix mean of value over j <= i (constant logits)."""
    wv = _value_map(value, wv)
    one = tw.literal([1.0])
    return tw.attn(one, one, value, np.zeros((1, 1)), np.zeros((1, 1)), wv, np.eye(wv.shape[1]))


def attend_argmin(score: Value, value: Value, wv=None, gain: float = POSITION_GAIN) -> Value:
    """value at the position j <= i with the smallest score (integer scores, unique minimum:
    logits -gain * score_j; ties average)."""
    wv = _value_map(value, wv)
    return tw.attn(tw.literal([1.0]), score, value, np.ones((1, 1)), np.array([[-gain]]), wv,
                   np.eye(wv.shape[1]))


def attend_argmax(score: Value, value: Value, wv=None, gain: float = POSITION_GAIN) -> Value:
    """value at the position j <= i with the largest score (integer scores, unique maximum)."""
    wv = _value_map(value, wv)
    return tw.attn(tw.literal([1.0]), score, value, np.ones((1, 1)), np.array([[gain]]), wv,
                   np.eye(wv.shape[1]))


def attend_argmin_where(score: Value, cond: Value, value: Value, score_span: float, wv=None,
                        gain: float = POSITION_GAIN) -> Value:
    """value at the position j <= i with the smallest integer score among those where the
    +/-1 condition is true: logits -gain * score_j + V * cond_j with V > gain * score_span
    (score_span bounds max - min of the scores), so validity dominates."""
    wv = _value_map(value, wv)
    validity = gain * (float(score_span) + 2.0)
    keys = tw.concat(score, cond)
    return tw.attn(tw.literal([1.0]), keys, value, np.ones((1, 1)),
                   np.array([[-gain], [validity]]), wv, np.eye(wv.shape[1]))
