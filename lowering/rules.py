"""One home per op kind of the lowering: where a task runs, what it costs, how it is written.

The scheduler prices every task with `task_cost` and the weight writer writes it with
`write_task`; both read the same table (`RULES`), and each rule's cost is the count its
writer hands out (the writer checks the totals per layer against the schedule's plan, see
`lowering/materialize.py`; stats and placement attributes report the same prices). Where a
task may run (attention, MLP or either) is the graph-level placement table
`twdialect.analysis.PLACEMENT`, the one the critical-path floor reads.

Costs, with `support` = the distinct non-constant input components (repeated components and
literals cost nothing: literals ride on the machine's constant-1 column):

  attn          whole heads: ceil(value dims / d_head), value dims = min(Wv cols, value support,
                Wo cols) (the narrowest factorization of (v Wv) Wo), whatever the mask kind
                (the layer records each head's mask and rotary embedding, a rotary op's q/k at
                head dims 0..d_qk-1 so its rotation planes lie in each of its heads; pooled
                head work stays in causal, unrotated heads)
  mlp           its hidden width in neurons (a lane of any kind: relu, swish, gated)
  relu          one neuron per distinct non-constant input component
  linear, add   head work: min(support, outputs) value dims, pooled d_head to a head with the
                layer's other head work; or in the MLP as a bypass pair relu(z) - relu(-z):
                2 * min(support, outputs) neurons
  cancel        zeroes a dead group's columns: one value dim (V = I, O = -I) per column, or in
                the MLP two neurons per column (relu(x) - relu(-x)), one where the value
                ranges fix the column's sign
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tw_lowering.layer import LayerBuilder, combine, component_rows
from tw_lowering.machine import Machine
from tw_lowering.op_errors import add_error, attn_error, linear_error, mlp_error, relu_error
from tw_lowering.tasks import Refs, Task, TaskGraph
from twdialect.dense import shape_of, to_numpy
from tw_lowering.index_heads import plan_of
from twdialect.dialect import attn_rope
from twdialect.dialect import AddOp, AttnOp, LinearOp, MlpOp, ReluOp, attn_mask, mlp_activation


@dataclass(frozen=True)
class Cost:
    """What a task takes from its sublayer: whole heads, pooled head dims, or MLP neurons (an
    either-kind task prices both sublayers; the one it lands in takes its part)."""

    heads: int = 0  # attention: whole heads (attn ops)
    dims: int = 0  # attention: value dims of position-local head work (pooled)
    neurons: int = 0  # MLP sublayer

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.heads + other.heads, self.dims + other.dims,
                    self.neurons + other.neurons)

    def in_sublayer(self, attention: bool) -> Cost:
        """The part a placement in the attention (or the MLP) sublayer takes."""
        return Cost(heads=self.heads, dims=self.dims) if attention else Cost(neurons=self.neurons)


def support(refs: Refs) -> int:
    """Distinct non-constant components (each is one residual row)."""
    live = refs.group != Refs.CONST
    return len(set(zip(refs.group[live].tolist(), refs.idx[live].tolist())))


# --------------------------------------------------------------------------------------
# Costs
# --------------------------------------------------------------------------------------


def _attn_cost(tg: TaskGraph, t: Task, machine: Machine) -> Cost:
    op: AttnOp = t.op
    dims = min(shape_of(op.wv)[1], support(tg.refs[op.value]), shape_of(op.wo)[1])
    return Cost(heads=math.ceil(max(dims, 1) / machine.d_head))


def _mlp_cost(tg: TaskGraph, t: Task, machine: Machine) -> Cost:
    return Cost(neurons=shape_of(t.op.w1)[1])


def _relu_cost(tg: TaskGraph, t: Task, machine: Machine) -> Cost:
    return Cost(neurons=support(tg.in_refs(t)))


def _affine_cost(tg: TaskGraph, t: Task, machine: Machine) -> Cost:
    dims = min(support(tg.in_refs(t)), tg.groups[t.out_group].width)
    return Cost(dims=dims, neurons=2 * dims)


def cancel_cost(signs: np.ndarray, attention: bool) -> Cost:
    """`signs`: per column +1 (value >= 0), -1 (<= 0) or 0 (either), from the value ranges."""
    if attention:
        return Cost(dims=len(signs))
    return Cost(neurons=2 * len(signs) - int(np.count_nonzero(signs)))


# --------------------------------------------------------------------------------------
# Writers: (layer, machine, cols, tg, task, extra bias, attention?) -> None
# --------------------------------------------------------------------------------------


def _write_attn(layer: LayerBuilder, machine: Machine, cols, tg: TaskGraph, t: Task, extra_bias,
                attention: bool) -> None:
    op: AttnOp = t.op
    dh = machine.d_head
    wq, wk, wv, wo = (to_numpy(a) for a in (op.wq, op.wk, op.wv, op.wo))
    qr, qs = component_rows(machine, cols, tg.refs[op.query])
    kr, ks = component_rows(machine, cols, tg.refs[op.key])
    vr, vs = component_rows(machine, cols, tg.refs[op.value])
    out_cols = cols[t.out_group]
    # Value path (v Wv) Wo: pick the narrowest factorization V (rows x dims), O (dims x out).
    mv = wv @ wo
    urows, umv, const = combine(vr, vs, mv)
    dv, ns, nout = wv.shape[1], len(urows), wo.shape[1]
    dims = min(dv, ns, nout)
    if dims == ns:
        vmat, omat = np.eye(ns), umv
    elif dims == nout:
        vmat, omat = umv, np.eye(nout)
    else:
        urows, uwv, _ = combine(vr, vs, wv)
        vmat, omat = uwv, wo
    layer.bo[out_cols] += const  # softmax weights sum to 1: constant values pass unchanged
    if extra_bias is not None:
        layer.bo[out_cols] += extra_bias
    n_heads = max(1, math.ceil(dims / dh))
    h0 = layer.take_heads(n_heads, attn_mask(op), attn_rope(op),  # (q/k: head dims 0..d_qk-1)
                          plan_of(op, tg.index_cache, tg.graph))
    qrows, qmat, qconst = combine(qr, qs, wq)
    krows, kmat, kconst = combine(kr, ks, wk)
    dqk = wq.shape[1]
    for h in range(n_heads):
        base = (h0 + h) * dh
        hd = base + np.arange(dqk)
        if len(qrows):
            layer.q.add(qrows[:, None], hd[None, :], qmat)
        layer.q.add(machine.CONST_COL, hd, qconst)
        if len(krows):
            layer.k.add(krows[:, None], hd[None, :], kmat)
        layer.k.add(machine.CONST_COL, hd, kconst)
        chunk = slice(h * dh, min(dims, (h + 1) * dh))
        n = chunk.stop - chunk.start
        if n <= 0:
            continue
        cd = base + np.arange(n)
        if len(urows):
            layer.v.add(urows[:, None], cd[None, :], vmat[:, chunk])
        layer.o.add(cd[:, None], out_cols[None, :], omat[chunk, :])


def _write_mlp(layer: LayerBuilder, machine: Machine, cols, tg: TaskGraph, t: Task, extra_bias,
               attention: bool) -> None:
    op: MlpOp = t.op
    w1, w2 = to_numpy(op.w1), to_numpy(op.w2)
    b1 = to_numpy(op.b1) if op.b1 is not None else np.zeros(w1.shape[1])
    b2 = to_numpy(op.b2) if op.b2 is not None else np.zeros(w2.shape[1])
    rows, scale = component_rows(machine, cols, tg.in_refs(t))
    urows, uw1, const = combine(rows, scale, w1)
    h = w1.shape[1]
    gated = op.up is not None
    if gated:  # the up projection reads the same rows: its constant part joins its bias
        up = to_numpy(op.up)
        ub = to_numpy(op.ub) if op.ub is not None else np.zeros(h)
        urows_u, uwu, const_u = combine(rows, scale, up)
    start = layer.take_neurons(h, b1 + const, activation=mlp_activation(op),
                               up_bias=ub + const_u if gated else None, gated=gated)
    hid = start + np.arange(h)
    out_cols = cols[t.out_group]
    if len(urows):
        layer.w1.add(urows[:, None], hid[None, :], uw1)
    if gated and len(urows_u):
        layer.wu.add(urows_u[:, None], hid[None, :], uwu)
    layer.w2.add(hid[:, None], out_cols[None, :], w2)
    layer.b2[out_cols] += b2 if extra_bias is None else b2 + extra_bias


def _write_relu(layer: LayerBuilder, machine: Machine, cols, tg: TaskGraph, t: Task, extra_bias,
                attention: bool) -> None:
    """One neuron per distinct input row, fanned out to every output component reading it;
    constant components are relu'd at compile time into the output bias."""
    rows, scale = component_rows(machine, cols, tg.in_refs(t))
    out_cols = cols[t.out_group]
    n = len(rows)
    urows, fan, const = combine(rows, scale, np.eye(n))  # fan[j, k]: row j feeds component k
    bias = np.maximum(const, 0.0)
    if extra_bias is not None:
        bias = bias + extra_bias
    layer.b2[out_cols] += bias
    if len(urows):
        start = layer.take_neurons(len(urows))
        j, k = np.nonzero(fan)
        layer.w1.add(urows, start + np.arange(len(urows)), 1.0)
        layer.w2.add(start + j, out_cols[k], fan[j, k])


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


