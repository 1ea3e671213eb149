"""The frontend's own tables (a table through points as an MLP is `twdialect.point_tables`'s,
one home for every floor): a function of two numbers read as a table of one sum
(`_sum_weights`, `_Sums`, `_affine_fit`); a line or parabola through a column (`_affine`,
`_parabola`); and the small matrices the stages share (a neuron per value tuple, one-hot rows,
distinct rows, unit columns)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Callable

import numpy as np

from tw_frontends.rasp.limits import CLEAN, MAX_PAIRS, MAX_SUM_PAIRS
from tw_frontends.rasp.numbers import _NONE, _call, _is_number


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
    coefficients where least squares gives 0.9999999999999998 for 1), else None. An input
    of one value has coefficient 0 (its value is in c: nothing need read it)."""
    xy1 = np.column_stack([xs, ys, np.ones(len(xs))])
    f = np.asarray(outs, np.float64)
    varies = np.append(np.ptp(xy1[:, :2], axis=0) > 0, True)
    coef = np.zeros(3)
    coef[varies] = np.linalg.lstsq(xy1[:, varies], f, rcond=None)[0]
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
    (a x + b y) + c bit for bit (numpy's sum of means, `ValueSets.means_of_sum`). None where not, or
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
