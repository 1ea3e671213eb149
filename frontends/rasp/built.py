"""Questions about ops already built: the linear op that made a value (`_through_linear`),
whether a live op reads a value (`_is_read`), how many ops nothing live reads (`_unread`) and
their erasure once the translation stands (`_prune`),
whether reading through a linear would keep a wider value in the residual
(`_wider_only_for`); several reads summed as one (`_summed`)."""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation

from twdialect import ops as tw
from twdialect.dense import to_numpy
from twdialect.dialect import EmbeddingOp, LinearOp, MlpOp, OutputOp, width_of

from tw_frontends.rasp.nodes import Value


def _is_read(v: Value) -> bool:
    """Whether an op that the graph's outputs depend on reads v (no: v's op was erased)."""
    graph = v.owner.parent_block()
    if graph is None:
        return False
    live = _live(graph)
    return any(use.operation in live for use in v.uses)


def _unread(graph) -> int:
    """How many ops of a finished translation's graph its outputs do not depend on (the token
    embedding's and the position table's unused slices included)."""
    live = _live(graph)
    return sum(op not in live for op in graph.ops)


def _prune(block) -> None:
    """Erase from a finished translation's graph (its block) the ops its outputs do not
    depend on, the token embedding kept (its feed names it): the module a user reads, runs
    or passes on computes what the model does, nothing beside it."""
    live = _live(block)
    for op in reversed(list(block.ops)):
        if op not in live and not isinstance(op, EmbeddingOp):
            block.erase_op(op)


def _live(graph) -> set:
    """The ops a graph's outputs depend on."""
    live, stack = set(), [op for op in graph.ops if isinstance(op, OutputOp)]
    while stack:
        op = stack.pop()
        if op not in live:
            live.add(op)
            stack.extend(o.owner for o in op.operands if isinstance(o.owner, Operation))
    return live


def _wider_only_for(x: Value, v: Value) -> bool:
    """Whether x, the input of the `tw.linear` that made v, is an MLP's output that only
    linears read, all of them together narrower than x (a joint one-hot of value pairs,
    tabled): a head reading x through the linear would keep all of x in the residual where
    their columns suffice (a rotation's `(i + 1) % length` at length 20: 400 pairs against
    20 values, d 447 -> 45)."""
    if x is v or not isinstance(x.owner, MlpOp):
        return False
    readers = [use.operation for use in x.uses]
    return all(isinstance(op, LinearOp) for op in readers) and \
        sum(width_of(op.results[0]) for op in readers) < width_of(x)


def _through_linear(v: Value) -> tuple[Value, np.ndarray, np.ndarray]:
    """(x, M, b) with v = x M + b: a `tw.linear`'s operand and weights, else (v, I, 0)."""
    op = v.owner
    if isinstance(op, LinearOp):
        m = to_numpy(op.weight, np.float64)
        b = to_numpy(op.bias, np.float64) if op.bias is not None else np.zeros(m.shape[1])
        return op.x, m, b
    n = width_of(v)
    return v, np.eye(n), np.zeros(n)


def _summed(reads: list) -> tuple:
    """One (x, W, bias, at_bos) read of several `_read`s whose sum a head takes: their
    values side by side (one a value read twice), matrices stacked, biases summed."""
    xs, ws = [], []
    for x, w, _, _ in reads:
        same = next((i for i, y in enumerate(xs) if y is x), None)
        if same is None:
            xs.append(x)
            ws.append(w)
        else:
            ws[same] = ws[same] + w
    x = xs[0] if len(xs) == 1 else tw.concat(*xs)
    return x, np.vstack(ws), sum(r[2] for r in reads), sum(r[3] for r in reads)
