"""Differential fuzzing of the RASP frontend: seeded random RASP programs, every input.

Each seed gives a well-typed random RASP program (depth 1-5) over a small vocabulary ({0,1,2},
{1,2,3} or {"a","b","c"}) and a max_seq_len of 3-6, causal or not. It is compiled with
`compile_rasp_to_model` and run on EVERY input of length 1..max_seq_len; each position is
compared with `rasp.evaluate` (the `agrees` rule of tests/test_rasp.py: numbers within 1e-4, a
numerical None reads as 0, a categorical None must decode as None; inputs on which evaluate
raises are skipped). A causal model is compared with RASP's evaluator under a causal mask
(`CausalEvaluator`: every Aggregate and SelectorWidth sees only keys at or before the query),
position i on the prefix x[:i+1]. tw's oracle (`model.evaluate`) is checked on a sample of the
inputs. A RaspError is accepted only where its message names a real limitation (a table too
large, a value set too large to enumerate, `length` under a causal mask).

The programs are written as Python source (one `sK = ...` line per expression) and built by
executing that source, so a failure prints a program that can be pasted and rerun.

    pytest tests/test_rasp_fuzz.py                 # the default seeds
    pytest tests/test_rasp_fuzz.py --runslow       # and a sweep of 500 more
    python tests/test_rasp_fuzz.py 0 500           # a campaign: seeds 0..499, failures
                                                   # minimized and summarized
    python tests/test_rasp_fuzz.py 0 150 --length 100   # the same programs at length 100,
                                                   # on sampled inputs
"""

from __future__ import annotations

import itertools
import math
import random
import re
import sys
import traceback
from collections import Counter
from dataclasses import dataclass, field, replace
from fractions import Fraction

import pytest

pytest.importorskip("tracr.rasp.rasp", reason="the RASP frontend's tests need tw-compiler[rasp]")
from tracr.rasp import rasp  # noqa: E402

from tw_lowering import compile_rasp_to_model  # noqa: E402
from tw_frontends.rasp.translator import RaspError  # noqa: E402

BOS = "BOS"
VOCABS = [(0, 1, 2), (1, 2, 3), ("a", "b", "c")]
# Categorical value sets are kept this small, so that tables (and pair tables) stay small.
MAX_VALS = 12
# Numerical value sets (means) larger than this are tracked as unknown numbers.
MAX_MEANS = 400

# RaspError messages that name a real limitation (tw refusing with a reason).
LIMITATIONS = {
    "table too large": r"more than the \d+ (a table|a table of them|weights it) may hold",
    "value set unknown (too many means)": r"too many means to enumerate",
    "length under causal": r"causal model cannot see its end",
    # documented: values float32 cannot tell apart (two float paths to one mean, a - b sums)
    "float32 cannot tell values apart": r"are one float32 number .*but map to different values",
    # a function that jumps within a mean's float64 round-off (RASP sums in list order)
    "float64 round-off of a mean": r"RASP's float64 sums can give",
    "softmax noise at large values": r"softmax's mean that float32 keeps only",
    "beyond atol": r"float32 computes only to about .* beyond atol",
    # RASP's mean returns one selected int as it is, a float over several: a function that
    # tells 2 from 2.0 (str) cannot be a table of values
    "int or float from a mean": r"which RASP's Aggregate gives alike",
    # RASP's Select raises on a None key or query: the program has no meaning on any input
    "None read by a selector everywhere": r"None at every position, read by a selector",
}


# -- comparison (tests/test_rasp.py's rule) ---------------------------------------------------

def agrees(got, want) -> bool:
    """One position: equal values; numbers within 1e-4; a numerical None reads as 0."""
    if want is None:
        return got is None or (isinstance(got, float) and abs(got) < 1e-4)
    if isinstance(got, float) and isinstance(want, (int, float)):
        return abs(got - float(want)) < 1e-4
    return got == want


def sampled_inputs(vocab, longest: int, k: int, seed: int) -> list[list]:
    """k random inputs of lengths 1..longest, and two of length `longest`."""
    rng = random.Random(seed)
    vals = sorted(vocab, key=str)
    lengths = [rng.randint(1, longest) for _ in range(k)] + [longest, longest]
    return [[rng.choice(vals) for _ in range(m)] for m in lengths]


def all_inputs(vocab, longest: int) -> list[list]:
    vals = sorted(vocab, key=str)
    return [list(p) for n in range(1, longest + 1) for p in itertools.product(vals, repeat=n)]


# -- the generator ------------------------------------------------------------------------------

# Unary functions, as source over `x`: (source, needs numbers, may give a non-number).
NUM_FUNCS = ["x + 1", "x * 2", "x % 2", "x > 1", "abs(x - 1)", "min(x, 2)", "x - 1", "x // 2",
             "max(x, 1)", "x == 0", "-x", "x * x", "x / 2", "1 / x", "1 if x > 0.5 else 0",
             "x - 2 if x > 1 else x", "round(x)", "x % 3", "int(x) + 1"]
