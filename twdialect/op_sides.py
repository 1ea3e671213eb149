"""An op's input side as matrices, and a copy of the op reading another input through new
ones: what every rewrite that folds a linear map into a `tw.linear` or `tw.mlp` reads and
builds (`fuse_linears`' folds, the canonicalization patterns). A gated mlp's up projection reads
the input too, so a fold applies to each side (`input_sides`); every rebuilt matrix records its
rounding (`twdialect.rounding`)."""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue

from twdialect.dense import to_numpy
from twdialect.dialect import ConcatOp, LinearOp, MlpOp, mlp_like
from twdialect.rounding import record as record_rounding


def vector_of(op: Operation, name: str, n: int) -> np.ndarray:
    """The op's property `name` as a flat vector, zeros of width n where it is absent."""
    attr = op.properties.get(name)
    return to_numpy(attr).reshape(-1) if attr is not None else np.zeros(n)


def input_side(op: LinearOp | MlpOp) -> tuple[np.ndarray, np.ndarray, bool]:
    """(matrix applied to the op's input, its bias, whether that bias is present)."""
    key_w, key_b = ("weight", "bias") if isinstance(op, LinearOp) else ("w1", "b1")
    w = to_numpy(op.properties[key_w])
    return w, vector_of(op, key_b, w.shape[1]), op.properties.get(key_b) is not None


def input_sides(op: LinearOp | MlpOp) -> list[tuple[np.ndarray, np.ndarray, bool]]:
    """Every (matrix, bias, has_bias) applied to the op's input: the input side, and for a
    gated mlp its up projection (up, ub) too. A fold into the input applies to each."""
    sides = [input_side(op)]
    if isinstance(op, MlpOp) and op.is_gated:
        wu = to_numpy(op.up)
        sides.append((wu, vector_of(op, "ub", wu.shape[1]), op.ub is not None))
    return sides


def with_input_sides(op: LinearOp | MlpOp, x: SSAValue,
                     sides: list[tuple[np.ndarray, np.ndarray, bool]]) -> Operation:
    """A copy of `op` reading `x` through the given sides (as `input_sides` lists them): an
    mlp keeps its activation, and a gated one takes its new up projection from sides[1]."""
    w, b, has_bias = sides[0]
    bias = b if has_bias else None
    if isinstance(op, LinearOp):
        new = LinearOp(x, w, bias)
    else:
        up = up_bias = None
        if op.is_gated:
            up, ub, has_ub = sides[1]
            up_bias = ub if has_ub else None
        new = mlp_like(op, x, w, op.w2, b1=bias, b2=op.b2, up=up, up_bias=up_bias)
        if up is not None:
            record_rounding(new, "up", up, up_bias)
    new.attributes.update(op.attributes)
    record_rounding(new, "in", w, bias)
    return new


def concat_like(values: list[SSAValue], like: Operation) -> tuple[list[Operation], SSAValue]:
    """The concat of `values` with `like`'s attributes (no op for a single value): the ops to
    insert and the value to read."""
    if len(values) == 1:
        return [], values[0]
    c = ConcatOp(values)
    c.attributes.update(like.attributes)
    return [c], c.out
