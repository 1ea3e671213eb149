"""Tables through points: the MLPs of a table of steps (`step_mlps`, `emit_steps`, exact on
plateaus around each point) or one line through them (`interpolation_mlp`), each measured in
float32 before it is used (`_measured`); a function of two numbers read as a table of one sum
(`_sum_weights`, `_Sums`, `_affine_fit`); and the small matrices the stages share (a neuron per
value tuple, one-hot rows, a line or parabola through a column)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Callable

import numpy as np

from twdialect import ops as tw

from tw_frontends.rasp.limits import CLEAN, LINE_MARGIN, MAX_PAIRS, MAX_SUM_PAIRS, PERTURB
from tw_frontends.rasp.numbers import _NONE, _call, _is_number
from tw_frontends.rasp.nodes import Value


def steps(x: Value, points: np.ndarray, rows: np.ndarray, tolerance=None) -> Value:
    """The table of steps `step_mlps` plans, applied to x."""
    return emit_steps(x, rows, step_mlps(points, rows, tolerance))


def emit_steps(x: Value, rows: np.ndarray, plan: list[tuple]) -> Value:
    """x through the MLPs of `plan` (`step_mlps`); a literal of the rows where there are none
    (the rows never change)."""
    if not plan:
        return tw.literal(rows[0])
    for w1, b1, w2, b2 in plan:
        x = tw.mlp(x, w1, b1, w2, b2)
    return x


def step_mlps(points: np.ndarray, rows: np.ndarray, tolerance=None) -> Plan:
    """The MLPs (w1, b1, w2, b2) of a table of steps (none where the rows never change):
    rows[k] wherever x is within a quarter gap of points[k] (sorted), ramps between
    neighbours whose rows differ: an input a little off its value (float32 rounding of a
    softmax share or of an earlier table) still reads the exact row, so a one-hot stays 0/1
    and a later head's logits keep their full gap; a threshold over a million values is one
    step.

    One MLP (two neurons a step, each pair opening towards the nearer end of the input's
    range, so few hinges fire far from their ramp) where its float32 rounding at the points
    (and near them) stays below CLEAN of the rows (or `tolerance`, per column, where the
    reader says what it tolerates); else two MLPs that saturate exactly on
    every plateau: h = relu(s (x - b1)), then 1 - relu(1 - h)."""
    change = np.flatnonzero(np.any(rows[1:] != rows[:-1], axis=1))
    if change.size == 0:
        return Plan()
    lo_x, hi_x = float(points[0]), float(points[-1])
    b1 = points[change] + (points[change + 1] - points[change]) / 4
    b2 = points[change + 1] - (points[change + 1] - points[change]) / 4
    slope = 1.0 / (b2 - b1)
    delta = rows[change + 1] - rows[change]
    left = (b1 - lo_x) < (hi_x - b2)  # the ramp sits nearer the low end: hinges open left
    # a step's pair: relu(sign s (x - opens)) - relu(sign s (x - closes)), times sign delta
    sign = np.where(left, -1.0, 1.0)
    opens, closes = np.where(left, b2, b1), np.where(left, b1, b2)
    # a step's two neurons side by side: a sum in neuron order (as a runtime may take it for
    # one row) cancels each pair's two large terms before the next, not after all of them
    w1 = np.repeat(sign * slope, 2)[None, :]
    bias1 = np.stack([-sign * slope * opens, -sign * slope * closes], axis=1).reshape(-1)
    w2 = np.stack([sign[:, None] * delta, -sign[:, None] * delta], axis=1).reshape(
        -1, delta.shape[1])
    bias2 = rows[0] + delta[left].sum(axis=0)
    if tolerance is None:
        tolerance = CLEAN * max(1.0, float(np.abs(rows).max()))
    # a line through the points: fewer neurons, but no plateau snaps an input's error back,
    # so only where it stays within tolerance for inputs LINE_MARGIN times further off
    line = interpolation_mlp(points, rows)
    if line[0].shape[1] < w1.shape[1]:
        error = _measured(points, rows, line, tolerance, LINE_MARGIN * PERTURB)
        if error is not None:
            return Plan([line], error)
    error = _measured(points, rows, (w1, bias1, w2, bias2), tolerance)
    if error is not None:
        return Plan([(w1, bias1, w2, bias2)], error)
    two = [(slope[None, :], -slope * b1, np.eye(len(change)), None),
           (-np.eye(len(change)), np.ones(len(change)), -delta, rows[0] + delta.sum(axis=0))]
    return Plan(two, float(_plateau_error(points, rows, two, in_order=True).max(initial=0.0)))


class Plan(list):
    """`step_mlps`'s MLPs, and the table's float32 error at its points (measured for one
    MLP: `_measured`)."""

    def __init__(self, mlps=(), error: float = 0.0):
        super().__init__(mlps)
        self.error = error


def interpolation_mlp(points: np.ndarray, rows: np.ndarray) -> tuple:
    """One MLP (w1, b1, w2, b2) through every (points[k], rows[k]), linear between and
    beyond: a neuron where the slope changes, half a table of steps' two a step, but an
    input off its point moves the output by the slope (for readers that tolerate it)."""
    order = np.argsort(points, kind="stable")
    points, rows = points[order], rows[order]
    slopes = np.diff(rows, axis=0) / np.diff(points)[:, None]
    change = np.diff(slopes, axis=0, prepend=np.zeros((1, rows.shape[1])))
    hinge = np.flatnonzero(np.any(change != 0, axis=1))
    if hinge.size == 0:  # one point, or the rows never change
        hinge = np.array([0])
    return np.ones((1, hinge.size)), -points[hinge], change[hinge], rows[0]


def _within(points: np.ndarray, rows: np.ndarray, mlp: tuple, tolerance,
            perturb: float = PERTURB) -> bool:
    """Whether a one-MLP table's float32 error stays within `tolerance` (`_measured`)."""
    return _measured(points, rows, mlp, tolerance, perturb) is not None


