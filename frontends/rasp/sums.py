"""SequenceMaps of numbers read as numbers (`_SumsOfMeans`): a linear map of two numbers, one
mean of a sum where two means share a selector, and a table through a sum a x + b y where the
function depends on that sum alone (cheaper than a table of the pairs)."""

from __future__ import annotations

import itertools

import numpy as np

from twdialect import ops as tw

from tw_frontends.rasp.limits import MAX_MEANS, MAX_MEAN_PAIRS, MAX_SUM_PAIRS, RaspError, rasp
from tw_frontends.rasp.numbers import ULP64, _NONE, _apply, _call, _is_number, _near, _ordered
from tw_frontends.rasp.nodes import Encoded
from tw_frontends.rasp.built import _through_linear
from tw_frontends.rasp.float32 import _readable, check_output
from tw_frontends.rasp.tables import _Sums, _affine_fit, _steps_cost, _sum_weights
from tw_frontends.rasp.values import _linear_space, _mean_radius, _same_selector, _sums


class _SumsOfMeans:
    """SequenceMaps of numbers read as one number."""

    def _linear_of(self, expr, fst: Encoded, snd: Encoded) -> tuple | None:
        """(a, b, c, numpy_exact) where SequenceMap `expr` of two numbers is a x + b y + c: a
        LinearSequenceMap, or a SequenceMap whose f is affine over every pair of their values
        (`_affine_fit`: `lambda x, y: x - y` over two means is a linear map, not a table of
        their pairs); None where it is not, or an input may be None (no number carries it)."""
        if not rasp.is_numerical(expr) or fst.maybe_none or snd.maybe_none or \
                expr.unique_id in self.tabled_sums:
            return None
        if isinstance(expr, rasp.LinearSequenceMap):
            return (float(expr.fst_fac), float(expr.snd_fac), 0.0, True) \
                if fst.numerical and snd.numerical else None
        if not (fst.numerical or snd.numerical) or expr.fst.unique_id == expr.snd.unique_id:
            return None  # (one-hots: a table of them; one input: a Map of f(x, x))
        return self._analysis("affine", expr, lambda: _affine_fit(expr.f, fst.space, snd.space))

    def _mean_of_sum(self, expr) -> Encoded | None:
        """An affine SequenceMap a x + b y + c of two numerical means over one selector that
        nothing else reads (make_pair_balance's opens - closes) as one mean, of a u + b v + c
        (u, v what x and y average): one head, not two and a sum of them; None where it
        does not apply."""
        x, y = expr.fst, expr.snd
        if not self._one_mean_of_sum(expr) or expr.unique_id in self.tabled_sums:
            return None
        us, vs = (self.as_numerical(self.sop(s.sop), s.sop) for s in (x, y))
        if us.maybe_none or vs.maybe_none or not us.space or not vs.space or \
                len(us.space) * len(vs.space) > MAX_MEANS:
            return None  # (None is no number to sum)
        affine = self._sum_of_means(expr)
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
                          True, None, space=lambda: self._mean_sum_space(expr))

    def _one_mean_of_sum(self, expr) -> bool:
        """Whether SequenceMap `expr` reads two numerical means over one selector that
        nothing else reads (`_same_means`): one head may average the sum (`_mean_of_sum`)."""
        return self._same_means(expr) and self.readers[id(expr.fst)] == 1 and \
            self.readers[id(expr.snd)] == 1

    def _mean_sum_space(self, expr) -> list | None:
        """The value set of such a sum: the means of the same number of keys where f rounds
        as numpy's (`_means_of_sum`), else f over every pair of the two means' values."""
        return self._means_of_sum(expr) or _linear_space(*self._spaces_of_means(expr), expr.f)

    def _spaces_of_means(self, expr) -> list:
        """The value sets of the two means a SequenceMap reads (`_mean`'s, untranslated)."""
        spaces = [self._mean_values(s.selector, self.as_numerical(self.sop(s.sop), s.sop).space,
                                    self._default(s)) for s in (expr.fst, expr.snd)]
        return [sp() if callable(sp) else sp for sp in spaces]

    def _sum_of_means(self, expr) -> tuple | None:
        """(a, b, c, numpy_exact) where `expr` (two numerical means over one selector) is
        a x + b y + c over every pair of their values (`_linear_of`), else None."""
        if isinstance(expr, rasp.LinearSequenceMap):
            return float(expr.fst_fac), float(expr.snd_fac), 0.0, True
        spaces = self._spaces_of_means(expr)
        if any(sp is None for sp in spaces):
            return None
        return self._analysis("affine means", expr, lambda: _affine_fit(expr.f, *spaces))

    def _same_means(self, expr) -> bool:
        """Whether a SequenceMap reads two numerical means over one selector
        (`_same_selector`): at every position both average the same keys."""
        x, y = expr.fst, expr.snd
        return all(isinstance(s, rasp.Aggregate) and rasp.is_numerical(s) for s in (x, y)) \
            and _same_selector(x.selector, y.selector)

    def _default(self, aggregate) -> float:
        return self._number(aggregate, 0 if aggregate.default is None else aggregate.default)

    def _means_of_sum(self, expr) -> list | None:
        """The value set of an affine SequenceMap f(x, y) = a x + b y + c of two numerical
        means over one selector, where f rounds as numpy's (a x + b y) + c (`_affine_fit`'s
        numpy_exact): f of the means of the same number m of keys, each mean as RASP
        gives it (the sum's exact quotient, rounded once; f in float64 as RASP computes it),
        some n^3 pairs where x's and y's value sets make some n^4 (a million at length 50);
        None where it does not apply, or there are more than MAX_MEAN_PAIRS pairs or
        MAX_MEANS values."""
        if not self._same_means(expr):
            return None
        x, y = expr.fst, expr.snd
        us, vs = (self.sop(s.sop).space for s in (x, y))  # (numbers: checked when translated)
        affine = self._sum_of_means(expr) if us and vs else None
        if affine is None or not affine[3]:
            return None  # (f gives other roundings than numpy's: the pairs' own values)
        a, b, c, _ = affine  # (f is a x + b y + c: as numpy's)
        out = [np.array([_call(expr.f, [self._default(x), self._default(y)])])]
        (dx, x_sums), (dy, y_sums) = _sums(us, self.max_seq_len), _sums(vs, self.max_seq_len)
        pairs = distinct = 0
        for m, (xs, ys) in enumerate(zip(x_sums, y_sums), start=1):
            if xs is None or ys is None:
                return None
            pairs += len(xs) * len(ys)
            if pairs > MAX_MEAN_PAIRS:
                return None
            mx = np.array([sx / (m * dx) for sx in xs])
            my = np.array([sy / (m * dy) for sy in ys])
            out.append(np.unique(a * mx[:, None] + b * my[None, :] + c))
            distinct += out[-1].size
            if distinct > MAX_MEANS:
                return None
        sums = np.unique(np.concatenate(out)).tolist()
        # (RASP's means may sit a little off the quotients where their sums round)
        rx, ry = (_mean_radius(values, self.max_seq_len) for values in (us, vs))
        if rx is None and ry is None:
            return sums
        off = abs(a) * max((rx(q) for q in us), default=0.0) if rx else 0.0
        off += abs(b) * max((ry(q) for q in vs), default=0.0) if ry else 0.0
        return [_near(v, off + ULP64 * abs(v)) for v in sums]

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
