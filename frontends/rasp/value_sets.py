"""The translation's second stage (after `validate.py`): every SOp's value set, computed from
RASP's functions over its inputs' value sets alone, before any tw op is built (tracr's
`basis_inference` in spirit), and the questions about the program that only value sets
answer: whether a selector picks at most one key (`picks_one`), whether a SOp's value fixes
another's (`determines`).

A value set here is what RASP's evaluator may give at an input position (BOS aside), in the
frontend's conventions (`numbers.py`: `_ordered`, a mean's `_Near`): sound, never missing a
value the program can produce, so an answer it supports holds in every input. It may be
wider than the set a translation finally encodes (a numerical map's one-hot that merges what
float32 cannot tell apart), never narrower. None: too many values to enumerate (a
SequenceMap's pairs past MAX_MEANS, a mean's past MAX_MEANS) or a function RASP's values make
jump (`_Unsteady`) or give no value the frontend takes; the translation then finds its own.

One `ValueSets` serves every translation `translate` tries of one program: nothing here
depends on how a translation reads its inputs."""

from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np

from tw_frontends.rasp.limits import MAX_MEANS, MAX_MEAN_PAIRS, MAX_PAIRS, RaspError, _label, rasp
from tw_frontends.rasp.numbers import (ULP64, _NONE, _Near, _Unsteady, _apply, _call, _is_number,
                                       _near, _ordered)
from tw_frontends.rasp.keys import _ranked
from tw_frontends.rasp.nodes import ValueSet
from tw_frontends.rasp.tables import _affine_fit
from tw_frontends.rasp.values import (_at_leaves, _at_root, _functions_of, _linear_space,
                                      _mean_radius, _mean_space, _root, _same_selector,
                                      _selection, _sums, _without_prefix)


