"""The reference interpreter: the oracle that defines what every tw op means.

Values are float64 numpy arrays shaped (n_positions, width). Library ops are evaluated by
their *ideal* meaning (select picks exactly, compare is a hard step); `decompose` lowers them
to primitives under the contracts in `twdialect/contracts.py`.
"""

from __future__ import annotations

from twdialect.errors import TwError
from collections.abc import Mapping

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from twdialect.dense import to_numpy
from twdialect.dialect import (
    AddOp,
    AttnOp,
    ClampOp,
    CompareOp,
    ConcatOp,
    EmbeddingOp,
    GraphOp,
    InputOp,
    LinearOp,
    LiteralOp,
    MlpOp,
    OutputOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    PosEncodingOp,
    ReluOp,
    SelectOp,
    SliceOp,
    AfterOp,
    describe,
    width_of,
)


class EvaluationError(TwError):
    """Bad inputs for a graph (missing, wrong shape, out of vocabulary)."""


def find_graph(module: ModuleOp | GraphOp, graph: str = "main") -> GraphOp:
    if isinstance(module, GraphOp):
        return module
    graphs = [op for op in module.body.block.ops if isinstance(op, GraphOp)]
    for g in graphs:
        if g.sym_name.data == graph:
            return g
    if len(graphs) == 1 and graph == "main":
        return graphs[0]
    names = ", ".join("@" + g.sym_name.data for g in graphs) or "none"
    raise EvaluationError(f"no graph @{graph} in the module (graphs: {names})")


def position_features(n: int, width: int) -> np.ndarray:
    """The `tw.pos_encoding` table for positions 0..n-1: [i, i*i, sin/cos pairs]."""
    i = np.arange(n, dtype=np.float64)
    cols = [i]
    if width >= 2:
        cols.append(i * i)
    n_trig = width - 2
    for k in range(max(0, n_trig)):
        pair = k // 2
        freq = 1.0 / (10000.0 ** (2 * pair / max(1, n_trig)))
        cols.append(np.sin(i * freq) if k % 2 == 0 else np.cos(i * freq))
    return np.stack(cols[:width], axis=1)


def causal_attention(q, k, v, wq, wk, wv, wo) -> np.ndarray:
    logits = (q @ wq) @ (k @ wk).T
    n = logits.shape[0]
    logits = np.where(np.tri(n, dtype=bool), logits, -np.inf)
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    return p @ ((v @ wv) @ wo)


def pwl_1d(x: np.ndarray, bp: np.ndarray, values: np.ndarray) -> np.ndarray:
    """x (n,) -> (n, O): interpolation through (bp, values), constant outside."""
    return np.stack([np.interp(x, bp, values[:, j]) for j in range(values.shape[1])], axis=1)


def pwl_2d(x: np.ndarray, y: np.ndarray, xs, ys, table) -> np.ndarray:
    """Triangulated interpolation (cells split along their rising diagonal), inputs clamped."""
    x = np.clip(x, xs[0], xs[-1])
    y = np.clip(y, ys[0], ys[-1])
    i = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 2)
    j = np.clip(np.searchsorted(ys, y, side="right") - 1, 0, len(ys) - 2)
    u = ((x - xs[i]) / (xs[i + 1] - xs[i]))[:, None]
    v = ((y - ys[j]) / (ys[j + 1] - ys[j]))[:, None]
    t00, t10, t01, t11 = table[i, j], table[i + 1, j], table[i, j + 1], table[i + 1, j + 1]
    lower = t00 + u * (t10 - t00) + v * (t11 - t10)  # u >= v
    upper = t00 + v * (t01 - t00) + u * (t11 - t01)  # u < v
    return np.where(u >= v, lower, upper)


def _p(op: Operation, name: str) -> np.ndarray:
    return to_numpy(op.properties[name])


def _opt(op: Operation, name: str, n: int) -> np.ndarray:
    a = op.properties.get(name)
    return to_numpy(a) if a is not None else np.zeros(n)


def evaluate_op(op: Operation, args: list[np.ndarray], n: int, feeds: Mapping) -> np.ndarray:
    """The ideal value of one op given its operand values (each (n, width))."""
    match op:
        case LinearOp():
            m = _p(op, "weight")
            return args[0] @ m + _opt(op, "bias", m.shape[1])
        case AddOp():
            return args[0] + args[1]
        case ReluOp():
            return np.maximum(args[0], 0.0)
        case ConcatOp():
            return np.concatenate(args, axis=1)
        case SliceOp():
            start = op.start.value.data
            return args[0][:, start:start + width_of(op.out)]
        case AfterOp():
            return args[0]
        case LiteralOp():
            return np.broadcast_to(_p(op, "value"), (n, width_of(op.out))).copy()
        case MlpOp():
            w1, w2 = _p(op, "w1"), _p(op, "w2")
            h = np.maximum(args[0] @ w1 + _opt(op, "b1", w1.shape[1]), 0.0)
            return h @ w2 + _opt(op, "b2", w2.shape[1])
        case AttnOp():
            return causal_attention(*args, _p(op, "wq"), _p(op, "wk"), _p(op, "wv"), _p(op, "wo"))
        case CompareOp():
            return np.where(args[0] >= op.threshold.value.data, 1.0, -1.0)
        case SelectOp():
            return np.where(args[0] > 0, args[1], args[2])
        case ClampOp():
            return np.clip(args[0], op.lo.value.data, op.hi.value.data)
        case PiecewiseLinearOp():
            return pwl_1d(args[0][:, 0], _p(op, "breakpoints"), _p(op, "values"))
        case PiecewiseLinear2dOp():
            return pwl_2d(args[0][:, 0], args[1][:, 0], _p(op, "xs"), _p(op, "ys"), _p(op, "table"))
        case InputOp() | EmbeddingOp():
            return feeds[op.input_name.data]
        case PosEncodingOp():
            return position_features(n, width_of(op.out))
    raise EvaluationError(f"{describe(op)}: the interpreter has no meaning for this op")


