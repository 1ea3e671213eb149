"""The value-set stage's pure functions: which SOp an expression is a function of (`_root`,
`_functions_of`), what a selector compares (`_selection`, `_tree`, `_compared`), and the values a
mean or a sum of numbers can take (`_sums`, `_means`, `_linear_space`), computed from RASP's
own functions over value sets, never by building ops."""

from __future__ import annotations

import functools
import math
from collections import Counter
from fractions import Fraction
from typing import Callable, Iterator

import numpy as np

from tw_frontends.rasp.limits import MAX_MEANS, MAX_SUM_WORK, _label, rasp
from tw_frontends.rasp.numbers import (ULP64, _NONE, _Near, _Unsteady, _apply, _is_number, _near,
                                       _ordered, _radius)


def _readers(program) -> Counter:
    """How many expressions read each expression of the program, by id() (a RASP
    expression's unique_id is drawn when first asked, and names it: a walk here must not
    renumber the program's labels)."""
    readers: Counter = Counter()
    seen, stack = {id(program)}, [program]
    while stack:
        expr = stack.pop()
        for child in expr.children:
            readers[id(child)] += 1
            if id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return readers


def _leaf_slot(leaves: list, sop) -> int:
    """sop's index in `leaves`, appended where it is not there yet (by identity)."""
    for i, other in enumerate(leaves):
        if other is sop:
            return i
    leaves.append(sop)
    return len(leaves) - 1


def _root(s, memo: dict | None = None):
    """The one SOp that s is a function of through Maps and SequenceMaps (constants `Full`
    fit any): tokens or indices (their canonical, categorical objects) or another SOp;
    s itself where its inputs have no common root. (`memo`: answers by unique_id, shared
    by the calls of one translation: a program's SOps form a DAG.)"""
    found = _root_or_constant(s, {} if memo is None else memo)
    return s if found is None else found


def _root_or_constant(s, memo: dict):
    """`_root`, or None for a constant (a Full, or Maps of one)."""
    if s.unique_id in memo:
        return memo[s.unique_id]
    if isinstance(s, rasp.TokensType):
        found = rasp.tokens
    elif isinstance(s, rasp.IndicesType):
        found = rasp.indices
    elif isinstance(s, rasp.Full):
        found = None
    elif isinstance(s, rasp.Map):
        found = _root_or_constant(s.inner, memo)
    elif isinstance(s, rasp.SequenceMap):
        a, b = _root_or_constant(s.fst, memo), _root_or_constant(s.snd, memo)
        found = a if b is None else b if a is None or _same_sop(a, b) else s
    else:
        found = s
    memo[s.unique_id] = found
    return found


def _same_sop(a, b) -> bool:
    return a is b or a.unique_id == b.unique_id


def _at_root(s, root, r, memo: dict | None = None):
    """s's value where its root (`_root`) holds r, as RASP's evaluator gives it (None passes
    on; _NONE where a function raises or gives None). `memo`: values by unique_id, for this
    r."""
    return _at_leaves(s, {_leaf_key(root): r}, {} if memo is None else memo)


def _leaf_key(s):
    """What identifies a leaf of `_functions_of`: tokens and indices by kind (every annotated copy
    is one), any other SOp by its unique_id."""
    if isinstance(s, rasp.TokensType):
        return "tokens"
    if isinstance(s, rasp.IndicesType):
        return "indices"
    return s.unique_id


def _functions_of(s, memo: dict) -> dict:
    """The SOps s is a function of through Maps and SequenceMaps, by `_leaf_key` (constants
    `Full` are none; tokens and indices their canonical objects). `memo`: by unique_id."""
    if s.unique_id not in memo:
        if isinstance(s, rasp.TokensType):
            found = {"tokens": rasp.tokens}
        elif isinstance(s, rasp.IndicesType):
            found = {"indices": rasp.indices}
        elif isinstance(s, rasp.Full):
            found = {}
        elif isinstance(s, rasp.Map):
            found = _functions_of(s.inner, memo)
        elif isinstance(s, rasp.SequenceMap):
            found = {**_functions_of(s.fst, memo), **_functions_of(s.snd, memo)}
        else:
            found = {s.unique_id: s}
        memo[s.unique_id] = found
    return memo[s.unique_id]


