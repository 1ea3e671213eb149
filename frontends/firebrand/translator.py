"""firebrand's integer expression IR (`firebrand.ir`: `Expr`, `Machine`) as a tw graph.

    from tw_frontends.firebrand.translator import translate
    module = translate(machine, max_context=64)          # or translate(expr, lower=0, upper=9, ...)
    evaluate(module, {"tokens": np.array(prefix) - machine.lower})["next"][-1, 0]

The graph reads one token input, `tw.embedding("tokens", table)`, whose row i holds the token
value lower + i, and writes one output, "next" (1 wide): at every position p the value of the
expression on the prefix tokens[0..p], wherever firebrand's reference (`firebrand.reference.
evaluate`) is defined there. Where the reference raises (too little history, a lookup argument
outside its table, a mod of a negative number, a select condition other than 0/1), the value is
unspecified.

Every node first gets an integer interval (lo, hi) from the token alphabet [lower, upper] and the
positions 0..max_context-1 (`intervals`); nodes are then translated one by one:

* constant, add, scale: affine forms with integer coefficients over the values already built
  (no op until a nonlinear node or the output reads them; then one `tw.linear`);
* relu: the form itself when lo >= 0, 0 when hi <= 0, else `tw.relu`;
* clip: the form where the interval already lies inside, else `tw.clamp`;
* equals, mod, lookup: `tw.piecewise_linear` through the integer points where the function's
  slope changes (a sum of hinges, exact at every integer of the interval): equals is a tent of
  three breakpoints, mod a sawtooth of two breakpoints per period, lookup its table's bends;
* select: b + (a - b) c, an affine form, when both branches are constants; else `tw.select`
  on the +/-1 condition 2c - 1;
* position: column 0 of `tw.pos_encoding`; position_mod, position_digit, position_quotient:
  a `tw.pos_table` column holding the feature at every position < max_context;
* history(k): `tw.attend_to_offset(pos, token, k)` (k = 0: the token itself); beyond
  `MAX_POSITIONS` (its longest sequence) the read_at head below at address position - k,
  which needs float64 there (`needs_float64`).

The three content reads are one `tw.attn` head each, written here (no library op fits: the
library's position reads take a constant offset, its argmax reads a fixed gain); each picks
the wanted key j by an integer score S_j (gap >= 1 between the winner and every other key)
times a gain g (30, or 40 for read_at), so the oracle's softmax leaks below exp(-30):

* read_at(a): query [a, 1], key [j, j^2] (`tw.pos_encoding`), S = 2aj - j^2 (peak at j = a);
* latest(key, period, phase, start): query [key, 1], key [t_j, t_j^2, j, tag_j] (the token
  embedding carries t and t^2, tag_j a `tw.pos_table` column), S = L (2 key t_j - t_j^2) + j
  + T tag_j: nearer values beat any recency (L = max_context), the newest wins among ties,
  and the tag bonus T exceeds the spread of the rest, so every tagged key beats every
  untagged one;
* match(query, keys, ...): query [q_d, 1, w], key [k_jd, k_jd^2, j, sentinel_j, tag_j] (the
  key digits and their squares are graph values computed at every position),
  S = 2A sum_d (2 q_d k_jd - k_jd^2) + 2j + A sentinel_j w + T tag_j with A = 2L + 1 and
  w = 2 sum_d q_d^2 - min(sum_d q_d^2, 1): up to the query's constant, an exact match scores
  0, a mismatch <= -2A, and the sentinel (whose keys are 0) -A (0 if the query is all 0), so
  the newest exact match wins, else the sentinel.

The float32 limit: a head is exact in float32 while its score terms stay below
`FLOAT32_SCORE_LIMIT` = 3 * 2**20 in score units (read_at: 3 L^2, i.e. L <= 1024, the bound
`tw.attend_to_offset` keeps); beyond that the graph is still translated and is exact under
`compile(..., dtype="float64")` (up to `FLOAT64_SCORE_LIMIT`, beyond which translate refuses):
`needs_float64(machine_or_expr, ...)` says which a translation needs, and `score_magnitudes`
lists every head's magnitude. match's default digit_limit 255 reaches float64 at short
contexts unless the digits' intervals are smaller (tokens 0..9 keep them 0..9).
A function over more than `MAX_DOMAIN` integers, a breakpoint list longer than that, or an
interval beyond +/-2**24 (where float32 stops holding every integer) is refused naming the op
and its interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from twdialect import ops as tw
from twdialect.errors import TwError

MAX_DOMAIN = 4096            # integers a tabled function (lookup, mod) may range over
MAX_MAGNITUDE = 2 ** 24      # float32 holds every integer up to here
MAX_POSITIONS = 1024         # tw.attend_to_offset's longest sequence
FLOAT32_SCORE_LIMIT = 3 * 2 ** 20   # score-unit magnitude a content read keeps exact in float32
FLOAT64_SCORE_LIMIT = 2 ** 46       # ... and in float64
SOFTMAX_GAIN = 30.0          # logit per score unit (leakage exp(-30) per other key)
POSITION_GAIN = 40.0         # read_at's gain, as tw.attend_to_offset's
UNSUPPORTED: set = set()
CONTENT = {"read_at", "latest", "match"}
POINTWISE = {"constant", "add", "scale", "relu", "clip", "equals", "mod", "lookup", "select"}
POSITIONAL = {"position", "position_mod", "position_digit", "position_quotient"}
SUPPORTED = POINTWISE | POSITIONAL | CONTENT | {"history"}


class FirebrandError(TwError):
    """A firebrand expression (or one of its nodes, named) that tw cannot translate, and why."""


def _walk(root) -> list:
    """Nodes in topological order (children first), each once; iterative."""
    order, seen, stack = [], {id(root)}, [(root, iter(_children(root)))]
    while stack:
        node, it = stack[-1]
        child = next(it, None)
        if child is None:
            stack.pop()
            order.append(node)
        elif id(child) not in seen:
            seen.add(id(child))
            stack.append((child, iter(_children(child))))
    return order


def _is_expr(x) -> bool:
    return hasattr(x, "op") and hasattr(x, "args") and isinstance(getattr(x, "op"), str)


def _children(node) -> list:
    return [a for a in node.args if _is_expr(a)]


def _describe(node) -> str:
    ints = [repr(a) for a in node.args if isinstance(a, int)]
    return f"{node.op}({', '.join(ints)})" if ints else node.op


# --------------------------------------------------------------------------------------
# Positional features (functions of the position index i) and the interval analysis
# --------------------------------------------------------------------------------------


def position_feature(node, i: int) -> int:
    """The value of a positional node at zero-based position i (firebrand's meaning)."""
    op, args = node.op, node.args
    if op == "position":
        return i
    if op == "position_mod":
        period, offset = args
        return (i + offset) % period
    power, offset = args
    shifted = i + offset
    if op == "position_digit":
        return (shifted // 256 ** power) % 256 if shifted >= 0 else 0
    return shifted // power if shifted >= 0 else -1  # position_quotient: power is the period


def _mod_interval(lo: int, hi: int, m: int) -> tuple[int, int] | None:
    lo = max(lo, 0)            # a negative operand is undefined in firebrand
    if lo > hi:
        return None
    if hi - lo + 1 < m and lo // m == hi // m:
        return (lo % m, hi % m)
    return (0, m - 1)


def intervals(root, lower: int, upper: int, max_context: int) -> dict:
    """{id(node): (lo, hi)}: integers holding the node's value at every position < max_context
    of every token prefix over [lower, upper] where firebrand's reference is defined. A node
    whose value is never defined gets None (the expression is then never defined)."""
    out: dict = {}
    for node in _walk(root):
        out[id(node)] = _interval(node, out, lower, upper, max_context)
    return out


def _interval(node, iv, lower, upper, max_context):
    op, args = node.op, node.args
    arg = [iv[id(a)] if _is_expr(a) else a for a in args]
    if any(a is None for a in arg):
        return None
    if op == "constant":
        return (args[0], args[0])
    if op in ("history", "read_at"):
        return (lower, upper)
    if op in ("latest", "match"):
        start = args[3]
        if op == "match":
            start = min(start, args[4])
        return (start, max_context - 1) if start <= max_context - 1 else None
    if op in POSITIONAL:
        vals = [position_feature(node, i) for i in range(max_context)]
        return (min(vals), max(vals))
    if op == "add":
        return (arg[0][0] + arg[1][0], arg[0][1] + arg[1][1])
    if op == "scale":
        ends = (arg[0][0] * arg[1], arg[0][1] * arg[1])
        return (min(ends), max(ends))
    if op == "relu":
        return (max(arg[0][0], 0), max(arg[0][1], 0))
    if op == "clip":
        (lo, hi), a, b = arg
        return (min(b, max(a, lo)), min(b, max(a, hi)))
    if op == "equals":
        (lo, hi), v = arg
        if lo == hi:
            return (int(lo == v),) * 2
        return (0, 1) if lo <= v <= hi else (0, 0)
    if op == "mod":
        (lo, hi), m = arg
        return _mod_interval(lo, hi, m)
    if op == "lookup":
        (lo, hi), start, table = arg
        a, b = max(lo, start), min(hi, start + len(table) - 1)
        if a > b:
            return None
        part = table[a - start:b - start + 1]
        return (min(part), max(part))
    if op == "select":
        c, (alo, ahi), (blo, bhi) = arg
        if c[1] < 0 or c[0] > 1:
            return None
        if c[0] == 1:
            return (alo, ahi)
        if c[1] == 0:
            return (blo, bhi)
        return (min(alo, blo), max(ahi, bhi))
    raise FirebrandError(f"firebrand: {op} is not supported")


# --------------------------------------------------------------------------------------
# Affine forms over built values
# --------------------------------------------------------------------------------------


@dataclass
class Form:
    """const + sum coef * atoms[k] (integer coefficients; atoms are 1-wide tw values)."""

    const: int = 0
    terms: dict = field(default_factory=dict)  # atom index -> coefficient

    def __add__(self, other: Form) -> Form:
        terms = dict(self.terms)
        for k, c in other.terms.items():
            terms[k] = terms.get(k, 0) + c
        return Form(self.const + other.const, {k: c for k, c in terms.items() if c})

    def scaled(self, c: int) -> Form:
        if c == 0:
            return Form(0)
        return Form(self.const * c, {k: v * c for k, v in self.terms.items()})


class _Builder:
    def __init__(self, lower: int, upper: int, max_context: int):
        self.lower, self.upper, self.max_context = lower, upper, max_context
        self.atoms: list = []
        self.atom_index: dict = {}
        self._pos = None
        self._history: dict = {}
        values = np.arange(lower, upper + 1, dtype=np.float64)
        self.embedded = tw.embedding("tokens", np.stack([values, values * values], axis=1))
        self.token = tw.slice(self.embedded, 0, 1)

    def atom(self, value) -> Form:
        key = id(value)
        if key not in self.atom_index:
            self.atom_index[key] = len(self.atoms)
            self.atoms.append(value)
        return Form(0, {self.atom_index[key]: 1})

    def value(self, f: Form):
        """The form as one 1-wide tw value (a literal, an atom itself, or one tw.linear)."""
        if not f.terms:
            return tw.literal([float(f.const)])
        if f.const == 0 and len(f.terms) == 1:
            (k, c), = f.terms.items()
            if c == 1:
                return self.atoms[k]
        keys = sorted(f.terms)
        x = self.atoms[keys[0]] if len(keys) == 1 else tw.concat(*(self.atoms[k] for k in keys))
        w = np.array([[float(f.terms[k])] for k in keys])
        return tw.linear(x, w, [float(f.const)])

    def pos(self):
        if self._pos is None:
            self._pos = tw.pos_encoding(2, self.max_context)
        return self._pos

    def history(self, k: int):
        if k == 0:
            return self.token
        if k not in self._history:
            if self.max_context <= MAX_POSITIONS:
                # its peak at i - k leads by POSITION_GAIN: a hard read of an integer token
                self._history[k] = tw.claim_hard(
                    tw.attend_to_offset(self.pos(), self.token, k), POSITION_GAIN)
            else:  # (read_at(position - k): exact under float64 at any context it takes)
                pos = self.pos()
                address = tw.linear(tw.slice(pos, 0, 1), [[1.0]], [-float(k)])
                self._history[k] = _read(tw.concat(address, tw.literal([1.0])),
                                         tw.slice(pos, 0, 2), self.token,
                                         [[2.0, 0.0], [0.0, -1.0]], POSITION_GAIN)
        return self._history[k]


def _bends(lo: int, values) -> tuple[list[int], list[float]]:
    """The integers of [lo, lo + len(values) - 1] (values[k] the function at lo + k) where the
    slope changes, with both ends: a piecewise-linear interpolant through them equals the
    function at every integer of the interval."""
    ys = np.asarray(values, dtype=np.int64)
    keep = np.flatnonzero(np.diff(ys, 2)) + 1 if ys.size > 2 else np.arange(0)
    keep = np.concatenate([[0], keep, [ys.size - 1]]) if ys.size > 1 else np.array([0])
    return [int(lo + k) for k in keep], [float(ys[k]) for k in keep]


def _refuse_domain(node, lo, hi, what: str):
    raise FirebrandError(
        f"firebrand {_describe(node)}: {what} over [{lo}, {hi}] ({hi - lo + 1} integers) exceeds "
        f"{MAX_DOMAIN}; clip its argument to a smaller interval")


def _prepare(machine_or_expr, lower, upper, max_context):
    """(root, lower, upper, max_context, order, intervals), every argument checked."""
    root = machine_or_expr
    if hasattr(machine_or_expr, "next_value"):
        root = machine_or_expr.next_value
        lower = machine_or_expr.lower if lower is None else lower
        upper = machine_or_expr.upper if upper is None else upper
        if max_context is None:
            max_context = machine_or_expr.context_limit
    if not _is_expr(root):
        raise FirebrandError(f"firebrand: expected a Machine or an Expr, got {type(root).__name__}")
    for name, v in (("lower", lower), ("upper", upper), ("max_context", max_context)):
        if type(v) is not int:
            raise FirebrandError(f"firebrand: {name} must be an integer, got {v!r}")
    if lower > upper:
        raise FirebrandError(f"firebrand: empty token alphabet [{lower}, {upper}]")
    if upper - lower + 1 > MAX_DOMAIN:
        raise FirebrandError(f"firebrand: token alphabet [{lower}, {upper}] has {upper - lower + 1}"
                             f" tokens, above {MAX_DOMAIN}")
    if max_context < 1:
        raise FirebrandError(f"firebrand: max_context must be positive, got {max_context}")
    order = _walk(root)
    for node in order:
        if node.op in UNSUPPORTED:
            raise FirebrandError(f"firebrand {node.op} is not supported yet (tw translates "
                                 f"{', '.join(sorted(SUPPORTED))})")
        if node.op not in SUPPORTED:
            raise FirebrandError(f"firebrand: unknown operation {node.op!r}")
    iv = intervals(root, lower, upper, max_context)
    for node in order:
        b = iv[id(node)]
        if b is not None and max(abs(b[0]), abs(b[1])) > MAX_MAGNITUDE:
            raise FirebrandError(f"firebrand {_describe(node)}: interval [{b[0]}, {b[1]}] exceeds "
                                 f"2**24, beyond float32's exact integers")
    return root, lower, upper, max_context, order, iv


def _abs_max(box) -> int:
    return max(abs(box[0]), abs(box[1]))


def _latest_scores(key_box, lower, upper):
    """(min, max) of 2 key t - t^2 over key in key_box, t in [lower, upper]."""
    ts = {lower, upper}
    for k in key_box:
        ts.add(min(upper, max(lower, k)))
    vals = [2 * k * t - t * t for k in key_box for t in ts]
    return min(vals), max(vals)


def _match_parts(node, iv, max_context):
    """(digits, A, spread, T) of a match head (see the module doc): spread bounds |S| before
    the tag bonus T."""
    n = node.args[0]
    q = node.args[6:6 + n]
    qsq = node.args[6 + n:6 + 2 * n]
    k = node.args[6 + 2 * n:6 + 3 * n]
    ksq = node.args[6 + 3 * n:6 + 4 * n]
    a = 2 * max_context + 1
    per_digit = sum(2 * _abs_max(iv[id(x)]) * _abs_max(iv[id(y)]) + _abs_max(iv[id(z)])
                    for x, y, z in zip(q, k, ksq))
    w_max = 2 * sum(_abs_max(iv[id(x)]) for x in qsq) + 1
    spread = 2 * a * per_digit + a * w_max + 2 * max_context
    return n, a, spread, 2 * spread + 1


def _score_magnitude(node, iv, lower, upper, max_context) -> int:
    """The largest score-unit term sum a content read's logits reach (before the gain)."""
    L = max_context
    if node.op == "read_at":
        return 3 * L * L
    if node.op == "latest":
        smin, smax = _latest_scores(iv[id(node.args[0])], lower, upper)
        tag = L * (smax - smin) + L
        return L * (2 * _abs_max(iv[id(node.args[0])]) * max(abs(lower), abs(upper))
                    + max(lower * lower, upper * upper)) + L + tag
    _, _, spread, tag = _match_parts(node, iv, max_context)
    return spread + tag


def score_magnitudes(machine_or_expr, *, lower: int | None = None, upper: int | None = None,
                     max_context: int | None = None) -> list:
    """[(op, magnitude)] for every content read (read_at, latest, match) of the translation
    `translate` would make with these arguments: float32 keeps a head exact while its
    magnitude stays within FLOAT32_SCORE_LIMIT, float64 within FLOAT64_SCORE_LIMIT."""
    _, lower, upper, max_context, order, iv = _prepare(machine_or_expr, lower, upper,
                                                       max_context)
    reads = [(n.op, _score_magnitude(n, iv, lower, upper, max_context)) for n in order
             if n.op in CONTENT and iv[id(n)] is not None and iv[id(n)][0] != iv[id(n)][1]]
    if max_context > MAX_POSITIONS:  # (history reads become read_at heads there)
        reads += [("history", 3 * max_context * max_context) for n in order
                  if n.op == "history" and n.args[0] > 0 and iv[id(n)] is not None
                  and iv[id(n)][0] != iv[id(n)][1]]
    return reads


def needs_float64(machine_or_expr, *, lower: int | None = None, upper: int | None = None,
                  max_context: int | None = None) -> bool:
    """True when the translation (same arguments as `translate`) is exact only under
    `compile(..., dtype="float64")`: some content read's scores exceed FLOAT32_SCORE_LIMIT."""
    return any(m > FLOAT32_SCORE_LIMIT for _, m in score_magnitudes(
        machine_or_expr, lower=lower, upper=upper, max_context=max_context))


def translate(machine_or_expr, *, lower: int | None = None, upper: int | None = None,
              max_context: int | None = None):
    """The tw module of a firebrand `Machine` (its next_value over its alphabet) or `Expr`
    (over tokens lower..upper), for sequences of up to `max_context` positions (a Machine's
    context_limit by default). Output "next" (1 wide), input "tokens" (ids: value - lower).
    Where `needs_float64` says so, only `compile(..., dtype="float64")` keeps it exact."""
    root, lower, upper, max_context, order, iv = _prepare(machine_or_expr, lower, upper,
                                                          max_context)
    for node in order:
        b = iv[id(node)]
        if node.op in CONTENT and b is not None and b[0] != b[1]:
            m = _score_magnitude(node, iv, lower, upper, max_context)
            if m > FLOAT64_SCORE_LIMIT:
                raise FirebrandError(
                    f"firebrand {_describe(node)}: its attention scores reach {m}, beyond "
                    f"2**46 where even float64 loses the gap; shorten max_context "
                    f"({max_context}) or narrow its values")
    with tw.Graph("main") as g:
        bld = _Builder(lower, upper, max_context)
        forms: dict = {}
        for node in order:
            forms[id(node)] = _node(bld, node, forms, iv)
        tw.output("next", bld.value(forms[id(root)]))
    return g.module


def _node(bld: _Builder, node, forms, iv) -> Form:
    op, args = node.op, node.args
    box = iv[id(node)]
    if box is None:           # never defined: any value will do
        return Form(0)
    if box[0] == box[1]:      # one value wherever defined
        return Form(box[0])
    if op == "history":
        return bld.atom(bld.history(args[0]))
    if op in CONTENT:
        return bld.atom(_content(bld, node, forms, iv))
    if op == "position":
        return bld.atom(tw.slice(bld.pos(), 0, 1))
    if op in POSITIONAL:
        col = [[float(position_feature(node, i))] for i in range(bld.max_context)]
        return bld.atom(tw.pos_table(np.array(col)))
    f = forms[id(args[0])] if _is_expr(args[0]) else None
    lo, hi = iv[id(args[0])] if _is_expr(args[0]) else (None, None)
    if op == "add":
        return f + forms[id(args[1])]
    if op == "scale":
        return f.scaled(args[1])
    if op == "relu":
        return f if lo >= 0 else bld.atom(tw.relu(bld.value(f)))
    if op == "clip":
        a, b = args[1], args[2]
        if a <= lo and hi <= b:
            return f
        return bld.atom(tw.clamp(bld.value(f), float(a), float(b)))
    if op == "equals":
        v = args[1]
        xs = [x for x in (v - 1, v, v + 1) if lo <= x <= hi]
        return bld.atom(tw.piecewise_linear(bld.value(f), xs, [float(x == v) for x in xs]))
    if op == "mod":
        return _mod(bld, node, f, lo, hi)
    if op == "lookup":
        start, table = args[1], args[2]
        a, b = max(lo, start), min(hi, start + len(table) - 1)
        xs, ys = _bends(a, table[a - start:b - start + 1])
        if len(xs) > MAX_DOMAIN:   # a long table is fine while its slope seldom changes
            raise FirebrandError(
                f"firebrand {_describe(node)}: its table over [{a}, {b}] bends at {len(xs)} "
                f"integers, above {MAX_DOMAIN}; clip its argument to a smaller interval")
        return bld.atom(tw.piecewise_linear(bld.value(f), xs, ys))
    if op == "select":
        fa, fb = forms[id(args[1])], forms[id(args[2])]
        if not fa.terms and not fb.terms:     # b + (a - b) c
            return Form(fb.const) + f.scaled(fa.const - fb.const)
        cond = bld.value(f.scaled(2) + Form(-1))
        return bld.atom(tw.select(cond, bld.value(fa), bld.value(fb)))
    raise FirebrandError(f"firebrand: unknown operation {op!r}")


def _mod(bld: _Builder, node, f: Form, lo: int, hi: int) -> Form:
    """f mod m over [lo, hi]: the identity below m, else a sawtooth through its bends."""
    m = node.args[1]
    a = max(lo, 0)
    if hi < m:                        # a < m too: mod is the identity here
        return f
    # sawtooth: bends at k m - 1 and k m for every multiple k m in (a, hi]
    first = (a // m + 1) * m
    if (hi - first) // m + 1 > MAX_DOMAIN // 2:
        _refuse_domain(node, a, hi, "its sawtooth")
    xs = {a, hi}
    for km in range(first, hi + 1, m):
        xs.update((km - 1, km))
    xs = sorted(x for x in xs if a <= x <= hi)
    return bld.atom(tw.piecewise_linear(bld.value(f), xs, [float(x % m) for x in xs]))


def _read(query, key, value, wq, gain: float):
    """A hard read: integer scores whose winner leads by >= 1, times `gain` (`tw.hard`)."""
    return tw.attn(query, key, value, np.asarray(wq, dtype=np.float64) * gain,
                   np.eye(np.asarray(wq).shape[1]), np.eye(1), np.eye(1), hard=gain)


def _content(bld: _Builder, node, forms, iv):
    """One attention head: read_at's token, latest's or match's position (module doc)."""
    L = bld.max_context
    pos = bld.pos()
    one = tw.literal([1.0])
    if node.op == "read_at":
        query = tw.concat(bld.value(forms[id(node.args[0])]), one)
        return _read(query, tw.slice(pos, 0, 2), bld.token, [[2.0, 0.0], [0.0, -1.0]],
                     POSITION_GAIN)
    position = tw.slice(pos, 0, 1)
    if node.op == "latest":
        key, period, phase, start = node.args
        tag = tw.pos_table(np.array([[float(j >= start and j % period == phase)]
                                     for j in range(L)]))
        smin, smax = _latest_scores(iv[id(key)], bld.lower, bld.upper)
        t = L * (smax - smin) + L
        query = tw.concat(bld.value(forms[id(key)]), one)
        keys = tw.concat(bld.embedded, position, tag)       # [t, t^2, j, tag]
        wq = [[2.0 * L, 0.0, 0.0, 0.0], [0.0, -float(L), 1.0, float(t)]]
        return _read(query, keys, position, wq, SOFTMAX_GAIN)
    n, a, _, t = _match_parts(node, iv, L)
    _, period, phase, start, sentinel, end = node.args[:6]
    q = [forms[id(x)] for x in node.args[6:6 + n]]
    qsq = Form(0)
    for x in node.args[6 + n:6 + 2 * n]:
        qsq = qsq + forms[id(x)]
    k = [bld.value(forms[id(x)]) for x in node.args[6 + 2 * n:6 + 4 * n]]
    lo, hi = 0, 0
    for x in node.args[6 + n:6 + 2 * n]:
        lo, hi = lo + iv[id(x)][0], hi + iv[id(x)][1]
    small = qsq if lo >= 0 and hi <= 1 else bld.atom(tw.clamp(bld.value(qsq), 0.0, 1.0))
    w = qsq.scaled(2) + small.scaled(-1)
    cols = np.array([[float(j == sentinel),
                      float(j >= start and j % period == phase and (end == -1 or j < end))]
                     for j in range(L)])
    query = tw.concat(*(bld.value(f) for f in q), one, bld.value(w))
    keys = tw.concat(*k, position, tw.pos_table(cols))  # [k_d, k_d^2, j, sentinel, tag]
    wq = np.zeros((n + 2, 2 * n + 3))
    for d in range(n):
        wq[d, d] = 4.0 * a
        wq[n, n + d] = -2.0 * a
    wq[n, 2 * n] = 2.0
    wq[n, 2 * n + 2] = float(t)
    wq[n + 1, 2 * n + 1] = float(a)
    return _read(query, keys, position, wq, SOFTMAX_GAIN)