class _Questions:
    """What only value sets decide about the program (`ValueSets` computes the sets these
    read through `of`, `spaces` and `maybe_none`, and keeps the answers in `answers`): the
    refusals they show, and whether a selector picks one key or one SOp fixes another."""

    # -- what the value sets show the frontend cannot take -------------------------------
    def problems(self, expr) -> list[str]:
        """The refusal lines the value sets give for `expr`: a numerical SOp that holds a
        non-number; a selector that reads a SOp None at every position (RASP's Select
        raises on a None key or query: the program has no meaning on any input); a map
        that tells a mean's int from the equal float (`_type_sensitive`)."""
        if isinstance(expr, rasp.Select):
            return [f"{_label(s)}: None at every position, read by a selector (RASP's Select "
                    "raises on a None key or query)"
                    for s in _sides_of(expr) if self.of(s) == []]
        if not isinstance(expr, rasp.SOp):
            return []
        typed = self._type_sensitive(expr)
        if typed is not None:
            return [typed]
        if not rasp.is_numerical(expr):
            return []
        values = self._entry(expr).values
        if callable(values):  # (means of numbers, left to enumerate where a table asks)
            return []
        bad = next((v for v in values or () if not _is_number(v)), None)
        return [] if bad is None else \
            [f"{_label(expr)}: a numerical SOp holds {bad!r}, not a finite number"]

    def typed(self, sop) -> bool:
        """Whether RASP may give a whole number of sop's as an int (or bool) at one position
        and as the equal float at another, which its value set cannot tell apart (2 == 2.0):
        an Aggregate of ints or bools, or with such a default, that may select several keys
        (RASP's mean returns the one selected value itself, a float over several) or is
        numerical (its value set holds floats), and a Map or SequenceMap whose function
        gives an int at such an input's int and the equal float at its float (x + 1, not
        x > 1)."""
        key = ("typed", sop.unique_id)
        if key not in self.answers:
            if isinstance(sop, rasp.Aggregate):  # (of one key: the value itself, which a
                # categorical set keeps as it is and a numerical one as a float)
                several = rasp.is_numerical(sop) or not (
                    self.picks_one(sop.selector) or self._selects_none(sop.selector))
                typed = several and \
                    any(_is_int(v) for v in [*(self.of(sop.sop) or ()), sop.default])
            elif isinstance(sop, (rasp.Map, rasp.SequenceMap)):
                forms = self._forms(sop)
                typed = any(_whole(v) for v in self.of(sop) or ()) if forms is None else \
                    any(_alike(x, y) and type(x) is not type(y) for _, _, x, y in forms)
            else:
                typed = False
            self.answers[key] = typed
        return self.answers[key]

    def _type_sensitive(self, expr) -> str | None:
        """The refusal of a Map or SequenceMap whose function gives another value at a whole
        number of a `typed` input than at the equal float (str(2) against str(2.0)), where
        RASP may give either: no table of its values can follow RASP there."""
        if not isinstance(expr, (rasp.Map, rasp.SequenceMap)):
            return None
        for v, form, a, b in self._forms(expr) or ():
            if not _alike(a, b):
                return (f"{_label(expr)}: gives {_shown(a)} at {v!r} and {_shown(b)} at "
                        f"{form!r}, which RASP's Aggregate gives alike (the one selected "
                        "value itself, a float over several): the compiled model could "
                        "differ from RASP")
        return None

    def _forms(self, expr) -> list | None:
        """(v, form, f there, f at form) for each whole value v of a `typed` input of Map or
        SequenceMap `expr` and each of its forms (int, float), the other inputs at each of
        their values; [] where no input is typed, None where the values are unknown or more
        than MAX_PAIRS tuples. A SOp that is both of a SequenceMap's inputs holds one value
        at a position, in one form: f(x, x) is asked at (v, v) only."""
        key = ("forms", expr.unique_id)
        if key not in self.answers:
            inputs = _inputs(expr)
            slots = list(range(len(inputs)))  # (which of `inputs` each argument of f is)
            if len(inputs) == 2 and inputs[0].unique_id == inputs[1].unique_id:
                inputs, slots = inputs[:1], [0, 0]
            typed = [self.typed(s) for s in inputs]
            spaces = self.spaces(*inputs) if any(typed) else []
            if spaces is None or math.prod(map(len, spaces)) > MAX_PAIRS:
                self.answers[key] = None
                return None
            found = []
            for values in itertools.product(*spaces) if spaces else ():
                for i, v in enumerate(values):
                    if typed[i] and _whole(v):
                        a = _call(expr.f, [values[j] for j in slots])
                        found += [(v, form, a, _call(expr.f, [form if j == i else values[j]
                                                             for j in slots]))
                                  for form in (int(v), float(v))]
            self.answers[key] = found
        return self.answers[key]

    def _selects_none(self, selector) -> bool:
        """Whether no query selects any key, in any input: a Select whose predicate holds at
        no pair of its keys' and queries' values, an And with such a side, an Or of such."""
        if isinstance(selector, rasp.SelectorAnd):
            return self._selects_none(selector.fst) or self._selects_none(selector.snd)
        if isinstance(selector, rasp.SelectorOr):
            return self._selects_none(selector.fst) and self._selects_none(selector.snd)
        if not isinstance(selector, rasp.Select):
            return False
        try:
            pred = self._selection(selector)
        except _Unsteady:
            return False
        return pred is not None and not np.any(pred)

    def _selection(self, select):
        """A Select's predicate over its queries' (rows) and keys' value sets, None where
        they are unknown (`_selection`; `_Unsteady` where a mean's round-off moves it)."""
        spaces = self.spaces(select.keys, select.queries)
        if spaces is None:
            return None
        return _selection(select, [(k,) for k in spaces[0]], [(q,) for q in spaces[1]],
                          {select.keys.unique_id: 0}, {select.queries.unique_id: 0})

    # -- questions only value sets answer ----------------------------------------------
    def picks_one(self, selector) -> bool:
        """Whether every query selects at most one key position in any input (its mean is
        then one of the values, not any mean of them): a Select whose keys hold distinct
        values at distinct positions (`unique`) and whose predicate picks at most one key
        value per query value (EQ: shift_by's and reverse's `indices == f(indices)`), or an
        And with such a side."""
        selector, _ = _without_prefix(selector)
        if isinstance(selector, rasp.SelectorAnd):
            return self.picks_one(selector.fst) or self.picks_one(selector.snd)
        if not isinstance(selector, rasp.Select) or not self.unique(selector.keys):
            return False
        if selector.predicate is rasp.Comparison.EQ:
            return True
        pred = self._selection(selector)
        return pred is not None and bool(np.all(pred.sum(axis=1) <= 1))

    def always_selects(self, selector) -> bool:
        """Whether every query selects some key in every input (an Aggregate over it never
        gives its default): every query its own position (`_selects_self`), or a key value
        every input holds at a position every query sees (indices' 0, a Full's value) that
        the predicate selects for each query value; an Or with such a side."""
        if _selects_self(selector) is True:
            return True
        if isinstance(selector, rasp.SelectorOr):
            return self.always_selects(selector.fst) or self.always_selects(selector.snd)
        if not isinstance(selector, rasp.Select):
            return False
        keys = selector.keys
        present = [0] if isinstance(keys, rasp.IndicesType) else \
            [keys.fill] if isinstance(keys, rasp.Full) else []
        queries = self.of(selector.queries)
        if not present or not queries:
            return False
        try:
            pred = _selection(selector, [(k,) for k in present], [(q,) for q in queries],
                              {keys.unique_id: 0}, {selector.queries.unique_id: 0})
        except _Unsteady:
            return False
        return pred is not None and bool(np.all(pred.any(axis=1)))

    def one_key(self, selector) -> bool:
        """Whether every query selects at most one key position (`picks_one`, or one
        position in all): a mean over it is one of the values."""
        return self.max_seq_len == 1 or self.picks_one(selector)

    def unique(self, a) -> bool:
        """Whether SOp a holds distinct values at distinct positions of any input: indices,
        an injective map of such, a SequenceMap whose value fixes the argument that is such
        (sort's key x + i / n), the rank of such (`_ranked`). Full attention only (a causal
        model's rank counts only the keys before)."""
        if isinstance(a, rasp.IndicesType):
            return True
        if isinstance(a, rasp.Map):
            return self.injective(a) and self.unique(a.inner)
        if isinstance(a, rasp.SequenceMap):
            return any(self.unique(arg) and self.fixes(a, slot)
                       for slot, arg in enumerate((a.fst, a.snd)))
        k = None if self.causal else _ranked(a)
        return k is not None and self.unique(k)

    def determines(self, a, b) -> bool:
        """Whether SOp a's value at a position fixes SOp b's there, in every input (so keys
        of one a-value hold one b-value): b is a, a constant or a map of what a determines;
        a holds distinct values at distinct positions (`unique`), is an injective map of
        what determines b, or counts the keys below (above) its own in a strict order of k
        (a rank: a larger k has a larger rank), k determining b."""
        if a.unique_id == b.unique_id or isinstance(b, rasp.Full) or self.unique(a):
            return True
        if isinstance(b, rasp.Map):
            return self.determines(a, b.inner)
        if isinstance(b, rasp.SequenceMap):
            return self.determines(a, b.fst) and self.determines(a, b.snd)
        if isinstance(a, rasp.Map) and self.injective(a):
            return self.determines(a.inner, b)
        k = None if self.causal else _ranked(a)
        return k is not None and self.determines(k, b)

    def injective(self, m) -> bool:
        """Whether Map m gives distinct values for distinct values of its input (never None)."""
        def injective(spaces) -> bool:
            outs = [_apply(m.f, v) for v in spaces[0]]
            return _NONE not in outs and len(set(outs)) == len(outs)
        return self._answer("injective", m, [m.inner], injective)

    def fixes(self, m, slot: int) -> bool:
        """Whether SequenceMap m's value fixes its argument `slot` (0: fst) over every pair."""
        def fixes(spaces) -> bool:
            seen: dict = {}
            for pair in itertools.product(*spaces):
                out = _apply(m.f, *pair)
                if out is _NONE or seen.setdefault(out, pair[slot]) != pair[slot]:
                    return False
            return True
        return self._answer(f"fixes {slot}", m, [m.fst, m.snd], fixes)

    def _answer(self, kind: str, expr, inputs: list, compute: Callable[[list], bool]) -> bool:
        """compute(the inputs' value sets), once per (kind, expr); False where one is unknown
        or a function jumps within a value's float64 round-off."""
        key = (kind, expr.unique_id)
        if key not in self.answers:
            spaces = self.spaces(*inputs)
            try:
                self.answers[key] = spaces is not None and compute(spaces)
            except _Unsteady:
                self.answers[key] = False
        return self.answers[key]


