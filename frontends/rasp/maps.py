"""Map and SequenceMap as tables (`_Maps`: which table a map is, reading through chains of
SequenceMaps and common roots; `_Tables`: the table itself over a one-hot or through a number's
points, and a one-hot of value tuples)."""

from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np

from twdialect import ops as tw
from twdialect.point_tables import emit_steps, interpolation_mlp, measured, step_mlps

from tw_frontends.rasp.limits import MAX_PAIRS, MAX_PAIR_WEIGHTS, MAX_TABLE, RaspError, _label, rasp
from tw_frontends.rasp.numbers import _NONE, _Unsteady, _apply, _ordered
from tw_frontends.rasp.nodes import Encoded, Value
from tw_frontends.rasp.float32 import (_check_gaps, _clustered, _merge_float32, _read_error,
                                       _readable, output_tolerance)
from tw_frontends.rasp.tables import _affine, _one_hot_rows, _tuple_neurons
from tw_frontends.rasp.values import (_at_leaves, _at_root, _composed, _functions_of, _leaf_key,
                                      _leaf_slot, _linear_space, _root)


class _Maps:
    """Which table a Map or SequenceMap is."""

    def _map(self, expr) -> Encoded:
        if self._sum_read_apart(expr):
            self.tabled_sums.add(expr.inner.unique_id)
        fused = self._fused(expr)
        if fused is not None:
            return fused
        inner = self.sop(expr.inner)
        if inner.space is None:
            raise RaspError(f"{_label(expr)}: its input's value set is unknown (too many means "
                            "to enumerate), so the map cannot be tabled")
        if not inner.space:  # RASP's Map of a None is None
            return self.nowhere(rasp.is_numerical(expr))
        if inner.categories is not None:  # a number read off a one-hot: a map of that
            onehot, values = inner.categories
            return self._table(expr, onehot, [_NONE if v is _NONE else _apply(expr.f, v)
                                              for v in values])
        outs = [_apply(expr.f, x) for x in inner.space]
        return self._table(expr, inner, outs)

    def _fused(self, expr) -> Encoded | None:
        """Map(f, S), S a SequenceMap that nothing else reads, as one table of f over the
        value tuples of what S reads (None where that does not apply: S is translated, then
        f's table of its one-hot):
        * where S reads such SequenceMaps that give a value per pair (tuples:
          make_nary_sequencemap's) or more values than a one-hot may hold: they are read
          through, one MLP rather than one a level, and no one-hot of tuples between;
        * where S reads none but gives more values than a one-hot may hold: its pair table
          goes straight to f's values."""
        inner = expr.inner
        if not self._fusable(inner) or _root(inner, self.roots) is not inner:
            return None  # (a SequenceMap of one root is a table over that root's values)
        leaves, compute, values, pairs = self._chain(inner)
        if values is None:
            return None
        if len(leaves) == 2 and leaves[0] is inner.fst and leaves[1] is inner.snd:
            if pairs <= MAX_TABLE or len(values()) <= MAX_TABLE:  # S's one-hot is fine
                return None
            return self.sop(self._analysis("fused", expr, lambda: _composed(expr, inner)))
        parts = [self.as_categorical(self.sop(leaf), leaf) for leaf in leaves]
        if not all(p.space for p in parts):
            return self.nowhere(rasp.is_numerical(expr))

        def f(*values):
            v = compute(values)
            return None if v is None else expr.f(v)
        outs = [_apply(f, *c) for c in itertools.product(*[p.space for p in parts])]
        if len(outs) > MAX_TABLE:
            return self._combo_table(expr, parts, outs)
        return self._table(expr, self.joint(parts, expr)[0], outs)

    def _rooted(self, expr, pairs: int | None = None) -> Encoded | None:
        """SequenceMap `expr` as a table over the values of the one SOp both its inputs are
        Maps and SequenceMaps of (`_root`): f(i, i + 1) over indices is a function of the
        index, n values, not n^2 pairs of one; a categorical root's table is a linear map of
        its one-hot. None where its inputs have no common root, or the root is numerical
        and has more values than the `pairs` of the inputs' value sets (None: not known yet;
        a table of steps over a number costs a neuron a value) or than a one-hot may hold
        (the pair table's limit: a sum of the two may still be read, `_through_sum`)."""
        root = _root(expr, self.roots)
        if root is expr or not self._small_root(root, pairs):
            return None
        enc = self.sop(root)
        if enc.space is None or (enc.numerical and (
                pairs is None or len(enc.space) > min(pairs, MAX_TABLE))):
            return None
        if not enc.space:
            return self.nowhere(rasp.is_numerical(expr))
        return self._table(expr, enc, [_at_root(expr, root, r) for r in enc.space])

    def _small_root(self, root, pairs: int | None) -> bool:
        """Whether `_rooted` may table over the root, asked of its value set before it is
        translated."""
        space = self.sets.of(root)
        return space is not None and not (rasp.is_numerical(root) and (
            pairs is None or len(space) > min(pairs, MAX_TABLE)))

    def _over_leaves(self, expr, pairs: int) -> Encoded | None:
        """SequenceMap `expr` whose inputs are functions of the same two SOps (`_functions_of`:
        f(g(t, i), h(t, i))) as a table over the pairs of those two's values, where they are
        fewer than the `pairs` of its inputs' values; else None."""
        leaves = _functions_of(expr, self.leaf_memo)
        if len(leaves) != 2 or {_leaf_key(expr.fst), _leaf_key(expr.snd)} == set(leaves):
            return None  # (its inputs are the leaves: the plain pair table)
        keys, sops = list(leaves), list(leaves.values())
        spaces = [self.sop(s).space for s in sops]
        if not all(spaces) or len(set(spaces[0])) * len(set(spaces[1])) >= pairs:
            return None  # (before tabling them: a mean's values are many)
        parts = [self.as_categorical(self.sop(s), s) for s in sops]
        if not all(p.space for p in parts):
            return None
        outs = [_at_leaves(expr, {keys[0]: x, keys[1]: y}, {})
                for x, y in itertools.product(parts[0].space, parts[1].space)]
        if len(outs) > MAX_TABLE:
            return self._combo_table(expr, parts, outs)
        return self._table(expr, self.joint(parts, expr)[0], outs)

    def _fusable(self, s) -> bool:
        """Whether s is a SequenceMap of two different SOps that only one expression reads,
        and no linear map of two numbers (cheaper than any table of them)."""
        return type(s) is rasp.SequenceMap and self.readers[id(s)] == 1 and \
            s.fst is not s.snd and not self._is_linear(s)

    def _sum_read_apart(self, expr) -> bool:
        """Whether Map `expr` reads a numerical SequenceMap S of numbers (not yet translated)
        whose value set holds values float32 cannot tell apart that the map sends to
        different results (RASP's -0.5000000000000001 and -0.5 from two value pairs, rounded
        to -1 and 0), or too many steps: S is then a table of its value pairs, not a number
        (the linear map `_linear_of`, a table through its sum `_through_sum`): the map reads
        each pair's own value, exactly."""
        inner = expr.inner
        if type(inner) is not rasp.SequenceMap or inner.unique_id in self.memo or \
                not rasp.is_numerical(inner) or inner.fst is inner.snd or \
                not (rasp.is_numerical(inner.fst) or rasp.is_numerical(inner.snd)):
            return False
        if self._one_mean_of_sum(inner):
            space = self.sets.mean_sum_space(inner)
        else:
            space = _linear_space(self.sets.of(inner.fst), self.sets.of(inner.snd), inner.f)
        if space is None:
            return True
        try:
            outs = [_apply(expr.f, v) for v in space]
        except _Unsteady:
            return True
        if any(o is _NONE for o in outs) or \
                sum(a != b for a, b in zip(outs, outs[1:])) > MAX_TABLE:
            return True
        return not _readable(dict(zip((float(v) for v in space), outs)), 0.0,
                             rasp.is_numerical(expr))

    def _is_linear(self, s) -> bool:
        """Whether SequenceMap s is translated as a linear map of two numbers: one mean of a
        sum (`_mean_of_sum`) or `_linear_of` (asked of value sets)."""
        if not rasp.is_numerical(s) or s.unique_id in self.tabled_sums or \
                not (rasp.is_numerical(s.fst) or rasp.is_numerical(s.snd)):
            return False
        if self._one_mean_of_sum(s):
            return self.sets.sum_of_means(s) is not None
        return self._linear_of(s) is not None

    def _chain(self, s) -> tuple[list, Callable, Callable | None, int]:
        """(leaves, compute, values, pairs) of SequenceMap s: the distinct SOps it reads,
        through every input that `_fusable` allows and that gives a value per pair or more
        values than a one-hot may hold (the others translated, as leaves);
        compute(leaf values) -> s's value (None where an input is None, as RASP gives);
        values() -> s's value set, computed when first asked (None where it is too large to
        enumerate); the value pairs it reads."""
        leaves: list = []
        with tw.annotate(str(s.label)):  # (what translating s would do first)
            reads = [self._read_through(c, leaves) for c in (s.fst, s.snd)]
        if any(space is None for _, space in reads):
            return leaves, None, None, 0
        pairs = len(reads[0][1]) * len(reads[1][1])
        if pairs > MAX_PAIRS:
            return leaves, None, None, pairs
        (first, xs), (second, ys) = reads

        def values() -> set:
            return self._analysis(
                "values", s, lambda: {_apply(s.f, x, y) for x in xs for y in ys} - {_NONE})

        def compute(vals):
            a, b = first(vals), second(vals)
            return None if a is None or b is None else s.f(a, b)
        return leaves, compute, values, pairs

    def _read_through(self, c, leaves: list) -> tuple[Callable, list | None]:
        """(compute, values) of input c of a fused SequenceMap: read through (its leaves
        added to `leaves`) where `_chain` allows, else a leaf (translated)."""
        if self._fusable(c):
            inner_leaves, compute, values, pairs = self._chain(c)
            if values is not None and (len(values()) == pairs or len(values()) > MAX_TABLE):
                at = [_leaf_slot(leaves, leaf) for leaf in inner_leaves]
                return (lambda vals: compute([vals[i] for i in at])), values()
        i = _leaf_slot(leaves, c)
        return (lambda vals: vals[i]), self.sets.of(c)

    def _sequence_map(self, expr) -> Encoded:
        if rasp.is_numerical(expr):
            combined = self._mean_of_sum(expr)
            if combined is not None:
                return combined
        # (a LinearSequenceMap of numbers stays a linear map: heads read its number)
        linear = isinstance(expr, rasp.LinearSequenceMap)
        rooted = None if linear else self._rooted(expr)
        if rooted is not None:
            return rooted
        fst, snd = self.sop(expr.fst), self.sop(expr.snd)
        affine = self._linear_of(expr)
        if affine is not None:
            if not linear:
                self.numbered_sums.add(expr.unique_id)
            return self._affine_map(expr, fst, snd, affine)
        if expr.fst.unique_id == expr.snd.unique_id:  # one input: a Map of f(x, x)
            cat = self.as_categorical(fst, expr)
            return self._table(expr, cat, [_apply(lambda x: expr.f(x, x), v) for v in cat.space])
        # (the pairs as encoded: what a pair table would cost)
        pairs = len(fst.space or ()) * len(snd.space or ())
        rooted = self._rooted(expr, pairs)
        if rooted is not None:  # (a numerical root with fewer values than the pairs)
            return rooted
        through_sum = None if expr.unique_id in self.tabled_sums else \
            self._through_sum(expr, fst, snd)
        if through_sum is not None:
            self.numbered_sums.add(expr.unique_id)
            return through_sum
        over_leaves = self._over_leaves(expr, pairs)
        if over_leaves is not None:
            return over_leaves
        a, b = self.as_categorical(fst, expr.fst), self.as_categorical(snd, expr.snd)
        if not a.space or not b.space:  # RASP's SequenceMap of a None is None
            return self.nowhere(rasp.is_numerical(expr))
        self._check_pairs(expr, len(a.space) * len(b.space), "value pairs")
        outs = [_apply(expr.f, x, y) for x, y in itertools.product(a.space, b.space)]
        if len(outs) > MAX_TABLE:
            return self._combo_table(expr, [a, b], outs)
        return self._table(expr, self.joint([a, b], expr)[0], outs)

    def _affine_map(self, expr, fst: Encoded, snd: Encoded, affine: tuple) -> Encoded:
        """SequenceMap `expr` as a x + b y + c of its inputs (`_linear_of`'s `affine`); read
        off one one-hot where both inputs are (one value a column)."""
        a, b, c, _ = affine
        # (a categorical input of numbers is read as its number: `m + indices`)
        fst, snd = self.as_numerical(fst, expr.fst), self.as_numerical(snd, expr.snd)
        space = lambda: self.sets.means_of_sum(expr) or \
            _linear_space(fst.space, snd.space, expr.f)  # noqa: E731
        none, noisy = fst.maybe_none or snd.maybe_none, fst.noisy or snd.noisy
        bounds = dict(error=abs(a) * fst.error + abs(b) * snd.error,
                      magnitude=abs(a) * fst.magnitude + abs(b) * snd.magnitude + abs(c))
        same = expr.fst.unique_id == expr.snd.unique_id
        value = tw.linear(fst.value, [[a + b]], [c]) if same else \
            tw.linear(tw.concat(fst.value, snd.value), [[a], [b]], [c])
        # both read off one one-hot: the sum is too, one value a column
        one_hot = fst.categories is not None and snd.categories is not None and \
            fst.categories[0].value is snd.categories[0].value
        if not one_hot:
            return self.encoded(value, True, space, none, noisy=noisy, **bounds)
        inner = fst.categories[0]
        outs = [_NONE if _NONE in (x, y) else _apply(expr.f, x, y)
                for x, y in zip(fst.categories[1], snd.categories[1])]
        enc = self.encoded(value, True, _ordered(o for o in outs if o is not _NONE),
                           none or _NONE in outs, noisy=noisy, **bounds)
        enc.categories = (inner, outs)
        return enc