NUM_TO_CAT = ["str(x)", "'lo' if x < 1 else 'hi'", "(x, x > 1)", "None if x == 1 else x",
              "[0, 1][x]"]
STR_FUNCS = ["x == 'a'", "x + 'a'", "x.upper()", "ord(x[0]) - 97", "len(x)", "x[0]",
             "'b' if x == 'a' else x", "x < 'b'", "{'a': 1, 'b': 2}[x]", "x * 2"]
TUPLE_FUNCS = ["x[0]", "x[1]", "x[0] == x[1]", "x[0] + x[1]", "str(x[0])", "x[1:]"]
BIN_FUNCS = ["x + y", "x * y", "x - y", "max(x, y)", "min(x, y)", "(x, y)", "x == y",
             "x if y else 0", "x < y", "str(x) + str(y)", "x % 2 + y"]
PREDICATES = ["lambda k, q: k == q - 1", "lambda k, q: abs(k - q) <= 1",
              "lambda k, q: (k + q) % 2 == 0", "lambda k, q: k != q and k < 2",
              "lambda k, q: k == q + 1", "lambda k, q: k == 0", "lambda k, q: q > 1",
              "lambda k, q: k / q > 1", "lambda k, q: str(k) < str(q)", "lambda k, q: k > q > 0"]
# Sort keys of a base SOp a (or b where the indices come first) and the indices: tracr's
# make_sort tie-break (ordered as (a, index)), its reverse, and keys not so ordered.
SORT_KEYS = [("a + b / {n}", "xi"), ("a + 0.5 * b / {n}", "xi"), ("{n} * b + a", "ix"),
             ("a - b / {n}", "xi"), ("b + a / {n}", "ix"), ("a * {n} + b % 2", "xi")]
# The share of SOps that are sorts (`Generator.sort`).
SORT_SHARE = 0.06
COMPARISONS = ["EQ", "LT", "LEQ", "GT", "GEQ", "NEQ", "TRUE", "FALSE"]
# Functions whose result depends on a number's type (1 vs 1.0), not its value.
_TYPED = re.compile(r"str\(|\[x\]")
# Predicates that select at most one key per query (for categorical aggregates).
ONE_PREDICATES = ["lambda k, q: k == q - 1", "lambda k, q: k == q", "lambda k, q: k == q + 1",
                  "lambda k, q: k == q - 2", "lambda k, q: k == 0", "lambda k, q: False"]


def _is_num(v) -> bool:
    return isinstance(v, (bool, int, float)) and math.isfinite(float(v))


@dataclass
class Node:
    """A generated expression: its variable name, encoding, value set (None: unknown numbers),
    whether it may be None at run time, and whether it may raise (evaluate skips those)."""

    name: str
    numerical: bool = False
    vals: frozenset | None = None
    none: bool = False
    selector: bool = False
    depth: int = 0
    one: bool = False  # a selector choosing at most one key per query
    # may hold 1 where tw holds 1.0 (a mean, a LinearSequenceMap's sum: evaluate gives an int
    # where one key is selected, tw a float); str() of such a value differs, so no str()
    mixed: bool = False

    @property
    def numbers(self) -> bool:
        return self.vals is None or all(_is_num(v) for v in self.vals)


class _Reject(Exception):
    """A generated expression that breaks a constraint: generate another."""


@dataclass
class Program:
    seed: int
    vocab: tuple
    max_seq_len: int
    causal: bool
    lines: list[str] = field(default_factory=list)
    root: str = ""

    def source(self, root: str | None = None) -> str:
        """Python source of the expression `root` (default: the program) and what it reads."""
        root = root or self.root
        deps = {root}
        keep = []
        for line in reversed(self.lines):
            name = line.split(" = ", 1)[0]
            if name in deps:
                keep.append(line)
                deps |= set(re.findall(r"\b[sS]\d+\b", line.split(" = ", 1)[1]))
        keep.reverse()
        return "\n".join(keep + [f"program = {root}"])

    def build(self, root: str | None = None):
        ns = {"rasp": rasp}
        exec(self.source(root), ns)  # noqa: S102 - the generator's own source
        return ns["program"]

    def names(self) -> list[str]:
        return [line.split(" = ", 1)[0] for line in self.lines if line.startswith("s")]

    def header(self) -> str:
        return (f"# seed={self.seed} vocab={set(self.vocab)!r} max_seq_len={self.max_seq_len} "
                f"causal={self.causal}")


