"""One transformer layer's weights while they are written, and the component-to-row resolution.

The weight writer (`lowering/materialize.py`) and the per-op rules (`lowering/rules.py`) add
coordinates here; `LayerBuilder.finish` sums them into trimmed `LayerWeights`. A layer counts
the heads and neurons it hands out, so the writer can check them against the schedule's plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tw_lowering.machine import Machine
from tw_lowering.tasks import POS_GROUP, Refs


@dataclass
class Matrix:
    """A weight matrix as summed coordinates (rows, cols, vals) of a given shape.

    Kept sparse: compiled layers are mostly zeros (a self-attention head's Q has one entry);
    `dense()` gives the array (in the values' dtype) for exports and small models."""

    shape: tuple[int, int]
    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray  # the model's dtype (float32, or float64), duplicates already summed

    @property
    def nnz(self) -> int:
        return len(self.vals)

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape, self.vals.dtype)
        out[self.rows, self.cols] = self.vals
        return out


@dataclass
class LayerWeights:
    """One layer: attention (heads of width d_head) then MLP. Shapes use the trimmed sizes."""

    wq: Matrix  # (d, H*d_head)
    wk: Matrix
    wv: Matrix
    wo: Matrix  # (H*d_head, d)
    bo: np.ndarray  # (d,)
    w1: Matrix  # (d, N)
    b1: np.ndarray  # (N,)
    w2: Matrix  # (N, d)
    b2: np.ndarray  # (d,)
    d_head: int = 1
    # per head: True where its mask is full (every query sees the whole sequence), False for
    # causal heads; empty means every head is causal. Pooled position-local head work always
    # runs in causal heads (its self-attention trick needs the mask).
    full_heads: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    # per head: (base, dims) of its rotary position embedding, dims 0 for a head without one
    # (q and k of a rotary head are rotated by absolute position over its first dims head
    # dimensions, rotate_half); empty means no rotary head. Pooled position-local head work
    # never rotates (its self-attention trick reads the position column).
    rope_heads: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    # per neuron: True where its activation is swish (z * sigmoid(z)) rather than relu; empty
    # means every neuron is relu.
    swish: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    # gated neurons (a tw.mlp with an up projection): lane_j = act(z_j) * (x wu + bu)_j; a
    # neuron that is not gated has a zero wu column and bu = 1. None: no neuron is gated.
    wu: Matrix | None = None  # (d, N)
    bu: np.ndarray | None = None  # (N,)
    # per head: its lookup (`lowering.index_heads.HeadPlan`: position read, newest key match,
    # or attention); empty: every head attends.
    head_plans: tuple = ()

    @property
    def dtype(self) -> np.dtype:
        """What the weights are stored in: float32, or float64 for a float64 model."""
        return self.bo.dtype

    @property
    def plain_mlp(self) -> bool:
        """Every neuron relu and none gated: the stock relu MLP."""
        return self.wu is None and not self.swish.any()

    @property
    def n_heads(self) -> int:
        return self.wq.shape[1] // self.d_head

    def head_rope(self) -> np.ndarray:
        """(n_heads, 2) float64: per head (base, dims), (0, 0) without rotation."""
        out = np.zeros((self.n_heads, 2))
        k = min(len(self.rope_heads), self.n_heads)
        out[:k] = self.rope_heads[:k]
        return out

    def head_is_full(self) -> np.ndarray:
        """(n_heads,) bool: the full-mask heads."""
        out = np.zeros(self.n_heads, bool)
        out[: len(self.full_heads)] = self.full_heads[: self.n_heads]
        return out

    @property
    def n_neurons(self) -> int:
        return self.w1.shape[1]


class Coo:
    """Coordinate lists for one matrix, summed into a dense array at the end."""

    def __init__(self):
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []

    def add(self, rows, cols, vals) -> None:
        rows, cols, vals = np.broadcast_arrays(np.asarray(rows, np.int64),
                                               np.asarray(cols, np.int64),
                                               np.asarray(vals, np.float64))
        self.r.append(rows.ravel())
        self.c.append(cols.ravel())
        self.v.append(vals.ravel())

    def matrix(self, shape, dtype=np.float32) -> Matrix:
        """Sum duplicate coordinates (in float64, in a fixed order) and drop zeros; the sums
        are stored in `dtype` (a float64 model keeps them as summed, a float32 one rounds)."""
        if not self.r:
            e = np.zeros(0, np.int64)
            return Matrix(shape, e, e, np.zeros(0, dtype))
        r, c, v = np.concatenate(self.r), np.concatenate(self.c), np.concatenate(self.v)
        key = r * shape[1] + c
        order = np.argsort(key, kind="stable")
        key, v = key[order], v[order]
        start = np.flatnonzero(np.diff(key, prepend=-1))  # first of each run (key is sorted)
        uniq = key[start]
        # (no duplicates, the common case: the sums are the values, no reduceat pass needed)
        sums = np.add.reduceat(v, start) if 0 < len(start) < len(v) else v
        keep = sums != 0
        uniq = uniq[keep]
        return Matrix(shape, uniq // shape[1], uniq % shape[1], sums[keep].astype(dtype))


def heads_needed(whole: int, pooled_dims: int, d_head: int) -> int:
    """Heads a sublayer uses: the whole heads of attn ops plus those its position-local head
    work (linears, adds, cancels: one value dim each) packs into, d_head dims to a head. The
    scheduler plans by it and the writer lays heads out by it."""
    return whole + math.ceil(pooled_dims / d_head)


class LayerBuilder:
    """Coordinates of one layer: whole heads for attn ops, pooled head work, MLP neurons."""

    def __init__(self, machine: Machine):
        self.m = machine
        self.q, self.k, self.v, self.o = Coo(), Coo(), Coo(), Coo()
        self.bo = np.zeros(machine.d)
        self.w1, self.w2 = Coo(), Coo()
        self.b1: list[np.ndarray] = []
        self.b2 = np.zeros(machine.d)
        self.heads = 0  # whole heads taken by attn ops
        self.full: list[bool] = []  # per whole head: its mask is full
        self.rope: list[tuple[float, int]] = []  # per whole head: (base, dims), (0, 0): none
        self.plans: list = []  # per whole head: its HeadPlan (lowering/index_heads.py)
        self.pool: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # head work
        self.neurons = 0
        self.swish: list[np.ndarray] = []  # per neuron block: swish activations
        self.wu = Coo()  # the gated neurons' up projections
        self.bu: list[np.ndarray] = []  # per neuron block: up bias (1 where not gated)
        self.gated = False

    # -- MLP --------------------------------------------------------------------------
    def take_neurons(self, n: int, bias=None, activation: str = "relu",
                     up_bias=None, gated: bool = False) -> int:
        """n neurons (relu or swish); gated ones multiply by an up projection whose matrix the
        writer adds to `wu` and whose bias is `up_bias` (zero where None)."""
        start = self.neurons
        self.neurons += n
        self.b1.append(np.zeros(n) if bias is None else np.asarray(bias, np.float64))
        self.swish.append(np.full(n, activation == "swish"))
        if gated:
            self.gated = True
            self.bu.append(np.zeros(n) if up_bias is None else np.asarray(up_bias, np.float64))
        else:
            self.bu.append(np.ones(n))
        return start

    # -- attention -------------------------------------------------------------------
    def take_heads(self, n: int, mask: str = "causal",
                   rope: tuple[float, int] | None = None, plan=None) -> int:
        """n whole heads for an attn op with mask kind `mask` ("causal" or "full"), rotary
        embedding `rope` ((base, dims), None: none) and lookup `plan` (a HeadPlan, None:
        attention)."""
        from tw_lowering.index_heads import SCAN

        start = self.heads
        self.heads += n
        self.full.extend([mask == "full"] * n)
        self.rope.extend([rope or (0.0, 0)] * n)
        self.plans.extend([plan or SCAN] * n)
        return start

    @property
    def heads_used(self) -> int:
        return heads_needed(self.heads, sum(len(p[0]) for p in self.pool), self.m.d_head)

    def finish(self, dtype=np.float32) -> LayerWeights:
        """The layer's trimmed weights: coordinates summed in float64, then stored in `dtype`
        (np.float32, or np.float64 for a float64 model: the sums themselves, unrounded)."""
        from tw_lowering.index_heads import self_plan

        m = self.m
        dh = m.d_head
        n_heads = self.heads_used
        # Self-attention heads for the pooled position-local work: q.k = G * j peaks at j = i
        # (under a causal mask, unrotated: these heads are causal and have no rotary
        # embedding whatever the attn ops' heads have).
        base = self.heads * dh
        p = 0
        for vr, vc_val, orow_dst, oval in self.pool:
            n = len(vr)
            dims = base + p + np.arange(n)
            # vr: (n, k) rows per dim; vc_val: (n, k) values; orow_dst: (n, j) cols; oval: (n, j)
            self.v.add(vr, dims[:, None], vc_val)
            self.o.add(dims[:, None], orow_dst, oval)
            p += n
        for h in range(self.heads, n_heads):
            self.q.add(m.CONST_COL, h * dh, m.self_attend_gain)
            self.k.add(m.POS_COL, h * dh, 1.0)
        H = n_heads * dh
        return LayerWeights(
            wq=self.q.matrix((m.d, H), dtype), wk=self.k.matrix((m.d, H), dtype),
            wv=self.v.matrix((m.d, H), dtype), wo=self.o.matrix((H, m.d), dtype),
            bo=self.bo.astype(dtype), w1=self.w1.matrix((m.d, self.neurons), dtype),
            b1=(np.concatenate(self.b1) if self.b1 else np.zeros(0)).astype(dtype),
            w2=self.w2.matrix((self.neurons, m.d), dtype), b2=self.b2.astype(dtype), d_head=dh,
            full_heads=np.array(self.full + [False] * (n_heads - self.heads), bool),
            rope_heads=np.array(self.rope + [(0.0, 0)] * (n_heads - self.heads),
                                np.float64).reshape(-1, 2),
            swish=np.concatenate(self.swish) if any(b.any() for b in self.swish)
            else np.zeros(0, bool),
            wu=self.wu.matrix((m.d, self.neurons), dtype) if self.gated else None,
            bu=np.concatenate(self.bu).astype(dtype) if self.gated else None,
            head_plans=tuple(self.plans) + (self_plan(m.self_attend_gain),) * (n_heads - self.heads))


def component_rows(machine: Machine, cols, refs: Refs) -> tuple[np.ndarray, np.ndarray]:
    """Residual row and multiplier of every component (`cols`: group id -> its columns)."""
    m = machine
    rows = np.empty(len(refs.group), np.int64)
    scale = np.ones(len(refs.group))
    for k, (g, i) in enumerate(zip(refs.group.tolist(), refs.idx.tolist())):
        if g == Refs.CONST:
            rows[k] = m.CONST_COL
            scale[k] = refs.const[k]
        elif g == POS_GROUP:
            rows[k] = m.POS_COL
        else:
            rows[k] = cols[g][i]
    return rows, scale


def combine(rows, scale, mat) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold components onto distinct residual rows: (support rows, support matrix, const term).

    Constant components (on the constant column) become a constant term; repeated rows sum."""
    const_mask = rows == Machine.CONST_COL
    const_term = (scale[const_mask, None] * mat[const_mask]).sum(axis=0)
    live = ~const_mask
    urows, inv = np.unique(rows[live], return_inverse=True)
    out = np.zeros((len(urows), mat.shape[1]))
    if len(urows) == len(inv):  # no row repeats: each row is 0 + its one term, as add.at gives
        out[inv] = scale[live, None] * mat[live] + 0.0
    else:
        np.add.at(out, inv, scale[live, None] * mat[live])
    return urows, out, const_term
