"""Exact-index heads: where a head's softmax picks one key, and which lookup finds that key.

A head scores key j for query i as s(i, j) = qp(i) . kp(j), qp and kp its projected query and
key (head dims 0..dqk-1, `tw.attn`'s q Wq and k Wk). Where the winner leads every other key by
a gap g, every other key weighs below exp(-g) of it: with (n - 1) exp(-g) <= 2^-24 (n keys) the
winner's weight rounds to 1 in float32 and the output is the winner's value to float32
rounding, so a decoder may look the winner up instead of attending (`lowering/fast_decode.py`,
`lowering/verify.py`). `plan_head` decides, per `tw.attn` op, which lookup applies, from what the
graph proves about its key dims (`key_facts`):

* **position** (a position read): every key dim is a polynomial of degree <= 2 in the key's
  position j (`tw.pos_encoding`'s j and j*j, position tables that are such polynomials,
  literals), so s = c + b j + a j^2 with a = qp . A2, b = qp . A1. Where a is one negative
  number for every admissible query and t = b / (-2a) an integer (the integrality analysis), the
  winner is clamp(t, 0, i) and it leads by >= |a|: proven at compile time, for every query.
  a = 0 with b one positive number (the pooled self-attention heads, `Machine.self_attend_gain`)
  is the same kind: the winner is the query's own position, by b.
* **match** (newest key match): key dims are integer content values v_d, their squares
  sigma_d v_d^2 (proven: a token embedding's column that is another's square, a
  `tw.piecewise_linear` through the squares of the very value), at most one recency dim r j,
  and position-table dims with few values (tags, sentinels: a key's *class*). The content
  score sum_d beta_d (v_d - t_d)^2 (beta_d < 0) peaks at the target t_d = -qV_d / (2 beta_d),
  and among equal keys the newest wins (r qR > 0). Whether the exact target is present is
  known only at run time, so each query is certified there: the candidate's score leads every
  other class's candidate and every bound on the keys not looked up by the gap, else the head
  is attended for that query (the `scan`). The static part (structure, beta_d < 0 constant,
  integer targets, content beating recency by the gap) is proven here.
* **scan**: anything else (rotary or full-mask heads, mean reads, heads whose gap is not
  proven): real attention.

The plan is computed on the graph as the frontend wrote it (`annotate`, run by `prepare` on
its copy before the passes, stored as the `tw.index` attribute: JSON over projected dims, which
the passes preserve: folding a linear into Wk changes k, not k Wk), or on the compiled graph
itself where no pass ran. The decoders re-check every key against the plan at run time
(integer content, squares, the position polynomial) and attend where one does not fit.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np
from xdsl.ir import BlockArgument

INDEX = "tw.index"
# The leakage a proof allows: (n - 1) exp(-gap) <= 2^-24, the winner's weight rounds to 1.
FLOAT32_LEAK = 24 * math.log(2)
MAX_CLASS_VALUES = 16  # a position-table key dim with at most this many values is a class


def needed_gap(positions: int) -> float:
    """The logit gap that makes every other key of `positions` weigh below 2^-24 together."""
    return math.log(max(positions, 2) - 1) + FLOAT32_LEAK


@dataclass(frozen=True)
class HeadPlan:
    """One head's lookup (over its projected dims 0..dqk-1), and why (`why`: the proof, or
    what failed). `gap`: the proven least logit gap (position), or the content gap every query
    is certified against (match)."""

    kind: str = "scan"
    why: str = ""
    gap: float = 0.0
    dims: int = 0
    # position: kp(j) = a0 + a1 j + a2 j^2, per dim
    a0: tuple = ()
    a1: tuple = ()
    a2: tuple = ()
    # match: value dims, their square dims (kp = sigma v^2), the recency dim (kp = r j, or
    # -1), class dims (position tables), constant dims (kp = c)
    value_dims: tuple = ()
    square_dims: tuple = ()
    sigma: tuple = ()
    value_lo: tuple = ()
    value_hi: tuple = ()
    value_step: tuple = ()  # the integer lattice's step of each value dim, in kp units
    recency_dim: int = -1
    recency: float = 0.0
    class_dims: tuple = ()
    const_dims: tuple = ()
    const: tuple = ()
    magnitude: float = 0.0  # a bound on |s|: float rounding must stay well inside the gap

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> HeadPlan:
        d = json.loads(text)
        return HeadPlan(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    @property
    def indexed(self) -> bool:
        return self.kind != "scan"

    @property
    def steps(self) -> list[float]:
        """Each value dim's lattice step in key units (1 where the plan names none)."""
        return list(self.value_step) if self.value_step else [1.0] * len(self.value_dims)


