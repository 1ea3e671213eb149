"""Tables through points as MLPs: the one home of the construction, for every floor that
builds one (the RASP frontend's tables, `decompose`'s lowering of `tw.piecewise_linear`, which
the ops library's `map_to_table` and every other table emit), with its float32 check beside it.

* `hinge_coefficients` / `hinge_mlp`: one MLP through every point, a neuron where the slope
  changes, each coefficient rounded to float32 given the earlier ones (the interpolant hits
  every point to one coefficient's rounding); flat beyond the last point, or (`flat=False`)
  on the last segment's line (`interpolation_mlp`).
* `step_mlps`: a table of steps, exact on a plateau a quarter gap around each point, so an
  input a little off its value (a softmax's share, an earlier table) still reads its row; one
  MLP where its float32 rounding stays within tolerance, else two that saturate exactly.
* `measured` / `plateau_error`: the table's float32 error at its points and a little off
  them, its neurons summed as a blocked product and one after another (`summed_in_order`).
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import SSAValue

from twdialect import ops as tw
from twdialect.contracts import f32

# A table in one MLP may stray this far (relative to its largest row) in float32; a steeper one
# takes two MLPs, exact on its plateaus.
CLEAN = 2e-6
# How far (relative) an input may sit off its value when a table's plateaus are measured.
PERTURB = 1e-6
# How many times further off its value (than PERTURB) an input of a table through its points
# (`interpolation_mlp`, no plateaus) may sit and the table stay within its tolerance.
LINE_MARGIN = 16


def hinge_coefficients(bp: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hinge coefficients for values[0] + sum_k C[k] relu(x - bp[k]) + tail relu(x - bp[-1]).

    C (n, O) is exact in f32 and chosen breakpoint by breakpoint, so the interpolant hits
    values[k+1] at bp[k+1] given the already rounded earlier coefficients (the error at each
    breakpoint is the rounding of one coefficient, not an accumulation). C[n-1] = f32(-sum C[:n-1])
    flattens the right tail; `tail` (O,) is its f32 rounding remainder, so the tail's slope is
    0 up to about 2^-48 |sum C| (a second neuron on the last breakpoint, needed only where the
    remainder is non-zero)."""
    n = bp.size
    coef = np.zeros_like(values)
    at = np.array(values[0], dtype=np.float64)  # the interpolant built so far, at bp[k]
    slope = np.zeros_like(at)  # its slope right of bp[k] before coef[k]: sum of coef[:k]
    for k in range(n - 1):
        # the interpolant (coefficients 0..k-1, already rounded) at bp[k+1], in float64 (its
        # round-off, some n ulps of float64, is far below the float32 rounding it corrects):
        # a step a breakpoint, not a sum over every earlier one
        gap = bp[k + 1] - bp[k]
        reached = at + slope * gap
        coef[k] = f32((values[k + 1] - reached) / gap)
        slope = slope + coef[k]
        at = reached + coef[k] * gap
    flatten = -coef[:n - 1].sum(axis=0)
    coef[n - 1] = f32(flatten)
    tail = f32(flatten - coef[n - 1])
    return coef, tail


def hinge_mlp(bp: np.ndarray, values: np.ndarray, weights=(1.0,), offset: float = 0.0,
              flat: bool = True) -> tuple:
    """(w1, b1, w2, b2) of one MLP through (bp[k], values[k]) of t = x @ weights - offset:
    a neuron relu(t - bp[k]) where the coefficient is not zero (`hinge_coefficients`), flat
    beyond the last point (a second neuron there takes the flattening's rounding remainder),
    or (`flat` False) on the last segment's line; values[0] left of the first point."""
    coef, tail = hinge_coefficients(bp, values)
    last = bp.size if flat else bp.size - 1
    keep = [k for k in range(last) if np.any(coef[k] != 0)]
    rows = [coef[k] for k in keep]
    biases = [-bp[k] for k in keep]
    if flat and np.any(tail != 0):
        rows.append(tail)
        biases.append(-bp[-1])
    if not rows:  # a constant function: one idle neuron keeps the chain well-formed
        rows, biases = [np.zeros(values.shape[1])], [0.0]
    w1 = np.repeat(np.asarray(weights, dtype=np.float64)[:, None], len(rows), axis=1)
    b1 = np.array(biases) - offset
    return w1, b1, np.array(rows), values[0]


def steps(x: SSAValue, points: np.ndarray, rows: np.ndarray, tolerance=None) -> SSAValue:
    """The table of steps `step_mlps` plans, applied to x."""
    return emit_steps(x, rows, step_mlps(points, rows, tolerance))