def _at_leaves(s, values: dict, memo: dict):
    """s's value where its leaves hold `values` (by `_leaf_key`), as `_at_root`."""
    if s.unique_id in memo:
        return memo[s.unique_id]
    key = _leaf_key(s)
    if key in values:
        v = values[key]
    elif isinstance(s, rasp.Full):
        v = s.fill
    elif isinstance(s, rasp.Map):
        x = _at_leaves(s.inner, values, memo)
        v = _NONE if x is _NONE else _apply(s.f, x)
    else:
        a, b = _at_leaves(s.fst, values, memo), _at_leaves(s.snd, values, memo)
        v = _NONE if a is _NONE or b is _NONE else _apply(s.f, a, b)
    memo[s.unique_id] = v
    return v


def _tuple_at_root(sops: list, root, r):
    """The tuple of the sops' values where their root holds r (_NONE where one is None)."""
    memo: dict = {}
    values = tuple(_at_root(s, root, r, memo) for s in sops)
    return _NONE if any(v is _NONE for v in values) else values


def _composed(m, s):
    """Map m of SequenceMap s as one SequenceMap (m's label and encoding): None where s
    gives None, as RASP's Map passes None on."""
    f, g = m.f, s.f

    def h(x, y):
        v = g(x, y)
        return None if v is None else f(v)
    fused = rasp.SequenceMap(h, s.fst, s.snd).named(m.label)
    return rasp.numerical(fused) if rasp.is_numerical(m) else rasp.categorical(fused)


def _mean_radius(values, n: int) -> Callable[[float], float] | None:
    """How far RASP's float64 mean of at most n of `values` may sit from the exact quotient
    (rounded once), per mean q: None where every partial sum is exact (integers, halves,
    0/1: the quotient is RASP's). Each addition rounds by an ulp of its partial sum, which
    for values of one sign is at most the whole sum (m q), else m times the largest |value|;
    twice that, as the bound."""
    vals, common = _fractions(values)
    if not vals:
        return None
    largest = max(abs(v) for v in vals)
    if largest * common * n < 2 ** 53:
        return None
    if min(vals) < 0 < max(vals):
        radius = ULP64 * n * float(largest)
        return lambda q: radius
    return lambda q: ULP64 * n * abs(q)


def _is_prefix(selector) -> bool:
    """Whether the selector is `Select(indices, indices, LEQ)`: key <= query, every position
    up to the query's own, which a causal mask gives for nothing."""
    return isinstance(selector, rasp.Select) and \
        isinstance(selector.keys, rasp.IndicesType) and \
        isinstance(selector.queries, rasp.IndicesType) and \
        selector.predicate is rasp.Comparison.LEQ


def _without_prefix(selector) -> tuple:
    """(rest, True) where the selector is `indices <= indices`, alone or as a conjunct of an
    And chain: a causal head then needs only the rest (TRUE where nothing is left: every
    token), and its keys and queries need no one-hot of the indices (frac_prevs: d_head 8,
    not 64, at length 50). Else (selector, False)."""
    if _is_prefix(selector):
        return rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE), True
    if isinstance(selector, rasp.SelectorAnd):
        for part, other in ((selector.fst, selector.snd), (selector.snd, selector.fst)):
            rest, prefix = _without_prefix(part)
            if prefix:
                return (other if _is_prefix(part) else rasp.SelectorAnd(rest, other)), True
    return selector, False


def _conjuncts(selector) -> list:
    """The selectors an And chain joins (the selector itself where it is no And)."""
    if isinstance(selector, rasp.SelectorAnd):
        return _conjuncts(selector.fst) + _conjuncts(selector.snd)
    return [selector]


def _leaves(selector) -> list:
    if isinstance(selector, (rasp.Select, rasp.ConstantSelector)):
        return [selector]
    if isinstance(selector, (rasp.SelectorAnd, rasp.SelectorOr)):
        return _leaves(selector.fst) + _leaves(selector.snd)
    if isinstance(selector, rasp.SelectorNot):
        return _leaves(selector.inner)
    raise AssertionError(f"{_label(selector)}: validate.py admits only the selectors above")


# numpy's comparison of a Comparison's two number vectors (key first, as RASP's)
_VECTOR_COMPARISONS = {"EQ": np.equal, "LT": np.less, "LEQ": np.less_equal,
                       "GT": np.greater, "GEQ": np.greater_equal, "NEQ": np.not_equal}


def _selection(selector, k_tuples: list, q_tuples: list, k_slot: dict, q_slot: dict
               ) -> np.ndarray:
    """(queries, keys) 1.0 where the selector holds (`_selected` at every pair, with a
    Comparison between numbers compared as whole vectors: sort_freq at length 50 weighs
    2,550 x 2,550 pairs); a predicate that raises at a pair (one the program never meets:
    the evaluator would raise too) selects nothing there, short-circuits included."""
    held, raised = _tree(selector, k_tuples, q_tuples, k_slot, q_slot)
    return (held & ~raised).astype(np.float64)