SCAN = HeadPlan("scan", "not a one-key read")


def self_plan(gain: float) -> HeadPlan:
    """The pooled position-local heads (`LayerBuilder.finish`): q = gain, k = j."""
    return HeadPlan("position", f"self-attention: s = {gain:g} j peaks at the query's own "
                    "position", float(gain), 1, (0.0,), (1.0,), (0.0,))


# --------------------------------------------------------------------------------------
# What the graph proves about each key column
# --------------------------------------------------------------------------------------


@dataclass
class Fact:
    """One key column: `poly` (p0 + p1 j + p2 j^2), `table` (a position table's column with
    few values), `int` (integer content in [lo, hi]; `ident` names it), `square` (sigma
    times the square of the content named `ident`), or `other`."""

    kind: str
    poly: tuple = (0.0, 0.0, 0.0)
    lo: float = 0.0
    hi: float = 0.0
    ident: tuple = ()
    sigma: float = 1.0


def _source(value, col: int):
    """(value, column) that column `col` of `value` comes from through concats and slices."""
    from twdialect.dialect import ConcatOp, SliceOp, width_of

    while True:
        op = value.owner
        if isinstance(op, SliceOp):
            col += op.start.value.data
            value = op.operands[0]
        elif isinstance(op, ConcatOp):
            for part in op.operands:
                w = width_of(part)
                if col < w:
                    value = part
                    break
                col -= w
        else:
            return value, col


def _poly_fit(column: np.ndarray) -> tuple | None:
    """(p0, p1, p2) when column[j] = p0 + p1 j + p2 j^2 at every row, else None."""
    n = len(column)
    j = np.arange(n, dtype=np.float64)
    if n >= 3:
        p0 = column[0]
        p2 = (column[2] - 2 * column[1] + column[0]) / 2
        p1 = column[1] - column[0] - p2
    elif n == 2:
        p0, p1, p2 = column[0], column[1] - column[0], 0.0
    else:
        p0, p1, p2 = (column[0] if n else 0.0), 0.0, 0.0
    if np.array_equal(p0 + p1 * j + p2 * j * j, column):
        return float(p0), float(p1), float(p2)
    return None


def _column_fact(value, col: int, boxes, ints) -> Fact:
    """What the graph proves about column `col` of `value` (a key operand's column)."""
    from twdialect.dialect import (EmbeddingOp, LiteralOp, PiecewiseLinearOp, PosEncodingOp,
                                   PosTableOp)
    from twdialect.ranges import _prop

    value, col = _source(value, col)
    op = value.owner
    if isinstance(op, PosEncodingOp) and col < 2:
        return Fact("poly", (0.0, 1.0, 0.0) if col == 0 else (0.0, 0.0, 1.0))
    if isinstance(op, LiteralOp):
        return Fact("poly", (float(_prop(op, "value").reshape(-1)[col]), 0.0, 0.0))
    if isinstance(op, PosTableOp):
        column = _prop(op, "table")[:, col].astype(np.float64)
        p = _poly_fit(column)
        if p is not None:
            return Fact("poly", p)
        return Fact("table" if len(np.unique(column)) <= MAX_CLASS_VALUES else "other")
    if isinstance(op, EmbeddingOp):
        table = _prop(op, "table").astype(np.float64)
        c = table[:, col]
        for other in range(table.shape[1]):  # a column that is a constant times another's square
            base = table[:, other]
            if other != col and np.all(base == np.round(base)) and np.any(base != 0):
                nz = base != 0
                sigma = c[nz][0] / base[nz][0] ** 2
                if sigma != 0 and np.array_equal(c, sigma * base * base):
                    return Fact("square", ident=(id(value), other), sigma=float(sigma))
    if boxes is None:  # (the structural facts alone: no value ranges asked for)
        return Fact("other")
    if isinstance(op, PiecewiseLinearOp) and _is_square_table(op, boxes, ints):
        src = _source(op.operands[0], 0)
        return Fact("square", ident=(id(src[0]), src[1]), sigma=1.0)
    box, integer = _get(boxes, value), _get(ints, value)
    lo, hi = (b[col] for b in box) if box is not None else (-np.inf, np.inf)
    if integer is not None and integer[col] and np.isfinite(lo) and np.isfinite(hi):
        return Fact("int", lo=float(lo), hi=float(hi), ident=(id(value), col))
    return Fact("other")


