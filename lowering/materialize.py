"""The weight writer: a Schedule becomes per-layer weight arrays, sized to what each layer uses.

Every task writes a few rows/columns of its layer's matrices (collected as coordinate lists,
then summed into dense arrays once per layer). Component references resolve to residual rows:
a group's columns, the position column, or the constant-1 column scaled by a literal value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lowering.machine import Machine
from lowering.schedule import Schedule
from lowering.tasks import POS_GROUP, Refs, Task
from twdialect.dense import to_numpy
from twdialect.dialect import AddOp, AttnOp, LinearOp, MlpOp, ReluOp
from twdialect.interp import position_features


@dataclass
class Matrix:
    """A weight matrix as summed coordinates (rows, cols, vals) of a given shape.

    Kept sparse: compiled layers are mostly zeros (a self-attention head's Q has one entry);
    `dense()` gives the (float32) array for exports and small models."""

    shape: tuple[int, int]
    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray  # float32, duplicates already summed

    @property
    def nnz(self) -> int:
        return len(self.vals)

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape, np.float32)
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

    @property
    def n_heads(self) -> int:
        return self.wq.shape[1] // self.d_head

    @property
    def n_neurons(self) -> int:
        return self.w1.shape[1]


@dataclass
class SourceSlot:
    kind: str  # "input", "embedding" or "pos"
    name: str
    cols: np.ndarray
    table: np.ndarray | None = None  # embedding table
    pos_width: int = 0  # full pos_encoding width (its first component is the machine column)


@dataclass
class OutputSlot:
    name: str
    rows: np.ndarray  # residual column per component (the constant column for literals)
    scale: np.ndarray  # multiplier per component (1, or the literal's value)


class _Coo:
    """Coordinate lists for one matrix, summed into a dense array at the end."""

    def __init__(self):
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []

    def add(self, rows, cols, vals) -> None:
        rows, cols, vals = np.asarray(rows, np.int64), np.asarray(cols, np.int64), np.asarray(vals)
        shape = np.broadcast_shapes(rows.shape, cols.shape, vals.shape)
        self.r.append(np.broadcast_to(rows, shape).ravel())
        self.c.append(np.broadcast_to(cols, shape).ravel())
        self.v.append(np.broadcast_to(vals.astype(np.float64, copy=False), shape).ravel())

    def matrix(self, shape) -> Matrix:
        """Sum duplicate coordinates (in float64, in a fixed order) and drop zeros."""
        if not self.r:
            e = np.zeros(0, np.int64)
            return Matrix(shape, e, e, np.zeros(0, np.float32))
        r, c, v = np.concatenate(self.r), np.concatenate(self.c), np.concatenate(self.v)
        key = r * shape[1] + c
        order = np.argsort(key, kind="stable")
        key, v = key[order], v[order]
        uniq, start = np.unique(key, return_index=True)
        sums = np.add.reduceat(v, start) if len(v) else v
        keep = sums != 0
        uniq = uniq[keep]
        return Matrix(shape, uniq // shape[1], uniq % shape[1], sums[keep].astype(np.float32))


class _Layer:
    def __init__(self, machine: Machine):
        self.m = machine
        self.q, self.k, self.v, self.o = _Coo(), _Coo(), _Coo(), _Coo()
        self.bo = np.zeros(machine.d)
        self.w1, self.w2 = _Coo(), _Coo()
        self.b1: list[np.ndarray] = []
        self.b2 = np.zeros(machine.d)
        self.heads = 0  # whole heads taken by attn ops
        self.pool: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # head work
        self.neurons = 0

    # -- MLP --------------------------------------------------------------------------
    def take_neurons(self, n: int, bias=None) -> int:
        start = self.neurons
        self.neurons += n
        self.b1.append(np.zeros(n) if bias is None else np.asarray(bias, np.float64))
        return start

    # -- attention -------------------------------------------------------------------
    def take_heads(self, n: int) -> int:
        start = self.heads
        self.heads += n
        return start

    def finish(self) -> LayerWeights:
        m = self.m
        dh = m.d_head
        pool_dims = sum(len(p[0]) for p in self.pool)
        n_heads = self.heads + math.ceil(pool_dims / dh)
        # Self-attention heads for the pooled position-local work: q.k = G * j peaks at j = i.
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
            wq=self.q.matrix((m.d, H)), wk=self.k.matrix((m.d, H)), wv=self.v.matrix((m.d, H)),
            wo=self.o.matrix((H, m.d)), bo=self.bo.astype(np.float32),
            w1=self.w1.matrix((m.d, self.neurons)),
            b1=(np.concatenate(self.b1) if self.b1 else np.zeros(0)).astype(np.float32),
            w2=self.w2.matrix((self.neurons, m.d)), b2=self.b2.astype(np.float32), d_head=dh)


def _rows(sched: Schedule, refs: Refs) -> tuple[np.ndarray, np.ndarray]:
    """Residual row and multiplier of every component."""
    m = sched.machine
    rows = np.empty(len(refs.group), np.int64)
    scale = np.ones(len(refs.group))
    for k, (g, i) in enumerate(zip(refs.group.tolist(), refs.idx.tolist())):
        if g == Refs.CONST:
            rows[k] = m.CONST_COL
            scale[k] = refs.const[k]
        elif g == POS_GROUP:
            rows[k] = m.POS_COL
        else:
            rows[k] = sched.cols[g][i]
    return rows, scale


def _combine(rows, scale, mat) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold components onto distinct residual rows: (support rows, support matrix, const term).

    Constant components (on the constant column) become a constant term; repeated rows sum."""
    const_mask = rows == Machine.CONST_COL
    const_term = (scale[const_mask, None] * mat[const_mask]).sum(axis=0)
    live = ~const_mask
    urows, inv = np.unique(rows[live], return_inverse=True)
    out = np.zeros((len(urows), mat.shape[1]))
    np.add.at(out, inv, scale[live, None] * mat[live])
    return urows, out, const_term


def _affine(t: Task) -> tuple[np.ndarray, np.ndarray]:
    """The task's map from its operands' components to its output (matrix, bias)."""
    op = t.op
    if isinstance(op, LinearOp):
        m = to_numpy(op.weight)
        b = to_numpy(op.bias) if op.bias is not None else np.zeros(m.shape[1])
        return m, b
    assert isinstance(op, AddOp)
    w = op.out.type.width.data
    # An add into a dying addend copies only the other addend (its task reads one operand).
    return np.vstack([np.eye(w)] * len(t.operands)), np.zeros(w)


def materialize(sched: Schedule) -> tuple[list[LayerWeights], list[SourceSlot], list[OutputSlot]]:
    m = sched.machine
    tg = sched.tg
    layers = [_Layer(m) for _ in range(sched.n_layers)]
    # The group's literal addends ride on the bias of its first-placed writer.
    first_writer: dict[int, int] = {}
    for t in tg.tasks:
        if sched.slot[t.tid] >= 0:
            g = t.out_group
            cur = first_writer.get(g)
            if cur is None or (sched.slot[t.tid], t.tid) < (sched.slot[cur], cur):
                first_writer[g] = t.tid
    by_slot = sorted((s, t.index, t.tid) for t in tg.tasks if (s := sched.slot[t.tid]) >= 0)
    # Attn ops take whole heads first in each layer, then pooled head work packs after them.
    def extra_bias(t: Task):
        grp = tg.groups[t.out_group]
        return grp.bias if grp.bias is not None and first_writer[t.out_group] == t.tid else None

    for s, _, tid in by_slot:
        t = tg.tasks[tid]
        if isinstance(t.op, AttnOp):
            _write_attn(sched, layers[s // 2], t, extra_bias(t))
    for s, _, tid in by_slot:
        t = tg.tasks[tid]
        if isinstance(t.op, AttnOp):
            continue
        layer = layers[s // 2]
        out_cols = sched.cols[t.out_group]
        if isinstance(t.op, MlpOp):
            _write_mlp(sched, layer, t, out_cols, extra_bias(t))
        elif isinstance(t.op, ReluOp):
            _write_relu(sched, layer, t, out_cols, extra_bias(t))
        else:
            mat, bias = _affine(t)
            if (extra := extra_bias(t)) is not None:
                bias = bias + extra
            rows, scale = _rows(sched, tg.in_refs(t))
            urows, umat, const = _combine(rows, scale, mat)
            bias = bias + const
            if s % 2 == 0:
                _write_affine_heads(layer, urows, umat, bias, out_cols)
            else:
                _write_affine_bypass(layer, urows, umat, bias, out_cols)
    for s, g in sched.cancels:
        cols = sched.cols[g]
        layer = layers[s // 2]
        if s % 2 == 0:
            n = len(cols)
            layer.pool.append((cols[:, None], np.ones((n, 1)), cols[:, None], -np.ones((n, 1))))
        else:
            n = len(cols)
            start = layer.take_neurons(2 * n)
            idx = np.arange(n)
            layer.w1.add(cols, start + idx, 1.0)
            layer.w1.add(cols, start + n + idx, -1.0)
            layer.w2.add(start + idx, cols, -1.0)
            layer.w2.add(start + n + idx, cols, 1.0)
    weights = [layer.finish() for layer in layers]
    return weights, _sources(sched), _outputs(sched)


def _write_attn(sched: Schedule, layer: _Layer, t: Task, extra_bias) -> None:
    op: AttnOp = t.op
    tg = sched.tg
    dh = sched.machine.d_head
    wq, wk, wv, wo = (to_numpy(a) for a in (op.wq, op.wk, op.wv, op.wo))
    qr, qs = _rows(sched, tg.refs[op.query])
    kr, ks = _rows(sched, tg.refs[op.key])
    vr, vs = _rows(sched, tg.refs[op.value])
    out_cols = sched.cols[t.out_group]
    # Value path (v Wv) Wo: pick the narrowest factorization V (rows x dims), O (dims x out).
    mv = wv @ wo
    urows, umv, const = _combine(vr, vs, mv)
    dv, ns, nout = wv.shape[1], len(urows), wo.shape[1]
    dims = min(dv, ns, nout)
    if dims == ns:
        vmat, omat = np.eye(ns), umv
    elif dims == nout:
        vmat, omat = umv, np.eye(nout)
    else:
        urows, uwv, _ = _combine(vr, vs, wv)
        vmat, omat = uwv, wo
    layer.bo[out_cols] += const  # softmax weights sum to 1: constant values pass unchanged
    if extra_bias is not None:
        layer.bo[out_cols] += extra_bias
    n_heads = max(1, math.ceil(dims / dh))
    h0 = layer.take_heads(n_heads)
    qrows, qmat, qconst = _combine(qr, qs, wq)
    krows, kmat, kconst = _combine(kr, ks, wk)
    dqk = wq.shape[1]
    for h in range(n_heads):
        base = (h0 + h) * dh
        hd = base + np.arange(dqk)
        if len(qrows):
            layer.q.add(qrows[:, None], hd[None, :], qmat)
        layer.q.add(sched.machine.CONST_COL, hd, qconst)
        if len(krows):
            layer.k.add(krows[:, None], hd[None, :], kmat)
        layer.k.add(sched.machine.CONST_COL, hd, kconst)
        chunk = slice(h * dh, min(dims, (h + 1) * dh))
        n = chunk.stop - chunk.start
        if n <= 0:
            continue
        cd = base + np.arange(n)
        if len(urows):
            layer.v.add(urows[:, None], cd[None, :], vmat[:, chunk])
        layer.o.add(cd[:, None], out_cols[None, :], omat[chunk, :])


def _write_affine_heads(layer: _Layer, urows, umat, bias, out_cols) -> None:
    layer.bo[out_cols] += bias
    ns, nout = umat.shape
    if ns == 0:
        return
    if ns <= nout:  # V copies the inputs, O applies the matrix
        layer.pool.append((urows[:, None], np.ones((ns, 1)),
                           np.broadcast_to(out_cols, (ns, nout)), umat))
    else:  # V applies the matrix, O scatters to the outputs
        layer.pool.append((np.broadcast_to(urows, (nout, ns)), umat.T,
                           out_cols[:, None], np.ones((nout, 1))))


def _write_affine_bypass(layer: _Layer, urows, umat, bias, out_cols) -> None:
    ns, nout = umat.shape
    if ns == 0:
        layer.b2[out_cols] += bias
        return
    if ns <= nout:  # hidden = +-inputs; relu(x) - relu(-x) = x
        start = layer.take_neurons(2 * ns)
        idx = np.arange(ns)
        layer.w1.add(urows, start + idx, 1.0)
        layer.w1.add(urows, start + ns + idx, -1.0)
        layer.w2.add((start + idx)[:, None], out_cols[None, :], umat)
        layer.w2.add((start + ns + idx)[:, None], out_cols[None, :], -umat)
        layer.b2[out_cols] += bias
    else:  # hidden = +-(x M + b)
        start = layer.take_neurons(2 * nout, np.concatenate([bias, -bias]))
        j = np.arange(nout)
        layer.w1.add(urows[:, None], (start + j)[None, :], umat)
        layer.w1.add(urows[:, None], (start + nout + j)[None, :], -umat)
        layer.w2.add(start + j, out_cols, 1.0)
        layer.w2.add(start + nout + j, out_cols, -1.0)


def _write_mlp(sched: Schedule, layer: _Layer, t: Task, out_cols, extra_bias) -> None:
    op: MlpOp = t.op
    w1, w2 = to_numpy(op.w1), to_numpy(op.w2)
    b1 = to_numpy(op.b1) if op.b1 is not None else np.zeros(w1.shape[1])
    b2 = to_numpy(op.b2) if op.b2 is not None else np.zeros(w2.shape[1])
    rows, scale = _rows(sched, sched.tg.in_refs(t))
    urows, uw1, const = _combine(rows, scale, w1)
    h = w1.shape[1]
    start = layer.take_neurons(h, b1 + const)
    hid = start + np.arange(h)
    if len(urows):
        layer.w1.add(urows[:, None], hid[None, :], uw1)
    layer.w2.add(hid[:, None], out_cols[None, :], w2)
    layer.b2[out_cols] += b2 if extra_bias is None else b2 + extra_bias


def _write_relu(sched: Schedule, layer: _Layer, t: Task, out_cols, extra_bias) -> None:
    rows, scale = _rows(sched, sched.tg.in_refs(t))
    const = rows == sched.machine.CONST_COL
    bias = np.where(const, np.maximum(scale, 0.0), 0.0)
    if extra_bias is not None:
        bias = bias + extra_bias
    layer.b2[out_cols] += bias
    live = np.nonzero(~const)[0]
    if len(live):
        start = layer.take_neurons(len(live))
        hid = start + np.arange(len(live))
        layer.w1.add(rows[live], hid, scale[live])
        layer.w2.add(hid, out_cols[live], 1.0)


def _sources(sched: Schedule) -> list[SourceSlot]:
    from twdialect.dialect import EmbeddingOp, InputOp

    out = []
    for g in sched.tg.sources:
        grp = sched.tg.groups[g]
        op = grp.source
        if isinstance(op, InputOp):
            out.append(SourceSlot("input", op.input_name.data, sched.cols[g]))
        elif isinstance(op, EmbeddingOp):
            out.append(SourceSlot("embedding", op.input_name.data, sched.cols[g],
                                  table=to_numpy(op.table, np.float32)))
        else:
            out.append(SourceSlot("pos", "", sched.cols[g], pos_width=grp.width + 1))
    return out


def _outputs(sched: Schedule) -> list[OutputSlot]:
    out = []
    for name, v in sched.tg.outputs:
        rows, scale = _rows(sched, sched.tg.refs[v])
        out.append(OutputSlot(name, rows, scale))
    return out


def position_rows(start: int, n: int, width: int) -> np.ndarray:
    """pos_encoding features for absolute positions start..start+n-1 (all columns)."""
    return position_features(start + n, width)[start:]
