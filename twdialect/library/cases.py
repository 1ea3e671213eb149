"""Measurement cases for every library op: a small graph, inputs drawn from the op's documented
distribution, an independent numpy reference, and the error the contract allows.

The tests (tests/test_library_cases.py) check every case through the oracle and the compiled
model; bench/ops_error_table.py measures the same cases to generate docs/ops.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from twdialect import ops as tw
import twdialect.library as lib


@dataclass(frozen=True)
class Case:
    op: str  # the library op measured
    label: str  # variant / parameters, unique per op
    distribution: str  # the input distribution, in words
    build: Callable[[], object]  # -> ModuleOp with output "y"
    sample: Callable[[np.random.Generator], dict]  # -> {input: (n_positions, width)}
    reference: Callable[[dict], np.ndarray]  # inputs -> expected "y"
    atol: float = 1e-4  # allowed |error| (contract bound + fp32)
    rtol: float = 0.0  # plus rtol * |reference|

    @property
    def key(self) -> str:
        return f"{self.op}[{self.label}]"

    def module(self):
        return self.build()


# 'Exact' cases: the op's own arithmetic is exact in fp32; the lowering may add cancel residue
# of order 1e-27, so the check allows 1e-6.
EXACT = 1e-6

N = 256  # positions per sample for per-position ops
SEQ = 48  # sequence length for attention ops (pos max_len 64)
MAX_LEN = 64


def _graph(body: Callable[[], object]) -> Callable[[], object]:
    def build():
        with tw.Graph("main") as g:
            tw.output("y", body())
        return g.module

    return build


def _pm1(rng, shape, p_true=0.5):
    return np.where(rng.random(shape) < p_true, 1.0, -1.0)


def _outside_ramps(rng, lo, hi, ramp, below=True):
    """Uniform in [lo, hi] with the ramp zones (k - ramp, k) (or (k, k + ramp)) removed."""
    k = rng.integers(int(np.floor(lo)), int(np.floor(hi)), N).astype(float)
    u = rng.uniform(0.0, 1.0 - ramp, N)
    x = k + u if below else k + ramp + u
    return np.clip(x, lo, hi)[:, None]


CASES: list[Case] = []


def case(*args, **kw):
    CASES.append(Case(*args, **kw))


# ---------------------------------------------------------------- arith
case("cond_gate", "max_abs=5, w=3", "c = +/-1, x ~ U[-5, 5]^3",
     _graph(lambda: lib.cond_gate(tw.input("c", 1, (-1, 1)), tw.input("x", 3, (-5, 5)), max_abs=5)),
     lambda r: {"c": _pm1(r, (N, 1)), "x": r.uniform(-5, 5, (N, 3))},
     lambda i: np.where(i["c"] > 0, i["x"], 0.0), atol=1e-5)
case("cond_gate", "noisy cond, max_abs=5", "c = +/-U[0.5, 1], x ~ U[-5, 5]^3",
     _graph(lambda: lib.cond_gate(tw.input("c", 1, (-1, 1)), tw.input("x", 3, (-5, 5)), max_abs=5)),
     lambda r: {"c": _pm1(r, (N, 1)) * r.uniform(0.5, 1.0, (N, 1)), "x": r.uniform(-5, 5, (N, 3))},
     lambda i: np.where(i["c"] > 0, i["x"], 0.0), atol=1e-5)
case("cond_gate", "bound from ranges", "c = +/-1, x ~ U[-5, 5]^3",
     _graph(lambda: lib.cond_gate(tw.input("c", 1, (-1, 1)), tw.input("x", 3, (-5, 5)))),
     lambda r: {"c": _pm1(r, (N, 1)), "x": r.uniform(-5, 5, (N, 3))},
     lambda i: np.where(i["c"] > 0, i["x"], 0.0), atol=1e-5)


def _switch_sample(r):
    k = r.integers(0, 4, N)  # 3 = no branch true
    conds = {f"c{j}": np.where(k == j, 1.0, -1.0)[:, None] for j in range(3)}
    conds.update({f"v{j}": r.uniform(-4, 4, (N, 2)) for j in range(3)})
    return conds


def _switch_ref(i):
    out = np.zeros((N, 2))
    for j in range(3):
        out += np.where(i[f"c{j}"] > 0, i[f"v{j}"], 0.0)
    return out


for _bound in (4.0, None):
    case("switch", f"3 branches, max_abs={_bound or 'from ranges'}", "one-hot (or no) +/-1 conds, v ~ U[-4, 4]^2",
         _graph(lambda b=_bound: lib.switch([tw.input(f"c{j}", 1, (-1, 1)) for j in range(3)],
                                            [tw.input(f"v{j}", 2, (-4, 4)) for j in range(3)],
                                            max_abs=b)),
         _switch_sample, _switch_ref, atol=1e-5)

case("floor_int", "[-20, 20], ramp 0.5", "x ~ U[-20, 20] outside the ramp zones",
     _graph(lambda: lib.floor_int(tw.input("x", 1, (-20, 20)), -20, 20)),
     lambda r: {"x": _outside_ramps(r, -20, 20, 0.5)}, lambda i: np.floor(i["x"]), atol=1e-4)
case("floor_int", "integers [0, 255]", "integer x in [0, 255]",
     _graph(lambda: lib.floor_int(tw.input("x", 1, (0, 255)), 0, 255, ramp=0.25)),
     lambda r: {"x": r.integers(0, 256, (N, 1)).astype(float)}, lambda i: np.floor(i["x"]),
     atol=EXACT)
case("ceil_int", "[-20, 20], ramp 0.5", "x ~ U[-20, 20] outside the ramp zones",
     _graph(lambda: lib.ceil_int(tw.input("x", 1, (-20, 20)), -20, 20)),
     lambda r: {"x": _outside_ramps(r, -20, 20, 0.5, below=False)}, lambda i: np.ceil(i["x"]),
     atol=1e-4)
case("reciprocal", "[0.5, 50], rel 1e-3", "x log-uniform in [0.5, 50]",
     _graph(lambda: lib.reciprocal(tw.input("x", 1, (0.5, 50)), 0.5, 50)),
     lambda r: {"x": np.exp(r.uniform(np.log(0.5), np.log(50), (N, 1)))},
     lambda i: 1.0 / i["x"], atol=4e-7 * 49.5 / 0.25, rtol=1e-3)
case("reciprocal", "[-8, -0.25], rel 1e-2", "x log-uniform in [-8, -0.25]",
     _graph(lambda: lib.reciprocal(tw.input("x", 1, (-8, -0.25)), -8, -0.25, rel_error=1e-2)),
     lambda r: {"x": -np.exp(r.uniform(np.log(0.25), np.log(8), (N, 1)))},
     lambda i: 1.0 / i["x"], atol=4e-7 * 7.75 / 0.0625, rtol=1e-2)
case("abs", "w=4", "x ~ U[-100, 100]^4",
     _graph(lambda: lib.abs(tw.input("x", 4, (-100, 100)))),
     lambda r: {"x": r.uniform(-100, 100, (N, 4))}, lambda i: np.abs(i["x"]), atol=1e-4)
case("min", "w=3", "a, b ~ U[-50, 50]^3",
     _graph(lambda: lib.min(tw.input("a", 3, (-50, 50)), tw.input("b", 3, (-50, 50)))),
     lambda r: {"a": r.uniform(-50, 50, (N, 3)), "b": r.uniform(-50, 50, (N, 3))},
     lambda i: np.minimum(i["a"], i["b"]), atol=1e-4)
case("max", "w=3", "a, b ~ U[-50, 50]^3",
     _graph(lambda: lib.max(tw.input("a", 3, (-50, 50)), tw.input("b", 3, (-50, 50)))),
     lambda r: {"a": r.uniform(-50, 50, (N, 3)), "b": r.uniform(-50, 50, (N, 3))},
     lambda i: np.maximum(i["a"], i["b"]), atol=1e-4)
case("square", "integers |x| <= 30", "integer x in [-30, 30]",
     _graph(lambda: lib.square(tw.input("x", 1, (-30, 30)), 30)),
     lambda r: {"x": r.integers(-30, 31, (N, 1)).astype(float)}, lambda i: i["x"] ** 2, atol=EXACT)
case("square", "|x| <= 8, step 0.25", "x ~ U[-8, 8]",
     _graph(lambda: lib.square(tw.input("x", 1, (-8, 8)), 8, step=0.25)),
     lambda r: {"x": r.uniform(-8, 8, (N, 1))}, lambda i: i["x"] ** 2, atol=0.25 ** 2 / 4 + 1e-4)
for _variant in ("shallow", "deep"):
    case("signed_multiply", f"{_variant}, integers", "integer a in [-12, 12], b in [-7, 7]",
         _graph(lambda v=_variant: lib.signed_multiply(tw.input("a", 1, (-12, 12)),
                                                       tw.input("b", 1, (-7, 7)), 12, 7,
                                                       variant=v)),
         lambda r: {"a": r.integers(-12, 13, (N, 1)).astype(float),
                    "b": r.integers(-7, 8, (N, 1)).astype(float)},
         lambda i: i["a"] * i["b"], atol=EXACT)
    case("signed_multiply", f"{_variant}, reals step 0.5", "a ~ U[-6, 6], b ~ U[-3, 3]",
         _graph(lambda v=_variant: lib.signed_multiply(tw.input("a", 1, (-6, 6)),
                                                       tw.input("b", 1, (-3, 3)), 6, 3, step=0.5,
                                                       variant=v)),
         lambda r: {"a": r.uniform(-6, 6, (N, 1)), "b": r.uniform(-3, 3, (N, 1))},
         lambda i: i["a"] * i["b"], atol=0.5 ** 2 / 16 + 1e-4)
    case("multiply_integers", f"{_variant}, |x| <= 20, w=2", "integer a, b in [-20, 20]^2",
         _graph(lambda v=_variant: lib.multiply_integers(tw.input("a", 2, (-20, 20)),
                                                         tw.input("b", 2, (-20, 20)), 20,
                                                         variant=v)),
         lambda r: {"a": r.integers(-20, 21, (N, 2)).astype(float),
                    "b": r.integers(-20, 21, (N, 2)).astype(float)},
         lambda i: i["a"] * i["b"], atol=EXACT)
case("multiply_2d", "17 x 17 grid", "a ~ U[-4, 4], b ~ U[-3, 3]",
     _graph(lambda: lib.multiply_2d(tw.input("a", 1, (-4, 4)), tw.input("b", 1, (-3, 3)),
                                    (-4, 4), (-3, 3))),
     lambda r: {"a": r.uniform(-4, 4, (N, 1)), "b": r.uniform(-3, 3, (N, 1))},
     lambda i: i["a"] * i["b"], atol=0.5 * 0.375 / 4 + 1e-4)


# ---------------------------------------------------------------- logic
case("bool_not", "w=3", "+/-1 booleans",
     _graph(lambda: lib.bool_not(tw.input("x", 3, (-1, 1)))),
     lambda r: {"x": _pm1(r, (N, 3))}, lambda i: -i["x"], atol=EXACT)


def _bools_sample(p):
    return lambda r: {"a": _pm1(r, (N, 1), p), "b": _pm1(r, (N, 2), p), "c": _pm1(r, (N, 1), p)}


def _bools_graph(fn):
    return _graph(lambda: fn([tw.input("a", 1, (-1, 1)), tw.input("b", 2, (-1, 1)),
                              tw.input("c", 1, (-1, 1))]))


def _all(i):
    s = np.concatenate([i["a"], i["b"], i["c"]], axis=1)
    return np.where(np.all(s > 0, axis=1, keepdims=True), 1.0, -1.0)


def _any(i):
    s = np.concatenate([i["a"], i["b"], i["c"]], axis=1)
    return np.where(np.any(s > 0, axis=1, keepdims=True), 1.0, -1.0)


case("bool_all_true", "4 components", "+/-1 booleans, P(true) = 0.8",
     _bools_graph(lib.bool_all_true), _bools_sample(0.8), _all, atol=EXACT)
case("bool_any_true", "4 components", "+/-1 booleans, P(true) = 0.2",
     _bools_graph(lib.bool_any_true), _bools_sample(0.2), _any, atol=EXACT)


def _onehot(r, n, width):
    return np.eye(width)[r.integers(0, width, n)]


case("equals_vector", "dot, one-hot w=6", "one-hot codes of width 6",
     _graph(lambda: lib.equals_vector(tw.input("x", 6, (0, 1)), np.eye(6)[2])),
     lambda r: {"x": _onehot(r, N, 6)},
     lambda i: np.where(i["x"][:, 2:3] == 1, 1.0, -1.0), atol=EXACT)


def _int_vec_sample(r):
    x = r.integers(-2, 3, (N, 3)).astype(float)
    hit = r.random(N) < 0.3
    x[hit] = [1.0, 0.0, -1.0]
    return {"x": x}


case("equals_vector", "integer w=3", "integer x in [-2, 2]^3, 30% equal to the key",
     _graph(lambda: lib.equals_vector(tw.input("x", 3, (-2, 2)), [1, 0, -1], mode="integer")),
     _int_vec_sample,
     lambda i: np.where(np.all(i["x"] == [1.0, 0.0, -1.0], axis=1, keepdims=True), 1.0, -1.0),
     atol=EXACT)


# ---------------------------------------------------------------- tables
_TABLE = np.round(np.random.default_rng(7).uniform(-5, 5, (10, 2)), 3)
_DEFAULT = np.array([-1.0, 0.5])


def _map_ref(i):
    x = i["x"][:, 0].astype(int)
    out = np.tile(_DEFAULT, (N, 1))
    hit = (x >= 0) & (x < 10)
    out[hit] = _TABLE[x[hit]]
    return out


case("map_to_table", "scalar keys 0..9", "integer x in [-3, 12]",
     _graph(lambda: lib.map_to_table(tw.input("x", 1, (-3, 12)), np.arange(10), _TABLE, _DEFAULT)),
     lambda r: {"x": r.integers(-3, 13, (N, 1)).astype(float)}, _map_ref, atol=2e-5)


def _map_vec_ref(i):
    k = np.argmax(i["x"], axis=1)
    out = np.tile(_DEFAULT, (N, 1))
    hit = k < 4
    out[hit] = _TABLE[k[hit]]
    return out


case("map_to_table", "one-hot keys (4 of 6 codes)", "one-hot codes of width 6",
     _graph(lambda: lib.map_to_table(tw.input("x", 6, (0, 1)), np.eye(6)[:4], _TABLE[:4],
                                     _DEFAULT)),
     lambda r: {"x": _onehot(r, N, 6)}, _map_vec_ref, atol=1e-5)
case("onehot_lookup", "01, 10 rows", "one-hot codes of width 10",
     _graph(lambda: lib.onehot_lookup(tw.input("x", 10, (0, 1)), _TABLE)),
     lambda r: {"x": _onehot(r, N, 10)}, lambda i: i["x"] @ _TABLE, atol=1e-5)
case("onehot_lookup", "pm1, 10 rows", "+/-1 one-hot codes of width 10",
     _graph(lambda: lib.onehot_lookup(tw.input("x", 10, (-1, 1)), _TABLE, encoding="pm1")),
     lambda r: {"x": 2 * _onehot(r, N, 10) - 1}, lambda i: (i["x"] + 1) / 2 @ _TABLE, atol=1e-5)


def _in_range_sample(r):
    a = r.integers(0, 11, (N, 1)).astype(float)
    b = r.integers(0, 11, (N, 1)).astype(float)
    return {"lo": np.minimum(a, b), "hi": np.maximum(a, b)}


case("in_range", "10 slots", "integer 0 <= lower <= upper <= 10",
     _graph(lambda: lib.in_range(tw.input("lo", 1, (0, 10)), tw.input("hi", 1, (0, 10)), 10)),
     _in_range_sample,
     lambda i: np.where((np.arange(10) >= i["lo"]) & (np.arange(10) < i["hi"]), 1.0, -1.0),
     atol=EXACT)


def _extract_ref(i):
    idx = i["idx"][:, 0].astype(int)
    t = i["t"].reshape(N, 5, 2)
    out = np.zeros((N, 2))
    ok = (idx >= 0) & (idx < 5)
    out[ok] = t[np.arange(N)[ok], idx[ok]]
    return out


case("dynamic_extract", "5 entries x 2", "t ~ U[-3, 3]^10, integer index in [-2, 6]",
     _graph(lambda: lib.dynamic_extract(tw.input("t", 10, (-3, 3)), tw.input("idx", 1, (-2, 6)),
                                        5)),
     lambda r: {"t": r.uniform(-3, 3, (N, 10)), "idx": r.integers(-2, 7, (N, 1)).astype(float)},
     _extract_ref, atol=1e-4)


# ---------------------------------------------------------------- attention
def _pos():
    return tw.pos_encoding(4, MAX_LEN)


def _offset_ref(k):
    return lambda i: i["v"][np.maximum(np.arange(SEQ) - k, 0)]


case("attend_to_offset", "offset 3", f"v ~ U[-10, 10]^3, {SEQ} positions",
     _graph(lambda: lib.attend_to_offset(_pos(), tw.input("v", 3, (-10, 10)), 3)),
     lambda r: {"v": r.uniform(-10, 10, (SEQ, 3))}, _offset_ref(3), atol=1e-4)
case("get_prev_value", "w=2", f"v ~ U[-10, 10]^2, {SEQ} positions",
     _graph(lambda: lib.get_prev_value(_pos(), tw.input("v", 2, (-10, 10)))),
     lambda r: {"v": r.uniform(-10, 10, (SEQ, 2))}, _offset_ref(1), atol=1e-4)


def _mean_where_ref(i):
    valid = i["valid"][:, 0] > 0
    out = np.zeros((SEQ, 2))
    for t in range(SEQ):
        m = valid[: t + 1]
        rows = i["v"][: t + 1][m] if m.any() else i["v"][: t + 1]
        out[t] = rows.mean(axis=0)
    return out


case("attend_mean_where", "w=2", f"valid = +/-1 (P 0.3), v ~ U[-10, 10]^2, {SEQ} positions",
     _graph(lambda: lib.attend_mean_where(tw.input("valid", 1, (-1, 1)),
                                          tw.input("v", 2, (-10, 10)))),
     lambda r: {"valid": _pm1(r, (SEQ, 1), 0.3), "v": r.uniform(-10, 10, (SEQ, 2))},
     _mean_where_ref, atol=1e-4)


def _arg_ref(sign, where):
    def ref(i):
        s = sign * i["s"][:, 0]
        ok = i["valid"][:, 0] > 0 if where else np.ones(SEQ, bool)
        out = np.zeros((SEQ, 2))
        for t in range(SEQ):
            cand = np.flatnonzero(ok[: t + 1])
            out[t] = i["v"][cand[np.argmax(s[cand])]]
        return out

    return ref


def _arg_sample(where):
    def sample(r):
        d = {"s": r.permutation(SEQ).astype(float)[:, None], "v": r.uniform(-10, 10, (SEQ, 2))}
        if where:
            valid = _pm1(r, (SEQ, 1), 0.5)
            valid[0] = 1.0
            d["valid"] = valid
        return d

    return sample


for _name, _sign in (("attend_argmax", 1.0), ("attend_argmin", -1.0)):
    case(_name, "distinct integer scores", f"scores a permutation of 0..{SEQ - 1}",
         _graph(lambda n=_name: getattr(lib, n)(tw.input("s", 1, (0, SEQ)),
                                                tw.input("v", 2, (-10, 10)))),
         _arg_sample(False), _arg_ref(_sign, False), atol=1e-4)
    case(_name + "_where", "distinct scores, valid P 0.5",
         f"scores a permutation of 0..{SEQ - 1}, valid = +/-1, position 0 valid",
         _graph(lambda n=_name: getattr(lib, n + "_where")(
             tw.input("valid", 1, (-1, 1)), tw.input("s", 1, (0, SEQ)),
             tw.input("v", 2, (-10, 10)), score_range=(0, SEQ))),
         _arg_sample(True), _arg_ref(_sign, True), atol=1e-4)


def _dot_ref(i):
    out = np.zeros((SEQ, 2))
    for t in range(SEQ):
        dots = i["k"][: t + 1] @ i["q"][t]
        best = np.flatnonzero(dots == dots.max())
        out[t] = i["v"][best].mean(axis=0)
    return out


case("attend_argmax_dot", "+/-1 codes w=6", f"q, k random +/-1 codes of width 6, {SEQ} positions",
     _graph(lambda: lib.attend_argmax_dot(tw.input("q", 6, (-1, 1)), tw.input("k", 6, (-1, 1)),
                                          tw.input("v", 2, (-10, 10)), gap=2.0)),
     lambda r: {"q": _pm1(r, (SEQ, 6)), "k": _pm1(r, (SEQ, 6)), "v": r.uniform(-10, 10, (SEQ, 2))},
     _dot_ref, atol=1e-4)


def _recent_ref(i):
    kq = np.argmax(i["q"], axis=1)
    kk = np.argmax(i["k"], axis=1)
    out = np.zeros((SEQ, 2))
    for t in range(SEQ):
        hits = np.flatnonzero(kk[: t + 1] == kq[t])
        out[t] = i["v"][hits[-1] if hits.size else t]
    return out


case("attend_most_recent_matching", "one-hot keys w=5", f"q, k one-hot of width 5, {SEQ} positions",
     _graph(lambda: lib.attend_most_recent_matching(_pos(), tw.input("q", 5, (0, 1)),
                                                    tw.input("k", 5, (0, 1)),
                                                    tw.input("v", 2, (-10, 10)))),
     lambda r: {"q": _onehot(r, SEQ, 5), "k": _onehot(r, SEQ, 5), "v": r.uniform(-10, 10, (SEQ, 2))},
     _recent_ref, atol=1e-4)


# ---------------------------------------------------------------- sequence / digits
def _digits_of(x, n):
    x = x.astype(np.int64)
    return np.stack([(x // 10 ** (n - 1 - k)) % 10 for k in range(n)], axis=1).astype(float)


case("digits_to_number", "4 digits", "digits in [0, 9]^4",
     _graph(lambda: lib.digits_to_number(tw.input("d", 4, (0, 9)))),
     lambda r: {"d": r.integers(0, 10, (N, 4)).astype(float)},
     lambda i: (i["d"] @ [1000.0, 100.0, 10.0, 1.0])[:, None], atol=EXACT)
case("number_to_digits", "3 digits", "integer x in [0, 999]",
     _graph(lambda: lib.number_to_digits(tw.input("x", 1, (0, 999)), 3)),
     lambda r: {"x": r.integers(0, 1000, (N, 1)).astype(float)},
     lambda i: _digits_of(i["x"][:, 0], 3), atol=EXACT)
case("digit_to_onehot", "base 10", "integer digit in [0, 9]",
     _graph(lambda: lib.digit_to_onehot(tw.input("d", 1, (0, 9)))),
     lambda r: {"d": r.integers(0, 10, (N, 1)).astype(float)},
     lambda i: np.eye(10)[i["d"][:, 0].astype(int)], atol=EXACT)
case("onehot_to_digit", "base 10", "one-hot codes of width 10",
     _graph(lambda: lib.onehot_to_digit(tw.input("x", 10, (0, 1)))),
     lambda r: {"x": _onehot(r, N, 10)}, lambda i: np.argmax(i["x"], axis=1)[:, None] * 1.0,
     atol=EXACT)


def _sum_digits_sample(r):
    a = r.integers(0, 1000, N)
    b = np.where(r.random(N) < 0.3, 999 - a, r.integers(0, 1000, N))  # many carry chains
    return {"a": _digits_of(a, 3), "b": _digits_of(b, 3)}


case("sum_digits", "3 + 3 digits", "digits of A, B in [0, 999], 30% with A + B = 999",
     _graph(lambda: lib.sum_digits(tw.input("a", 3, (0, 9)), tw.input("b", 3, (0, 9)))),
     _sum_digits_sample,
     lambda i: _digits_of(i["a"] @ [100.0, 10, 1] + i["b"] @ [100.0, 10, 1], 4), atol=EXACT)


def _rlz_sample(r):
    x = (10 ** r.uniform(0, 4, N)).astype(int) - 1
    x[: N // 8] = 0
    return {"d": _digits_of(x, 4)}


def _rlz_ref(i):
    d = i["d"].copy()
    lead = np.cumsum(d, axis=1) == 0
    lead[:, -1] = False
    d[lead] = -1.0
    return d


case("remove_leading_zeros", "4 digits", "digits of x in [0, 9999], log-uniform, 1/8 zeros",
     _graph(lambda: lib.remove_leading_zeros(tw.input("d", 4, (0, 9)))),
     _rlz_sample, _rlz_ref, atol=EXACT)


def _outseq_sample(r):
    trig = -np.ones((SEQ, 1))
    for t in sorted(r.choice(np.arange(3, SEQ), 2, replace=False)):
        trig[t] = 1.0
    return {"trig": trig, "items": r.integers(0, 10, (SEQ, 4)).astype(float)}


def _outseq_ref(i):
    out = np.zeros((SEQ, 1))
    last = -1
    for t in range(SEQ):
        if i["trig"][t, 0] > 0:
            last = t
        if last >= 0 and t - last < 4:
            out[t, 0] = i["items"][last, t - last]
    return out


case("output_sequence", "4 items x 1", f"two triggers in {SEQ} positions, digit items",
     _graph(lambda: lib.output_sequence(_pos(), tw.input("trig", 1, (-1, 1)),
                                        tw.input("items", 4, (0, 9)), 4, max_abs=9)),
     _outseq_sample, _outseq_ref, atol=1e-4)


def cases_for(op: str) -> list[Case]:
    return [c for c in CASES if c.op == op]