def _get(facts, value):
    """facts[value] (a lazy `_Lazy` computes it), or None where there is none."""
    from twdialect.ranges import RangeError

    try:
        return facts[value]
    except (KeyError, RangeError):
        return None


MAX_SQUARE_CHECK = 1 << 17  # integers a square table is checked at


def _is_square_table(op, boxes, ints) -> bool:
    """`op` (a 1-wide tw.piecewise_linear) gives x^2 at every integer x its integer input takes."""
    from twdialect.ranges import _prop

    x = op.operands[0]
    box, integer = _get(boxes, x), _get(ints, x)
    if box is None or integer is None or not integer[0]:
        return False
    lo, hi = box[0][0], box[1][0]
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi - lo > MAX_SQUARE_CHECK:
        return False
    from twdialect.interp import pwl_1d

    n = np.arange(math.ceil(lo), math.floor(hi) + 1, dtype=np.float64)
    got = pwl_1d(n, _prop(op, "breakpoints"), _prop(op, "values"))
    return bool(np.array_equal(np.asarray(got, np.float64).reshape(-1), n * n))


# --------------------------------------------------------------------------------------
# The plan of one head
# --------------------------------------------------------------------------------------


def _q_side(op, boxes, ints):
    """Per projected query dim: (lo, hi) over admissible queries, and whether qp_d is an
    integer combination: returns lo, hi (dqk,), the Wq matrix, q's box and integrality."""
    from twdialect.ranges import _prop, affine_box

    wq = _prop(op, "wq").astype(np.float64)
    q = op.operands[0]
    qlo, qhi = boxes[q]
    lo, hi = affine_box(qlo, qhi, wq, None)
    return np.asarray(lo, np.float64), np.asarray(hi, np.float64), wq, (qlo, qhi), _get(ints, q)


def _integer_target(wq, qbox, qint, num: np.ndarray, den: float) -> bool:
    """Is (q Wq) . num / den an integer for every admissible q? Each q component either is a
    constant (its box a point) or an integer with an integer coefficient."""
    coef = wq @ num / den
    qlo, qhi = qbox
    const = 0.0
    for r, c in enumerate(coef):
        if c == 0:
            continue
        if qlo[r] == qhi[r]:
            const += qlo[r] * c
        elif qint is None or not qint[r] or c != round(c):
            return False
    return const == round(const)


def _constant(wq, qbox, v: np.ndarray) -> float | None:
    """(q Wq) . v when it is one number for every admissible query (every q component it
    weighs is a constant), else None."""
    coef = wq @ v
    qlo, qhi = qbox
    nz = coef != 0
    if np.all(qlo[nz] == qhi[nz]):
        return float(qlo[nz] @ coef[nz])
    return None


def plan_head(op, boxes, ints, positions: int) -> HeadPlan:
    """The lookup of `tw.attn` op `op` (its graph's value ranges `boxes` and integrality
    `ints`) over sequences of up to `positions` positions."""
    from twdialect.ranges import _prop

    if op.rope is not None or op.is_full:
        return HeadPlan("scan", "rotary" if op.rope is not None else "full-mask head")
    k = op.operands[1]
    wk = _prop(op, "wk").astype(np.float64)
    dims = wk.shape[1]
    # the structural facts first: most heads are decided before any value range is asked for
    facts = [_column_fact(k, c, None, None) for c in range(wk.shape[0])]
    position = all(f.kind == "poly" for f in facts)
    if not position:
        mixed = [d for d in range(dims) if np.count_nonzero(wk[:, d]) != 1]
        if mixed:
            return HeadPlan("scan", f"key dim {mixed[0]} mixes "
                            f"{np.count_nonzero(wk[:, mixed[0]])} key columns")
        facts = [_column_fact(k, c, boxes, ints) for c in range(wk.shape[0])]
    if _get(boxes, op.operands[0]) is None:
        return HeadPlan("scan", "no value ranges")
    lo, hi, wq, qbox, qint = _q_side(op, boxes, ints)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        return HeadPlan("scan", "the query's range is not finite")
    if position:
        return _position_plan(facts, wk, lo, hi, wq, qbox, qint, positions, dims)
    return _match_plan(facts, wk, lo, hi, wq, qbox, qint, positions, dims)