def _write_affine(layer: LayerBuilder, machine: Machine, cols, tg: TaskGraph, t: Task, extra_bias,
                  attention: bool) -> None:
    mat, bias = _affine(t)
    if extra_bias is not None:
        bias = bias + extra_bias
    rows, scale = component_rows(machine, cols, tg.in_refs(t))
    urows, umat, const = combine(rows, scale, mat)
    write = _write_affine_heads if attention else _write_affine_bypass
    write(layer, urows, umat, bias + const, cols[t.out_group])


def _write_affine_heads(layer: LayerBuilder, urows, umat, bias, out_cols) -> None:
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


def _write_affine_bypass(layer: LayerBuilder, urows, umat, bias, out_cols) -> None:
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


def write_cancel(layer: LayerBuilder, cols: np.ndarray, attention: bool,
                 signs: np.ndarray) -> None:
    """Subtract a dead group's columns from themselves (see `cancel_cost`): a head dim each
    (V = I, O = -I), or in the MLP x = relu(x) - relu(-x), keeping only the term that can be
    non-zero where the value ranges fix the sign."""
    n = len(cols)
    if attention:
        layer.pool.append((cols[:, None], np.ones((n, 1)), cols[:, None], -np.ones((n, 1))))
        return
    pos = cols[signs >= 0]  # relu(x): cancels x >= 0 (and half of an unsigned x)
    neg = cols[signs <= 0]  # relu(-x): cancels x <= 0
    start = layer.take_neurons(len(pos) + len(neg))
    layer.w1.add(pos, start + np.arange(len(pos)), 1.0)
    layer.w2.add(start + np.arange(len(pos)), pos, -1.0)
    start += len(pos)
    layer.w1.add(neg, start + np.arange(len(neg)), -1.0)
    layer.w2.add(start + np.arange(len(neg)), neg, 1.0)