class ValueSets(_Questions):
    """The value sets of one program's SOps at one vocabulary and length, computed when
    first asked (children before readers: each from its inputs' sets), and answers that
    only they decide."""

    def __init__(self, vocab: list, max_seq_len: int, causal: bool):
        self.vocab, self.max_seq_len, self.causal = list(vocab), max_seq_len, causal
        # unique_id -> (values or a function giving them, maybe None)
        self.sets: dict[int, ValueSet] = {}
        self.roots: dict = {}  # `_root`'s answers
        self.leaves: dict = {}  # `_functions_of`'s
        self.answers: dict = {}  # (question, ids) -> bool

    # -- value sets ------------------------------------------------------------------
    def of(self, sop) -> list | None:
        """SOp's value set (None: unknown, too many); a mean's enumerated when first asked."""
        entry = self._entry(sop)
        if callable(entry.values):
            entry.values = entry.values()
        return entry.values

    def maybe_none(self, sop) -> bool:
        """Whether RASP may give None at some position (a map that fails, an Aggregate that
        selects nothing with no default)."""
        return self._entry(sop).maybe_none

    def spaces(self, *sops) -> list | None:
        """The sops' value sets, None where one is unknown or their tuples exceed MAX_MEANS."""
        spaces = [self.of(s) for s in sops]
        if any(sp is None for sp in spaces) or math.prod(len(sp) for sp in spaces) > MAX_MEANS:
            return None
        return spaces

    def _entry(self, sop) -> ValueSet:
        key = sop.unique_id
        if key not in self.sets:
            for expr in _operands_first(sop, self.sets):
                try:
                    self.sets[expr.unique_id] = ValueSet(*self._computed(expr))
                except (RaspError, _Unsteady):  # (the translation names it, where it matters)
                    self.sets[expr.unique_id] = ValueSet(None, True)
        return self.sets[key]

    def _computed(self, expr) -> tuple[list | None, bool]:
        n = self.max_seq_len
        if isinstance(expr, rasp.TokensType):
            return list(self.vocab), False
        if isinstance(expr, rasp.IndicesType):
            return list(range(n)), False
        if isinstance(expr, rasp.LengthType):
            return list(range(1, n + 1)), False
        if isinstance(expr, rasp.Full):
            return [expr.fill], expr.fill is None
        if isinstance(expr, rasp.ConstantSOp):
            values = list(expr.value)
            return _ordered(v for v in values if v is not None), \
                len(values) < n or None in values
        if isinstance(expr, rasp.SelectorWidth):  # (a query that selects itself: 1 or more;
            # one that never does: at most n - 1)
            itself = _selects_self(expr.selector)
            low, high = int(itself is True), n - int(itself is False)
            return list(range(low, high + 1)), False
        if isinstance(expr, rasp.Aggregate):
            return self._aggregated(expr)
        if isinstance(expr, (rasp.Map, rasp.SequenceMap)):
            return self._mapped(expr)
        return None, True  # (a class validate.py refuses)

    def _mapped(self, expr) -> tuple[list | None, bool]:
        """A Map's values: its function over its input's. A SequenceMap's: its function over
        the values of the one SOp it is a function of (`_root`) where there is one, else over
        the value tuples of the SOps its inputs are functions of (`_functions_of`) where they
        are fewer than its inputs' pairs, else over those pairs. A function of a root or of
        leaves is evaluated through every expression between (MAX_PAIRS values at most: each
        costs a walk), a function of two inputs once a pair (MAX_MEANS)."""
        if isinstance(expr, rasp.Map):
            values = self.of(expr.inner)
            return (None, True) if values is None else \
                _kept([_apply(expr.f, v) for v in values], self.maybe_none(expr.inner))
        means = self.means_of_sum(expr)
        if means is not None:  # (two means of one selector average the same keys)
            return means, False
        root = _root(expr, self.roots)
        if root is not expr and self.of(root) is not None and len(self.of(root)) <= MAX_PAIRS:
            outs = [_at_root(expr, root, r) for r in self.of(root)]
            return _kept(outs, self.maybe_none(root))
        spaces = self.spaces(expr.fst, expr.snd)
        leaves = _functions_of(expr, self.leaves)
        over = self.spaces(*leaves.values())
        if over is not None and math.prod(map(len, over)) <= MAX_PAIRS and \
                (spaces is None or math.prod(map(len, over)) < math.prod(map(len, spaces))):
            # (f(g(t, i), h(t, i)) over the pairs of t's and i's values, fewer than the pairs
            # of g's and h's)
            keys = list(leaves)
            outs = [_at_leaves(expr, dict(zip(keys, values)), {})
                    for values in itertools.product(*over)]
            return _kept(outs, any(self.maybe_none(s) for s in leaves.values()))
        if spaces is None:
            return None, True
        outs = [_apply(expr.f, *args) for args in itertools.product(*spaces)]
        return _kept(outs, self.maybe_none(expr.fst) or self.maybe_none(expr.snd))

    def _aggregated(self, expr) -> tuple[list | None, bool]:
        """An Aggregate's values: a numerical mean's every mean of its source's values and
        the default (one of them where the selector picks at most one key), a categorical
        one its source's values and the default; None where nothing is selected and the
        default is None."""
        values, default = self.of(expr.sop), expr.default
        none = default is None or self.maybe_none(expr.sop)
        if not (rasp.is_numerical(expr) or rasp.is_numerical(expr.sop)):
            if self.always_selects(expr.selector):  # (the default is never given)
                return (None if values is None else list(values)), self.maybe_none(expr.sop)
            return (None if values is None else
                    _ordered([*values, *([] if default is None else [default])])), none
        if values is not None and not all(_is_number(v) for v in values) or \
                not _is_number(0 if default is None else default):
            return values, none  # (no mean of these: `problems` names the SOp)
        d = 0.0 if default is None else float(default)
        if values is not None and self.one_key(expr.selector):
            return _ordered({v if type(v) is _Near else float(v) for v in values} | {d}), none
        return (lambda: _mean_space(values, self.max_seq_len, d)), none

    # -- sums of two means of one selector ---------------------------------------------
    def sum_of_means(self, expr) -> tuple | None:
        """(a, b, c, numpy_exact) where SequenceMap `expr` of two numerical means over one
        selector is a x + b y + c over every pair of their values (`_affine_fit`), else
        None."""
        if isinstance(expr, rasp.LinearSequenceMap):
            return float(expr.fst_fac), float(expr.snd_fac), 0.0, True
        key = ("affine means", expr.unique_id)
        if key not in self.answers:
            spaces = [self.of(expr.fst), self.of(expr.snd)]
            self.answers[key] = None if any(sp is None for sp in spaces) else \
                _affine_fit(expr.f, *spaces)
        return self.answers[key]

    def mean_sum_space(self, expr) -> list | None:
        """The value set of such a sum: the means of the same number of keys where f rounds
        as numpy's (`means_of_sum`), else f over every pair of the two means' values."""
        return self.means_of_sum(expr) or \
            _linear_space(self.of(expr.fst), self.of(expr.snd), expr.f)

    def means_of_sum(self, expr) -> list | None:
        """The value set of an affine SequenceMap f(x, y) = a x + b y + c of two numerical
        means over one selector, where f rounds as numpy's (a x + b y) + c (`_affine_fit`'s
        numpy_exact): f of the means of the same number m of keys, each mean as RASP
        gives it (the sum's exact quotient, rounded once; f in float64 as RASP computes it),
        some n^3 pairs where x's and y's value sets make some n^4 (a million at length 50);
        None where it does not apply, or there are more than MAX_MEAN_PAIRS pairs or
        MAX_MEANS values."""
        if not same_means(expr) or not all(
                _is_number(0 if s.default is None else s.default) for s in (expr.fst, expr.snd)):
            return None
        x, y = expr.fst, expr.snd
        us, vs = self.of(x.sop), self.of(y.sop)
        affine = self.sum_of_means(expr) if us and vs else None
        if affine is None or not affine[3] or not all(_is_number(v) for v in [*us, *vs]):
            return None  # (f gives other roundings than numpy's: the pairs' own values)
        a, b, c, _ = affine  # (f is a x + b y + c: as numpy's)
        out = [np.array([_call(expr.f, [_default(x), _default(y)])])]
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