def _tree(selector, k_tuples, q_tuples, k_slot, q_slot) -> tuple[np.ndarray, np.ndarray]:
    """(held, raised) of a selector tree over every (query, key) pair; `raised` marks pairs
    where evaluating it (left to right, short-circuiting as Python does) raised."""
    if isinstance(selector, (rasp.SelectorAnd, rasp.SelectorOr)):
        a = _tree(selector.fst, k_tuples, q_tuples, k_slot, q_slot)
        b = _tree(selector.snd, k_tuples, q_tuples, k_slot, q_slot)
        if isinstance(selector, rasp.SelectorAnd):  # b is read only where a holds
            return a[0] & b[0], a[1] | (a[0] & b[1])
        return a[0] | b[0], a[1] | (~a[0] & b[1])  # Or: b is read only where a fails
    if isinstance(selector, rasp.SelectorNot):
        held, raised = _tree(selector.inner, k_tuples, q_tuples, k_slot, q_slot)
        return ~held, raised
    vector = _compared(selector, k_tuples, q_tuples, k_slot, q_slot)
    if vector is not None:
        return vector, np.zeros_like(vector)
    held = np.zeros((len(q_tuples), len(k_tuples)), dtype=bool)
    raised = np.zeros_like(held)
    for a, qt in enumerate(q_tuples):
        for b, kt in enumerate(k_tuples):
            try:
                held[a, b] = bool(_selected(selector, kt, qt, k_slot, q_slot))
            except _Unsteady:
                raise
            except Exception:  # noqa: BLE001 - the user's predicate, on a pair it cannot read
                raised[a, b] = True
    return held, raised


def _compared(selector, k_tuples, q_tuples, k_slot, q_slot) -> np.ndarray | None:
    """A Select whose predicate is a Comparison between numbers, as a whole boolean matrix
    (None otherwise: the caller asks the predicate pair by pair)."""
    if not isinstance(selector, rasp.Select) or \
            not isinstance(selector.predicate, rasp.Comparison):
        return None
    keys = [kt[k_slot[selector.keys.unique_id]] for kt in k_tuples]
    queries = [qt[q_slot[selector.queries.unique_id]] for qt in q_tuples]
    name = selector.predicate.name
    if name in ("TRUE", "FALSE"):
        return np.full((len(queries), len(keys)), name == "TRUE")
    if name not in _VECTOR_COMPARISONS or not all(
            _is_number(v) and abs(float(v)) < 2 ** 52 for v in [*keys, *queries]):
        return None
    k = np.array([float(v) for v in keys])
    q = np.array([float(v) for v in queries])
    held = _VECTOR_COMPARISONS[name](k[None, :], q[:, None])
    rk = np.array([_radius(v) for v in keys])
    rq = np.array([_radius(v) for v in queries])
    if rk.any() or rq.any():  # a comparison flips only where the two may meet
        reach = rk[None, :] + rq[:, None]
        close = (reach > 0) & (np.abs(k[None, :] - q[:, None]) <= reach)
        if close.any():
            a, b = np.argwhere(close)[0]
            raise _Unsteady(float(k[b]), float(reach[a, b]), bool(held[a, b]), float(q[a]),
                            not held[a, b])
    return held


def _selected(selector, kt: tuple, qt: tuple, k_slot: dict, q_slot: dict) -> bool:
    """The selector tree at one (key tuple, query tuple)."""
    if isinstance(selector, rasp.Select):
        k = kt[k_slot[selector.keys.unique_id]]
        q = qt[q_slot[selector.queries.unique_id]]
        if type(k) is _Near or type(q) is _Near:  # (asked at their radii's ends too)
            held = _apply(lambda x, y: bool(selector.predicate(x, y)), k, q)
            if held is _NONE:
                raise ValueError("the predicate raised")
            return held
        return bool(selector.predicate(k, q))
    if isinstance(selector, rasp.ConstantSelector):
        i = rasp.indices.unique_id
        q, k = qt[q_slot[i]], kt[k_slot[i]]
        rows = selector.value
        return q < len(rows) and k < len(rows[q]) and bool(rows[q][k])
    if isinstance(selector, rasp.SelectorAnd):
        return _selected(selector.fst, kt, qt, k_slot, q_slot) and \
            _selected(selector.snd, kt, qt, k_slot, q_slot)
    if isinstance(selector, rasp.SelectorOr):
        return _selected(selector.fst, kt, qt, k_slot, q_slot) or \
            _selected(selector.snd, kt, qt, k_slot, q_slot)
    return not _selected(selector.inner, kt, qt, k_slot, q_slot)