def _measured(points: np.ndarray, rows: np.ndarray, mlp: tuple, tolerance,
              perturb: float = PERTURB) -> float | None:
    """A one-MLP table's largest float32 error (`_plateau_error`) where it stays within
    `tolerance` (per column), its neurons summed as a blocked matrix product does and, where
    that comes within a quarter of the tolerance, one neuron after another too
    (`_summed_in_order`); None where it does not."""
    error = _plateau_error(points, rows, [mlp], perturb)
    if np.any(error > tolerance):
        return None
    if not np.all(error <= np.asarray(tolerance) / 4):
        error = np.maximum(error, _plateau_error(points, rows, [mlp], perturb, in_order=True))
        if np.any(error > tolerance):
            return None
    return float(error.max(initial=0.0))


def _plateau_error(points: np.ndarray, rows: np.ndarray, mlps: list[tuple],
                   perturb: float = PERTURB, in_order: bool = False) -> np.ndarray:
    """The largest float32 error of a table (its MLPs one after another), per column, at its
    points and at the points moved by `perturb` (relative): what its plateaus give the ops
    that read them; `in_order`: neurons summed one after another (`_summed_in_order`)."""
    worst = np.zeros(rows.shape[1])
    for moved in (points, points * (1 + perturb), points * (1 - perturb)):
        x = np.asarray(moved, np.float32)[:, None]
        for w1, b1, w2, b2 in mlps:
            w2 = np.asarray(w2, np.float32)
            hidden = np.maximum(x @ np.asarray(w1, np.float32) + np.asarray(b1, np.float32),
                                np.float32(0))
            x = _summed_in_order(hidden, w2) if in_order else hidden @ w2
            if b2 is not None:
                x = x + np.asarray(b2, np.float32)
        worst = np.maximum(worst, np.abs(x.astype(np.float64) - rows).max(axis=0))
    return worst