def same_means(expr) -> bool:
    """Whether a SequenceMap reads two numerical means over one selector
    (`_same_selector`): at every position both average the same keys."""
    x, y = expr.fst, expr.snd
    return all(isinstance(s, rasp.Aggregate) and rasp.is_numerical(s) for s in (x, y)) \
        and _same_selector(x.selector, y.selector)


def _default(aggregate) -> float:
    """A numerical Aggregate's default as a number (None: 0)."""
    return float(0 if aggregate.default is None else aggregate.default)


def _selects_self(selector) -> bool | None:
    """True where every query selects its own position (a comparison that holds between
    equal values, EQ, LEQ, GEQ, of one SOp's keys and queries; TRUE of any), False where no
    query does (LT, GT, NEQ of one SOp; FALSE), None where it depends; through And, Or and
    Not."""
    if isinstance(selector, rasp.SelectorNot):
        inner = _selects_self(selector.inner)
        return None if inner is None else not inner
    if isinstance(selector, (rasp.SelectorAnd, rasp.SelectorOr)):
        sides = {_selects_self(selector.fst), _selects_self(selector.snd)}
        decisive = isinstance(selector, rasp.SelectorOr)  # (Or: one True is; And: one False)
        if decisive in sides:
            return decisive
        return (not decisive) if sides == {not decisive} else None
    if not isinstance(selector, rasp.Select):
        return None
    c = rasp.Comparison
    if selector.predicate in (c.TRUE, c.FALSE):
        return selector.predicate is c.TRUE
    if selector.keys.unique_id != selector.queries.unique_id:
        return None
    return True if selector.predicate in (c.EQ, c.LEQ, c.GEQ) else \
        False if selector.predicate in (c.LT, c.GT, c.NEQ) else None