def _fractions(values) -> tuple[list[Fraction], int]:
    """The distinct values exactly (sorted), and their common denominator."""
    vals = _exactly(values)
    return vals, math.lcm(*[v.denominator for v in vals])


def _exactly(values) -> list[Fraction]:
    """The distinct values as exact fractions, sorted (as floats: their order, without
    comparing fractions, seconds for some 10^5 of them)."""
    return [Fraction(f) for f in sorted({float(v) for v in values})]


def _sums(values, n: int) -> tuple[int, Iterator]:
    """(D, per m = 1..n the distinct sums of m of `values` with repeats), exactly: the values as
    integers over their common denominator D, a sum s standing for s / D; None (and no more)
    once there are more than MAX_MEANS of them, or the next set would take more than
    MAX_SUM_WORK additions."""
    vals, common = _fractions(values)
    ints = [v.numerator * (common // v.denominator) for v in vals]

    def per_count():
        if max(map(abs, ints), default=0) * n < 1 << 62:  # int64 holds every sum: numpy's
            steps = np.array(ints, dtype=np.int64)  # (distinct: `_fractions`)
            sums, listed = np.zeros(1, dtype=np.int64), np.ndarray.tolist  # (to int)

            def more(sums):
                out = np.sort(np.add.outer(sums, steps).ravel())
                return out[np.concatenate([[True], out[1:] != out[:-1]])]
        else:
            sums, listed = {0}, (lambda s: s)  # (Python's integers already)

            def more(sums):
                return {t + v for t in sums for v in ints}
        for _ in range(n):
            if len(sums) * len(ints) > MAX_SUM_WORK:
                yield None
                return
            sums = more(sums)
            if len(sums) > MAX_MEANS:
                yield None
                return
            yield listed(sums)
    return common, per_count()


def _same_selector(s, t) -> bool:
    """Whether two selectors select alike in every input: one object, or the same
    comparison of the same keys and queries (make_frac_prevs builds its Select anew each
    call), combined alike."""
    if s is t:
        return True
    if type(s) is not type(t):
        return False
    if isinstance(s, rasp.Select):
        return s.keys is t.keys and s.queries is t.queries and s.predicate is t.predicate
    if isinstance(s, rasp.SelectorNot):
        return _same_selector(s.inner, t.inner)
    if isinstance(s, (rasp.SelectorAnd, rasp.SelectorOr)):
        return _same_selector(s.fst, t.fst) and _same_selector(s.snd, t.snd)
    return False


def _linear_space(a: list | None, b: list | None, f: Callable) -> list | None:
    """A LinearSequenceMap's values: its own function over the value pairs (so integers stay
    integers, as RASP's evaluator gives them to a later map), each a `_Near` where an input
    is one (RASP's sum of two means off by their round-off is off by as much: `_apply`)."""
    if a is None or b is None or len(a) * len(b) > MAX_MEANS:
        return None
    return _ordered(_apply(f, x, y) for x in a for y in b)


def _mean_space(values: list | None, n: int, default: float) -> list | None:
    """`_means` of the values, a sequence of them (translate's builds ask for the same), each
    a `_Near` where RASP's float64 sums may give it a little off (`_mean_radius`)."""
    means = None if values is None else _means(tuple(float(v) for v in values), n, default)
    if means is None:
        return None
    radius = _mean_radius(values, n)
    if radius is None:
        return list(means)  # the caller's own list
    return [_near(q, radius(q)) for q in means]


@functools.lru_cache(maxsize=64)
def _means(values: tuple, n: int, default: float) -> list | None:
    """Every mean of 1..n of `values` (with repeats), and the default, computed exactly (a
    mean reached two ways is one value: the values as integers over their common
    denominator D, a mean s / (m D) as the integer s L / m over L D, L = lcm(1..n); each
    float rounded once from the exact quotient, as from a Fraction); None where there are
    more than MAX_MEANS."""
    vals = _exactly(values)
    if set(vals) <= {0, 1}:
        means = {Fraction(k, m) for m in range(1, n + 1) for k in range(m + 1)
                 if (k == 0 or 1 in vals) and (k == m or 0 in vals)}
        return _ordered({float(x) for x in means} | {float(default)})
    common, per_count = _sums(values, n)
    lcm = math.lcm(*range(1, n + 1))
    means = set()
    for m, sums in enumerate(per_count, start=1):
        if sums is None:
            return None
        scale = lcm // m
        means |= {s * scale for s in sums}
        if len(means) > MAX_MEANS:
            return None
    whole = lcm * common
    return _ordered({x / whole for x in means} | {float(default)})