def emit_steps(x: SSAValue, rows: np.ndarray, plan: list[tuple]) -> SSAValue:
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
        error = measured(points, rows, line, tolerance, LINE_MARGIN * PERTURB)
        if error is not None:
            return Plan([line], error)
    error = measured(points, rows, (w1, bias1, w2, bias2), tolerance)
    if error is not None:
        return Plan([(w1, bias1, w2, bias2)], error)
    two = [(slope[None, :], -slope * b1, np.eye(len(change)), None),
           (-np.eye(len(change)), np.ones(len(change)), -delta, rows[0] + delta.sum(axis=0))]
    return Plan(two, float(plateau_error(points, rows, two, in_order=True).max(initial=0.0)))


class Plan(list):
    """`step_mlps`'s MLPs, and the table's float32 error at its points (measured for one
    MLP: `measured`)."""

    def __init__(self, mlps=(), error: float = 0.0):
        super().__init__(mlps)
        self.error = error


def interpolation_mlp(points: np.ndarray, rows: np.ndarray) -> tuple:
    """One MLP (w1, b1, w2, b2) through every (points[k], rows[k]), linear between and
    beyond: a neuron where the slope changes, half a table of steps' two a step, but an
    input off its point moves the output by the slope (for readers that tolerate it). The
    neurons are `hinge_mlp`'s through the points where the slope changes and the last one,
    on the last segment's line beyond it."""
    order = np.argsort(points, kind="stable")
    points, rows = points[order], rows[order]
    slopes = np.diff(rows, axis=0) / np.diff(points)[:, None]
    change = np.diff(slopes, axis=0, prepend=np.zeros((1, rows.shape[1])))
    hinge = np.flatnonzero(np.any(change != 0, axis=1))
    if hinge.size == 0:  # one point, or the rows never change
        return np.ones((1, 1)), -points[:1], np.zeros((1, rows.shape[1])), rows[0]
    knots = np.append(hinge, points.size - 1)
    return hinge_mlp(points[knots], rows[knots], flat=False)


def within(points: np.ndarray, rows: np.ndarray, mlp: tuple, tolerance,
            perturb: float = PERTURB) -> bool:
    """Whether a one-MLP table's float32 error stays within `tolerance` (`measured`)."""
    return measured(points, rows, mlp, tolerance, perturb) is not None


def measured(points: np.ndarray, rows: np.ndarray, mlp: tuple, tolerance,
              perturb: float = PERTURB) -> float | None:
    """A one-MLP table's largest float32 error (`plateau_error`) where it stays within
    `tolerance` (per column), its neurons summed as a blocked matrix product does and, where
    that comes within a quarter of the tolerance, one neuron after another too
    (`summed_in_order`); None where it does not."""
    error = plateau_error(points, rows, [mlp], perturb)
    if np.any(error > tolerance):
        return None
    if not np.all(error <= np.asarray(tolerance) / 4):
        error = np.maximum(error, plateau_error(points, rows, [mlp], perturb, in_order=True))
        if np.any(error > tolerance):
            return None
    return float(error.max(initial=0.0))


def plateau_error(points: np.ndarray, rows: np.ndarray, mlps: list[tuple],
                   perturb: float = PERTURB, in_order: bool = False) -> np.ndarray:
    """The largest float32 error of a table (its MLPs one after another), per column, at its
    points and at the points moved by `perturb` (relative): what its plateaus give the ops
    that read them; `in_order`: neurons summed one after another (`summed_in_order`)."""
    worst = np.zeros(rows.shape[1])
    for moved in (points, points * (1 + perturb), points * (1 - perturb)):
        x = np.asarray(moved, np.float32)[:, None]
        for w1, b1, w2, b2 in mlps:
            w2 = np.asarray(w2, np.float32)
            hidden = np.maximum(x @ np.asarray(w1, np.float32) + np.asarray(b1, np.float32),
                                np.float32(0))
            x = summed_in_order(hidden, w2) if in_order else hidden @ w2
            if b2 is not None:
                x = x + np.asarray(b2, np.float32)
        worst = np.maximum(worst, np.abs(x.astype(np.float64) - rows).max(axis=0))
    return worst


# Largest hidden x output entries a table's check sums one neuron at a time (above: only as a
# blocked product)
SEQUENTIAL_CHECK = 1 << 24


def summed_in_order(hidden: np.ndarray, w2: np.ndarray) -> np.ndarray:
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
