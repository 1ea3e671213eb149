"""SequenceMaps of numbers read as numbers (`_SumsOfMeans`): a linear map of two numbers, one
mean of a sum where two means share a selector, and a table through a sum a x + b y where the
function depends on that sum alone (cheaper than a table of the pairs)."""

from __future__ import annotations

import itertools

import numpy as np

from twdialect import ops as tw

from tw_frontends.rasp.limits import MAX_MEANS, MAX_SUM_PAIRS, RaspError, rasp
from tw_frontends.rasp.numbers import _NONE, _apply, _call, _is_number, _ordered
from tw_frontends.rasp.nodes import Encoded
from tw_frontends.rasp.built import _through_linear
from tw_frontends.rasp.float32 import _readable, check_output
from tw_frontends.rasp.tables import _Sums, _affine_fit, _steps_cost, _sum_weights
from tw_frontends.rasp.value_sets import same_means


class _SumsOfMeans:
    """SequenceMaps of numbers read as one number."""

    def _linear_of(self, expr) -> tuple | None:
        """(a, b, c, numpy_exact) where SequenceMap `expr` of two numbers is a x + b y + c: a
        LinearSequenceMap, or a SequenceMap whose f is affine over every pair of their values
        (`_affine_fit`: `lambda x, y: x - y` over two means is a linear map, not a table of
        their pairs); None where it is not, or an input may be None (no number carries it).
        Asked of the value sets: nothing is translated to answer."""
        fst, snd, sets = expr.fst, expr.snd, self.sets
        if not rasp.is_numerical(expr) or sets.maybe_none(fst) or sets.maybe_none(snd) or \
                expr.unique_id in self.tabled_sums:
            return None
        numerical = rasp.is_numerical(fst), rasp.is_numerical(snd)
        if isinstance(expr, rasp.LinearSequenceMap):
            return (float(expr.fst_fac), float(expr.snd_fac), 0.0, True) if all(numerical) \
                else None
        if not any(numerical) or fst.unique_id == snd.unique_id:
            return None  # (one-hots: a table of them; one input: a Map of f(x, x))
        return self._analysis("affine", expr,
                              lambda: _affine_fit(expr.f, sets.of(fst), sets.of(snd)))

    def _mean_of_sum(self, expr) -> Encoded | None:
        """An affine SequenceMap a x + b y + c of two numerical means over one selector that
        nothing else reads (make_pair_balance's opens - closes) as one mean, of a u + b v + c
        (u, v what x and y average): one head, not two and a sum of them; None where it
        does not apply."""
        x, y = expr.fst, expr.snd
        if not self._one_mean_of_sum(expr) or expr.unique_id in self.tabled_sums or \
                self.sets.sum_of_means(expr) is None:  # (asked of value sets, before building)
            return None
        us, vs = (self.as_numerical(self.sop(s.sop), s.sop) for s in (x, y))
        if us.maybe_none or vs.maybe_none or not us.space or not vs.space or \
                len(us.space) * len(vs.space) > MAX_MEANS:
            return None  # (None is no number to sum)
        affine = self.sets.sum_of_means(expr)
        if affine is None:
            return None
        if not isinstance(expr, rasp.LinearSequenceMap):
            self.numbered_sums.add(expr.unique_id)
        a, b, c, _ = affine
        (x1, m1, c1), (x2, m2, c2) = _through_linear(us.value), _through_linear(vs.value)
        if x1 is x2:  # (one linear of their common input: the head reads through it)
            value = tw.linear(x1, a * m1 + b * m2, a * c1 + b * c2 + c)
        else:
            value = tw.linear(tw.concat(x1, x2), np.vstack([a * m1, b * m2]),
                              a * c1 + b * c2 + c)
        src = self.encoded(value, True, lambda: _ordered({a * u + b * v + c for u in us.space
                                                          for v in vs.space}),
                           noisy=us.noisy or vs.noisy,
                           error=abs(a) * us.error + abs(b) * vs.error,
                           magnitude=abs(a) * us.magnitude + abs(b) * vs.magnitude + abs(c))
        return self._mean(expr, x.selector, src, _call(expr.f, [self._default(x),
                                                                self._default(y)]),
                          True, None, space=lambda: self.sets.mean_sum_space(expr))

    def _one_mean_of_sum(self, expr) -> bool:
        """Whether SequenceMap `expr` reads two numerical means over one selector that
        nothing else reads (`same_means`): one head may average the sum (`_mean_of_sum`)."""
        return same_means(expr) and self.readers[id(expr.fst)] == 1 and \
            self.readers[id(expr.snd)] == 1

    def _default(self, aggregate) -> float:
        return self._number(aggregate, 0 if aggregate.default is None else aggregate.default)

    def _through_sum(self, expr, fst: Encoded, snd: Encoded) -> Encoded | None:
        """f(x, y) as a table of one number s = a x + b y, where f depends on s alone over
        every value pair (x - y, x + y, an affine f itself) and that table is smaller than
        the pair table, or an input is a one-hot tabled from a number (`sooner`): |X| |Y|
        neurons become a linear map and two neurons a step of s (reverse's `length -
        indices`: 2,550 neurons at length 50 become 198). None where no
        such s is cheaper, or an input may be None (a number cannot carry it)."""
        if fst.maybe_none or snd.maybe_none or fst.space is None or snd.space is None:
            return None
        if len(fst.space) * len(snd.space) > MAX_SUM_PAIRS:
            return None  # (the pair table is refused for its size)
        if not all(_is_number(v) for v in [*fst.space, *snd.space]):
            return None

        # an input tabled from a number (`Encoded.number`) is read as that number: the pair
        # table would wait a sublayer for its one-hot
        sooner = fst.number is not None or snd.number is not None

        def cheaper() -> list:  # [(neurons, a, b, {s: f})], the cheapest first
            pairs = list(itertools.product(fst.space, snd.space))
            outs = [_apply(expr.f, x, y) for x, y in pairs]
            if any(o is _NONE for o in outs):
                return []
            found = []
            sums = _Sums(pairs, outs)
            for a, b in _sum_weights(pairs, outs):
                table = sums.table(a, b)
                if table is None:
                    continue
                cost = _steps_cost(table, rasp.is_numerical(expr))
                if cost < len(pairs) or sooner:
                    found.append((cost, a, b, table))
            return sorted(found, key=lambda option: option[0])  # (stable: the first on a tie)
        options = self._analysis(f"through a sum {sooner}", expr, cheaper)
        if not options:
            return None
        x, y = self.as_numerical(fst, expr.fst), self.as_numerical(snd, expr.snd)
        # the first whose sums float32 tells apart (make_sort's keys x + i / 5: RASP's
        # -3 + 6/5 and -4 + 11/5 are two categories an ulp apart, which only the pairs' table
        # tells apart)
        for _, a, b, table in options:
            if _readable(table, abs(a) * x.error + abs(b) * y.error, rasp.is_numerical(expr)):
                break
        else:
            return None
        s = tw.linear(tw.concat(x.value, y.value), [[a], [b]])
        s_space = list(table)
        s_enc = self.encoded(s, True, s_space, noisy=x.noisy or y.noisy,
                             error=abs(a) * x.error + abs(b) * y.error,
                             magnitude=abs(a) * x.magnitude + abs(b) * y.magnitude)
        out = self._table(expr, s_enc, [table[v] for v in s_space])
        if expr is self.program and out.numerical:
            try:  # (the pairs' table reads each pair's value off its one-hot, exactly)
                check_output(expr, out, self.atol)
            except RaspError:
                return None  # (s and its table are dead code)
        return out