# --------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One writer op kind as the lowering sees it: its price, its writer and the float32
    error it adds (`lowering/op_errors.py`, which `lowering/precision.py` propagates). Where
    it runs is the placement table the floor uses too (`twdialect.analysis.PLACEMENT`, read
    through `Task.kind`): the graph layer cannot import the lowering, and one table cannot
    disagree with itself. Every field is required: a new op kind is priced, written and
    bounded on purpose, never by a default."""

    cost: Callable[[TaskGraph, Task, Machine], Cost]
    write: Callable[..., None]
    error: Callable[..., float]


# One rule per op of `twdialect.analysis.WRITER_OPS` (tests/test_schedule.py checks that).
RULES: dict[type, Rule] = {
    AttnOp: Rule(_attn_cost, _write_attn, attn_error),
    MlpOp: Rule(_mlp_cost, _write_mlp, mlp_error),
    ReluOp: Rule(_relu_cost, _write_relu, relu_error),
    LinearOp: Rule(_affine_cost, _write_affine, linear_error),
    AddOp: Rule(_affine_cost, _write_affine, add_error),
}


def task_cost(tg: TaskGraph, t: Task, machine: Machine) -> Cost:
    """What task t takes from its sublayer: found once per task graph and head width (a cost
    reads the op, its references and d_head alone, none of which a width search changes)."""
    key = (t.tid, machine.d_head)
    cost = tg.costs.get(key)
    if cost is None:
        cost = tg.costs[key] = RULES[type(t.op)].cost(tg, t, machine)
    return cost


def write_task(layer: LayerBuilder, machine: Machine, cols, tg: TaskGraph, t: Task, extra_bias,
               attention: bool) -> None:
    RULES[type(t.op)].write(layer, machine, cols, tg, t, extra_bias, attention)