class Generator:
    """Builds a random well-typed program line by line, executing each line as it goes (so
    the value sets are computed by the very functions the program holds)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        rng = self.rng
        vocab = rng.choice(VOCABS)
        self.p = Program(seed, vocab, rng.randint(3, 6), rng.random() < 0.3)
        self.ns = {"rasp": rasp}
        self.count = 0
        self.pool: list[Node] = []
        # sorts come from a stream of their own: a seed whose program holds none is the
        # program it was before they were added
        self.sort_rng = random.Random(seed * 7919 + 1)

    # -- bookkeeping
    def emit(self, src: str, **kw) -> Node:
        name = f"{'S' if kw.get('selector') else 's'}{self.count}"
        self.count += 1
        exec(f"{name} = {src}", self.ns)  # noqa: S102 - the generator's own source
        self.p.lines.append(f"{name} = {src}")
        node = Node(name, **kw)
        if not node.selector:
            self.pool.append(node)
        return node

    def obj(self, node: Node):
        return self.ns[node.name]

    def _values(self, fn, args_list) -> tuple[frozenset, bool, bool]:
        """fn's results over args_list: the value set, whether one is None, and whether numbers
        of several types (bool, int, float) are among them: equal ones (True and 1, 1 and 1.0)
        are one value to a value set, tracr's and tw's alike, so a function that tells them
        apart (str) must not read it."""
        outs, none, kinds = set(), False, set()
        for args in args_list:
            try:
                o = fn(*args)
            except Exception:  # noqa: BLE001 - a value the program may never meet
                continue
            if o is None:
                none = True
                continue
            try:
                hash(o)
            except TypeError:
                raise _Reject() from None
            outs.add(o)
            kinds.add(type(o))
        if not outs:
            raise _Reject()
        return frozenset(outs), none, len(kinds & {bool, int, float}) > 1

    @staticmethod
    def _sample(node: Node):
        return sorted(node.vals, key=repr) if node.vals is not None else [0, 0.5, 1, 1.5, 2, 3]

    # -- leaves
    def leaf(self, numerical: bool | None) -> Node:
        rng, n, vocab = self.rng, self.p.max_seq_len, self.p.vocab
        numeric_vocab = all(_is_num(v) for v in vocab)
        choices = ["tokens", "indices", "full"]
        if not self.p.causal:
            choices.append("length")
        kind = rng.choice(choices + ["tokens", "indices"])
        if numerical is None:
            numerical = rng.random() < 0.3
        if kind == "tokens":
            if numerical and numeric_vocab:
                return self.emit("rasp.numerical(rasp.Map(lambda x: x, rasp.tokens))",
                                 numerical=True, vals=frozenset(vocab))
            return self.emit("rasp.tokens", vals=frozenset(vocab))
        if kind == "indices":
            if numerical:
                return self.emit("rasp.numerical(rasp.Map(lambda x: x, rasp.indices))",
                                 numerical=True, vals=frozenset(range(n)))
            return self.emit("rasp.indices", vals=frozenset(range(n)))
        if kind == "length":
            if numerical:
                return self.emit("rasp.numerical(rasp.Map(lambda x: x, rasp.length))",
                                 numerical=True, vals=frozenset(range(1, n + 1)))
            return self.emit("rasp.length", vals=frozenset(range(1, n + 1)))
        fill = rng.choice([0, 1, 2, "a"] if not numerical else [0, 1, 2, 0.5])
        wrap = "rasp.numerical({})" if numerical else "{}"
        return self.emit(wrap.format(f"rasp.Full({fill!r})"), numerical=numerical,
                         vals=frozenset([fill]))

    # -- SOps
    def sop(self, depth: int, numerical: bool | None = None, numbers: bool = False,
            allow_none: bool = False, top: bool = False) -> Node:
        """An SOp of depth at most `depth` (numerical: its encoding, None: either)."""
        for _ in range(60):
            mark = (len(self.p.lines), self.count, len(self.pool))
            try:
                node = self._sop(depth, numerical, numbers, allow_none, top)
            except _Reject:
                del self.p.lines[mark[0]:]
                self.count = mark[1]
                del self.pool[mark[2]:]
                continue
            if numerical is not None and node.numerical != numerical:
                continue
            if numbers and not node.numbers:
                continue
            if node.none and not allow_none:
                continue
            return node
        return self.leaf(numerical if numerical is not None else False)

    def _sop(self, depth, numerical, numbers, allow_none, top) -> Node:
        rng = self.rng
        reuse = [m for m in self.pool if m.depth <= depth and (allow_none or not m.none)
                 and (numerical is None or m.numerical == numerical)]
        if depth <= 0 or rng.random() < 0.12:
            if reuse and rng.random() < 0.5:
                return rng.choice(reuse)
            return self.leaf(numerical)
        if self.sort_rng.random() < SORT_SHARE:
            return self.sort(depth, numerical, top)
        kind = rng.choices(["map", "seqmap", "linear", "agg_num", "agg_cat", "width"],
                           [5, 3, 1.5, 3, 3, 2])[0]
        return getattr(self, kind)(depth, numerical, top)

    def map(self, depth, numerical, top) -> Node:
        rng = self.rng
        inner = self.sop(depth - 1, allow_none=rng.random() < 0.3)
        out_num = numerical if numerical is not None else rng.random() < 0.35
        if inner.none and (inner.numerical or out_num):
            if out_num and not top:
                raise _Reject()
        pool = []
        if inner.numbers:
            pool += NUM_FUNCS + ([] if out_num else NUM_TO_CAT)
        if inner.vals is not None and any(isinstance(v, str) for v in inner.vals):
            pool += STR_FUNCS
        if inner.vals is not None and any(isinstance(v, tuple) for v in inner.vals):
            pool += TUPLE_FUNCS
        if inner.mixed:
            pool = [b for b in pool if not _TYPED.search(b)]
        if not pool:
            raise _Reject()
        body = rng.choice(pool)
        f = eval(f"lambda x: {body}")  # noqa: S307 - the generator's own source
        vals, none, typed = self._values(f, [(v,) for v in self._sample(inner)])
        if out_num and not all(_is_num(v) for v in vals):
            raise _Reject()
        if len(vals) > MAX_VALS and not out_num:
            raise _Reject()
        simplify = "" if rng.random() < 0.7 else ", simplify=False"
        src = f"rasp.Map(lambda x: {body}, {inner.name}{simplify})"
        if out_num:
            src = f"rasp.numerical({src})"
        elif rng.random() < 0.2:
            src = f"rasp.categorical({src})"
        if inner.vals is None and out_num:
            vals = None  # a function of unknown numbers
        return self.emit(src, numerical=out_num, vals=vals, none=none or inner.none,
                         depth=inner.depth + 1, mixed=inner.mixed or typed)

    def seqmap(self, depth, numerical, top) -> Node:
        rng = self.rng
        a = self.sop(depth - 1, allow_none=rng.random() < 0.2)
        b = self.sop(depth - 1, allow_none=rng.random() < 0.2) if rng.random() < 0.9 else a
        out_num = numerical if numerical is not None else rng.random() < 0.3
        if (a.none or b.none) and out_num and not top:
            raise _Reject()
        for side in (a, b):
            if side.vals is None or len(side.vals) > 64:
                raise _Reject()
        body = rng.choice(BIN_FUNCS)
        if (a.mixed or b.mixed) and _TYPED.search(body):
            raise _Reject()
        f = eval(f"lambda x, y: {body}")  # noqa: S307
        pairs = [(x, x) for x in a.vals] if a is b else \
            [(x, y) for x in a.vals for y in b.vals]
        vals, none, typed = self._values(f, pairs)
        if out_num and not all(_is_num(v) for v in vals):
            raise _Reject()
        if len(vals) > MAX_VALS and not out_num:
            raise _Reject()
        src = f"rasp.SequenceMap(lambda x, y: {body}, {a.name}, {b.name})"
        if out_num:
            src = f"rasp.numerical({src})"
        return self.emit(src, numerical=out_num, vals=vals, none=none or a.none or b.none,
                         depth=max(a.depth, b.depth) + 1,
                         mixed=a.mixed or b.mixed or typed)

    def linear(self, depth, numerical, top) -> Node:
        rng = self.rng
        if numerical is False:
            raise _Reject()
        a = self.sop(depth - 1, numerical=True)
        b = self.sop(depth - 1, numerical=True) if rng.random() < 0.85 else a
        fa, fb = rng.choice([1, -1, 2, 0.5, 3]), rng.choice([1, -1, 2, 0.5, 0])
        vals = None
        if a.vals is not None and b.vals is not None:
            pairs = [(x, x) for x in a.vals] if a is b else \
                [(x, y) for x in a.vals for y in b.vals]
            vals = frozenset(fa * x + fb * y for x, y in pairs)
            if len(vals) > MAX_MEANS:
                vals = None
        return self.emit(f"rasp.numerical(rasp.LinearSequenceMap({a.name}, {b.name}, {fa}, "
                         f"{fb}))", numerical=True, vals=vals,
                         depth=max(a.depth, b.depth) + 1, mixed=True)

    # -- selectors
    def select(self, depth: int, one: bool = False) -> Node:
        rng = self.rng
        n = self.p.max_seq_len
        if one:  # at most one key per query
            r = rng.random()
            if r < 0.6:
                pred = rng.choice(ONE_PREDICATES)
                return self.emit(f"rasp.Select(rasp.indices, rasp.indices, {pred})",
                                 selector=True, one=True)
            if r < 0.8:  # a query SOp of small ints picks the key at that index
                q = self.sop(depth - 1, numbers=True)
                if q.vals is None or not all(isinstance(v, int) for v in q.vals):
                    raise _Reject()
                return self.emit(f"rasp.Select(rasp.indices, {q.name}, "
                                 f"lambda k, q: k == q % {n})", selector=True, one=True,
                                 depth=q.depth)
            inner = self.selector(depth, one=True)
            other = self.selector(depth)
            op = "&" if rng.random() < 0.5 else "&"
            pair = (inner, other) if rng.random() < 0.5 else (other, inner)
            return self.emit(f"{pair[0].name} {op} {pair[1].name}", selector=True, one=True,
                             depth=max(inner.depth, other.depth))
        k = self.sop(depth - 1)
        q = self.sop(depth - 1) if rng.random() < 0.75 else k
        for side in (k, q):
            if side.vals is None and not side.numerical:
                raise _Reject()
        if rng.random() < 0.65:
            pred = "rasp.Comparison." + rng.choice(COMPARISONS)
            f = getattr(rasp.Comparison, pred.split(".")[-1])
        else:
            pred = rng.choice(PREDICATES)
            if (k.mixed or q.mixed) and _TYPED.search(pred):
                raise _Reject()
            f = eval(pred)  # noqa: S307
        ks, qs = self._sample(k), self._sample(q)
        ok = 0
        for kv, qv in itertools.product(ks, qs):
            try:
                f(kv, qv)
                ok += 1
            except Exception:  # noqa: BLE001
                pass
        if ok < len(ks) * len(qs) and rng.random() < 0.7:
            raise _Reject()  # a predicate that raises: only sometimes
        if ok == 0:
            raise _Reject()
        return self.emit(f"rasp.Select({k.name}, {q.name}, {pred})", selector=True,
                         depth=max(k.depth, q.depth))

    def selector(self, depth: int, one: bool = False) -> Node:
        rng = self.rng
        r = rng.random()
        if depth <= 1 or r < 0.6 or one:
            return self.select(depth, one)
        if r < 0.85:
            a, b = self.selector(depth - 1), self.selector(depth - 1)
            op = rng.choice(["&", "|"])
            return self.emit(f"{a.name} {op} {b.name}", selector=True,
                             depth=max(a.depth, b.depth))
        a = self.selector(depth - 1)
        return self.emit(f"~{a.name}", selector=True, depth=a.depth)

    # -- attention SOps
    def agg_num(self, depth, numerical, top) -> Node:
        rng = self.rng
        if numerical is False:
            raise _Reject()
        sel = self.selector(depth)
        src_num = rng.random() < 0.7
        val = self.sop(depth - 1, numerical=src_num, numbers=True)
        if val.vals is not None and not all(_is_num(v) for v in val.vals):
            raise _Reject()
        defaults = [0, 0, 1, 0.5, -1] + ([None] if top else [])
        default = rng.choice(defaults)
        vals = None
        if val.vals is not None:
            vs = {Fraction(float(v)) for v in val.vals}
            sums, means = {Fraction(0)}, set()
            for m in range(1, self.p.max_seq_len + 1):
                sums = {s + v for s in sums for v in vs}
                means |= {s / m for s in sums}
                if len(means) > MAX_MEANS:
                    means = None
                    break
            if means is not None:
                vals = frozenset({float(x) for x in means} | {default or 0})
        return self.emit(f"rasp.numerical(rasp.Aggregate({sel.name}, {val.name}, "
                         f"default={default!r}))", numerical=True, vals=vals,
                         none=default is None, depth=max(sel.depth, val.depth) + 1, mixed=True)

    def agg_cat(self, depth, numerical, top) -> Node:
        rng = self.rng
        if numerical is True:
            raise _Reject()
        r = rng.random()
        if r < 0.6:
            sel = self.selector(depth, one=True)
            val = self.sop(depth - 1, numerical=False, allow_none=rng.random() < 0.3)
        elif r < 0.9 or not top:  # keys that agree on a value: every selected key holds it
            key = self.sop(depth - 1, numerical=False)
            q = self.sop(depth - 1) if rng.random() < 0.7 else key
            if key.vals is None:
                raise _Reject()
            try:
                for kv, qv in itertools.product(key.vals, self._sample(q)):
                    kv == qv  # noqa: B015
            except Exception:  # noqa: BLE001
                raise _Reject() from None
            sel = self.emit(f"rasp.Select({key.name}, {q.name}, rasp.Comparison.EQ)",
                            selector=True, depth=max(key.depth, q.depth))
            if rng.random() < 0.4:
                other = self.selector(depth - 1)
                sel = self.emit(f"{sel.name} & {other.name}", selector=True,
                                depth=max(sel.depth, other.depth))
            if rng.random() < 0.5:
                val = key
            else:
                body = rng.choice(NUM_FUNCS + NUM_TO_CAT if key.numbers else STR_FUNCS)
                if key.mixed and _TYPED.search(body):
                    raise _Reject()
                f = eval(f"lambda x: {body}")  # noqa: S307
                vals, none, typed = self._values(f, [(v,) for v in key.vals])
                if len(vals) > MAX_VALS:
                    raise _Reject()
                val = self.emit(f"rasp.Map(lambda x: {body}, {key.name})", vals=vals,
                                none=none, depth=key.depth + 1,
                                mixed=key.mixed or typed)
        else:  # the output: a categorical mean of numbers over any selector
            sel = self.selector(depth)
            val = self.sop(depth - 1, numerical=False, numbers=True)
        if val.vals is None:
            raise _Reject()
        default = rng.choice([None, None, None, "first", 7, "z"])
        if default == "first":
            default = sorted(val.vals, key=repr)[0]
        if default is not None and not isinstance(default, (str, float, bool, int)):
            default = None
        vals = frozenset(val.vals | ({default} if default is not None else set()))
        if not (val.numbers and all(_is_num(v) for v in vals)) and r >= 0.9:
            raise _Reject()
        return self.emit(f"rasp.Aggregate({sel.name}, {val.name}, default={default!r})",
                         vals=vals, none=default is None or val.none,
                         depth=max(sel.depth, val.depth) + 1, mixed=val.mixed)

    def width(self, depth, numerical, top) -> Node:
        sel = self.selector(depth)
        out_num = numerical if numerical is not None else self.rng.random() < 0.4
        src = f"rasp.SelectorWidth({sel.name})"
        if out_num:
            src = f"rasp.numerical({src})"
        return self.emit(src, numerical=out_num, vals=frozenset(range(self.p.max_seq_len + 1)),
                         depth=sel.depth + 1)

    def sort(self, depth, numerical, top) -> Node:
        """tracr's sort idiom: a rank (the width of `k < k`, or <=, >, >=) over a key k (a
        base SOp, or a SequenceMap of it and the indices that breaks ties, in either order and
        either direction), then the value at each rank (`Select(rank, indices, EQ)`), or the
        rank itself."""
        rng, n = self.rng, self.p.max_seq_len
        x = self.sop(depth - 1, numbers=True)
        if x.vals is None or x.none or not all(_is_num(v) for v in x.vals):
            raise _Reject()
        key = x
        if rng.random() < 0.75:
            body, args = rng.choice(SORT_KEYS)
            body = body.format(n=n)
            pair = (x.name, "rasp.indices") if args == "xi" else ("rasp.indices", x.name)
            f = eval(f"lambda a, b: {body}")  # noqa: S307
            product = [(v, i) if args == "xi" else (i, v) for v in x.vals for i in range(n)]
            vals, none, typed = self._values(f, product)
            if none:
                raise _Reject()
            wrap = "rasp.numerical({})" if rng.random() < 0.3 else "{}"
            key = self.emit(wrap.format(f"rasp.SequenceMap(lambda a, b: {body}, {pair[0]}, "
                                        f"{pair[1]})"), numerical=wrap != "{}", vals=vals,
                            depth=x.depth + 1, mixed=x.mixed or typed)
        pred = rng.choice(["LT", "LT", "LEQ", "GT", "GEQ"])
        rank = self.emit(f"rasp.SelectorWidth(rasp.Select({key.name}, {key.name}, "
                         f"rasp.Comparison.{pred}))", vals=frozenset(range(n + 1)),
                         depth=key.depth + 1)
        if rng.random() < 0.25:
            return rank
        sel = self.emit(f"rasp.Select({rank.name}, rasp.indices, rasp.Comparison.EQ)",
                        selector=True, depth=rank.depth)
        choice = rng.random()
        val = x if choice < 0.4 else key if choice < 0.55 else \
            self.sop(depth - 1, numerical=False, numbers=True)
        if val.vals is None or not all(_is_num(v) for v in val.vals):
            raise _Reject()
        if numerical is True or (numerical is None and rng.random() < 0.4):
            return self.emit(f"rasp.numerical(rasp.Aggregate({sel.name}, {val.name}, "
                             "default=0))", numerical=True, vals=None, mixed=True,
                             depth=max(rank.depth, val.depth) + 1)
        if len(val.vals) > MAX_VALS or val.numerical:
            raise _Reject()
        # a categorical mean of several numbers (ties) decodes to their mean: values unknown
        return self.emit(f"rasp.Aggregate({sel.name}, {val.name})", vals=None, none=True,
                         depth=max(rank.depth, val.depth) + 1, mixed=True)

    def program(self) -> Program:
        depth = self.rng.randint(1, 5)
        node = self.sop(depth, allow_none=True, top=True)
        self.p.root = node.name
        return self.p


def generate(seed: int) -> Program:
    return Generator(seed).program()


# -- the differential check -------------------------------------------------------------------

@dataclass
class Outcome:
    status: str  # "ok", "refused", "bad-refusal", "crash", "mismatch", "oracle-mismatch"
    detail: str = ""
    inputs: int = 0
    example: tuple | None = None  # (input, expected, compiled, oracle)


class CausalEvaluator(rasp.DefaultRASPEvaluator):
    """RASP's evaluator with every attention masked to keys at or before the query: what a
    causal model computes. (rasp.evaluate on the prefix x[:i+1] is not: an attention reading
    an earlier attention's output at position j < i sees there the value of x[:j+1], where
    evaluate on x[:i+1] gives the value over the whole prefix.)"""

    def _masked(self, selector, xs):
        rows = self.evaluate(selector, xs)
        return [[bool(s) and k <= q for k, s in enumerate(row)] for q, row in enumerate(rows)]

    def eval_aggregate(self, sop, xs):
        values = self.evaluate(sop.sop, xs)
        return [rasp._mean(rasp._get_selected(row, values), sop.default)
                for row in self._masked(sop.selector, xs)]

    def eval_selector_width(self, sop, xs):
        return [sum(row) for row in self._masked(sop.selector, xs)]


causal_evaluate = CausalEvaluator().evaluate


def _expected(program, tokens, cache: dict, causal: bool = False):
    key = tuple(tokens)
    if key not in cache:
        try:
            cache[key] = (causal_evaluate if causal else rasp.evaluate)(program, list(tokens))
        except Exception:  # noqa: BLE001 - an input the program has no meaning for
            cache[key] = None
    return cache[key]


def _wanted(program, x, causal, cache):
    """What each position of x should decode to (None: skip the position)."""
    if not causal:
        want = _expected(program, x, cache)
        return [None] * len(x) if want is None else [(w,) for w in want]
    out = []
    for i in range(len(x)):
        want = _expected(program, x[:i + 1], cache, causal=True)
        out.append(None if want is None else (want[i],))
    return out


def _mismatch(got: list, wanted: list) -> bool:
    return any(w is not None and not agrees(g, w[0]) for g, w in zip(got, wanted))


def _limitation(message: str) -> str | None:
    for reason, pattern in LIMITATIONS.items():
        if re.search(pattern, message):
            return reason
    return None


def run_program(prog: Program, root: str | None = None, max_seq_len: int | None = None,
                oracle_sample: int = 24, samples: int | None = None) -> Outcome:
    """Compile `prog` (or its expression `root`) and compare it with rasp.evaluate on every
    input (`samples`: that many random ones of lengths 1..n and two of length n, for lengths
    where every input is too many), and the oracle on a sample (and on every input the
    compiled model gets wrong)."""
    n = max_seq_len or prog.max_seq_len
    program = prog.build(root)
    try:
        model = compile_rasp_to_model(program, set(prog.vocab), n, causal=prog.causal,
                                      compiler_bos=BOS)
    except RaspError as e:
        reason = _limitation(str(e))
        return Outcome("refused", reason) if reason else Outcome("bad-refusal", str(e))
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", f"compile: {type(e).__name__}: {e}",
                       example=(None, None, None, traceback.format_exc(limit=-3)))
    inputs = all_inputs(prog.vocab, n) if samples is None else \
        sampled_inputs(prog.vocab, n, samples, prog.seed)
    cache: dict = {}
    try:
        outs = model.apply_batch([[BOS, *x] for x in inputs])
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", f"apply: {type(e).__name__}: {e}")
    checked = 0
    rng = random.Random(prog.seed)
    sample = set(rng.sample(range(len(inputs)), min(oracle_sample, len(inputs))))
    for i, (x, out) in enumerate(zip(inputs, outs)):
        wanted = _wanted(program, x, prog.causal, cache)
        if all(w is None for w in wanted):
            continue
        checked += 1
        got = out.decoded[1:]
        bad = out.decoded[0] != BOS or _mismatch(got, wanted)
        if bad or i in sample:
            try:
                ora = model.evaluate([BOS, *x]).decoded[1:]
            except Exception as e:  # noqa: BLE001
                return Outcome("crash", f"oracle: {type(e).__name__}: {e}", checked)
            want = [w[0] if w else "<skipped>" for w in wanted]
            if bad:
                side = "the oracle too" if _mismatch(ora, wanted) else "the oracle agrees"
                return Outcome("mismatch", side, checked, (x, want, got, ora))
            if _mismatch(ora, wanted):
                return Outcome("oracle-mismatch", "", checked, (x, want, got, ora))
    return Outcome("ok", "", checked)


def describe(prog: Program, out: Outcome, root: str | None = None,
             max_seq_len: int | None = None) -> str:
    p = Program(prog.seed, prog.vocab, max_seq_len or prog.max_seq_len, prog.causal,
                prog.lines, prog.root)
    lines = [p.header(), p.source(root), f"# {out.status}: {out.detail}"]
    if out.example and out.example[0] is not None:
        x, want, got, ora = out.example
        lines.append(f"# input {x!r}\n#   expected {want!r}\n#   compiled {got!r}\n"
                     f"#   oracle   {ora!r}")
    return "\n".join(lines)


def signature(out: Outcome) -> str:
    """A failure's kind, numbers blanked: failures with one signature are (likely) one bug."""
    return f"{out.status}: {re.sub(r'[0-9]+', 'N', out.detail)[:90]}"