def _check_inputs(graph: GraphOp, inputs: Mapping[str, np.ndarray], n_positions: int | None):
    feeds: dict[str, np.ndarray] = {}
    n = n_positions
    for op in graph.block.ops:
        if isinstance(op, InputOp):
            name = op.input_name.data
            if name not in inputs:
                raise EvaluationError(f"missing input \"{name}\"")
            a = np.asarray(inputs[name], dtype=np.float64)
            w = width_of(op.out)
            if a.ndim == 1 and w == 1:
                a = a[:, None]
            if a.ndim != 2 or a.shape[1] != w:
                raise EvaluationError(f"input \"{name}\" must be shaped (n_positions, {w}), "
                                      f"got {a.shape}")
            if op.integer is not None and not np.all(a == np.round(a)):
                raise EvaluationError(f"input \"{name}\" is declared integer but holds "
                                      "non-integer values")
            feeds[name] = a
        elif isinstance(op, EmbeddingOp):
            name = op.input_name.data
            if name not in inputs:
                raise EvaluationError(f"missing token input \"{name}\"")
            ids = np.asarray(inputs[name]).reshape(-1)
            table = _p(op, "table")
            if ids.size and (not np.all(ids == np.round(ids)) or ids.min() < 0
                             or ids.max() >= table.shape[0]):
                raise EvaluationError(f"token input \"{name}\" must hold integer ids in "
                                      f"[0, {table.shape[0]})")
            feeds[name] = table[ids.astype(np.int64)]
        else:
            continue
        m = feeds[name].shape[0]
        if n is None:
            n = m
        elif m != n:
            raise EvaluationError(f"input \"{name}\" has {m} positions, expected {n}")
    if n is None:
        raise EvaluationError("the graph has no inputs: pass n_positions")
    return feeds, n


def evaluate_values(module, inputs: Mapping[str, np.ndarray], graph: str = "main",
                    n_positions: int | None = None) -> dict[SSAValue, np.ndarray]:
    """Every SSA value of the graph (the probe compares compiled values against these)."""
    g = find_graph(module, graph)
    feeds, n = _check_inputs(g, inputs, n_positions)
    values: dict[SSAValue, np.ndarray] = {}
    for op in g.block.ops:
        if isinstance(op, OutputOp):
            continue
        result = evaluate_op(op, [values[v] for v in op.operands], n, feeds)
        values[op.results[0]] = result
    return values


def evaluate(module, inputs: Mapping[str, np.ndarray], graph: str = "main",
             n_positions: int | None = None) -> dict[str, np.ndarray]:
    """Run graph `graph` of `module` on `inputs` ({name: (n_positions, width)}; token inputs
    take integer ids shaped (n_positions,)). Returns {output name: (n_positions, width)}."""
    g = find_graph(module, graph)
    feeds, n = _check_inputs(g, inputs, n_positions)
    values: dict[SSAValue, np.ndarray] = {}
    outputs: dict[str, np.ndarray] = {}
    for op in g.block.ops:
        if isinstance(op, OutputOp):
            outputs[op.output_name.data] = values[op.value]
            continue
        values[op.results[0]] = evaluate_op(op, [values[v] for v in op.operands], n, feeds)
    return outputs


def generate(module, inputs: Mapping[str, np.ndarray], steps: int, feedback,
             graph: str = "main") -> dict[str, np.ndarray]:
    """Autoregressive oracle: after the prompt `inputs`, `steps` times feed
    `feedback(last_outputs) -> next inputs` (each output/input one position: (width,) arrays,
    token inputs a scalar id) as a new position. Returns the outputs at every position."""
    feeds = {k: np.asarray(v) for k, v in inputs.items()}
    outputs = evaluate(module, feeds, graph)
    for _ in range(steps):
        nxt = feedback({k: v[-1] for k, v in outputs.items()})
        for k, v in nxt.items():
            cur = feeds[k]
            row = np.asarray(v).reshape((1,) + cur.shape[1:])
            feeds[k] = np.concatenate([cur, row.astype(cur.dtype)], axis=0)
        outputs = evaluate(module, feeds, graph)
    return outputs
