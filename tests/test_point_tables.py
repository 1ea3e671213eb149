"""A table through points as an MLP, the one construction every floor uses
(`twdialect.point_tables`): `decompose`'s lowering of piecewise_linear (flat beyond the
points) and the RASP frontend's lines and steps (`interpolation_mlp`, `step_mlps`), with the
float32 check beside them (`measured`)."""

from __future__ import annotations

import numpy as np
import pytest

from twdialect.point_tables import (CLEAN, hinge_coefficients, hinge_mlp, interpolation_mlp,
                                    measured, step_mlps)


def _run(mlp, x, dtype=np.float64):
    w1, b1, w2, b2 = (np.asarray(a, dtype) for a in mlp)
    x = np.asarray(x, dtype)[:, None]
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def _table(seed: int, n: int = 12):
    rng = np.random.default_rng(seed)
    points = np.sort(rng.choice(np.arange(-40, 40), n, replace=False)).astype(float)
    rows = rng.normal(size=(n, 2)) * 10.0 ** rng.integers(-2, 4)
    return points, rows


@pytest.mark.parametrize("seed", range(20))
def test_hinge_mlp_hits_every_point_and_is_flat_beyond(seed):
    points, rows = _table(seed)
    mlp = hinge_mlp(points, rows)
    scale = np.abs(rows).max()
    assert np.abs(_run(mlp, points) - rows).max() <= 1e-6 * scale
    beyond = _run(mlp, [points[-1] + 1, points[-1] + 100])
    assert np.abs(beyond - rows[-1]).max() <= 1e-6 * scale
    assert np.abs(_run(mlp, [points[0] - 5]) - rows[0]).max() == 0


@pytest.mark.parametrize("seed", range(20))
def test_interpolation_mlp_is_the_hinge_construction_on_the_last_line(seed):
    points, rows = _table(seed)
    rows[3:6] = rows[3] + (points[3:6, None] - points[3]) * 0.5  # (a straight run: no hinges)
    w1, b1, w2, b2 = interpolation_mlp(points[::-1], rows[::-1])  # (any order)
    slopes = np.diff(rows, axis=0) / np.diff(points)[:, None]
    bends = np.flatnonzero(np.any(np.diff(slopes, axis=0, prepend=0 * slopes[:1]) != 0, axis=1))
    assert w1.shape == (1, bends.size)  # a neuron where the slope changes, none more
    knots = np.append(bends, points.size - 1)
    coef, _ = hinge_coefficients(points[knots], rows[knots])
    assert np.array_equal(w2, coef[:-1]) and np.array_equal(b1, -points[bends])
    mlp = (w1, b1, w2, b2)
    assert np.abs(_run(mlp, points) - rows).max() <= 1e-6 * np.abs(rows).max()
    far = points[-1] + 7  # beyond: the last segment's line
    assert np.allclose(_run(mlp, [far])[0], rows[-1] + 7 * slopes[-1])


def test_a_constant_table_is_one_idle_neuron():
    points, rows = np.arange(4.0), np.full((4, 1), 3.0)
    for mlp in (interpolation_mlp(points, rows), hinge_mlp(points, rows)):
        assert np.asarray(mlp[0]).shape[1] == 1 and np.all(_run(mlp, points) == 3.0)
    assert len(step_mlps(points, rows)) == 0


def test_steps_hold_their_rows_around_each_point():
    points = np.array([0.0, 1.0, 2.0, 5.0])
    rows = np.array([[0.0], [1.0], [0.0], [7.0]])
    plan = step_mlps(points, rows)
    x = np.concatenate([points, points + 0.2, points - 0.2])
    out = np.asarray(x, np.float32)[:, None]
    for w1, b1, w2, b2 in plan:
        out = np.maximum(out @ np.asarray(w1, np.float32) + np.asarray(b1, np.float32), 0) \
            @ np.asarray(w2, np.float32) + (0 if b2 is None else np.asarray(b2, np.float32))
    assert np.abs(out - np.tile(rows, (3, 1))).max() <= CLEAN * 7


def test_measured_refuses_a_tolerance_float32_cannot_keep():
    points = np.arange(0.0, 50.0)
    rows = (np.sqrt(points) * 1e3)[:, None]
    line = interpolation_mlp(points, rows)
    at_points = measured(points, rows, line, 1.0, perturb=0.0)
    assert at_points is not None and at_points > 0
    assert measured(points, rows, line, at_points / 2, perturb=0.0) is None
    # an input a relative 1e-6 off its point moves the line's output by its slope
    off = measured(points, rows, line, 1.0)
    assert off > at_points and measured(points, rows, line, (off + at_points) / 2) is None


def test_a_long_table_is_built_in_one_pass_and_stays_exact():
    # 3,000 points, 64 columns: coefficient k from the interpolant's value and slope at
    # bp[k] (one step a point, not a sum over every earlier coefficient)
    rng = np.random.default_rng(7)
    points = np.cumsum(rng.integers(1, 4, 3000)).astype(float)
    rows = np.cumsum(rng.normal(size=(3000, 64)), axis=0)
    mlp = hinge_mlp(points, rows)
    assert np.abs(_run(mlp, points) - rows).max() <= 1e-6 * np.abs(rows).max()
    line = interpolation_mlp(points, rows)
    assert np.abs(_run(line, points) - rows).max() <= 1e-6 * np.abs(rows).max()