def minimize(prog: Program, out: Outcome) -> tuple[str | None, int, Outcome]:
    """The smallest expression of the program (fewest source lines) that still fails the same
    way (one signature), at the smallest max_seq_len that still fails."""
    best = (None, prog.max_seq_len, out)
    sig = signature(out)
    size = len(prog.source().splitlines())
    for name in prog.names():
        lines = len(prog.source(name).splitlines())
        if lines >= size:
            continue
        o = run_program(prog, name, oracle_sample=0)
        if signature(o) == sig:
            best, size = (name, prog.max_seq_len, o), lines
    root = best[0]
    for n in range(3 if prog.causal else 1, prog.max_seq_len):
        o = run_program(prog, root, max_seq_len=n, oracle_sample=0)
        if signature(o) == sig:
            return root, n, o
    return best


# -- the tests ----------------------------------------------------------------------------------

# Default-range seeds that hit a failure already reported, left out of the default suite (none
# now: the ones found were a numerical Aggregate as wide as its value set, and a Select predicate
# raising on a value pair the program never meets; both fixed).
KNOWN_FAILING: set[int] = set()
DEFAULT_SEEDS = [s for s in range(40) if s not in KNOWN_FAILING][:25]


def _check(seed: int) -> None:
    prog = generate(seed)
    out = run_program(prog)
    assert out.status in ("ok", "refused"), describe(prog, out)


