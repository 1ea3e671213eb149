"""Synthetic torchwright-style graphs, written with `prims` only, parameterised by size and
seed: what the scheduler and the passes meet in hand-written primitive graphs.

* `sandwich_chain`: a chain of small Linear -> ReLU -> Linear sandwiches (compare/select,
  clamp, min/max, abs, mod) with affine glue in between, on integer values;
* `attention_chain`: offset and recency heads reading a positional INPUT (a quadratic or
  one-hot code the host feeds), each read followed by a compare/select sandwich;
* `parallel_chains`: many independent short chains joined by a concat and one summing linear;
* `serial_fold`: a running sum (tw.add chain) or a running max (maximum sandwiches) over many
  values, folded left to right as a user writes it.

Every generator returns a `Synthetic`: the module, a sampler of exact integer inputs, and a
geometry. All values stay integers in [-BOUND, BOUND] (folds: within their declared bound),
so every sandwich is on its exactness contract and the compiled model must match the
oracle to float32 rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from twdialect import ops as tw

from tw_examples.primitive import prims as P

BOUND = 16  # every chain value stays an integer in [-BOUND, BOUND]


@dataclass
class Synthetic:
    name: str
    module: object
    sample: Callable[[np.random.Generator], dict]  # rng -> inputs for evaluate / ct.run
    d: int = 256
    d_head: int = 16
    d_hidden: int = 256


def _int_input(name: str, width: int, lo: int, hi: int):
    return tw.input(name, width, value_range=(float(lo), float(hi)), integer=True)


def _step(rng: np.random.Generator, x, side):
    """One random sandwich (plus glue) mapping an integer in [-B, B] to one in [-B, B]."""
    B = BOUND
    kind = int(rng.integers(0, 7))
    if kind == 0:  # clamp(x + side)
        return P.clamp(P.add_scaled(x, side), -B, B)
    if kind == 1:  # select on a compare
        t = int(rng.integers(-B // 2, B // 2 + 1))
        return P.select(P.compare(x, t), x, side, 2 * B)
    if kind == 2:
        return P.minimum(x, side) if rng.random() < 0.5 else P.maximum(x, side)
    if kind == 3:  # |x| - B/2
        return P.add_const(P.abs_(x), -B // 2)
    if kind == 4:  # (x mod 7) shifted
        return P.add_const(P.mod_const(x, 7, -B, B), -3)
    if kind == 5:  # negate and gate
        return P.cond_gate(P.compare(side, 0), P.negate(x), B)
    return P.add_const(P.multiply_const(P.floor_div_const(x, 4, -B, B), 3), 1)  # 3 floor(x/4) + 1


def sandwich_chain(length: int = 32, seed: int = 0) -> Synthetic:
    """`length` sandwiches in one dependency chain; each also reads one of 4 side inputs."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        xs = _int_input("x", 5, -BOUND, BOUND)
        side = [tw.slice(xs, k, 1) for k in range(1, 5)]
        x = tw.slice(xs, 0, 1)
        for _ in range(length):
            x = _step(rng, x, side[int(rng.integers(0, 4))])
        tw.output("y", x)

    def sample(r):
        n = int(r.integers(1, 9))
        return {"x": r.integers(-BOUND, BOUND + 1, size=(n, 5)).astype(np.float64)}

    return Synthetic(f"sandwich_chain/{length}/{seed}", g.module, sample)


def attention_chain(n_reads: int = 8, seed: int = 0, kind: str = "quadratic",
                    max_len: int = 16) -> Synthetic:
    """`n_reads` attention reads (offsets -1..-4 and, on the quadratic code, the latest
    position with a positive value), each followed by a compare/select sandwich; the position
    code is an input `pos` of the graph."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        x = _int_input("x", 1, -BOUND, BOUND)
        pos = P.pos_input("pos", max_len, kind)
        v = x
        for _ in range(n_reads):
            if kind == "quadratic" and rng.random() < 0.4:
                read = P.get_prev_value(pos, v, P.compare(v, 1))
            else:
                read = P.attend_to_offset(pos, v, -int(rng.integers(1, 5)))
            t = int(rng.integers(-4, 5))
            v = P.select(P.compare(read, t), read, P.negate(v), 2 * BOUND)
        tw.output("y", v)

    def sample(r):
        n = int(r.integers(1, max_len + 1))
        return {"x": r.integers(-BOUND, BOUND + 1, size=(n, 1)).astype(np.float64),
                "pos": P.pos_table(n, kind, max_len)}

    return Synthetic(f"attention_chain/{kind}/{n_reads}/{seed}", g.module, sample)


def parallel_chains(n_chains: int = 16, length: int = 4, seed: int = 0) -> Synthetic:
    """`n_chains` independent chains of `length` sandwiches (each on its own input
    component), joined by a concat into one summing linear and a final clamp."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        xs = _int_input("x", n_chains + 1, -BOUND, BOUND)
        side = tw.slice(xs, n_chains, 1)
        ends = []
        for c in range(n_chains):
            x = tw.slice(xs, c, 1)
            for _ in range(length):
                x = _step(rng, x, side)
            ends.append(x)
        joined = tw.concat(ends)
        total = tw.linear(joined, np.ones((n_chains, 1)))
        tw.output("y", P.clamp(total, -4 * BOUND, 4 * BOUND))
        tw.output("all", joined)

    def sample(r):
        n = int(r.integers(1, 9))
        return {"x": r.integers(-BOUND, BOUND + 1, size=(n, n_chains + 1)).astype(np.float64)}

    return Synthetic(f"parallel_chains/{n_chains}x{length}/{seed}", g.module, sample)


def serial_fold(n_values: int = 64, kind: str = "sum", seed: int = 0) -> Synthetic:
    """A running fold over n_values inputs, left to right: kind "sum" is a chain of tw.add
    (each value first goes through a small sandwich, clamp to [0, 4]); kind "max" is a chain
    of maximum sandwiches."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        xs = _int_input("x", n_values, -BOUND, BOUND)
        acc = None
        for k in range(n_values):
            v = tw.slice(xs, k, 1)
            if kind == "sum":
                v = P.clamp(v, 0, 4)
                acc = v if acc is None else P.add(acc, v)
            else:
                if rng.random() < 0.5:
                    v = P.add_const(v, int(rng.integers(-3, 4)))
                acc = v if acc is None else P.maximum(acc, v)
        tw.output("y", acc)

    def sample(r):
        n = int(r.integers(1, 9))
        return {"x": r.integers(-BOUND, BOUND + 1, size=(n, n_values)).astype(np.float64)}

    return Synthetic(f"serial_fold/{kind}/{n_values}/{seed}", g.module, sample)


def default_suite(quick: bool = False) -> list[Synthetic]:
    """The synthetic graphs the bench reports (smaller ones with `quick`)."""
    if quick:
        return [sandwich_chain(8, 0), attention_chain(4, 0), parallel_chains(4, 3, 0),
                serial_fold(16, "sum", 0), serial_fold(16, "max", 0)]
    return [sandwich_chain(32, 0), sandwich_chain(128, 1),
            attention_chain(8, 0, "quadratic"), attention_chain(6, 1, "onehot"),
            parallel_chains(16, 4, 0), parallel_chains(32, 8, 1),
            serial_fold(64, "sum", 0), serial_fold(64, "max", 0), serial_fold(128, "max", 1)]