def _position_plan(facts, wk, lo, hi, wq, qbox, qint, positions, dims) -> HeadPlan:
    p = np.array([f.poly for f in facts])  # (key cols, 3)
    a0, a1, a2 = (p[:, i] @ wk for i in range(3))  # per projected dim
    a = _constant(wq, qbox, a2)
    need = needed_gap(positions)
    plan = dict(kind="position", dims=dims, a0=tuple(a0), a1=tuple(a1), a2=tuple(a2))
    if a is None:
        return HeadPlan("scan", "a position read whose curvature depends on the query")
    if a == 0:
        b = _constant(wq, qbox, a1)
        if b is None or b <= 0:
            return HeadPlan("scan", "a position read that does not favour the newest key")
        gap = b
        why = f"s = {b:g} j: the newest key leads by {b:g}"
    elif a > 0:
        return HeadPlan("scan", "a convex position read")
    else:
        if not _integer_target(wq, qbox, qint, a1, -2 * a):
            return HeadPlan("scan", "a position read whose target may not be an integer")
        gap = -a
        why = (f"s = c + b j - {-a:g} j^2 with b / {-2 * a:g} an integer: the target (clamped "
               f"to 0..i) leads by >= {-a:g}")
    mag = _magnitude(lo, hi, a0, a1, a2, positions)
    if gap < need:
        return HeadPlan("scan", f"gap {gap:g} below the {need:.1f} {positions} positions need")
    return HeadPlan(**plan, gap=float(gap), why=why + f"; |s| <= {mag:.3g}", magnitude=mag)


def _magnitude(lo, hi, a0, a1, a2, positions) -> float:
    m = np.maximum(np.abs(lo), np.abs(hi))
    n = float(positions)
    return float(m @ (np.abs(a0) + np.abs(a1) * n + np.abs(a2) * n * n))


def _match_plan(facts, wk, lo, hi, wq, qbox, qint, positions, dims) -> HeadPlan:
    """A newest-match head: each projected dim must be exactly one key column's multiple."""
    role = []
    for d in range(dims):
        cols = np.nonzero(wk[:, d])[0]
        if len(cols) != 1:
            return HeadPlan("scan", f"key dim {d} mixes {len(cols)} key columns")
        role.append((int(cols[0]), float(wk[cols[0], d])))
    values, squares, classes, consts, recency = {}, [], [], [], None
    for d, (c, w) in enumerate(role):
        f = facts[c]
        if f.kind == "int":
            values[f.ident] = (d, w, f.lo, f.hi)
        elif f.kind == "square":
            squares.append((d, w, f))
        elif f.kind == "table":
            classes.append(d)
        elif f.kind == "poly" and f.poly[1] == f.poly[2] == 0:
            consts.append((d, w * f.poly[0]))
        elif f.kind == "poly" and f.poly[0] == f.poly[2] == 0 and recency is None:
            recency = (d, w * f.poly[1])
        else:
            return HeadPlan("scan", f"key dim {d} is neither content, its square, a class, "
                            "the position nor a constant")
    if not values:
        return HeadPlan("scan", "no integer content key")
    vd, sd, sig, vlo, vhi, betas, steps = [], [], [], [], [], [], []
    for d, w, f in squares:
        if f.ident not in values:
            return HeadPlan("scan", f"key dim {d} squares a value the key does not hold")
        v, wv, vl, vh = values[f.ident]
        sigma = w * f.sigma / (wv * wv)  # kp_d = sigma kp_v^2
        e = np.zeros(dims)
        e[d] = sigma
        beta = _constant(wq, qbox, e)
        if beta is None or beta >= 0:
            return HeadPlan("scan", f"the square dim {d} has no fixed negative weight")
        ev = np.zeros(dims)
        ev[v] = 1.0
        # target t = -qp_v / (2 beta) over kp_v = wv v: an integer multiple of wv
        if not _integer_target(wq, qbox, qint, ev, -2 * beta * wv):
            return HeadPlan("scan", f"the target of key dim {v} may not be an integer")
        lo_v, hi_v = sorted((wv * vl, wv * vh))
        vd.append(v); sd.append(d); sig.append(sigma); vlo.append(lo_v); vhi.append(hi_v)
        steps.append(abs(wv))
        betas.append(beta * wv * wv)  # per unit step of the integer content
    if len(vd) != len(values):
        return HeadPlan("scan", "a content key without its square")
    r_dim, r = -1, 0.0
    if recency is not None:
        r_dim = recency[0]
        e = np.zeros(dims)
        e[r_dim] = recency[1]
        qr = _constant(wq, qbox, e)
        if qr is None or qr <= 0:
            return HeadPlan("scan", "equal keys are not told apart by recency")
        r = recency[1]
        spread = qr * (positions - 1)
    else:
        return HeadPlan("scan", "no recency dim: equal keys would share the weight")
    gap = min(-b for b in betas) - spread
    need = needed_gap(positions)
    if gap < need or qr < need:
        return HeadPlan("scan", f"content gap {gap:g} (recency step {qr:g}) below the "
                        f"{need:.1f} {positions} positions need")
    return HeadPlan(
        "match", f"newest of {len(vd)} integer key value(s) by squares (beta <= "
        f"{max(betas):g}), recency {qr:g} per position", float(min(gap, qr)), dims,
        value_dims=tuple(vd), square_dims=tuple(sd), sigma=tuple(sig), value_lo=tuple(vlo),
        value_hi=tuple(vhi), value_step=tuple(steps), recency_dim=r_dim, recency=r, class_dims=tuple(classes),
        const_dims=tuple(d for d, _ in consts), const=tuple(c for _, c in consts))