@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
def test_random_program(seed):
    _check(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1500))
def test_random_program_sweep(seed):
    _check(seed)


def test_campaign_at_a_longer_length_checks_sampled_inputs(capsys):
    main(["1", "4", "--length", "9", "--samples", "3"])
    out = capsys.readouterr().out
    assert "programs: 3" in out
    checked = int(re.search(r"inputs checked: (\d+)", out).group(1))
    assert 0 < checked <= 3 * 5  # three sampled inputs and two of length 9 a program


def test_generator_is_deterministic():
    assert generate(7).source() == generate(7).source()
    assert generate(7).source() != generate(8).source()


# -- the campaign -------------------------------------------------------------------------------

def campaign(seeds, length: int | None = None, samples: int = 12) -> None:
    """Each seed's program compiled and checked; `length`: at that max_seq_len instead of the
    seed's, on `samples` random inputs and two of that length (failures printed, not
    minimized: a smaller length would check every input)."""
    counts: Counter = Counter()
    refusals: Counter = Counter()
    inputs = 0
    failures: dict[str, list] = {}
    for seed in seeds:
        prog = generate(seed)
        if length is not None:
            prog = replace(prog, max_seq_len=length)
        try:
            out = run_program(prog, samples=None if length is None else samples)
        except Exception as e:  # noqa: BLE001 - the harness itself
            out = Outcome("crash", f"harness: {type(e).__name__}: {e}")
        counts[out.status] += 1
        inputs += out.inputs
        if out.status == "refused":
            refusals[out.detail] += 1
        if out.status in ("ok", "refused"):
            continue
        sig = signature(out)
        failures.setdefault(sig, []).append(seed)
        print(f"seed {seed}: {sig}", flush=True)
        if length is not None:
            print(describe(prog, out), "\n", flush=True)
        elif len(failures[sig]) <= 3:
            root, n, small = minimize(prog, out)
            print(describe(prog, small, root, n), "\n", flush=True)
    print("\nprograms:", sum(counts.values()), dict(counts), "inputs checked:", inputs)
    print("refusals:", dict(refusals))
    for sig, ss in failures.items():
        print(f"{len(ss):4d}  {sig}  seeds {ss[:12]}")


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="A fuzz campaign over seeds lo..hi-1.")
    ap.add_argument("lo", type=int)
    ap.add_argument("hi", type=int)
    ap.add_argument("--length", type=int, help="compile every program at this max_seq_len "
                    "and check sampled inputs (default: the seed's length, every input)")
    ap.add_argument("--samples", type=int, default=12, help="random inputs a program with "
                    "--length (default 12, and two of that length)")
    args = ap.parse_args(argv)
    campaign(range(args.lo, args.hi), args.length, args.samples)


if __name__ == "__main__":
    main()