class _Tables:
    """A table over a value set: a one-hot's linear map, steps through a number's points."""

    def _rows(self, expr, outs: list) -> tuple[list, np.ndarray]:
        """(value set, a row per result) of a table giving `outs` (_NONE: None): its number,
        or its one-hot."""
        space = _ordered(o for o in outs if o is not _NONE)
        if rasp.is_numerical(expr):
            return space, np.array([[self._number(expr, o)] if o is not _NONE else [0.0]
                                    for o in outs]).reshape(-1, 1)
        self._check_size(expr, len(space), "output values")
        return space, _one_hot_rows(outs, space, max(1, len(space)))

    def _table(self, expr, inner: Encoded, outs: list) -> Encoded:
        """Map the input's value set through `outs` (one result per value; _NONE where the
        function fails or gives None)."""
        numerical = rasp.is_numerical(expr)
        space, rows = self._rows(expr, outs)
        none = inner.maybe_none or any(o is _NONE for o in outs)
        if not inner.numerical:
            # a categorical map of the tokens reads the embedding's columns for it, where it
            # has them (a number read off the one-hot is left to its readers' narrow reads)
            x, m = (self._token_columns(rows) if inner.value is self.tokens_onehot and
                    not numerical else None) or (inner.value, rows)
            enc = self.encoded(tw.linear(x, m), numerical, space, none,
                               noisy=inner.noisy, error=_read_error(inner.error, rows))
            if numerical:
                enc.categories = (inner, outs)
            return enc
        value, gain, error = self._numeric_table(expr, inner, rows, numerical)
        return self.encoded(value, numerical, space, none, noisy=inner.noisy,
                            error=gain * inner.error + error)

    def _numeric_table(self, expr, inner: Encoded, rows: np.ndarray,
                       numerical: bool) -> tuple[Value, float, float]:
        """(value, gain, error): rows[k] at the input's k-th possible value: a literal for one
        value, else a table of steps (`steps`) through them, exact at each and a quarter gap
        around it (gain 0: an input's error stays behind; error: the table's own), or a line
        (gain: its slope). The program's own numerical output is held to `atol`."""
        points, rows = _merge_float32(expr, [float(x) for x in inner.space], rows)
        if points.size == 1 or not np.any(rows != rows[0]):  # the map is a constant
            return tw.literal(rows[0]), 0.0, 0.0
        line = _affine(points, rows) if numerical else None
        if line is not None:  # a number out, on a line through every point
            return (tw.linear(inner.value, [[line[0]]], [line[1]]), abs(float(line[0])),
                    2.0 ** -23 * float(np.abs(rows).max()))
        self._check_size(expr, int(np.count_nonzero(np.any(rows[1:] != rows[:-1], axis=1))),
                         "steps")
        if inner.error:
            _check_gaps(expr, points, rows, inner.error)
        output = numerical and expr is self.program
        tolerance = output_tolerance(rows, self.atol) if output else None
        line = None if tolerance is None else self._output_line(inner, points, rows)
        if line is not None:
            return line
        out = self._steps(inner.value, points, rows, tolerance)
        return out, 0.0, self.table_errors[out]

    def _output_line(self, inner: Encoded, points: np.ndarray,
                     rows: np.ndarray) -> tuple[Value, float, float] | None:
        """The program's numerical output as a line through every point (`interpolation_mlp`,
        one MLP, a neuron a change of slope) where float32 keeps it within `atol`: its own
        rounding at the points, plus the steepest slope times the input's error (a line
        passes that on where steps would snap it back; the output need not snap, only stay
        within atol). (value, gain, error) as `_numeric_table`'s; None where it does not fit
        (x^2 of a prefix mean of 1..3 at length 30: 556 neurons in one layer, d 4, where steps
        took 1,116 in two, d 560)."""
        gain = float(np.abs(np.diff(rows[:, 0]) / np.diff(points)).max())
        budget = self.atol - gain * inner.error - 2.0 ** -24 * float(np.abs(rows).max())
        if budget <= 0:
            return None
        mlp = interpolation_mlp(points, rows)
        error = measured(points, rows, mlp, budget, perturb=0.0)
        if error is None:
            return None
        return tw.mlp(inner.value, *mlp), gain, error

    def _steps(self, x: Value, points: np.ndarray, rows: np.ndarray, tolerance=None) -> Value:
        """`steps`, remembered (a head may read some columns of it from x instead: `_read`)."""
        plan = step_mlps(points, rows, tolerance)
        out = emit_steps(x, rows, plan)
        self.table_errors[out] = plan.error
        self.tables[out] = (x, points, rows, len(plan))
        return out

    def as_categorical(self, enc: Encoded, expr) -> Encoded:
        """A numerical value as a one-hot over its value set: a linear map of the one-hot it
        was read from (a numerical Map of a categorical SOp: no MLP, and None stays None),
        else a table (exact at each value)."""
        if not enc.numerical:
            return enc
        if enc.space is None:
            raise RaspError(f"{_label(expr)}: a categorical use of a numerical value whose value "
                            "set is unknown (too many means to enumerate)")
        space = _ordered(enc.space)
        if not space:
            return self.nowhere(False)
        if enc.categories is None:  # (a one-hot it was read from tells every value apart)
            space = _clustered(space)
        self._check_size(expr, len(space), "values")
        if enc.categories is not None:  # the one-hot it was read from, columns merged
            inner, outs = enc.categories
            rows = _one_hot_rows(outs, space, len(space))
            return self.encoded(tw.linear(inner.value, rows), False, space, enc.maybe_none,
                                noisy=inner.noisy, error=_read_error(inner.error, rows))
        rows = np.eye(len(space))
        inner = Encoded(enc.value, True, space, enc.bos, noisy=enc.noisy, error=enc.error,
                        _magnitude=enc._magnitude)
        value, _, error = self._numeric_table(expr, inner, rows, False)
        out = self.encoded(value, False, space, noisy=enc.noisy, error=error)
        if space == _ordered(enc.space) and not enc.maybe_none:
            out.number = enc
        return out

    def nowhere(self, numerical: bool) -> Encoded:
        """An SOp that is None at every position (its value set is empty): one zero column,
        as a table of no values has."""
        return self.encoded(tw.literal(np.zeros(1)), numerical, [], True, noisy=False)

    def as_numerical(self, enc: Encoded, expr) -> Encoded:
        """A categorical value as its number (one-hot @ values)."""
        if enc.numerical:
            return enc
        if not enc.space:
            return self.nowhere(True)
        if enc.number is not None:  # (the number it was tabled from)
            return enc.number
        rows = np.array([[self._number(expr, v)] for v in enc.space]).reshape(-1, 1)
        x, w, bias, _ = self._read(enc, rows)
        # (read from the one-hot's own table, or from a table beside it: that table's error)
        error = _read_error(self.table_errors[x], w) if x in self.table_errors else \
            _read_error(enc.error, rows)
        return self.encoded(tw.linear(x, w, bias), True, list(enc.space), enc.maybe_none,
                            noisy=enc.noisy, error=error)

    def _combo_table(self, expr, parts: list[Encoded], outs: list) -> Encoded:
        """`outs` (one result per tuple of the parts' values, in product order) over more
        tuples than a one-hot may hold: one MLP, a neuron per tuple (relu(the sum of its
        columns - (k - 1))) straight to the rows, as tracr's; the tuples' one-hot is never a
        value."""
        sizes = [len(p.space) for p in parts]
        n = math.prod(sizes)
        what = "value pairs" if len(parts) == 2 else "value tuples"
        self._check_pairs(expr, n, what)
        space, rows = self._rows(expr, outs)
        if n * (sum(sizes) + rows.shape[1]) > MAX_PAIR_WEIGHTS:
            raise RaspError(f"{_label(expr)}: a table of {n} {what} to {rows.shape[1]} "
                            f"columns, more than the {MAX_PAIR_WEIGHTS} weights it may hold")
        w1, b1 = _tuple_neurons(sizes)
        h = tw.mlp(tw.concat(*[p.value for p in parts]), w1, b1, rows)
        none = any(p.maybe_none for p in parts) or any(o is _NONE for o in outs)
        return self.encoded(h, rasp.is_numerical(expr), space, none,
                            noisy=any(p.noisy for p in parts))

    @staticmethod
    def _check_pairs(expr, n: int, what: str) -> None:
        """Refuse a table over more than MAX_PAIRS value pairs (or tuples), before its
        function runs on every one."""
        if n > MAX_PAIRS:
            raise RaspError(f"{_label(expr)}: {n} {what}, more than the {MAX_PAIRS} a table "
                            "of them may hold")

    def joint(self, parts: list[Encoded], expr) -> tuple[Encoded, list[tuple]]:
        """One-hot over the tuples of several categorical values: one neuron per tuple,
        relu(sum of the tuple's columns - (k - 1)), 1 exactly where every part is hot."""
        if len(parts) == 1:
            return parts[0], [(v,) for v in parts[0].space]
        sizes = [len(p.space) for p in parts]
        self._check_size(expr, math.prod(sizes), "value combinations")
        w1, b1 = _tuple_neurons(sizes)
        h = tw.mlp(tw.concat(*[p.value for p in parts]), w1, b1, np.eye(w1.shape[1]))
        tuples = list(itertools.product(*[p.space for p in parts]))
        return self.encoded(h, False, tuples, any(p.maybe_none for p in parts),
                            noisy=any(p.noisy for p in parts)), tuples

    def _check_size(self, expr, n: int, what: str) -> None:
        if n > MAX_TABLE:
            raise RaspError(f"{_label(expr)}: {n} {what}, more than the {MAX_TABLE} a table "
                            "may hold")
