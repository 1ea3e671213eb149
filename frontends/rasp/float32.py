"""The frontend's float32 rules: how far a softmax's mean may stray (`mean_noise`), what a
linear read adds to an error (`_read_error`), and whether a table can tell its input's values
apart in float32 (`_merge_float32`, `_check_gaps`, `_readable`): where it cannot, the
expression is refused by name, or read another way."""

from __future__ import annotations

import math

import numpy as np

from tw_frontends.rasp.limits import CLEAN, MAX_TABLE, RaspError, _label
from tw_frontends.rasp.numbers import _Near, _is_count, _is_number, _radius
from tw_frontends.rasp.tables import _affine

# Points of a table closer than this (relative to the largest magnitude, or 1) are one value:
# float32 keeps ~6e-8 of it, and such gaps come from float64 round-off in a value set (means
# of 1/3 and 2/3 that give both 0.0 and 1.4e-17), never from values a model could tell apart.
SAME_POINT = 1e-9


def mean_noise(magnitude: float, n: int) -> float:
    """How far float32 may move a softmax's mean of values up to `magnitude` over at most n
    keys (the weights' and sums' roundings): measured, the worst of 200 inputs, 1.1e-7 of it at
    length 10 and 2.4e-7 at 100; this bound is 2-3 times that."""
    return 2.0 ** -24 * (2 + math.log2(n + 1)) * magnitude


def _read_error(error: float, rows: np.ndarray) -> float:
    """The error of a linear read `one-hot @ rows` of a one-hot whose columns are each off
    by up to `error`."""
    return float(error * np.abs(rows).sum(axis=0).max(initial=0.0)) if error else 0.0


def _clustered(space: list) -> list:
    """An ordered value set with the numbers that float32 cannot tell apart (`_merge_float32`'s
    rule: a mean of 1/7 reached two ways, 0.14285714285714285 and 0.14285714285714288) as one
    `_Near` value spanning them: one one-hot column for what a model can tell apart, and its
    readers asked at the span's ends (`_apply`), so one that tells them apart is refused."""
    numbers = [v for v in space if _is_count(v)]
    if len(numbers) < 2:
        return space
    p = np.array([float(v) for v in numbers])
    same = (p[1:].astype(np.float32) == p[:-1].astype(np.float32)) | \
        (np.diff(p) < SAME_POINT * max(1.0, float(np.abs(p).max())))
    if not same.any():
        return space
    out, group = [], [numbers[0]]
    for v, joined in zip(numbers[1:], same.tolist()):
        if joined:
            group.append(v)
        else:
            out.append(_span(group))
            group = [v]
    out.append(_span(group))
    return out + [v for v in space if not _is_count(v)]