# Largest hidden x output entries a table's check sums one neuron at a time (above: only as a
# blocked product)
SEQUENTIAL_CHECK = 1 << 24


def _summed_in_order(hidden: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """hidden @ w2 in float32, each product rounded and summed one neuron after another: the
    order a runtime may use for one row (a blocked matrix product sums in a friendlier
    order, so its error alone can be many times smaller); the blocked product itself above
    SEQUENTIAL_CHECK entries."""
    if hidden.size * w2.shape[1] > SEQUENTIAL_CHECK:
        return hidden @ w2
    total = np.zeros((hidden.shape[0], w2.shape[1]), np.float32)
    for i in range(w2.shape[0]):
        total += hidden[:, i: i + 1] * w2[i]
    return total


# Integer weights (a, b) tried for a SequenceMap's sum s = a x + b y (x - y, x + y, ...).
SUM_WEIGHTS = ((1, -1), (1, 1), (1, -2), (2, -1), (1, 2), (2, 1), (1, 0), (0, 1))


def _sum_weights(pairs: list[tuple], outs: list) -> list[tuple[float, float]]:
    """The weights to try: SUM_WEIGHTS, and f's own where f is affine in (x, y) with numbers
    out (checked on every pair), so that s is f itself."""
    found = [(float(a), float(b)) for a, b in SUM_WEIGHTS]
    if not all(_is_number(o) for o in outs):
        return found
    coef = _plane([float(x) for x, _ in pairs], [float(y) for _, y in pairs],
                  [float(o) for o in outs])
    if coef is not None and (coef[0], coef[1]) not in found:
        found.append((coef[0], coef[1]))
    return found


def _plane(xs: list, ys: list, outs: list) -> tuple[float, float, float] | None:
    """(a, b, c) where outs = a x + b y + c at every (x, y) (to float64 round-off; whole
    coefficients where least squares gives 0.9999999999999998 for 1), else None."""
    xy1 = np.column_stack([xs, ys, np.ones(len(xs))])
    f = np.asarray(outs, np.float64)
    coef = np.linalg.lstsq(xy1, f, rcond=None)[0]
    whole = np.round(coef)
    coef = np.where(np.abs(coef - whole) < 1e-9, whole, coef)
    if not np.allclose(xy1 @ coef, f, rtol=0, atol=1e-12 * max(1.0, float(np.abs(f).max()))):
        return None
    return float(coef[0]), float(coef[1]), float(coef[2])


# Pairs `_affine_fit` asks f at before all of them (most functions are not affine).
AFFINE_PROBES = 8


def _affine_fit(f: Callable, xs: list | None, ys: list | None) -> tuple | None:
    """(a, b, c, numpy_exact) where f(x, y) = a x + b y + c at every pair of xs and ys (to
    float64 round-off), |a| and |b| at most MAX_LINEAR_SLOPE (a table of steps would snap an
    input's float32 error back; a steeper line grows it); numpy_exact where f gives
    (a x + b y) + c bit for bit (numpy's sum of means, `_means_of_sum`). None where not, or
    there are more than MAX_SUM_PAIRS pairs (f is asked at each), or a value is no number.
    A grid of AFFINE_PROBES x AFFINE_PROBES pairs is asked first."""
    if not xs or not ys or len(xs) * len(ys) > MAX_SUM_PAIRS or \
            not all(_is_number(v) for v in itertools.chain(xs, ys)):
        return None
    X, Y = np.array([float(v) for v in xs]), np.array([float(v) for v in ys])

    def fit(px: np.ndarray, py: np.ndarray) -> tuple | None:  # ((a, b, c), f's grid)
        outs = [_call(f, [float(x), float(y)]) for x in px for y in py]
        if not all(_is_number(o) for o in outs):
            return None
        values = np.array([float(o) for o in outs])
        grid = np.meshgrid(px, py, indexing="ij")
        coef = _plane(grid[0].ravel(), grid[1].ravel(), values)
        if coef is None or max(abs(coef[0]), abs(coef[1])) > MAX_LINEAR_SLOPE:
            return None
        return coef, values.reshape(len(px), len(py))

    pick = lambda v: v[np.unique(np.linspace(0, v.size - 1, AFFINE_PROBES).astype(int))]  # noqa
    found = fit(pick(X), pick(Y)) and fit(X, Y)
    if found is None:
        return None
    (a, b, c), outs = found
    return a, b, c, bool(np.array_equal(outs, a * X[:, None] + b * Y[None, :] + c))


class _Sums:
    """A SequenceMap's value pairs and results, asked for s = a x + b y -> f(x, y) over every
    pair (`table`) for several (a, b): whole numbers as int64 arrays (one sort a weight pair),
    else exact rationals pair by pair."""

    def __init__(self, pairs: list[tuple], outs: list):
        self.pairs, self.outs = pairs, outs
        self.whole = all(_integral(v) is not False for v in itertools.chain(*pairs))
        ids: dict = {}  # results that compare equal share an id, as == decides below
        self.ids = np.array([ids.setdefault(o, len(ids)) for o in outs])
        if self.whole:
            self.xy = np.array([[int(float(x)), int(float(y))] for x, y in pairs], np.int64)
            self.big = int(np.abs(self.xy).max(initial=0))

    def table(self, a: float, b: float) -> dict | None:
        """{s: f} sorted by s; None where two pairs with one s give different values (f is
        not a function of s), or where s needs exact rationals over more than MAX_PAIRS
        pairs."""
        ia, ib = _integral(a), _integral(b)
        if not self.whole or ia is False or ib is False or \
                (abs(ia) + abs(ib)) * self.big >= 2 ** 52:
            if len(self.pairs) > MAX_PAIRS:
                return None  # (rationals pair by pair: a minute at 2^20 pairs)
            return _table_of_sum(self.pairs, self.outs, a, b)
        s = self.xy @ np.array([ia, ib], np.int64)
        order = np.argsort(s, kind="stable")
        s, ids = s[order], self.ids[order]
        same = s[1:] == s[:-1]
        if np.any(ids[1:][same] != ids[:-1][same]):
            return None
        firsts = np.flatnonzero(np.concatenate([[True], ~same]))
        return {float(s[i]): self.outs[order[i]] for i in firsts}


def _table_of_sum(pairs: list[tuple], outs: list, a: float, b: float) -> dict | None:
    """s -> f(x, y) over every pair, s = a x + b y in exact rationals, pair by pair, keyed by
    s in float64; None where two pairs with one s (or two s float64 cannot tell apart) give
    different values (f is not a function of s)."""
    whole = all(_integral(v) is not False for v in (a, b, *itertools.chain(*pairs)))
    exact = _integral if whole \
        else (lambda v: Fraction(float(v)))  # integers where they are (fast), else rationals
    fa, fb = exact(a), exact(b)
    table: dict = {}
    for (x, y), o in zip(pairs, outs):
        s = fa * exact(x) + fb * exact(y)
        if table.setdefault(s, o) != o:
            return None
    out: dict = {}
    for s in sorted(table):  # (sums float64 rounds to one number are one point, if one value:
        if out.setdefault(float(s), table[s]) != table[s]:  # 0.1 + 2 and 1.1 + 1 are 2.1)
            return None
    return out


def _integral(v):
    """v as a Python int where it is a whole number (else False)."""
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2 ** 52 else False


def _steps_cost(table: dict, numerical: bool) -> int:
    """Neurons of the table of steps over s (two a change of value; none where the map is
    affine with numbers out, a `tw.linear`)."""
    values = list(table.values())
    if numerical and _affine(np.array(list(table)), np.array([[float(v)] for v in values])):
        return 0
    return 2 * sum(1 for u, v in zip(values, values[1:]) if u != v)


# Steepest affine numerical map computed as a `tw.linear` (an input's float32 error grows by
# the slope; a table of steps would snap it back instead).
MAX_LINEAR_SLOPE = 64.0


def _affine(points: np.ndarray, rows: np.ndarray) -> tuple[float, float] | None:
    """(slope, intercept) where one-column rows are slope * point + intercept at every point
    (to float64 round-off) and the slope is at most MAX_LINEAR_SLOPE; else None."""
    if rows.shape[1] != 1 or points.size < 2 or not all(_is_number(r) for r in rows[:, 0]):
        return None
    p, r = points.astype(np.float64), rows[:, 0].astype(np.float64)
    slope = (r[-1] - r[0]) / (p[-1] - p[0])
    intercept = r[0] - slope * p[0]
    scale = max(1.0, float(np.abs(r).max()))
    if abs(slope) > MAX_LINEAR_SLOPE or \
            not np.allclose(slope * p + intercept, r, rtol=0, atol=1e-12 * scale):
        return None
    return float(slope), float(intercept)


def _parabola(column: np.ndarray, tolerance: float | None) -> tuple[float, float, float] | None:
    """(a, b, c) where column[i] = a i^2 + b i + c at every index i (to float64 round-off),
    and float32 computes a i^2 + b i + c within `tolerance` (default CLEAN of the column's
    largest entry): exactly where a, b and c are whole and every term below 2^24; else None."""
    n = column.size
    if n < 3 or not np.all(np.isfinite(column)):
        return None
    i = np.arange(n, dtype=float)
    fit = np.linalg.lstsq(np.stack([i * i, i, np.ones(n)], axis=1), column, rcond=None)[0]
    whole = np.all(column == np.round(column))
    if whole:
        fit = np.round(fit)
    a, b, c = (float(x) for x in fit)
    largest = max(1.0, float(np.abs(column).max()))
    if not np.allclose(a * i * i + b * i + c, column, rtol=0, atol=1e-12 * largest):
        return None
    terms = abs(a) * n * n + abs(b) * n + abs(c)
    error = 0.0 if whole and terms < 2 ** 24 else 2.0 ** -22 * terms
    if error > (CLEAN * largest if tolerance is None else tolerance):
        return None
    return a + 0.0, b + 0.0, c + 0.0


def _one_hot_rows(outs: list, space: list, width: int) -> np.ndarray:
    """A table's rows: each result's column in `space` hot (none for _NONE), `width` wide."""
    col = {v: i for i, v in enumerate(space)}
    rows = np.zeros((len(outs), width))
    for r, o in enumerate(outs):
        if o is not _NONE:
            rows[r, col[o]] = 1.0
    return rows


def _distinct_rows(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct rows of m, each row's class): rows compared as bytes, one sort of
    whole rows (np.unique(axis=0) compares column by column: seconds for sort_freq's
    2,550 x 2,550 selector at length 50)."""
    m = np.ascontiguousarray(m, dtype=np.float64) + 0.0  # -0.0 and 0.0 as one value
    as_bytes = m.view(np.dtype((np.void, m.dtype.itemsize * m.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
    return m[first], inverse.reshape(-1)


def _tuple_neurons(sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(W1, b1) of a neuron per tuple of k one-hots' values (product order): relu(the sum
    of its k columns - (k - 1)), 1 exactly where every part is hot."""
    n = math.prod(sizes)
    w1 = np.zeros((sum(sizes), n))
    offset = 0
    for i, size in enumerate(sizes):  # part i's value index in each tuple
        w1[offset + (np.arange(n) // math.prod(sizes[i + 1:])) % size, np.arange(n)] = 1.0
        offset += size
    return w1, np.full(n, 1.0 - len(sizes))


def _unit_columns(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(U, s) with m = U diag(s): each column over its first non-zero entry (s 0 for a zero
    column), so columns that are multiples of one another share a U column."""
    first = np.argmax(m != 0, axis=0)
    s = m[first, np.arange(m.shape[1])]
    u = np.where(s != 0, m / np.where(s != 0, s, 1.0), 0.0) + 0.0
    return np.ascontiguousarray(u), s
