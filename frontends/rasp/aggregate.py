"""Aggregate and SelectorWidth (`_Aggregates`): a head's mean with its default where nothing is
selected, a width read off BOS's share, and ranks (`make_sort`'s widths) split or read
lexicographically where one width would not tell them apart."""

from __future__ import annotations

import math

import numpy as np

from twdialect import ops as tw

from tw_frontends.rasp.limits import GAIN, MAX_MEANS, RANK_NOISE, rasp
from tw_frontends.rasp.numbers import _NONE, _Near, _apply, _is_number, _ordered
from tw_frontends.rasp.nodes import Encoded
from tw_frontends.rasp.float32 import mean_noise
from tw_frontends.rasp.keys import MIN_SPLIT_KEYS, _ordered_by
from tw_frontends.rasp.values import _mean_space, _root, _without_prefix


class _Aggregates:
    """Aggregate and SelectorWidth through heads."""

    def _aggregate(self, expr) -> Encoded:
        numerical = rasp.is_numerical(expr)
        src = self.sop(expr.sop)
        if src.numerical and not numerical:
            # a numerical source's mean, then its one-hot (a categorical one-hot mean would
            # mix the values instead of averaging them)
            mean = self._aggregate_as(expr, src, True)
            return self.as_categorical(mean, expr)
        return self._aggregate_as(expr, src, numerical)

    def _aggregate_as(self, expr, src: Encoded, numerical: bool) -> Encoded:
        """The mean of `src` over the selected keys (numerical: of its number; categorical:
        of its one-hot), the default where none is selected."""
        src = self.as_numerical(src, expr.sop) if numerical else self.as_categorical(src, expr.sop)
        return self._mean(expr, expr.selector, src, expr.default, numerical, expr.sop)

    def _mean(self, expr, selector, src: Encoded, default, numerical: bool,
              value_sop, space=None) -> Encoded:
        """`_aggregate_as`'s head: the mean of `src` over the selector's keys, `default`
        where none is selected (`expr` names the expression in errors; `value_sop`: the SOp
        src stands for, None where it is no one SOp; `space`: a numerical mean's value set
        where the caller knows it, else from src's)."""
        if default is None and not src.space:  # a mean of Nones, or no key: None
            return self.nowhere(numerical)
        one = numerical and self.sets.one_key(selector)  # (its mean is one of the values)
        if numerical:
            d = np.array([0.0 if default is None else self._number(expr, default)])
            if space is None:
                space = self._mean_values(selector, src.space, float(d[0]))
        else:  # a default outside the aggregated values gets a column of its own
            space = list(src.space)
            if default is not None and default not in space:
                space.append(default)
            d = np.zeros(len(space))
            if default is not None:
                d[space.index(default)] = 1.0
        # out = mean + (BOS share) * (default - the value BOS holds)
        widen = np.eye(src.width, src.width if numerical else len(space))
        fix = np.vstack([widen, (d - src.bos @ widen)[None, :]])
        # (a softmax's mean of numbers: its float32 error follows the magnitudes it averages,
        # but one key's weight is 1 in float32; of one-hots of one value, as good as the
        # one-hot: measured, 0 at lengths 10-100)
        head = self.head(selector, src, 0.5, fix, value_sop)
        error = src.error
        if numerical:
            error += 2.0 ** -24 * src.magnitude if one else \
                mean_noise(src.magnitude, self.max_seq_len)
        return self.encoded(head, numerical, space, not numerical and default is None,
                            noisy=True, error=error,
                            magnitude=max(src.magnitude, abs(float(d[0]))) if numerical else None)

    def _mean_values(self, selector, values: list | None, default: float):
        """A numerical mean's value set: the values and the default where every query selects
        at most one key (`ValueSets.one_key`), else every mean of them (`_mean_space`), enumerated
        where a later table asks (a million means, which only it needs: a callable)."""
        if values is not None and self.sets.one_key(selector):
            return _ordered({v if type(v) is _Near else float(v) for v in values} | {default})
        n = self.max_seq_len
        return lambda: _mean_space(values, n, default)

    def _selector_width(self, expr, selector) -> Encoded:
        rest, prefix = _without_prefix(selector)
        if isinstance(rest, rasp.Select) and rest.predicate is rasp.Comparison.TRUE:
            return self._count_all(rasp.is_numerical(expr), prefix or self.causal)
        split = self._rank_split(selector)
        if split is not None:
            return self._rank(*split, rasp.is_numerical(expr))
        return self._width(selector, rasp.is_numerical(expr))

    def _width(self, selector, numerical: bool, tolerance: float | None = None) -> Encoded:
        """How many keys the selector picks, per query, from BOS's share of one head.
        BOS weighs n selected keys: its share n / (n + width) keeps adjacent widths about
        1 / (4 n) apart (1 / (width + 1) would leave 1 / n^2), so the table of steps that
        reads it is shallow enough for one MLP at tracr's lengths. `tolerance`: the float32
        error its reader accepts (default CLEAN)."""
        n = self.max_seq_len
        share = self.head(selector, None, 1.0 + math.log(n) / GAIN, np.eye(1))
        widths = list(range(n, -1, -1))
        points = np.array([n / (n + k) for k in widths])
        rows = np.array([[float(k)] for k in widths]) if numerical else np.eye(n + 1)[widths]
        out = self._steps(share, points[::-1], rows[::-1], tolerance)
        return self.encoded(out, numerical, list(range(n + 1)), noisy=True,
                            error=self.table_errors[out])

    def _rank_split(self, selector) -> tuple | None:
        """(x, direction, predicate) where the selector is `Select(k, k, LT / LEQ / GT /
        GEQ)` and k = f(x, indices) orders positions as (x, index) does (direction 1:
        tracr's make_sort key x + min_key i / max_seq_len) or as (x, -index) (direction -1;
        `_lexicographic`): then k_key < k_query is x_key < x_query, or the same x at an
        earlier (later) position, so the width is a few heads over x's few values, not one
        over k's |x| n values (sort at length 50: d_head 150). None otherwise."""
        k = _ordered_by(selector)
        split = None if k is None else self._lexicographic(k)
        return None if split is None else (*split, selector.predicate)

    def _lexicographic(self, k) -> tuple | None:
        """(x, direction) where k = SequenceMap(f, x, indices) (or f(indices, x)) and f is
        strictly increasing in (x, direction * index) order over every pair of values
        (numbers all); else None."""
        if not isinstance(k, rasp.SequenceMap):
            return None
        args = [k.fst, k.snd]
        at = [isinstance(a, rasp.IndicesType) for a in args]
        if at.count(True) != 1:
            return None
        x = args[at.index(False)]
        space = self.sets.of(x)
        if space is None or self.sets.maybe_none(x) or not all(_is_number(v) for v in space):
            return None
        xs = sorted(space, key=float)
        if len(xs) * self.max_seq_len > MAX_MEANS:
            return None
        root = _root(k, self.roots)
        if root is not k:  # k, a function of one root, has few values itself: split only
            ks = set(self.sets.of(k) or ())  # where x has far fewer values
            if len(ks) < max(MIN_SPLIT_KEYS, 3 * len(xs)):
                return None

        def direction() -> int | None:
            outs = np.zeros((len(xs), self.max_seq_len))
            for r, v in enumerate(xs):
                for i in range(self.max_seq_len):
                    o = _apply(k.f, *((v, i) if at[1] else (i, v)))
                    if o is _NONE or not _is_number(o):
                        return None
                    outs[r, i] = float(o)
            for sign in (1, -1):
                order = outs[:, ::sign].ravel()
                if np.all(order[:-1] < order[1:]):
                    return sign
            return None
        sign = self._analysis("lexicographic", k, direction)
        return None if sign is None else (x, sign)

    def _rank(self, x, direction: int, predicate, numerical: bool) -> Encoded:
        """`_rank_split`'s width: keys on the strict side of x (one head), plus the keys of
        the same x on the tie-break's side: up to the query's own position (a causal head
        C, less the query itself where the comparison is strict), or after it (the full
        count E of the same x less C, plus the query itself where not strict; nothing, or
        the query alone, under a causal mask). Where the width is categorical, its one-hot
        is a table of the sum, flat a quarter unit around each whole number: each width may
        then stray RANK_NOISE."""
        n = self.max_seq_len
        tolerance = None if numerical else RANK_NOISE
        below = predicate in (rasp.Comparison.LT, rasp.Comparison.LEQ)
        inclusive = predicate in (rasp.Comparison.LEQ, rasp.Comparison.GEQ)
        strict = self._width(rasp.Select(x, x, rasp.Comparison.LT if below else
                                         rasp.Comparison.GT), True, tolerance)
        same = rasp.Select(x, x, rasp.Comparison.EQ)
        same_upto = rasp.SelectorAnd(same, rasp.Select(rasp.indices, rasp.indices,
                                                       rasp.Comparison.LEQ))
        if below == (direction > 0):  # ties count at earlier positions
            parts = [strict, self._width(same_upto, True, tolerance)]
            weights, bias = [1.0, 1.0], 0.0 if inclusive else -1.0
        elif self.causal:  # no later position is seen
            parts, weights, bias = [strict], [1.0], 1.0 if inclusive else 0.0
        else:
            parts = [strict, self._width(same, True, tolerance),
                     self._width(same_upto, True, tolerance)]
            weights, bias = [1.0, 1.0, -1.0], 1.0 if inclusive else 0.0
        rank = tw.linear(tw.concat(*[p.value for p in parts]), [[w] for w in weights], [bias])
        return self.encoded(rank, True, list(range(1, n + 1)) if inclusive else list(range(n)),
                            noisy=True)
