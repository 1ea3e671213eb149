"""Values as RASP's evaluator gives them, before anything is built: a stable order of a value
set (`_ordered`), a number that may sit a little off (`_Near`, its radius in float64 ulps),
and a function asked at one tuple of values (`_apply`: `_NONE` where it fails or gives
None, `_Unsteady` where its result jumps within an argument's radius)."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from tw_frontends.rasp.limits import RaspError


def _ordered(values) -> list:
    """A value set in a stable order (numbers first, by value; then others by repr)."""
    def key(v):
        if isinstance(v, (bool, int, float, np.integer, np.floating)):
            return (0, float(v), "")
        return (1, 0.0, repr(v))
    values = values if isinstance(values, list) else list(values)
    types = set(map(type, values))
    if types <= _PLAIN_NUMBERS:
        return sorted(set(values))  # the same order, without a key per value (a million means)
    if _Near in types:  # (a value reached exactly and with round-off is as off as the worst)
        return sorted(_widest(values), key=key)
    return sorted(set(values), key=key)


def _widest(values: list) -> set:
    """The distinct values, each with the largest radius any of its equals has (a set would
    keep whichever came first: 0.0 exactly beside 0.1 - 0.1 with its round-off)."""
    radius: dict = {}
    for v in values:
        r = v.radius if type(v) is _Near else 0.0
        if r > radius.get(v, -1.0):
            radius[v] = r
    return {_Near(float(v), r) if r > 0 else v for v, r in radius.items()}


_PLAIN_NUMBERS = {bool, int, float}


def _is_number(v) -> bool:
    return isinstance(v, (bool, int, float, np.integer, np.floating)) and math.isfinite(float(v))


class _None:
    """Marks a table entry with no value (the function failed or gave None)."""


_NONE = _None()


def _call(f: Callable, args):
    try:
        out = f(*args)
    except Exception:  # noqa: BLE001 - a value the program never meets at run time
        return _NONE
    if out is None:
        return _NONE
    try:
        hash(out)
    except TypeError:
        raise RaspError(f"a map gave {out!r}, which is not hashable: RASP values are numbers, "
                        "strings, booleans or tuples") from None
    return out


def _apply(f: Callable, *args):
    """f at one tuple of values (_NONE where it raises or gives None). Where an argument is
    a `_Near`, f is also asked at its radius's two ends: a result that jumps there (a
    threshold at the mean itself) is `_Unsteady`; a number that only moves a little is a
    `_Near` itself, so a later reader is asked alike."""
    if not any(type(a) is _Near for a in args):
        return _call(f, args)
    plain = [float(a) if type(a) is _Near else a for a in args]
    out = _call(f, plain)
    spread = 0.0  # (each argument may be off at once: their moves add up)
    for i, a in enumerate(args):
        if type(a) is not _Near:
            continue
        moves = []
        for end in (plain[i] - a.radius, plain[i] + a.radius):
            other = _call(f, [*plain[:i], end, *plain[i + 1:]])
            moved = _moved(out, other)
            if moved is None:
                raise _Unsteady(plain[i], a.radius, out, end, other)
            moves.append(moved)
        spread += max(moves)
    return _near(out, spread) if isinstance(out, float) else out


def _moved(out, other) -> float | None:
    """How far `other` (f a radius away) is from `out`: 0 where equal, the distance where
    both are floats a little apart (a number that moves with its input), None where the
    result jumps (another category, an integer, None)."""
    if type(out) is type(other) and out == other:
        return 0.0
    if _is_count(out) and _is_count(other) and (isinstance(out, float) or
                                                isinstance(other, float)):
        moved = abs(float(other) - float(out))
        if moved <= STEADY * max(1.0, abs(float(out))):
            return moved
    return None


def _is_count(v) -> bool:
    """A number that is not a bool (max(x, 1) gives 1 or x, one number either way)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# How far (relative) a float result may move within a `_Near` argument's radius and still
# be the same value moved a little: radii are ulps of float64, so only a jump exceeds it.
STEADY = 1e-9


class _Near(float):
    """A number that RASP's evaluator may give a little off: a mean of values whose float64
    sums round (RASP adds them in list order; the value set holds the exact quotient,
    rounded once) lies within `radius` of it, and so does anything computed from one.
    A reader whose result jumps within that radius would differ from RASP on inputs that
    float32 cannot tell apart, so it is refused (`_apply`, `_selection`): a threshold at
    a mean itself (x > 1000.25 of means of 1000.1, 1000.2 and 1000.4: RASP gives
    1000.2500000000001 for some orders of the same keys). Arithmetic carries the radius
    (a LinearSequenceMap's sums)."""

    __slots__ = ("radius",)

    def __new__(cls, x: float, radius: float):
        near = super().__new__(cls, x)
        near.radius = radius
        return near

    def _then(self, x: float, radius: float):
        return _near(x, radius + ULP64 * abs(x))

    def __add__(self, o):
        return self._then(float(self) + float(o), self.radius + _radius(o))

    __radd__ = __add__

    def __sub__(self, o):
        return self._then(float(self) - float(o), self.radius + _radius(o))

    def __rsub__(self, o):
        return self._then(float(o) - float(self), self.radius + _radius(o))

    def __mul__(self, o):
        return self._then(float(self) * float(o),
                          abs(float(o)) * self.radius + abs(float(self)) * _radius(o))

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._then(float(self) / float(o),
                          (self.radius + abs(float(self) / float(o)) * _radius(o)) /
                          abs(float(o)))

    def __neg__(self):
        return _Near(-float(self), self.radius)

    def __abs__(self):
        return _Near(abs(float(self)), self.radius)

    def __reduce__(self):
        return (_Near, (float(self), self.radius))


ULP64 = 2.0 ** -52  # float64's relative spacing


def _radius(v) -> float:
    return v.radius if type(v) is _Near else 0.0


def _near(x: float, radius: float):
    return _Near(x, radius) if radius > 0 and isinstance(x, float) else x


def _plain(v):
    """v without a `_Near`'s radius (what a model or a user sees)."""
    return float(v) if type(v) is _Near else v


class _Unsteady(RaspError):
    """A function whose result jumps within a `_Near` argument's radius (`_apply`); `sop`
    names the expression that asked it."""

    def __init__(self, x, radius, out, end, other):
        show = lambda v: None if v is _NONE else v  # noqa: E731
        self.why = (f"reads {x!r}, a value that RASP's float64 sums can give up to "
                    f"{radius:.2g} off (a mean's round-off, or values float32 cannot tell "
                    f"apart), and its result moves within that ({show(out)!r} there, "
                    f"{show(other)!r} at {end!r}): the compiled model could differ from RASP")
        super().__init__(self.why)
