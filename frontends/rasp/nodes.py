"""What each stage decides about a RASP expression (tracr's `nodes.py` in spirit), one record
per SOp and stage, written once and read by every later reader:

| stage | record | facts |
| --- | --- | --- |
| `validate.py` | (none: a refusal) | its label, as tracr names it |
| `value_sets.py` | `ValueSet` | `values`, `maybe_none` |
| `plan.py` | `Plan` (per translation) | token features, narrow index reads, sums kept as pair tables |
| the build (`build.py` and its parts) | `Encoded` | below |

`Encoded`, per SOp the build translated:

* `value`: its tw value, from the op its stage built (`maps`, `sums`, `heads`, `aggregate`);
* `numerical`: one number or a one-hot: RASP's annotation, `build._Graph.sop` converting
  (`_Tables.as_numerical` / `as_categorical`) where the translation gave the other;
* `space`: its value set as encoded (`_Tables._rows`, `aggregate._mean_values`):
  categorical, each column's value; numerical, its values (a callable where many, enumerated
  when a table first asks). The stage before the build, `value_sets.ValueSets`, holds every
  SOp's value set as RASP gives it, translated or not: the questions a translation asks of
  the program (`picks_one`, `determines`, a sum's affine fit) read that, so answering builds
  nothing; `space` may be narrower (float32 merges what it cannot tell apart) or, where a
  table is made over more values than RASP reaches (a width's 0 where a query always
  selects itself), wider;
* `bos`: its value at the BOS position (`build._Graph.encoded`, the oracle);
* `maybe_none`, `noisy`: None somewhere; read off a softmax (its translation);
* `categories`, `number`: the same values in the other encoding, read instead where cheaper
  (`_Tables._table`, `_Tables.as_categorical`);
* `error`, `magnitude`: how far float32 may move it, its largest value (`float32`'s rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from xdsl.ir import SSAValue

from twdialect.dialect import width_of

from tw_frontends.rasp.numbers import _is_number

Value = SSAValue


@dataclass
class ValueSet:
    """What the value-set stage (`value_sets.ValueSets`) decides about a SOp, before anything
    is built: the values RASP may give it at an input position (None: too many to
    enumerate; a function of no arguments: a mean's, enumerated when first asked), and
    whether it may be None somewhere."""

    values: list | None | Callable
    maybe_none: bool


@dataclass
class Encoded:
    """A translated SOp: its tw value, encoding, value set, its value at BOS, whether it
    may be None somewhere (an Aggregate with nothing selected, a map that fails: RASP's maps
    pass None on, which a number cannot say), and whether it is `noisy`: read from a softmax
    (an Aggregate, a SelectorWidth, anything computed from one), so that one value may sit
    a few float32 ulps apart at two positions (a table's plateaus keep that small, not
    zero)."""

    value: Value
    numerical: bool
    # categorical: the value of each column; numerical: its possible values (None: too many
    # to enumerate), or a function of no arguments that enumerates them when first asked
    # (a LinearSequenceMap's sums: a million pairs, which only a later table needs)
    _space: list | None | Callable = field(repr=False)
    bos: np.ndarray = field(repr=False)
    maybe_none: bool = False
    noisy: bool = False
    # a number read off a categorical one-hot (a numerical Map of it): (that Encoded, the
    # value each of its columns maps to), so a categorical use is a linear map of the one-hot
    categories: tuple | None = field(default=None, repr=False)
    # a categorical one-hot tabled from a number of the same values (`as_categorical`):
    # that number's Encoded, so a numerical use reads it, not the one-hot
    number: Encoded | None = field(default=None, repr=False)
    # how far float32 may move it (a one-hot: each column), an estimate carried from its
    # sources: a softmax's mean (`mean_noise` of the magnitudes it averages, however small
    # the result), a table's own error, read through linear maps; and a bound on its
    # magnitude where the caller knows one without enumerating its values
    error: float = 0.0
    _magnitude: float | None = field(default=None, repr=False)

    @property
    def space(self) -> list | None:
        if callable(self._space):
            self._space = self._space()
        return self._space

    @property
    def magnitude(self) -> float:
        """The largest |value| of a number (0 where it has none or they are unknown)."""
        if self._magnitude is None:
            numbers = [float(v) for v in self.space or () if _is_number(v)]
            self._magnitude = float(np.max(np.abs(numbers), initial=0.0))
        return self._magnitude

    @property
    def width(self) -> int:
        return width_of(self.value)