def _inputs(expr) -> list:
    return [expr.inner] if isinstance(expr, rasp.Map) else [expr.fst, expr.snd]


def _is_int(v) -> bool:
    """An int or bool (numpy's too): a number RASP's mean of one key returns as it is."""
    return isinstance(v, (bool, int, np.integer)) and not isinstance(v, float)


def _whole(v) -> bool:
    return _is_number(v) and float(v).is_integer()


def _alike(a, b) -> bool:
    """Whether two results of a function are one value as RASP's later readers see it:
    equal (3 and 3.0 are: a number stays `typed`), both None or failed."""
    if a is _NONE or b is _NONE:
        return a is b
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - a value that compares oddly is not alike
        return False


def _shown(v) -> str:
    return "None" if v is _NONE else repr(v)


def _sides_of(select) -> list:
    """A Select's keys and queries, once each."""
    return [select.keys] if select.keys.unique_id == select.queries.unique_id else \
        [select.keys, select.queries]


def _kept(outs: list, none: bool) -> tuple[list, bool]:
    """(the values of `outs` but None, whether None is among them or came in)."""
    return _ordered(o for o in outs if o is not _NONE), none or any(o is _NONE for o in outs)


def _operands_first(sop, done: dict) -> list:
    """The SOps `sop` reads (through selectors too) not yet in `done`, children before
    their readers, `sop` last (an explicit stack: programs run thousands of expressions
    deep)."""
    order, seen, stack = [], set(), [(sop, False)]
    while stack:
        expr, expanded = stack.pop()
        if expanded:
            if isinstance(expr, rasp.SOp):
                order.append(expr)
            continue
        if id(expr) in seen or (isinstance(expr, rasp.SOp) and expr.unique_id in done):
            continue
        seen.add(id(expr))
        stack.append((expr, True))
        stack.extend((c, False) for c in reversed(list(getattr(expr, "children", ()))))
    return order