def _span(group: list):
    """One value standing for `group` (sorted): its middle, a `_Near` reaching every one."""
    if len(group) == 1:
        return group[0]
    mid = float(group[len(group) // 2])
    return _Near(mid, max(abs(float(v) - mid) + _radius(v) for v in group))


def _check_gaps(expr, points: np.ndarray, rows: np.ndarray, noise: float) -> None:
    """A table's plateaus hold an input within a quarter gap of each value: one that float32
    computes only to `noise` (a softmax's mean of large values: `mean_noise`) needs values
    whose rows differ over 4 noise apart, else it could be read as the other."""
    k = _narrowest_gap(points, rows, noise)
    if k is not None:
        a, b = float(points[k]), float(points[k + 1])
        raise RaspError(f"{_label(expr)}: reads {a!r} and {b!r}, {b - a:.3g} apart, from a "
                        f"softmax's mean that float32 keeps only to about {noise:.2g} at these "
                        "magnitudes: the table could read one as the other")


def _narrowest_gap(points: np.ndarray, rows: np.ndarray, noise: float) -> int | None:
    """k where points k and k + 1 are the nearest two whose rows differ and they are no more
    than 4 noise apart (`_check_gaps`), else None."""
    change = np.flatnonzero(np.any(rows[1:] != rows[:-1], axis=1))
    if change.size == 0:
        return None
    gaps = points[change + 1] - points[change]
    k = int(np.argmin(gaps))
    return int(change[k]) if gaps[k] / 4 <= noise else None


def _merge_float32(expr, points: list[float], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points sorted; those float32 cannot tell apart become one, where their rows agree
    (to SAME_POINT: a mean minus a token gives -0.8 and -0.7999999999999998 at two such
    points, one value to any reader)."""
    p, r, clash = _merged_float32(points, rows)
    if clash is not None:
        raise RaspError(f"{_label(expr)}: inputs {clash[0]!r} and {clash[1]!r} are one float32 "
                        "number (closer than float32 can tell apart) but map to different "
                        "values")
    return p, r


def _merged_float32(points: list[float], rows: np.ndarray) -> tuple:
    """(points, rows, clash) of `_merge_float32`: clash the first two points that cannot be
    one (their rows differ), else None."""
    order = np.argsort(np.asarray(points, dtype=np.float64), kind="stable")
    p, r = np.asarray(points, dtype=np.float64)[order], np.asarray(rows)[order]
    same = (np.asarray(p[1:], np.float32) == np.asarray(p[:-1], np.float32)) | \
        (np.diff(p) < SAME_POINT * max(1.0, float(np.abs(p).max(initial=0.0))))
    if same.any():
        apart = np.abs(r[1:] - r[:-1]) > SAME_POINT * max(1.0, float(np.abs(r).max()))
        clash = same & np.any(apart, axis=1)
        if clash.any():
            k = int(np.flatnonzero(clash)[0])
            return p, r, (float(p[k]), float(p[k + 1]))
        keep = np.concatenate([[True], ~same])
        p, r = p[keep], r[keep]
    return p, r, None


def _readable(table: dict, noise: float, numerical: bool) -> bool:
    """Whether `_numeric_table` takes a table over a number s ({s: value}, s sorted) whose
    float32 error is `noise`: no two values of s that float32 cannot tell apart with different
    results (`_merge_float32`), none closer than 4 noise (`_check_gaps`), at most MAX_TABLE
    steps unless a line. Its rows: numbers out, the numbers (one to SAME_POINT); categories,
    an id each (a one-hot row each)."""
    values = list(table.values())
    if numerical:
        rows = np.array([[float(v)] for v in values]).reshape(-1, 1)
    else:
        ids: dict = {}
        rows = np.array([[ids.setdefault(v, len(ids))] for v in values], np.float64)
    points, rows, clash = _merged_float32(list(table), rows)
    if clash is not None or (noise and _narrowest_gap(points, rows, noise) is not None):
        return False
    return (numerical and _affine(points, rows) is not None) or \
        np.count_nonzero(np.any(rows[1:] != rows[:-1], axis=1)) <= MAX_TABLE


def output_tolerance(rows: np.ndarray, atol: float) -> float:
    """What a table giving the program's numerical output may stray: its default (CLEAN of
    its largest row), at most `atol`."""
    return min(CLEAN * max(1.0, float(np.abs(rows).max())), atol)


def check_output(expr, out, atol: float) -> None:
    """A numerical output (`out`, an `Encoded`) within `atol` of RASP's value, else refused:
    float32 holds each of its values to half an ulp, and computes it to `out.error` (a
    softmax's mean to `mean_noise` of the magnitudes it averaged, however small the
    result)."""
    if out.magnitude * 2.0 ** -24 + out.error <= atol:
        return  # (half an ulp of the largest value: no need to list the values)
    values = np.array([float(v) for v in out.space or () if _is_number(v)])
    with np.errstate(over="ignore"):
        held = float(np.max(np.abs(values - values.astype(np.float32)), initial=0.0))
    bound = held + out.error
    if bound > atol:
        raise RaspError(f"{_label(expr)}: a numerical output (values up to "
                        f"{out.magnitude:.3g}) that float32 computes only to about "
                        f"{bound:.2g}, beyond atol={atol:g}: "
                        "compile with a larger atol (compile_rasp_to_model(..., atol=...), "
                        "tw-rasp --atol) or scale the values down")