# --------------------------------------------------------------------------------------
# The graph: every head planned, the plan kept on the op
# --------------------------------------------------------------------------------------


def graph_positions(graph) -> int:
    """The longest sequence `graph` takes (its position tables and encodings), else 2^20."""
    from twdialect.dialect import PosEncodingOp, PosTableOp
    from twdialect.ranges import _prop

    n = []
    for op in graph.block.ops:
        if isinstance(op, PosTableOp):
            n.append(int(_prop(op, "table").shape[0]))
        elif isinstance(op, PosEncodingOp):
            n.append(int(op.max_len.value.data))
    return min(n) if n else 1 << 20


def plans(graph) -> dict:
    """{tw.attn op: HeadPlan} for every attention op of `graph`."""
    from twdialect.dialect import AttnOp
    from twdialect.ranges import op_integer

    heads = [op for op in graph.block.ops if isinstance(op, AttnOp)]
    if not heads:
        return {}
    boxes, ints = _Lazy(_box_rule), _Lazy(op_integer)  # (only the ancestors a plan asks about)
    n = graph_positions(graph)
    return {op: plan_head(op, boxes, ints, n) for op in heads}


class _Lazy(dict):
    """value -> its fact, computed on first asking (`walk_to`: only the missing ancestors)."""

    def __init__(self, visit):
        super().__init__()
        self.visit = visit

    def __missing__(self, value):
        from twdialect.interp import walk_to

        if isinstance(value, BlockArgument):
            raise KeyError(value)
        return walk_to(value, self, self.visit)  # (it asks `in` and reads only what is there)


def _box_rule(op, boxes):
    """`value_ranges`' rule, bounds kept infinite where they overflow."""
    from twdialect.ranges import _checked_box

    return _checked_box(op, boxes, False)


def annotate(module) -> None:
    """Write every attn op's plan into its `tw.index` attribute (JSON), over each graph of
    `module` (a copy `prepare` owns, before the passes)."""
    from xdsl.dialects.builtin import StringAttr

    from twdialect.dialect import GraphOp

    for graph in module.walk():
        if isinstance(graph, GraphOp):
            for op, plan in plans(graph).items():
                op.attributes[INDEX] = StringAttr(plan.to_json())


def plan_of(op, cache: dict, graph) -> HeadPlan:
    """`op`'s plan: its `tw.index` attribute, or planned now on `graph` (no pass ran)."""
    attr = op.attributes.get(INDEX)
    if attr is not None:
        try:
            return HeadPlan.from_json(attr.data)
        except (ValueError, TypeError):
            pass
    if "plans" not in cache:
        cache["plans"] = plans(graph)
    return cache["plans"].get(op, SCAN)
